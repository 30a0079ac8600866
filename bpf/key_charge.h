/* SPDX-License-Identifier: MIT */
/*
 * Charging per-key limits (src-ip, dst-ip, dst-port, flow): one bucket per
 * key (bucket.h), in ll_buckets or, for flow keys, ll_flow_buckets. While
 * that map is under pressure (ll_fill), or has no room, a key without a
 * bucket is charged to its prefix's fallback bucket (ll_prefix_buckets; its
 * limit's overflow bucket when that map has no room either) and gets a
 * bucket of its own only once that admitted it, with what the fallback
 * bucket had left, never a fresh burst (key_fallback, key_graduate). Each
 * bucket carries a deny hint so that a key that cannot pay yet is refused
 * without the lock. A local limit's buckets are charged with the policy's
 * (rate, burst); a global one's with this gateway's leased share of every
 * key's contract (lease.h), or, for a key with a per-key grant
 * (ll_key_grants), with that grant while the lease lives; when the lease
 * dies its on-loss applies to every key, granted or not. Every bucket
 * counts what it admitted (spent). Invariants: a bucket admits at most
 * burst + rate * t tokens of the view it is charged with; moving a bucket
 * to another view (a reload, a changed share, a grant installed, changed or
 * removed) never deposits tokens; a refund undoes a debit (tokens and
 * spent) exactly, in the bucket that took it, and leaves denied alone; the
 * deny hint never refuses a packet the bucket could pay. A bucket also
 * counts what it denied under its lock (denied: a sample of its denials).
 * Under pressure no key gets more than burst + rate * t of its own plus
 * what its prefix's fallback bucket admits for the whole prefix (burst +
 * rate * t): tokens a graduating key takes along leave the fallback bucket.
 */
#ifndef LEASELINE_BPF_KEY_CHARGE_H
#define LEASELINE_BPF_KEY_CHARGE_H

#include "maps.h"
#include "parse.h"
#include "clock.h"
#include "params.h"
#include "lease.h"
#include "key.h"
#include "bucket.h"

/* The fallback bucket of packet m under limit id: its prefix's (key built
 * in kb as an ll_key), made full at v's burst if missing (a prefix never
 * seen has had all the time in the world to fill: the rule of a key's
 * bucket, so deleting a full one changes nothing); when ll_prefix_buckets
 * has no room, the limit's pre-created overflow bucket in `map` (key kb;
 * *over = 1). NULL if none. nb: room for a new bucket's value.
 */
static __always_inline struct ll_bucket *
fallback_bucket(void *map, struct ll_flow_key *kb, struct ll_bucket *nb,
		const struct ll_limit_cfg *cfg, const struct share_view *v,
		const struct pkt_meta *m, __u64 now, __u32 id, int *over)
{
	struct ll_key *pk = (struct ll_key *)kb;
	struct ll_bucket *fb;
	int err;

	prefix_key_build(pk, cfg, m);
	fb = bpf_map_lookup_elem(&ll_prefix_buckets, pk);
	if (fb)
		return fb;
	__builtin_memset(nb, 0, sizeof(*nb));
	nb->gen = v->gen;
	nb->tokens = v->cur.burst_s;
	nb->last_ns = now;
	err = map_err(bpf_map_update_elem(&ll_prefix_buckets, pk, nb, BPF_NOEXIST));
	if (err == 0)
		count_key_event(id, KEV_PREFIX_NEW);
	if (err == 0 || err == -EEXIST)
		return bpf_map_lookup_elem(&ll_prefix_buckets, pk);
	*over = 1;
	overflow_key(kb, cfg->uid);
	return bpf_map_lookup_elem(map, kb);
}

/* Key k (of limit id, in map, counted by f), just admitted by fallback
 * bucket fb, graduates: it gets a bucket of its own, nb, which bucket_take
 * filled, under fb's lock, with what fb held after that admission (settled
 * to the view v it was charged with, so at most v's burst) and the instant
 * it was counted to, emptying fb. So the key starts with what its prefix
 * could still have paid it, never a fresh burst, and tokens are moved,
 * never copied: a prefix and all the keys that left it were handed burst +
 * rate * t by fb, each key adding only its own refill since it left. No
 * room, or another CPU created k's bucket meanwhile: fb gets them back.
 */
static __always_inline void key_graduate(void *map, void *k, struct ll_bucket *fb,
					 struct ll_bucket *nb, const struct share_view *v, __u32 id,
					 struct ll_fill *f)
{
	if (!bpf_map_update_elem(map, k, nb, BPF_NOEXIST)) {
		__sync_fetch_and_add(&f->live, 1);
		count_key_event(id, KEV_GRADUATED);
		return;
	}
	if (!nb->tokens)
		return;
	if (BUCKET_LOCK(&fb->lock))
		return;
	if (fb->gen == nb->gen)
		fb->tokens = tb_refund(fb->tokens, nb->tokens, v->cur.burst_s);
	BUCKET_UNLOCK(&fb->lock);
}

/* Where a per-key limit's debit went: the verdict of a charge carries it
 * above LL_VERDICT_MASK (verdict | via << LL_VIA_SHIFT), and the refund of
 * that debit is passed that verdict as `refund`, so it goes back where it
 * came from.
 */
enum ll_via {
	LL_VIA_OWN = 0,	     /* the key's own bucket */
	LL_VIA_PREFIX = 1,   /* its prefix's fallback bucket */
	LL_VIA_OVERFLOW = 2, /* its limit's overflow bucket */
};
#define LL_VERDICT_MASK 0x0f
#define LL_VIA_SHIFT	4

/* 1 when a per-key grant as read can be charged with: the bounds the token
 * math relies on (tb_math.h: rate * (fill_ns - 1) < burst_s + rate, so no
 * refill product wraps) and a generation. Grants are values of a hash map
 * the agent updates: an element can be reused while a lookup still holds
 * it, so a copy may mix two grants; checked once per copy, not per packet.
 */
static __always_inline int key_grant_ok(const struct ll_key_grant *g)
{
	if (!g->gen || g->rate > TB_MAX_RATE || g->burst_s > TB_MAX_BURST * TB_SCALE)
		return 0;
	if (!g->rate)
		return g->fill_ns == 0;
	return g->fill_ns <= g->burst_s / g->rate + 1;
}

/* The per-key grant of key k (of limit uid k's) into *g, gen 0 when it has
 * none. 0, or -1 when the copy is not consistent (try again next packet).
 */
static __always_inline int key_grant_read(const void *k, __u32 key_size, struct ll_key_grant *g)
{
	struct ll_flow_key fk;
	struct ll_key_grant *e;

	key_as_flow_key(&fk, k, key_size);
	e = bpf_map_lookup_elem(&ll_key_grants, &fk);
	if (!e) {
		__builtin_memset(g, 0, sizeof(*g));
		return 0;
	}
	*g = *e;
	return key_grant_ok(g) ? 0 : -1;
}

/* The override of key k (an ll_key of an address, or of a dst port) into
 * *g, gen 0 when no prefix of ll_overrides covers it. 0, or -1 when the copy is not consistent.
 */
static __always_inline int override_read(const void *k, struct ll_scratch *sc)
{
	const struct ll_key *kk = k;
	struct ll_ov_key *ok = &sc->ok; /* off the stack, as the grant's copy */
	struct ll_key_grant *g = &sc->ng, *e;

	ok->prefixlen = 32 + 128;
	ok->limit_uid = kk->limit_uid;
	__builtin_memcpy(ok->addr, kk->addr, sizeof(ok->addr));
	/* A dst-port key (family 0, address zero): its port in bytes 0-1. */
	if (!kk->family)
		ok->addr[0] = kk->dport;
	e = bpf_map_lookup_elem(&ll_overrides, ok);
	if (!e) {
		__builtin_memset(g, 0, sizeof(*g));
		return 0;
	}
	*g = *e;
	return key_grant_ok(g) ? 0 : -1;
}

/* The generation bucket b of a local limit with overrides is charged under
 * (its override's, or the limit's gen), read unlocked; 0 (go to the lock)
 * when b has not copied the limit's current overrides (kv).
 */
static __always_inline __u32 override_hint_gen(struct ll_bucket *b, __u32 kv, __u32 gen)
{
	__u32 o;

	if (*(volatile __u32 *)&b->kg_seen != kv)
		return 0;
	o = *(volatile __u32 *)&b->o_gen;
	return o ? o : gen;
}

/* The golden-ratio multiplier of Fibonacci (multiply-shift) hashing. */
#define LL_HOT_HASH_MUL 0x9e3779b97f4a7c15ull

/* Key k of limit id was denied under its share or grant while the lease
 * lives: tell the agent (ll_hot) unless this CPU told it about the key's gate
 * slot (a multiply-shift hash of the limit uid and the key's words) less than
 * LL_HOT_INTERVAL_NS ago. A key denied at line rate thus costs the ring at
 * most one event per interval and CPU; two keys sharing a slot share it.
 */
static __always_inline void hot_event(__u32 id, const void *k, __u32 key_size, __u64 now)
{
	const __u32 *w = k; /* limit_uid first: the uid is hashed too */
	struct ll_hot_event ev;
	struct ll_flow_key fk;
	__u64 h = 0, *gate;
	__u32 slot, i;

#pragma unroll
	for (i = 0; i < sizeof(struct ll_flow_key) / 4; i++)
		if (i < key_size / 4)
			h = (h ^ w[i]) * LL_HOT_HASH_MUL;
	slot = (__u32)(h >> 32) & (LL_HOT_GATE_SLOTS - 1);
	gate = bpf_map_lookup_elem(&ll_hot_gate, &slot);
	/* Not now - *gate: a gate set by a precise reading is ahead of a
	 * later packet's coarse one (bpf/clock.h), and the difference would wrap.
	 */
	if (!gate || now < *gate + LL_HOT_INTERVAL_NS)
		return;
	*gate = now;
	key_as_flow_key(&fk, k, key_size);
	ev.limit_id = id;
	ev.limit_uid = fk.limit_uid;
	ev.ns = now;
	__builtin_memcpy(&ev.key, (const __u8 *)&fk + sizeof(fk.limit_uid), sizeof(ev.key));
	bpf_ringbuf_output(&ll_hot, &ev, sizeof(ev), 0);
}

/* Charge packet m of key k, which has no bucket, to its fallback bucket
 * (fallback_bucket) with view v, never a per-key grant: a prefix's bucket is
 * no key's, and a denial there raises no hot event. An admission graduates
 * k (key_graduate; kg_seen for its new bucket). Returns 0 when denied, else
 * the ll_via of the debit (LL_VIA_PREFIX or LL_VIA_OVERFLOW).
 */
static __always_inline int key_fallback(void *map, void *k, __u32 id,
					const struct ll_limit_cfg *cfg, const struct share_view *v,
					__u32 kg_seen, struct pkt_meta *m, __u64 now, __u64 cost_s,
					struct ll_fill *f)
{
	struct ll_scratch *sc = bpf_map_lookup_elem(&ll_scratch, &(__u32){0});
	struct ll_bucket *fb, *nb = 0;
	int over = 0;

	if (!sc)
		return 0;
	fb = fallback_bucket(map, &sc->key, (struct ll_bucket *)sc->nb, cfg, v, m, now, id, &over);
	if (!fb)
		return 0;
	count_key_event(id, over ? KEV_OVERFLOW : KEV_PREFIX);
	/* Graduation is not tried once f counts a full map. */
	if (f && *(volatile __u64 *)&f->live < f->cap) {
		nb = (struct ll_bucket *)sc->nb;
		__builtin_memset(nb, 0, sizeof(*nb));
		nb->kg_seen = kg_seen;
	}
	if (bucket_take(fb, v, 0, 0, 0, cfg->unit, now, cost_s, m->len, 0, nb) != TAKE_ADMIT)
		return 0;
	if (nb && f)
		key_graduate(map, k, fb, nb, v, id, f);
	return over ? LL_VIA_OVERFLOW : LL_VIA_PREFIX;
}

/* Give packet m's debit of limit id back to the fallback bucket `via`
 * (LL_VIA_PREFIX or LL_VIA_OVERFLOW) that took it, with view v.
 */
static __always_inline void key_fallback_refund(void *map, int via, const struct ll_limit_cfg *cfg,
						const struct share_view *v, struct pkt_meta *m,
						__u64 now, __u64 cost_s)
{
	struct ll_scratch *sc = bpf_map_lookup_elem(&ll_scratch, &(__u32){0});
	struct ll_bucket *fb;

	if (!sc)
		return;
	if (via == LL_VIA_OVERFLOW) {
		overflow_key(&sc->key, cfg->uid);
		fb = bpf_map_lookup_elem(map, &sc->key);
	} else {
		prefix_key_build((struct ll_key *)&sc->key, cfg, m);
		fb = bpf_map_lookup_elem(&ll_prefix_buckets, &sc->key);
	}
	if (fb)
		bucket_take(fb, v, 0, 0, 0, cfg->unit, now, cost_s, m->len, 1, 0);
}

/* Charge the bucket of key k in map (ll_buckets or ll_flow_buckets) of a
 * local limit, with the policy's parameters; a key without a bucket under
 * pressure, its fallback bucket. Returns an enum ll_verdict with the
 * debit's ll_via; a refund, passed that return value, gives it back there.
 * A refund to a key's own bucket that is gone (reaped, so it was full)
 * gives nothing.
 */
static __always_inline int key_charge_local(void *map, void *k, __u32 key_size, __u32 id,
					    const struct ll_limit_cfg *cfg, struct pkt_meta *m,
					    __u64 cost_s, int refund)
{
	int ov = cfg->flags & LL_LIM_OVERRIDES, copy = 0;
	struct ll_key_grant *ng = 0;
	struct ll_scratch *sc;
	struct ll_bucket *b;
	struct ll_fill *f = 0;
	struct share_view v;
	__u32 kv = cfg->ov_ver, gen = cfg->gen;
	__u64 now;

	if (refund >> LL_VIA_SHIFT) {
		view_from_cfg(cfg, &v);
		key_fallback_refund(map, refund >> LL_VIA_SHIFT, cfg, &v, m,
				    meta_now_for(m, cfg->fill_ns), cost_s);
		return LL_ADMIT;
	}
	b = bpf_map_lookup_elem(map, k);
	if (b && !refund) {
		if (ov)
			gen = override_hint_gen(b, kv, gen);
		if (gen && bucket_hinted(b, gen, cfg->unit, m))
			return LL_DENY;
	}
	now = meta_now_for(m, cfg->fill_ns);
	view_from_cfg(cfg, &v);
	if (!b) {
		if (refund)
			return LL_ADMIT;
		f = fill_of(key_size);
		if (fill_pressed(f))
			goto fallback;
	}
	if (ov && !refund && (!b || *(volatile __u32 *)&b->kg_seen != kv)) {
		/* Rare (a new key, a changed set of overrides): one lookup. */
		sc = bpf_map_lookup_elem(&ll_scratch, &(__u32){0});
		if (!sc)
			return LL_DENY;
		ng = &sc->ng;
		copy = 1;
		if (override_read(k, sc))
			return LL_DENY; /* an override caught mid-update: no guess */
	}
	if (!b) {
		/* Only a new bucket needs to know where it starts. */
		now = meta_precise(m); /* a new bucket starts at the key's first packet */
		b = bucket_create(map, k, &v, ng, copy ? kv : kv - 1, now, id, f,
				  cfg->flags & LL_LIM_EMPTY_START ? cfg->reload_ns : 0);
		if (!b)
			goto fallback;
	}
	/* One call each (the verifier counts every inlined copy's stack). */
	return bucket_take(b, &v, ov, ng, kv, cfg->unit, now, cost_s, m->len, refund, 0) ==
		       TAKE_ADMIT
		   ? LL_ADMIT
		   : LL_DENY;
fallback: {
	int via = key_fallback(map, k, id, cfg, &v, kv - 1, m, meta_precise(m), cost_s, f);

	return via ? LL_ADMIT | via << LL_VIA_SHIFT : LL_DENY;
}
}

/* Charge the bucket of key k of a global limit. While the lease lives: with
 * the key's per-key grant if it has one, else this gateway's share of every
 * key's contract; a key denied under the lock is reported (hot_event). Once
 * the lease is dead, on-loss for every key, grant or not (fail-closed
 * denies, fail-open admits as bypass, fallback spends the fallback share
 * per key). A key without a bucket under pressure is charged to its
 * fallback bucket with the same view (the share, or the fallback share),
 * never a grant. Returns an enum ll_verdict with the debit's ll_via, as
 * key_charge_local.
 *
 * A bucket copies its key's grant when the lease's kg_ver has moved on from
 * the kg_seen it copied under: looked up here, before the bucket's lock (no
 * helper may run under it), and only when the lease has grants at all; so
 * a key without a grant pays two word compares, never a lookup. The
 * fallback share and keys under pressure look nothing up; a bucket made
 * then (or by graduating) has a kg_seen that is not the lease's, so its
 * first live packet looks its key up. Refunds create nothing.
 */
static __always_inline int key_charge_lease(void *map, void *k, __u32 key_size, __u32 id,
					    const struct ll_limit_cfg *cfg, struct pkt_meta *m,
					    __u64 cost_s, int refund)
{
	struct ll_lease *ls = bpf_map_lookup_elem(&ll_leases, &id);
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	struct ll_key_grant *ng = 0;
	struct ll_scratch *sc;
	struct ll_lease_views *c;
	struct share_view *v;
	struct ll_fill *f = 0;
	int admit, live, copy = 0, r;
	__u32 gen, kg;
	__u64 now;

	if (!ls)
		return LL_DENY;
	/* The hint, while the lease is certainly live. */
	if (b && !refund) {
		gen = key_hint_gen(b, ls, m);
		if (gen && bucket_hinted(b, gen, cfg->unit, m))
			return LL_DENY;
	}
	admit = lease_state(ls, m, &gen);
	if (admit == LL_DENY || admit == LL_ADMIT_BYPASS)
		return refund ? LL_ADMIT : admit;
	live = admit == LL_ADMIT;
	c = lease_views(id, ls, !live);
	if (!c)
		return LL_DENY;
	v = live ? &c->live : &c->fb;
	kg = c->kg_ver;
	/* After lease_state, which may have made it the precise clock. */
	now = meta_now_for(m, v->cur.fill_ns);
	if (refund >> LL_VIA_SHIFT) {
		key_fallback_refund(map, refund >> LL_VIA_SHIFT, cfg, v, m, now, cost_s);
		return LL_ADMIT;
	}
	if (!b) {
		if (refund)
			return LL_ADMIT;
		f = fill_of(key_size);
		if (fill_pressed(f))
			goto fallback;
	}
	if (live && !refund && (!b || *(volatile __u32 *)&b->kg_seen != kg)) {
		/* Rare (a new key, a changed grant set): the grant's copy lives
		 * off the stack, as the miss path's (ll_scratch).
		 */
		sc = bpf_map_lookup_elem(&ll_scratch, &(__u32){0});
		if (!sc)
			return LL_DENY;
		ng = &sc->ng;
		__builtin_memset(ng, 0, sizeof(*ng));
		copy = 1;
		if (c->n_key_grants && key_grant_read(k, key_size, ng))
			return LL_DENY; /* a grant caught mid-update: no guess */
	}
	if (!b) {
		/* Not looked up (the fallback share): copy on the next live packet. */
		now = meta_precise(m); /* a new bucket starts at the key's first packet */
		b = bucket_create(map, k, v, ng, copy ? kg : kg - 1, now, id, f, 0);
		if (!b)
			goto fallback;
	}
	r = bucket_take(b, v, live, ng, kg, cfg->unit, now, cost_s, m->len, refund, 0);
	if (r == TAKE_ADMIT)
		return admit;
	if (r == TAKE_LOCKED_DENY && live)
		hot_event(id, k, key_size, now);
	return LL_DENY;
fallback:
	r = key_fallback(map, k, id, cfg, v, kg - 1, m, meta_precise(m), cost_s, f);
	return r ? admit | r << LL_VIA_SHIFT : LL_DENY;
}

/* Charge (or with refund, give back) the bucket of key k. An enum ll_verdict
 * with the debit's ll_via above LL_VERDICT_MASK (see key_charge_local).
 */
static __always_inline int key_charge(void *map, void *k, __u32 key_size, __u32 id,
				      const struct ll_limit_cfg *cfg, struct pkt_meta *m,
				      __u64 cost_s, int refund)
{
	if (cfg->scope == LL_SCOPE_GLOBAL)
		return key_charge_lease(map, k, key_size, id, cfg, m, cost_s, refund);
	return key_charge_local(map, k, key_size, id, cfg, m, cost_s, refund);
}

/* 1 when the deny hint of m's key's fallback bucket alone shows the limit
 * will deny m, the key having no bucket and its map (of key_size keys)
 * being under pressure. A fallback bucket never carries a grant: for a
 * global limit its generation is the lease's while it certainly lives.
 */
static __always_inline int fallback_hinted(__u32 key_size, __u32 id, const struct ll_limit_cfg *cfg,
					   struct pkt_meta *m)
{
	struct ll_bucket *fb;
	struct ll_key pk;
	__u32 gen = cfg->gen;

	if (!fill_pressed(fill_of(key_size)))
		return 0;
	prefix_key_build(&pk, cfg, m);
	fb = bpf_map_lookup_elem(&ll_prefix_buckets, &pk);
	if (!fb)
		return 0;
	if (cfg->scope == LL_SCOPE_GLOBAL)
		gen = lease_live_gen(bpf_map_lookup_elem(&ll_leases, &id), m);
	return gen && bucket_hinted(fb, gen, cfg->unit, m);
}

/* 1 when the deny hint of m's bucket alone, read against the coarse clock,
 * shows the limit will deny m (no lock, no debit, no bucket created). For a
 * global limit only while its lease is certainly live and the bucket has
 * copied the lease's per-key grants; otherwise the charge decides. A key
 * without a bucket under pressure: its fallback bucket's hint.
 */
static __always_inline int key_hinted(void *map, void *k, __u32 key_size, __u32 id,
				      const struct ll_limit_cfg *cfg, struct pkt_meta *m)
{
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	__u32 gen = cfg->gen;

	if (!b)
		return fallback_hinted(key_size, id, cfg, m);
	if (cfg->scope == LL_SCOPE_GLOBAL) {
		struct ll_lease *ls = bpf_map_lookup_elem(&ll_leases, &id);

		gen = ls ? key_hint_gen(b, ls, m) : 0;
	} else if (cfg->flags & LL_LIM_OVERRIDES) {
		gen = override_hint_gen(b, cfg->ov_ver, gen);
	}
	if (!gen)
		return 0;
	return bucket_hinted(b, gen, cfg->unit, m);
}

#endif /* LEASELINE_BPF_KEY_CHARGE_H */
