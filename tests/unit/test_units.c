// SPDX-License-Identifier: MIT
/*
 * Scalar forms of the configuration (user/units.c): counts, durations,
 * prefixes and port ranges, as tables of (input, expected result). Overflow
 * must be -ERANGE and a fraction that is not a whole result must be refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/units.h"
#include "lib/util.h"

struct num_case {
	const char *in;
	int rc;
	uint64_t out;
};

static void check_numbers(const char *fn_name, int (*fn)(const char *, uint64_t *),
			  const struct num_case *cases, size_t n)
{
	uint64_t out;
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		out = 0xdeadbeef;
		rc = fn(cases[i].in, &out);
		if (rc != cases[i].rc)
			fail_msg("%s(\"%s\") returned %d, expected %d", fn_name, cases[i].in, rc,
				 cases[i].rc);
		if (!rc && out != cases[i].out)
			fail_msg("%s(\"%s\") gave %" PRIu64 ", expected %" PRIu64, fn_name,
				 cases[i].in, out, cases[i].out);
	}
}

static void test_count_forms(void **state)
{
	static const struct num_case cases[] = {
	    {"0", 0, 0},
	    {"1000", 0, 1000},
	    {"10k", 0, 10000},
	    {"2.5k", 0, 2500},
	    {"2.5M", 0, 2500000},
	    {"1G", 0, 1000000000},
	    {"1.5G", 0, 1500000000},
	    {"1.234k", 0, 1234},
	    {"0.001k", 0, 1},
	    {"1.0", 0, 1},
	    {"1.000000000000000000000000k", 0, 1000}, /* trailing zeros are not precision */
	    {"007", 0, 7},
	    {"18446744073709551615", 0, UINT64_MAX},
	};

	(void)state;
	check_numbers("units_parse_count", units_parse_count, cases, ARRAY_SIZE(cases));
}

static void test_count_refused(void **state)
{
	static const struct num_case cases[] = {
	    {"", -EINVAL, 0},	     {"2.5", -EINVAL, 0}, /* a fractional count */
	    {"1.2345k", -EINVAL, 0},			  /* 1234.5 */
	    {"0.0001k", -EINVAL, 0}, {"-1", -EINVAL, 0},  {"+1", -EINVAL, 0},	{"k", -EINVAL, 0},
	    {"10x", -EINVAL, 0},     {"10K", -EINVAL, 0}, /* decimal k only */
	    {"10m", -EINVAL, 0},			  /* milli is no count */
	    {"1 k", -EINVAL, 0},     {" 1", -EINVAL, 0},  {"1 ", -EINVAL, 0},	{"1.", -EINVAL, 0},
	    {".5k", -EINVAL, 0},     {"1e3", -EINVAL, 0}, {"0x10", -EINVAL, 0}, {"1kk", -EINVAL, 0},
	};

	(void)state;
	check_numbers("units_parse_count", units_parse_count, cases, ARRAY_SIZE(cases));
}

static void test_count_overflow(void **state)
{
	static const struct num_case cases[] = {
	    {"18446744073709551616", -ERANGE, 0},
	    {"99999999999999999999999", -ERANGE, 0},
	    {"18446744073709552k", -ERANGE, 0},
	    {"18446744074G", -ERANGE, 0},
	    {"18446744073.709551616G", -ERANGE, 0}, /* fraction pushes it over */
	    {"18446744073.709551615G", 0, UINT64_MAX},
	    {"99999999999999999999999x", -EINVAL, 0}, /* bad form wins over size */
	};

	(void)state;
	check_numbers("units_parse_count", units_parse_count, cases, ARRAY_SIZE(cases));
}

static void test_duration_forms(void **state)
{
	static const struct num_case cases[] = {
	    {"2s", 0, 2000000000ULL},
	    {"500ms", 0, 500000000ULL},
	    {"250us", 0, 250000ULL},
	    {"100ns", 0, 100ULL},
	    {"1m", 0, 60000000000ULL},
	    {"1.5s", 0, 1500000000ULL},
	    {"0.5ms", 0, 500000ULL},
	    {"0s", 0, 0},
	    {"2", -EINVAL, 0}, /* a bare number is refused */
	    {"s", -EINVAL, 0},
	    {"-1s", -EINVAL, 0},
	    {"1h", -EINVAL, 0},
	    {"1.5ns", -EINVAL, 0},
	    {"1ss", -EINVAL, 0},
	    {"1 s", -EINVAL, 0},
	    {"1S", -EINVAL, 0},
	    {"307445734.5m", 0, 18446744070000000000ULL}, /* just under 2^64 ns */
	    {"307445734.6m", -ERANGE, 0},
	    {"307445735m", -ERANGE, 0},
	    {"18446744073709551615ns", 0, UINT64_MAX},
	    {"18446744073709551616ns", -ERANGE, 0},
	};

	(void)state;
	check_numbers("units_parse_duration", units_parse_duration, cases, ARRAY_SIZE(cases));
}

static void test_uint(void **state)
{
	static const struct num_case cases[] = {
	    {"0", 0, 0},
	    {"42", 0, 42},
	    {"18446744073709551615", 0, UINT64_MAX},
	    {"18446744073709551616", -ERANGE, 0},
	    {"1k", -EINVAL, 0},
	    {"-1", -EINVAL, 0},
	    {"", -EINVAL, 0},
	    {"4 2", -EINVAL, 0},
	};

	(void)state;
	check_numbers("units_parse_uint", units_parse_uint, cases, ARRAY_SIZE(cases));
}

/* Every formatted value reads back as itself, in its shortest exact form. */
static void test_format_round_trip(void **state)
{
	static const uint64_t counts[] = {
	    0, 1, 999, 1000, 1500, 2500000, 100000000000ULL, 18446744073ULL, UINT64_MAX};
	static const uint64_t durs[] = {
	    0, 1, 1000, 500000000ULL, 2000000000ULL, 60000000000ULL, 90000000000ULL, UINT64_MAX};
	char buf[32];
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(counts); i++) {
		units_format_count(counts[i], buf, sizeof(buf));
		assert_int_equal(units_parse_count(buf, &v), 0);
		assert_true(v == counts[i]);
	}
	for (i = 0; i < ARRAY_SIZE(durs); i++) {
		units_format_duration(durs[i], buf, sizeof(buf));
		assert_int_equal(units_parse_duration(buf, &v), 0);
		assert_true(v == durs[i]);
	}
	units_format_count(100000000000ULL, buf, sizeof(buf));
	assert_string_equal(buf, "100G");
	units_format_count(1500, buf, sizeof(buf));
	assert_string_equal(buf, "1500");
	units_format_duration(500000000ULL, buf, sizeof(buf));
	assert_string_equal(buf, "500ms");
	units_format_duration(90000000000ULL, buf, sizeof(buf));
	assert_string_equal(buf, "90s");
}

struct prefix_case {
	const char *in;
	int rc;
	uint8_t family, plen;
	uint8_t addr[16];
};

static void test_prefix_table(void **state)
{
	static const struct prefix_case cases[] = {
	    {"198.18.0.0/15", 0, 4, 15, {198, 18}},
	    {"10.1.2.3", 0, 4, 32, {10, 1, 2, 3}},
	    {"0.0.0.0/0", 0, 4, 0, {0}},
	    {"10.1.2.3/32", 0, 4, 32, {10, 1, 2, 3}},
	    {"2001:db8::/32", 0, 6, 32, {0x20, 0x01, 0x0d, 0xb8}},
	    {"::1", 0, 6, 128, {[15] = 1}},
	    {"::/0", 0, 6, 0, {0}},
	    {"2001:db8::8000/113", 0, 6, 113, {0x20, 0x01, 0x0d, 0xb8, [14] = 0x80}},
	    {"10.0.0.1/8", -EDOM, 4, 8, {10, 0, 0, 1}}, /* host bits: filled, unmasked */
	    {"198.19.0.0/15", -EDOM, 4, 15, {198, 19}},
	    {"2001:db8::1/32", -EDOM, 6, 32, {0x20, 0x01, 0x0d, 0xb8, [15] = 1}},
	    {"2001:db8::8000/114", 0, 6, 114, {0x20, 0x01, 0x0d, 0xb8, [14] = 0x80}},
	    {"2001:db8::8000/112", -EDOM, 6, 112, {0x20, 0x01, 0x0d, 0xb8, [14] = 0x80}},
	    {"2001:db8::c000/113", -EDOM, 6, 113, {0x20, 0x01, 0x0d, 0xb8, [14] = 0xc0}},
	    {"10.0.0.0/33", -ERANGE, 0, 0, {0}},
	    {"::/129", -ERANGE, 0, 0, {0}},
	    {"10.0.0.0/99999999999999999999999", -ERANGE, 0, 0, {0}},
	    {"10.0.0/8", -EINVAL, 0, 0, {0}},
	    {"10.0.0.0/", -EINVAL, 0, 0, {0}},
	    {"/8", -EINVAL, 0, 0, {0}},
	    {"10.0.0.0/-1", -EINVAL, 0, 0, {0}},
	    {"10.0.0.0/8/8", -EINVAL, 0, 0, {0}},
	    {"010.0.0.0/8", -EINVAL, 0, 0, {0}}, /* no octal guessing */
	    {"fe80::1%eth0/64", -EINVAL, 0, 0, {0}},
	    {"example.com/8", -EINVAL, 0, 0, {0}},
	    {"", -EINVAL, 0, 0, {0}},
	};
	uint8_t family, plen, addr[16];
	size_t i;
	int rc;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		memset(addr, 0xee, sizeof(addr));
		rc = units_parse_prefix(cases[i].in, &family, addr, &plen);
		if (rc != cases[i].rc)
			fail_msg("units_parse_prefix(\"%s\") returned %d, expected %d", cases[i].in,
				 rc, cases[i].rc);
		if (rc && rc != -EDOM)
			continue;
		if (family != cases[i].family || plen != cases[i].plen ||
		    memcmp(addr, cases[i].addr, family == 4 ? 4 : 16))
			fail_msg("units_parse_prefix(\"%s\") gave family %u /%u or wrong bytes",
				 cases[i].in, family, plen);
	}
}

/* The LPM tries' form: IPv4 v4-mapped with 96 bits added, IPv6 as is. */
static void test_prefix_v6map(void **state)
{
	uint8_t v4[16] = {198, 18, 1, 0}, v6[16] = {0x20, 0x01, 0x0d, 0xb8}, out[16];
	const uint8_t want4[16] = {[10] = 0xff, [11] = 0xff, [12] = 198, [13] = 18, [14] = 1};

	(void)state;
	memset(out, 0xaa, sizeof(out));
	assert_int_equal(units_prefix_v6map(4, v4, 24, out), 120);
	assert_memory_equal(out, want4, 16);
	memset(out, 0xaa, sizeof(out));
	assert_int_equal(units_prefix_v6map(6, v6, 32, out), 32);
	assert_memory_equal(out, v6, 16);
}

static void test_prefix_mask(void **state)
{
	uint8_t a[16] = {10, 255, 255, 255};
	uint8_t b[16];

	(void)state;
	units_prefix_mask(4, a, 9);
	assert_int_equal(a[0], 10);
	assert_int_equal(a[1], 0x80);
	assert_int_equal(a[2], 0);
	assert_int_equal(a[3], 0);
	memset(b, 0xff, sizeof(b));
	units_prefix_mask(6, b, 0);
	for (size_t i = 0; i < 16; i++)
		assert_int_equal(b[i], 0);
	memset(b, 0xff, sizeof(b));
	units_prefix_mask(6, b, 128);
	for (size_t i = 0; i < 16; i++)
		assert_int_equal(b[i], 0xff);
}

struct port_case {
	const char *in;
	int rc;
	uint16_t lo, hi;
};

static void test_port_range_table(void **state)
{
	static const struct port_case cases[] = {
	    {"53", 0, 53, 53},
	    {"1000-2000", 0, 1000, 2000},
	    {"0", 0, 0, 0},
	    {"0-65535", 0, 0, 65535},
	    {"80-80", 0, 80, 80},
	    {"2000-1000", -EINVAL, 0, 0}, /* lo > hi */
	    {"65536", -ERANGE, 0, 0},
	    {"1-65536", -ERANGE, 0, 0},
	    {"99999999999999999999999", -ERANGE, 0, 0},
	    {"", -EINVAL, 0, 0},
	    {"-5", -EINVAL, 0, 0},
	    {"5-", -EINVAL, 0, 0},
	    {"1000 - 2000", -EINVAL, 0, 0},
	    {"1-2-3", -EINVAL, 0, 0},
	    {"http", -EINVAL, 0, 0},
	    {"53/udp", -EINVAL, 0, 0},
	};
	uint16_t lo, hi;
	size_t i;
	int rc;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		lo = hi = 0xbeef;
		rc = units_parse_port_range(cases[i].in, &lo, &hi);
		if (rc != cases[i].rc)
			fail_msg("units_parse_port_range(\"%s\") returned %d, expected %d",
				 cases[i].in, rc, cases[i].rc);
		if (!rc && (lo != cases[i].lo || hi != cases[i].hi))
			fail_msg("units_parse_port_range(\"%s\") gave %u-%u", cases[i].in, lo, hi);
		if (rc && (lo != 0xbeef || hi != 0xbeef))
			fail_msg("units_parse_port_range(\"%s\") wrote its outputs on error",
				 cases[i].in);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_count_forms),
	    cmocka_unit_test(test_count_refused),
	    cmocka_unit_test(test_count_overflow),
	    cmocka_unit_test(test_duration_forms),
	    cmocka_unit_test(test_uint),
	    cmocka_unit_test(test_format_round_trip),
	    cmocka_unit_test(test_prefix_table),
	    cmocka_unit_test(test_prefix_mask),
	    cmocka_unit_test(test_prefix_v6map),
	    cmocka_unit_test(test_port_range_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
