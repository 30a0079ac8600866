// SPDX-License-Identifier: MIT
/*
 * Lease arithmetic and the lease value the agent writes (see lease.h).
 * Invariant: a generation number is never reused, so a pool or slice of one
 * share is never mistaken for another's.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "lease.h"
#include "policy.h"
#include "tb_math.h"

#define PPM 1000000ull

uint64_t lease_expiry(uint64_t t_send_ns, uint64_t ttl_ns)
{
	uint64_t span = ttl_ns - ttl_ns / PPM * LEASE_RHO_PPM;

	return span > LEASE_DELTA_NS ? t_send_ns + span - LEASE_DELTA_NS : t_send_ns;
}

uint64_t lease_deadline(uint64_t t_issue_ns, uint64_t ttl_ns)
{
	return t_issue_ns + ttl_ns + (ttl_ns + PPM - 1) / PPM * LEASE_RHO_PPM + LEASE_DELTA_NS;
}

int lease_fence_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t seq)
{
	if (id >= LL_MAX_LIMITS || epoch < f->max_epoch_seen)
		return -ESTALE;
	if (epoch < f->applied_epoch[id] ||
	    (epoch == f->applied_epoch[id] && seq <= f->applied_seq[id]))
		return -ESTALE;
	return 0;
}

static void share_set(struct ll_lease *l, uint64_t rate, uint64_t burst, unsigned int ncpus)
{
	l->rate = rate;
	l->burst_s = burst * TB_SCALE;
	l->fill_ns = tb_fill_ns(l->rate, l->burst_s);
	l->chunk_s = policy_chunk_s(rate, burst, ncpus);
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
		 * dp_lease_apply empties the pool of a revived lease anyway).
		 */
		out->prev_gen = old->gen;
		out->prev_rate = old->rate;
		out->prev_burst_s = old->burst_s;
		out->prev_fill_ns = old->fill_ns;
		out->reload_ns = dead ? old->expiry_ns : now;
	}
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
		out->fb_chunk_s = policy_chunk_s(cfg->fb_rate, fb_burst, ncpus);
		out->fb_gen = (*next_gen)++;
	}
}
