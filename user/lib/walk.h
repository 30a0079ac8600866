/* SPDX-License-Identifier: MIT */
/*
 * Table-driven walk of a libyaml document into C structs: one loop checks
 * keys (unknown, duplicate, missing) and converts scalars by declared type;
 * every error becomes "FILE:LINE:COL: message". config.c and config_policy.c hold the
 * schema.
 */
#ifndef LEASELINE_LIB_WALK_H
#define LEASELINE_LIB_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "lib/cfg_types.h"

/* Input caps, for files and for a policy from the network alike: a size,
 * and a flow nesting depth (libyaml slows down with depth).
 */
#define WALK_MAX_BYTES (1024 * 1024)
#define WALK_MAX_DEPTH 64

/* Keys one mapping may have; the largest section (limit) has 11. */
#define WALK_MAX_FIELDS 16
/* "limit 'name'" with room for an over-long name that is being refused. */
#define WALK_SUBJ_LEN 96

struct walk_ctx {
	const char *file;	  /* as named in messages */
	const char *top;	  /* "policy", "agent file", ...: the subject at the top level */
	char subj[WALK_SUBJ_LEN]; /* "limit 'x'"; "" at the top level */
	struct cfg_err *err;
	yaml_document_t doc;
	bool have_doc;
	void *user; /* schema state, owned by config.c (config_schema.h) */
};

enum walk_type {
	WALK_UINT,  /* plain integer in [min, max], into an unsigned field of 1, 2, 4 or 8 bytes */
	WALK_COUNT, /* count with k/M/G in [min, max], same storage */
	WALK_DURATION, /* duration in ns in [min, max], uint64_t */
	WALK_ENUM,     /* one of names, into a uint8_t */
	WALK_NAME,     /* [A-Za-z0-9_.-], 1 to size - 1 characters */
	WALK_PATH,     /* a path, relative to the file's directory unless absolute */
	WALK_HOSTPORT, /* host:port, [v6]:port or host (then the field's default port) */
	WALK_MAP,      /* nested mapping walked with sub into the same object */
	WALK_CUSTOM,   /* fn, or only recorded for the section's check when fn is NULL */
};

struct walk_enum {
	const char *name;
	uint8_t value;
};

struct walk_field;

struct walk_map {
	const struct walk_section *sec;
	yaml_node_t *node;
	yaml_node_t *key[WALK_MAX_FIELDS]; /* by field index; NULL when absent */
	yaml_node_t *val[WALK_MAX_FIELDS];
};

struct walk_section {
	const struct walk_field *fields;
	size_t n_fields;
	/* Cross-field rules, after every key has been converted. */
	int (*check)(struct walk_ctx *c, const struct walk_map *m, void *obj);
};

struct walk_field {
	const char *key;
	enum walk_type type;
	size_t off, size; /* of the destination inside obj */
	bool required;
	const char *example; /* for "missing required key 'rate' (expected e.g. rate: 1000)" */
	uint64_t min, max;
	const struct walk_enum *names;	/* WALK_ENUM, ends with a NULL name */
	const struct walk_section *sub; /* WALK_MAP */
	int (*fn)(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *n, void *obj);
	uint16_t port; /* WALK_HOSTPORT default */
	bool any_port; /* WALK_HOSTPORT: port 0 too (a listener: the kernel picks one) */
};

#define WALK_SECTION(arr, chk)                                                                     \
	{                                                                                          \
		.fields = (arr), .n_fields = sizeof(arr) / sizeof((arr)[0]), .check = (chk)        \
	}
/* Offset and size of a member, for walk_field.off/.size. */
#define WALK_AT(type, member) .off = offsetof(type, member), .size = sizeof(((type *)0)->member)

/* Open path (text NULL) or parse text, load its single document and check
 * that the top level is a mapping. On success *root is set and walk_close()
 * must be called. Returns 0, -EINVAL or -errno of fopen.
 */
int walk_open(struct walk_ctx *c, const char *file, const char *text, size_t len,
	      struct cfg_err *err, yaml_node_t **root);
void walk_close(struct walk_ctx *c);

int walk_run(struct walk_ctx *c, yaml_node_t *n, const struct walk_section *s, void *obj);
/* Calls item(c, node, index, obj) for each entry of a list (null = empty).
 * what: "limit" sets the subject to "limit 'NAME'" or "limit #N" around each
 * item; NULL keeps it. key names the list in messages. Returns the number of
 * items or -EINVAL.
 */
int walk_list(struct walk_ctx *c, yaml_node_t *n, const char *key, const char *what, size_t max,
	      int (*item)(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj), void *obj);

/* Convert v into obj as field f says (what a section does for each of its
 * keys): for a list's items of a plain type. 0 or -EINVAL.
 */
int walk_set(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj);
/* As walk_list, and "KEY is empty" when there is no item. Returns 0 or -EINVAL. */
int walk_list_nonempty(struct walk_ctx *c, yaml_node_t *n, const char *key, const char *what,
		       size_t max,
		       int (*item)(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj),
		       void *obj, const char *example);

yaml_node_t *walk_node(struct walk_ctx *c, int index);
/* Value and key node of a walked key, NULL when absent. */
yaml_node_t *walk_get(const struct walk_map *m, const char *key);
yaml_node_t *walk_key(const struct walk_map *m, const char *key);
/* Value of key in any mapping node (NULL if n is not a mapping). */
yaml_node_t *walk_lookup(struct walk_ctx *c, const yaml_node_t *n, const char *key);
/* Edits between two names, a swap of neighbours counting as one ("mdoe");
 * SIZE_MAX beyond 32 characters. For "did you mean" hints.
 */
size_t walk_edit_distance(const char *a, const char *b);
size_t walk_line(const yaml_node_t *n); /* 1-based; 1 when n is NULL */
size_t walk_col(const yaml_node_t *n);
const char *walk_scalar(const yaml_node_t *n); /* NULL unless a scalar */
bool walk_is_null(const yaml_node_t *n);
const char *walk_kind(const yaml_node_t *n); /* "mapping", "list", "value" */
const char *walk_enum_name(const struct walk_enum *names, uint8_t value);
void walk_enum_list(const struct walk_enum *names, char *buf, size_t size); /* "a, b, c" */

/* "FILE:LINE:COL: SUBJECT: message" at n (1:1 when n is NULL); returns -EINVAL. */
int walk_fail(struct walk_ctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same without the subject. */
int walk_fail_raw(struct walk_ctx *c, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "SUBJECT: KEY 'VALUE' WHAT (expected EXPECT)", or "KEY is empty", or
 * "KEY must be a single value" when v is not a scalar. Returns -EINVAL.
 */
int walk_bad_value(struct walk_ctx *c, const struct walk_field *f, const yaml_node_t *v,
		   const char *what, const char *expect);
/* A WALK_PATH's value into dst (f->size bytes): relative to the file. */
int walk_set_path(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *dst);

#endif /* LEASELINE_LIB_WALK_H */
