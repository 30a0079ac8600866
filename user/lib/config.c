// SPDX-License-Identifier: MIT
/*
 * leaseline's configuration schema (reference §4): policy, agent and coordinator
 * files as walk_field tables plus the rules that span several keys. A result is
 * copied out only when the whole file is good, so a refused reload changes nothing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "lib/clock.h"
#include "lib/config.h"
#include "lib/overrides.h"
#include "lib/sets.h"
#include "lib/lease_clock.h"
#include "tb_math.h"
#include "lib/tls.h"
#include "lib/units.h"
#include "lib/walk.h"
#include "lib/wire.h"

/* Lease times: under a millisecond the refreshes become the workload; over an
 * hour a vanished gateway would sit on its share of the contract for too long.
 */
#define CFG_LEASE_MIN_NS       NSEC_PER_MSEC
#define CFG_LEASE_MAX_NS       LEASE_TTL_MAX_NS
#define CFG_DEFAULT_TTL_NS     (2 * NSEC_PER_SEC)
#define CFG_DEFAULT_REFRESH_NS (500 * NSEC_PER_MSEC)
/* Bucket map entries: 2^28 buckets of ~100 bytes (key + value) is ~25 GiB. */
#define CFG_MAX_KEYS_LIMIT   (1ULL << 28)
#define CFG_DEFAULT_MAX_KEYS 1048576
/* Connections without HELLO one address may hold (coord.yaml
 * pending-per-address): silent peers cannot take the spare slots; raise it
 * behind a TCP proxy or NAT, where every agent has one address.
 */
#define CFG_DEFAULT_PENDING_PER_ADDRESS 4
/* IPv6 per-source keys aggregate to this prefix unless prefix-v6 says. */
#define CFG_DEFAULT_SRC_PREFIX_V6 64
/* Ports of reference §2. */
#define CFG_COORD_PORT 7450
/* Gateways a coordinator reserves fallback shares for (coord.yaml gateways:). */
#define CFG_DEFAULT_GATEWAYS   8
#define CFG_MAX_GATEWAYS       16384
#define CFG_AGENT_METRICS_PORT 9475
#define CFG_COORD_METRICS_PORT 9476
#define CFG_DEFAULT_STATE_DIR  "/var/lib/leaseline"
#define CFG_DEFAULT_LISTEN     "127.0.0.1:7450"

/* What the checks of one file need besides the object being filled. */
struct cfg_state {
	bool standalone;	/* policy: scope global is refused */
	bool served;		/* a policy a coordinator served: its global limits' override files are the coordinator's */
	struct cfg_policy *pol; /* the policy being built, or where an agent's/coordinator's goes */
	struct cfg_agent *agent;
};

static struct cfg_state *state(struct walk_ctx *c)
{
	return c->user;
}

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

static const struct walk_enum xdp_modes[] = {
    {"native", CFG_XDP_NATIVE},
    {"generic", CFG_XDP_GENERIC},
    {"auto", CFG_XDP_AUTO},
    {NULL, 0},
};

static const struct walk_enum protos[] = {
    {"any", 0},
    {"tcp", IPPROTO_TCP},
    {"udp", IPPROTO_UDP},
    {"icmp", IPPROTO_ICMP},
    {"icmpv6", IPPROTO_ICMPV6},
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

const char *cfg_xdp_mode_name(uint8_t mode)
{
	return walk_enum_name(xdp_modes, mode);
}

static const struct walk_enum attach_modes[] = {
    {"direct", CFG_ATTACH_DIRECT},
    {"multiprog", CFG_ATTACH_MULTIPROG},
    {NULL, 0},
};

const char *cfg_attach_mode_name(uint8_t mode)
{
	return walk_enum_name(attach_modes, mode);
}

const char *cfg_proto_name(uint8_t proto)
{
	const struct walk_enum *e;

	for (e = protos; e->name; e++) {
		if (e->value == proto)
			return e->name;
	}
	return NULL;
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

static void set_pos(const yaml_node_t *n, int *line, int *col)
{
	*line = (int)walk_line(n);
	*col = (int)walk_col(n);
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
static int limit_check_overrides(struct walk_ctx *c, const struct walk_map *m,
				 struct cfg_limit *l)
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
			int w = snprintf(inner.msg, sizeof(inner.msg),
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

#define RULE(m) WALK_AT(struct cfg_rule, m)

static int match_proto(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_rule *r = obj;
	const char *s = walk_scalar(v);
	const struct walk_enum *e;
	char list[96], expect[140];
	uint64_t x;

	for (e = protos; s && e->name; e++) {
		if (!strcmp(s, e->name)) {
			r->proto = e->value;
			return 0;
		}
	}
	if (s && !units_parse_uint(s, &x) && x <= UINT8_MAX) {
		r->proto = (uint8_t)x;
		return 0;
	}
	walk_enum_list(protos, list, sizeof(list));
	snprintf(expect, sizeof(expect), "one of: %s, or a number 0..255", list);
	return walk_bad_value(c, f, v, "is not valid", expect);
}

/* One "53", "1000-2000" or "53,80,8000-8100" into r's dport ranges. */
static int dport_add(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v,
		     struct cfg_rule *r, const char *s)
{
	char buf[256], *tok, *save = NULL;

	if (strlen(s) >= sizeof(buf))
		return walk_bad_value(c, f, v, "is too long", "at most 8 ports or ranges");
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		for (char *e = tok + strlen(tok); e > tok && e[-1] == ' ';)
			*--e = '\0';
		if (r->n_dport == LL_MAX_DPORT_RANGES)
			return walk_fail(
			    c, v,
			    "dst-port lists more than %d ports or ranges (the bound "
			    "LL_MAX_DPORT_RANGES: each rule holds %d, checked per packet; "
			    "expected at most %d, or split the rule)",
			    LL_MAX_DPORT_RANGES, LL_MAX_DPORT_RANGES, LL_MAX_DPORT_RANGES);
		if (units_parse_port_range(tok, &r->dport[r->n_dport].lo, &r->dport[r->n_dport].hi))
			return walk_fail(
			    c, v,
			    "dst-port '%.40s' is not a port or port range (expected e.g. "
			    "53, 1000-2000, \"53,80,8000-8100\" or [53, 80]; ports "
			    "0..65535, low <= high)",
			    tok);
		r->n_dport++;
	}
	if (!r->n_dport)
		return walk_bad_value(c, f, v, "names no port",
				      "e.g. 53 or 1000-2000, ports 0..65535, low <= high");
	return 0;
}

static int match_dport(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_rule *r = obj;
	const char *s = walk_scalar(v);
	const yaml_node_item_t *it;
	int rc;

	r->n_dport = 0;
	if (v->type == YAML_SEQUENCE_NODE) {
		if (v->data.sequence.items.start == v->data.sequence.items.top)
			return walk_fail(c, v,
					 "dst-port is an empty list (expected e.g. [53, 80])");
		for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
			yaml_node_t *e = walk_node(c, *it);
			const char *es = walk_scalar(e);

			if (!es || !*es)
				return walk_fail(c, e,
						 "dst-port items must be ports or ranges, found a "
						 "%s (expected e.g. [53, 1000-2000])",
						 walk_kind(e));
			rc = dport_add(c, f, e, r, es);
			if (rc)
				return rc;
		}
	} else {
		if (!s || !*s)
			return walk_bad_value(c, f, v, "is not a port or port range",
					      "e.g. 53 or 1000-2000, ports 0..65535, low <= high");
		rc = dport_add(c, f, v, r, s);
		if (rc)
			return rc;
	}
	r->has_dport = true;
	return 0;
}

/* ---- tcp-flags ---- */

static const struct walk_enum tcp_flag_names[] = {
    {"syn", 0x02}, {"fin", 0x01}, {"rst", 0x04}, {"psh", 0x08}, {"ack", 0x10},
    {"urg", 0x20}, {"ece", 0x40}, {"cwr", 0x80}, {NULL, 0},
};

#define TCP_FLAGS_EXPECT                                                                           \
	"syn (SYN set, ACK clear), or VALUE/MASK with flags fin, syn, rst, psh, ack, urg, "        \
	"ece, cwr joined by ',' or '|', none, or numbers: e.g. syn/syn,ack or 0x02/0x12"

/* "syn,ack", "syn|ack", "none", "0x12" or "18" (len bytes at s, a part of
 * the value full) into *out.
 */
static int tcp_flag_set(struct walk_ctx *c, yaml_node_t *v, const char *full, const char *s,
			size_t len, bool value, uint8_t *out)
{
	char buf[64], *tok, *save = NULL;
	uint8_t x = 0;

	if (!len || len >= sizeof(buf))
		return walk_fail(c, v,
				 "tcp-flags '%.60s' has an empty or overlong %s (expected %s)",
				 full, value ? "value" : "mask", TCP_FLAGS_EXPECT);
	memcpy(buf, s, len);
	buf[len] = '\0';
	for (tok = strtok_r(buf, ",|", &save); tok; tok = strtok_r(NULL, ",|", &save)) {
		const struct walk_enum *e, *best = NULL;
		size_t d, best_d = SIZE_MAX;
		char *end;
		unsigned long n;

		while (*tok == ' ')
			tok++;
		for (char *t = tok + strlen(tok); t > tok && t[-1] == ' ';)
			*--t = '\0';
		if (value && !strcmp(tok, "none"))
			continue;
		n = strtoul(tok, &end, 0);
		if (*tok >= '0' && *tok <= '9' && !*end) {
			if (n > 0xff)
				return walk_fail(c, v,
						 "tcp-flags '%.60s': %s is out of range (expected "
						 "0..255, 0xff)",
						 full, tok);
			x |= (uint8_t)n;
			continue;
		}
		for (e = tcp_flag_names; e->name; e++) {
			if (!strcmp(tok, e->name))
				break;
			d = walk_edit_distance(tok, e->name);
			if (d < best_d) {
				best_d = d;
				best = e;
			}
		}
		if (e->name) {
			x |= e->value;
			continue;
		}
		return walk_fail(c, v,
				 "tcp-flags '%.60s': unknown TCP flag '%.16s'%s%s%s (expected %s)",
				 full, tok, best && best_d <= 1 ? "; did you mean '" : "",
				 best && best_d <= 1 ? best->name : "",
				 best && best_d <= 1 ? "'?" : "", TCP_FLAGS_EXPECT);
	}
	*out = x;
	return 0;
}

static int match_tcp_flags(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v,
			   void *obj)
{
	struct cfg_rule *r = obj;
	const char *s = walk_scalar(v), *slash;
	uint8_t value, mask;
	int rc;

	if (!s || !*s)
		return walk_bad_value(c, f, v, "is not valid", TCP_FLAGS_EXPECT);
	if (!strcmp(s, "syn")) {
		/* A connection's first packet: SYN without ACK (the SYN-ACK and
		 * everything after carry ACK).
		 */
		r->tcp_mask = 0x02 | 0x10;
		r->tcp_value = 0x02;
		r->has_tcp_flags = true;
		return 0;
	}
	slash = strchr(s, '/');
	if (!slash) {
		/* Say so of a misspelt flag first: "sin" is more likely than a missing mask. */
		rc = tcp_flag_set(c, v, s, s, strlen(s), true, &value);
		return rc ? rc : walk_bad_value(c, f, v, "has no mask", TCP_FLAGS_EXPECT);
	}
	rc = tcp_flag_set(c, v, s, s, (size_t)(slash - s), true, &value);
	if (!rc)
		rc = tcp_flag_set(c, v, s, slash + 1, strlen(slash + 1), false, &mask);
	if (rc)
		return rc;
	if (!mask)
		return walk_bad_value(c, f, v, "has an empty mask: it tests nothing",
				      "a mask with at least one flag, e.g. syn/syn,ack");
	if (value & ~mask)
		return walk_fail(c, v,
				 "tcp-flags '%.60s' never matches: the value sets flags outside "
				 "the mask (expected VALUE within MASK, e.g. syn/syn,ack)",
				 s);
	r->tcp_mask = mask;
	r->tcp_value = value;
	r->has_tcp_flags = true;
	return 0;
}

/* ---- icmp-type (read by match_check, which knows the protocol) ---- */

struct icmp_name {
	const char *name;
	int v4, v6; /* the type under icmp and icmpv6; -1: none */
};

static const struct icmp_name icmp_names[] = {
    {"echo-reply", 0, 129},
    {"destination-unreachable", 3, 1},
    {"source-quench", 4, -1},
    {"redirect", 5, 137},
    {"echo-request", 8, 128},
    {"router-advertisement", 9, 134},
    {"router-solicitation", 10, 133},
    {"time-exceeded", 11, 3},
    {"parameter-problem", 12, 4},
    {"timestamp-request", 13, -1},
    {"timestamp-reply", 14, -1},
    {"packet-too-big", -1, 2},
    {"neighbor-solicitation", -1, 135},
    {"neighbor-advertisement", -1, 136},
    {NULL, 0, 0},
};

#define ICMP_TYPE_EXPECT                                                                           \
	"a type 0..255, a range such as 3-5, or a name such as echo-request, echo-reply, "         \
	"destination-unreachable, time-exceeded; or a list of them"

static int icmp_one(struct walk_ctx *c, yaml_node_t *v, const char *s, bool v6, uint32_t types[8])
{
	const struct icmp_name *e, *best = NULL;
	size_t d, best_d = SIZE_MAX;
	uint16_t lo, hi;
	char *end;
	unsigned long a, b;

	if (!s || !*s)
		return walk_fail(c, v, "icmp-type items must be types, found a %s (expected %s)",
				 walk_kind(v), ICMP_TYPE_EXPECT);
	if (*s >= '0' && *s <= '9') {
		a = strtoul(s, &end, 10);
		b = a;
		if (*end == '-' && end[1] >= '0' && end[1] <= '9')
			b = strtoul(end + 1, &end, 10);
		if (*end || a > 255 || b > 255 || a > b)
			return walk_fail(c, v,
					 "icmp-type '%.40s' is not a type or range (expected %s)",
					 s, ICMP_TYPE_EXPECT);
		lo = (uint16_t)a;
		hi = (uint16_t)b;
	} else {
		for (e = icmp_names; e->name; e++) {
			if (!strcmp(s, e->name))
				break;
			d = walk_edit_distance(s, e->name);
			if (d < best_d) {
				best_d = d;
				best = e;
			}
		}
		if (!e->name)
			return walk_fail(
			    c, v, "icmp-type '%.40s' is not a known type%s%s%s (expected %s)", s,
			    best && 3 * best_d <= strlen(s) + 1 ? "; did you mean '" : "",
			    best && 3 * best_d <= strlen(s) + 1 ? best->name : "",
			    best && 3 * best_d <= strlen(s) + 1 ? "'?" : "", ICMP_TYPE_EXPECT);
		if ((v6 ? e->v6 : e->v4) < 0)
			return walk_fail(
			    c, v,
			    "icmp-type '%s' is an %s type, but proto is %s (expected a "
			    "number, or proto %s)",
			    s, v6 ? "ICMP" : "ICMPv6", v6 ? "icmpv6" : "icmp",
			    v6 ? "icmp" : "icmpv6");
		lo = hi = (uint16_t)(v6 ? e->v6 : e->v4);
	}
	for (unsigned int t = lo; t <= hi; t++)
		types[t >> 5] |= 1u << (t & 31);
	return 0;
}

static int icmp_types_parse(struct walk_ctx *c, yaml_node_t *v, bool v6, struct cfg_rule *r)
{
	const yaml_node_item_t *it;
	int rc;

	memset(r->icmp_types, 0, sizeof(r->icmp_types));
	if (v->type == YAML_SEQUENCE_NODE) {
		if (v->data.sequence.items.start == v->data.sequence.items.top)
			return walk_fail(
			    c, v, "icmp-type is an empty list (expected e.g. [echo-request])");
		for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
			yaml_node_t *e = walk_node(c, *it);

			rc = icmp_one(c, e, walk_scalar(e), v6, r->icmp_types);
			if (rc)
				return rc;
		}
	} else {
		rc = icmp_one(c, v, walk_scalar(v), v6, r->icmp_types);
		if (rc)
			return rc;
	}
	r->has_icmp = true;
	return 0;
}

static int prefix_error(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, int rc,
			uint8_t family, uint8_t *addr, uint8_t plen)
{
	char text[INET6_ADDRSTRLEN], expect[80];

	if (rc == -ERANGE)
		return walk_bad_value(c, f, v, "has a prefix length out of range",
				      "at most /32 for IPv4 and /128 for IPv6");
	if (rc != -EDOM)
		return walk_bad_value(c, f, v, "is not a prefix",
				      "e.g. 198.18.0.0/15 or 2001:db8::/32");
	units_prefix_mask(family, addr, plen);
	inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, text, sizeof(text));
	snprintf(expect, sizeof(expect), "%s/%u", text, plen);
	return walk_bad_value(c, f, v, "has host bits set", expect);
}

/* src and dst: the field's key says which half of the rule it fills. */
static int match_prefix(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_rule *r = obj;
	bool src = !strcmp(f->key, "src");
	uint8_t *family = src ? &r->src_family : &r->dst_family;
	uint8_t *addr = src ? r->src_addr : r->dst_addr;
	uint8_t *plen = src ? &r->src_plen : &r->dst_plen;
	const char *s = walk_scalar(v);
	int rc;

	rc = s ? units_parse_prefix(s, family, addr, plen) : -EINVAL;
	if (rc)
		return prefix_error(c, f, v, rc, *family, addr, *plen);
	*(src ? &r->has_src : &r->has_dst) = true;
	return 0;
}

static void proto_text(uint8_t proto, char *buf, size_t size)
{
	const char *name = cfg_proto_name(proto);

	if (name)
		snprintf(buf, size, "%s", name);
	else
		snprintf(buf, size, "%u", proto);
}

/* A match that can never be true is a mistake, not a rule. */
static int match_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_rule *r = obj;
	uint8_t family = r->has_src ? r->src_family : r->dst_family;
	char proto[8];

	proto_text(r->proto, proto, sizeof(proto));
	if (r->has_dport && r->proto != IPPROTO_TCP && r->proto != IPPROTO_UDP)
		return walk_fail(c, walk_key(m, "dst-port"),
				 "dst-port needs proto tcp or udp (proto is '%s')", proto);
	if (r->has_dport && r->frag == LL_FRAG_ONLY)
		return walk_fail(c, walk_get(m, "fragments"),
				 "fragments 'only' never matches with dst-port: a non-first "
				 "fragment carries no ports (expected a rule without dst-port)");
	if (r->has_tcp_flags && r->proto != IPPROTO_TCP)
		return walk_fail(c, walk_key(m, "tcp-flags"),
				 "tcp-flags needs proto tcp (proto is '%s')", proto);
	if (r->has_tcp_flags && r->frag == LL_FRAG_ONLY)
		return walk_fail(
		    c, walk_get(m, "fragments"),
		    "fragments 'only' never matches with tcp-flags: a non-first "
		    "fragment carries no TCP header (expected a rule without tcp-flags)");
	if (walk_get(m, "icmp-type")) {
		int rc;

		if (r->proto != IPPROTO_ICMP && r->proto != IPPROTO_ICMPV6)
			return walk_fail(c, walk_key(m, "icmp-type"),
					 "icmp-type needs proto icmp or icmpv6 (proto is '%s')",
					 proto);
		if (r->frag == LL_FRAG_ONLY)
			return walk_fail(
			    c, walk_get(m, "fragments"),
			    "fragments 'only' never matches with icmp-type: a non-first "
			    "fragment carries no ICMP header (expected a rule without "
			    "icmp-type)");
		rc = icmp_types_parse(c, walk_get(m, "icmp-type"), r->proto == IPPROTO_ICMPV6, r);
		if (rc)
			return rc;
	}
	if (r->has_src && r->has_dst && r->src_family != r->dst_family)
		return walk_fail(c, walk_get(m, "dst"),
				 "dst is IPv%u but src is IPv%u (expected one address family)",
				 r->dst_family, r->src_family);
	if ((r->proto == IPPROTO_ICMP && family == 6) ||
	    (r->proto == IPPROTO_ICMPV6 && family == 4))
		return walk_fail(c, walk_get(m, "proto"),
				 "proto '%s' never matches IPv%u addresses (expected %s)", proto,
				 family, family == 4 ? "icmp" : "icmpv6");
	return 0;
}

/* src-set and dst-set: a file of prefixes (sets.h), read and checked whole
 * here, once however many rules name it, so `check` and a reload refuse a
 * bad one; every set of the policy counts against LL_MAX_SET_ENTRIES.
 */
static int match_set(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_rule *r = obj;
	struct cfg_policy *pol = state(c)->pol;
	const char *s = walk_scalar(v), *slash = strrchr(c->file, '/');
	int dir = s && s[0] != '/' && slash ? (int)(slash - c->file + 1) : 0, n, rc;
	struct cfg_err inner = {0};
	struct set_entry *e = NULL;
	char path[CFG_PATH_LEN];
	uint32_t i;
	size_t k = 0;

	if (!s || !*s)
		return walk_bad_value(c, f, v, "is not a file name",
				      "a file of prefixes, e.g. allow.txt (relative to the policy)");
	n = snprintf(path, sizeof(path), "%.*s%s", dir, c->file, s);
	if (n < 0 || (size_t)n >= sizeof(path))
		return walk_bad_value(c, f, v, "is too long", "a path of at most 4095 bytes");
	for (i = 0; i < pol->n_sets && strcmp(pol->sets[i].path, path); i++)
		;
	if (i == pol->n_sets) {
		if (pol->n_sets == LL_MAX_SETS)
			return walk_fail(c, v,
					 "more than %d set files in one policy (the bound "
					 "LL_MAX_SETS; expected at most %d: merge sets into fewer "
					 "files)",
					 LL_MAX_SETS, LL_MAX_SETS);
		rc = set_load(path, LL_MAX_SET_ENTRIES - pol->set_entries, pol->set_entries, &e, &k,
			      &inner);
		free(e);
		if (rc == -EINVAL) {
			*c->err = inner;
			return rc;
		}
		if (rc)
			return walk_fail(c, v, "%s", inner.msg);
		snprintf(pol->sets[i].path, sizeof(pol->sets[i].path), "%s", path);
		pol->sets[i].n = (uint32_t)k;
		set_pos(v, &pol->sets[i].line, &pol->sets[i].col);
		pol->set_entries += (uint32_t)k;
		pol->n_sets++;
	}
	*(!strcmp(f->key, "src-set") ? &r->src_set : &r->dst_set) = (uint8_t)(i + 1);
	return 0;
}

static const struct walk_enum frag_matches[] = {
    {"any", LL_FRAG_ANY}, {"only", LL_FRAG_ONLY}, {"none", LL_FRAG_NONE}, {NULL, 0}};

static const struct walk_field match_fields[] = {
    {"proto", WALK_CUSTOM, RULE(proto), .fn = match_proto},
    {"dst-port", WALK_CUSTOM, RULE(dport), .fn = match_dport},
    {"tcp-flags", WALK_CUSTOM, RULE(tcp_mask), .fn = match_tcp_flags},
    {"icmp-type", WALK_CUSTOM, RULE(icmp_types), .fn = NULL}, /* read by match_check */
    {"src", WALK_CUSTOM, RULE(src_addr), .fn = match_prefix},
    {"dst", WALK_CUSTOM, RULE(dst_addr), .fn = match_prefix},
    {"src-set", WALK_CUSTOM, RULE(src_set), .fn = match_set},
    {"dst-set", WALK_CUSTOM, RULE(dst_set), .fn = match_set},
    {"fragments", WALK_ENUM, RULE(frag), .names = frag_matches},
};

static const struct walk_section match_section = WALK_SECTION(match_fields, match_check);

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
    {"match", WALK_MAP, .sub = &match_section},
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

static const struct walk_section policy_section = WALK_SECTION(policy_fields, policy_check);

void cfg_policy_too_big(const char *path, uint64_t size, char *buf, size_t len)
{
	snprintf(buf, len,
		 "policy '%.200s' is %" PRIu64 " bytes, more than the %d a coordinator sends its "
		 "agents in one message (WIRE_MAX_POLICY; expected a smaller policy: fewer or "
		 "shorter rules)",
		 path, size, WIRE_MAX_POLICY);
}

/* An agent's or coordinator's policy file. Its own errors already carry its
 * name; one that cannot be read is reported where the outer file names it.
 */
static int load_policy(struct walk_ctx *c, yaml_node_t *at, const char *path, bool standalone)
{
	struct cfg_policy *pol = state(c)->pol;
	struct cfg_err inner;
	int rc;

	if (!pol)
		return 0;
	rc = cfg_policy_load(path, standalone, pol, &inner);
	if (rc == -EINVAL)
		*c->err = inner;
	else if (rc)
		walk_fail_raw(c, at, "%s", inner.msg);
	return rc;
}

/* ---- agent ---- */

#define AGENT(m) WALK_AT(struct cfg_agent, m)
#define IFACE(m) WALK_AT(struct cfg_iface, m)

/* As the kernel's dev_valid_name(): short, not . or .., no '/', ':' or blanks. */
static bool ifname_ok(const char *s)
{
	size_t i;

	if (!s || !*s || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (i = 0; s[i]; i++) {
		if (i == sizeof(((struct cfg_iface *)0)->name) - 1 || s[i] <= ' ' || s[i] == '/' ||
		    s[i] == ':' || s[i] == 0x7f)
			return false;
	}
	return true;
}

static int iface_name(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	const struct cfg_agent *a = state(c)->agent;
	struct cfg_iface *ifc = obj;
	const char *s = walk_scalar(v);
	const struct cfg_iface *o;

	if (!ifname_ok(s))
		return walk_bad_value(c, f, v, "is not an interface name",
				      "1 to 15 characters without '/', ':' or spaces");
	for (o = a->ifaces; o < ifc; o++) {
		if (!strcmp(o->name, s))
			return walk_fail(
			    c, v, "name '%s' is listed twice (expected each interface once)", s);
	}
	memcpy(ifc->name, s, strlen(s) + 1);
	return 0;
}

static const struct walk_field iface_fields[] = {
    {"name", WALK_CUSTOM, IFACE(name), .required = true, .example = "eth0", .fn = iface_name},
    {"mode", WALK_ENUM, IFACE(mode), .names = xdp_modes},
};

static const struct walk_section iface_section = WALK_SECTION(iface_fields, NULL);

static int iface_item(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	struct cfg_agent *a = obj;
	int rc;

	memset(&a->ifaces[i], 0, sizeof(a->ifaces[i]));
	rc = walk_run(c, n, &iface_section, &a->ifaces[i]);
	if (!rc)
		a->n_ifaces = (uint32_t)i + 1;
	return rc;
}

static int agent_ifaces(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	return walk_list_nonempty(c, v, f->key, "interface", LL_MAX_IFACES, iface_item, obj,
				  "[{name: eth0, mode: native}]");
}

/* ---- tls: the same section in both daemons' files ---- */

#define TLS(m) WALK_AT(struct cfg_tls, m)

static const struct walk_field tls_fields[] = {
    {"cert", WALK_PATH, TLS(cert), .required = true, .example = "/etc/leaseline/node.crt"},
    {"key", WALK_PATH, TLS(key), .required = true, .example = "/etc/leaseline/node.key"},
    {"ca", WALK_PATH, TLS(ca), .required = true, .example = "/etc/leaseline/ca.crt"},
};

static int tls_set(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	(void)c;
	(void)m;
	((struct cfg_tls *)obj)->set = true;
	return 0;
}

static const struct walk_section tls_section = WALK_SECTION(tls_fields, tls_set);

static int agent_tls(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	(void)f;
	return walk_run(c, v, &tls_section, &((struct cfg_agent *)obj)->tls);
}

static int coord_tls(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	(void)f;
	return walk_run(c, v, &tls_section, &((struct cfg_coord *)obj)->tls);
}

static const struct walk_enum bools[] = {
    {"false", 0},
    {"true", 1},
    {NULL, 0},
};

static const struct walk_field coordinator_fields[] = {
    {"address", WALK_HOSTPORT, AGENT(coordinator), .required = true, .example = CFG_DEFAULT_LISTEN,
     .port = CFG_COORD_PORT},
};

static const struct walk_section coordinator_section = WALK_SECTION(coordinator_fields, NULL);

/* Standalone (a local policy) or coordinated (the policy comes by lease), never both. */
static int agent_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_agent *a = obj;
	yaml_node_t *pol = walk_key(m, "policy"), *coord = walk_key(m, "coordinator");

	a->has_coordinator = coord != NULL;
	a->has_metrics = walk_get(m, "metrics") != NULL;
	if (!walk_get(m, "max-flow-keys"))
		a->max_flow_keys = a->max_keys;
	if (!pol && !coord)
		return walk_fail_raw(c, m->node,
				     "agent file needs policy: (standalone) or coordinator: "
				     "(coordinated), found neither");
	if (pol && coord)
		return walk_fail_raw(
		    c, walk_line(pol) > walk_line(coord) ? pol : coord,
		    "agent file has both policy: and coordinator: (expected one: "
		    "policy: for a standalone agent, coordinator: for a coordinated one)");
	return pol ? load_policy(c, walk_get(m, "policy"), a->policy_path, true) : 0;
}

/* attach: {mode: direct|multiprog, priority: N}. A priority only orders
 * programs of a dispatcher: with direct it would be silently meaningless.
 */
static const struct walk_field attach_fields[] = {
    {"mode", WALK_ENUM, AGENT(attach_mode), .names = attach_modes},
    {"priority", WALK_UINT, AGENT(attach_priority), .min = 0, .max = CFG_MAX_ATTACH_PRIORITY},
};

static int attach_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	const struct cfg_agent *a = obj;
	yaml_node_t *prio = walk_get(m, "priority");

	if (prio && a->attach_mode != CFG_ATTACH_MULTIPROG)
		return walk_fail(
		    c, prio,
		    "priority applies only to mode: multiprog (expected mode: multiprog "
		    "with it, or no priority)");
	return 0;
}

static const struct walk_section attach_section = WALK_SECTION(attach_fields, attach_check);

static const struct walk_field agent_fields[] = {
    {"node", WALK_NAME, AGENT(node)},
    {"interfaces", WALK_CUSTOM, .required = true, .example = "[{name: eth0, mode: native}]",
     .fn = agent_ifaces},
    {"pin-dir", WALK_PATH, AGENT(pin_dir)},
    {"policy", WALK_PATH, AGENT(policy_path)},
    {"coordinator", WALK_MAP, .sub = &coordinator_section},
    {"metrics", WALK_HOSTPORT, AGENT(metrics), .port = CFG_AGENT_METRICS_PORT},
    {"max-keys", WALK_UINT, AGENT(max_keys), .min = 1, .max = CFG_MAX_KEYS_LIMIT},
    {"max-flow-keys", WALK_UINT, AGENT(max_flow_keys), .min = 0, .max = CFG_MAX_KEYS_LIMIT},
    {"tls", WALK_CUSTOM, .fn = agent_tls},
    {"attach", WALK_MAP, .sub = &attach_section},
};

static const struct walk_section agent_section = WALK_SECTION(agent_fields, agent_check);

/* ---- coordinator ---- */

#define COORD(m) WALK_AT(struct cfg_coord, m)

/* An agent refreshes before its lease ends, or every lease lapses between refreshes. */
static int lease_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_coord *co = obj;
	yaml_node_t *at = walk_get(m, "refresh") ?: walk_get(m, "ttl");
	char ttl[32], refresh[32];

	if (co->refresh_ns < co->ttl_ns)
		return 0;
	units_format_duration(co->ttl_ns, ttl, sizeof(ttl));
	units_format_duration(co->refresh_ns, refresh, sizeof(refresh));
	return walk_fail(c, at, "refresh %s is not shorter than ttl %s (expected refresh < ttl)",
			 refresh, ttl);
}

static const struct walk_field lease_fields[] = {
    {"ttl", WALK_DURATION, COORD(ttl_ns), .min = CFG_LEASE_MIN_NS, .max = CFG_LEASE_MAX_NS},
    {"refresh", WALK_DURATION, COORD(refresh_ns), .min = CFG_LEASE_MIN_NS, .max = CFG_LEASE_MAX_NS},
};

static const struct walk_section lease_section = WALK_SECTION(lease_fields, lease_check);

int cfg_reserve_check(const struct cfg_limit *l, uint32_t gateways, char *msg, size_t len)
{
	uint64_t fr = 0, fb = 0;

	if (l->scope != LL_SCOPE_GLOBAL)
		return 0;
	if (l->on_loss == LL_ON_LOSS_FALLBACK) {
		fr = l->fallback_rate * gateways;
		fb = l->fallback_burst * gateways;
	}
	if (fr < l->rate && fb < l->burst)
		return 0;
	snprintf(msg, len,
		 "limit '%s': fallback shares of %u gateways (%llu/s, %llu) leave nothing of the "
		 "contract (%llu/s, %llu) to lease (expected gateways x fallback below rate and "
		 "burst)",
		 l->name, gateways, (unsigned long long)fr, (unsigned long long)fb,
		 (unsigned long long)l->rate, (unsigned long long)l->burst);
	return -EINVAL;
}

/* host:port names this machine only (127.0.0.0/8, ::1, localhost). */
static bool hostport_loopback(const char *hp)
{
	char host[CFG_ADDR_LEN];
	struct in_addr a4;

	tls_host_of(hp, host, sizeof(host));
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return !strcmp(host, "::1") || !strcmp(host, "localhost");
}

static int coord_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_coord *co = obj;
	struct cfg_policy *pol = state(c)->pol;
	char msg[CFG_ERR_LEN - 64];
	struct stat st;
	int rc;

	co->has_metrics = walk_get(m, "metrics") != NULL;
	/* Anyone who can reach the port could steer the leases. */
	if (!co->tls.set && !co->insecure && !hostport_loopback(co->listen))
		return walk_fail(c, walk_get(m, "listen") ?: m->node,
				 "listen '%s' is beyond loopback without tls: (expected tls: "
				 "{cert, key, ca}, or insecure: true to accept unauthenticated "
				 "agents)",
				 co->listen);
	rc = load_policy(c, walk_get(m, "policy"), co->policy_path, false);
	/* The coordinator sends its agents the policy's very bytes, in one
	 * message: 1024 rules fit the parser but not always the wire.
	 */
	if (!rc && pol && stat(co->policy_path, &st) == 0 && st.st_size > WIRE_MAX_POLICY) {
		cfg_policy_too_big(co->policy_path, (uint64_t)st.st_size, msg, sizeof(msg));
		return walk_fail(c, walk_get(m, "policy"), "%s", msg);
	}
	for (uint32_t i = 0; !rc && pol && i < pol->n_limits; i++) {
		const struct cfg_limit *l = &pol->limits[i];

		rc = cfg_reserve_check(l, co->gateways, msg, sizeof(msg));
		if (rc) {
			snprintf(c->err->msg, sizeof(c->err->msg), "%.200s:%d:%d: %.300s",
				 co->policy_path, l->line, l->col, msg);
			cfg_err_at(c->err, co->policy_path, (size_t)l->line, (size_t)l->col);
		}
	}
	return rc;
}

/* ledger-retention: "400d", "9600h", or "forever" (the default). */
static int coord_retention(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v,
			   void *obj)
{
	struct cfg_coord *co = obj;
	const char *s = walk_scalar(v);
	unsigned long long n = 0;
	char unit = 0, *end = NULL;

	if (s && !strcmp(s, "forever")) {
		co->ledger_retention_s = 0;
		return 0;
	}
	if (s && *s >= '0' && *s <= '9') {
		errno = 0;
		n = strtoull(s, &end, 10);
		unit = end && *end ? *end : 0;
		if (errno || !end || (unit && end[1]))
			unit = 0;
	}
	if (unit != 'd' && unit != 'h')
		return walk_bad_value(c, f, v, "is not a retention",
				      "days or hours, as 400d or 9600h, or forever");
	if (n > CFG_LEDGER_RETENTION_MAX_S / (unit == 'd' ? 86400 : 3600) ||
	    n * (unit == 'd' ? 86400 : 3600) < CFG_LEDGER_RETENTION_MIN_S)
		return walk_bad_value(c, f, v, "is out of range", "1d to 36600d, or forever");
	co->ledger_retention_s = n * (unit == 'd' ? 86400 : 3600);
	return 0;
}

static const struct walk_field coord_fields[] = {
    {"listen", WALK_HOSTPORT, COORD(listen), .port = CFG_COORD_PORT, .any_port = true},
    {"policy", WALK_PATH, COORD(policy_path), .required = true, .example = "policy.yaml"},
    {"state-dir", WALK_PATH, COORD(state_dir)},
    {"lease", WALK_MAP, .sub = &lease_section},
    {"metrics", WALK_HOSTPORT, COORD(metrics), .port = CFG_COORD_METRICS_PORT, .any_port = true},
    {"gateways", WALK_UINT, COORD(gateways), .min = 1, .max = CFG_MAX_GATEWAYS},
    {"user", WALK_NAME, COORD(user)},
    {"pending-per-address", WALK_UINT, COORD(pending_per_address), .min = 1, .max = 65536},
    {"tls", WALK_CUSTOM, .fn = coord_tls},
    {"insecure", WALK_ENUM, COORD(insecure), .names = bools},
    {"ledger", WALK_PATH, COORD(ledger_path)},
    {"ledger-retention", WALK_CUSTOM, .fn = coord_retention},
};

static const struct walk_section coord_section = WALK_SECTION(coord_fields, coord_check);

/* ---- files ---- */

/* One kind of file: its top-level section, defaults and what its checks see. */
struct cfg_file {
	const char *top;
	const struct walk_section *sec;
	size_t size;
	void (*init)(void *obj, struct cfg_state *st);
};

static void policy_init(void *obj, struct cfg_state *st)
{
	st->pol = obj;
}

static void agent_init(void *obj, struct cfg_state *st)
{
	struct cfg_agent *a = obj;

	st->agent = a;
	if (gethostname(a->node, sizeof(a->node)) < 0)
		snprintf(a->node, sizeof(a->node), "localhost");
	a->node[sizeof(a->node) - 1] = '\0';
	snprintf(a->pin_dir, sizeof(a->pin_dir), "%s", CFG_DEFAULT_PIN_DIR);
	a->max_keys = CFG_DEFAULT_MAX_KEYS;
	a->attach_priority = CFG_DEFAULT_ATTACH_PRIORITY;
}

static void coord_init(void *obj, struct cfg_state *st)
{
	struct cfg_coord *co = obj;

	(void)st;
	snprintf(co->listen, sizeof(co->listen), "%s", CFG_DEFAULT_LISTEN);
	snprintf(co->state_dir, sizeof(co->state_dir), "%s", CFG_DEFAULT_STATE_DIR);
	co->ttl_ns = CFG_DEFAULT_TTL_NS;
	co->refresh_ns = CFG_DEFAULT_REFRESH_NS;
	co->gateways = CFG_DEFAULT_GATEWAYS;
	co->pending_per_address = CFG_DEFAULT_PENDING_PER_ADDRESS;
}

static const struct cfg_file policy_file = {"policy", &policy_section, sizeof(struct cfg_policy),
					    policy_init};
static const struct cfg_file agent_file = {"agent file", &agent_section, sizeof(struct cfg_agent),
					   agent_init};
static const struct cfg_file coord_file = {"coordinator file", &coord_section,
					   sizeof(struct cfg_coord), coord_init};

/* Parse into a scratch object and copy it out only on success. */
static int cfg_run(const struct cfg_file *kind, const char *file, const char *text, size_t len,
		   struct cfg_state *st, void *out, struct cfg_err *err)
{
	struct walk_ctx c = {.top = kind->top, .user = st};
	struct cfg_err scratch;
	yaml_node_t *root;
	void *tmp;
	int rc;

	err = err ? err : &scratch;
	tmp = calloc(1, kind->size);
	if (!tmp) {
		snprintf(err->msg, CFG_ERR_LEN, "%s: out of memory", file);
		return -ENOMEM;
	}
	kind->init(tmp, st);
	rc = walk_open(&c, file, text, len, err, &root);
	if (!rc) {
		rc = walk_run(&c, root, kind->sec, tmp);
		walk_close(&c);
	}
	if (!rc)
		memcpy(out, tmp, kind->size);
	free(tmp);
	return rc;
}

int cfg_policy_load(const char *path, bool standalone, struct cfg_policy *out, struct cfg_err *err)
{
	struct cfg_state st = {.standalone = standalone};

	return cfg_run(&policy_file, path, NULL, 0, &st, out, err);
}

int cfg_policy_parse(const char *name, const char *text, size_t len, bool standalone,
		     struct cfg_policy *out, struct cfg_err *err)
{
	struct cfg_state st = {.standalone = standalone};

	return cfg_run(&policy_file, name, text ? text : "", text ? len : 0, &st, out, err);
}

int cfg_policy_parse_served(const char *text, size_t len, struct cfg_policy *out,
			    struct cfg_err *err)
{
	struct cfg_state st = {.standalone = false, .served = true};

	return cfg_run(&policy_file, "coordinator policy", text ? text : "", text ? len : 0, &st,
		       out, err);
}

int cfg_agent_load(const char *path, struct cfg_agent *out, struct cfg_policy *policy,
		   struct cfg_err *err)
{
	struct cfg_state st = {.pol = policy};

	return cfg_run(&agent_file, path, NULL, 0, &st, out, err);
}

int cfg_coord_load(const char *path, struct cfg_coord *out, struct cfg_policy *policy,
		   struct cfg_err *err)
{
	struct cfg_state st = {.pol = policy};

	return cfg_run(&coord_file, path, NULL, 0, &st, out, err);
}

/* ---- kind ---- */

static const struct {
	const char *key;
	enum cfg_kind kind;
} kind_keys[] = {
    {"version", CFG_KIND_POLICY},   {"rules", CFG_KIND_POLICY},
    {"limits", CFG_KIND_POLICY},    {"default", CFG_KIND_POLICY},
    {"interfaces", CFG_KIND_AGENT}, {"node", CFG_KIND_AGENT},
    {"pin-dir", CFG_KIND_AGENT},    {"coordinator", CFG_KIND_AGENT},
    {"max-keys", CFG_KIND_AGENT},   {"max-flow-keys", CFG_KIND_AGENT},
    {"listen", CFG_KIND_COORD},	    {"lease", CFG_KIND_COORD},
    {"state-dir", CFG_KIND_COORD},
};

static enum cfg_kind kind_of_key(const char *key)
{
	size_t i;

	for (i = 0; key && i < sizeof(kind_keys) / sizeof(kind_keys[0]); i++) {
		if (!strcmp(kind_keys[i].key, key))
			return kind_keys[i].kind;
	}
	return CFG_KIND_UNKNOWN;
}

int cfg_detect_kind(const char *path, enum cfg_kind *kind, struct cfg_err *err)
{
	struct walk_ctx c = {.top = "file"};
	const yaml_node_pair_t *p;
	struct cfg_err scratch;
	yaml_node_t *root;
	int rc;

	*kind = CFG_KIND_UNKNOWN;
	rc = walk_open(&c, path, NULL, 0, err ? err : &scratch, &root);
	if (rc)
		return rc;
	for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
		*kind = kind_of_key(walk_scalar(walk_node(&c, p->key)));
		if (*kind != CFG_KIND_UNKNOWN)
			break;
	}
	if (*kind == CFG_KIND_UNKNOWN)
		rc = walk_fail_raw(&c, root,
				   "cannot tell what kind of file this is (expected a policy with "
				   "version:, an agent file with interfaces: or a coordinator file "
				   "with listen:)");
	walk_close(&c);
	return rc;
}
