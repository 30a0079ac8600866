// SPDX-License-Identifier: MIT
/*
 * Reaping the bucket maps (ll_buckets, ll_flow_buckets, ll_prefix_buckets)
 * and ll_key_grants: what a limit no longer in the policy left, and idle
 * buckets once a map is under pressure; the count in ll_fill corrected.
 * Also the batched walk of a bucket map the reaper and `top` read with.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "leaseline.skel.h"
#include "tb_math.h"
#include "lib/util.h"

/* Reap idle keys only once the map is this full (numerator / 2^shift):
 * below it an idle full bucket costs nothing, and not deleting it avoids
 * the read-then-delete race (docs/design.md, Eviction). The datapath's
 * pressure mark (ll_fill) is the same fraction.
 */
#define REAP_PRESSURE_NUM   LL_PRESSURE_NUM
#define REAP_PRESSURE_SHIFT LL_PRESSURE_SHIFT
/* An idle bucket is deleted only after this long without a packet: deleting
 * a key that comes back soon only buys it a trip through the slow path.
 */
#define REAP_MIN_IDLE_NS (10 * NSEC_PER_SEC)

enum reap_class { REAP_KEEP, REAP_IDLE, REAP_GONE };

/* What a limit's buckets are charged with now: the policy's parameters, or
 * for a global limit its live lease's share; a dead lease keeps every
 * bucket (idle = false).
 */
struct reap_share {
	bool idle_ok;
	uint32_t gen;
	struct tb_params cur;
};

static void reap_shares(struct dp *dp, const struct ll_policy *pol, uint64_t now,
			struct reap_share *sh)
{
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_lease ls;

		sh[id] = (struct reap_share){true, l->gen, {l->rate, l->burst_s, l->fill_ns}};
		if (!l->in_use || l->scope != LL_SCOPE_GLOBAL || l->key_mode == LL_KEY_NONE)
			continue;
		if (dp_lease_read(dp, id, &ls) || now >= ls.expiry_ns)
			sh[id].idle_ok = false;
		else
			sh[id] =
			    (struct reap_share){true, ls.gen, {ls.rate, ls.burst_s, ls.fill_ns}};
	}
}

/* The policy's limits by uid, sorted: a bucket finds its limit in log2(n)
 * steps, not a walk of all LL_MAX_LIMITS slots (at 256 slots that walk was
 * most of a reap pass).
 */
struct reap_uid {
	uint32_t uid;
	uint32_t id;
};

static int reap_uid_cmp(const void *a, const void *b)
{
	const struct reap_uid *x = a, *y = b;

	return x->uid < y->uid ? -1 : x->uid > y->uid;
}

static size_t reap_uids(const struct ll_policy *pol, struct reap_uid *u)
{
	size_t n = 0;

	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use)
			u[n++] = (struct reap_uid){pol->limits[id].uid, id};
	sort_n(u, n, sizeof(*u), reap_uid_cmp);
	return n;
}

/* A bucket deleted now would come back full on the next packet; delete only
 * when it is full anyway (REAP_IDLE) or its limit is gone (REAP_GONE).
 */
static enum reap_class bucket_class(const struct ll_policy *pol, const struct reap_share *sh,
				    const struct reap_uid *uids, size_t n_uids,
				    const struct ll_key_head *k, const struct ll_bucket *b,
				    uint64_t now)
{
	/* "Full" as of the earliest clock a packet may be charged with: the
	 * datapath's lags CLOCK_MONOTONIC (bpf/clock.h), and a bucket full only
	 * by this clock would come back full, a gift of up to rate x lag.
	 */
	uint64_t pnow = now > LL_COARSE_SLACK_NS ? now - LL_COARSE_SLACK_NS : 0;

	struct reap_uid want = {.uid = k->limit_uid};
	const struct reap_uid *u = bsearch(&want, uids, n_uids, sizeof(*uids), reap_uid_cmp);

	if (u) {
		uint32_t i = u->id;
		const struct ll_limit_cfg *l = &pol->limits[i];

		if (k->family == LL_OVERFLOW_FAMILY || now < b->last_ns + REAP_MIN_IDLE_NS)
			return REAP_KEEP; /* overflow stays */
		/* A key charged with its override: the contract it carries. */
		if (l->scope == LL_SCOPE_LOCAL && (l->flags & LL_LIM_OVERRIDES) && b->o_gen &&
		    b->gen == b->o_gen && b->kg_seen == l->ov_ver) {
			struct tb_params o = {b->o_rate, b->o_burst_s, b->o_fill_ns};

			return tb_refill(b->tokens, b->last_ns, pnow, &o) >= o.burst_s ? REAP_IDLE
										       : REAP_KEEP;
		}
		if (!sh[i].idle_ok || b->gen != sh[i].gen)
			return REAP_KEEP; /* let the datapath settle first */
		return tb_refill(b->tokens, b->last_ns, pnow, &sh[i].cur) >= sh[i].cur.burst_s
			   ? REAP_IDLE
			   : REAP_KEEP;
	}
	return REAP_GONE;
}

/* Keys of one bucket map, key_size bytes each. */
struct reap_list {
	unsigned char *keys;
	size_t n, cap, key_size;
};

static int reap_list_add(struct reap_list *l, const void *k)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		unsigned char *nk = realloc(l->keys, cap * l->key_size);

		if (!nk)
			return -ENOMEM;
		l->keys = nk;
		l->cap = cap;
	}
	memcpy(l->keys + l->n++ * l->key_size, k, l->key_size);
	return 0;
}

#define BUCKETS_BATCH 4096

int dp_buckets_walk(int fd, size_t key_size,
		    int (*fn)(void *ctx, const void *key, const struct ll_bucket *b), void *ctx)
{
	unsigned char *keys = calloc(BUCKETS_BATCH, key_size);
	struct ll_bucket *vals = calloc(BUCKETS_BATCH, sizeof(*vals));
	struct ll_flow_key batch_out; /* the larger key */
	void *in = NULL;
	int err = 0;

	LIBBPF_OPTS(bpf_map_batch_opts, bo, .elem_flags = BPF_F_LOCK);
	if (!keys || !vals) {
		err = -ENOMEM;
		goto out;
	}
	for (;;) {
		__u32 cnt = BUCKETS_BATCH;
		int r = bpf_map_lookup_batch(fd, in, &batch_out, keys, vals, &cnt, &bo);

		if (r && errno != ENOENT) {
			err = -errno;
			break;
		}
		for (__u32 i = 0; i < cnt && !err; i++)
			err = fn(ctx, keys + i * key_size, &vals[i]);
		if (r || err)
			break; /* ENOENT: that was the last batch */
		in = &batch_out;
	}
out:
	free(keys);
	free(vals);
	return err;
}

struct reap_scan {
	const struct ll_policy *pol;
	const struct reap_share *sh;
	const struct reap_uid *uids;
	size_t n_uids;
	uint64_t now;
	struct reap_list *idle, *gone;
	size_t total;
};

/* Classify one bucket, count it. */
static int reap_one(void *ctx, const void *k, const struct ll_bucket *b)
{
	struct reap_scan *rs = ctx;
	enum reap_class c = bucket_class(rs->pol, rs->sh, rs->uids, rs->n_uids, k, b, rs->now);

	rs->total++;
	if (c == REAP_IDLE)
		return reap_list_add(rs->idle, k);
	if (c == REAP_GONE)
		return reap_list_add(rs->gone, k);
	return 0;
}

static int reap_delete(int fd, const struct reap_list *l)
{
	int n = 0;

	for (size_t i = 0; i < l->n; i++)
		n += !bpf_map_delete_elem(fd, l->keys + i * l->key_size);
	return n;
}

/* Reap one bucket map and, when it has an ll_fill entry (fill <
 * LL_FILL_MAPS), correct that count. Returns how many buckets it deleted,
 * or -errno.
 *
 * The count: the buckets this pass saw, less those it deleted, plus those
 * the datapath added since the pass began (what the entry gained since it
 * was read at the start). Adding that difference atomically loses no
 * datapath add; a bucket created during the scan that the scan also saw is
 * counted twice until the next pass: too high, so pressure comes early,
 * never late.
 */
static int reap_map(struct dp *dp, int fd, const struct bpf_map *map, unsigned int fill,
		    const struct ll_policy *pol, const struct reap_share *sh,
		    const struct reap_uid *uids, size_t n_uids, uint64_t now)
{
	size_t ks = bpf_map__key_size(map);
	struct reap_list idle = {.key_size = ks}, gone = {.key_size = ks};
	uint64_t before = fill < LL_FILL_MAPS && dp->fill
			      ? __atomic_load_n(&dp->fill[fill].live, __ATOMIC_RELAXED)
			      : 0;
	struct reap_scan rs = {pol, sh, uids, n_uids, now, &idle, &gone, 0};
	int err = dp_buckets_walk(fd, ks, reap_one, &rs);

	if (!err) {
		err = reap_delete(fd, &gone);
		if (rs.total << REAP_PRESSURE_SHIFT > bpf_map__max_entries(map) * REAP_PRESSURE_NUM)
			err += reap_delete(fd, &idle);
		dp_fill_add(dp, fill, (int64_t)(rs.total - (size_t)err) - (int64_t)before);
	}
	free(idle.keys);
	free(gone.keys);
	return err;
}

/* Per-key grants of limits that are no longer global per-key limits of the
 * policy: nothing reads them any more.
 */
static int key_grants_reap(struct dp *dp, const struct ll_policy *pol, const struct reap_uid *uids,
			   size_t n_uids)
{
	struct ll_flow_key k, next, *prev = NULL;
	int n = 0;

	while (!bpf_map_get_next_key(dp->key_grants_fd, prev, &next)) {
		struct reap_uid want;
		const struct reap_uid *u;
		bool live;

		k = next;
		prev = &k;
		want.uid = k.limit_uid;
		u = bsearch(&want, uids, n_uids, sizeof(*uids), reap_uid_cmp);
		live = u && pol->limits[u->id].scope == LL_SCOPE_GLOBAL &&
		       pol->limits[u->id].key_mode != LL_KEY_NONE;
		if (!live && !bpf_map_delete_elem(dp->key_grants_fd, &k)) {
			n++;
			prev = NULL; /* the walk restarts: the deleted key is no cursor */
		}
	}
	return n;
}

int dp_buckets_reap(struct dp *dp, uint64_t now)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct reap_share sh[LL_MAX_LIMITS];
	struct reap_uid uids[LL_MAX_LIMITS];
	size_t nu = 0;
	int err, n = 0;

	if (!pol)
		return -ENOMEM;
	err = dp_policy_read(dp->policy_fd, dp->state_fd, pol);
	if (!err) {
		reap_shares(dp, pol, now, sh);
		nu = reap_uids(pol, uids);
		err = reap_map(dp, dp->buckets_fd, dp->skel->maps.ll_buckets, LL_FILL_KEYS, pol, sh,
			       uids, nu, now);
	}
	if (err >= 0) {
		n = err;
		err = reap_map(dp, dp->flow_buckets_fd, dp->skel->maps.ll_flow_buckets,
			       LL_FILL_FLOWS, pol, sh, uids, nu, now);
	}
	if (err >= 0) {
		n += err;
		err = reap_map(dp, dp->prefix_buckets_fd, dp->skel->maps.ll_prefix_buckets,
			       LL_FILL_MAPS, pol, sh, uids, nu, now);
	}
	if (err >= 0) {
		n += err;
		err = key_grants_reap(dp, pol, uids, nu);
	}
	free(pol);
	return err < 0 ? err : n + err;
}
