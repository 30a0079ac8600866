/* SPDX-License-Identifier: MIT */
/*
 * Per-key limits (src-ip, dst-ip, dst-port, flow): one spin-locked bucket per
 * key, in ll_buckets or, for flow keys, ll_flow_buckets; a key the full map
 * cannot take shares its limit's overflow bucket. Each bucket carries a deny
 * hint so that a key that cannot pay yet is refused without the lock. A
 * local limit's buckets are charged with the policy's (rate, burst); a
 * global one's with this gateway's leased share of every key's contract
 * (lease.h), and when the lease dies its on-loss applies to every key.
 * Every bucket counts what it admitted (spent).
 * Invariants: a bucket admits at most burst + rate * t tokens of the view it
 * is charged with; a refund undoes a debit (tokens and spent) exactly; the
 * deny hint never refuses a packet the bucket could pay.
 */
#ifndef LEASELINE_BUCKET_H
#define LEASELINE_BUCKET_H

#include <linux/errno.h>

#include "maps.h"
#include "parse.h"
#include "clock.h"
#include "params.h"
#include "lease.h"

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
 * starts full (a key never seen has had all the time in the world to fill),
 * at the burst of the view it is charged with: for a global limit, this
 * gateway's share, so a key new here (or moved here) gets no fresh full
 * contract. When the map is full the key shares its limit's pre-created
 * overflow bucket. count: attribute a creation or overflow to limit id (not
 * on a refund).
 */
static __always_inline struct ll_bucket *bucket_create(void *map, void *k, __u32 key_size,
						       const struct ll_limit_cfg *cfg,
						       const struct share_view *v, __u64 now,
						       __u32 id, int count)
{
	struct ll_bucket nb = {};
	long err;

	nb.gen = v->gen;
	nb.tokens = v->cur.burst_s;
	nb.last_ns = now;
	err = bpf_map_update_elem(map, k, &nb, BPF_NOEXIST);
	if (err == 0) {
		if (count)
			count_key_event(id, 0);
	} else if (err != -EEXIST) {	      /* EEXIST: another CPU created it: use that one */
		struct ll_key_head *head = k; /* both key kinds begin alike */

		__builtin_memset(k, 0, key_size);
		head->limit_uid = cfg->uid;
		head->family = LL_OVERFLOW_FAMILY;
		if (count)
			count_key_event(id, 1);
	}
	return bpf_map_lookup_elem(map, k);
}

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

/* Denied packets of a key that cannot pay yet skip the lock. A denial
 * stores in deny_hint when the bucket will hold the cost of a packet of the
 * denied one's class (one packet in packets mode; its length in bytes mode,
 * so a flood of equal frames is refused lock-free until the next one fits,
 * and smaller frames still get to try). Set under the lock, cleared by any
 * admission or refund, so it never refuses a packet the bucket could pay:
 * reading the one word unlocked can only see a value some denial computed
 * from the bucket's real state, or 0. key_charge checks it first against
 * the coarse clock (see LL_COARSE_SLACK_NS), this against the packet's clock.
 *
 * spent counts the tokens admitted in whole units (1 a packet, or the frame
 * length in bytes mode); a refund takes them back.
 */
static __always_inline int bucket_charge(struct ll_bucket *b, const struct share_view *v, __u8 unit,
					 __u64 now, __u64 cost_s, __u32 len, int refund)
{
	__u64 tokens, last, units = unit == LL_UNIT_BYTES ? len : 1;
	__u32 class = hint_class(unit, len);
	int ok = 1;

	if (!refund && b->gen == v->gen &&
	    now < hint_until(*(volatile __u64 *)&b->deny_hint, class))
		return 0;
	bpf_spin_lock(&b->lock);
	last = b->last_ns;
	tokens = tb_settle(b->tokens, &last, b->gen, v->gen, v->prev_gen, &v->cur, &v->prev,
			   v->reload_ns, now);
	if (refund) {
		tokens = tb_refund(tokens, cost_s, v->cur.burst_s);
		b->spent = b->spent > units ? b->spent - units : 0;
	} else {
		ok = tb_take(&tokens, cost_s);
		if (ok)
			b->spent += units;
	}
	b->deny_hint = 0;
	if (!ok && v->cur.rate) {
		/* class < len only past 64 KiB: then the hint covers that size */
		__u64 need = tb_cost(unit, class);

		if (need > tokens)
			b->deny_hint = ((now + (need - tokens + v->cur.rate - 1) / v->cur.rate) &
					~LL_HINT_CLASS_MASK) |
				       class;
	}
	b->tokens = tokens;
	b->last_ns = last;
	b->gen = v->gen;
	bpf_spin_unlock(&b->lock);
	return ok;
}

/* 1 when bucket b (charged under generation gen), read unlocked against the
 * coarse clock, already refuses m by its deny hint.
 */
static __always_inline int bucket_hinted(struct ll_bucket *b, __u32 gen, __u8 unit,
					 struct pkt_meta *m)
{
	return b->gen == gen && coarse_before(m, hint_until(*(volatile __u64 *)&b->deny_hint,
							    hint_class(unit, m->len)));
}

/* Charge the bucket of key k in map (ll_buckets or ll_flow_buckets) of a
 * local limit, with the policy's parameters.
 */
static __always_inline int key_charge_local(void *map, void *k, __u32 key_size, __u32 id,
					    const struct ll_limit_cfg *cfg, struct pkt_meta *m,
					    __u64 cost_s, int refund)
{
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	struct share_view v;
	__u64 now;

	if (b && !refund && bucket_hinted(b, cfg->gen, cfg->unit, m))
		return LL_DENY;
	now = meta_now(m);
	view_from_cfg(cfg, &v);
	if (!b)
		b = bucket_create(map, k, key_size, cfg, &v, now, id, !refund);
	if (!b)
		return LL_DENY;
	return bucket_charge(b, &v, cfg->unit, now, cost_s, m->len, refund) ? LL_ADMIT : LL_DENY;
}

/* Charge the bucket of key k of a global limit: with this gateway's share
 * of every key's contract while the lease lives; once it is dead, on-loss
 * for every key (fail-closed denies, fail-open admits as bypass, fallback
 * spends the fallback share per key). Returns an enum ll_verdict.
 */
static __always_inline int key_charge_lease(void *map, void *k, __u32 key_size, __u32 id,
					    const struct ll_limit_cfg *cfg, struct pkt_meta *m,
					    __u64 cost_s, int refund)
{
	struct ll_lease *ls = bpf_map_lookup_elem(&ll_leases, &id);
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	struct share_view *v;
	__u32 gen;
	__u64 now;
	int admit;

	if (!ls)
		return LL_DENY;
	/* The hint, while the lease is certainly live. */
	if (b && !refund) {
		gen = lease_live_gen(ls, m);
		if (gen && bucket_hinted(b, gen, cfg->unit, m))
			return LL_DENY;
	}
	now = meta_now(m);
	admit = lease_state(ls, now, &gen);
	if (admit == LL_DENY || admit == LL_ADMIT_BYPASS)
		return refund ? LL_ADMIT : admit;
	v = lease_view(id, ls, admit == LL_ADMIT_FALLBACK);
	if (!v)
		return LL_DENY;
	if (!b)
		b = bucket_create(map, k, key_size, cfg, v, now, id, !refund);
	if (!b)
		return LL_DENY;
	return bucket_charge(b, v, cfg->unit, now, cost_s, m->len, refund) ? admit : LL_DENY;
}

/* Charge (or with refund, give back) the bucket of key k. An enum ll_verdict. */
static __always_inline int key_charge(void *map, void *k, __u32 key_size, __u32 id,
				      const struct ll_limit_cfg *cfg, struct pkt_meta *m,
				      __u64 cost_s, int refund)
{
	if (cfg->scope == LL_SCOPE_GLOBAL)
		return key_charge_lease(map, k, key_size, id, cfg, m, cost_s, refund);
	return key_charge_local(map, k, key_size, id, cfg, m, cost_s, refund);
}

/* 1 when the deny hint of m's bucket alone, read against the coarse clock,
 * shows the limit will deny m (no lock, no debit, no bucket created). For a
 * global limit only while its lease is certainly live; otherwise its
 * on-loss rule decides, in the charge.
 */
static __always_inline int key_hinted(void *map, void *k, __u32 id, const struct ll_limit_cfg *cfg,
				      struct pkt_meta *m)
{
	struct ll_bucket *b = bpf_map_lookup_elem(map, k);
	__u32 gen = cfg->gen;

	if (!b)
		return 0;
	if (cfg->scope == LL_SCOPE_GLOBAL)
		gen = lease_live_gen(bpf_map_lookup_elem(&ll_leases, &id), m);
	if (!gen)
		return 0;
	return bucket_hinted(b, gen, cfg->unit, m);
}

#endif /* LEASELINE_BUCKET_H */
