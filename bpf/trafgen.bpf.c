// SPDX-License-Identifier: MIT
/*
 * Traffic generator for the live benchmark (bench/bench_live.c): run by
 * bpf_prog_test_run_opts with BPF_F_TEST_XDP_LIVE_FRAMES on the generator
 * veth, it rewrites the template frame's IPv4 source (and, past
 * tg_n_src keys, the UDP source port) to key `pos % tg_n_keys` and returns
 * XDP_TX, which test_run turns into a transmit on that veth.
 * Invariant: every field it varies is rewritten on every frame, so a page
 * recycled with an older frame's content still goes out correct.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the driver before each run (the .data map is writable after load). */
volatile __u32 tg_n_keys = 1; /* distinct keys, >= 1 */
volatile __u32 tg_n_src = 1; /* distinct sources; key k: source k % n_src, port k / n_src */
volatile __u32 tg_src_base = 0; /* first source address, host order */
volatile __u32 tg_sport_base = 1024; /* first UDP source port, host order */
/* One's complement sum of the IPv4 header's 16-bit words other than the source
 * address and the checksum, as they lie in the template (computed by the driver).
 */
volatile __u32 tg_csum_base = 0;
/* CLOCK_MONOTONIC of the first frame: where a limiter's window can start. */
volatile __u64 tg_first_ns = 0;

/* Frames built so far on this CPU: the rotation position. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tg_pos SEC(".maps");

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

SEC("xdp")
int trafgen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	struct udphdr *udp = (void *)(ip + 1);
	__u32 zero = 0, k, n_keys = tg_n_keys, n_src = tg_n_src, saddr;
	__u64 *pos = bpf_map_lookup_elem(&tg_pos, &zero);

	if (!pos || (void *)(udp + 1) > data_end)
		return XDP_ABORTED;
	if (!n_keys)
		n_keys = 1;
	if (!n_src)
		n_src = 1;
	if (!*pos)
		tg_first_ns = bpf_ktime_get_ns();
	k = (__u32)(*pos % n_keys);
	(*pos)++;
	saddr = bpf_htonl(tg_src_base + k % n_src);
	ip->saddr = saddr;
	udp->source = bpf_htons((__u16)(tg_sport_base + k / n_src));
	ip->check = csum_fold(tg_csum_base + (saddr & 0xffff) + (saddr >> 16));
	return XDP_TX;
}
