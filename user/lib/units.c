// SPDX-License-Identifier: MIT
/*
 * Scalar forms of the configuration: counts, durations, prefixes, ports.
 * Every number is read as an exact decimal (integer part, fraction digits)
 * and scaled with overflow checks, so "2.5k" is 2500 and never 2499.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/units.h"

/* Significant fraction digits kept: 10^18 still fits in 64 bits and the
 * largest multiplier (60 * 10^9 for minutes) keeps frac * mult in 128 bits.
 */
#define UNITS_MAX_FRAC_DIGITS 18

#define NSEC_PER_MIN (60 * NSEC_PER_SEC)

struct units_suffix {
	const char *name;
	uint64_t mult;
};

/* Decimal k/M/G as in the reference (docs/reference.md §4): 1k = 1000, not 1024. */
static const struct units_suffix count_suffixes[] = {
    {"", 1}, {"k", 1000ULL}, {"M", 1000000ULL}, {"G", 1000000000ULL}, {NULL, 0},
};

/* No "" entry: a bare number is not a duration. Largest unit first for formatting. */
static const struct units_suffix duration_suffixes[] = {
    {"m", NSEC_PER_MIN},   {"s", NSEC_PER_SEC}, {"ms", NSEC_PER_MSEC},
    {"us", NSEC_PER_USEC}, {"ns", 1},		{NULL, 0},
};

/* An exact decimal: ip + frac / 10^fdig, trailing fraction zeros dropped. */
struct decimal {
	uint64_t ip;
	uint64_t frac;
	unsigned int fdig;
};

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Digits at s, up to the first non-digit; *end points past them even when
 * the value overflows, so that the caller can still check the form.
 */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
	bool overflow = false;
	uint64_t v = 0;
	const char *p;

	if (!is_digit(*s))
		return -EINVAL;
	for (p = s; is_digit(*p); p++) {
		overflow |= __builtin_mul_overflow(v, 10, &v);
		overflow |= __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v);
	}
	*end = p;
	*out = v;
	return overflow ? -ERANGE : 0;
}

int units_parse_uint(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;
	int rc;

	rc = parse_digits(s, &v, &end);
	if (rc == -EINVAL || *end)
		return -EINVAL;
	if (!rc)
		*out = v;
	return rc;
}

/* "[0-9]+(.[0-9]+)?" at s; -ERANGE (integer part too large) still sets *end. */
static int parse_decimal(const char *s, struct decimal *d, const char **end)
{
	const char *f, *last;
	int rc;

	rc = parse_digits(s, &d->ip, end);
	if (rc == -EINVAL)
		return rc;
	d->frac = 0;
	d->fdig = 0;
	if (**end != '.')
		return rc;
	f = *end + 1;
	if (!is_digit(*f))
		return -EINVAL;
	for (*end = f; is_digit(**end); (*end)++)
		;
	for (last = *end; last > f && last[-1] == '0'; last--)
		;
	if (last - f > UNITS_MAX_FRAC_DIGITS)
		return -EINVAL; /* cannot be a whole number with any of our multipliers */
	for (; f < last; f++, d->fdig++)
		d->frac = d->frac * 10 + (uint64_t)(*f - '0');
	return rc;
}

static unsigned __int128 pow10_u128(unsigned int n)
{
	unsigned __int128 v = 1;

	while (n--)
		v *= 10;
	return v;
}

/* d * mult, which must be a whole number that fits in 64 bits. */
static int decimal_scale(const struct decimal *d, uint64_t mult, uint64_t *out)
{
	unsigned __int128 f = (unsigned __int128)d->frac * mult;
	unsigned __int128 den = pow10_u128(d->fdig);
	uint64_t whole;

	if (f % den)
		return -EINVAL;
	if (__builtin_mul_overflow(d->ip, mult, &whole) ||
	    __builtin_add_overflow(whole, (uint64_t)(f / den), out))
		return -ERANGE;
	return 0;
}

static int parse_scaled(const char *s, const struct units_suffix *tab, uint64_t *out)
{
	struct decimal d;
	const char *end;
	int rc;

	rc = parse_decimal(s, &d, &end);
	for (; rc != -EINVAL && tab->name; tab++) {
		if (strcmp(end, tab->name))
			continue;
		/* A too-long integer part is only "too large" once the form is known good. */
		return rc ? rc : decimal_scale(&d, tab->mult, out);
	}
	return -EINVAL;
}

int units_parse_count(const char *s, uint64_t *out)
{
	return parse_scaled(s, count_suffixes, out);
}

int units_parse_duration(const char *s, uint64_t *out_ns)
{
	return parse_scaled(s, duration_suffixes, out_ns);
}

static int format_scaled(uint64_t v, const struct units_suffix *tab, char *buf, size_t size)
{
	const struct units_suffix *best = NULL;

	for (; tab->name; tab++) {
		if (v % tab->mult == 0 && (!best || tab->mult > best->mult))
			best = tab;
	}
	return snprintf(buf, size, "%" PRIu64 "%s", v / best->mult, best->name);
}

int units_format_count(uint64_t v, char *buf, size_t size)
{
	return format_scaled(v, count_suffixes, buf, size);
}

int units_format_duration(uint64_t ns, char *buf, size_t size)
{
	if (ns == 0)
		return snprintf(buf, size, "0s");
	return format_scaled(ns, duration_suffixes, buf, size);
}

void units_prefix_mask(uint8_t family, uint8_t addr[16], uint8_t plen)
{
	unsigned int len = family == 4 ? 4 : 16, i;

	for (i = 0; i < len; i++) {
		if (plen >= 8 * (i + 1))
			continue;
		addr[i] &= plen > 8 * i ? (uint8_t)(0xff << (8 - (plen - 8 * i))) : 0;
	}
}

int units_prefix_cmp(uint8_t fa, const uint8_t a[16], uint8_t pa, uint8_t fb, const uint8_t b[16],
		     uint8_t pb)
{
	int c;

	if (fa != fb)
		return fa < fb ? -1 : 1;
	c = memcmp(a, b, 16);
	if (c)
		return c;
	return pa < pb ? -1 : pa > pb;
}

uint32_t units_prefix_v6map(uint8_t family, const uint8_t addr[16], uint8_t plen, uint8_t out[16])
{
	memset(out, 0, 16);
	if (family == 4) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, addr, 4);
		return 96u + plen;
	}
	memcpy(out, addr, 16);
	return plen;
}

int units_parse_prefix(const char *s, uint8_t *family, uint8_t addr[16], uint8_t *plen)
{
	char buf[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	uint8_t a[16] = {0}, masked[16];
	uint64_t len, max;
	uint8_t fam;

	if (alen == 0 || alen >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	if (inet_pton(AF_INET, buf, a) == 1)
		fam = 4;
	else if (inet_pton(AF_INET6, buf, a) == 1)
		fam = 6;
	else
		return -EINVAL;
	max = fam == 4 ? 32 : 128;
	len = max;
	if (slash) {
		int rc = units_parse_uint(slash + 1, &len);

		if (rc)
			return rc;
	}
	if (len > max)
		return -ERANGE;
	*family = fam;
	*plen = (uint8_t)len;
	memcpy(addr, a, sizeof(a));
	memcpy(masked, a, sizeof(a));
	units_prefix_mask(fam, masked, *plen);
	return memcmp(masked, a, sizeof(a)) ? -EDOM : 0;
}

/* One port; a value that does not fit is -ERANGE, as for counts. */
static int parse_port(const char *s, const char **end, uint16_t *port)
{
	uint64_t v;
	int rc;

	rc = parse_digits(s, &v, end);
	if (rc)
		return rc;
	if (v > UINT16_MAX)
		return -ERANGE;
	*port = (uint16_t)v;
	return 0;
}

int units_parse_port_range(const char *s, uint16_t *lo, uint16_t *hi)
{
	const char *end;
	uint16_t a, b;
	int rc;

	rc = parse_port(s, &end, &a);
	if (rc)
		return rc;
	b = a;
	if (*end == '-') {
		rc = parse_port(end + 1, &end, &b);
		if (rc)
			return rc;
	}
	if (*end || a > b)
		return -EINVAL;
	*lo = a;
	*hi = b;
	return 0;
}
