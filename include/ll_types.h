/* SPDX-License-Identifier: MIT */
/*
 * Structures shared by the XDP program and userspace: the compiled policy,
 * bucket keys and values, counters. Fixed-width types, explicit padding.
 * Invariants: what a packet reads of a bucket value (gen, tokens, last_ns,
 * deny_hint) is its first 32 bytes; limit ids are stable
 * across policy reloads for a limit of the same name, so buckets survive.
 */
#ifndef LEASELINE_LL_TYPES_H
#define LEASELINE_LL_TYPES_H

#include <linux/types.h>
#include <linux/bpf.h>

/* Rules evaluated per packet, first match wins: a linear scan, so a packet
 * that matches late pays for every rule before it. The first 32 are scanned
 * inline, the rest with bpf_loop (verified once whatever their number), so
 * the bound is the policy map's value size (two slots of ll_policy) and the
 * scan's cost, not the verifier (docs/reference.md §2). A power of two: the
 * index is masked.
 */
#define LL_MAX_RULES 1024
/* Distinct limits in one policy: also the size of the per-limit arrays.
 * Not bounded by the verifier (the program verifies the same at 64 and
 * 256); by the pinned per-limit arrays, the policy map value and the wire
 * (a report carries one entry per limit, docs/config.md "Bounds"). Limit
 * ids are a rule's __u8: at most 256. A power of two: ids are masked.
 */
#define LL_MAX_LIMITS 256
/* A rule may charge 1 to 4 limits (client, tenant, route, global). */
#define LL_MAX_RULE_LIMITS 4
/* dst-port ranges (a single port is a range of one) one rule may list. */
#define LL_MAX_DPORT_RANGES 8
/* Names as shown by bpftool and status; YAML names longer than this are refused. */
#define LL_NAME_LEN 32
/* Interfaces one agent attaches to. */
#define LL_MAX_IFACES 16
/* VLAN tags walked (QinQ: an outer and an inner tag); more is LL_PARSE_VLAN_DEPTH. */
#define LL_MAX_VLAN_TAGS 2
/* IPv6 extension headers walked before giving up (counted as ext_hdr_limit). */
#define LL_MAX_EXT_HDRS 8
/* Policy double buffer: packets read one slot while the agent writes the other. */
#define LL_POLICY_SLOTS 2

/* Indexes are bounded with "& (N - 1)" on the packet path (the verifier
 * needs a provable bound) and in the agent: that is a bound only for a
 * power of two.
 */
#define LL_IS_POW2(n) ((n) > 0 && ((n) & ((n) - 1)) == 0)
_Static_assert(LL_IS_POW2(LL_MAX_LIMITS), "ids are masked with LL_MAX_LIMITS - 1");
_Static_assert(LL_MAX_LIMITS <= 256, "a rule names its limits by __u8 id");
_Static_assert(LL_IS_POW2(LL_POLICY_SLOTS), "slots are masked with LL_POLICY_SLOTS - 1");
_Static_assert(LL_IS_POW2(LL_MAX_RULES), "rule indexes are masked with LL_MAX_RULES - 1");

enum ll_key_mode {
	LL_KEY_NONE = 0,
	LL_KEY_SRC_IP = 1,
	LL_KEY_DST_IP = 2,
	LL_KEY_DST_PORT = 3,
	LL_KEY_FLOW = 4,
};

enum ll_unit {
	LL_UNIT_PACKETS = 0,
	LL_UNIT_BYTES = 1,
};

enum ll_mode {
	LL_MODE_ENFORCE = 0,
	LL_MODE_SHADOW = 1,
};

enum ll_scope {
	LL_SCOPE_LOCAL = 0,
	LL_SCOPE_GLOBAL = 1,
};

/* Which packets a rule matches with respect to fragments. A non-first
 * fragment carries no ports: a rule with a dst-port condition never
 * matches one, whatever this says.
 */
enum ll_frag_match {
	LL_FRAG_ANY = 0,  /* fragments or not (the default) */
	LL_FRAG_ONLY = 1, /* non-first fragments only: their own class */
	LL_FRAG_NONE = 2, /* never a non-first fragment */
};

enum ll_action {
	LL_ACT_PASS = 0,
	LL_ACT_DROP = 1,
};

/* Why a frame was not (fully) parsed. Index of ll_parse_stats. */
enum ll_parse_reason {
	LL_PARSE_OK = 0,     /* IPv4/IPv6 parsed, L4 ports if any */
	LL_PARSE_NON_IP,     /* not IPv4/IPv6: passed, never limited */
	LL_PARSE_TRUNC_ETH,  /* shorter than an Ethernet header: dropped */
	LL_PARSE_TRUNC_VLAN, /* VLAN tag claimed but cut off: dropped */
	LL_PARSE_VLAN_DEPTH, /* more than two VLAN tags: dropped */
	LL_PARSE_TRUNC_IP,   /* IPv4/IPv6 header cut off: dropped */
	LL_PARSE_BAD_IP,     /* bad version, IHL < 5 or total length < header: dropped */
	LL_PARSE_TRUNC_EXT,  /* IPv6 extension header cut off: dropped */
	LL_PARSE_EXT_LIMIT,  /* more than LL_MAX_EXT_HDRS extension headers: dropped */
	LL_PARSE_TRUNC_L4,   /* TCP/UDP/ICMP header cut off in a first fragment: dropped */
	LL_PARSE_FRAGMENT,   /* non-first fragment: parsed without ports (counted, not dropped) */
	LL_PARSE_MAX,
};

/* One limit as compiled into the policy. Rate and burst of the current and the
 * previous generation so that buckets migrate lazily and exactly: a bucket
 * still at an older generation is settled with the old rate up to reload_ns.
 */
struct ll_limit_cfg {
	__u64 rate;	 /* tokens per second */
	__u64 burst_s;	 /* sub-tokens (burst * TB_SCALE) */
	__u64 fill_ns;	 /* ceil(burst_s / rate) */
	__u64 chunk_s;	 /* key none: sub-tokens a CPU takes from the shared pool at once */
	__u64 prev_rate; /* generation gen - 1 */
	__u64 prev_burst_s;
	__u64 prev_fill_ns;
	__u64 reload_ns; /* CLOCK_MONOTONIC when gen became current */
	__u32 gen;	 /* new (unique) value when rate or burst changes */
	__u32 prev_gen;	 /* generation that prev_* describe; 0 if none */
	__u32 uid;	 /* changes when the id is reused by another limit */
	__u32 ov_ver;	 /* moves on whenever this limit's overrides (ll_overrides) change */
	__u8 key_mode;	/* enum ll_key_mode */
	__u8 unit;	/* enum ll_unit */
	__u8 mode;	/* enum ll_mode */
	__u8 scope;	/* enum ll_scope */
	__u8 prefix_v4; /* with src-ip/dst-ip: aggregate by prefix */
	__u8 prefix_v6;
	__u8 in_use;
	__u8 on_loss;	  /* global: enum ll_on_loss */
	__u32 mask_v4;	  /* network order mask of prefix_v4, applied to the v4 address word */
	__u32 mask_v6[4]; /* network order mask of prefix_v6 */
	__u32 flags;	  /* LL_LIM_* */
	__u64 fb_rate; /* global + fallback: this gateway's reserved share */
	__u64 fb_burst_s;
	char name[LL_NAME_LEN];
};

/* ll_limit_cfg.flags */
enum {
	/* The limit has (or had) per-key overrides: a bucket looks its key up
	 * in ll_overrides when it is made and when ov_ver moves on.
	 */
	LL_LIM_OVERRIDES = 1,
	/* Buckets made for this limit start empty at reload_ns (refilled from
	 * then), not full: a limit that changed its unit starts afresh under a
	 * new uid without a fresh burst.
	 */
	LL_LIM_EMPTY_START = 2,
	/* A global limit whose keys may have contracts of their own (overrides,
	 * leased by the coordinator as per-key grants): the agent bounds a
	 * key's grant by the largest contract the token math holds, not the
	 * limit's, and a denied key asks for as much as it can get.
	 */
	LL_LIM_KEY_CONTRACTS = 4,
	/* A metered global limit with a key (meter: true): every packet's
	 * outcome is counted per key in ll_meter (struct ll_meter), for the
	 * usage ledger (reference §6.3). Unmetered limits pay nothing.
	 */
	LL_LIM_METER = 8,
};

/* Per-key overrides of local limits (ll_overrides, an LPM trie): a prefix
 * of the limit's key with a contract of its own, as an ll_key_grant (rate,
 * burst_s, fill_ns, a unique generation; rate 0 and burst 0: deny; the
 * largest rate and burst the token math holds: unlimited). prefixlen counts
 * the 32 bits of the uid, then the address's (IPv4 as v4-mapped, so 96 +
 * its prefix).
 */
#define LL_MAX_OVERRIDES 262144 /* entries of ll_overrides, all limits */

struct ll_ov_key {
	__u32 prefixlen;
	__u32 limit_uid;
	__u32 addr[4]; /* network order; a dst-port limit's: the port in bytes 0-1 */
};

/* Prefix sets (rule matches src-set and dst-set, ll_sets, an LPM trie): every
 * prefix of every set file the live policy names, keyed by the set's id (a
 * unique ll_state.next_uid, new whenever a file's content changes, so a
 * policy never points at a set being written) and the prefix. prefixlen
 * counts the 32 bits of the id, then the address's (IPv4 as v4-mapped: 96 +
 * its prefix). The value is the prefix's line in its file.
 *
 * LL_MAX_SET_ENTRIES bounds the prefixes of all the sets of one policy (a
 * file named by several rules counts once); the map holds twice that, so a
 * reload can write a whole new generation of sets while the running policy
 * still matches against the old one.
 */
#define LL_MAX_SET_ENTRIES 262144
#define LL_SET_MAP_ENTRIES (2 * LL_MAX_SET_ENTRIES)
/* Distinct set files one policy may name. */
#define LL_MAX_SETS 64

struct ll_set_key {
	__u32 prefixlen;
	__u32 set_id;
	__u32 addr[4]; /* network order, IPv4 as ::ffff:a.b.c.d */
};

/* ll_rule.action: what a matching packet gets. */
enum ll_rule_action {
	LL_RULE_LIMIT = 0, /* charged to the rule's 1 to 4 limits */
	LL_RULE_PASS = 1,  /* passed: exempt from every later rule, counted */
	LL_RULE_DROP = 2,  /* dropped, counted */
};

/* Addresses are IPv6 or IPv4-mapped IPv6 (::ffff:a.b.c.d), network order,
 * so one comparison path serves both families.
 */
struct ll_port_range {
	__u16 lo; /* host order, lo <= hi */
	__u16 hi;
};

struct ll_rule {
	__u32 src[4];
	__u32 src_mask[4];
	__u32 dst[4];
	__u32 dst_mask[4];
	/* dst-port: the packet's port is in one of the first n_dport ranges;
	 * n_dport 0 = any port (and packets without ports match too).
	 */
	struct ll_port_range dport[LL_MAX_DPORT_RANGES];
	__u8 proto;  /* IPPROTO_*, 0 = any */
	__u8 family; /* 0 any, 4 or 6: set when a prefix pins the family */
	__u8 n_limits;
	__u8 frag; /* enum ll_frag_match */
	__u8 limit[LL_MAX_RULE_LIMITS]; /* limit ids (index into ll_policy.limits) */
	__u8 n_dport;
	/* tcp-flags: (flags byte & mask) == value; mask 0 = no condition. A
	 * packet without a TCP header (non-first fragment) never matches one.
	 */
	__u8 tcp_mask;
	__u8 tcp_value;
	/* icmp-type: bit t of icmp_types set = ICMP (or ICMPv6) type t matches;
	 * has_icmp 0 = no condition. A fragment without the header never matches.
	 */
	__u8 has_icmp;
	__u32 icmp_types[8];
	/* src-set, dst-set: the address is in set id (ll_sets); 0 = no condition. */
	__u32 src_set;
	__u32 dst_set;
	__u8 action; /* enum ll_rule_action; n_limits is 0 unless LL_RULE_LIMIT */
	__u8 pad1[3];
	char name[LL_NAME_LEN];
};

struct ll_policy {
	__u64 version;
	__u32 n_rules;
	__u32 default_action; /* enum ll_action for unmatched packets */
	struct ll_rule rules[LL_MAX_RULES];
	struct ll_limit_cfg limits[LL_MAX_LIMITS];
};

/* Why the agent last refused a policy: one line, NUL-terminated. */
#define LL_REASON_LEN 160

/* Single entry: which policy slot is live, where the agent attached, and the
 * last policy it refused (so `status` and metrics show a refusal, not only
 * the agent's log). The XDP program reads active_slot only.
 */
struct ll_state {
	__u32 active_slot;
	__u32 n_ifaces;
	__u64 version;	  /* version of the policy in active_slot */
	__u64 applied_ns; /* CLOCK_MONOTONIC of the last apply */
	__u32 ifindex[LL_MAX_IFACES];
	__u32 agent_pid;
	__u32 next_uid;	 /* source of ll_limit_cfg.uid and .gen, both unique */
	__u64 netns_ino; /* network namespace the ifindexes belong to */
	__u64 refusals;	 /* policies refused (reloads, the coordinator's), ever */
	__u64 refused_version; /* the last refused policy's version (0: unknown) */
	__u64 refused_ns;      /* CLOCK_MONOTONIC of that refusal; 0 = none */
	char refused_why[LL_REASON_LEN];
	/* The coordinator link's counters since this agent started (the agent
	 * writes them after every report; `status` and metrics read them).
	 */
	__u64 grants_applied;
	__u64 grants_stale;	/* refused by fencing, for another holder, or unknown limit */
	__u64 grants_clamped;	/* asked more than the contract or the ttl cap: clamped */
	__u64 grants_bad_keys;	/* refused: a per-key grant named a malformed key */
	__u64 hot_keys_listed;	/* in the last report */
	__u64 hot_keys_dropped; /* not tracked or not reported for want of room, ever */
	__u64 link_up;		/* 1 while connected to the coordinator (coordinated agents) */
	__u64 link_connects;	/* connections made to the coordinator since this agent started */
	__u64 applies;		/* policies applied (start, reloads, the coordinator's), ever */
};

/* Bucket key of src-ip, dst-ip and dst-port limits, in ll_buckets. Every
 * lookup hashes and compares the whole key, so it is kept to 24 bytes and
 * flow keys, which need both addresses, live in their own map. Fields unused
 * by the key mode are zero.
 */
struct ll_key {
	__u32 limit_uid; /* ll_limit_cfg.uid: a reused limit id never inherits buckets */
	__u8 proto;	 /* dst-port */
	__u8 family;	 /* 4 or 6; 0 for dst-port; LL_OVERFLOW_FAMILY */
	__u16 dport;	 /* dst-port, network order */
	union {
		__u32 addr[4]; /* src or dst address (prefix-masked; IPv4 as ::ffff:a.b.c.d) */
		__u8 addr8[16]; /* the same bytes: what bpftool prints readably */
	};
};

/* Bucket key of flow limits, in ll_flow_buckets: 44 bytes. The first 8 bytes
 * are laid out as in ll_key, so code that only needs the limit and the
 * family reads either kind alike.
 */
struct ll_flow_key {
	__u32 limit_uid;
	__u8 proto;
	__u8 family;
	__u16 dport;
	__u16 sport;
	__u16 pad0;
	union {
		__u32 addr[4]; /* source */
		__u8 addr8[16];
	};
	union {
		__u32 addr2[4]; /* destination */
		__u8 addr2_8[16];
	};
};

/* The first 8 bytes of both key kinds: what the reaper and status read. */
struct ll_key_head {
	__u32 limit_uid;
	__u8 proto;
	__u8 family;
	__u16 dport;
};

_Static_assert(sizeof(struct ll_key) == 24, "ll_key is hashed on every lookup: keep it small");
_Static_assert(sizeof(struct ll_flow_key) == 44, "ll_flow_key layout");
_Static_assert(__builtin_offsetof(struct ll_flow_key, family) ==
			   __builtin_offsetof(struct ll_key_head, family) &&
		       __builtin_offsetof(struct ll_key, family) ==
			   __builtin_offsetof(struct ll_key_head, family),
	       "both key kinds begin like ll_key_head");

/* A key of any mode without its limit: the bytes of ll_flow_key after
 * limit_uid (an ll_key's fields where they have the same names, sport and
 * addr2 zero). What per-key grants and hot-key reports name on the wire.
 */
struct ll_key_id {
	__u8 proto;
	__u8 family;
	__u16 dport; /* network order */
	__u16 sport;
	__u16 pad0;
	__u32 addr[4];
	__u32 addr2[4];
};

_Static_assert(sizeof(struct ll_key_id) == 40, "ll_key_id layout");
_Static_assert(sizeof(struct ll_flow_key) == 4 + sizeof(struct ll_key_id),
	       "an ll_flow_key is limit_uid + ll_key_id");

/* Per-key grants of global limits (ll_key_grants, keyed by ll_flow_key:
 * limit uid + ll_key_id): this gateway's share of one key's contract where
 * the coordinator set it apart from the limit's share. A grant changes a
 * limit's set (or replaces it whole, on a new connection); an entry counts
 * only while the limit's lease lives.
 */
#define LL_MAX_KEY_GRANTS	65536 /* entries of ll_key_grants, all limits */
#define LL_MAX_LIMIT_KEY_GRANTS 16384 /* per limit (ll_lease.n_key_grants is a u16) */

struct ll_key_grant {
	__u64 rate;    /* tokens/s */
	__u64 burst_s; /* sub-tokens */
	__u64 fill_ns;
	__u32 gen; /* unique (ll_state.next_uid), new whenever rate or burst changes */
	__u32 pad0;
};

/* A key of a global limit denied under its share or per-key grant while the
 * lease lives (ll_hot ring buffer): the agent reports it to the coordinator
 * as hot. At most one per LL_HOT_INTERVAL_NS per CPU and gate slot.
 */
struct ll_hot_event {
	__u32 limit_id;
	__u32 limit_uid;
	__u64 ns;
	struct ll_key_id key;
};

#define LL_HOT_INTERVAL_NS 100000000ull /* 100 ms */

/* How far the datapath's clock (bpf_ktime_get_coarse_ns, bpf/clock.h) may lag
 * CLOCK_MONOTONIC: a tick, 5 ticks while the timekeeping CPU stalls (4 and
 * 20 ms at HZ=250). Where a lagging clock could admit, it is checked with
 * this much to spare: a lease's expiry (bpf/clock.h, meta_before) and the
 * reaper's "full" (user/agent/dp_reap.c), as of this long ago.
 */
#define LL_COARSE_SLACK_NS 20000000ull
#define LL_HOT_GATE_SLOTS  1024

/* Where keys go when neither their bucket map nor ll_prefix_buckets has room:
 * one shared, pre-created bucket per limit (family LL_OVERFLOW_FAMILY, all
 * else zero), in the map of the limit's key mode. Sharing is conservative:
 * no key ever gets a fresh burst because a map was full.
 */
#define LL_OVERFLOW_FAMILY 0xff

/* Key-table pressure (bpf/bucket.h, docs/design.md "Key-table pressure").
 * ll_fill holds, per bucket map, how many buckets it holds (the XDP program
 * adds each it creates; the agent, the only one that deletes, corrects it
 * after each reap pass) and from how many on the map is under pressure.
 * Under pressure a key without a bucket is charged to its prefix's fallback
 * bucket (ll_prefix_buckets) instead of getting a full bucket of its own.
 */
enum ll_fill_map {
	LL_FILL_KEYS = 0,  /* ll_buckets */
	LL_FILL_FLOWS = 1, /* ll_flow_buckets */
	LL_FILL_MAPS,
};

struct ll_fill {
	__u64 live; /* buckets in the map (an estimate: exact but for races, see dp_reap.c) */
	__u64 mark; /* under pressure from this many buckets on; 0: never */
	__u64 cap;  /* the map's max_entries: no key tries to graduate at or past it */
	__u64 pad0;
};

/* The map is under pressure from this fraction of max_entries on (the same
 * fraction above which the agent reaps idle buckets): numerator / 2^shift.
 */
#define LL_PRESSURE_NUM	  1
#define LL_PRESSURE_SHIFT 1

/* A key's fallback prefix under pressure: the source (dst-ip: destination)
 * /24 of IPv4, /48 of IPv6, or the limit's own prefix where that is shorter;
 * flow keys by their source's; dst-port keys by protocol and the block of
 * 256 ports their port is in.
 */
#define LL_PREFIX_V4_LEN    24
#define LL_PREFIX_V6_LEN    48
#define LL_PREFIX_PORT_MASK 0xff00
/* ll_prefix_buckets: max(max-keys, max-flow-keys) / LL_PREFIX_DIV entries,
 * at least LL_PREFIX_MIN.
 */
#define LL_PREFIX_DIV 4
#define LL_PREFIX_MIN 256

/* Per-key bucket. A bucket of a global limit may carry a per-key grant
 * (an override of this gateway's share for this key, copied from
 * ll_key_grants when the lease's kg_ver moves on; see bpf/bucket.h): then
 * its tokens are settled under o_gen with the o_* parameters while the
 * lease lives. Local limits leave the o_* fields zero.
 */
/* LL_RES_LOCK (an experiment, off by default: make LL_RES_LOCK=1) builds
 * the buckets with the resilient lock of kernel 6.15+ to price it against
 * bpf_spin_lock (docs/benchmarks.md, "The bucket lock"); it is not a
 * supported build: user space cannot read such a map with BPF_F_LOCK, so
 * the reaper and the hot-key reader fail (docs/design.md).
 */
#ifdef LL_RES_LOCK
struct bpf_res_spin_lock {
	__u32 val;
};
#define LL_BUCKET_LOCK struct bpf_res_spin_lock
#else
#define LL_BUCKET_LOCK struct bpf_spin_lock
#endif

struct ll_bucket {
	LL_BUCKET_LOCK lock;
	__u32 gen;	     /* generation the tokens are settled for (a view's or o_gen) */
	__u64 tokens;	     /* sub-tokens */
	__u64 last_ns;	     /* refilled up to this instant */
	__u64 deny_hint;     /* lock-free drop: see LL_HINT_CLASS_MASK; 0 = none */
	__u64 spent;	     /* whole tokens admitted, less refunds: a key's usage */
	__u64 o_rate;	     /* per-key grant: tokens/s */
	__u64 o_burst_s;     /* per-key grant: sub-tokens */
	__u64 o_fill_ns;
	__u32 o_gen;	     /* generation of the per-key grant; 0 = none (the share applies) */
	__u32 kg_seen;	     /* ll_lease.kg_ver the o_* fields were copied under (see bucket.h) */
	__u64 denied;	     /* units denied under the lock (sampled: see bucket.h) */
};
_Static_assert(sizeof(struct ll_bucket) == 80, "ll_bucket layout (docs/maps.md)");
/* ll_bucket.deny_hint, one word so that an unlocked read is consistent: no
 * packet whose class is at least the hint's can pay before the hint's
 * instant. The instant (CLOCK_MONOTONIC ns) is rounded down to 2^16 ns, the
 * class sits in the low 16 bits: 0 in packets mode (every packet costs the
 * same), the frame length in bytes (at most 0xffff) in bytes mode.
 */
#define LL_HINT_CLASS_MASK 0xffffull

/* key none: one shared pool per limit; CPUs take chunks into per-CPU slices
 * so the hot path touches no shared cache line. Invariant: pool.tokens + lent
 * <= burst_s, where lent is an upper bound on the tokens held by all slices,
 * so the pool plus every slice never exceeds one burst.
 */
struct ll_pool {
	struct bpf_spin_lock lock;
	__u32 gen;
	__u64 tokens;
	__u64 last_ns;
	__u64 lent;	      /* sum of slice balances as last reported by each CPU */
	__u64 empty_until_ns; /* hint read without the lock: no chunk before this */
};

struct ll_slice {
	__u64 tokens;	/* sub-tokens this CPU may spend without the pool */
	__u64 reported; /* balance this CPU last accounted for in pool.lent */
	__u32 gen;
	__u32 pad0;
};

/* What happens to a global limit once its lease has died (cfg on-loss). */
enum ll_on_loss {
	LL_ON_LOSS_FAIL_CLOSED = 0,
	LL_ON_LOSS_FALLBACK = 1,
	LL_ON_LOSS_FAIL_OPEN = 2,
};

/* This gateway's lease of a global limit (index: limit id), written whole by
 * the agent under the entry's lock (BPF_F_LOCK). The XDP program reads
 * expiry_ns and the generations without the lock on every packet: once
 * bpf_ktime_get_ns() >= expiry_ns the lease is dead and on_loss applies with
 * no help from the agent. Rate and burst are this gateway's share; while
 * dead with on_loss fallback, the fb_* share (reserved out of the contract)
 * applies under its own generation, so tokens from the lease are clamped to
 * the fallback burst and per-CPU slices from the lease are discarded.
 */
struct ll_lease {
	struct bpf_spin_lock lock;
	__u32 gen; /* generation of (rate, burst); unchanged by a plain renewal */
	__u32 prev_gen;
	__u32 fb_gen; /* generation used while dead with on_loss fallback */
	__u8 on_loss; /* enum ll_on_loss */
	__u8 pad0;
	__u16 n_key_grants; /* per-key grants of this limit in ll_key_grants (0: no lookup) */
	__u32 kg_ver;	    /* moves on whenever this limit's per-key grants change */
	__u64 expiry_ns; /* CLOCK_MONOTONIC; 0 = never granted */
	__u64 rate;
	__u64 burst_s;
	__u64 fill_ns;
	__u64 chunk_s;
	__u64 prev_rate;
	__u64 prev_burst_s;
	__u64 prev_fill_ns;
	__u64 reload_ns; /* when gen became current */
	__u64 fb_rate;
	__u64 fb_burst_s;
	__u64 fb_fill_ns;
	__u64 fb_chunk_s;
	__u64 epoch; /* the grant applied (for people; fencing state is in ll_fence) */
	__u64 seq;
};

/* Fencing state that must survive agent restarts (single entry). */
struct ll_fence {
	__u64 max_epoch_seen;		    /* highest coordinator epoch ever seen */
	__u64 incarnation;		    /* of the agent that last wrote this */
	__u64 applied_epoch[LL_MAX_LIMITS]; /* per limit id: grant applied */
	__u64 applied_seq[LL_MAX_LIMITS];
};

/* Outcome of charging one limit. */
enum ll_verdict {
	LL_DENY = 0,
	LL_ADMIT = 1,
	LL_ADMIT_FALLBACK = 2,
	LL_ADMIT_BYPASS = 3,
};

/* Per-CPU counters of one limit (index: limit id). */
struct ll_limit_stats {
	__u64 allowed_pkts;
	__u64 allowed_bytes;
	__u64 denied_pkts;
	__u64 denied_bytes;
	__u64 shadow_denied_pkts;
	__u64 shadow_denied_bytes;
	__u64 overflow_pkts; /* packets of keys sharing the overflow bucket (no room) */
	__u64 new_keys;	     /* buckets created full (not under pressure) */
	__u64 fallback_pkts; /* global: admitted from the fallback share after the lease died */
	__u64 fallback_bytes;
	__u64 bypass_pkts; /* global, fail-open: admitted unlimited after the lease died */
	__u64 bypass_bytes;
	/* Key-table pressure (appended: readers sum the struct as u64 words) */
	__u64 prefix_pkts;    /* packets of keys without a bucket charged to their prefix's */
	__u64 prefix_buckets; /* prefix fallback buckets created */
	__u64 graduated;      /* keys given a bucket of their own after a fallback admission */
};

/* Recent shadow denials of one limit (ll_shadow_win, index: limit id, per
 * CPU): what enforce would have dropped, by time slot, so that `status` can
 * say "over the last 10 s" from the pins alone. A slot spans 2^LL_WIN_SHIFT
 * ns (1.074 s); slot s counts into tag/pkts/bytes[s % LL_WIN_SLOTS] and is
 * zeroed when a later s reuses its index (tag != s). uid: the limit uid the
 * slots count for; a reused limit id starts over (every tag dropped).
 * Counted on the shadow-denial path only (a shadow limit takes its bucket's
 * lock anyway, or its deny hint): an enforced flood pays nothing for it.
 */
#define LL_WIN_SHIFT 30
#define LL_WIN_SLOTS 16
_Static_assert(LL_IS_POW2(LL_WIN_SLOTS), "slots are masked with LL_WIN_SLOTS - 1");

struct ll_shadow_win {
	__u64 uid;		   /* ll_limit_cfg.uid the slots belong to */
	__u64 tag[LL_WIN_SLOTS];   /* CLOCK_MONOTONIC ns >> LL_WIN_SHIFT of the slot; 0 = empty */
	__u64 pkts[LL_WIN_SLOTS];  /* shadow denials in that slot */
	__u64 bytes[LL_WIN_SLOTS]; /* their frame bytes */
};

/* Per-key metering (ll_meter, a per-CPU hash keyed by ll_flow_key: limit
 * uid + ll_key_id): running totals of each metered key's outcomes, by
 * class, packets and bytes. Never reaped with buckets; only the agent
 * deletes entries (of limits gone from the policy, once reported). When the
 * map is full a new key is counted under its limit's overflow key (family
 * LL_OVERFLOW_FAMILY, pre-created by the agent) and in ll_meter_info.full;
 * with no overflow entry either, in ll_meter_info.lost_*. Totals only grow
 * while ll_meter_info.ident stays: a new ident (pins lost) starts from zero.
 */
/* Entries of ll_meter, all limits: room for the 100k metered keys a gateway
 * may hold, and then some. Allocated as keys appear: the size
 * costs the hash table 16 bytes an entry, a key in use 64 bytes a CPU.
 */
#define LL_MAX_METER_KEYS 262144

enum ll_meter_class {
	LL_METER_ADMITTED = 0, /* under a live lease (or its share) */
	LL_METER_DENIED = 1,
	LL_METER_FALLBACK = 2, /* by the fallback share after the lease died */
	LL_METER_BYPASS = 3,   /* fail-open after the lease died */
	LL_METER_CLASSES,
};

struct ll_meter {
	__u64 pkts[LL_METER_CLASSES];
	__u64 bytes[LL_METER_CLASSES]; /* frame bytes */
	/* CLOCK_MONOTONIC ns when the entry was made, in the making CPU's copy
	 * (0 in the others: a reader takes the maximum). A key whose entry the
	 * agent retired and that comes back is a new series from 0.
	 */
	__u64 born;
};

/* ll_meter_info, entry 0: the counters' identity and what could not be
 * metered per key. ident: random, written by the agent when it finds 0 (new
 * pins, whose ll_meter it empties first); an agent restart that keeps the
 * pins keeps it, a reboot that lost them makes a new one.
 */
struct ll_meter_info {
	__u64 ident;
	__u64 created_ns; /* CLOCK_REALTIME when ident was made */
	__u64 full;	  /* packets counted under an overflow key: ll_meter was full */
	__u64 lost_pkts;  /* packets not metered at all (no overflow entry either) */
	__u64 lost_bytes;
	__u64 pad0[3];
};

/* Per-CPU counters of one rule (index: rule position; LL_MAX_RULES = default). */
struct ll_rule_stats {
	__u64 matched_pkts;
	__u64 matched_bytes;
	__u64 dropped_pkts;
	__u64 dropped_bytes;
};

/* The pin layout: what the maps pinned under a pin directory hold, as one
 * number. Raise LL_LAYOUT_VERSION with any change to a pinned map's key,
 * value, type, flags or meaning (docs/maps.md, "Pin layout"): an agent
 * refuses pins of another layout rather than misread every bucket. The
 * agent also compares each pinned map with its own (sizes, flags and BTF
 * types, field by field), so a change that forgot the bump is refused too.
 */
/* 2: ll_limit_cfg ov_ver and flags, ll_overrides; 3: ll_shadow_win; 4: ll_rule matches
 * tcp-flags, icmp-type and dst-port lists, LL_MAX_RULES 1024 (ll_policy, ll_rule_stats);
 * 5: ll_state link_up, link_connects, applies;
 * 6: LL_MAX_LIMITS 256 (ll_policy limits[], ll_fence, and the entries of every per-limit array);
 * ll_rule src_set, dst_set, action, ll_sets (prefix sets), ll_overrides keys of dst-port limits
 * and ll_meter, ll_meter_info (per-key metering), LL_LIM_METER;
 * 7: ll_meter_k (per-key metering of non-flow keys by the 24-byte ll_key; ll_meter keeps
 * flow keys only)
 */
#define LL_LAYOUT_VERSION   7
#define LL_LAYOUT_BUILD_LEN 48

/* ll_layout, entry 0. `version` stays the first 4 bytes in every layout to
 * come, so that any build can say which one it found.
 */
struct ll_layout {
	__u32 version; /* LL_LAYOUT_VERSION of the pins; 0 = not recorded yet */
	__u32 pad;
	char agent_build[LL_LAYOUT_BUILD_LEN]; /* LL_VERSION of the last agent that opened them */
};

#endif /* LEASELINE_LL_TYPES_H */
