// SPDX-License-Identifier: MIT
/*
 * Policy compilation and migration (see policy.h). Invariant: for a limit
 * present in both the running and the new policy, id and uid are unchanged,
 * and gen changes exactly when rate or burst does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "lib/log.h"
#include "agent/ovr_map.h"
#include "agent/set_map.h"
#include "agent/policy.h"
#include "tb_math.h"

void policy_mask_v6(uint8_t plen, uint32_t mask[4])
{
	for (int i = 0; i < 4; i++) {
		int bits = (int)plen - 32 * i;

		if (bits >= 32)
			mask[i] = 0xffffffffu;
		else if (bits <= 0)
			mask[i] = 0;
		else
			mask[i] = htonl(~0u << (32 - bits));
	}
}

int policy_limit_id(const struct ll_policy *pol, const char *name)
{
	for (int i = 0; i < LL_MAX_LIMITS; i++)
		if (pol->limits[i].in_use && !strncmp(pol->limits[i].name, name, LL_NAME_LEN))
			return i;
	return -1;
}

/* A free id for a new limit: not used by the new policy and, if possible,
 * not by the running one either (its buckets are still being reaped).
 */
static int free_id(const struct ll_policy *out, const struct ll_policy *prev)
{
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < LL_MAX_LIMITS; i++)
			if (!out->limits[i].in_use && (pass || !prev || !prev->limits[i].in_use))
				return i;
	return -1;
}

static void limit_fill(struct ll_limit_cfg *l, const struct cfg_limit *cl, unsigned int ncpus)
{
	uint32_t m6[4];

	l->rate = cl->rate;
	l->burst_s = cl->burst * TB_SCALE;
	l->fill_ns = tb_fill_ns(l->rate, l->burst_s);
	l->chunk_s = tb_chunk_s(cl->rate, cl->burst, ncpus);
	l->key_mode = cl->key_mode;
	l->unit = cl->unit;
	l->mode = cl->mode;
	l->scope = cl->scope;
	l->prefix_v4 = cl->prefix_v4;
	l->prefix_v6 = cl->prefix_v6;
	policy_mask_v6(96 + cl->prefix_v4, m6);
	l->mask_v4 = m6[3];
	policy_mask_v6(cl->prefix_v6, l->mask_v6);
	l->in_use = 1;
	l->on_loss = cl->on_loss;
	if (cl->has_fallback) {
		l->fb_rate = cl->fallback_rate;
		l->fb_burst_s = cl->fallback_burst * TB_SCALE;
	}
	if (cl->scope == LL_SCOPE_GLOBAL && cl->overrides[0])
		l->flags |= LL_LIM_KEY_CONTRACTS;
	if (cl->scope == LL_SCOPE_GLOBAL && cl->meter && cl->key_mode != LL_KEY_NONE)
		l->flags |= LL_LIM_METER;
	snprintf(l->name, sizeof(l->name), "%s", cl->name);
}

/* Carry generation and migration data from the running limit `old`. */
static void limit_migrate(struct ll_limit_cfg *l, const struct ll_limit_cfg *old, uint64_t now_ns,
			  uint32_t *next_uid)
{
	l->uid = old->uid;
	if (old->rate == l->rate && old->burst_s == l->burst_s) {
		l->gen = old->gen;
		l->prev_gen = old->prev_gen;
		l->prev_rate = old->prev_rate;
		l->prev_burst_s = old->prev_burst_s;
		l->prev_fill_ns = old->prev_fill_ns;
		l->reload_ns = old->reload_ns;
		return;
	}
	l->gen = (*next_uid)++;
	l->prev_gen = old->gen;
	l->prev_rate = old->rate;
	l->prev_burst_s = old->burst_s;
	l->prev_fill_ns = old->fill_ns;
	l->reload_ns = now_ns;
}

/* An address prefix as (network, mask) over 128 bits; IPv4 as v4-mapped. */
static void prefix_fill(uint8_t family, const uint8_t *addr, uint8_t plen, uint32_t net[4],
			uint32_t mask[4])
{
	uint8_t a[16] = {0};

	if (family == 4) {
		a[10] = 0xff;
		a[11] = 0xff;
		memcpy(a + 12, addr, 4);
		plen += 96;
	} else {
		memcpy(a, addr, 16);
	}
	policy_mask_v6(plen, mask);
	memcpy(net, a, 16);
	for (int i = 0; i < 4; i++)
		net[i] &= mask[i];
}

static void rule_fill(struct ll_rule *r, const struct cfg_rule *cr, const uint8_t *ids,
		      const uint32_t *set_ids)
{
	memset(r, 0, sizeof(*r));
	r->action = cr->action;
	if (cr->src_set)
		r->src_set = set_ids[cr->src_set - 1];
	if (cr->dst_set)
		r->dst_set = set_ids[cr->dst_set - 1];
	snprintf(r->name, sizeof(r->name), "%s", cr->name);
	r->proto = cr->proto;
	r->frag = cr->frag;
	/* Unused ranges empty (lo > hi): the XDP program tests all of them. */
	r->n_dport = cr->has_dport ? cr->n_dport : 0;
	for (int i = 0; i < LL_MAX_DPORT_RANGES; i++) {
		r->dport[i].lo = i < r->n_dport ? cr->dport[i].lo : 1;
		r->dport[i].hi = i < r->n_dport ? cr->dport[i].hi : 0;
	}
	if (cr->has_tcp_flags) {
		r->tcp_mask = cr->tcp_mask;
		r->tcp_value = cr->tcp_value;
	}
	if (cr->has_icmp) {
		r->has_icmp = 1;
		memcpy(r->icmp_types, cr->icmp_types, sizeof(r->icmp_types));
	}
	if (cr->has_src) {
		r->family = cr->src_family;
		prefix_fill(cr->src_family, cr->src_addr, cr->src_plen, r->src, r->src_mask);
	}
	if (cr->has_dst) {
		r->family = cr->dst_family;
		prefix_fill(cr->dst_family, cr->dst_addr, cr->dst_plen, r->dst, r->dst_mask);
	}
	r->n_limits = cr->n_limits;
	for (int i = 0; i < cr->n_limits; i++)
		r->limit[i] = ids[cr->limit[i]];
}

int policy_compile(const struct cfg_policy *cp, const struct policy_compile_opts *opts,
		   struct ll_policy *out, char *err, size_t errlen)
{
	const struct ll_policy *prev = opts->prev;
	uint8_t ids[LL_MAX_LIMITS];
	/* Whether limit i keeps its running id: every u8 is an id at 256 limits. */
	bool kept[LL_MAX_LIMITS];

	if (prev && prev->version && cp->version < prev->version) {
		snprintf(err, errlen, "policy version %llu is older than the running version %llu",
			 (unsigned long long)cp->version, (unsigned long long)prev->version);
		return -ESTALE;
	}
	memset(out, 0, sizeof(*out));
	out->version = cp->version;
	out->default_action = cp->default_action;

	/* Limits that stay keep their id, so their buckets stay theirs. */
	for (uint32_t i = 0; i < cp->n_limits; i++) {
		int id = prev ? policy_limit_id(prev, cp->limits[i].name) : -1;

		kept[i] = id >= 0;
		ids[i] = kept[i] ? (uint8_t)id : 0;
		if (kept[i])
			out->limits[id].in_use = 1;
	}
	for (uint32_t i = 0; i < cp->n_limits; i++) {
		struct ll_limit_cfg *l;
		int id = kept[i] ? ids[i] : free_id(out, prev);

		if (id < 0) {
			snprintf(err, errlen, "no free limit slot (at most %d limits)",
				 LL_MAX_LIMITS);
			return -EINVAL;
		}
		ids[i] = (uint8_t)id;
		l = &out->limits[id];
		limit_fill(l, &cp->limits[i], opts->ncpus);
		if (prev && prev->limits[id].in_use &&
		    !strncmp(prev->limits[id].name, l->name, LL_NAME_LEN) &&
		    prev->limits[id].unit != l->unit) {
			/* Packets and bytes are not the same tokens: the limit starts
			 * afresh under a new uid, its buckets empty at the reload
			 * (refilling from then), never full.
			 */
			l->uid = (*opts->next_uid)++;
			l->gen = (*opts->next_uid)++;
			l->reload_ns = opts->now_ns;
			l->flags |= LL_LIM_EMPTY_START;
		} else if (prev && prev->limits[id].in_use &&
			   !strncmp(prev->limits[id].name, l->name, LL_NAME_LEN)) {
			limit_migrate(l, &prev->limits[id], opts->now_ns, opts->next_uid);
		} else {
			l->uid = (*opts->next_uid)++;
			l->gen = (*opts->next_uid)++;
			l->reload_ns = opts->now_ns;
		}
	}
	/* A set condition without its set would match every address. */
	if (cp->n_sets && !opts->set_ids) {
		snprintf(err, errlen, "the policy's prefix sets are not written");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < cp->n_sets; i++)
		if (!opts->set_ids[i]) {
			snprintf(err, errlen, "set %s has no id", cp->sets[i].path);
			return -EINVAL;
		}
	out->n_rules = cp->n_rules;
	for (uint32_t i = 0; i < cp->n_rules; i++)
		rule_fill(&out->rules[i], &cp->rules[i], ids, opts->set_ids);
	return 0;
}

int policy_apply(struct dp *dp, const struct cfg_policy *cp, char *err, size_t errlen)
{
	struct ll_policy *prev = calloc(1, sizeof(*prev)), *pol = calloc(1, sizeof(*pol));
	struct ll_lease *leases = calloc(LL_MAX_LIMITS, sizeof(*leases));
	uint32_t set_ids[LL_MAX_SETS] = {0};
	bool sets_written = false;
	const char *stage = "cannot read the running policy";
	uint64_t now = clock_now_ns();
	bool fence_changed = false;
	struct ll_fence fence;
	struct ll_state st;
	int ret = -ENOMEM;

	if (!prev || !pol || !leases) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	ret = dp_state_read(dp->state_fd, &st);
	if (!ret)
		ret = dp_policy_read(dp->policy_fd, dp->state_fd, prev);
	if (ret)
		goto fail;
	if (st.next_uid == 0)
		st.next_uid = 1;
	if (prev->version && cp->version < prev->version) {
		snprintf(err, errlen, "policy version %llu is older than the running version %llu",
			 (unsigned long long)cp->version, (unsigned long long)prev->version);
		ret = -ESTALE;
		goto out;
	}
	/* Sets first, each whole beside the running ones: the policy below
	 * names their ids.
	 */
	ret =
	    set_map_write(dp, cp, prev->version ? prev : NULL, &st.next_uid, set_ids, err, errlen);
	if (ret)
		goto out;
	sets_written = true;
	struct policy_compile_opts o = {
	    .prev = prev->version ? prev : NULL,
	    .next_uid = &st.next_uid,
	    .now_ns = now,
	    .ncpus = dp->ncpus,
	    .set_ids = set_ids,
	};
	ret = policy_compile(cp, &o, pol, err, errlen);
	if (ret)
		goto out;
	/* Overrides before the policy that points buckets at them. */
	ret = ovr_map_write(dp, cp, prev->version ? prev : NULL, pol, &st.next_uid, err, errlen);
	if (ret)
		goto out;
	/* Global limits: on-loss and the fallback share from the policy; a
	 * limit that stays keeps its lease.
	 */
	stage = "cannot read a lease";
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		bool same = prev->limits[id].in_use && prev->limits[id].uid == l->uid;
		struct ll_lease old = {};

		if (!l->in_use || l->scope != LL_SCOPE_GLOBAL)
			continue;
		if (same && (ret = dp_lease_read(dp, id, &old)))
			goto fail;
		lease_from_policy(&old, same, l, dp->ncpus, &st.next_uid, &leases[id]);
	}
	ret = dp_policy_commit(dp, pol, prev, leases, &st, now, &stage);
	if (ret)
		goto fail;
	sets_written = false;
	set_map_settle(dp, pol, true);
	ovr_map_prune(dp, pol);
	/* An id that changed hands starts with a clean fence: grants of the
	 * limit it served are refused by name, and the new limit's are numbered
	 * from 1 by the coordinator. After the flip, so that a commit that
	 * failed leaves the running limits' fences as they were; no grant is
	 * handled in between (one thread).
	 */
	if (!dp_fence_read(dp, &fence)) {
		for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
			if (pol->limits[id].uid != prev->limits[id].uid ||
			    pol->limits[id].in_use != prev->limits[id].in_use)
				fence_changed |= lease_fence_forget(&fence, id);
		/* The policy is live either way: a failure here only delays the
		 * new limits' first grants until their seq passes the old ones.
		 */
		int e = fence_changed ? dp_fence_write(dp, &fence) : 0;

		if (e)
			pr_warn("cannot reset the fence of reused limit ids: %s\n", strerror(-e));
	}
	/* Enforced all the same (a few dozen flows get a bucket in the
	 * overflow buckets' slots, the rest share their source prefixes'
	 * fallback buckets), but surely not what was meant.
	 */
	for (uint32_t i = 0; i < cp->n_limits; i++)
		if (cp->limits[i].key_mode == LL_KEY_FLOW && dp->flow_capacity <= LL_MAX_LIMITS)
			pr_warn("limit '%s' is key: flow but max-flow-keys is 0: its flows "
				"share their source prefixes' buckets\n",
				cp->limits[i].name);
	goto out;
fail:
	snprintf(err, errlen, "%s: %s", stage, strerror(-ret));
out:
	/* Refused after its sets were written: the running policy's stay. */
	if (sets_written)
		set_map_settle(dp, prev, false);
	free(prev);
	free(pol);
	free(leases);
	return ret;
}
