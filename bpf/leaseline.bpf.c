// SPDX-License-Identifier: MIT
/*
 * The leaseline XDP program: parse, find the first matching rule of the live
 * policy slot, charge every limit of that rule or none of them, count.
 * A packet reads the policy slot index once, so it sees the old policy or the
 * new one, never a mix. The clock is read at most once per packet, and only
 * when a limit needs it (a key-none limit paying from its CPU's slice does
 * not, unless it is global and must check its lease).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ll_types.h"
#include "maps.h"
#include "parse.h"
#include "key_charge.h"
#include "pool.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

static __always_inline void count_parse(__u32 reason)
{
	__u64 *c = bpf_map_lookup_elem(&ll_parse_stats, &reason);

	if (c)
		(*c)++;
}

static __always_inline int addr_match(const __u32 *a, const __u32 *net, const __u32 *mask)
{
	return ((a[0] & mask[0]) == net[0]) & ((a[1] & mask[1]) == net[1]) &
	       ((a[2] & mask[2]) == net[2]) & ((a[3] & mask[3]) == net[3]);
}

/* 1 when port (host order) is in one of r's ranges. Unused ranges are empty
 * (lo 1, hi 0: the agent fills them so), so all LL_MAX_DPORT_RANGES are
 * tested without a branch: port is in [lo, hi] iff neither port - lo nor
 * hi - port is negative. Branch-free because the rule scan is verified once
 * per rule, and each branch here would multiply its states.
 */
static __always_inline int dport_match(const struct ll_rule *r, __u16 port)
{
	__s64 out = -1;
	int i;

#pragma unroll
	for (i = 0; i < LL_MAX_DPORT_RANGES; i++)
		out &= ((__s64)port - r->dport[i].lo) | ((__s64)r->dport[i].hi - port);
	return out >= 0;
}

/* 1 when rule r's src-set and dst-set conditions (each: the address is in
 * that set, one LPM lookup) hold for m. Global, so the 32 inline copies of
 * rule_match verify a call, not the lookups.
 */
__noinline int ll_sets_match(const struct ll_rule *r, const struct pkt_meta *m)
{
	struct ll_set_key k = {.prefixlen = 32 + 128};

	if (!r || !m)
		return 0;
	if (r->src_set) {
		k.set_id = r->src_set;
		__builtin_memcpy(k.addr, m->src, sizeof(k.addr));
		if (!bpf_map_lookup_elem(&ll_sets, &k))
			return 0;
	}
	if (r->dst_set) {
		k.set_id = r->dst_set;
		__builtin_memcpy(k.addr, m->dst, sizeof(k.addr));
		if (!bpf_map_lookup_elem(&ll_sets, &k))
			return 0;
	}
	return 1;
}

static __always_inline int rule_match(const struct ll_rule *r, const struct pkt_meta *m)
{
	if (r->family && r->family != m->family)
		return 0;
	if (r->proto && r->proto != m->proto)
		return 0;
	if ((r->frag == LL_FRAG_ONLY && !m->frag) || (r->frag == LL_FRAG_NONE && m->frag))
		return 0;
	if (r->n_dport) {
		__u16 port = bpf_ntohs(m->dport);

		/* A port condition never matches a packet without ports. One
		 * port or range, the common case, is tested alone.
		 */
		if (!m->has_ports)
			return 0;
		if (r->n_dport == 1) {
			if (port < r->dport[0].lo || port > r->dport[0].hi)
				return 0;
		} else if (!dport_match(r, port)) {
			return 0;
		}
	}
	/* Flags and types are read only when the header was: a non-first
	 * fragment never matches a tcp-flags or icmp-type condition.
	 */
	if (r->tcp_mask && (!m->has_l4hdr || (m->tcp_flags & r->tcp_mask) != r->tcp_value))
		return 0;
	if (r->has_icmp && (!m->has_l4hdr ||
			    !((r->icmp_types[(m->icmp_type >> 5) & 7] >> (m->icmp_type & 31)) & 1)))
		return 0;
	if (!(addr_match(m->src, r->src, r->src_mask) && addr_match(m->dst, r->dst, r->dst_mask)))
		return 0;
	/* Sets last: a lookup only for a packet every cheaper condition let by. */
	return !(r->src_set | r->dst_set) || ll_sets_match(r, m);
}

static __always_inline void count_rule(__u32 idx, __u32 len, int dropped)
{
	struct ll_rule_stats *rs = bpf_map_lookup_elem(&ll_rule_stats, &idx);

	if (!rs)
		return;
	rs->matched_pkts++;
	rs->matched_bytes += len;
	if (dropped) {
		rs->dropped_pkts++;
		rs->dropped_bytes += len;
	}
}

static __always_inline struct ll_limit_stats *limit_stats(__u32 id)
{
	return bpf_map_lookup_elem(&ll_limit_stats, &id);
}

/* One shadow denial of limit id (uid) into its CPU's current time slot
 * (struct ll_shadow_win). Per-CPU: no other writer. The packet's clock if a
 * limit read it, else the coarse clock (a tick behind at most, on a 1.07 s
 * slot): a shadow flood refused by its deny hint never reads the precise
 * one, and reading it here cost that path a third more (bpf_prog_test_run).
 */
static __always_inline void count_shadow_win(__u32 id, __u32 uid, struct pkt_meta *m)
{
	struct ll_shadow_win *w = bpf_map_lookup_elem(&ll_shadow_win, &id);
	__u64 s;
	__u32 i;

	if (!w)
		return;
	if (w->uid != uid) {
#pragma unroll
		for (i = 0; i < LL_WIN_SLOTS; i++)
			w->tag[i] = 0;
		w->uid = uid;
	}
	s = (m->now ? m->now : meta_coarse(m)) >> LL_WIN_SHIFT;
	i = s & (LL_WIN_SLOTS - 1);
	if (w->tag[i] != s) {
		w->tag[i] = s;
		w->pkts[i] = 0;
		w->bytes[i] = 0;
	}
	w->pkts[i]++;
	w->bytes[i] += m->len;
}

/* Limit id of policy slot `slot`, or NULL. */
static __always_inline struct ll_limit_cfg *limit_cfg(__u32 slot, __u32 id)
{
	struct ll_policy *pol;

	slot &= LL_POLICY_SLOTS - 1;
	pol = bpf_map_lookup_elem(&ll_policy, &slot);
	return pol ? &pol->limits[id & (LL_MAX_LIMITS - 1)] : 0;
}

/* 1 when limit id's deny hint (a key's bucket, or a key-none limit's slice
 * and pool) alone shows it will deny m. A shadow limit drops nothing: 0.
 */
static __always_inline int limit_hinted(__u32 id, const struct ll_limit_cfg *cfg,
					struct pkt_meta *m)
{
	if (cfg->mode == LL_MODE_SHADOW)
		return 0;
	if (cfg->key_mode == LL_KEY_NONE)
		return pool_hinted(id, cfg, m);
	if (cfg->key_mode == LL_KEY_FLOW) {
		struct ll_flow_key fk LL_KEY_ALIGN;

		flow_key_build(&fk, cfg, m);
		return key_hinted(&ll_flow_buckets, &fk, sizeof(fk), id, cfg, m);
	}
	struct ll_key k LL_KEY_ALIGN;

	key_build(&k, cfg, m);
	return key_hinted(&ll_buckets, &k, sizeof(k), id, cfg, m);
}

/* Debit (or with refund, give back) one limit for packet m. Returns an
 * enum ll_verdict, with a per-key limit's ll_via above LL_VERDICT_MASK; a
 * refund is passed that return value (so it is never 0). A packet that can
 * find no state is denied: the limiter never admits because it lost track.
 */
static __always_inline int limit_charge(__u32 id, const struct ll_limit_cfg *cfg,
					struct pkt_meta *m, __u64 cost_s, int refund)
{
	if (cfg->key_mode == LL_KEY_NONE)
		return pool_charge(id, cfg, m, cost_s, refund);
	if (cfg->key_mode == LL_KEY_FLOW) {
		struct ll_flow_key fk LL_KEY_ALIGN;

		flow_key_build(&fk, cfg, m);
		return key_charge(&ll_flow_buckets, &fk, sizeof(fk), id, cfg, m, cost_s, refund);
	}
	struct ll_key k LL_KEY_ALIGN;

	key_build(&k, cfg, m);
	return key_charge(&ll_buckets, &k, sizeof(k), id, cfg, m, cost_s, refund);
}

/* One limit for one packet, verified once as a global function so that four
 * limits per rule do not multiply the verifier's work. Returns an enum
 * ll_verdict with the debit's ll_via above LL_VERDICT_MASK (refund: what
 * the charge returned; LL_ADMIT once the debit is given back).
 */
__noinline int ll_limit_charge(__u32 slot, __u32 id, __u32 refund, struct pkt_meta *m)
{
	struct ll_limit_cfg *cfg = limit_cfg(slot, id);

	if (!cfg || !m)
		return 0;
	return limit_charge(id & (LL_MAX_LIMITS - 1), cfg, m, tb_cost(cfg->unit, m->len), refund);
}

/* 1 when limit id's deny hint alone shows it will deny m: lets a rule with
 * several limits drop a packet a later limit refuses without debiting and
 * refunding the earlier ones. Global for the same reason as ll_limit_charge.
 */
__noinline int ll_limit_hinted(__u32 slot, __u32 id, struct pkt_meta *m)
{
	struct ll_limit_cfg *cfg = limit_cfg(slot, id);

	return cfg && m && limit_hinted(id & (LL_MAX_LIMITS - 1), cfg, m);
}

__noinline int ll_meter_count(__u32 slot, __u32 id, __u32 cls, struct pkt_meta *m);

/* Count limit id's outcome for packet m: denied (it refused an enforced
 * packet), else the verdict it admitted with (0: not debited) or, shadowed,
 * a shadow denial; a metered limit's per-key meter too. Per-CPU counters.
 */
static __always_inline void limit_count(const struct ll_policy *pol, __u32 slot, __u32 id,
					int denied, __u8 debit, int shadowed, struct pkt_meta *m)
{
	__u8 verdict = debit & LL_VERDICT_MASK;
	struct ll_limit_stats *st;

	if (pol->limits[id].flags & LL_LIM_METER) {
		__u32 cls = denied			   ? LL_METER_DENIED
			    : verdict == LL_ADMIT_FALLBACK ? LL_METER_FALLBACK
			    : verdict == LL_ADMIT_BYPASS   ? LL_METER_BYPASS
							   : LL_METER_ADMITTED;

		if (denied || verdict)
			ll_meter_count(slot, id, cls, m);
	}
	st = limit_stats(id);
	if (!st)
		return;
	if (denied) {
		st->denied_pkts++;
		st->denied_bytes += m->len;
	} else if (verdict == LL_ADMIT_FALLBACK) {
		st->fallback_pkts++;
		st->fallback_bytes += m->len;
	} else if (verdict == LL_ADMIT_BYPASS) {
		st->bypass_pkts++;
		st->bypass_bytes += m->len;
	} else if (verdict) {
		st->allowed_pkts++;
		st->allowed_bytes += m->len;
	} else if (shadowed) {
		st->shadow_denied_pkts++;
		st->shadow_denied_bytes += m->len;
		count_shadow_win(id, pol->limits[id].uid, m);
	}
}

/* A rule of one limit: its charge is all there is, so nothing to give back
 * (no all-or-nothing bookkeeping, no pre-pass). Returns XDP_PASS or XDP_DROP.
 */
static __always_inline int rule_charge_one(const struct ll_policy *pol, __u32 slot,
					   const struct ll_rule *r, struct pkt_meta *m)
{
	__u32 id = r->limit[0] & (LL_MAX_LIMITS - 1);
	int v = ll_limit_charge(slot, id, 0, m), denied = 0, shadowed = 0;

	if (v == LL_DENY) {
		if (pol->limits[id].mode == LL_MODE_SHADOW)
			shadowed = 1;
		else
			denied = 1;
	}
	limit_count(pol, slot, id, denied, v, shadowed, m);
	return denied ? XDP_DROP : XDP_PASS;
}

/* Charge the limits of rule r in order. Enforced denial: undo the debits
 * already taken and attribute the drop to the denying limit. Shadow denial:
 * count it and go on. Returns XDP_PASS or XDP_DROP.
 */
static __always_inline int rule_charge(const struct ll_policy *pol, __u32 slot, __u32 ri,
				       const struct ll_rule *r, struct pkt_meta *m)
{
	/* debited[i]: the enum ll_verdict limit i admitted with (and, above
	 * LL_VERDICT_MASK, where its debit went), 0 if not debited
	 */
	__u8 debited[LL_MAX_RULE_LIMITS] = {}, shadowed[LL_MAX_RULE_LIMITS] = {};
	__u32 n = r->n_limits, *pp = 0;
	int i, j, denier = -1;

	/* Several limits: a limit after the first already known to refuse the
	 * packet (a key's deny hint, or an aggregate's empty pool, read
	 * lock-free) drops it before anything is debited. Under a flood from
	 * one key, or against an exhausted aggregate, this spares the limits
	 * before it a debit and a refund; it costs an admitted packet one more
	 * lookup per limit, so it runs only while it pays: while the last
	 * packet of this rule on this CPU was denied by a limit after the first
	 * (ll_rule_prepass). The first limit is never asked: its own charge
	 * reads its hint before anything is debited.
	 */
	if (n > 1) {
		pp = bpf_map_lookup_elem(&ll_rule_prepass, &ri);
		if (!pp || *pp) {
#pragma unroll
			for (i = 1; i < LL_MAX_RULE_LIMITS; i++)
				if (i < n && denier < 0 &&
				    ll_limit_hinted(slot, r->limit[i] & (LL_MAX_LIMITS - 1), m))
					denier = i;
		}
	}

#pragma unroll
	for (i = 0; i < LL_MAX_RULE_LIMITS; i++) {
		__u32 id = r->limit[i] & (LL_MAX_LIMITS - 1);

		if (i >= n || denier >= 0)
			break;
		int v = ll_limit_charge(slot, id, 0, m);

		if (v != LL_DENY) {
			debited[i] = v;
		} else if (pol->limits[id].mode == LL_MODE_SHADOW) {
			shadowed[i] = 1;
		} else {
			denier = i;
			break;
		}
	}

	/* Written only when it changes: a steady state only reads the line. */
	if (pp && *pp != (denier > 0))
		*pp = denier > 0;

#pragma unroll
	for (j = 0; j < LL_MAX_RULE_LIMITS; j++) {
		__u32 id = r->limit[j] & (LL_MAX_LIMITS - 1);

		if (j >= n)
			break;
		if (denier >= 0 && j != denier) {
			if (debited[j])
				ll_limit_charge(slot, id, debited[j], m);
			continue;
		}
		limit_count(pol, slot, id, denier >= 0, debited[j], shadowed[j], m);
	}
	return denier >= 0 ? XDP_DROP : XDP_PASS;
}

/* Count into *v (NULL: the map was full; the overflow entry then, or lost). */
static __always_inline int meter_add(struct ll_meter *v, struct ll_meter *ov, __u32 cls,
				     struct pkt_meta *m)
{
	struct ll_meter_info *info;
	__u32 z = 0;

	if (!v) {
		info = bpf_map_lookup_elem(&ll_meter_info, &z);
		v = ov;
		if (info && v)
			__sync_fetch_and_add(&info->full, 1);
		if (info && !v) {
			__sync_fetch_and_add(&info->lost_pkts, 1);
			__sync_fetch_and_add(&info->lost_bytes, m->len);
		}
		if (!v)
			return 0;
	}
	cls &= LL_METER_CLASSES - 1;
	v->pkts[cls]++;
	v->bytes[cls] += m->len;
	return 1;
}

/* Count packet m's outcome (enum ll_meter_class) under its key of metered
 * limit id in ll_meter (flow keys) or ll_meter_k (the other
 * modes). A key without an entry gets one; with the map full,
 * the limit's overflow entry counts it (and ll_meter_info.full), or, with
 * none either, ll_meter_info.lost_*: never silently. Global, so the rule's
 * four limits share one verified copy; only LL_LIM_METER limits call it.
 */
__noinline int ll_meter_count(__u32 slot, __u32 id, __u32 cls, struct pkt_meta *m)
{
	struct ll_limit_cfg *cfg = limit_cfg(slot, id);
	struct ll_meter zero = {}, *v, *ov = NULL;

	if (!cfg || !m)
		return 0;
	if (cfg->key_mode == LL_KEY_FLOW) {
		struct ll_flow_key fk LL_KEY_ALIGN;

		flow_key_build(&fk, cfg, m);
		v = bpf_map_lookup_elem(&ll_meter, &fk);
		if (!v) {
			zero.born = bpf_ktime_get_ns();
			bpf_map_update_elem(&ll_meter, &fk, &zero, BPF_NOEXIST);
			v = bpf_map_lookup_elem(&ll_meter, &fk);
		}
		if (!v) {
			overflow_key(&fk, cfg->uid);
			ov = bpf_map_lookup_elem(&ll_meter, &fk);
		}
	} else {
		struct ll_key k LL_KEY_ALIGN;

		key_build(&k, cfg, m);
		v = bpf_map_lookup_elem(&ll_meter_k, &k);
		if (!v) {
			zero.born = bpf_ktime_get_ns();
			bpf_map_update_elem(&ll_meter_k, &k, &zero, BPF_NOEXIST);
			v = bpf_map_lookup_elem(&ll_meter_k, &k);
		}
		if (!v) {
			__builtin_memset(&k, 0, sizeof(k));
			k.limit_uid = cfg->uid;
			k.family = LL_OVERFLOW_FAMILY;
			ov = bpf_map_lookup_elem(&ll_meter_k, &k);
		}
	}
	return meter_add(v, ov, cls, m);
}

/* Rules past the first LL_INLINE_RULES are scanned with bpf_loop: the
 * verifier walks the inline scan once per rule but a bpf_loop callback only
 * once, so LL_MAX_RULES is bounded by the policy map's value size and the
 * per-packet cost of a long scan, not by the verifier (docs/reference.md §2).
 */
#define LL_INLINE_RULES 32
_Static_assert(LL_MAX_RULES >= LL_INLINE_RULES, "the inline scan is of the first rules");

/* Rules per bpf_loop step: a step's call and policy lookup are shared by
 * this many rules (docs/config.md gives the scan's cost a rule).
 */
#define LL_LOOP_RULES 8

struct match_ctx {
	struct pkt_meta m;
	__u32 slot;
	__u32 n;     /* rules in the policy, <= LL_MAX_RULES */
	__u32 found; /* a rule index, or LL_MAX_RULES */
};

static long match_step(__u64 i, void *data)
{
	struct match_ctx *x = data;
	struct ll_policy *pol;
	__u32 slot = x->slot & (LL_POLICY_SLOTS - 1);
	__u64 base;
	int j;

	if (i >= (LL_MAX_RULES - LL_INLINE_RULES) / LL_LOOP_RULES)
		return 1;
	base = LL_INLINE_RULES + i * LL_LOOP_RULES;
	pol = bpf_map_lookup_elem(&ll_policy, &slot);
	if (!pol)
		return 1;
	for (j = 0; j < LL_LOOP_RULES; j++) {
		__u64 idx = base + j;

		if (idx >= x->n)
			return 1;
		idx &= LL_MAX_RULES - 1; /* for the verifier: a rule index */
		if (rule_match(&pol->rules[idx], &x->m)) {
			x->found = idx;
			return 1;
		}
	}
	return 0;
}

/* Index of the first rule of policy slot `slot` that matches m, or
 * LL_MAX_RULES when none does. Global, so the rule scan is verified once.
 */
__noinline int ll_match(__u32 slot, const struct pkt_meta *m)
{
	struct ll_policy *pol;
	struct match_ctx x;
	__u32 i, n;

	slot &= LL_POLICY_SLOTS - 1;
	pol = bpf_map_lookup_elem(&ll_policy, &slot);
	if (!pol || !m)
		return LL_MAX_RULES;
	n = pol->n_rules;
	for (i = 0; i < LL_INLINE_RULES; i++) {
		if (i >= n)
			return LL_MAX_RULES;
		if (rule_match(&pol->rules[i], m))
			return i;
	}
	if (n <= LL_INLINE_RULES)
		return LL_MAX_RULES;
	if (n > LL_MAX_RULES)
		n = LL_MAX_RULES;
	__builtin_memcpy(&x.m, m, sizeof(x.m));
	x.slot = slot;
	x.n = n;
	x.found = LL_MAX_RULES;
	bpf_loop((n - LL_INLINE_RULES + LL_LOOP_RULES - 1) / LL_LOOP_RULES, match_step, &x, 0);
	return x.found;
}

SEC("xdp")
int leaseline(struct xdp_md *ctx)
{
	struct pkt_meta m = {};
	struct ll_policy *pol;
	struct ll_state *st;
	__u32 zero = 0, slot, i;
	int reason, verdict;

	reason = parse_packet(ctx, &m);
	count_parse(reason);
	if (reason == LL_PARSE_NON_IP)
		return XDP_PASS;
	if (reason != LL_PARSE_OK && reason != LL_PARSE_FRAGMENT)
		return XDP_DROP;

	st = bpf_map_lookup_elem(&ll_state, &zero);
	if (!st)
		return XDP_PASS;
	slot = st->active_slot & (LL_POLICY_SLOTS - 1);
	pol = bpf_map_lookup_elem(&ll_policy, &slot);
	if (!pol)
		return XDP_PASS;

	i = ll_match(slot, &m);
	if (i < LL_MAX_RULES) {
		i &= LL_MAX_RULES - 1; /* for the verifier: i is a rule index */
		/* An allow or deny rule charges nothing: its verdict is its action. */
		if (pol->rules[i].action == LL_RULE_PASS)
			verdict = XDP_PASS;
		else if (pol->rules[i].action == LL_RULE_DROP)
			verdict = XDP_DROP;
		else if (pol->rules[i].n_limits == 1)
			verdict = rule_charge_one(pol, slot, &pol->rules[i], &m);
		else
			verdict = rule_charge(pol, slot, i, &pol->rules[i], &m);
		count_rule(i, m.len, verdict == XDP_DROP);
		return verdict;
	}
	verdict = pol->default_action == LL_ACT_DROP ? XDP_DROP : XDP_PASS;
	count_rule(LL_MAX_RULES, m.len, verdict == XDP_DROP);
	return verdict;
}
