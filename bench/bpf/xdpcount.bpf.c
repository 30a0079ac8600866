// SPDX-License-Identifier: MIT
/*
 * Floor for the live benchmark (bench/bench_live.c): count every frame on a
 * per-CPU counter and drop it. No parsing, no shared write: what remains of
 * the DUT's cost per packet is the driver's (veth NAPI, frame return).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xc_pkts SEC(".maps");

SEC("xdp")
int xdpcount(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&xc_pkts, &zero);

	(void)ctx;
	if (c)
		(*c)++;
	return XDP_DROP;
}
