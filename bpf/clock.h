/* SPDX-License-Identifier: MIT */
/*
 * The clocks of one packet, cached in its pkt_meta (0: not read yet). Every
 * charge is settled against the packet's clock, `now` (meta_now): by default
 * the coarse clock (bpf_ktime_get_coarse_ns: CLOCK_MONOTONIC as of the last
 * timekeeping update, a few ns to read), or with ll_clock_precise (set by the
 * loader) the precise one (bpf_ktime_get_ns: 20-120 ns here, its TSC read
 * waits for every load before it, the packet's included). One clock read per
 * packet, and only when a limit needs it, except near a lease's expiry
 * (meta_before) and for a limit that refills its burst within a few ticks
 * (meta_now_for), where the packet's clock becomes the precise one.
 *
 * Invariant: no clock reading is ever ahead of the precise clock, so a
 * bucket or pool is never credited refill for time that has not passed: a
 * lagging clock can only under-admit. A bucket's refill is credited from its
 * last_ns to the packet's clock, and last_ns never moves back, so the refill
 * a lagging reading leaves out is credited by a later one; what a key loses
 * is at most rate x lag at any moment, and nothing over time unless its
 * bucket sat full meanwhile (then it is lost as it would be anyway). The
 * coarse clock lags by at most a tick (4 ms at HZ=250: rate x 4 ms tokens,
 * 0.004 tokens at 1 packet/s, 400 packets at 100k/s), up to 5 ticks when the
 * CPU doing timekeeping stalls (the kernel's MAX_STALLED_JIFFIES): 20 ms.
 * Where a lagging clock could admit (a lease's expiry, a bucket the reaper
 * deletes as full) the check is taken with LL_COARSE_SLACK_NS to spare.
 * A new bucket (and a fallback bucket's charge) starts at the precise clock:
 * made full at a lagging reading, it would count refill from before the
 * key's first packet, R x lag more than B + R*t from that packet on. Over a
 * window that opens mid-stream while the clock lags, refill owed from
 * before it can still arrive inside it: up to R x lag, a delay of a tick.
 */
#ifndef LEASELINE_BPF_CLOCK_H
#define LEASELINE_BPF_CLOCK_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "parse.h"

/* 1: settle every charge against bpf_ktime_get_ns, the precise clock, not
 * the coarse one (the benchmarks compare the two). Set by the loader
 * (struct dp_opts), frozen at load: the verifier drops the branch not taken.
 */
const volatile __u32 ll_clock_precise = 0;

/* The coarse clock, read once per packet. */
static __always_inline __u64 meta_coarse(struct pkt_meta *m)
{
	if (!m->coarse)
		m->coarse = bpf_ktime_get_coarse_ns();
	return m->coarse;
}

/* The packet's clock: read once, by the first limit that needs it. */
static __always_inline __u64 meta_now(struct pkt_meta *m)
{
	if (!m->now) {
		if (ll_clock_precise) {
			m->now = bpf_ktime_get_ns();
			m->precise = 1;
		} else {
			m->now = meta_coarse(m);
		}
	}
	return m->now;
}

/* The precise clock, which from then on is the packet's clock (a later
 * reading than the coarse one: never ahead of time, so never generous).
 */
static __always_inline __u64 meta_precise(struct pkt_meta *m)
{
	if (!m->precise) {
		m->now = bpf_ktime_get_ns();
		m->precise = 1;
	}
	return m->now;
}

/* A bucket or pool that fills in less than this from empty is charged
 * against the precise clock: the coarse one moves by ticks, and a tick's
 * refill (rate x tick) clamped to a burst smaller than it would cap the
 * key at burst per tick (burst x HZ: at rate 100k/s and burst 50, 12.5k/s).
 * From LL_COARSE_SLACK_NS on, even 5 ticks of a stalled clock refill at
 * most one burst, so nothing is clamped away from a key that spends as it
 * refills: it loses only the lag's refill, and only until the next tick.
 */
#define LL_COARSE_MIN_FILL_NS LL_COARSE_SLACK_NS

/* The packet's clock for a limit whose buckets fill in fill_ns (0: rate 0,
 * never refills): the coarse one unless that fill is shorter than
 * LL_COARSE_MIN_FILL_NS.
 */
static __always_inline __u64 meta_now_for(struct pkt_meta *m, __u64 fill_ns)
{
	if (fill_ns && fill_ns < LL_COARSE_MIN_FILL_NS)
		return meta_precise(m);
	return meta_now(m);
}

/* 1 when the packet comes before `until` (a lease's expiry): by the coarse
 * clock alone when that is certain with LL_COARSE_SLACK_NS to spare, else by
 * the precise clock, which then becomes the packet's clock (a later reading
 * for the rest of its charges: never ahead of time, so never generous).
 */
static __always_inline int meta_before(struct pkt_meta *m, __u64 until)
{
	__u64 now = meta_now(m);

	if (m->precise || now >= until || until - now > LL_COARSE_SLACK_NS)
		return now < until;
	return meta_precise(m) < until;
}

/* 1 when the coarse clock alone shows that `until` has not come: decides a
 * lock-free denial (a deny hint) only with LL_COARSE_SLACK_NS to spare; a
 * deny time closer than that is left to the charge. Were the coarse clock
 * ever further behind, the cost would be packets denied up to that lag early,
 * never one admitted.
 */
static __always_inline int coarse_before(struct pkt_meta *m, __u64 until)
{
	if (until <= LL_COARSE_SLACK_NS)
		return 0;
	return meta_coarse(m) < until - LL_COARSE_SLACK_NS;
}

#endif /* LEASELINE_BPF_CLOCK_H */
