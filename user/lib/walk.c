// SPDX-License-Identifier: MIT
/*
 * The one mapping walk behind every configuration section: unknown, duplicate
 * and missing keys, typed scalar conversion and positions for messages.
 * It knows no leaseline key; config.c, config_policy.c and
 * config_match.c describe sections as walk_field tables.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/fs.h"
#include "lib/units.h"
#include "lib/walk.h"

/* Characters of a value quoted in a message; longer values are cut. */
#define WALK_SHOW 48
/* Longest key for which "did you mean" is computed. */
#define WALK_KEY_MAX 32

static int walk_vfail(struct walk_ctx *c, size_t line, size_t col, bool subj, const char *fmt,
		      va_list ap)
{
	char *msg = c->err->msg;
	int n;

	cfg_err_at(c->err, c->file, line, col);
	n = snprintf(msg, CFG_ERR_LEN, "%s:%zu:%zu: %s%s", c->file, line, col,
		     subj && c->subj[0] ? c->subj : "", subj && c->subj[0] ? ": " : "");
	if (n >= 0 && n < CFG_ERR_LEN)
		vsnprintf(msg + n, CFG_ERR_LEN - (size_t)n, fmt, ap);
	return -EINVAL;
}

size_t walk_line(const yaml_node_t *n)
{
	return n ? n->start_mark.line + 1 : 1;
}

size_t walk_col(const yaml_node_t *n)
{
	return n ? n->start_mark.column + 1 : 1;
}

int walk_fail(struct walk_ctx *c, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	walk_vfail(c, walk_line(n), walk_col(n), true, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int walk_fail_raw(struct walk_ctx *c, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	walk_vfail(c, walk_line(n), walk_col(n), false, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int fail_mark(struct walk_ctx *c, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_mark(struct walk_ctx *c, yaml_mark_t m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	walk_vfail(c, m.line + 1, m.column + 1, false, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

yaml_node_t *walk_node(struct walk_ctx *c, int index)
{
	return yaml_document_get_node(&c->doc, index);
}

const char *walk_scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The document API does not resolve tags: a plain ~, null or nothing is null. */
bool walk_is_null(const yaml_node_t *n)
{
	const char *s = walk_scalar(n);

	if (!s || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

const char *walk_kind(const yaml_node_t *n)
{
	if (n->type == YAML_MAPPING_NODE)
		return "mapping";
	if (n->type == YAML_SEQUENCE_NODE)
		return "list";
	return "value";
}

const char *walk_enum_name(const struct walk_enum *names, uint8_t value)
{
	for (; names->name; names++) {
		if (names->value == value)
			return names->name;
	}
	return "?";
}

/* ---- documents ---- */

static int syntax_error(struct walk_ctx *c, const yaml_parser_t *p)
{
	if (p->error == YAML_MEMORY_ERROR) {
		snprintf(c->err->msg, CFG_ERR_LEN, "%s: out of memory", c->file);
		return -ENOMEM;
	}
	if (p->error == YAML_READER_ERROR)
		return fail_mark(c, p->problem_mark, "invalid yaml: %s (at byte %zu)",
				 p->problem ? p->problem : "cannot read", p->problem_offset);
	if (p->context)
		return fail_mark(c, p->problem_mark, "invalid yaml: %s (%s at line %zu)",
				 p->problem, p->context, p->context_mark.line + 1);
	return fail_mark(c, p->problem_mark, "invalid yaml: %s",
			 p->problem ? p->problem : "cannot parse");
}

/* Loads the first document and refuses a second one: a stray "---" would
 * otherwise silently hide everything after it.
 */
static int load_single(struct walk_ctx *c, yaml_parser_t *p)
{
	yaml_document_t extra;
	yaml_node_t *r;
	int rc = 0;

	if (!yaml_parser_load(p, &c->doc))
		return syntax_error(c, p);
	c->have_doc = true;
	if (!yaml_parser_load(p, &extra))
		return syntax_error(c, p);
	r = yaml_document_get_root_node(&extra);
	if (r)
		rc = fail_mark(c, extra.start_mark,
			       "a second document starts here (expected one document per file)");
	yaml_document_delete(&extra);
	return rc;
}

static int check_root(struct walk_ctx *c, yaml_node_t **root)
{
	yaml_node_t *r = yaml_document_get_root_node(&c->doc);

	if (!r || walk_is_null(r))
		return walk_fail_raw(c, NULL, "file is empty (expected a mapping of keys)");
	if (r->type != YAML_MAPPING_NODE)
		return walk_fail_raw(
		    c, r, "expected a mapping of keys at the top level, found a %s", walk_kind(r));
	*root = r;
	return 0;
}

static int too_big(struct walk_ctx *c)
{
	cfg_err_at(c->err, c->file, 0, 0);
	snprintf(c->err->msg, CFG_ERR_LEN, "%s: larger than %d KiB (expected a configuration file)",
		 c->file, WALK_MAX_BYTES / 1024);
	return -EFBIG;
}

/* The whole of the file named by c->file, at most WALK_MAX_BYTES. */
static int read_file(struct walk_ctx *c, char **buf, size_t *len)
{
	int rc = fs_read_file(c->file, WALK_MAX_BYTES, buf, len);

	cfg_err_at(c->err, c->file, 0, 0);
	if (rc == -EFBIG)
		return too_big(c);
	if (rc == -ENOMEM)
		snprintf(c->err->msg, CFG_ERR_LEN, "%s: out of memory", c->file);
	else if (rc == -EINVAL)
		snprintf(c->err->msg, CFG_ERR_LEN, "cannot read '%s': not a regular file", c->file);
	else if (rc == -EISDIR || rc == -EIO)
		snprintf(c->err->msg, CFG_ERR_LEN, "cannot read '%s': %s", c->file, strerror(-rc));
	else if (rc)
		snprintf(c->err->msg, CFG_ERR_LEN, "cannot open '%s': %s", c->file, strerror(-rc));
	return rc;
}

/* libyaml's cost grows with nesting (20k nested '[' took seconds, 300k
 * block levels on one line 2.5 s and 175 MB), and a policy may come from
 * the network: before the document is built, one pass over libyaml's
 * events refuses a collection nested deeper than WALK_MAX_DEPTH below the
 * root, flow ([, {) or block ("- - -" on one line) alike, at the event
 * that goes too deep. A syntax error is left to the load that follows,
 * which reports it.
 */
static int depth_check(struct walk_ctx *c, const char *t, size_t len)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = -1, rc = 0; /* the root collection is level 0 */
	bool end = false;

	if (!yaml_parser_initialize(&p)) {
		snprintf(c->err->msg, CFG_ERR_LEN, "%s: out of memory", c->file);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)t, len);
	while (!end && !rc && yaml_parser_parse(&p, &ev)) {
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (++depth > WALK_MAX_DEPTH) {
				snprintf(c->err->msg, CFG_ERR_LEN,
					 "%s:%zu:%zu: nesting deeper than %d levels (expected a "
					 "flat configuration)",
					 c->file, ev.start_mark.line + 1, ev.start_mark.column + 1,
					 WALK_MAX_DEPTH);
				cfg_err_at(c->err, c->file, ev.start_mark.line + 1,
					   ev.start_mark.column + 1);
				rc = -EINVAL;
			}
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_STREAM_END_EVENT:
			end = true;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	return rc;
}

int walk_open(struct walk_ctx *c, const char *file, const char *text, size_t len,
	      struct cfg_err *err, yaml_node_t **root)
{
	yaml_parser_t p;
	char *buf = NULL;
	int rc;

	c->file = file;
	c->err = err;
	c->have_doc = false;
	c->subj[0] = '\0';
	err->msg[0] = '\0';
	cfg_err_at(err, file, 0, 0);
	if (!text) {
		rc = read_file(c, &buf, &len);
		if (rc)
			return rc;
		text = buf;
	} else if (len > WALK_MAX_BYTES) {
		return too_big(c);
	}
	rc = depth_check(c, text, len);
	if (rc) {
		free(buf);
		return rc;
	}
	if (!yaml_parser_initialize(&p)) {
		free(buf);
		snprintf(err->msg, CFG_ERR_LEN, "%s: out of memory", file);
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	rc = load_single(c, &p);
	yaml_parser_delete(&p);
	free(buf);
	if (!rc)
		rc = check_root(c, root);
	if (rc)
		walk_close(c);
	return rc;
}

void walk_close(struct walk_ctx *c)
{
	if (c->have_doc)
		yaml_document_delete(&c->doc);
	c->have_doc = false;
}

/* ---- scalar conversion ---- */

static const char *where(const struct walk_ctx *c)
{
	return c->subj[0] ? c->subj : c->top;
}

static int fmt_plain(uint64_t v, char *buf, size_t size)
{
	return snprintf(buf, size, "%" PRIu64, v);
}

struct walk_number {
	int (*parse)(const char *s, uint64_t *v);
	int (*format)(uint64_t v, char *buf, size_t size);
	const char *noun;
	const char *expect;
};

static const struct walk_number walk_numbers[] = {
    [WALK_UINT] = {units_parse_uint, fmt_plain, "an integer", "digits only, e.g. 1"},
    [WALK_COUNT] = {units_parse_count, units_format_count, "a count", "e.g. 1000, 10k, 2.5M"},
    [WALK_DURATION] = {units_parse_duration, units_format_duration, "a duration",
		       "e.g. 2s, 500ms, 250us"},
};

int walk_bad_value(struct walk_ctx *c, const struct walk_field *f, const yaml_node_t *v,
		   const char *what, const char *expect)
{
	const char *s = walk_scalar(v);

	if (!s)
		return walk_fail(c, v, "%s must be a single value, found a %s (expected %s)",
				 f->key, walk_kind(v), expect);
	if (!*s)
		return walk_fail(c, v, "%s is empty (expected %s)", f->key, expect);
	return walk_fail(c, v, "%s '%.*s' %s (expected %s)", f->key, WALK_SHOW, s, what, expect);
}

static void store_uint(void *dst, size_t size, uint64_t v)
{
	uint8_t u8 = (uint8_t)v;
	uint16_t u16 = (uint16_t)v;
	uint32_t u32 = (uint32_t)v;

	if (size == 1)
		memcpy(dst, &u8, 1);
	else if (size == 2)
		memcpy(dst, &u16, 2);
	else if (size == 4)
		memcpy(dst, &u32, 4);
	else
		memcpy(dst, &v, 8);
}

static int set_number(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst)
{
	const struct walk_number *t = &walk_numbers[f->type];
	const char *s = walk_scalar(v);
	char lo[32], hi[32], expect[80], noun[32];
	uint64_t x;
	int rc;

	rc = s ? t->parse(s, &x) : -EINVAL;
	if (rc == -EINVAL) {
		snprintf(noun, sizeof(noun), "is not %s", t->noun);
		return walk_bad_value(c, f, v, noun, t->expect);
	}
	if (rc || x < f->min || x > f->max) {
		t->format(f->min, lo, sizeof(lo));
		t->format(f->max, hi, sizeof(hi));
		if (f->max == UINT64_MAX)
			snprintf(expect, sizeof(expect), "at least %s", lo);
		else
			snprintf(expect, sizeof(expect), "%s..%s", lo, hi);
		return walk_bad_value(c, f, v, "is out of range", expect);
	}
	store_uint(dst, f->size, x);
	return 0;
}

void walk_enum_list(const struct walk_enum *e, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (; e->name && n < size; e++)
		n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", e->name);
}

static int set_enum(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst)
{
	const char *s = walk_scalar(v);
	const struct walk_enum *e;
	char list[160], expect[176];

	for (e = f->names; s && e->name; e++) {
		if (!strcmp(s, e->name)) {
			*(uint8_t *)dst = e->value;
			return 0;
		}
	}
	walk_enum_list(f->names, list, sizeof(list));
	snprintf(expect, sizeof(expect), "one of: %s", list);
	return walk_bad_value(c, f, v, "is not valid", expect);
}

static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-';
}

static int set_name(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst)
{
	const char *s = walk_scalar(v);
	char expect[80];
	size_t i;

	for (i = 0; s && s[i] && i < f->size - 1 && name_char(s[i]); i++)
		;
	if (s && i > 0 && !s[i]) {
		memcpy(dst, s, i + 1);
		return 0;
	}
	snprintf(expect, sizeof(expect), "1 to %zu characters from A-Z a-z 0-9 _ . -", f->size - 1);
	return walk_bad_value(c, f, v, "is not a valid name", expect);
}

/* Relative to the directory of the file being read, as reference §4 says. */
int walk_set_path(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst)
{
	const char *s = walk_scalar(v), *slash = strrchr(c->file, '/');
	int dir = s && s[0] != '/' && slash ? (int)(slash - c->file + 1) : 0;
	char expect[64];
	int n;

	if (s && *s) {
		n = snprintf(dst, f->size, "%.*s%s", dir, c->file, s);
		if (n >= 0 && (size_t)n < f->size)
			return 0;
	}
	snprintf(expect, sizeof(expect), "a path of at most %zu bytes", f->size - 1);
	return walk_bad_value(c, f, v, "is too long", expect);
}

/* "host:port", "[v6]:port", or a host alone that gets the default port. */
static bool hostport_split(const char *s, char *host, size_t hsize, const char **port)
{
	const char *end, *colon;
	size_t hlen;

	if (s[0] == '[') {
		end = strchr(s, ']');
		if (!end || end == s + 1 || (end[1] && end[1] != ':'))
			return false;
		*port = end[1] ? end + 2 : NULL;
		hlen = (size_t)(end - s + 1);
	} else {
		colon = strchr(s, ':');
		if (colon && strchr(colon + 1, ':'))
			return false; /* a bare IPv6 address: needs [brackets] */
		*port = colon ? colon + 1 : NULL;
		hlen = colon ? (size_t)(colon - s) : strlen(s);
	}
	if (hlen == 0 || hlen >= hsize)
		return false;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	return true;
}

static bool host_char(char ch)
{
	return name_char(ch) && ch != '_';
}

static bool hostport_ok(const char *s, uint16_t defport, bool any_port, char *out, size_t size)
{
	char host[CFG_ADDR_LEN];
	const char *port, *h;
	uint64_t p = defport;
	int n;

	if (!s || !hostport_split(s, host, sizeof(host), &port))
		return false;
	for (h = host[0] == '[' ? host + 1 : host; *h && *h != ']'; h++) {
		if (!host_char(*h) && *h != ':')
			return false;
	}
	if (port && (units_parse_uint(port, &p) || (p == 0 && !any_port) || p > UINT16_MAX))
		return false;
	n = snprintf(out, size, "%s:%" PRIu64, host, p);
	return n >= 0 && (size_t)n < size;
}

static int set_hostport(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst)
{
	char expect[80];

	if (hostport_ok(walk_scalar(v), f->port, f->any_port, dst, f->size))
		return 0;
	snprintf(expect, sizeof(expect), "host:port, e.g. 127.0.0.1:%u or [::1]:%u", f->port,
		 f->port);
	return walk_bad_value(c, f, v, "is not an address", expect);
}

static int walk_sub(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	char saved[WALK_SUBJ_LEN];
	int rc;

	memcpy(saved, c->subj, sizeof(saved));
	/* "limit 'x' fallback"; a cut subject still points at the right place. */
	if (snprintf(c->subj, sizeof(c->subj), "%s%s%s", saved, saved[0] ? " " : "", f->key) < 0)
		c->subj[0] = '\0';
	rc = walk_run(c, v, f->sub, obj);
	memcpy(c->subj, saved, sizeof(saved));
	return rc;
}

int walk_set(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	void *dst = (char *)obj + f->off;

	switch (f->type) {
	case WALK_UINT:
	case WALK_COUNT:
	case WALK_DURATION:
		return set_number(c, f, v, dst);
	case WALK_ENUM:
		return set_enum(c, f, v, dst);
	case WALK_NAME:
		return set_name(c, f, v, dst);
	case WALK_PATH:
		return walk_set_path(c, f, v, dst);
	case WALK_HOSTPORT:
		return set_hostport(c, f, v, dst);
	case WALK_MAP:
		return walk_sub(c, f, v, obj);
	case WALK_CUSTOM:
		return f->fn ? f->fn(c, f, v, obj) : 0;
	}
	return -EINVAL;
}

/* ---- mappings ---- */

static size_t min_sz(size_t a, size_t b)
{
	return a < b ? a : b;
}

size_t walk_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, v;
	size_t d[WALK_KEY_MAX + 1][WALK_KEY_MAX + 1];

	if (la > WALK_KEY_MAX || lb > WALK_KEY_MAX)
		return SIZE_MAX;
	for (i = 0; i <= la; i++)
		d[i][0] = i;
	for (j = 0; j <= lb; j++)
		d[0][j] = j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			v = min_sz(v, min_sz(d[i - 1][j], d[i][j - 1]) + 1);
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
				v = min_sz(v, d[i - 2][j - 2] + 1);
			d[i][j] = v;
		}
	}
	return d[la][lb];
}

static int unknown_key(struct walk_ctx *c, const yaml_node_t *k, const struct walk_section *s,
		       const char *key)
{
	const char *best = NULL;
	size_t i, n = 0, d, best_d = SIZE_MAX;
	char list[256], hint[64] = "";

	for (i = 0; i < s->n_fields && n < sizeof(list); i++) {
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "",
				      s->fields[i].key);
		d = walk_edit_distance(key, s->fields[i].key);
		if (d < best_d) {
			best_d = d;
			best = s->fields[i].key;
		}
	}
	/* Close enough to be a typo: at most one edit per three characters. */
	if (best && 3 * best_d <= strlen(key) + 1)
		snprintf(hint, sizeof(hint), "; did you mean '%s'?", best);
	return walk_fail_raw(c, k, "unknown key '%.*s' in %s (expected one of: %s%s)", WALK_SHOW,
			     key, where(c), list, hint);
}

static int field_index(const struct walk_section *s, const char *key)
{
	size_t i;

	for (i = 0; i < s->n_fields; i++) {
		if (!strcmp(s->fields[i].key, key))
			return (int)i;
	}
	return -1;
}

yaml_node_t *walk_get(const struct walk_map *m, const char *key)
{
	int i = field_index(m->sec, key);

	return i < 0 ? NULL : m->val[i];
}

yaml_node_t *walk_key(const struct walk_map *m, const char *key)
{
	int i = field_index(m->sec, key);

	return i < 0 ? NULL : m->key[i];
}

static int walk_pair(struct walk_ctx *c, struct walk_map *m, const yaml_node_pair_t *p, void *obj)
{
	yaml_node_t *k = walk_node(c, p->key), *v = walk_node(c, p->value);
	const char *key = walk_scalar(k);
	int i;

	if (!key)
		return walk_fail_raw(c, k, "keys in %s must be plain words, found a %s", where(c),
				     walk_kind(k));
	i = field_index(m->sec, key);
	if (i < 0)
		return unknown_key(c, k, m->sec, key);
	if (m->key[i])
		return walk_fail_raw(c, k, "duplicate key '%s' in %s (first at line %zu)", key,
				     where(c), walk_line(m->key[i]));
	m->key[i] = k;
	m->val[i] = v;
	return walk_set(c, &m->sec->fields[i], v, obj);
}

static int check_required(struct walk_ctx *c, const struct walk_map *m)
{
	const struct walk_field *f;
	size_t i;

	for (i = 0; i < m->sec->n_fields; i++) {
		f = &m->sec->fields[i];
		if (!f->required || m->key[i])
			continue;
		if (!f->example)
			return walk_fail(c, m->node, "missing required key '%s'", f->key);
		return walk_fail(c, m->node, "missing required key '%s' (expected e.g. %s: %s)",
				 f->key, f->key, f->example);
	}
	return 0;
}

int walk_run(struct walk_ctx *c, yaml_node_t *n, const struct walk_section *s, void *obj)
{
	struct walk_map m = {.sec = s, .node = n};
	const yaml_node_pair_t *p;
	int rc;

	if (!walk_is_null(n)) {
		if (n->type != YAML_MAPPING_NODE)
			return walk_fail(c, n, "expected a mapping, found a %s", walk_kind(n));
		for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
			rc = walk_pair(c, &m, p, obj);
			if (rc)
				return rc;
		}
	}
	rc = check_required(c, &m);
	if (rc)
		return rc;
	return s->check ? s->check(c, &m, obj) : 0;
}

/* ---- lists ---- */

yaml_node_t *walk_lookup(struct walk_ctx *c, const yaml_node_t *n, const char *key)
{
	const yaml_node_pair_t *p;
	const char *k;

	if (!n || n->type != YAML_MAPPING_NODE)
		return NULL;
	for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		k = walk_scalar(walk_node(c, p->key));
		if (k && !strcmp(k, key))
			return walk_node(c, p->value);
	}
	return NULL;
}

/* Name an item before its keys are read, so that "rate" before "name" is
 * still reported as "limit 'per-client': rate ...".
 */
static void item_subject(struct walk_ctx *c, const yaml_node_t *n, const char *what, size_t i)
{
	const char *name = walk_scalar(walk_lookup(c, n, "name"));

	if (name && *name)
		snprintf(c->subj, sizeof(c->subj), "%s '%.*s'", what, WALK_SHOW, name);
	else
		snprintf(c->subj, sizeof(c->subj), "%s #%zu", what, i + 1);
}

int walk_list(struct walk_ctx *c, yaml_node_t *n, const char *key, const char *what, size_t max,
	      int (*item)(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj), void *obj)
{
	const yaml_node_item_t *it;
	char saved[WALK_SUBJ_LEN];
	yaml_node_t *e;
	size_t i = 0;
	int rc = 0;

	if (!n || walk_is_null(n))
		return 0;
	if (n->type != YAML_SEQUENCE_NODE)
		return walk_fail(c, n, "%s must be a list, found a %s", key, walk_kind(n));
	memcpy(saved, c->subj, sizeof(saved));
	for (it = n->data.sequence.items.start; it < n->data.sequence.items.top && !rc; it++) {
		e = walk_node(c, *it);
		if (i == max)
			return walk_fail(c, e, "too many %s (expected at most %zu)", key, max);
		if (what)
			item_subject(c, e, what, i);
		rc = item(c, e, i++, obj);
		memcpy(c->subj, saved, sizeof(saved));
	}
	return rc ? rc : (int)i;
}

int walk_list_nonempty(struct walk_ctx *c, yaml_node_t *n, const char *key, const char *what,
		       size_t max,
		       int (*item)(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj),
		       void *obj, const char *example)
{
	int rc = walk_list(c, n, key, what, max, item, obj);

	if (rc == 0)
		return walk_fail(c, n, "%s is empty (expected at least one, e.g. %s: %s)", key, key,
				 example);
	return rc < 0 ? rc : 0;
}
