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

#include "ll_types.h"
#include "sets.h"
#include "units.h"

struct set_ctx {
	const char *path;
	uint32_t line;
	const char *text;
	struct cfg_err *err;
};

__attribute__((format(printf, 3, 4))) static int fail(struct set_ctx *c, const char *at,
						      const char *fmt, ...)
{
	size_t col = at ? (size_t)(at - c->text) + 1 : 0;
	char msg[CFG_ERR_LEN - 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (c->err) {
		if (col)
			snprintf(c->err->msg, sizeof(c->err->msg), "%s:%u:%zu: %s", c->path,
				 c->line, col, msg);
		else
			snprintf(c->err->msg, sizeof(c->err->msg), "%s:%u: %s", c->path, c->line,
				 msg);
		cfg_err_at(c->err, c->path, c->line, col);
	}
	return -EINVAL;
}

static int entry_cmp(const void *a, const void *b)
{
	const struct set_entry *x = a, *y = b;
	int c;

	if (x->family != y->family)
		return x->family < y->family ? -1 : 1;
	c = memcmp(x->addr, y->addr, sizeof(x->addr));
	if (c)
		return c;
	return x->plen < y->plen ? -1 : x->plen > y->plen;
}

/* One line into e: 0, 1 for a blank or comment line, or -EINVAL. */
static int parse_line(struct set_ctx *c, char *s, struct set_entry *e)
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
			return fail(c, rest,
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
		return fail(c, w, "prefix '%s' has host bits set (did you mean %s/%u?)", w, buf,
			    e->plen);
	}
	if (rc == -ERANGE)
		return fail(c, w, "prefix '%.60s' is longer than its family's /32 or /128", w);
	if (!rc && e->family == 6 && e->plen <= 96) {
		/* IPv4 is held as ::ffff:a.b.c.d: an IPv6 prefix covering that
		 * range would match every IPv4 packet too.
		 */
		uint8_t m[16] = {[10] = 0xff, [11] = 0xff};

		units_prefix_mask(6, m, e->plen);
		if (!memcmp(m, e->addr, 16))
			return fail(c, w,
				    "prefix '%.60s' covers ::ffff:0:0/96, where IPv4 addresses are "
				    "held: it would match every IPv4 packet too (expected IPv6 "
				    "prefixes beside it, e.g. 2000::/3, and 0.0.0.0/0 for IPv4)",
				    w);
	}
	if (rc)
		return fail(c, w,
			    "'%.60s' is not an address prefix (expected e.g. 198.18.1.0/24, "
			    "198.18.1.7 or 2001:db8::/48)",
			    w);
	return 0;
}

int set_load(const char *path, size_t budget, size_t used, struct set_entry **out, size_t *n,
	     struct cfg_err *err)
{
	struct set_ctx c = {.path = path, .err = err};
	char line[SET_LINE_MAX + 2];
	struct set_entry *v = NULL;
	size_t cap = 0, k = 0;
	/* A regular file only: a FIFO or a device could block or never end. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), rc = 0;
	struct stat sb;
	FILE *f = NULL;

	*out = NULL;
	*n = 0;
	if (fd >= 0 && (fstat(fd, &sb) || !S_ISREG(sb.st_mode))) {
		close(fd);
		fd = -1;
		errno = EINVAL;
	}
	if (fd >= 0 && !(f = fdopen(fd, "r")))
		close(fd);
	if (!f) {
		rc = -errno;
		if (err) {
			snprintf(err->msg, sizeof(err->msg), "%s: cannot read the prefix set: %s",
				 path, strerror(-rc));
			cfg_err_at(err, path, 0, 0);
		}
		return rc;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		c.line++;
		c.text = line;
		if (len && line[len - 1] == '\n')
			line[--len] = '\0';
		else if (len > SET_LINE_MAX) {
			rc = fail(&c, line, "line longer than %d bytes", SET_LINE_MAX);
			break;
		}
		if (k == cap) {
			struct set_entry *nv;

			cap = cap ? 2 * cap : 1024;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		rc = parse_line(&c, line, &v[k]);
		if (rc < 0)
			break;
		if (rc == 0 && ++k > budget) {
			char *w = line;

			while (*w == ' ' || *w == '\t')
				w++;
			rc =
			    fail(&c, w,
				 "one prefix too many: the sets of one policy hold at most %d "
				 "prefixes in all (LL_MAX_SET_ENTRIES: ll_sets holds two policies' "
				 "worth, so a reload can write new sets beside the running ones; "
				 "%zu are in the policy's other sets)",
				 LL_MAX_SET_ENTRIES, used);
			break;
		}
		rc = 0;
	}
	if (!rc && ferror(f))
		rc = -EIO;
	fclose(f);
	if (!rc && k) {
		qsort(v, k, sizeof(*v), entry_cmp);
		for (size_t i = 1; i < k; i++)
			if (!entry_cmp(&v[i - 1], &v[i])) {
				c.line = v[i - 1].line > v[i].line ? v[i - 1].line : v[i].line;
				c.text = "";
				rc = fail(&c, c.text, "the same prefix again (first on line %u)",
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
