// SPDX-License-Identifier: MIT
/*
 * Lease and fencing decisions (see lease.h): pure functions, no clock read,
 * no map touched.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "agent/lease_decide.h"
#include "tb_math.h"
#include "lib/util.h"

int lease_fence_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t seq)
{
	if (id >= LL_MAX_LIMITS || epoch < f->max_epoch_seen)
		return -ESTALE;
	if (epoch < f->applied_epoch[id] ||
	    (epoch == f->applied_epoch[id] && seq <= f->applied_seq[id]))
		return -ESTALE;
	return 0;
}

int lease_epoch_ok(const struct ll_fence *f, uint64_t epoch)
{
	if (epoch >= LEASE_EPOCH_MAX)
		return -ERANGE;
	if (f->max_epoch_seen && epoch > f->max_epoch_seen &&
	    epoch - f->max_epoch_seen > LEASE_EPOCH_STEP_MAX)
		return -ERANGE;
	return 0;
}

int lease_grant_clamp(struct lease_grant *g, uint64_t *ttl_ns, const struct ll_limit_cfg *cfg)
{
	uint64_t max_rate = cfg->rate < TB_MAX_RATE ? cfg->rate : TB_MAX_RATE;
	uint64_t max_burst = cfg->burst_s / TB_SCALE;
	int n = 0;

	if (max_burst > TB_MAX_BURST)
		max_burst = TB_MAX_BURST;
	if (g->rate > max_rate) {
		g->rate = max_rate;
		n++;
	}
	if (g->burst > max_burst) {
		g->burst = max_burst;
		n++;
	}
	if (*ttl_ns > LEASE_TTL_MAX_NS) {
		*ttl_ns = LEASE_TTL_MAX_NS;
		n++;
	}
	return n;
}

int lease_fence_see_epoch(struct ll_fence *f, uint64_t epoch, uint64_t incarnation)
{
	if (epoch < f->max_epoch_seen)
		return -ESTALE;
	if (lease_epoch_ok(f, epoch))
		return -ERANGE;
	f->max_epoch_seen = epoch;
	if (incarnation)
		f->incarnation = incarnation;
	return 0;
}

bool lease_fence_forget(struct ll_fence *f, uint32_t id)
{
	bool changed;

	if (id >= LL_MAX_LIMITS)
		return false;
	changed = f->applied_epoch[id] || f->applied_seq[id];
	f->applied_epoch[id] = 0;
	f->applied_seq[id] = 0;
	return changed;
}

static void share_set(struct ll_lease *l, uint64_t rate, uint64_t burst, unsigned int ncpus)
{
	l->rate = rate;
	l->burst_s = burst * TB_SCALE;
	l->fill_ns = tb_fill_ns(l->rate, l->burst_s);
	l->chunk_s = tb_chunk_s(rate, burst, ncpus);
}

void lease_next(const struct ll_lease *old, const struct lease_grant *g, uint64_t now,
		unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out)
{
	bool dead = now >= old->expiry_ns;

	*out = *old;
	out->epoch = g->epoch;
	out->seq = g->seq;
	out->expiry_ns = g->expiry_ns;
	if (!dead && old->rate == g->rate && old->burst_s == g->burst * TB_SCALE)
		return; /* renewal: same share, same generation */
	share_set(out, g->rate, g->burst, ncpus);
	out->gen = (*next_gen)++;
	if (dead && old->on_loss == LL_ON_LOSS_FALLBACK) {
		/* The pool has been spending the fallback share up to now. */
		out->prev_gen = old->fb_gen;
		out->prev_rate = old->fb_rate;
		out->prev_burst_s = old->fb_burst_s;
		out->prev_fill_ns = old->fb_fill_ns;
		out->reload_ns = now;
		/* The next death must not find this fallback period's slices valid. */
		out->fb_gen = (*next_gen)++;
	} else {
		/* Dead and fail-closed/open: no refill for the time it was dead (and
		 * lease_grant_decide empties the pool of a revived lease anyway).
		 */
		out->prev_gen = old->gen;
		out->prev_rate = old->rate;
		out->prev_burst_s = old->burst_s;
		out->prev_fill_ns = old->fill_ns;
		out->reload_ns = dead ? old->expiry_ns : now;
	}
}

int lease_grant_decide(const struct ll_lease *old, const struct ll_fence *f, uint32_t next_gen,
		       uint32_t id, const struct lease_grant *g, uint64_t now, unsigned int ncpus,
		       struct lease_update *u)
{
	int err = lease_fence_check(f, id, g->epoch, g->seq);

	if (!err)
		err = lease_epoch_ok(f, g->epoch);
	if (err)
		return err;
	u->next_gen = next_gen ? next_gen : 1;
	lease_next(old, g, now, ncpus, &u->next_gen, &u->lease);
	/* Revived: the tokens it held when it died are covered by no live share
	 * (the coordinator has since counted that grant dead and may have leased
	 * it elsewhere), so the new share starts empty.
	 */
	u->reset_pool = now >= old->expiry_ns;
	u->fence = *f;
	u->fence.applied_epoch[id] = g->epoch;
	u->fence.applied_seq[id] = g->seq;
	if (g->epoch > u->fence.max_epoch_seen)
		u->fence.max_epoch_seen = g->epoch;
	return 0;
}

void lease_from_policy(const struct ll_lease *old, bool same_limit, const struct ll_limit_cfg *cfg,
		       unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out)
{
	uint64_t fb_burst = cfg->fb_burst_s / TB_SCALE;

	if (same_limit) {
		*out = *old;
	} else {
		memset(out, 0, sizeof(*out));
		out->gen = (*next_gen)++;
	}
	out->on_loss = cfg->on_loss;
	if (!same_limit || out->fb_rate != cfg->fb_rate || out->fb_burst_s != cfg->fb_burst_s) {
		out->fb_rate = cfg->fb_rate;
		out->fb_burst_s = cfg->fb_burst_s;
		out->fb_fill_ns = tb_fill_ns(cfg->fb_rate, cfg->fb_burst_s);
		out->fb_chunk_s = tb_chunk_s(cfg->fb_rate, fb_burst, ncpus);
		out->fb_gen = (*next_gen)++;
	}
}

static bool zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* addr (16 bytes, v4 as ::ffff:a.b.c.d) is a family-`family` address masked
 * as cfg keys it.
 */
static bool addr_ok(const struct ll_limit_cfg *cfg, uint8_t family, const uint32_t *a, bool masked)
{
	if (family == 4)
		return a[0] == 0 && a[1] == 0 && a[2] == htonl(0xffff) &&
		       (!masked || (a[3] & cfg->mask_v4) == a[3]);
	if (family != 6)
		return false;
	for (int i = 0; masked && i < 4; i++)
		if ((a[i] & cfg->mask_v6[i]) != a[i])
			return false;
	return true;
}

int lease_key_check(const struct ll_limit_cfg *cfg, const struct ll_key_id *k)
{
	bool ok = k->pad0 == 0;

	switch (cfg->key_mode) {
	case LL_KEY_SRC_IP:
	case LL_KEY_DST_IP:
		ok = ok && !k->proto && !k->dport && !k->sport && zero(k->addr2, sizeof(k->addr2)) &&
		     addr_ok(cfg, k->family, k->addr, true);
		break;
	case LL_KEY_DST_PORT:
		ok = ok && !k->family && !k->sport && zero(k->addr, sizeof(k->addr)) &&
		     zero(k->addr2, sizeof(k->addr2));
		break;
	case LL_KEY_FLOW:
		ok = ok && addr_ok(cfg, k->family, k->addr, false) &&
		     addr_ok(cfg, k->family, k->addr2, false);
		break;
	default:
		ok = false; /* key: none has no keys */
	}
	return ok ? 0 : -EINVAL;
}

static int key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct ll_key_id)); /* key is each struct's first member */
}

void lease_key_bound(const struct ll_limit_cfg *cfg, uint64_t *rate, uint64_t *burst)
{
	if (cfg->flags & LL_LIM_KEY_CONTRACTS) {
		*rate = TB_MAX_RATE;
		*burst = TB_MAX_BURST;
		return;
	}
	*rate = cfg->rate < TB_MAX_RATE ? cfg->rate : TB_MAX_RATE;
	*burst = cfg->burst_s / TB_SCALE < TB_MAX_BURST ? cfg->burst_s / TB_SCALE : TB_MAX_BURST;
}

int lease_keys_clamp(const struct ll_limit_cfg *cfg, struct lease_key *want, size_t n)
{
	uint64_t max_rate, max_burst;
	int clamped = 0;

	lease_key_bound(cfg, &max_rate, &max_burst);
	for (size_t i = 0; i < n; i++) {
		if (lease_key_check(cfg, &want[i].key))
			return -EINVAL;
		if (want[i].remove)
			continue;
		if (want[i].rate > max_rate || want[i].burst > max_burst)
			clamped++;
		want[i].rate = want[i].rate < max_rate ? want[i].rate : max_rate;
		want[i].burst = want[i].burst < max_burst ? want[i].burst : max_burst;
	}
	sort_n(want, n, sizeof(*want), key_cmp);
	for (size_t i = 1; i < n; i++)
		if (!key_cmp(&want[i - 1], &want[i]))
			return -EINVAL;
	return clamped;
}

void lease_keys_plan(struct lease_key *old, size_t n_old, struct lease_key *want, size_t n_want,
		     uint32_t *next_gen, struct lease_key_plan *plan)
{
	size_t i = 0, j = 0;

	plan->n_put = plan->n_del = 0;
	plan->changed = false;
	sort_n(old, n_old, sizeof(*old), key_cmp);
	sort_n(want, n_want, sizeof(*want), key_cmp);
	/* A merge of two sorted sets: in old only (delete), in want only (put),
	 * in both (put only if the share changed).
	 */
	while (i < n_old || j < n_want) {
		int c = i == n_old ? 1 : j == n_want ? -1 : key_cmp(&old[i], &want[j]);

		if (c < 0) {
			plan->del[plan->n_del++] = old[i++].key;
			continue;
		}
		struct lease_key *w = &want[j++];

		w->v = (struct ll_key_grant){.rate = w->rate, .burst_s = w->burst * TB_SCALE};
		w->v.fill_ns = tb_fill_ns(w->v.rate, w->v.burst_s);
		if (c == 0 && old[i].v.rate == w->v.rate && old[i].v.burst_s == w->v.burst_s &&
		    old[i].v.gen) {
			w->v.gen = old[i++].v.gen;
			continue;
		}
		if (c == 0)
			i++;
		w->v.gen = (*next_gen)++;
		plan->put[plan->n_put++] = *w;
	}
	plan->changed = plan->n_put || plan->n_del;
}

static void key_min(struct lease_key *k, uint64_t rate, uint64_t burst)
{
	k->rate = k->rate < rate ? k->rate : rate;
	k->burst = k->burst < burst ? k->burst : burst;
}

size_t lease_keys_cut(struct lease_key *held, size_t n_held, struct lease_key *named,
		      size_t n_named, uint64_t rate, uint64_t burst, struct lease_key *out)
{
	size_t i = 0, j = 0, n = 0;

	sort_n(held, n_held, sizeof(*held), key_cmp);
	sort_n(named, n_named, sizeof(*named), key_cmp);
	while (i < n_held || j < n_named) {
		int c = i == n_held ? 1 : j == n_named ? -1 : key_cmp(&held[i], &named[j]);
		struct lease_key *k = &out[n++];

		if (c < 0) {
			*k = (struct lease_key){.key = held[i].key, .rate = held[i].rate,
						.burst = held[i].burst};
			key_min(k, rate, burst);
			i++;
			continue;
		}
		*k = (struct lease_key){.key = named[j].key, .rate = named[j].rate,
					.burst = named[j].burst};
		if (c == 0) {
			key_min(k, held[i].rate, held[i].burst);
			i++;
		} else {
			key_min(k, rate, burst);
		}
		j++;
	}
	return n;
}

size_t lease_keys_sets(struct lease_key *ch, size_t n)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (!ch[i].remove)
			ch[m++] = ch[i];
	return m;
}

int lease_keys_base_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t base)
{
	return f->applied_epoch[id] != epoch || f->applied_seq[id] < base ? -ESTALE : 0;
}

bool lease_keys_count(const struct ll_lease *old, bool full, size_t n_set, size_t n_held,
		      size_t *count)
{
	if (full) {
		*count = n_set;
		return true;
	}
	if (old->n_key_grants + n_set < n_held)
		return false;
	*count = old->n_key_grants + n_set - n_held;
	return true;
}

int lease_keys_decide(const struct ll_lease *old, struct lease_key *held, size_t n_held,
		      struct lease_key *want, size_t n_want, size_t count, struct lease_update *u,
		      struct lease_key_plan *plan)
{
	if (count > LL_MAX_LIMIT_KEY_GRANTS)
		return -E2BIG;
	lease_keys_plan(held, n_held, want, n_want, &u->next_gen, plan);
	u->lease.n_key_grants = (uint16_t)count;
	if (plan->changed)
		u->lease.kg_ver = old->kg_ver + 1;
	return 0;
}
