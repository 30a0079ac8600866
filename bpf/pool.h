/* SPDX-License-Identifier: MIT */
/*
 * Key-none limits: one spin-locked pool per limit (ll_pools) from which each
 * CPU takes chunks into its own slice (ll_slices), so a hot aggregate does
 * not bounce one cache line between CPUs on every packet. A denial leaves
 * empty_until_ns in the pool, read without the lock: no chunk before then.
 * A local limit is charged with its policy's parameters, a global one with
 * its lease's (lease.h). Invariants: pool.tokens + pool.lent <= burst, lent
 * an upper bound of what all slices hold, so pool and slices together never
 * hold more than one burst and admit at most burst + rate * t tokens; a
 * refund never creates a token.
 */
#ifndef LEASELINE_BPF_POOL_H
#define LEASELINE_BPF_POOL_H

#include "maps.h"
#include "parse.h"
#include "clock.h"
#include "params.h"
#include "lease.h"

/* Take cost_s for this packet, topping this CPU's slice up from the shared
 * pool. Returns 1 if the packet is admitted. pool.lent is kept an upper bound
 * of what all slices hold (each CPU reports its balance after this packet's
 * debit), and the pool refills only up to burst - lent. A slice that is spent
 * down reports 0 at its next top-up, so at most one chunk per CPU is stranded.
 */
static __always_inline int pool_take(struct ll_pool *pool, struct ll_slice *sl,
				     const struct share_view *v, __u64 now, __u64 cost_s)
{
	struct tb_params cur = v->cur;
	__u64 tokens, last, bal, grab, need;
	int ok = 0;

	bal = sl->gen == v->gen ? sl->tokens : 0;
	bpf_spin_lock(&pool->lock);
	/* A new generation voids every slice of the old one (their CPUs will
	 * find the generation changed and drop them), so their reports go too.
	 */
	if (pool->gen != v->gen)
		pool->lent = 0;
	/* Take back what this CPU reported under this generation; it reports its
	 * balance anew below.
	 */
	if (sl->gen == v->gen)
		pool->lent = pool->lent >= sl->reported ? pool->lent - sl->reported : 0;
	cur.burst_s = cur.burst_s > pool->lent ? cur.burst_s - pool->lent : 0;
	last = pool->last_ns;
	tokens = tb_settle(pool->tokens, &last, pool->gen, v->gen, v->prev_gen, &cur, &v->prev,
			   v->reload_ns, now);
	need = cost_s - bal;
	if (tokens >= need) {
		grab = v->chunk_s > need ? v->chunk_s : need;
		if (grab > tokens)
			grab = tokens;
		tokens -= grab;
		bal += grab - cost_s;
		pool->empty_until_ns = 0; /* a hint from another generation must not linger */
		ok = 1;
	} else if (cur.rate) {
		/* Nothing to hand out until the deficit has refilled. */
		pool->empty_until_ns = now + (need - tokens) / cur.rate;
	}
	pool->lent += bal;
	pool->tokens = tokens;
	pool->last_ns = last;
	pool->gen = v->gen;
	bpf_spin_unlock(&pool->lock);
	sl->tokens = bal;
	sl->reported = bal;
	sl->gen = v->gen;
	return ok;
}

/* Give a debit back to the pool (not the slice, whose reported balance must
 * stay an upper bound). Clamped to burst - lent: at worst a token is lost,
 * never created.
 */
static __always_inline void pool_refund(struct ll_pool *pool, const struct share_view *v,
					__u64 cost_s)
{
	__u64 cap;

	bpf_spin_lock(&pool->lock);
	cap = v->cur.burst_s > pool->lent ? v->cur.burst_s - pool->lent : 0;
	pool->tokens = tb_refund(tb_clamp(pool->tokens, cap), cost_s, cap);
	bpf_spin_unlock(&pool->lock);
}

/* Debit (or with refund, give back) key-none limit id for packet m. Returns
 * an enum ll_verdict. A debit this CPU's slice can pay takes no lock and, for
 * a local limit, reads no clock.
 */
static __always_inline int pool_charge(__u32 id, const struct ll_limit_cfg *cfg, struct pkt_meta *m,
				       __u64 cost_s, int refund)
{
	__u64 now;
	struct ll_slice *sl = bpf_map_lookup_elem(&ll_slices, &id);
	struct ll_pool *pool = bpf_map_lookup_elem(&ll_pools, &id);
	struct ll_lease *ls = 0;
	int admit = LL_ADMIT;
	struct share_view local, *v = &local;
	__u32 gen = cfg->gen;

	if (!sl || !pool)
		return LL_DENY;
	if (cfg->scope == LL_SCOPE_GLOBAL) {
		ls = bpf_map_lookup_elem(&ll_leases, &id);
		if (!ls)
			return LL_DENY;
		admit = lease_state(ls, m, &gen);
		if (admit == LL_DENY || admit == LL_ADMIT_BYPASS)
			return refund ? LL_ADMIT : admit;
	}
	if (!refund && sl->gen == gen && sl->tokens >= cost_s) {
		sl->tokens -= cost_s;
		return admit;
	}
	if (!refund && pool->gen == gen &&
	    coarse_before(m, *(volatile __u64 *)&pool->empty_until_ns))
		return LL_DENY;
	now = meta_now_for(m, ls ? *(volatile __u64 *)&ls->fill_ns : cfg->fill_ns);
	if (!refund && pool->gen == gen && now < *(volatile __u64 *)&pool->empty_until_ns)
		return LL_DENY;
	if (ls)
		v = lease_view(id, ls, admit == LL_ADMIT_FALLBACK);
	else
		view_from_cfg(cfg, &local);
	if (!v)
		return refund ? LL_ADMIT : LL_DENY;
	if (refund) {
		pool_refund(pool, v, cost_s);
		return LL_ADMIT;
	}
	return pool_take(pool, sl, v, now, cost_s) ? admit : LL_DENY;
}

/* 1 when this CPU's slice cannot pay m and the pool's empty hint, read
 * against the coarse clock, says no chunk can be had yet (no lock, no debit).
 * A global limit counts only while its lease is certainly live (the coarse
 * clock with the same slack); otherwise its on-loss rule decides, in the
 * charge.
 */
static __always_inline int pool_hinted(__u32 id, const struct ll_limit_cfg *cfg, struct pkt_meta *m)
{
	struct ll_slice *sl = bpf_map_lookup_elem(&ll_slices, &id);
	struct ll_pool *pool = bpf_map_lookup_elem(&ll_pools, &id);
	__u32 gen = cfg->gen;

	if (!sl || !pool)
		return 0;
	if (cfg->scope == LL_SCOPE_GLOBAL)
		gen = lease_live_gen(bpf_map_lookup_elem(&ll_leases, &id), m);
	if (!gen)
		return 0;
	if (sl->gen == gen && sl->tokens >= tb_cost(cfg->unit, m->len))
		return 0;
	return pool->gen == gen && coarse_before(m, *(volatile __u64 *)&pool->empty_until_ns);
}

#endif /* LEASELINE_BPF_POOL_H */
