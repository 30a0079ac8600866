// SPDX-License-Identifier: MIT
/*
 * Prefix set files (see sets.h): read line by line, every prefix checked,
 * every error at its line and column.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/linefile.h"
#include "ll_types.h"
#include "lib/sets.h"
#include "lib/units.h"
#include "lib/util.h"

static int entry_cmp(const void *a, const void *b)
{
	const struct set_entry *x = a, *y = b;

	return units_prefix_cmp(x->family, x->addr, x->plen, y->family, y->addr, y->plen);
}

/* One line into e: 0, 1 for a blank or comment line, or -EINVAL. */
static int parse_line(struct line_file *c, char *s, struct set_entry *e)
{
	char *w = s, *end;
	int rc;

	while (*w == ' ' || *w == '\t' || *w == '\r')
		w++;
	if (!*w || *w == '#')
		return 1;
	end = w;
	while (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '#')
		end++;
	if (*end) {
		char *rest = end;

		*rest++ = '\0';
		while (*rest == ' ' || *rest == '\t' || *rest == '\r')
			rest++;
		if (*rest && *rest != '#')
			return line_file_fail(
			    c, rest,
			    "unexpected '%.40s' after the prefix (one prefix a line; "
			    "'#' starts a comment)",
			    rest);
	}
	memset(e, 0, sizeof(*e));
	e->line = c->line;
	rc = units_parse_prefix(w, &e->family, e->addr, &e->plen);
	if (rc == -EDOM) {
		char buf[INET6_ADDRSTRLEN];
		uint8_t a[16];

		memcpy(a, e->addr, 16);
		units_prefix_mask(e->family, a, e->plen);
		inet_ntop(e->family == 4 ? AF_INET : AF_INET6, a, buf, sizeof(buf));
		return line_file_fail(c, w, "prefix '%s' has host bits set (did you mean %s/%u?)",
				      w, buf, e->plen);
	}
	if (rc == -ERANGE)
		return line_file_fail(c, w,
				      "prefix '%.60s' is longer than its family's /32 or /128", w);
	if (!rc && e->family == 6 && e->plen <= 96) {
		/* IPv4 is held as ::ffff:a.b.c.d: an IPv6 prefix covering that
		 * range would match every IPv4 packet too.
		 */
		uint8_t m[16] = {[10] = 0xff, [11] = 0xff};

		units_prefix_mask(6, m, e->plen);
		if (!memcmp(m, e->addr, 16))
			return line_file_fail(
			    c, w,
			    "prefix '%.60s' covers ::ffff:0:0/96, where IPv4 addresses are "
			    "held: it would match every IPv4 packet too (expected IPv6 "
			    "prefixes beside it, e.g. 2000::/3, and 0.0.0.0/0 for IPv4)",
			    w);
	}
	if (rc)
		return line_file_fail(
		    c, w,
		    "'%.60s' is not an address prefix (expected e.g. 198.18.1.0/24, "
		    "198.18.1.7 or 2001:db8::/48)",
		    w);
	return 0;
}

int set_load(const char *path, size_t budget, size_t used, struct set_entry **out, size_t *n,
	     struct cfg_err *err)
{
	struct line_file c;
	struct set_entry *v = NULL;
	size_t cap = 0, k = 0;
	int rc;

	*out = NULL;
	*n = 0;
	rc = line_file_open(&c, path, "the prefix set", err);
	if (rc)
		return rc;
	while ((rc = line_file_next(&c)) > 0) {
		char *line = c.buf;

		if ((rc = line_file_grow((void **)&v, &cap, k, sizeof(*v), 1024)))
			break;
		rc = parse_line(&c, line, &v[k]);
		if (rc < 0)
			break;
		if (rc == 0)
			c.entries++;
		if (rc == 0 && ++k > budget) {
			char *w = line;

			while (*w == ' ' || *w == '\t')
				w++;
			rc = line_file_fail(
			    &c, w,
			    "one prefix too many: the sets of one policy hold at most %d "
			    "prefixes in all (LL_MAX_SET_ENTRIES: ll_sets holds two policies' "
			    "worth, so a reload can write new sets beside the running ones; "
			    "%zu are in the policy's other sets)",
			    LL_MAX_SET_ENTRIES, used);
			break;
		}
		rc = 0;
	}
	line_file_close(&c);
	if (!rc && k) {
		sort_n(v, k, sizeof(*v), entry_cmp);
		for (size_t i = 1; i < k; i++)
			if (!entry_cmp(&v[i - 1], &v[i])) {
				c.line = v[i - 1].line > v[i].line ? v[i - 1].line : v[i].line;
				c.text = "";
				rc = line_file_fail(
				    &c, c.text, "the same prefix again (first on line %u)",
				    v[i - 1].line < v[i].line ? v[i - 1].line : v[i].line);
				break;
			}
	}
	if (rc) {
		if (rc != -EINVAL && err && !err->msg[0]) {
			snprintf(err->msg, sizeof(err->msg), "%s: %s", path, strerror(-rc));
			cfg_err_at(err, path, 0, 0);
		}
		free(v);
		return rc;
	}
	*out = v;
	*n = k;
	return 0;
}

uint64_t set_digest(const struct set_entry *v, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		uint8_t b[18];

		b[0] = v[i].family;
		b[1] = v[i].plen;
		memcpy(b + 2, v[i].addr, 16);
		for (size_t j = 0; j < sizeof(b); j++)
			h = (h ^ b[j]) * 0x100000001b3ull;
	}
	return h ^ n;
}
