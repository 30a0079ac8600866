/* SPDX-License-Identifier: MIT */
/*
 * YAML configuration (reference §4) parsed with libyaml into plain structs.
 * Every error is reported as "FILE:LINE:COL: message" (1-based line and
 * column of the offending node); unknown keys are errors. Nothing here
 * touches the kernel: `leaseline check` and the unit tests run it as is.
 *
 * The schema: config_policy.c (a policy's limits, rules and top section),
 * config_match.c (a rule's match), config.c (the agent and coordinator
 * files, loading every kind of file, telling one kind from another).
 */
#ifndef LEASELINE_LIB_CONFIG_H
#define LEASELINE_LIB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/cfg_types.h"
#include "ll_types.h"

#define CFG_DEFAULT_PIN_DIR "/sys/fs/bpf/leaseline"

struct cfg_limit {
	char name[LL_NAME_LEN];
	uint8_t key_mode;  /* enum ll_key_mode; default none */
	uint8_t prefix_v4; /* default 32 */
	uint8_t prefix_v6; /* default 128 */
	uint8_t unit;	   /* enum ll_unit; default packets */
	uint64_t rate;	   /* tokens/s, required, 1..TB_MAX_RATE */
	uint64_t burst;	   /* tokens, required, 1..TB_MAX_BURST */
	uint8_t scope;	   /* enum ll_scope; default local */
	uint8_t mode;	   /* enum ll_mode; default enforce */
	uint8_t on_loss;   /* enum ll_on_loss; only with scope global */
	bool has_fallback;
	uint64_t fallback_rate;
	uint64_t fallback_burst;
	/* overrides: a file of per-key contracts (overrides.h), resolved
	 * relative to the policy file; "" none. n_overrides: its entries as
	 * checked at load.
	 */
	char overrides[512];
	uint32_t n_overrides;
	uint8_t meter; /* 1: the coordinator's usage ledger records it (global only) */
	int line, col; /* where the limit's mapping starts */
};

struct cfg_rule {
	char name[LL_NAME_LEN];
	bool has_src, has_dst;
	uint8_t src_family, dst_family;	    /* 4 or 6 */
	uint8_t src_addr[16], dst_addr[16]; /* network order; IPv4 in the first 4 bytes */
	uint8_t src_plen, dst_plen;
	uint8_t proto; /* 0 any, else IPPROTO_TCP/UDP/ICMP/ICMPV6 */
	bool has_dport;
	uint8_t n_dport; /* 1..LL_MAX_DPORT_RANGES when has_dport */
	struct {
		uint16_t lo, hi;
	} dport[LL_MAX_DPORT_RANGES]; /* "53", "1000-2000", "53,80,8000-8100" or a list */
	bool has_tcp_flags;
	uint8_t tcp_mask, tcp_value; /* (flags & mask) == value; "syn" = SYN set, ACK clear */
	bool has_icmp;
	uint32_t icmp_types[8]; /* bit t: ICMP/ICMPv6 type t */
	uint8_t frag;		/* enum ll_frag_match */
	/* src-set, dst-set: 1 + an index into cfg_policy.sets; 0 none */
	uint8_t src_set, dst_set;
	uint8_t action;			   /* enum ll_rule_action; default limit */
	uint8_t n_limits;		   /* 1..LL_MAX_RULE_LIMITS with action limit, else 0 */
	uint8_t limit[LL_MAX_RULE_LIMITS]; /* indexes into cfg_policy.limits */
	int line, col;
};

/* A prefix set file (sets.h) the rules name, once however many name it. */
struct cfg_set {
	char path[CFG_PATH_LEN]; /* resolved relative to the policy file */
	uint32_t n;		 /* its prefixes, as checked at load */
	int line, col;		 /* where a rule first names it */
};

struct cfg_policy {
	uint64_t version;	/* required */
	uint8_t default_action; /* enum ll_action; default pass */
	uint32_t n_limits;
	struct cfg_limit limits[LL_MAX_LIMITS];
	uint32_t n_rules;
	struct cfg_rule rules[LL_MAX_RULES];
	uint32_t n_sets;
	uint32_t set_entries; /* the prefixes of all sets, <= LL_MAX_SET_ENTRIES */
	struct cfg_set sets[LL_MAX_SETS];
};

enum cfg_xdp_mode {
	CFG_XDP_NATIVE = 0,
	CFG_XDP_GENERIC = 1,
	CFG_XDP_AUTO = 2,
};

struct cfg_iface {
	char name[16]; /* IFNAMSIZ */
	uint8_t mode;  /* enum cfg_xdp_mode; default native */
};

/* attach.mode: the program alone on the interface (direct), or one program
 * of a libxdp dispatcher beside others (multiprog).
 */
enum cfg_attach_mode {
	CFG_ATTACH_DIRECT = 0,
	CFG_ATTACH_MULTIPROG = 1,
};

#define CFG_DEFAULT_ATTACH_PRIORITY 50 /* libxdp's default; lower runs first */
#define CFG_MAX_ATTACH_PRIORITY	    1000

struct cfg_agent {
	char node[64];	   /* default: hostname */
	uint32_t n_ifaces; /* >= 1 */
	struct cfg_iface ifaces[LL_MAX_IFACES];
	char pin_dir[CFG_PATH_LEN];	/* default CFG_DEFAULT_PIN_DIR */
	char policy_path[CFG_PATH_LEN]; /* resolved relative to the agent file; "" if none */
	bool has_coordinator;
	/* host:port, default port 7450: coordinator: {address} or the first of
	 * {addresses} (replicas; coordinators[] holds them all, in order).
	 */
	char coordinator[CFG_ADDR_LEN];
	char coordinators[CFG_MAX_COORDINATORS][CFG_ADDR_LEN];
	uint32_t n_coordinators;
	uint8_t coord_insecure; /* coordinator: {insecure: true}: plain TCP beyond loopback */
	bool has_metrics;
	char metrics[CFG_ADDR_LEN];
	uint32_t max_keys;	/* default 1048576, 1..2^28 */
	uint32_t max_flow_keys; /* key: flow buckets; default max_keys, 0..2^28 */
	struct cfg_tls tls;	/* mutual TLS to the coordinator (coordinated agents) */

	uint8_t attach_mode;	  /* enum cfg_attach_mode; default direct */
	uint32_t attach_priority; /* multiprog run priority; default 50 */
};

struct cfg_coord {
	char listen[CFG_ADDR_LEN];	/* default 127.0.0.1:7450 */
	char policy_path[CFG_PATH_LEN]; /* required, resolved relative to the file */
	char state_dir[CFG_PATH_LEN];	/* default /var/lib/leaseline */
	uint64_t ttl_ns;		/* lease.ttl, default 2s */
	uint64_t refresh_ns;		/* lease.refresh, default 500ms, must be < ttl */
	bool has_metrics;
	char metrics[CFG_ADDR_LEN];
	uint32_t
	    gateways;  /* holders served; fallback shares are reserved for this many (default 8) */
	char user[64]; /* run as this user once listening; "" = stay as started */
	uint32_t pending_per_address; /* connections without HELLO one address may hold (4) */
	uint32_t pending_per_prefix;  /* ... one /24 (IPv4) or /48 (IPv6) may hold (32) */
	struct cfg_tls tls;	      /* mutual TLS with every agent */
	uint8_t insecure; /* 1: may listen beyond loopback without TLS (insecure: true) */
	char ledger_path[CFG_PATH_LEN]; /* usage ledger; "" = state-dir/ledger.db */
	/* ledger-retention: usage rows older than this go, and the marks of
	 * counters identities silent that long (reference §6.3); 0 = forever.
	 */
	uint64_t ledger_retention_s;
	/* ledger-series-per-holder: key series (marks) a holder may have in the
	 * usage ledger; a new one past it is refused (reference §6.3, Bounds).
	 */
	uint32_t ledger_series_quota;
	/* grant-key: the key grants are tagged with (docs/protocol.md,
	 * "Adoption"); "" = state-dir/grant.key. Replicas share one.
	 */
	char grant_key_path[CFG_PATH_LEN];
	/* replicas: leadership through etcd (reference §6.4). */
	bool has_replicas;
	struct cfg_replicas {
		char etcd[CFG_MAX_COORDINATORS][CFG_ADDR_LEN + 8]; /* http://host:port */
		uint32_t n_etcd;
		char prefix[64];	      /* keys under it; default /leaseline/default */
		char node[64];		      /* this replica's name (WALK_NAME) */
		char advertise[CFG_ADDR_LEN]; /* host:port agents dial for this replica */
		uint64_t ttl_ns;	      /* etcd lease ttl, 5 s to 60 s, default 5 s */
		struct cfg_tls tls;	      /* mutual TLS to etcd (https:// endpoints) */
	} replicas;
};

/* ledger-retention bounds: a day (shorter would prune what a gateway cut
 * off for a weekend still has to report) to 100 years.
 */
#define CFG_LEDGER_RETENTION_MIN_S     86400ull
#define CFG_DEFAULT_LEDGER_RETENTION_S (400ull * 86400)
#define CFG_DEFAULT_SERIES_QUOTA       (1u << 20)
#define CFG_LEDGER_RETENTION_MAX_S     (100ull * 366 * 86400)

enum cfg_kind {
	CFG_KIND_UNKNOWN = 0,
	CFG_KIND_POLICY,
	CFG_KIND_AGENT,
	CFG_KIND_COORD,
};

/* Each returns 0 on success, -EINVAL with err filled on a configuration
 * error, or another negative errno (err filled too) when the file cannot be read.
 * standalone: scope global is refused (no coordinator to lease from).
 * Outputs are written only on success: a refused reload leaves them as they were.
 * err may be NULL.
 */
int cfg_policy_load(const char *path, bool standalone, struct cfg_policy *out, struct cfg_err *err);
int cfg_policy_parse(const char *name, const char *text, size_t len, bool standalone,
		     struct cfg_policy *out, struct cfg_err *err);
/* A policy a coordinator served (the agent's link): global limits allowed,
 * and the override files of global limits not read (the coordinator leases
 * each override as a key of its own; the agent holds per-key grants).
 * Local limits' override files are read on the gateway: name them by
 * absolute paths in a policy a coordinator serves.
 */
int cfg_policy_parse_served(const char *text, size_t len, struct cfg_policy *out,
			    struct cfg_err *err);
/* Loads the agent file and, when it names one (policy:), its policy file
 * with standalone = true into *policy; errors in that file carry its name.
 * policy may be NULL to read the agent file alone; it is left untouched
 * for a coordinated agent. cfg_coord_load does the same with standalone = false.
 */
int cfg_agent_load(const char *path, struct cfg_agent *out, struct cfg_policy *policy,
		   struct cfg_err *err);
int cfg_coord_load(const char *path, struct cfg_coord *out, struct cfg_policy *policy,
		   struct cfg_err *err);
/* Guess a file's kind from its top-level keys (version/rules → policy,
 * interfaces/node → agent, listen/lease/state-dir → coord).
 */
int cfg_detect_kind(const char *path, enum cfg_kind *kind, struct cfg_err *err);

const char *cfg_key_mode_name(uint8_t key_mode);
const char *cfg_unit_name(uint8_t unit);
const char *cfg_mode_name(uint8_t mode);
const char *cfg_scope_name(uint8_t scope);
const char *cfg_on_loss_name(uint8_t on_loss);

/* A coordinator serving `gateways` reserves each one's fallback share out of
 * limit l's contract: -EINVAL and msg filled when that leaves nothing to
 * lease (reference §6), else 0. One check for `check` and the coordinator.
 */
int cfg_reserve_check(const struct cfg_limit *l, uint32_t gateways, char *msg, size_t len);
/* Under replicas: a metered limit needs a ledger they share (a PostgreSQL
 * URI as ledger:); one replica's own file would split an invoice at each
 * failover. 0 or -EINVAL, msg filled.
 */
int cfg_replicas_check(const struct cfg_coord *co, const struct cfg_limit *l, char *msg,
		       size_t len);
/* Whether a ledger: names a PostgreSQL database (postgresql:// or postgres://). */
bool cfg_ledger_is_pg(const char *ledger);
const char *cfg_action_name(uint8_t action);
const char *cfg_xdp_mode_name(uint8_t mode);
const char *cfg_attach_mode_name(uint8_t mode);
/* "any", "tcp", "udp", "icmp", "icmpv6"; NULL for other protocol numbers. */
const char *cfg_proto_name(uint8_t proto);

/* "policy 'PATH' is SIZE bytes, more than the WIRE_MAX_POLICY a coordinator
 * sends its agents in one message ...": check's and the coordinator's words.
 */
void cfg_policy_too_big(const char *path, uint64_t size, char *buf, size_t len);

#endif /* LEASELINE_LIB_CONFIG_H */
