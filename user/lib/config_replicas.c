// SPDX-License-Identifier: MIT
/*
 * coord.yaml's replicas: section (reference §6.4): the etcd endpoints, the
 * key prefix, this replica's name and address, the etcd lease, and mutual
 * TLS to etcd. The rest of the coordinator's file is config.c's.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/config.h"
#include "lib/config_schema.h"
#include "lib/walk.h"

#define REPL(m) WALK_AT(struct cfg_replicas, m)

/* An etcd client URL: http://host:port or https://host:port (etcd's v3
 * JSON gateway; https needs replicas.tls).
 */
static int repl_etcd_item(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	static const struct walk_field hp = {"etcd", WALK_HOSTPORT, .size = CFG_ADDR_LEN,
					     .port = 2379};
	struct cfg_replicas *r = obj;
	const char *s = walk_scalar(n);
	char host[CFG_ADDR_LEN];
	yaml_node_t tmp;

	size_t at = s && !strncmp(s, "https://", 8) ? 8 : s && !strncmp(s, "http://", 7) ? 7 : 0;

	if (!at)
		return walk_fail(c, n,
				 "etcd endpoint '%.64s' is not an http:// or https:// URL (expected "
				 "e.g. http://127.0.0.1:2379)",
				 s ? s : "");
	/* The host:port after the scheme, checked as any address is. */
	tmp = *n;
	tmp.data.scalar.value = (yaml_char_t *)(s + at);
	tmp.data.scalar.length = strlen(s + at);
	if (walk_set(c, &hp, &tmp, host))
		return -EINVAL;
	snprintf(r->etcd[i], sizeof(r->etcd[i]), "%s%s", at == 8 ? "https://" : "http://", host);
	r->n_etcd = (uint32_t)i + 1;
	return 0;
}

static int repl_etcd(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	return walk_list_nonempty(c, v, f->key, NULL, CFG_MAX_COORDINATORS, repl_etcd_item, obj,
				  "[http://10.0.0.5:2379, http://10.0.0.6:2379]");
}

/* prefix: an absolute key path of name characters, at most 63 bytes. */
static int repl_prefix(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_replicas *r = obj;
	const char *s = walk_scalar(v);
	size_t n = s ? strlen(s) : 0;
	bool ok = n > 1 && n < sizeof(r->prefix) && s[0] == '/' && s[n - 1] != '/';

	for (size_t i = 0; ok && i < n; i++)
		ok = isalnum((unsigned char)s[i]) || strchr("_.-/", s[i]);
	if (!ok)
		return walk_bad_value(c, f, v, "is not a key prefix",
				      "/ then [A-Za-z0-9_.-/], at most 63, e.g. /leaseline/eu");
	memcpy(r->prefix, s, n + 1);
	return 0;
}

static int repl_tls(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	(void)f;
	return walk_run(c, v, &cfg_tls_section, &((struct cfg_replicas *)obj)->tls);
}

/* TLS to etcd is all or nothing: https:// endpoints exactly when tls: is set. */
static int repl_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	const struct cfg_replicas *r = obj;
	yaml_node_t *eps = walk_get(m, "etcd");

	for (uint32_t i = 0; eps && i < r->n_etcd; i++) {
		bool https = !strncmp(r->etcd[i], "https://", 8);

		if (https && !r->tls.set)
			return walk_fail_raw(c, eps,
					     "etcd endpoint '%s' is https:// but replicas has no tls: "
					     "(expected tls: {ca: ..., cert: ..., key: ...})",
					     r->etcd[i]);
		if (!https && r->tls.set)
			return walk_fail_raw(c, eps,
					     "etcd endpoint '%s' is plain http:// while replicas has "
					     "tls: (expected every endpoint https://)",
					     r->etcd[i]);
	}
	return 0;
}

static const struct walk_field replicas_fields[] = {
    {"etcd", WALK_CUSTOM, .required = true, .example = "[http://127.0.0.1:2379]", .fn = repl_etcd},
    {"prefix", WALK_CUSTOM, .fn = repl_prefix},
    {"node", WALK_NAME, REPL(node), .required = true, .example = "coord-a"},
    {"advertise", WALK_HOSTPORT, REPL(advertise), .required = true, .example = "10.0.0.5:7450",
     .port = CFG_COORD_PORT},
    {"ttl", WALK_DURATION, REPL(ttl_ns), .min = 5000000000ull, .max = 60000000000ull},
    {"tls", WALK_CUSTOM, .fn = repl_tls},
};

static const struct walk_section replicas_section = WALK_SECTION(replicas_fields, repl_check);

int cfg_coord_replicas(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_coord *co = obj;

	(void)f;
	co->has_replicas = true;
	return walk_run(c, v, &replicas_section, &co->replicas);
}

