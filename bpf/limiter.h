/* SPDX-License-Identifier: MIT */
/*
 * Charging one limit for one packet. Per-key limits keep one spin-locked
 * bucket per key in ll_buckets; key `none` limits keep a shared pool per
 * limit from which each CPU takes chunks into a per-CPU slice, so a hot
 * aggregate does not bounce one cache line between CPUs on every packet.
 * Invariant for both: tokens admitted <= burst + rate * t (pool + slices never
 * hold more than one burst). A debit is undone exactly by charge_refund.
 */
#ifndef LEASELINE_LIMITER_H
#define LEASELINE_LIMITER_H

#include <linux/errno.h>

#include "maps.h"
#include "parse.h"
#include "tb_math.h"

static __always_inline void cfg_params(const struct ll_limit_cfg *cfg, struct tb_params *cur,
				       struct tb_params *prev)
{
	cur->rate = cfg->rate;
	cur->burst_s = cfg->burst_s;
	cur->fill_ns = cfg->fill_ns;
	prev->rate = cfg->prev_rate;
	prev->burst_s = cfg->prev_burst_s;
	prev->fill_ns = cfg->prev_fill_ns;
}

static __always_inline void key_addr(__u32 *dst, const __u32 *src, const struct ll_limit_cfg *cfg,
				     __u8 family)
{
	if (family == 4) {
		dst[2] = src[2];
		dst[3] = src[3] & cfg->mask_v4;
	} else {
		dst[0] = src[0] & cfg->mask_v6[0];
		dst[1] = src[1] & cfg->mask_v6[1];
		dst[2] = src[2] & cfg->mask_v6[2];
		dst[3] = src[3] & cfg->mask_v6[3];
	}
}

static __always_inline void key_build(struct ll_key *k, const struct ll_limit_cfg *cfg,
				      const struct pkt_meta *m)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->limit_uid = cfg->uid;
	switch (cfg->key_mode) {
	case LL_KEY_SRC_IP:
		k->family = m->family;
		key_addr(k->addr, m->src, cfg, m->family);
		break;
	case LL_KEY_DST_IP:
		k->family = m->family;
		key_addr(k->addr, m->dst, cfg, m->family);
		break;
	case LL_KEY_DST_PORT:
		k->proto = m->proto;
		k->dport = m->dport;
		break;
	}
}

static __always_inline void flow_key_build(struct ll_flow_key *k, const struct ll_limit_cfg *cfg,
					   const struct pkt_meta *m)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->limit_uid = cfg->uid;
	k->family = m->family;
	k->proto = m->proto;
	k->sport = m->sport;
	k->dport = m->dport;
	__builtin_memcpy(k->addr, m->src, 16);
	__builtin_memcpy(k->addr2, m->dst, 16);
}

/* Count a bucket created or a key sent to the overflow bucket: rare events,
 * so the per-CPU counters are looked up only then.
 */
static __always_inline void count_key_event(__u32 id, int overflow)
{
	struct ll_limit_stats *st = bpf_map_lookup_elem(&ll_limit_stats, &id);

	if (!st)
		return;
	if (overflow)
		st->overflow_pkts++;
	else
		st->new_keys++;
}

/* Create the bucket of key k, which the lookup did not find. A new bucket
 * starts full (a key never seen has had all the time in the world to fill).
 * When the map is full the key shares its limit's pre-created overflow
 * bucket. count: attribute a creation or overflow to limit id (not on a
 * refund).
 */
static __always_inline struct ll_bucket *
bucket_create(void *map, void *k, __u32 key_size, const struct ll_limit_cfg *cfg, __u64 now,
	      __u32 id, int count)
{
	struct ll_bucket nb = {};
	long err;

	nb.gen = cfg->gen;
	nb.tokens = cfg->burst_s;
	nb.last_ns = now;
	err = bpf_map_update_elem(map, k, &nb, BPF_NOEXIST);
	if (err == 0) {
		if (count)
			count_key_event(id, 0);
	} else if (err != -EEXIST) { /* EEXIST: another CPU created it: use that one */
		struct ll_key_head *head = k; /* both key kinds begin alike */

		__builtin_memset(k, 0, key_size);
		head->limit_uid = cfg->uid;
		head->family = LL_OVERFLOW_FAMILY;
		if (count)
			count_key_event(id, 1);
	}
	return bpf_map_lookup_elem(map, k);
}

/* The class of a packet of len bytes under limit cfg (LL_HINT_CLASS_MASK). */
static __always_inline __u32 hint_class(const struct ll_limit_cfg *cfg, __u32 len)
{
	if (cfg->unit != LL_UNIT_BYTES)
		return 0;
	return len < LL_HINT_CLASS_MASK ? len : LL_HINT_CLASS_MASK;
}

/* The instant before which hint h refuses a packet of class `class`, or 0. */
static __always_inline __u64 hint_until(__u64 h, __u32 class)
{
	return class >= (h & LL_HINT_CLASS_MASK) ? h & ~LL_HINT_CLASS_MASK : 0;
}

/* Denied packets of a key that cannot pay yet skip the lock. A denial
 * stores in deny_hint when the bucket will hold the cost of a packet of the
 * denied one's class (one packet in packets mode; its length in bytes mode,
 * so a flood of equal frames is refused lock-free until the next one fits,
 * and smaller frames still get to try). Set under the lock, cleared by any
 * admission or refund, so it never refuses a packet the bucket could pay:
 * reading the one word unlocked can only see a value some denial computed
 * from the bucket's real state, or 0. limit_charge checks it first against
 * the coarse clock (see LL_COARSE_SLACK_NS), this against the packet's clock.
 */
static __always_inline int bucket_charge(struct ll_bucket *b, const struct ll_limit_cfg *cfg,
					 __u64 now, __u64 cost_s, __u32 len, int refund)
{
	struct tb_params cur, prev;
	__u64 tokens, last;
	__u32 class = hint_class(cfg, len);
	int ok = 1;

	if (!refund && b->gen == cfg->gen &&
	    now < hint_until(*(volatile __u64 *)&b->deny_hint, class))
		return 0;
	cfg_params(cfg, &cur, &prev);
	bpf_spin_lock(&b->lock);
	last = b->last_ns;
	tokens = tb_settle(b->tokens, &last, b->gen, cfg->gen, cfg->prev_gen, &cur, &prev,
			   cfg->reload_ns, now);
	if (refund)
		tokens = tb_refund(tokens, cost_s, cur.burst_s);
	else
		ok = tb_take(&tokens, cost_s);
	b->deny_hint = 0;
	if (!ok && cur.rate) {
		/* class < len only past 64 KiB: then the hint covers that size */
		__u64 need = tb_cost(cfg->unit, class);

		if (need > tokens)
			b->deny_hint = ((now + (need - tokens + cur.rate - 1) / cur.rate) &
					~LL_HINT_CLASS_MASK) |
				       class;
	}
	b->tokens = tokens;
	b->last_ns = last;
	b->gen = cfg->gen;
	bpf_spin_unlock(&b->lock);
	return ok;
}

/* The parameters a key-none pool is charged with: from the policy for a
 * local limit, from the lease (or its fallback share) for a global one.
 */
struct pool_view {
	struct tb_params cur, prev;
	__u64 reload_ns, chunk_s;
	__u32 gen, prev_gen;
};

static __always_inline void view_from_cfg(const struct ll_limit_cfg *cfg, struct pool_view *v)
{
	cfg_params(cfg, &v->cur, &v->prev);
	v->reload_ns = cfg->reload_ns;
	v->chunk_s = cfg->chunk_s;
	v->gen = cfg->gen;
	v->prev_gen = cfg->prev_gen;
}

/* Copy a consistent view of the lease under its lock (the agent rewrites
 * it whole). Dead with fallback: the fallback share, entered at expiry_ns.
 */
static __always_inline void view_from_lease(struct ll_lease *ls, int fallback, struct pool_view *v)
{
	bpf_spin_lock(&ls->lock);
	if (fallback) {
		v->cur.rate = ls->fb_rate;
		v->cur.burst_s = ls->fb_burst_s;
		v->cur.fill_ns = ls->fb_fill_ns;
		v->prev.rate = ls->rate;
		v->prev.burst_s = ls->burst_s;
		v->prev.fill_ns = ls->fill_ns;
		v->reload_ns = ls->expiry_ns;
		v->chunk_s = ls->fb_chunk_s;
		v->gen = ls->fb_gen;
		v->prev_gen = ls->gen;
	} else {
		v->cur.rate = ls->rate;
		v->cur.burst_s = ls->burst_s;
		v->cur.fill_ns = ls->fill_ns;
		v->prev.rate = ls->prev_rate;
		v->prev.burst_s = ls->prev_burst_s;
		v->prev.fill_ns = ls->prev_fill_ns;
		v->reload_ns = ls->reload_ns;
		v->chunk_s = ls->chunk_s;
		v->gen = ls->gen;
		v->prev_gen = ls->prev_gen;
	}
	bpf_spin_unlock(&ls->lock);
}

/* Take cost_s for this packet, topping this CPU's slice up from the shared
 * pool. Returns 1 if the packet is admitted. pool.lent is kept an upper bound
 * of what all slices hold (each CPU reports its balance after this packet's
 * debit), and the pool refills only up to burst - lent. A slice that is spent
 * down reports 0 at its next top-up, so at most one chunk per CPU is stranded.
 */
static __always_inline int pool_take(struct ll_pool *pool, struct ll_slice *sl,
				     const struct pool_view *v, __u64 now, __u64 cost_s)
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
static __always_inline void pool_refund(struct ll_pool *pool, const struct pool_view *v,
					__u64 cost_s)
{
	__u64 cap;

	bpf_spin_lock(&pool->lock);
	cap = v->cur.burst_s > pool->lent ? v->cur.burst_s - pool->lent : 0;
	pool->tokens = tb_refund(tb_clamp(pool->tokens, cap), cost_s, cap);
	bpf_spin_unlock(&pool->lock);
}

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

static __always_inline int pool_charge(__u32 id, const struct ll_limit_cfg *cfg, struct pkt_meta *m,
				       __u64 cost_s, int refund)
{
	__u64 now;
	struct ll_slice *sl = bpf_map_lookup_elem(&ll_slices, &id);
	struct ll_pool *pool = bpf_map_lookup_elem(&ll_pools, &id);
	struct ll_lease *ls = 0;
	int admit = LL_ADMIT;
	struct pool_view v;
	__u32 gen = cfg->gen;

	if (!sl || !pool)
		return LL_DENY;
	if (cfg->scope == LL_SCOPE_GLOBAL) {
		ls = bpf_map_lookup_elem(&ll_leases, &id);
		if (!ls)
			return LL_DENY;
		admit = lease_state(ls, meta_now(m), &gen);
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
	now = meta_now(m);
	if (!refund && pool->gen == gen && now < *(volatile __u64 *)&pool->empty_until_ns)
		return LL_DENY;
	if (ls)
		view_from_lease(ls, admit == LL_ADMIT_FALLBACK, &v);
	else
		view_from_cfg(cfg, &v);
	if (refund) {
		pool_refund(pool, &v, cost_s);
		return LL_ADMIT;
	}
	return pool_take(pool, sl, &v, now, cost_s) ? admit : LL_DENY;
}

/* 1 when bucket b's deny hint, read unlocked against the coarse clock,
 * already refuses m.
 */
static __always_inline int bucket_hinted(struct ll_bucket *b, const struct ll_limit_cfg *cfg,
					 struct pkt_meta *m)
{
	return b->gen == cfg->gen &&
	       coarse_before(m, hint_until(*(volatile __u64 *)&b->deny_hint, hint_class(cfg, m->len)));
}

/* Charge the bucket of key k in map (ll_buckets or ll_flow_buckets). */
static __always_inline int key_charge(void *map, void *k, __u32 key_size, __u32 id,
				      const struct ll_limit_cfg *cfg, struct pkt_meta *m,
				      __u64 cost_s, int refund)
{
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	__u64 now;

	if (b && !refund && bucket_hinted(b, cfg, m))
		return 0;
	now = meta_now(m);
	if (!b)
		b = bucket_create(map, k, key_size, cfg, now, id, !refund);
	if (!b)
		return 0;
	return bucket_charge(b, cfg, now, cost_s, m->len, refund);
}

/* 1 when the deny hint of m's bucket alone, read against the coarse clock,
 * shows the limit will deny m (no lock, no debit, no bucket created).
 */
static __always_inline int key_hinted(void *map, void *k, const struct ll_limit_cfg *cfg,
				      struct pkt_meta *m)
{
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);

	return b && bucket_hinted(b, cfg, m);
}

/* The same for a key-none limit: this CPU's slice cannot pay m and the
 * pool's empty hint says no chunk can be had yet. A global limit counts only
 * while its lease is certainly live (the coarse clock with the same slack);
 * otherwise its on-loss rule decides, in the charge.
 */
static __always_inline int pool_hinted(__u32 id, const struct ll_limit_cfg *cfg,
				       struct pkt_meta *m)
{
	struct ll_slice *sl = bpf_map_lookup_elem(&ll_slices, &id);
	struct ll_pool *pool = bpf_map_lookup_elem(&ll_pools, &id);
	__u32 gen = cfg->gen;

	if (!sl || !pool)
		return 0;
	if (cfg->scope == LL_SCOPE_GLOBAL) {
		struct ll_lease *ls = bpf_map_lookup_elem(&ll_leases, &id);

		if (!ls || !coarse_before(m, *(volatile __u64 *)&ls->expiry_ns))
			return 0;
		gen = ls->gen;
	}
	if (sl->gen == gen && sl->tokens >= tb_cost(cfg->unit, m->len))
		return 0;
	return pool->gen == gen && coarse_before(m, *(volatile __u64 *)&pool->empty_until_ns);
}

static __always_inline int limit_hinted(__u32 id, const struct ll_limit_cfg *cfg,
					struct pkt_meta *m)
{
	if (cfg->mode == LL_MODE_SHADOW)
		return 0;
	if (cfg->key_mode == LL_KEY_NONE)
		return pool_hinted(id, cfg, m);
	if (cfg->key_mode == LL_KEY_FLOW) {
		struct ll_flow_key fk;

		flow_key_build(&fk, cfg, m);
		return key_hinted(&ll_flow_buckets, &fk, cfg, m);
	}
	struct ll_key k;

	key_build(&k, cfg, m);
	return key_hinted(&ll_buckets, &k, cfg, m);
}

/* Debit (or with refund, give back) one limit for packet m. Returns an
 * enum ll_verdict. A packet that can find no state is denied: the limiter
 * never admits because it lost track.
 */
static __always_inline int limit_charge(__u32 id, const struct ll_limit_cfg *cfg,
					struct pkt_meta *m, __u64 cost_s, int refund)
{
	if (cfg->key_mode == LL_KEY_NONE)
		return pool_charge(id, cfg, m, cost_s, refund);
	if (cfg->key_mode == LL_KEY_FLOW) {
		struct ll_flow_key fk;

		flow_key_build(&fk, cfg, m);
		return key_charge(&ll_flow_buckets, &fk, sizeof(fk), id, cfg, m, cost_s, refund);
	}
	struct ll_key k;

	key_build(&k, cfg, m);
	return key_charge(&ll_buckets, &k, sizeof(k), id, cfg, m, cost_s, refund);
}

#endif /* LEASELINE_LIMITER_H */
