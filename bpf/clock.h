/* SPDX-License-Identifier: MIT */
/*
 * The two clocks of one packet, cached in its pkt_meta: the precise clock
 * (bpf_ktime_get_ns) that every charge is settled against, and the coarse
 * clock that only the lock-free deny hints are read against. Each is read at
 * most once per packet, and only when a limit needs it; 0 in pkt_meta means
 * not read yet. Invariant: the coarse clock only ever denies, never admits:
 * a hint decides by it alone only with LL_COARSE_SLACK_NS to spare.
 */
#ifndef LEASELINE_CLOCK_H
#define LEASELINE_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "parse.h"

/* The packet's clock: read once, by the first limit that needs it. */
static __always_inline __u64 meta_now(struct pkt_meta *m)
{
	if (!m->now)
		m->now = bpf_ktime_get_ns();
	return m->now;
}

/* The coarse clock (CLOCK_MONOTONIC as of the last timekeeping update, a tick
 * at most behind bpf_ktime_get_ns: 4 ms at HZ=250, 10 ms at HZ=100) costs a
 * few ns where bpf_ktime_get_ns costs 20-120 ns here (its TSC read waits for
 * every load before it, the packet's included). It decides only denials that
 * are certain with this much to spare; a deny time closer than that is left
 * to the packet's clock. Were the coarse clock ever further behind, the cost
 * would be packets denied up to that lag early, never one admitted.
 */
#define LL_COARSE_SLACK_NS 20000000ull

/* 1 when the coarse clock alone shows that `until` has not come. */
static __always_inline int coarse_before(struct pkt_meta *m, __u64 until)
{
	if (until <= LL_COARSE_SLACK_NS)
		return 0;
	if (!m->coarse)
		m->coarse = bpf_ktime_get_coarse_ns();
	return m->coarse < until - LL_COARSE_SLACK_NS;
}

#endif /* LEASELINE_CLOCK_H */
