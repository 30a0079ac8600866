/* SPDX-License-Identifier: MIT */
/*
 * One token bucket of a per-key limit (struct ll_bucket): made full at the
 * burst it will be charged with, charged and refunded under its lock with
 * the view (rate, burst, fill) of the limit's policy, lease or per-key
 * grant, and a deny hint so that a key that cannot pay yet is refused
 * without the lock. Invariants: a bucket admits at most burst + rate * t
 * tokens of the view it is charged with; moving it to another view (a
 * reload, a changed share, a grant installed, changed or removed) never
 * deposits tokens; a refund undoes a debit (tokens and spent) exactly and
 * leaves denied alone; the deny hint never refuses a packet the bucket
 * could pay. Which bucket a packet's key is charged to is key_charge.h's.
 */
#ifndef LEASELINE_BPF_BUCKET_H
#define LEASELINE_BPF_BUCKET_H

#include <linux/errno.h>

#include "maps.h"
#include "parse.h"
#include "clock.h"
#include "params.h"
#include "lease.h"
#include "key.h"

/* The bucket lock (include/ll_types.h, LL_BUCKET_LOCK). The resilient lock
 * can fail (deadlock or timeout): the charge then denies, a refund or a
 * graduation's give-back is lost (fewer tokens, never more).
 */
#ifdef LL_RES_LOCK
extern int bpf_res_spin_lock(struct bpf_res_spin_lock *lock) __ksym;
extern void bpf_res_spin_unlock(struct bpf_res_spin_lock *lock) __ksym;
#define BUCKET_LOCK(l)	 bpf_res_spin_lock(l)
#define BUCKET_UNLOCK(l) bpf_res_spin_unlock(l)
#else
#define BUCKET_LOCK(l)	 (bpf_spin_lock(l), 0)
#define BUCKET_UNLOCK(l) bpf_spin_unlock(l)
#endif

/* The ll_fill entry of the bucket map whose keys are key_size bytes. */
static __always_inline struct ll_fill *fill_of(__u32 key_size)
{
	__u32 i = key_size == sizeof(struct ll_flow_key) ? LL_FILL_FLOWS : LL_FILL_KEYS;

	return bpf_map_lookup_elem(&ll_fill, &i);
}

/* 1 when the bucket map counted by f is under pressure (or f is missing). */
static __always_inline int fill_pressed(const struct ll_fill *f)
{
	return !f || (f->mark && *(volatile const __u64 *)&f->live >= f->mark);
}

/* Create the bucket of key k, which the lookup did not find, in map (counted
 * by f). A new bucket starts full (a key never seen has had all the time in
 * the world to fill), at the burst it will be charged with: for a global
 * limit, this gateway's share, so a key new here (or moved here) gets no
 * fresh full contract, or the key's per-key grant g when it has one (g->gen
 * != 0; then the bucket carries the grant and its generation). kg_seen: the
 * lease's kg_ver the grant was looked up under (see key_charge_lease).
 * NULL, creating nothing, when the map is under pressure or has no room:
 * then the key is charged to its fallback bucket (key_fallback).
 */
static __always_inline struct ll_bucket *bucket_create(void *map, void *k,
						       const struct share_view *v,
						       const struct ll_key_grant *g, __u32 kg_seen,
						       __u64 now, __u32 id, struct ll_fill *f,
						       __u64 empty_since)
{
	struct ll_scratch *sc = bpf_map_lookup_elem(&ll_scratch, &(__u32){0});
	struct ll_bucket *nbp;
	int err;

	if (fill_pressed(f) || !f || !sc)
		return 0;
	/* Staged off the stack (every inlined copy's stack counts). */
	nbp = (struct ll_bucket *)sc->nb;
	__builtin_memset(nbp, 0, sizeof(*nbp));
#define nb (*nbp)
	nb.gen = v->gen;
	nb.tokens = v->cur.burst_s;
	nb.last_ns = now;
	nb.kg_seen = kg_seen;
	if (g && g->gen) {
		nb.o_rate = g->rate;
		nb.o_burst_s = g->burst_s;
		nb.o_fill_ns = g->fill_ns;
		nb.o_gen = g->gen;
		nb.gen = g->gen;
		nb.tokens = g->burst_s;
	}
	/* Empty at empty_since, refilled from then by the first charge. */
	if (empty_since && empty_since < now) {
		nb.tokens = 0;
		nb.last_ns = empty_since;
	} else if (empty_since) {
		nb.tokens = 0;
	}
#undef nb
	err = map_err(bpf_map_update_elem(map, k, nbp, BPF_NOEXIST));
	if (err == 0) {
		__sync_fetch_and_add(&f->live, 1);
		count_key_event(id, KEV_NEW);
	} else if (err != -EEXIST) { /* EEXIST: another CPU created it: use that one */
		return 0;
	}
	return bpf_map_lookup_elem(map, k);
}

/* Outcomes of bucket_take (below). */
#define TAKE_ADMIT	 1
#define TAKE_HINT_DENY	 0    /* refused by the deny hint, without the lock */
#define TAKE_LOCKED_DENY (-1) /* refused under the lock */

/* A deny hint is an instant rounded down to LL_HINT_CLASS_MASK + 1 ns with
 * the class in the bits below: the mask must be all low bits.
 */
_Static_assert(LL_IS_POW2(LL_HINT_CLASS_MASK + 1), "LL_HINT_CLASS_MASK is a low-bit mask");

/* The class of a packet of len bytes under a limit of unit `unit`
 * (LL_HINT_CLASS_MASK).
 */
static __always_inline __u32 hint_class(__u8 unit, __u32 len)
{
	if (unit != LL_UNIT_BYTES)
		return 0;
	return len < LL_HINT_CLASS_MASK ? len : LL_HINT_CLASS_MASK;
}

/* The instant before which hint h refuses a packet of class `class`, or 0. */
static __always_inline __u64 hint_until(__u64 h, __u32 class)
{
	return class >= (h & LL_HINT_CLASS_MASK) ? h & ~LL_HINT_CLASS_MASK : 0;
}


/* Charge (or with refund, give back) cost_s to bucket b, with view v; for a
 * global limit whose lease lives (grants), with b's own per-key grant
 * instead when it carries one. Returns a TAKE_* outcome.
 *
 * ng (global limits while the lease lives, not on a refund): the grant of
 * b's key as read from ll_key_grants under the lease's kg_ver `kg` (gen 0:
 * none), or NULL when b had already copied that set (b->kg_seen == kg).
 * Under the lock, if b has not copied kg yet, the copy first settles b's
 * tokens up to now with what they were spent under (b's grant if it is
 * charged with it, else v), then installs ng and clamps to its burst (or
 * v's when there is none): a raised grant deposits nothing, a lowered one
 * clamps, a removed one returns the key to the share without a fresh burst.
 *
 * Denied packets of a key that cannot pay yet skip the lock. A denial
 * stores in deny_hint when the bucket will hold the cost of a packet of the
 * denied one's class (one packet in packets mode; its length in bytes mode,
 * so a flood of equal frames is refused lock-free until the next one fits,
 * and smaller frames still get to try); with a rate of 0 (a key cut to
 * nothing here) never, until the bucket's generation moves on. Set under
 * the lock, cleared by any admission or refund, and valid only while the
 * bucket stays at the generation it was set under (and for a global limit
 * its kg_seen is the lease's kg_ver), so it never refuses a packet the
 * bucket could pay: reading the one word unlocked can only see a value some
 * denial computed from the bucket's real state, or 0. The callers check it
 * first against the coarse clock (see LL_COARSE_SLACK_NS), this against the
 * packet's clock. Writes deny_hint before gen, o_gen and kg_seen, so an
 * unlocked reader that sees the new generation sees the new hint.
 *
 * spent counts the tokens admitted in whole units (1 a packet, or the frame
 * length in bytes mode); a refund takes them back. denied counts, in the
 * same units, the packets refused here, under the lock: a sample, since the
 * hint refuses most of a flood without the lock, and counting those would
 * write the bucket's line on the path the hint keeps read-only (priced in
 * docs/benchmarks.md). A refund never denies, so never moves it.
 *
 * drain (a fallback bucket's admission that graduates its key): the tokens
 * left after the debit move to drain (with the instant they are counted to
 * and their generation), b keeps none.
 */
/* bucket_take's parameters: the view's, or bucket b's grant's. */
#define EV_VIEW()                                                                                  \
	do {                                                                                       \
		ecur = &v->cur;                                                                    \
		eprev = &v->prev;                                                                  \
		egen = v->gen;                                                                     \
		eprevgen = v->prev_gen;                                                            \
	} while (0)
#define EV_GRANT()                                                                                 \
	do {                                                                                       \
		ecur = (const struct tb_params *)&b->o_rate; /* read in place, under the lock */   \
		eprev = ecur;                                                                      \
		egen = b->o_gen;                                                                   \
		eprevgen = 0; /* no bucket is at generation 0 */                                   \
	} while (0)

_Static_assert(__builtin_offsetof(struct ll_bucket, o_burst_s) ==
		       __builtin_offsetof(struct ll_bucket, o_rate) + __builtin_offsetof(struct tb_params, burst_s) &&
		   __builtin_offsetof(struct ll_bucket, o_fill_ns) ==
		       __builtin_offsetof(struct ll_bucket, o_rate) + __builtin_offsetof(struct tb_params, fill_ns),
	       "a bucket's o_rate, o_burst_s, o_fill_ns are a struct tb_params");

static __always_inline int bucket_take(struct ll_bucket *b, const struct share_view *v, int grants,
				       const struct ll_key_grant *ng, __u32 kg, __u8 unit,
				       __u64 now, __u64 cost_s, __u32 len, int refund,
				       struct ll_bucket *drain)
{
	/* The parameters charged with: v's, or b's grant's (its o_* fields, read
	 * in place; it has no previous generation, so eprev is never read with
	 * it). Pointers and scalars rather than a view on the stack: every
	 * inlined copy counts.
	 */
	const struct tb_params *ecur, *eprev;
	__u32 egen, eprevgen;
	__u64 tokens, last, hint = 0, units = unit == LL_UNIT_BYTES ? len : 1;
	__u32 class = hint_class(unit, len), gen, hgen = v->gen;
	int ok = 1;

	if (!refund && !ng) {
		if (grants) {
			__u32 o = *(volatile __u32 *)&b->o_gen;

			if (o)
				hgen = o;
		}
		if (*(volatile __u32 *)&b->gen == hgen &&
		    now < hint_until(*(volatile __u64 *)&b->deny_hint, class))
			return TAKE_HINT_DENY;
	}
	if (BUCKET_LOCK(&b->lock))
		return refund ? TAKE_ADMIT : TAKE_LOCKED_DENY;
	last = b->last_ns;
	tokens = b->tokens;
	gen = b->gen;
	if (ng && b->kg_seen != kg) {
		EV_VIEW();
		if (b->o_gen && gen == b->o_gen)
			EV_GRANT();
		tokens = tb_settle(tokens, &last, gen, egen, eprevgen, ecur, eprev, v->reload_ns,
				   now);
		b->o_rate = ng->rate;
		b->o_burst_s = ng->burst_s;
		b->o_fill_ns = ng->fill_ns;
		b->o_gen = ng->gen;
		b->kg_seen = kg;
		gen = ng->gen ? ng->gen : v->gen;
		tokens = tb_clamp(tokens, ng->gen ? ng->burst_s : v->cur.burst_s);
	}
	EV_VIEW();
	if (grants && b->o_gen)
		EV_GRANT();
	tokens = tb_settle(tokens, &last, gen, egen, eprevgen, ecur, eprev, v->reload_ns, now);
	if (refund) {
		tokens = tb_refund(tokens, cost_s, ecur->burst_s);
		b->spent = b->spent > units ? b->spent - units : 0;
	} else {
		ok = tb_take(&tokens, cost_s);
		if (ok)
			b->spent += units;
		if (ok && drain) { /* key_graduate: the rest leaves with the key */
			drain->tokens = tokens;
			drain->last_ns = last;
			drain->gen = egen;
			tokens = 0;
		}
		if (!ok)
			b->denied += units;
	}
	if (!ok) {
		/* class < len only past 64 KiB: then the hint covers that size */
		__u64 need = tb_cost(unit, class), rate = ecur->rate;

		/* At rate 0 (a key cut to 0 here) nothing will pay until the
		 * grant changes; the hint still lapses after LL_HOT_INTERVAL_NS so
		 * that a locked denial, and a hot event, come again: a key cut
		 * to 0 that keeps coming is reported every interval, and the
		 * coordinator can give it a share back when demand moves to it.
		 */
		if (need > tokens)
			hint = ((rate ? now + (need - tokens + rate - 1) / rate
				      : now + LL_HOT_INTERVAL_NS) &
				~LL_HINT_CLASS_MASK) |
			       class;
	}
	b->deny_hint = hint;
	b->tokens = tokens;
	b->last_ns = last;
	b->gen = egen;
	BUCKET_UNLOCK(&b->lock);
	return ok ? TAKE_ADMIT : TAKE_LOCKED_DENY;
}

/* Charge (or give back) bucket b of a local limit with view v: 1 if admitted. */
static __always_inline int bucket_charge(struct ll_bucket *b, const struct share_view *v, __u8 unit,
					 __u64 now, __u64 cost_s, __u32 len, int refund)
{
	return bucket_take(b, v, 0, 0, 0, unit, now, cost_s, len, refund, 0) == TAKE_ADMIT;
}

/* 1 when bucket b (charged under generation gen), read unlocked against the
 * coarse clock, already refuses m by its deny hint.
 */
static __always_inline int bucket_hinted(struct ll_bucket *b, __u32 gen, __u8 unit,
					 struct pkt_meta *m)
{
	return *(volatile __u32 *)&b->gen == gen &&
	       coarse_before(
		   m, hint_until(*(volatile __u64 *)&b->deny_hint, hint_class(unit, m->len)));
}

/* The generation the deny hint of bucket b of a global limit may be read
 * against without the lock while lease ls is certainly live: b's per-key
 * grant's when it carries one, else the lease's; 0 (none: go to the lock)
 * when the lease may be dead or b has not copied the lease's current set
 * of per-key grants. Single words read unlocked, in the reverse order of
 * bucket_take's writes.
 */
static __always_inline __u32 key_hint_gen(struct ll_bucket *b, struct ll_lease *ls,
					  struct pkt_meta *m)
{
	__u32 gen = lease_live_gen(ls, m), o;

	if (!gen || *(volatile __u32 *)&b->kg_seen != *(volatile __u32 *)&ls->kg_ver)
		return 0;
	o = *(volatile __u32 *)&b->o_gen;
	return o ? o : gen;
}

#endif /* LEASELINE_BPF_BUCKET_H */
