// SPDX-License-Identifier: MIT
/*
 * Capacity accounting of one global limit on the coordinator: weighted
 * max-min targets in exact integer arithmetic, and the ledger of grants that
 * holders may still be spending. Invariant: at every instant, the sum over
 * holders of their largest live grant is at most the capacity, because an
 * increase is only ever carved out of headroom measured against live grants.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"

typedef unsigned __int128 u128;

static uint64_t weight_of(const uint32_t *weight, size_t i)
{
	return weight && weight[i] ? weight[i] : 1;
}

/*
 * The water level c/w: capacity c still to be shared, by the holders whose
 * demand lies strictly above their share of it, of total weight w.
 */
struct level {
	u128 c;
	uint64_t w;
};

/* Holder i is satisfied at this level: demand <= c * w_i / w. Both products
 * fit in 128 bits (64 x 64 and 64 x 32 bits).
 */
static bool satisfied(const struct level *lv, uint64_t demand, uint64_t w_i)
{
	return (u128)demand * lv->w <= lv->c * w_i;
}

/*
 * Share lv->c among the members by weight on top of base (demand for the
 * leftover spread, 0 otherwise): member i gets x_i = base_i + c*w_i/w rounded
 * down, then the c - sum(floors) units left (fewer than the members with a
 * fractional part) go one each to the largest fractional parts, ties to the
 * lower index. So every member gets x_i rounded down or up, never past a
 * demand strictly above x_i, and the shares add up to c exactly. Picking the
 * next-largest remainder by rescanning costs O(n) per unit, O(n^2) in all;
 * n is the number of holders of one limit.
 */
static void spread(const struct level *lv, bool all, size_t n, const uint64_t *demand,
		   const uint32_t *weight, uint64_t *targets)
{
	u128 left = lv->c;
	u128 pf = 0; /* (fraction, index) of the last unit given */
	size_t pi = 0;
	bool first = true;

	for (size_t i = 0; i < n; i++) {
		uint64_t w_i = weight_of(weight, i);

		if (!all && satisfied(lv, demand[i], w_i)) {
			targets[i] = demand[i];
			continue;
		}
		targets[i] = (uint64_t)(lv->c * w_i / lv->w) + (all ? demand[i] : 0);
		left -= lv->c * w_i / lv->w;
	}
	while (left > 0) {
		u128 bf = 0;
		size_t bi = n;

		for (size_t i = 0; i < n; i++) {
			uint64_t w_i = weight_of(weight, i);
			u128 f;

			if (!all && satisfied(lv, demand[i], w_i))
				continue;
			f = lv->c * w_i % lv->w;
			/* Only units after the last one given, in (fraction desc, index asc). */
			if (!first && (f > pf || (f == pf && i <= pi)))
				continue;
			if (bi == n || f > bf) {
				bf = f;
				bi = i;
			}
		}
		if (bi == n || bf == 0)
			break; /* cannot happen: sum of fractions / w == left */
		targets[bi]++;
		left--;
		pf = bf;
		pi = bi;
		first = false;
	}
}

void alloc_maxmin(uint64_t capacity, size_t n, const uint64_t *demand, const uint32_t *weight,
		  uint64_t *targets)
{
	struct level lv = {.c = capacity, .w = 0};
	u128 total = 0;

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		total += demand[i];
		lv.w += weight_of(weight, i);
	}
	if (total <= capacity) {
		/* Everybody gets its demand; nobody's demand caps the leftover. */
		lv.c = capacity - total;
		spread(&lv, true, n, demand, weight, targets);
		return;
	}
	/*
	 * Water-filling: freeze the holders satisfied at the current level, give
	 * what they do not use to the others, repeat until nobody new freezes.
	 * The level only rises, so a holder once frozen stays frozen and the
	 * loop runs at most n + 1 times. Since total > capacity somebody stays
	 * unfrozen (w > 0).
	 */
	for (;;) {
		struct level next = {.c = capacity, .w = 0};

		for (size_t i = 0; i < n; i++) {
			uint64_t w_i = weight_of(weight, i);

			if (satisfied(&lv, demand[i], w_i))
				next.c -= demand[i];
			else
				next.w += w_i;
		}
		if (next.w == lv.w || next.w == 0)
			break;
		lv = next;
	}
	spread(&lv, false, n, demand, weight, targets);
}

void ledger_init(struct ledger *l, uint64_t rate, uint64_t burst)
{
	memset(l, 0, sizeof(*l));
	l->rate = rate;
	l->burst = burst;
	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		l->h[i].next_seq = 1;
}

/* Live from issue through its deadline inclusive, until a later grant is acked. */
static bool grant_live(const struct ledger_holder *h, const struct ledger_grant *g, uint64_t now)
{
	return g->seq >= h->acked_seq && now <= g->deadline_ns;
}

static uint32_t holder_n(const struct ledger_holder *h)
{
	return h->n < LEDGER_MAX_PENDING ? h->n : LEDGER_MAX_PENDING;
}

uint64_t ledger_committed_rate(const struct ledger *l, size_t i, uint64_t now)
{
	const struct ledger_holder *h;
	uint64_t m = 0;

	if (i >= LEDGER_MAX_HOLDERS)
		return 0;
	h = &l->h[i];
	for (uint32_t k = 0; k < holder_n(h); k++)
		if (grant_live(h, &h->g[k], now) && h->g[k].rate > m)
			m = h->g[k].rate;
	return m;
}

uint64_t ledger_committed_burst(const struct ledger *l, size_t i, uint64_t now)
{
	const struct ledger_holder *h;
	uint64_t m = 0;

	if (i >= LEDGER_MAX_HOLDERS)
		return 0;
	h = &l->h[i];
	for (uint32_t k = 0; k < holder_n(h); k++)
		if (grant_live(h, &h->g[k], now) && h->g[k].burst > m)
			m = h->g[k].burst;
	return m;
}

/* Exact sums; 64 holders of 64-bit shares fit in 128 bits. */
static u128 sum_rate(const struct ledger *l, uint64_t now)
{
	u128 s = 0;

	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		s += ledger_committed_rate(l, i, now);
	return s;
}

static u128 sum_burst(const struct ledger *l, uint64_t now)
{
	u128 s = 0;

	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		s += ledger_committed_burst(l, i, now);
	return s;
}

static uint64_t saturate(u128 v)
{
	return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

uint64_t ledger_sum_rate(const struct ledger *l, uint64_t now)
{
	return saturate(sum_rate(l, now));
}

uint64_t ledger_sum_burst(const struct ledger *l, uint64_t now)
{
	return saturate(sum_burst(l, now));
}

/* Compact the ring, keeping the live grants in order. */
static void holder_gc(struct ledger_holder *h, uint64_t now)
{
	uint32_t kept = 0;

	for (uint32_t k = 0; k < holder_n(h); k++)
		if (grant_live(h, &h->g[k], now))
			h->g[kept++] = h->g[k];
	h->n = kept;
}

void ledger_gc(struct ledger *l, uint64_t now)
{
	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		holder_gc(&l->h[i], now);
}

static uint64_t next_seq(const struct ledger_holder *h)
{
	return h->next_seq ? h->next_seq : 1; /* a zeroed ledger starts at 1 too */
}

void ledger_ack(struct ledger *l, size_t i, uint64_t seq, uint64_t now)
{
	struct ledger_holder *h;

	if (i >= LEDGER_MAX_HOLDERS)
		return;
	h = &l->h[i];
	/* An ack of a grant never issued would kill grants still in use. */
	if (seq == 0 || seq >= next_seq(h))
		return;
	if (seq > h->acked_seq)
		h->acked_seq = seq;
	holder_gc(h, now);
}

/* One dimension of a grant: a decrease as is, an increase out of headroom. */
static uint64_t issue_share(uint64_t target, uint64_t committed, u128 sum, uint64_t capacity)
{
	u128 room = sum < capacity ? capacity - sum : 0;

	if (target <= committed)
		return target;
	return (u128)target - committed <= room ? target : saturate(committed + room);
}

bool ledger_issue(struct ledger *l, size_t i, uint64_t target_rate, uint64_t target_burst,
		  uint64_t now, uint64_t live_ns, struct ledger_grant *out)
{
	struct ledger_holder *h;
	struct ledger_grant g;

	if (i >= LEDGER_MAX_HOLDERS)
		return false;
	h = &l->h[i];
	/* Only this holder's dead grants can make room in its ring. */
	holder_gc(h, now);
	if (h->n >= LEDGER_MAX_PENDING)
		return false;
	g.seq = next_seq(h);
	g.rate =
	    issue_share(target_rate, ledger_committed_rate(l, i, now), sum_rate(l, now), l->rate);
	g.burst = issue_share(target_burst, ledger_committed_burst(l, i, now), sum_burst(l, now),
			      l->burst);
	g.deadline_ns = live_ns > UINT64_MAX - now ? UINT64_MAX : now + live_ns;
	h->next_seq = g.seq + 1;
	h->g[h->n++] = g;
	if (out)
		*out = g;
	return true;
}

void ledger_targets(const struct ledger *l, uint64_t *rate, uint64_t *burst)
{
	uint64_t demand[LEDGER_MAX_HOLDERS], share[LEDGER_MAX_HOLDERS];
	uint32_t weight[LEDGER_MAX_HOLDERS];
	size_t idx[LEDGER_MAX_HOLDERS], n = 0;

	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++) {
		rate[i] = 0;
		burst[i] = 0;
		if (!l->h[i].active)
			continue;
		idx[n] = i;
		demand[n] = l->h[i].demand;
		weight[n] = l->h[i].weight;
		n++;
	}
	alloc_maxmin(l->rate, n, demand, weight, share);
	for (size_t k = 0; k < n; k++) {
		rate[idx[k]] = share[k];
		/* floor(B * r / R): sum(r) <= R, so the bursts add up to <= B. */
		burst[idx[k]] = l->rate ? (uint64_t)((u128)l->burst * share[k] / l->rate) : 0;
	}
}

int ledger_check(const struct ledger *l, uint64_t now)
{
	if (sum_rate(l, now) > l->rate || sum_burst(l, now) > l->burst)
		return -ERANGE;
	return 0;
}
