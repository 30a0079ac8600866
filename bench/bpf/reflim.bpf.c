// SPDX-License-Identifier: MIT
/*
 * The reference limiter of issue #14 (bench/bench_live.c, bench/bench_datapath.c):
 * the simplest per-source limiter a user would write beside leaseline, to
 * compare with. IPv4 only, no rules, no statistics: the source address as a
 * 4-byte key (with ref_ports, source address and port as 8 bytes, for the
 * 1M-key runs whose generator varies the port) in a BPF_MAP_TYPE_HASH, the
 * precise clock (bpf_ktime_get_ns), and a GCRA token bucket ("theoretical
 * arrival time", tat) updated with a 64-bit compare-and-swap: rate R = 1 s /
 * ref_interval_ns, burst B = ref_tau_ns / ref_interval_ns + 1. A packet is
 * admitted iff max(tat, now) - now <= tau, and then tat moves on by one
 * interval; a denial writes nothing (the drop path only reads the entry's
 * line, as leaseline's deny hint does). Every frame is counted in rl_pkts
 * (the generator's window reads it). Not a product: a lost race (a CAS, or a
 * new key's insert) drops. A new key is made full (key_tat), then charged.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the driver before (or between) runs: .data, read every packet as
 * leaseline reads its policy.
 */
__u64 ref_interval_ns = 1000000000ull; /* 1 / rate */
__u64 ref_tau_ns SEC(".data") = 0;     /* (burst - 1) * interval */
__u32 ref_ports SEC(".data") = 0;      /* 1: key on source address and port */
/* 1: keep the keys in rl_table first (a prototype of issue #14's own table:
 * a BPF_MAP_TYPE_ARRAY of sets of 4 ways, one cache line each, an inline
 * multiply-shift hash, a tag claimed by CAS), rl_keys only for a key whose
 * set is full. A probe of what the table buys, not a product: a key can
 * race into both places, and an evicted way can lose a concurrent debit.
 */
__u32 ref_table SEC(".data") = 0;
__u32 ref_set_bits SEC(".data") = 10; /* rl_table holds 1 << ref_set_bits sets */
/* 1..RL_MAX_LIMITS: budgets a packet owes, all or none: its source under
 * /32, /24, /16 and /8 (the first ref_limits of them), each its own GCRA
 * word (the key carries the limit's index above the address). All are read
 * and checked (a check that fails drops the packet, nothing written), then
 * moved on by CAS in order; a CAS that loses a race drops it and gives the
 * words already moved back (an atomic subtract of the interval). What a limiter with one-word
 * buckets pays per extra budget: leaseline's 4 ÷ 1 on the admit path is
 * held against this (docs/benchmarks.md).
 */
__u32 ref_limits SEC(".data") = 1;
/* 1: time with bpf_ktime_get_coarse_ns, as leaseline does (a lagging clock
 * only under-admits); 0: bpf_ktime_get_ns, the reference as the issue set it.
 */
__u32 ref_coarse SEC(".data") = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 0: every frame, 1: admitted */
	__type(key, __u32);
	__type(value, __u64);
} rl_pkts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 21); /* the driver sizes it like ll_buckets */
	__type(key, __u64);
	__type(value, __u64); /* tat: the theoretical arrival time, ns */
} rl_keys SEC(".maps");

#define RL_WAYS 4
struct rl_way {
	__u64 tag; /* key + 1; 0: free */
	__u64 tat;
};
struct rl_set {
	struct rl_way w[RL_WAYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 10); /* the driver sizes it: 1 << ref_set_bits */
	__type(key, __u32);
	__type(value, struct rl_set);
} rl_table SEC(".maps");

/* The key's tat in rl_table, claiming a free way, or a way whose key is
 * idle (tat <= now: its bucket is full), for it; NULL when its set is full.
 */
static __always_inline __u64 *table_tat(__u64 key, __u64 now, int *fresh)
{
	__u32 set = (__u32)((key * 0x9e3779b97f4a7c15ull) >> (64 - ref_set_bits));
	struct rl_set *s = bpf_map_lookup_elem(&rl_table, &set);
	__u64 tag = key + 1, t;
	int i;

	if (!s)
		return 0;
#pragma unroll
	for (i = 0; i < RL_WAYS; i++)
		if (*(volatile __u64 *)&s->w[i].tag == tag)
			return &s->w[i].tat;
#pragma unroll
	for (i = 0; i < RL_WAYS; i++) {
		t = *(volatile __u64 *)&s->w[i].tag;
		if ((t == 0 || *(volatile __u64 *)&s->w[i].tat <= now) &&
		    __sync_val_compare_and_swap(&s->w[i].tag, t, tag) == t) {
			*fresh = 1;
			return &s->w[i].tat;
		}
	}
	return 0;
}

static __always_inline int admitted(void)
{
	__u32 one = 1;
	__u64 *c = bpf_map_lookup_elem(&rl_pkts, &one);

	if (c)
		(*c)++;
	return XDP_PASS;
}

/* The tat of key. A new key's is made here at now, a full bucket (the
 * packet's charge then moves it on); NULL when that insert lost to another
 * CPU's: its packet went first, this one drops.
 */
static __always_inline __u64 *key_tat(__u64 key, __u64 now)
{
	__u64 *tat;
	int fresh = 0;

	if (ref_table) {
		tat = table_tat(key, now, &fresh);
		if (tat && fresh)
			*tat = now;
		if (tat)
			return tat;
	}
	tat = bpf_map_lookup_elem(&rl_keys, &key);
	if (tat)
		return tat;
	if (bpf_map_update_elem(&rl_keys, &key, &now, BPF_NOEXIST))
		return 0;
	return bpf_map_lookup_elem(&rl_keys, &key);
}

/* Several budgets, all or none (ref_limits > 1), written out for constant
 * indices (the verifier tracks pointers spilled to fixed stack slots only).
 */
#define RL_READ(i)                                                                                 \
	if (i < ref_limits) {                                                                      \
		tat##i = key_tat((__u64)(saddr & bpf_htonl(0xffffffffu << (8 * i))) |              \
				     (__u64)(i + 1) << 40,                                         \
				 now);                                                             \
		if (!tat##i)                                                                       \
			return XDP_DROP;                                                           \
		t##i = *(volatile __u64 *)tat##i;                                                  \
		if (t##i > now + ref_tau_ns)                                                       \
			return XDP_DROP;                                                           \
	}
#define RL_MOVE(i)                                                                                 \
	if (i < ref_limits) {                                                                      \
		if (!tat##i ||                                                                     \
		    __sync_val_compare_and_swap(                                                   \
			tat##i, t##i, (t##i > now ? t##i : now) + ref_interval_ns) != t##i)        \
			goto undo;                                                                 \
		moved++;                                                                           \
	}
#define RL_UNDO(i)                                                                                 \
	if (moved > i && tat##i)                                                                   \
		__sync_fetch_and_sub(tat##i, ref_interval_ns);

static __always_inline int charge_all(__u32 saddr, __u64 now)
{
	__u64 *tat0 = 0, *tat1 = 0, *tat2 = 0, *tat3 = 0, t0 = 0, t1 = 0, t2 = 0, t3 = 0;
	int moved = 0;

	RL_READ(0)
	RL_READ(1)
	RL_READ(2)
	RL_READ(3)
	RL_MOVE(0)
	RL_MOVE(1)
	RL_MOVE(2)
	RL_MOVE(3)
	return admitted();
undo:
	/* A CAS lost a race: the budgets moved on before it get their interval back. */
	RL_UNDO(0)
	RL_UNDO(1)
	RL_UNDO(2)
	return XDP_DROP;
}

SEC("xdp")
int reflim(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&rl_pkts, &zero), key, now, *tat, t, next;

	if (c)
		(*c)++;
	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	key = ip->saddr;
	if (ref_ports && (void *)(udp + 1) <= end)
		key |= (__u64)udp->source << 32;
	now = ref_coarse ? bpf_ktime_get_coarse_ns() : bpf_ktime_get_ns();
	if (ref_limits > 1)
		return charge_all(ip->saddr, now);
	tat = key_tat(key, now);
	if (!tat)
		return XDP_DROP;
	t = *(volatile __u64 *)tat;
	if (t > now + ref_tau_ns)
		return XDP_DROP;
	next = (t > now ? t : now) + ref_interval_ns;
	if (__sync_val_compare_and_swap(tat, t, next) != t)
		return XDP_DROP;
	return admitted();
}
