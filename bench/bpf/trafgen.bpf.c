// SPDX-License-Identifier: MIT
/*
 * Traffic generator for the live benchmark (bench/bench_live.c): run by
 * bpf_prog_test_run_opts with BPF_F_TEST_XDP_LIVE_FRAMES on the generator
 * veth, it rewrites the template frame's IPv4 source (and, past tg_n_src
 * keys, the UDP source port) to the next key and returns XDP_TX, which
 * test_run turns into a transmit on that veth.
 *
 * Keys: every sweep of n_keys frames sends each key once, starting at an
 * offset that changes every sweep, so frames lost in a run (one devmap bulk
 * is 16 frames) do not fall on the same keys sweep after sweep.
 *
 * Window (tg_window != 0): at most tg_window frames in flight, counting as
 * done what the DUT's XDP program has counted on the DUT's CPU (tg_dut is
 * the driver's handle on that program's per-CPU counter map). Frames over
 * the window return XDP_DROP after waiting HOLD_NS. Why so careful:
 *  - without a window the generator overruns the veth ring (256 frames) many
 *    times over, and every refused frame goes back into test_run's page pool
 *    through the pool's ring, under the lock the DUT takes to return the frames
 *    it has processed: the two CPUs fight over that lock and the DUT's cost per
 *    packet is the fight's, not the program's;
 *  - a held frame (XDP_DROP) goes back through that same ring and lock, so
 *    holding frames back as fast as the CPU can build them is no better: each
 *    held frame first waits HOLD_NS, which cuts them to a few hundred thousand
 *    per second;
 *  - the DUT's counter is read only when the window looks full: each read pulls
 *    the cache line the DUT writes per packet over to this CPU.
 *
 * Invariant: every field it varies is rewritten on every frame, so a page
 * recycled with an older frame's content still goes out correct.
 * Runs on one CPU only (the driver's generator thread): the globals below
 * are not shared between CPUs.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Knuth's multiplicative hash of the sweep number: the sweep's first key. */
#define SWEEP_MUL 2654435761u
/* In flight longer than this without the DUT counting anything: frames were
 * lost after all (a ring refused them); forget them rather than stall.
 */
#define STALL_NS 20000000ull
/* How long a frame held back by the window waits before it is dropped (and
 * the window looked at again): the DUT drains the window in tens of us.
 */
#define HOLD_NS	       2000ull
#define HOLD_MAX_LOOPS 4096 /* bound of the wait loop, ~25 ns an iteration */

/* Set by the driver (the .data and .bss maps stay writable after load). */
volatile __u32 tg_n_keys = 1;	     /* distinct keys, >= 1 */
volatile __u32 tg_n_src = 1;	     /* distinct sources; key k: source k % n_src, port k / n_src */
volatile __u32 tg_src_base = 0;	     /* first source address, host order */
volatile __u32 tg_sport_base = 1024; /* first UDP source port, host order */
/* Key k's source is tg_src_base + (k % n_src) * tg_src_mul % n_src: 1 keeps
 * the sweep's order; an odd multiplier with a power-of-2 n_src permutes the
 * sources, scattering consecutive keys over the prefixes (a random-looking
 * flood, bench_live --src-mul).
 */
volatile __u32 tg_src_mul = 1;
/* One's complement sum of the IPv4 header's 16-bit words other than the source
 * address and the checksum, as they lie in the template (computed by the driver).
 */
volatile __u32 tg_csum_base = 0;
/* 1: write the varied fields into every frame even when the page already
 * holds them (the old behaviour); 0: only when they differ.
 */
volatile __u32 tg_write_always = 1;
volatile __u32 tg_window = 0;  /* frames in flight at most; 0: no limit */
volatile __u32 tg_dut_cpu = 1; /* where the DUT counts */
volatile __u32 tg_dut_key = 0; /* which entry of tg_dut counts our frames */

/* Written by the program. */
volatile __u64 tg_first_ns = 0;	  /* CLOCK_MONOTONIC of the first frame sent */
volatile __u64 tg_dut_base = 0;	  /* DUT count when the first frame went (or at a resync) */
volatile __u64 tg_done = 0;	  /* DUT count as last read */
volatile __u64 tg_sent_base = 0;  /* frames sent at that point */
volatile __u64 tg_stall_ns = 0;	  /* since when the window is full with no progress */
volatile __u64 tg_stall_done = 0; /* DUT count when that began */
volatile __u64 tg_held = 0;	  /* frames held back by the window (dropped unsent) */
volatile __u64 tg_resyncs = 0;	  /* times in-flight frames were written off */

/* Frames sent so far on this CPU: the rotation position. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tg_pos SEC(".maps");

/* The DUT program's per-CPU packet counter map (reused by fd; max_entries set
 * by the driver to match it).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tg_dut SEC(".maps");

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

static __always_inline __u64 dut_done(void)
{
	__u32 key = tg_dut_key;
	__u64 *c = bpf_map_lookup_percpu_elem(&tg_dut, &key, tg_dut_cpu);

	return c ? *c : 0;
}

static long hold_cb(__u64 i, void *arg)
{
	__u64 *until = arg;

	(void)i;
	return bpf_ktime_get_ns() >= *until; /* 1 ends the loop */
}

/* 1 if frame number `sent` may go now. */
static __always_inline int window_ok(__u64 sent)
{
	__u64 done, now;

	if (!tg_window)
		return 1;
	if (!sent) {
		tg_done = tg_dut_base = dut_done();
		tg_sent_base = 0;
	}
	if ((__s64)((sent - tg_sent_base) - (tg_done - tg_dut_base)) < tg_window)
		return 1;
	done = tg_done = dut_done();
	if ((__s64)((sent - tg_sent_base) - (done - tg_dut_base)) < tg_window) {
		tg_stall_ns = 0;
		return 1;
	}
	now = bpf_ktime_get_ns();
	if (!tg_stall_ns || done != tg_stall_done) {
		tg_stall_ns = now;
		tg_stall_done = done;
	} else if (now - tg_stall_ns > STALL_NS) {
		tg_dut_base = done;
		tg_sent_base = sent;
		tg_stall_ns = 0;
		tg_resyncs++;
		return 1;
	}
	now += HOLD_NS;
	bpf_loop(HOLD_MAX_LOOPS, hold_cb, &now, 0);
	tg_held++;
	return 0;
}

SEC("xdp")
int trafgen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + ETH_HLEN;
	struct udphdr *udp = (void *)(ip + 1);
	__u32 zero = 0, k, sweep, n_keys = tg_n_keys, n_src = tg_n_src, saddr;
	__u16 sport, check;
	__u64 *pos = bpf_map_lookup_elem(&tg_pos, &zero);

	if (!pos || (void *)(udp + 1) > data_end)
		return XDP_ABORTED;
	if (!window_ok(*pos))
		return XDP_DROP;
	if (!n_keys)
		n_keys = 1;
	if (!n_src)
		n_src = 1;
	if (!*pos)
		tg_first_ns = bpf_ktime_get_ns();
	sweep = (__u32)(*pos / n_keys);
	k = (__u32)(((*pos % n_keys) + (__u64)(sweep * SWEEP_MUL)) % n_keys);
	(*pos)++;
	saddr = bpf_htonl(tg_src_base + (__u32)((__u64)(k % n_src) * tg_src_mul % n_src));
	sport = bpf_htons((__u16)(tg_sport_base + k / n_src));
	check = csum_fold(tg_csum_base + (saddr & 0xffff) + (saddr >> 16));
	if (tg_write_always || ip->saddr != saddr || udp->source != sport || ip->check != check) {
		ip->saddr = saddr;
		udp->source = sport;
		ip->check = check;
	}
	return XDP_TX;
}
