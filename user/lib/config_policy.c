// SPDX-License-Identifier: MIT
/*
 * The policy schema (reference §4): a policy's limits, its rules and the
 * top section, as walk_field tables plus the checks that span several
 * keys. A rule's match is config_match.c; the files that hold a policy
 * (and the agent and coordinator files) are config.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/config.h"
#include "lib/config_schema.h"
#include "lib/overrides.h"
#include "tb_math.h"
#include "lib/units.h"
#include "lib/walk.h"
#include "lib/wire.h"

/* IPv6 per-source keys aggregate to this prefix unless prefix-v6 says. */
#define CFG_DEFAULT_SRC_PREFIX_V6 64

static const struct walk_enum actions[] = {
    {"pass", LL_ACT_PASS},
    {"drop", LL_ACT_DROP},
    {NULL, 0},
};

static const struct walk_enum key_modes[] = {
    {"none", LL_KEY_NONE},	   {"src-ip", LL_KEY_SRC_IP}, {"dst-ip", LL_KEY_DST_IP},
    {"dst-port", LL_KEY_DST_PORT}, {"flow", LL_KEY_FLOW},     {NULL, 0},
};

static const struct walk_enum unit_names[] = {
    {"packets", LL_UNIT_PACKETS},
    {"bytes", LL_UNIT_BYTES},
    {NULL, 0},
};

static const struct walk_enum scopes[] = {
    {"local", LL_SCOPE_LOCAL},
    {"global", LL_SCOPE_GLOBAL},
    {NULL, 0},
};

static const struct walk_enum modes[] = {
    {"enforce", LL_MODE_ENFORCE},
    {"shadow", LL_MODE_SHADOW},
    {NULL, 0},
};

static const struct walk_enum on_losses[] = {
    {"fail-closed", LL_ON_LOSS_FAIL_CLOSED},
    {"fallback", LL_ON_LOSS_FALLBACK},
    {"fail-open", LL_ON_LOSS_FAIL_OPEN},
    {NULL, 0},
};

const char *cfg_key_mode_name(uint8_t key_mode)
{
	return walk_enum_name(key_modes, key_mode);
}

const char *cfg_unit_name(uint8_t unit)
{
	return walk_enum_name(unit_names, unit);
}

const char *cfg_mode_name(uint8_t mode)
{
	return walk_enum_name(modes, mode);
}

const char *cfg_scope_name(uint8_t scope)
{
	return walk_enum_name(scopes, scope);
}

const char *cfg_on_loss_name(uint8_t on_loss)
{
	return walk_enum_name(on_losses, on_loss);
}

const char *cfg_action_name(uint8_t action)
{
	return walk_enum_name(actions, action);
}

/* Limits and rules both start with their name: one uniqueness check for both. */
_Static_assert(offsetof(struct cfg_limit, name) == 0, "name first");
_Static_assert(offsetof(struct cfg_rule, name) == 0, "name first");

static int check_unique(struct walk_ctx *c, const struct walk_map *m, const char *what,
			const void *items, size_t n, size_t stride, size_t line_off)
{
	const char *name = (const char *)items + n * stride, *other;
	int line;
	size_t i;

	for (i = 0; i < n; i++) {
		other = (const char *)items + i * stride;
		if (strcmp(other, name))
			continue;
		memcpy(&line, other + line_off, sizeof(line));
		return walk_fail_raw(
		    c, walk_get(m, "name"),
		    "duplicate %s name '%s' (first at line %d; expected unique names)", what, name,
		    line);
	}
	return 0;
}

/* ---- limits ---- */

#define LIM(m) WALK_AT(struct cfg_limit, m)

static const struct walk_field fallback_fields[] = {
    {"rate", WALK_COUNT, LIM(fallback_rate), .required = true, .example = "50", .min = 1,
     .max = TB_MAX_RATE},
    {"burst", WALK_COUNT, LIM(fallback_burst), .required = true, .example = "50", .min = 1,
     .max = TB_MAX_BURST},
};

static const struct walk_section fallback_section = WALK_SECTION(fallback_fields, NULL);

static int limit_check(struct walk_ctx *c, const struct walk_map *m, void *obj);

/* meter: true|false (the usage ledger; reference §6.3). */
static const struct walk_enum meter_bools[] = {
    {"false", 0},
    {"true", 1},
    {NULL, 0},
};

static const struct walk_field limit_fields[] = {
    {"name", WALK_NAME, LIM(name), .required = true, .example = "per-client"},
    {"key", WALK_ENUM, LIM(key_mode), .names = key_modes},
    {"prefix-v4", WALK_UINT, LIM(prefix_v4), .max = 32},
    {"prefix-v6", WALK_UINT, LIM(prefix_v6), .max = 128},
    {"unit", WALK_ENUM, LIM(unit), .names = unit_names},
    {"rate", WALK_COUNT, LIM(rate), .required = true, .example = "1000", .min = 1,
     .max = TB_MAX_RATE},
    {"burst", WALK_COUNT, LIM(burst), .required = true, .example = "2000", .min = 1,
     .max = TB_MAX_BURST},
    {"scope", WALK_ENUM, LIM(scope), .names = scopes},
    {"mode", WALK_ENUM, LIM(mode), .names = modes},
    {"on-loss", WALK_ENUM, LIM(on_loss), .names = on_losses},
    {"fallback", WALK_MAP, .sub = &fallback_section},
    {"overrides", WALK_PATH, LIM(overrides)},
    {"meter", WALK_ENUM, LIM(meter), .names = meter_bools},
};

static const struct walk_section limit_section = WALK_SECTION(limit_fields, limit_check);

/* Prefix aggregation only means something for an address key. */
static int limit_check_prefixes(struct walk_ctx *c, const struct walk_map *m, struct cfg_limit *l)
{
	static const char *const keys[] = {"prefix-v4", "prefix-v6"};
	yaml_node_t *n;
	size_t i;

	/* One IPv6 host usually owns a /64: a per-source key of /128 would let
	 * one of them own 2^64 buckets (reference §4: src-ip keys default to /64).
	 */
	if (l->key_mode == LL_KEY_SRC_IP && !walk_key(m, "prefix-v6"))
		l->prefix_v6 = CFG_DEFAULT_SRC_PREFIX_V6;
	if (l->key_mode == LL_KEY_SRC_IP || l->key_mode == LL_KEY_DST_IP)
		return 0;
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		n = walk_key(m, keys[i]);
		if (n)
			return walk_fail(c, n,
					 "%s applies only to key src-ip or dst-ip (key is '%s')",
					 keys[i], cfg_key_mode_name(l->key_mode));
	}
	return 0;
}

static int limit_check_scope(struct walk_ctx *c, const struct walk_map *m,
			     const struct cfg_limit *l)
{
	yaml_node_t *on_loss = walk_key(m, "on-loss");

	if (l->scope == LL_SCOPE_GLOBAL && state(c)->standalone)
		return walk_fail(
		    c, walk_get(m, "scope"),
		    "scope 'global' needs a coordinator (set coordinator: in the agent "
		    "file, or use scope: local)");
	if (on_loss && l->scope != LL_SCOPE_GLOBAL)
		return walk_fail(c, on_loss, "on-loss applies only to scope global (scope is '%s')",
				 cfg_scope_name(l->scope));
	return 0;
}

/* Fallback capacity is reserved out of the contract (reference §6): never above it. */
static int fallback_within(struct walk_ctx *c, yaml_node_t *fb, const char *key, uint64_t v,
			   uint64_t limit)
{
	char max[32];

	if (v <= limit)
		return 0;
	units_format_count(limit, max, sizeof(max));
	return walk_fail(c, walk_lookup(c, fb, key),
			 "fallback %s '%s' exceeds the limit's %s (expected at most %s)", key,
			 walk_scalar(walk_lookup(c, fb, key)), key, max);
}

static int limit_check_fallback(struct walk_ctx *c, const struct walk_map *m, struct cfg_limit *l)
{
	yaml_node_t *fb = walk_get(m, "fallback");
	int rc;

	l->has_fallback = fb != NULL;
	if (fb && (l->scope != LL_SCOPE_GLOBAL || l->on_loss != LL_ON_LOSS_FALLBACK))
		return walk_fail(c, walk_key(m, "fallback"),
				 "fallback applies only with scope: global and on-loss: fallback "
				 "(on-loss is '%s')",
				 cfg_on_loss_name(l->on_loss));
	if (!fb && l->on_loss == LL_ON_LOSS_FALLBACK)
		return walk_fail(c, walk_get(m, "on-loss"),
				 "on-loss 'fallback' needs fallback rate and burst (expected e.g. "
				 "fallback: {rate: 50, burst: 50})");
	if (!fb)
		return 0;
	rc = fallback_within(c, fb, "rate", l->fallback_rate, l->rate);
	return rc ? rc : fallback_within(c, fb, "burst", l->fallback_burst, l->burst);
}

/* overrides: only for an address key of a local limit; the file is read and
 * checked whole here, so `check` and a reload refuse a bad one.
 */
static int limit_check_overrides(struct walk_ctx *c, const struct walk_map *m, struct cfg_limit *l)
{
	yaml_node_t *n = walk_key(m, "overrides");
	struct ovr_entry *v = NULL;
	struct cfg_err inner = {0};
	size_t k = 0;
	int rc;

	if (!n)
		return 0;
	if (l->key_mode != LL_KEY_SRC_IP && l->key_mode != LL_KEY_DST_IP &&
	    l->key_mode != LL_KEY_DST_PORT)
		return walk_fail(c, n,
				 "overrides apply only to key src-ip, dst-ip or dst-port (key is "
				 "'%s')",
				 cfg_key_mode_name(l->key_mode));
	/* A global limit's overrides are leased as keys of their own, and a
	 * dst-port key is a protocol and a port: a line names only the port.
	 */
	if (l->key_mode == LL_KEY_DST_PORT && l->scope == LL_SCOPE_GLOBAL)
		return walk_fail(c, n,
				 "overrides of a key: dst-port limit apply only to scope local "
				 "(the coordinator leases an override as one key, and a port "
				 "override names no protocol)");
	if (l->scope == LL_SCOPE_GLOBAL && l->on_loss == LL_ON_LOSS_FALLBACK)
		return walk_fail(c, n,
				 "overrides on a global limit with on-loss: fallback are not "
				 "supported (the fallback share is the limit's, not each key's)");
	if (l->scope == LL_SCOPE_GLOBAL && state(c)->served)
		return 0; /* the coordinator read it; per-key grants carry its shares */
	if (l->key_mode == LL_KEY_DST_PORT)
		rc = ovr_load_ports(l->overrides, TB_MAX_RATE, TB_MAX_BURST, &v, &k, &inner);
	else
		rc = ovr_load(l->overrides, l->prefix_v4, l->prefix_v6, TB_MAX_RATE, TB_MAX_BURST,
			      &v, &k, &inner);
	if (rc == -EINVAL) {
		*c->err = inner;
		return rc;
	}
	if (rc)
		return walk_fail(c, walk_get(m, "overrides"), "%s", inner.msg);
	/* A global limit leases each override as a key of its own: it must
	 * name exactly one key.
	 */
	for (size_t i = 0; l->scope == LL_SCOPE_GLOBAL && i < k; i++) {
		uint8_t want = v[i].family == 4 ? l->prefix_v4 : l->prefix_v6;

		if (v[i].plen != want) {
			int w = snprintf(
			    inner.msg, sizeof(inner.msg),
			    "%.300s:%u: on a scope: global limit an override names one "
			    "key: its prefix must be /%u (the limit's prefix-v%d), not /%u",
			    l->overrides, v[i].line, want, v[i].family, v[i].plen);

			(void)w;
			cfg_err_at(&inner, l->overrides, v[i].line, 0);
			*c->err = inner;
			free(v);
			return -EINVAL;
		}
	}
	free(v);
	l->n_overrides = (uint32_t)k;
	return 0;
}

/* The coordinator meters what agents report of a global limit: nothing else. */
static int limit_check_meter(struct walk_ctx *c, const struct walk_map *m,
			     const struct cfg_limit *l)
{
	if (l->meter && l->scope != LL_SCOPE_GLOBAL)
		return walk_fail(c, walk_get(m, "meter"),
				 "meter applies only to scope global (scope is '%s')",
				 cfg_scope_name(l->scope));
	return 0;
}

static int limit_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_limit *l = obj;
	struct cfg_policy *pol = state(c)->pol;
	int rc;

	rc = check_unique(c, m, "limit", pol->limits, (size_t)(l - pol->limits), sizeof(*l),
			  offsetof(struct cfg_limit, line));
	if (!rc)
		rc = limit_check_prefixes(c, m, l);
	if (!rc)
		rc = limit_check_scope(c, m, l);
	if (!rc)
		rc = limit_check_fallback(c, m, l);
	if (!rc)
		rc = limit_check_overrides(c, m, l);
	if (!rc)
		rc = limit_check_meter(c, m, l);
	return rc;
}

static int limit_item(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	struct cfg_policy *pol = obj;
	struct cfg_limit *l = &pol->limits[i];
	int rc;

	memset(l, 0, sizeof(*l));
	l->prefix_v4 = 32;
	l->prefix_v6 = 128;
	set_pos(n, &l->line, &l->col);
	rc = walk_run(c, n, &limit_section, l);
	if (!rc)
		pol->n_limits = (uint32_t)i + 1;
	return rc;
}

/* ---- rules ---- */

static void limit_names(const struct cfg_policy *pol, char *buf, size_t size)
{
	size_t n = 0;
	uint32_t i;

	n = (size_t)snprintf(buf, size, "%s", pol->n_limits ? "" : "none are defined");
	for (i = 0; i < pol->n_limits && n < size; i++)
		n +=
		    (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", pol->limits[i].name);
}

static int rule_limit_item(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	const struct cfg_policy *pol = state(c)->pol;
	struct cfg_rule *r = obj;
	const char *name = walk_scalar(n);
	char list[200];
	uint32_t id;
	size_t j;

	if (!name)
		return walk_fail(c, n, "limits must list limit names, found a %s", walk_kind(n));
	for (id = 0; id < pol->n_limits && strcmp(pol->limits[id].name, name); id++)
		;
	if (id == pol->n_limits) {
		limit_names(pol, list, sizeof(list));
		return walk_fail(c, n,
				 "unknown limit '%.48s' (expected one of the policy's limits: %s)",
				 name, list);
	}
	for (j = 0; j < i; j++) {
		if (r->limit[j] == id)
			return walk_fail(
			    c, n, "limit '%s' is listed twice (expected each limit once)", name);
	}
	r->limit[i] = (uint8_t)id;
	r->n_limits = (uint8_t)i + 1;
	return 0;
}

static int rule_limits(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	return walk_list_nonempty(c, v, f->key, NULL, LL_MAX_RULE_LIMITS, rule_limit_item, obj,
				  "[per-client]");
}

/* action: limit (charge the rule's limits), pass or drop (charge nothing). */
static const struct walk_enum rule_actions[] = {
    {"limit", LL_RULE_LIMIT},
    {"pass", LL_RULE_PASS},
    {"drop", LL_RULE_DROP},
    {NULL, 0},
};

static int rule_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_rule *r = obj;
	struct cfg_policy *pol = state(c)->pol;
	int rc;

	rc = check_unique(c, m, "rule", pol->rules, (size_t)(r - pol->rules), sizeof(*r),
			  offsetof(struct cfg_rule, line));
	if (rc)
		return rc;
	if (r->action == LL_RULE_LIMIT && !walk_key(m, "limits"))
		return walk_fail(c, m->node,
				 "missing required key 'limits' (expected e.g. limits: "
				 "[per-client], or action: pass or drop)");
	if (r->action != LL_RULE_LIMIT && walk_key(m, "limits"))
		return walk_fail(c, walk_key(m, "limits"),
				 "limits apply only to action limit (action is '%s': it charges "
				 "nothing; expected no limits, or action: limit)",
				 r->action == LL_RULE_PASS ? "pass" : "drop");
	return 0;
}

static const struct walk_field rule_fields[] = {
    {"name", WALK_NAME, RULE(name), .required = true, .example = "dns"},
    {"match", WALK_MAP, .sub = &cfg_match_section},
    {"action", WALK_ENUM, RULE(action), .names = rule_actions},
    {"limits", WALK_CUSTOM, .example = "[per-client]", .fn = rule_limits},
};

static const struct walk_section rule_section = WALK_SECTION(rule_fields, rule_check);

static int rule_item(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	struct cfg_policy *pol = obj;
	struct cfg_rule *r = &pol->rules[i];
	int rc;

	memset(r, 0, sizeof(*r));
	set_pos(n, &r->line, &r->col);
	rc = walk_run(c, n, &rule_section, r);
	if (!rc)
		pol->n_rules = (uint32_t)i + 1;
	return rc;
}

/* ---- policy ---- */

#define POL(m) WALK_AT(struct cfg_policy, m)

/* More than max items in list n: an error at the first one past the bound,
 * naming the bound and what sets it.
 */
static int too_many(struct walk_ctx *c, yaml_node_t *n, const char *key, size_t max,
		    const char *why)
{
	size_t len;

	if (!n || n->type != YAML_SEQUENCE_NODE)
		return 0;
	len = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (len <= max)
		return 0;
	return walk_fail(c, walk_node(c, n->data.sequence.items.start[max]),
			 "too many %s: %zu, the bound is %zu (%s; expected at most %zu)", key, len,
			 max, why, max);
}

/* Limits first whatever their place in the file: rules refer to them by name. */
static int policy_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	int rc;

	rc = too_many(c, walk_get(m, "limits"), "limits", LL_MAX_LIMITS,
		      "LL_MAX_LIMITS: a rule names a limit by an 8-bit id, and the pinned "
		      "per-limit arrays and a coordinator report's entries (WIRE_MAX_ENTRIES) "
		      "hold this many");
	if (!rc)
		rc = too_many(c, walk_get(m, "rules"), "rules", LL_MAX_RULES,
			      "LL_MAX_RULES: the policy map holds this many in each of its "
			      "two slots");
	if (!rc)
		rc = walk_list(c, walk_get(m, "limits"), "limits", "limit", LL_MAX_LIMITS,
			       limit_item, obj);
	if (rc >= 0)
		rc = walk_list(c, walk_get(m, "rules"), "rules", "rule", LL_MAX_RULES, rule_item,
			       obj);
	return rc < 0 ? rc : 0;
}

static const struct walk_field policy_fields[] = {
    {"version", WALK_UINT, POL(version), .required = true, .example = "1", .min = 1,
     .max = UINT64_MAX},
    {"default", WALK_ENUM, POL(default_action), .names = actions},
    {"limits", WALK_CUSTOM, .fn = NULL}, /* both walked by policy_check */
    {"rules", WALK_CUSTOM, .fn = NULL},
};

const struct walk_section cfg_policy_section = WALK_SECTION(policy_fields, policy_check);

void cfg_policy_too_big(const char *path, uint64_t size, char *buf, size_t len)
{
	snprintf(buf, len,
		 "policy '%.200s' is %" PRIu64 " bytes, more than the %d a coordinator sends its "
		 "agents in one message (WIRE_MAX_POLICY; expected a smaller policy: fewer or "
		 "shorter rules)",
		 path, size, WIRE_MAX_POLICY);
}
