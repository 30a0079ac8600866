// SPDX-License-Identifier: MIT
/*
 * Second floor for the live benchmark (bench/bench_live.c): the least any
 * per-key limiter must do on its drop path. Count the frame, read the IPv4
 * source (and UDP source port), one clock read, one hash lookup of an 8-byte
 * key, compare with the key's "not before" time, XDP_DROP. kf_lookup and kf_coarse
 * take the parts apart: the headers alone, or the lookup timed by either clock. A key seen for
 * the first time is inserted with "not before" one second on, and a key past
 * its time passes once and is pushed a second on (no lock: a probe, not a
 * limiter). leaseline ÷ this is what leaseline costs above the bare minimum
 * of per-key state and time; this ÷ the counting floor is what that minimum
 * costs on this machine.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* 0: stop after reading the headers (their cost alone) */
const volatile __u32 kf_lookup = 1;
/* 1: time the lookup with bpf_ktime_get_coarse_ns, 0: bpf_ktime_get_ns (what
 * leaseline charges with)
 */
const volatile __u32 kf_coarse = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kf_pkts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 21); /* the driver sizes it like ll_buckets */
	__type(key, __u64);
	__type(value, __u64);
} kf_keys SEC(".maps");

SEC("xdp")
int keyfloor(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&kf_pkts, &zero), key, now, *t, later;

	if (c)
		(*c)++;
	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	if (!kf_lookup)
		return ip->saddr ? XDP_DROP : XDP_PASS; /* a use of the header */
	key = (__u64)ip->saddr << 16 | udp->source;
	now = kf_coarse ? bpf_ktime_get_coarse_ns() : bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&kf_keys, &key);
	if (t && now < *t)
		return XDP_DROP;
	later = now + 1000000000ull;
	if (t)
		*t = later;
	else
		bpf_map_update_elem(&kf_keys, &key, &later, BPF_NOEXIST);
	return XDP_PASS;
}
