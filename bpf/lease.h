/* SPDX-License-Identifier: MIT */
/*
 * What a global limit's lease (ll_leases, written whole by the agent under
 * the entry's lock) gives its key-none pool or its per-key buckets: which
 * share a packet spends now (lease_state, read without the lock) and the
 * parameters of that share (lease_view: copied under the lock into this
 * CPU's ll_lease_views, so they are never half old, half new, and reused
 * lock-free while the lease keeps its generations). Invariants: once the clock passes expiry_ns the
 * lease is dead and its on-loss rule applies with no help from the agent; the fallback share runs
 * under its own generation, entered at expiry_ns, so the pool's tokens from
 * the lease are clamped to the fallback burst and its slices are dropped.
 */
#ifndef LEASELINE_BPF_LEASE_H
#define LEASELINE_BPF_LEASE_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "clock.h"
#include "ll_types.h"
#include "maps.h"
#include "params.h"

/* Which share a global limit spends now, by the packet's clock, exact near
 * the expiry (meta_before: a lagging clock never stretches a lease).
 * Returns the verdict to give an admitted packet, or LL_DENY (fail-closed) /
 * LL_ADMIT_BYPASS (fail-open) when the pool is not to be touched. *gen gets
 * the generation to spend.
 */
static __always_inline int lease_state(struct ll_lease *ls, struct pkt_meta *m, __u32 *gen)
{
	if (meta_before(m, *(volatile __u64 *)&ls->expiry_ns)) {
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

/* The generation a lock-free deny hint may be read against while lease ls
 * is certainly live (the coarse clock, with LL_COARSE_SLACK_NS to spare),
 * or 0 (no generation is 0): then on-loss decides, in the charge.
 */
static __always_inline __u32 lease_live_gen(struct ll_lease *ls, struct pkt_meta *m)
{
	if (!ls || !coarse_before(m, *(volatile __u64 *)&ls->expiry_ns))
		return 0;
	return *(volatile __u32 *)&ls->gen;
}

/* Move v on to share (gen, rate, burst_s, fill_ns, chunk_s), which replaced
 * the share v spent until then at from_ns: that one becomes v's previous.
 */
static __always_inline void view_next(struct share_view *v, __u32 gen, __u64 rate, __u64 burst_s,
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

/* This CPU's views of lease ls of limit id, copied anew (under the lease's
 * lock) when the lease has moved on from the generations, the per-key
 * grant set (kg_ver), or with fallback the expiry, they were copied from.
 * NULL if the cache is missing.
 */
static __always_inline struct ll_lease_views *lease_views(__u32 id, struct ll_lease *ls,
							  int fallback)
{
	struct ll_lease_views *c = bpf_map_lookup_elem(&ll_lease_views, &id);

	if (!c)
		return 0;
	if (c->gen != *(volatile __u32 *)&ls->gen || c->fb_gen != *(volatile __u32 *)&ls->fb_gen ||
	    c->kg_ver != *(volatile __u32 *)&ls->kg_ver ||
	    (fallback && c->expiry_ns != *(volatile __u64 *)&ls->expiry_ns)) {
		bpf_spin_lock(&ls->lock);
		c->gen = ls->gen;
		c->fb_gen = ls->fb_gen;
		c->expiry_ns = ls->expiry_ns;
		c->kg_ver = ls->kg_ver;
		c->n_key_grants = ls->n_key_grants;
		c->live.cur.rate = ls->prev_rate;
		c->live.cur.burst_s = ls->prev_burst_s;
		c->live.cur.fill_ns = ls->prev_fill_ns;
		c->live.gen = ls->prev_gen;
		view_next(&c->live, ls->gen, ls->rate, ls->burst_s, ls->fill_ns, ls->chunk_s,
			  ls->reload_ns);
		c->fb = c->live;
		view_next(&c->fb, ls->fb_gen, ls->fb_rate, ls->fb_burst_s, ls->fb_fill_ns,
			  ls->fb_chunk_s, ls->expiry_ns);
		bpf_spin_unlock(&ls->lock);
	}
	return c;
}

/* This CPU's live view of lease ls of limit id, or with fallback the
 * fallback one (lease_views); NULL if the cache is missing.
 */
static __always_inline struct share_view *lease_view(__u32 id, struct ll_lease *ls, int fallback)
{
	struct ll_lease_views *c = lease_views(id, ls, fallback);

	if (!c)
		return 0;
	return fallback ? &c->fb : &c->live;
}

#endif /* LEASELINE_BPF_LEASE_H */
