// SPDX-License-Identifier: MIT
/*
 * The daemons' files (reference §4): the agent file, the coordinator file
 * and the tls: section both share, as walk_field tables plus the rules
 * that span several keys; loading any file (policy, agent, coordinator)
 * and telling which kind a file is. The policy schema is config_policy.c
 * and config_match.c. A result is copied out only when the whole file is
 * good, so a refused reload changes nothing.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "lib/config_schema.h"
#include "lib/lease_clock.h"
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
#define CFG_DEFAULT_PENDING_PER_PREFIX	32
/* Ports of reference §2: CFG_COORD_PORT in config_schema.h. */
/* Gateways a coordinator reserves fallback shares for (coord.yaml gateways:). */
#define CFG_DEFAULT_GATEWAYS   8
#define CFG_MAX_GATEWAYS       16384
#define CFG_AGENT_METRICS_PORT 9475
#define CFG_COORD_METRICS_PORT 9476
#define CFG_DEFAULT_STATE_DIR  "/var/lib/leaseline"
#define CFG_DEFAULT_LISTEN     "127.0.0.1:7450"

static const struct walk_enum xdp_modes[] = {
    {"native", CFG_XDP_NATIVE},
    {"generic", CFG_XDP_GENERIC},
    {"auto", CFG_XDP_AUTO},
    {NULL, 0},
};

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

const struct walk_section cfg_tls_section = WALK_SECTION(tls_fields, tls_set);

static int agent_tls(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	(void)f;
	return walk_run(c, v, &cfg_tls_section, &((struct cfg_agent *)obj)->tls);
}

static int coord_tls(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	(void)f;
	return walk_run(c, v, &cfg_tls_section, &((struct cfg_coord *)obj)->tls);
}

static const struct walk_enum bools[] = {
    {"false", 0},
    {"true", 1},
    {NULL, 0},
};

static const struct walk_field coord_addr_item = {"addresses", WALK_HOSTPORT, .size = CFG_ADDR_LEN,
						  .port = CFG_COORD_PORT};

static int coord_addr(struct walk_ctx *c, yaml_node_t *n, size_t i, void *obj)
{
	struct cfg_agent *a = obj;

	if (walk_set(c, &coord_addr_item, n, a->coordinators[i]))
		return -EINVAL;
	for (size_t j = 0; j < i; j++) {
		if (!strcmp(a->coordinators[j], a->coordinators[i]))
			return walk_fail(
			    c, n, "address '%s' is listed twice (expected each replica once)",
			    a->coordinators[i]);
	}
	a->n_coordinators = (uint32_t)i + 1;
	return 0;
}

static int agent_coord_addrs(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v,
			     void *obj)
{
	return walk_list_nonempty(c, v, f->key, NULL, CFG_MAX_COORDINATORS, coord_addr, obj,
				  "[10.0.0.5:7450, 10.0.0.6:7450]");
}

static const struct walk_field coordinator_fields[] = {
    {"address", WALK_HOSTPORT, AGENT(coordinator), .port = CFG_COORD_PORT},
    {"addresses", WALK_CUSTOM, .fn = agent_coord_addrs},
    {"insecure", WALK_ENUM, AGENT(coord_insecure), .names = bools},
};

/* One coordinator (address:) or its replicas (addresses:), never both. */
static int coordinator_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_agent *a = obj;
	yaml_node_t *one = walk_get(m, "address"), *many = walk_get(m, "addresses");

	if (!one && !many)
		return walk_fail_raw(c, m->node,
				     "coordinator needs address: (expected e.g. address: %s, or "
				     "addresses: [...] for replicas)",
				     CFG_DEFAULT_LISTEN);
	if (one && many)
		return walk_fail_raw(c, walk_line(one) > walk_line(many) ? one : many,
				     "coordinator has both address: and addresses: (expected "
				     "one: addresses: lists every replica)");
	if (one) {
		memcpy(a->coordinators[0], a->coordinator, sizeof(a->coordinator));
		a->n_coordinators = 1;
	} else {
		memcpy(a->coordinator, a->coordinators[0], sizeof(a->coordinator));
	}
	return 0;
}

static const struct walk_section coordinator_section =
    WALK_SECTION(coordinator_fields, coordinator_check);

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
	/* Whoever answers at that address could push any policy and lease. */
	for (uint32_t i = 0; coord && i < a->n_coordinators; i++) {
		if (!a->tls.set && !a->coord_insecure && !hostport_loopback(a->coordinators[i]))
			return walk_fail_raw(c, walk_get(m, "coordinator") ?: coord,
					     "coordinator '%s' is beyond loopback without tls: "
					     "(expected tls: {cert, key, ca}, or coordinator: "
					     "{insecure: true} to accept an unauthenticated "
					     "coordinator)",
					     a->coordinators[i]);
	}
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

bool cfg_ledger_is_pg(const char *ledger)
{
	return !strncmp(ledger, "postgresql://", 13) || !strncmp(ledger, "postgres://", 11);
}

int cfg_replicas_check(const struct cfg_coord *co, const struct cfg_limit *l, char *msg,
		       size_t len)
{
	if (!l->meter || cfg_ledger_is_pg(co->ledger_path))
		return 0;
	snprintf(msg, len,
		 "limit '%s': meter: true under replicas: needs the ledger they share (expected "
		 "ledger: postgresql://... in the coordinator's file, or no meter:)",
		 l->name);
	return -EINVAL;
}

static int coord_policy_check(struct walk_ctx *c, const struct walk_map *m, struct cfg_coord *co);

/* The policy is loaded into a scratch copy and written out only once the
 * coordinator's own checks of it pass: a refused file changes nothing.
 */
static int coord_check(struct walk_ctx *c, const struct walk_map *m, void *obj)
{
	struct cfg_policy *out = state(c)->pol, *tmp = NULL;
	int rc;

	if (out && !(tmp = malloc(sizeof(*tmp))))
		return walk_fail_raw(c, m->node, "out of memory");
	if (tmp)
		memcpy(tmp, out, sizeof(*tmp));
	state(c)->pol = tmp;
	rc = coord_policy_check(c, m, obj);
	state(c)->pol = out;
	if (!rc && out)
		memcpy(out, tmp, sizeof(*out));
	free(tmp);
	return rc;
}

static int coord_policy_check(struct walk_ctx *c, const struct walk_map *m, struct cfg_coord *co)
{
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
		if (!rc && co->has_replicas)
			rc = cfg_replicas_check(co, l, msg, sizeof(msg));
		if (rc) {
			snprintf(c->err->msg, sizeof(c->err->msg), "%.200s:%d:%d: %.300s",
				 co->policy_path, l->line, l->col, msg);
			cfg_err_at(c->err, co->policy_path, (size_t)l->line, (size_t)l->col);
		}
	}
	return rc;
}

/* ledger-retention: "400d" (the default), "9600h", or "forever". */
/* ledger: a file (relative to this one) or a PostgreSQL URI, kept as written. */
static int coord_ledger(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj)
{
	struct cfg_coord *co = obj;
	const char *s = walk_scalar(v);
	char expect[64];

	if (!s || !cfg_ledger_is_pg(s))
		return walk_set_path(c, f, v, co->ledger_path);
	if (strlen(s) < sizeof(co->ledger_path)) {
		memcpy(co->ledger_path, s, strlen(s) + 1);
		return 0;
	}
	snprintf(expect, sizeof(expect), "a URI of at most %zu bytes", sizeof(co->ledger_path) - 1);
	return walk_bad_value(c, f, v, "is too long", expect);
}

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
    {"pending-per-prefix", WALK_UINT, COORD(pending_per_prefix), .min = 1, .max = 65536},
    {"tls", WALK_CUSTOM, .fn = coord_tls},
    {"insecure", WALK_ENUM, COORD(insecure), .names = bools},
    {"ledger", WALK_CUSTOM, COORD(ledger_path), .fn = coord_ledger,
     .example = "postgresql://leaseline@db.example/leaseline"},
    {"ledger-retention", WALK_CUSTOM, .fn = coord_retention},
    {"ledger-series-per-holder", WALK_UINT, COORD(ledger_series_quota), .min = 1024,
     .max = 1u << 30},
    {"grant-key", WALK_PATH, COORD(grant_key_path)},
    {"replicas", WALK_CUSTOM, .fn = cfg_coord_replicas},
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
	co->pending_per_prefix = CFG_DEFAULT_PENDING_PER_PREFIX;
	co->ledger_retention_s = CFG_DEFAULT_LEDGER_RETENTION_S;
	co->ledger_series_quota = CFG_DEFAULT_SERIES_QUOTA;
	snprintf(co->replicas.prefix, sizeof(co->replicas.prefix), "/leaseline/default");
	co->replicas.ttl_ns = 5000000000ull;
}

static const struct cfg_file policy_file = {"policy", &cfg_policy_section,
					    sizeof(struct cfg_policy), policy_init};
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
