/* SPDX-License-Identifier: MIT */
/*
 * Per-key limits (src-ip, dst-ip, dst-port, flow): one spin-locked bucket per
 * key, in ll_buckets or, for flow keys, ll_flow_buckets. While that map is
 * under pressure (ll_fill), or has no room, a key without a bucket is charged
 * to its prefix's fallback bucket (ll_prefix_buckets; its limit's overflow
 * bucket when that map has no room either) and gets a bucket of its own only
 * once that admitted it, with what the fallback bucket had left, never a
 * fresh burst (key_fallback, key_graduate). Each bucket carries a deny
 * hint so that a key that cannot pay yet is refused without the lock. A
 * local limit's buckets are charged with the policy's (rate, burst); a
 * global one's with this gateway's leased share of every key's contract
 * (lease.h), or, for a key with a per-key grant (ll_key_grants), with that
 * grant while the lease lives; when the lease dies its on-loss applies to
 * every key, granted or not. Every bucket counts what it admitted (spent).
 * Invariants: a bucket admits at most burst + rate * t tokens of the view it
 * is charged with; moving a bucket to another view (a reload, a changed
 * share, a grant installed, changed or removed) never deposits tokens; a
 * refund undoes a debit (tokens and spent) exactly, in the bucket that took
 * it, and leaves denied alone; the deny hint never refuses a packet the
 * bucket could pay. A bucket also counts what it denied under its lock
 * (denied: a sample of its denials). Under pressure no key gets more than
 * burst + rate * t of its own plus what its prefix's fallback bucket admits
 * for the whole prefix (burst + rate * t): tokens a graduating key takes
 * along leave the fallback bucket.
 */
#ifndef LEASELINE_BPF_BUCKET_H
#define LEASELINE_BPF_BUCKET_H

#include <linux/errno.h>

#include "maps.h"
#include "parse.h"
#include "clock.h"
#include "params.h"
#include "lease.h"

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

/* The second word of an ll_key or ll_flow_key: proto, family and dport as
 * they lie in memory.
 */
static __always_inline __u32 key_word1(__u8 proto, __u8 family, __u16 dport)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return proto | (__u32)family << 8 | (__u32)dport << 16;
#else
	return (__u32)proto << 24 | (__u32)family << 16 | dport;
#endif
}

_Static_assert(__builtin_offsetof(struct ll_key, proto) == 4 &&
		       __builtin_offsetof(struct ll_key, family) == 5 &&
		       __builtin_offsetof(struct ll_key, dport) == 6 &&
		       __builtin_offsetof(struct ll_key, addr) == 8 && sizeof(struct ll_key) == 24,
	       "key_build writes an ll_key as six words");
_Static_assert(__builtin_offsetof(struct ll_flow_key, proto) == 4 &&
		       __builtin_offsetof(struct ll_flow_key, family) == 5 &&
		       __builtin_offsetof(struct ll_flow_key, dport) == 6 &&
		       __builtin_offsetof(struct ll_flow_key, sport) == 8 &&
		       __builtin_offsetof(struct ll_flow_key, addr) == 12 &&
		       __builtin_offsetof(struct ll_flow_key, addr2) == 28 &&
		       sizeof(struct ll_flow_key) == 44,
	       "flow_key_build writes an ll_flow_key as eleven words");

/* Two key words as one 64-bit store: lo at the lower address. */
static __always_inline __u64 key_pair(__u32 lo, __u32 hi)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return lo | (__u64)hi << 32;
#else
	return (__u64)lo << 32 | hi;
#endif
}

/* Keys on the stack are declared LL_KEY_ALIGN: key_build and flow_key_build
 * store them 8 bytes at a time, and the verifier wants stack stores aligned.
 */
#define LL_KEY_ALIGN __attribute__((aligned(8)))

/* Address words a[0..3] of a key: src (16 bytes, IPv4 as ::ffff:a.b.c.d)
 * under the limit's prefix mask.
 */
static __always_inline void key_addr(__u32 *a, const __u32 *src, const struct ll_limit_cfg *cfg,
				     __u8 family)
{
	if (family == 4) {
		a[0] = 0;
		a[1] = 0;
		a[2] = src[2];
		a[3] = src[3] & cfg->mask_v4;
	} else {
		a[0] = src[0] & cfg->mask_v6[0];
		a[1] = src[1] & cfg->mask_v6[1];
		a[2] = src[2] & cfg->mask_v6[2];
		a[3] = src[3] & cfg->mask_v6[3];
	}
}

/* Key k (LL_KEY_ALIGN) of limit cfg for packet m, written 8 bytes at a time
 * and each byte once. The map reads the key right after: its hash by 32-bit
 * words, its compare by 64-bit ones. A word assembled from a memset and
 * narrower stores cannot be forwarded from the store buffer, so the load
 * waits for the stores to reach the cache: seen live as the hottest
 * instruction of the drop path (docs/benchmarks-live.md).
 */
static __always_inline void key_build(struct ll_key *k, const struct ll_limit_cfg *cfg,
				      const struct pkt_meta *m)
{
	__u64 *q = (__u64 *)k;
	__u32 a[4] = {}, w1 = 0;

	switch (cfg->key_mode) {
	case LL_KEY_SRC_IP:
		w1 = key_word1(0, m->family, 0);
		key_addr(a, m->src, cfg, m->family);
		break;
	case LL_KEY_DST_IP:
		w1 = key_word1(0, m->family, 0);
		key_addr(a, m->dst, cfg, m->family);
		break;
	case LL_KEY_DST_PORT:
		w1 = key_word1(m->proto, 0, m->dport);
		break;
	}
	q[0] = key_pair(cfg->uid, w1);
	q[1] = key_pair(a[0], a[1]);
	q[2] = key_pair(a[2], a[3]);
}

/* Flow key k (LL_KEY_ALIGN) of limit cfg for packet m (see key_build). */
static __always_inline void flow_key_build(struct ll_flow_key *k, const struct ll_limit_cfg *cfg,
					   const struct pkt_meta *m)
{
	__u64 *q = (__u64 *)k;
	__u32 w2;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	w2 = m->sport; /* pad0 zero */
#else
	w2 = (__u32)m->sport << 16;
#endif
	q[0] = key_pair(cfg->uid, key_word1(m->proto, m->family, m->dport));
	q[1] = key_pair(w2, m->src[0]);
	q[2] = key_pair(m->src[1], m->src[2]);
	q[3] = key_pair(m->src[3], m->dst[0]);
	q[4] = key_pair(m->dst[1], m->dst[2]);
	((__u32 *)k)[10] = m->dst[3];
}

/* Key events of a limit, counted in ll_limit_stats. */
enum key_event {
	KEV_NEW,	/* a bucket created full */
	KEV_OVERFLOW,	/* a packet charged to the overflow bucket */
	KEV_PREFIX,	/* a packet charged to its prefix's fallback bucket */
	KEV_PREFIX_NEW, /* a fallback bucket created */
	KEV_GRADUATED,	/* a key given its own bucket after a fallback admission */
};

/* Count a key event: all happen on a bucket miss only, so the per-CPU
 * counters are looked up only then.
 */
static __always_inline void count_key_event(__u32 id, int ev)
{
	struct ll_limit_stats *st = bpf_map_lookup_elem(&ll_limit_stats, &id);

	if (!st)
		return;
	switch (ev) {
	case KEV_NEW:
		st->new_keys++;
		break;
	case KEV_OVERFLOW:
		st->overflow_pkts++;
		break;
	case KEV_PREFIX:
		st->prefix_pkts++;
		break;
	case KEV_PREFIX_NEW:
		st->prefix_buckets++;
		break;
	default:
		st->graduated++;
	}
}

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

/* The fallback key of packet m under limit cfg, in ll_prefix_buckets: the
 * address the limit keys on (flow: the source) cut to LL_PREFIX_V4_LEN or
 * LL_PREFIX_V6_LEN, or to the limit's own prefix where that is shorter; a
 * dst-port key's protocol and block of 256 ports. Spoofed sources cost
 * nothing to make up, their prefixes do not multiply as fast: a prefix's
 * sources share one key's worth while new.
 */
static __always_inline void prefix_key_build(struct ll_key *pk, const struct ll_limit_cfg *cfg,
					     const struct pkt_meta *m)
{
	const __u32 *a = cfg->key_mode == LL_KEY_DST_IP ? m->dst : m->src;
	int own = cfg->key_mode != LL_KEY_FLOW; /* flow keys are not prefix-masked */

	__builtin_memset(pk, 0, sizeof(*pk));
	pk->limit_uid = cfg->uid;
	if (cfg->key_mode == LL_KEY_DST_PORT) {
		pk->proto = m->proto;
		pk->dport = m->dport & bpf_htons(LL_PREFIX_PORT_MASK);
		return;
	}
	pk->family = m->family;
	if (m->family == 4) {
		__u32 mask = bpf_htonl(~0u << (32 - LL_PREFIX_V4_LEN));

		pk->addr[2] = a[2];
		pk->addr[3] = a[3] & mask & (own ? cfg->mask_v4 : ~0u);
	} else {
		_Static_assert(LL_PREFIX_V6_LEN > 32 && LL_PREFIX_V6_LEN <= 64, "two words");
		__u32 mask = bpf_htonl(~0u << (64 - LL_PREFIX_V6_LEN));

		pk->addr[0] = a[0] & (own ? cfg->mask_v6[0] : ~0u);
		pk->addr[1] = a[1] & mask & (own ? cfg->mask_v6[1] : ~0u);
	}
}

/* The key of limit uid's overflow bucket, as either key kind (44 bytes). */
static __always_inline void overflow_key(struct ll_flow_key *ok, __u32 uid)
{
	__builtin_memset(ok, 0, sizeof(*ok));
	ok->limit_uid = uid;
	ok->family = LL_OVERFLOW_FAMILY;
}

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

/* Key k of a bucket map (an ll_key of key_size bytes, or an ll_flow_key) as
 * an ll_flow_key: limit uid + ll_key_id, an ll_key's fields where they have
 * the same names, sport, pad0 and addr2 zero. The key of ll_key_grants.
 */
static __always_inline void key_as_flow_key(struct ll_flow_key *fk, const void *k, __u32 key_size)
{
	const struct ll_key *kk = k;

	if (key_size == sizeof(struct ll_flow_key)) {
		__builtin_memcpy(fk, k, sizeof(*fk));
		return;
	}
	__builtin_memset(fk, 0, sizeof(*fk));
	fk->limit_uid = kk->limit_uid;
	fk->proto = kk->proto;
	fk->family = kk->family;
	fk->dport = kk->dport;
	__builtin_memcpy(fk->addr, kk->addr, sizeof(fk->addr));
}

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

#endif /* LEASELINE_BPF_BUCKET_H */
