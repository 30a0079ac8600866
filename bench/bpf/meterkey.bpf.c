// SPDX-License-Identifier: MIT
/*
 * What the key's size costs a per-key meter (bench/bench_meterkey.c, issue
 * #12): the same count as ll_meter_count (a per-CPU hash of the meter's
 * 72-byte value, allocated as keys appear, one class's packets and bytes
 * added) keyed by a 44-byte key (ll_flow_key's layout: what ll_meter uses
 * for every key mode) or by a 24-byte one (ll_key's: what a map for the
 * non-flow modes would use), and the headers alone for the floor. The
 * source address is the key, as for key: src-ip.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct mk_val {
	__u64 pkts[4];
	__u64 bytes[4];
	__u64 born;
};

struct mk_key44 {
	__u32 uid;
	__u8 proto, family;
	__u16 dport, sport, pad0;
	__u32 addr[4], addr2[4];
};

struct mk_key24 {
	__u32 uid;
	__u8 proto, family;
	__u16 dport;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mk_key44);
	__type(value, struct mk_val);
} mk_m44 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct mk_key24);
	__type(value, struct mk_val);
} mk_m24 SEC(".maps");

static __always_inline int src_of(struct xdp_md *ctx, __u32 *src, __u32 *len)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	*src = ip->saddr;
	*len = (__u32)(end - data);
	return 0;
}

#define MK_COUNT(map, k, len)                                                                      \
	({                                                                                         \
		struct mk_val *v = bpf_map_lookup_elem(&map, &k);                                  \
		if (!v) {                                                                          \
			struct mk_val z = {.born = bpf_ktime_get_ns()};                            \
			bpf_map_update_elem(&map, &k, &z, BPF_NOEXIST);                            \
			v = bpf_map_lookup_elem(&map, &k);                                         \
		}                                                                                  \
		if (v) {                                                                           \
			v->pkts[0]++;                                                              \
			v->bytes[0] += len;                                                        \
		}                                                                                  \
	})

SEC("xdp")
int mk_none(struct xdp_md *ctx)
{
	__u32 src, len;

	return src_of(ctx, &src, &len) ? XDP_ABORTED : XDP_PASS;
}

SEC("xdp")
int mk_44(struct xdp_md *ctx)
{
	struct mk_key44 k = {.uid = 7, .family = 4};
	__u32 len;

	if (src_of(ctx, &k.addr[3], &len))
		return XDP_ABORTED;
	k.addr[2] = bpf_htonl(0xffff);
	MK_COUNT(mk_m44, k, len);
	return XDP_PASS;
}

SEC("xdp")
int mk_24(struct xdp_md *ctx)
{
	struct mk_key24 k = {.uid = 7, .family = 4};
	__u32 len;

	if (src_of(ctx, &k.addr[3], &len))
		return XDP_ABORTED;
	k.addr[2] = bpf_htonl(0xffff);
	MK_COUNT(mk_m24, k, len);
	return XDP_PASS;
}
