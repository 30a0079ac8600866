/* SPDX-License-Identifier: MIT */
/*
 * What a global limit's lease (ll_leases, written whole by the agent under
 * the entry's lock) gives its key-none pool: which share a packet spends now
 * (lease_state, read without the lock) and the parameters of that share
 * (view_from_lease, copied under the lock so they are never half old, half
 * new). Invariants: once the clock passes expiry_ns the lease is dead and its
 * on-loss rule applies with no help from the agent; the fallback share runs
 * under its own generation, entered at expiry_ns, so the pool's tokens from
 * the lease are clamped to the fallback burst and its slices are dropped.
 */
#ifndef LEASELINE_LEASE_H
#define LEASELINE_LEASE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ll_types.h"
#include "params.h"

/* Which share a global limit spends now. Returns the verdict to give an
 * admitted packet, or LL_DENY (fail-closed) / LL_ADMIT_BYPASS (fail-open)
 * when the pool is not to be touched. *gen gets the generation to spend.
 */
static __always_inline int lease_state(struct ll_lease *ls, __u64 now, __u32 *gen)
{
	if (now < *(volatile __u64 *)&ls->expiry_ns) {
		*gen = ls->gen;
		return LL_ADMIT;
	}
	if (ls->on_loss == LL_ON_LOSS_FAIL_OPEN)
		return LL_ADMIT_BYPASS;
	if (ls->on_loss != LL_ON_LOSS_FALLBACK)
		return LL_DENY;
	*gen = ls->fb_gen;
	return LL_ADMIT_FALLBACK;
}

/* Move v on to share (gen, rate, burst_s, fill_ns, chunk_s), which replaced
 * the share v spent until then at from_ns: that one becomes v's previous.
 */
static __always_inline void view_next(struct pool_view *v, __u32 gen, __u64 rate, __u64 burst_s,
				      __u64 fill_ns, __u64 chunk_s, __u64 from_ns)
{
	v->prev = v->cur;
	v->prev_gen = v->gen;
	v->reload_ns = from_ns;
	v->cur.rate = rate;
	v->cur.burst_s = burst_s;
	v->cur.fill_ns = fill_ns;
	v->chunk_s = chunk_s;
	v->gen = gen;
}

/* Copy a consistent view of the lease under its lock (the agent rewrites
 * it whole). A lease's shares follow one another: the previous one, its
 * share from reload_ns, and, dead with fallback, the fallback share from
 * expiry_ns. The view spends the last of them and settles from the one
 * before.
 */
static __always_inline void view_from_lease(struct ll_lease *ls, int fallback, struct pool_view *v)
{
	bpf_spin_lock(&ls->lock);
	v->cur.rate = ls->prev_rate;
	v->cur.burst_s = ls->prev_burst_s;
	v->cur.fill_ns = ls->prev_fill_ns;
	v->gen = ls->prev_gen;
	view_next(v, ls->gen, ls->rate, ls->burst_s, ls->fill_ns, ls->chunk_s, ls->reload_ns);
	if (fallback)
		view_next(v, ls->fb_gen, ls->fb_rate, ls->fb_burst_s, ls->fb_fill_ns,
			  ls->fb_chunk_s, ls->expiry_ns);
	bpf_spin_unlock(&ls->lock);
}

#endif /* LEASELINE_LEASE_H */
