/* SPDX-License-Identifier: MIT */
/*
 * Maps of the leaseline datapath, all with BTF and pinned by name under the
 * agent's pin directory (docs/maps.md describes each). The sizes of
 * ll_buckets and ll_flow_buckets are set by the agent from max-keys before
 * load.
 */
#ifndef LEASELINE_BPF_MAPS_H
#define LEASELINE_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ll_types.h"
#include "params.h"

/* A map helper's error as the int it is. Before Linux 6.4 ("bpf: return
 * long from bpf_map_ops funcs") the kernel's map operations return int, and
 * the helper call, patched to call them directly, hands the program that int
 * zero-extended: -EEXIST reads as 4294967279 in a long. Compared as a long,
 * a lost BPF_NOEXIST race would look like a failed insert and charge the
 * key's packet to its prefix's fallback bucket instead of the bucket the
 * other CPU has just made.
 */
static __always_inline int map_err(long err)
{
	return (int)err;
}

/* Default when the loader does not set max-keys (tests, benchmarks). */
#define LL_DEFAULT_MAX_KEYS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LL_POLICY_SLOTS);
	__type(key, __u32);
	__type(value, struct ll_policy);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_policy SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ll_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_state SEC(".maps");

/* Which pin layout the maps under the pin directory follow (struct
 * ll_layout); written and checked by the agent only, never by XDP.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ll_layout);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_layout SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LL_DEFAULT_MAX_KEYS);
	__type(key, struct ll_key);
	__type(value, struct ll_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_buckets SEC(".maps");

/* Flow keys apart: the 44-byte key would slow every other mode's lookups.
 * Preallocated like ll_buckets (allocating elements as flows arrive cost
 * 200 ns per packet at 1M flows in bench-live), sized by max-flow-keys.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LL_DEFAULT_MAX_KEYS);
	__type(key, struct ll_flow_key);
	__type(value, struct ll_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_flow_buckets SEC(".maps");

/* Fallback buckets of key prefixes (bpf/key.h, prefix_key_build), keyed
 * like ll_buckets: a key without a bucket of its own is charged here while
 * its bucket map is under pressure. Preallocated; sized by the agent.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LL_DEFAULT_MAX_KEYS / LL_PREFIX_DIV);
	__type(key, struct ll_key);
	__type(value, struct ll_bucket);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_prefix_buckets SEC(".maps");

/* How full each bucket map is (struct ll_fill, index enum ll_fill_map). The
 * agent maps it to correct the counts with atomic adds; pinned with the
 * bucket maps it counts.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LL_FILL_MAPS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct ll_fill);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_fill SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_pool);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_pools SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_slice);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_slices SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_limit_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_limit_stats SEC(".maps");

/* Per CPU, per rule (index as ll_rule_stats): 1 while the deny-hint pre-pass
 * of a rule with several limits pays for itself, that is while the last
 * packet of the rule this CPU decided was denied by a limit after the first
 * (bpf/leaseline.bpf.c, rule_charge). A cache, so not pinned.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_RULES + 1);
	__type(key, __u32);
	__type(value, __u32);
} ll_rule_prepass SEC(".maps");

/* Shadow denials by time slot (struct ll_shadow_win, index: limit id). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_shadow_win);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_shadow_win SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_RULES + 1); /* last entry: unmatched (default) */
	__type(key, __u32);
	__type(value, struct ll_rule_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_rule_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_PARSE_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_parse_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_lease);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_leases SEC(".maps");

/* Per-CPU copies of each lease's views (params.h); a cache, so not pinned:
 * entries are checked against the lease's generations before every use.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_MAX_LIMITS);
	__type(key, __u32);
	__type(value, struct ll_lease_views);
} ll_lease_views SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ll_fence);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_fence SEC(".maps");

/* Per-key grants of global limits (struct ll_key_grant), keyed by limit
 * uid + key (an ll_flow_key; other modes' keys as ll_key_id lays them out).
 * Written only by the agent, a whole limit's set per grant applied; read by
 * a bucket when its lease's kg_ver moved on (bpf/key_charge.h), never per
 * packet. Allocated as used: most gateways hold few.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LL_MAX_KEY_GRANTS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ll_flow_key);
	__type(value, struct ll_key_grant);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_key_grants SEC(".maps");

/* Per-key overrides of local limits (include/ll_types.h, struct ll_ov_key):
 * read by a bucket when it is made and when its limit's ov_ver moved on
 * (bpf/key_charge.h), never per packet. Written by the agent from the files
 * the policy names.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, LL_MAX_OVERRIDES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ll_ov_key);
	__type(value, struct ll_key_grant);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_overrides SEC(".maps");

/* Prefix sets of rule matches src-set and dst-set (include/ll_types.h,
 * struct ll_set_key): one LPM lookup per set condition a scanned rule
 * reaches. Written by the agent, a whole set under a fresh id before the
 * policy naming that id goes live; the old id's entries are deleted after.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, LL_SET_MAP_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ll_set_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_sets SEC(".maps");

/* Keys of global limits denied while the lease lives (struct
 * ll_hot_event), for the agent to report as hot. Not pinned: only the
 * running agent reads it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ll_hot SEC(".maps");

/* Per CPU: when each gate slot (a hash of limit and key) last let a hot
 * event out, so a key denied at line rate costs the ring a few events a
 * second, not one per packet.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_HOT_GATE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} ll_hot_gate SEC(".maps");

/* Per-key metering of metered global limits (struct ll_meter, ll_types.h):
 * per CPU, so a packet adds without atomics; allocated as keys appear (a
 * key's first packet pays the allocation once). Sized by the agent.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LL_MAX_METER_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ll_flow_key);
	__type(value, struct ll_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_meter SEC(".maps");

/* The same for the limits whose key is not a flow (src-ip, dst-ip,
 * dst-port): keyed by the 24-byte ll_key, whose hash and compare cost a
 * packet about a third of the 44-byte ll_flow_key's (bench_meterkey). A
 * limit's keys are in one of the two maps, by its key mode.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, LL_MAX_METER_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ll_key);
	__type(value, struct ll_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_meter_k SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ll_meter_info);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ll_meter_info SEC(".maps");

/* Per CPU: room for what a bucket miss under pressure builds (a fallback
 * key, a new bucket's value) and for a global limit's per-key grant as a
 * bucket copies it, off the 512-byte BPF stack, which the packet path's
 * frames nearly fill; all rare paths. Used within one limit's charge only.
 */
struct ll_scratch {
	struct ll_flow_key key;
	__u32 pad0;
	/* A struct ll_bucket, as bytes: a per-CPU map may not hold a spin lock. */
	__u64 nb[sizeof(struct ll_bucket) / sizeof(__u64)];
	struct ll_key_grant ng; /* a key's grant (or override), as copied */
	struct ll_ov_key ok;	/* the key of an override lookup */
};

_Static_assert(sizeof(struct ll_bucket) % sizeof(__u64) == 0, "ll_scratch.nb holds a bucket");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ll_scratch);
} ll_scratch SEC(".maps");

#endif /* LEASELINE_BPF_MAPS_H */
