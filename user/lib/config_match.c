// SPDX-License-Identifier: MIT
/*
 * A policy rule's match (reference §4): proto, dst-port, tcp-flags,
 * icmp-type, src and dst prefixes, src-set and dst-set, fragments, and the
 * check that a match can ever be true. The rest of the policy is
 * config_policy.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/config.h"
#include "lib/config_schema.h"
#include "lib/sets.h"
#include "lib/units.h"
#include "lib/walk.h"

/* ---- proto, dst-port ---- */

static const struct walk_enum protos[] = {
    {"any", 0},
    {"tcp", IPPROTO_TCP},
    {"udp", IPPROTO_UDP},
    {"icmp", IPPROTO_ICMP},
    {"icmpv6", IPPROTO_ICMPV6},
    {NULL, 0},
};

const char *cfg_proto_name(uint8_t proto)
{
	const struct walk_enum *e;

	for (e = protos; e->name; e++) {
		if (e->value == proto)
			return e->name;
	}
	return NULL;
}

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
		return walk_bad_value(
		    c, f, v, "is not a file name",
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

const struct walk_section cfg_match_section = WALK_SECTION(match_fields, match_check);
