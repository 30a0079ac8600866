// SPDX-License-Identifier: MIT
/*
 * Changing the datapath's policy, and the state beside it (ll_state).
 * Invariants: the slot packets read is never written; a slot is rewritten
 * only after an RCU grace period since it stopped being live, so no packet
 * still reading it sees a mix.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "agent/dp.h"
#include "agent/dp_priv.h"
#include "lib/log.h"

/* An array-of-maps whose every update makes the kernel wait for an RCU grace
 * period (maybe_wait_bpf_programs): afterwards no XDP run that started
 * before the call is still running.
 */
int dp_rcu_barrier_create(void)
{
	int inner, outer;

	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ll_rcu_inner", 4, 4, 1, NULL);
	if (inner < 0)
		return -errno;
	LIBBPF_OPTS(bpf_map_create_opts, o, .inner_map_fd = inner);
	outer = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "ll_rcu", 4, 4, 1, &o);
	if (outer < 0) {
		int e = -errno;

		close(inner);
		return e;
	}
	/* The outer map holds a reference; the fd can go. Keep one entry set. */
	{
		__u32 k = 0;
		int fd = inner;

		if (bpf_map_update_elem(outer, &k, &fd, BPF_ANY)) {
			int e = -errno;

			close(inner);
			close(outer);
			return e;
		}
	}
	close(inner);
	return outer;
}

static int rcu_barrier_wait(int rcu_fd)
{
	__u32 k = 0;
	int inner, err;

	/* Re-inserting any inner map works; create a throwaway one. */
	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ll_rcu_inner", 4, 4, 1, NULL);
	if (inner < 0)
		return -errno;
	err = bpf_map_update_elem(rcu_fd, &k, &inner, BPF_ANY) ? -errno : 0;
	close(inner);
	return err;
}

/* A string from a pinned map: anyone with write access to the pins could
 * have put anything there. NUL-terminated within its buffer, and every
 * byte that is not printable ASCII shown as '?' (no terminal escapes).
 */
static void pin_str(char *s, size_t size)
{
	s[size - 1] = '\0';
	for (size_t i = 0; s[i]; i++) {
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			s[i] = '?';
	}
}

int dp_state_read(int state_fd, struct ll_state *st)
{
	__u32 k = 0;

	if (bpf_map_lookup_elem(state_fd, &k, st))
		return -errno;
	pin_str(st->refused_why, sizeof(st->refused_why));
	return 0;
}

int dp_policy_read(int policy_fd, int state_fd, struct ll_policy *pol)
{
	struct ll_state st;
	__u32 slot;
	int err = dp_state_read(state_fd, &st);

	if (err)
		return err;
	slot = st.active_slot & (LL_POLICY_SLOTS - 1);
	if (bpf_map_lookup_elem(policy_fd, &slot, pol))
		return -errno;
	if (pol->n_rules > LL_MAX_RULES)
		pol->n_rules = LL_MAX_RULES;
	for (uint32_t i = 0; i < LL_MAX_RULES; i++)
		pin_str(pol->rules[i].name, sizeof(pol->rules[i].name));
	for (uint32_t i = 0; i < LL_MAX_LIMITS; i++)
		pin_str(pol->limits[i].name, sizeof(pol->limits[i].name));
	return 0;
}

/* Fresh state for limits that did not exist before: a full pool, zero
 * counters, and the shared overflow bucket keys use when neither ll_buckets
 * nor ll_prefix_buckets has room (counted in ll_fill, as a bucket).
 */
static int limits_init_each(struct dp *dp, const struct ll_policy *pol,
			    const struct ll_policy *prev, uint64_t now, void *zero_stats)
{
	for (__u32 id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_bucket b = {.gen = l->gen, .tokens = l->burst_s, .last_ns = now};
		/* A global limit's pool starts empty: a share is spent only as leased,
		 * and a gateway that lost its pins must not spend a second burst.
		 */
		struct ll_pool p = {.gen = l->gen,
				    .tokens = l->scope == LL_SCOPE_GLOBAL ? 0 : l->burst_s,
				    .last_ns = now};
		struct ll_key k = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		struct ll_flow_key fk = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		int flow = l->key_mode == LL_KEY_FLOW;

		if (!l->in_use || (prev->limits[id].in_use && prev->limits[id].uid == l->uid))
			continue;
		if (bpf_map_update_elem(dp->pools_fd, &id, &p, BPF_ANY))
			return -errno;
		/* The id may have served a removed limit: its counters are not ours. */
		if (bpf_map_update_elem(dp->limit_stats_fd, &id, zero_stats, BPF_ANY))
			return -errno;
		if (l->key_mode == LL_KEY_NONE)
			continue;
		if (!bpf_map_update_elem(flow ? dp->flow_buckets_fd : dp->buckets_fd,
					 flow ? (void *)&fk : (void *)&k, &b, BPF_NOEXIST))
			dp_fill_add(dp, flow ? LL_FILL_FLOWS : LL_FILL_KEYS, 1);
		else if (errno != EEXIST)
			return -errno;
	}
	return 0;
}

/* Each metered limit's overflow entry in ll_meter, before its first packet
 * is metered: a key that finds the map full is counted there. Entries of a
 * limit metered before keep their totals (EEXIST). A full map leaves the
 * limit without one: its keys that find no room count as lost.
 */
static int meter_overflow_init(struct dp *dp, const struct ll_policy *pol)
{
	struct ll_meter *zero = calloc(dp->ncpus, sizeof(*zero));
	struct timespec ts;
	int err = zero ? 0 : -ENOMEM;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (zero)
		zero[0].born = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;

	for (__u32 id = 0; !err && id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_flow_key fk = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		struct ll_key k = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		bool flow = l->key_mode == LL_KEY_FLOW;

		if (!l->in_use || !(l->flags & LL_LIM_METER))
			continue;
		if (bpf_map_update_elem(flow ? dp->meter_fd : dp->meter_k_fd,
					flow ? (const void *)&fk : (const void *)&k, zero,
					BPF_NOEXIST) &&
		    errno != EEXIST) {
			if (errno != E2BIG)
				err = -errno;
			else
				pr_warn("ll_meter is full: limit '%s' has no overflow entry\n",
					l->name);
		}
	}
	free(zero);
	return err;
}

static int limits_init(struct dp *dp, const struct ll_policy *pol, const struct ll_policy *prev,
		       uint64_t now)
{
	void *zero_stats = calloc(dp->ncpus, sizeof(struct ll_limit_stats));
	int err = zero_stats ? limits_init_each(dp, pol, prev, now, zero_stats) : -ENOMEM;

	if (!err)
		err = meter_overflow_init(dp, pol);

	free(zero_stats);
	return err;
}

int dp_policy_commit(struct dp *dp, const struct ll_policy *pol, const struct ll_policy *prev,
		     const struct ll_lease *leases, struct ll_state *st, uint64_t now,
		     const char **stage)
{
	__u32 next_slot, k = 0;
	int ret;

	*stage = "cannot initialise limit state";
	ret = limits_init(dp, pol, prev, now);
	for (__u32 id = 0; !ret && id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use && pol->limits[id].scope == LL_SCOPE_GLOBAL &&
		    bpf_map_update_elem(dp->leases_fd, &id, &leases[id], BPF_F_LOCK))
			ret = -errno;
	if (ret)
		return ret;
	/* The inactive slot stopped being live at the previous flip; wait until
	 * no packet can still be reading it, then write it whole.
	 */
	*stage = "cannot write the policy";
	ret = rcu_barrier_wait(dp->rcu_fd);
	next_slot = prev->version ? (st->active_slot + 1) & (LL_POLICY_SLOTS - 1) : st->active_slot;
	if (!ret && bpf_map_update_elem(dp->policy_fd, &next_slot, pol, BPF_ANY))
		ret = -errno;
	if (ret)
		return ret;
	*stage = "cannot switch to the new policy";
	st->active_slot = next_slot;
	st->version = pol->version;
	st->applied_ns = now;
	st->applies++;
	return bpf_map_update_elem(dp->state_fd, &k, st, BPF_ANY) ? -errno : 0;
}

int dp_refusal_note(struct dp *dp, uint64_t version, const char *why, uint64_t now)
{
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	st.refusals++;
	st.refused_version = version;
	st.refused_ns = now;
	snprintf(st.refused_why, sizeof(st.refused_why), "%s", why);
	return bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY) ? -errno : 0;
}

int dp_link_stats_write(struct dp *dp, const struct ll_state *from)
{
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	st.grants_applied = from->grants_applied;
	st.grants_stale = from->grants_stale;
	st.grants_clamped = from->grants_clamped;
	st.grants_bad_keys = from->grants_bad_keys;
	st.hot_keys_listed = from->hot_keys_listed;
	st.hot_keys_dropped = from->hot_keys_dropped;
	st.link_up = from->link_up;
	st.link_connects = from->link_connects;
	return bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY) ? -errno : 0;
}
