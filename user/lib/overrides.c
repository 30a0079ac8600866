// SPDX-License-Identifier: MIT
/*
 * Per-key override files (see overrides.h): read line by line, every field
 * checked, every error at its line and column.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/linefile.h"
#include "lib/overrides.h"
#include "lib/units.h"
#include "lib/util.h"

struct ovr_ctx {
	struct line_file lf; /* the file, its line and errors at it */
	bool ports;	     /* a dst-port limit's: PORT or LO-HI, not prefixes */
};

/* The next blank-separated word of *p (NUL-terminated in place); NULL at the end. */
static char *word(char **p)
{
	char *s = *p, *w;

	while (*s == ' ' || *s == '\t')
		s++;
	if (!*s || *s == '#')
		return NULL;
	w = s;
	while (*s && *s != ' ' && *s != '\t')
		s++;
	if (*s)
		*s++ = '\0';
	*p = s;
	return w;
}

static int count_arg(struct ovr_ctx *c, char **p, const char *what, uint64_t max, uint64_t *out)
{
	char *w = word(p);
	int rc;

	if (!w)
		return line_file_fail(&c->lf, *p, "'%s' needs a value (expected e.g. %s 1000)",
				      what, what);
	rc = units_parse_count(w, out);
	if (rc || *out < 1 || *out > max)
		return line_file_fail(&c->lf, w,
				      "%s '%s' is not a count from 1 to %llu (k, M, G allowed)",
				      what, w, (unsigned long long)max);
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	const struct ovr_entry *x = a, *y = b;

	return units_prefix_cmp(x->family, x->addr, x->plen, y->family, y->addr, y->plen);
}

/* The contract after key word w (rate R burst B, unlimited or deny) into e. */
static int parse_contract(struct ovr_ctx *c, char **pp, const char *w, uint64_t max_rate,
			  uint64_t max_burst, struct ovr_entry *e)
{
	char *p = *pp, *kw;
	int rc;

	kw = word(&p);
	if (!kw)
		return line_file_fail(
		    &c->lf, p, "'%s' needs a contract: rate R burst B, unlimited or deny", w);
	if (!strcmp(kw, "unlimited")) {
		e->kind = OVR_UNLIMITED;
	} else if (!strcmp(kw, "deny")) {
		e->kind = OVR_DENY;
	} else if (!strcmp(kw, "rate")) {
		e->kind = OVR_RATE;
		if ((rc = count_arg(c, &p, "rate", max_rate, &e->rate)))
			return rc;
		kw = word(&p);
		if (!kw || strcmp(kw, "burst"))
			return line_file_fail(&c->lf, kw ? kw : p,
					      "expected 'burst B' after the rate");
		if ((rc = count_arg(c, &p, "burst", max_burst, &e->burst)))
			return rc;
	} else {
		return line_file_fail(
		    &c->lf, kw,
		    "'%s' is not a contract (expected rate R burst B, unlimited or "
		    "deny)",
		    kw);
	}
	kw = word(&p);
	if (kw)
		return line_file_fail(&c->lf, kw, "unexpected '%s' after the contract", kw);
	return 0;
}

/* One line into e: 0, 1 for a blank or comment line, or -EINVAL. */
static int parse_line(struct ovr_ctx *c, char *s, uint8_t prefix_v4, uint8_t prefix_v6,
		      uint64_t max_rate, uint64_t max_burst, struct ovr_entry *e)
{
	char *p = s, *w = word(&p);
	uint8_t keyplen;
	int rc;

	if (!w)
		return 1;
	memset(e, 0, sizeof(*e));
	e->line = c->lf.line;
	if (c->ports) {
		rc = units_parse_port_range(w, &e->lo, &e->hi);
		if (rc)
			return line_file_fail(
			    &c->lf, w,
			    "'%s' is not a port or port range (expected e.g. 53 or "
			    "8000-8100; ports 0..65535, low <= high)",
			    w);
		return parse_contract(c, &p, w, max_rate, max_burst, e);
	}
	rc = units_parse_prefix(w, &e->family, e->addr, &e->plen);
	if (rc == -EDOM) {
		char buf[INET6_ADDRSTRLEN];
		uint8_t bits = e->plen, a[16];

		memcpy(a, e->addr, 16);
		for (int i = 0; i < 16; i++) {
			int keep = bits >= 8 ? 8 : bits;

			a[i] &= (uint8_t)(0xff << (8 - keep));
			bits = (uint8_t)(bits - keep);
		}
		inet_ntop(e->family == 4 ? AF_INET : AF_INET6, a, buf, sizeof(buf));
		return line_file_fail(&c->lf, w,
				      "prefix '%s' has host bits set (did you mean %s/%u?)", w, buf,
				      e->plen);
	}
	if (rc)
		return line_file_fail(
		    &c->lf, w,
		    "'%s' is not an address prefix (expected e.g. 198.18.1.0/24 or "
		    "2001:db8::/48)",
		    w);
	keyplen = e->family == 4 ? prefix_v4 : prefix_v6;
	if (e->plen > keyplen)
		return line_file_fail(
		    &c->lf, w,
		    "prefix '%s' is longer than the limit's key (prefix-v%d %u): an "
		    "override covers whole keys",
		    w, e->family, keyplen);
	return parse_contract(c, &p, w, max_rate, max_burst, e);
}

static int range_cmp(const void *a, const void *b)
{
	const struct ovr_entry *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Port ranges v[0..k) (sorted by lo, disjoint) as the aligned power-of-two
 * blocks that cover them exactly, each an entry of family 0: the block's
 * first port in addr[0..1] (network order), plen its fixed high bits. At
 * most 65536 blocks in all: the ranges are disjoint.
 */
static int ranges_to_blocks(struct ovr_entry **v, size_t *k)
{
	struct ovr_entry *out = NULL;
	size_t n = 0, cap = 0;

	for (size_t i = 0; i < *k; i++) {
		uint32_t at = (*v)[i].lo, end = (uint32_t)(*v)[i].hi + 1;

		while (at < end) {
			uint32_t size = at ? at & -at : 65536;
			uint8_t bits = 0;

			while (at + size > end)
				size >>= 1;
			while ((1u << bits) < size)
				bits++;
			if (n == cap) {
				struct ovr_entry *nv =
				    realloc(out, (cap = cap ? 2 * cap : 64) * sizeof(*out));

				if (!nv) {
					free(out);
					return -ENOMEM;
				}
				out = nv;
			}
			out[n] = (*v)[i];
			out[n].family = 0;
			out[n].plen = (uint8_t)(16 - bits);
			memset(out[n].addr, 0, sizeof(out[n].addr));
			out[n].addr[0] = (uint8_t)(at >> 8);
			out[n].addr[1] = (uint8_t)at;
			n++;
			at += size;
		}
	}
	free(*v);
	*v = out;
	*k = n;
	return 0;
}

static int load(const char *path, bool ports, uint8_t prefix_v4, uint8_t prefix_v6,
		uint64_t max_rate, uint64_t max_burst, struct ovr_entry **out, size_t *n,
		struct cfg_err *err)
{
	struct ovr_ctx c = {.ports = ports};
	struct ovr_entry *v = NULL;
	size_t cap = 0, k = 0;
	int rc;

	*out = NULL;
	*n = 0;
	rc = line_file_open(&c.lf, path, "overrides", err);
	if (rc)
		return rc;
	while ((rc = line_file_next(&c.lf)) > 0) {
		char *line = c.lf.buf;

		if ((rc = line_file_grow((void **)&v, &cap, k, sizeof(*v), 256)))
			break;
		rc = parse_line(&c, line, prefix_v4, prefix_v6, max_rate, max_burst, &v[k]);
		if (rc < 0)
			break;
		if (rc == 0)
			c.lf.entries++;
		if (rc == 0 && ++k > OVR_MAX_PER_LIMIT) {
			rc = line_file_fail(&c.lf, NULL, "more than %d overrides in one file",
					    OVR_MAX_PER_LIMIT);
			break;
		}
		rc = 0;
	}
	line_file_close(&c.lf);
	if (!rc && k && ports) {
		/* Ranges must not overlap: which contract a port had would hang
		 * on how the ranges split into blocks.
		 */
		sort_n(v, k, sizeof(*v), range_cmp);
		for (size_t i = 1; !rc && i < k; i++)
			if (v[i].lo <= v[i - 1].hi) {
				const struct ovr_entry *a = &v[i - 1], *b = &v[i];

				c.lf.line = a->line > b->line ? a->line : b->line;
				c.lf.text = "";
				rc = line_file_fail(&c.lf, c.lf.text,
						    "ports %u-%u overlap ports %u-%u of line %u",
						    a->line > b->line ? a->lo : b->lo,
						    a->line > b->line ? a->hi : b->hi,
						    a->line > b->line ? b->lo : a->lo,
						    a->line > b->line ? b->hi : a->hi,
						    a->line > b->line ? b->line : a->line);
			}
		if (!rc)
			rc = ranges_to_blocks(&v, &k);
	} else if (!rc && k) {
		sort_n(v, k, sizeof(*v), entry_cmp);
		for (size_t i = 1; i < k; i++)
			if (!entry_cmp(&v[i - 1], &v[i])) {
				c.lf.line = v[i - 1].line > v[i].line ? v[i - 1].line : v[i].line;
				rc = line_file_fail(
				    &c.lf, NULL, "the same prefix again (first on line %u)",
				    v[i - 1].line < v[i].line ? v[i - 1].line : v[i].line);
				break;
			}
	}
	if (rc) {
		if (rc != -EINVAL && err && !err->msg[0])
			snprintf(err->msg, sizeof(err->msg), "%s: %s", path, strerror(-rc));
		free(v);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

int ovr_load(const char *path, uint8_t prefix_v4, uint8_t prefix_v6, uint64_t max_rate,
	     uint64_t max_burst, struct ovr_entry **out, size_t *n, struct cfg_err *err)
{
	return load(path, false, prefix_v4, prefix_v6, max_rate, max_burst, out, n, err);
}

int ovr_load_ports(const char *path, uint64_t max_rate, uint64_t max_burst, struct ovr_entry **out,
		   size_t *n, struct cfg_err *err)
{
	return load(path, true, 0, 0, max_rate, max_burst, out, n, err);
}
