// SPDX-License-Identifier: MIT
/*
 * Baseline for benchmarks: the same parser and parse counters as the
 * limiter, then XDP_PASS. limiter ÷ this is the cost of limiting.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ll_types.h"
#include "parse.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LL_PARSE_MAX);
	__type(key, __u32);
	__type(value, __u64);
} pass_parse_stats SEC(".maps");

SEC("xdp")
int leaseline_pass(struct xdp_md *ctx)
{
	struct pkt_meta m = {};
	__u32 reason = parse_packet(ctx, &m);
	__u64 *c = bpf_map_lookup_elem(&pass_parse_stats, &reason);

	if (c)
		(*c)++;
	return XDP_PASS;
}
