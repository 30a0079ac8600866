// SPDX-License-Identifier: MIT
/*
 * Capacity accounting of one global limit on the coordinator: weighted
 * max-min targets in exact integer arithmetic, and the ledger of grants that
 * holders may still be spending. Invariant: at every instant, the sum over
 * holders of their largest live grant is at most the capacity, because an
 * increase is only ever carved out of headroom measured against live grants.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coord/ledger.h"
#include "lib/util.h"

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
struct frac {
	u128 f;
	size_t i;
};

/* Largest fraction first, ties to the lower index. */
static int frac_cmp(const void *a, const void *b)
{
	const struct frac *x = a, *y = b;

	if (x->f != y->f)
		return x->f > y->f ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

static void spread(const struct level *lv, bool all, size_t n, const uint64_t *demand,
		   const uint32_t *weight, uint64_t *targets)
{
	struct frac *fr = malloc(n * sizeof(*fr));
	u128 left = lv->c;
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t w_i = weight_of(weight, i);

		if (!all && satisfied(lv, demand[i], w_i)) {
			targets[i] = demand[i];
			continue;
		}
		targets[i] = (uint64_t)(lv->c * w_i / lv->w) + (all ? demand[i] : 0);
		left -= lv->c * w_i / lv->w;
		if (fr)
			fr[m++] = (struct frac){.f = lv->c * w_i % lv->w, .i = i};
	}
	if (!fr)
		return; /* out of memory: the remainder stays unassigned (sum < capacity) */
	/* The units left (fewer than the members with a fraction) go one each to
	 * the largest fractional parts: O(n log n).
	 */
	sort_n(fr, m, sizeof(*fr), frac_cmp);
	for (size_t k = 0; k < m && left > 0 && fr[k].f > 0; k++, left--)
		targets[fr[k].i]++;
	free(fr);
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

int ledger_init(struct ledger *l, uint64_t rate, uint64_t burst)
{
	memset(l, 0, sizeof(*l));
	l->rate = rate;
	l->burst = burst;
	l->next_expiry = UINT64_MAX;
	return ledger_reserve(l, LEDGER_MAX_HOLDERS);
}

int ledger_reserve(struct ledger *l, size_t holders)
{
	struct ledger_holder *h;

	if (holders <= l->cap)
		return 0;
	h = realloc(l->h, holders * sizeof(*h));
	if (!h)
		return -ENOMEM;
	memset(h + l->cap, 0, (holders - l->cap) * sizeof(*h));
	for (size_t i = l->cap; i < holders; i++)
		h[i].next_seq = 1;
	l->h = h;
	l->cap = holders;
	return 0;
}

void ledger_free(struct ledger *l)
{
	free(l->h);
	l->h = NULL;
	l->cap = 0;
}

int ledger_copy(struct ledger *dst, const struct ledger *src)
{
	return ledger_copy_n(dst, src, src->cap);
}

int ledger_copy_n(struct ledger *dst, const struct ledger *src, size_t holders)
{
	size_t n = holders < src->cap ? holders : src->cap;

	/* A slot past n that is not empty is copied all the same: the copy
	 * must account for everything the original does.
	 */
	for (size_t i = n; i < src->cap; i++)
		if (src->h[i].n || src->h[i].c_rate || src->h[i].c_burst ||
		    src->h[i].next_seq > 1 || src->h[i].acked_seq)
			n = i + 1;
	*dst = *src;
	dst->h = NULL;
	dst->cap = 0;
	if (ledger_reserve(dst, n))
		return -ENOMEM;
	if (n)
		memcpy(dst->h, src->h, n * sizeof(*src->h));
	return 0;
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

static uint64_t holder_max(const struct ledger_holder *h, uint64_t now, bool burst)
{
	uint64_t m = 0;

	for (uint32_t k = 0; k < holder_n(h); k++) {
		uint64_t v = burst ? h->g[k].burst : h->g[k].rate;

		if (grant_live(h, &h->g[k], now) && v > m)
			m = v;
	}
	return m;
}

uint64_t ledger_committed_rate(const struct ledger *l, size_t i, uint64_t now)
{
	return i < l->cap ? holder_max(&l->h[i], now, false) : 0;
}

uint64_t ledger_committed_burst(const struct ledger *l, size_t i, uint64_t now)
{
	return i < l->cap ? holder_max(&l->h[i], now, true) : 0;
}

/* Exact sums by a walk over every holder; shares are 64-bit, sums 128. */
static u128 sum_walk(const struct ledger *l, uint64_t now, bool burst)
{
	u128 s = 0;

	for (size_t i = 0; i < l->cap; i++)
		s += holder_max(&l->h[i], now, burst);
	return s;
}

static uint64_t saturate(u128 v)
{
	return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

uint64_t ledger_sum_rate(const struct ledger *l, uint64_t now)
{
	return saturate(sum_walk(l, now, false));
}

uint64_t ledger_sum_burst(const struct ledger *l, uint64_t now)
{
	return saturate(sum_walk(l, now, true));
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

/* Drop holder i's dead grants and bring its cached share and the sums up to
 * date; note its earliest deadline.
 */
static void holder_sync(struct ledger *l, size_t i, uint64_t now)
{
	struct ledger_holder *h = &l->h[i];
	uint64_t r, b;

	holder_gc(h, now);
	r = holder_max(h, now, false);
	b = holder_max(h, now, true);
	l->sum_rate = l->sum_rate - h->c_rate + r;
	l->sum_burst = l->sum_burst - h->c_burst + b;
	h->c_rate = r;
	h->c_burst = b;
	for (uint32_t k = 0; k < h->n; k++)
		if (h->g[k].deadline_ns < l->next_expiry)
			l->next_expiry = h->g[k].deadline_ns;
}

bool ledger_holder_idle(const struct ledger *l, size_t i, uint64_t now)
{
	const struct ledger_holder *h = &l->h[i];

	if (i >= l->cap)
		return true;
	for (uint32_t k = 0; k < holder_n(h); k++)
		if (now <= h->g[k].deadline_ns)
			return false; /* may still be spent, acknowledged or not */
	return true;
}

void ledger_holder_reset(struct ledger *l, size_t i)
{
	uint64_t next = 1;

	if (i >= l->cap)
		return;
	/* A holder that comes back in another slot keeps its fence's applied
	 * seq: numbering goes on above every slot's, so none of its new grants
	 * looks like a replay.
	 */
	for (size_t k = 0; k < l->cap; k++)
		if (l->h[k].next_seq > next)
			next = l->h[k].next_seq;
	l->sum_rate -= l->h[i].c_rate;
	l->sum_burst -= l->h[i].c_burst;
	memset(&l->h[i], 0, sizeof(l->h[i]));
	l->h[i].next_seq = next;
}

void ledger_gc(struct ledger *l, uint64_t now)
{
	l->next_expiry = UINT64_MAX;
	for (size_t i = 0; i < l->cap; i++)
		holder_sync(l, i, now);
}

/* Make the cached sums exact at now: a full sync once a deadline has passed. */
static void ledger_fresh(struct ledger *l, uint64_t now)
{
	if (now > l->next_expiry)
		ledger_gc(l, now);
}

bool ledger_over(struct ledger *l, uint64_t now)
{
	ledger_fresh(l, now);
	return l->sum_rate > l->rate || l->sum_burst > l->burst;
}

uint64_t ledger_sum_rate_fast(struct ledger *l, uint64_t now)
{
	ledger_fresh(l, now);
	return l->sum_rate;
}

uint64_t ledger_sum_burst_fast(struct ledger *l, uint64_t now)
{
	ledger_fresh(l, now);
	return l->sum_burst;
}

static uint64_t next_seq(const struct ledger_holder *h)
{
	return h->next_seq ? h->next_seq : 1; /* a zeroed holder starts at 1 too */
}

void ledger_ack(struct ledger *l, size_t i, uint64_t seq, uint64_t now)
{
	struct ledger_holder *h;

	if (i >= l->cap)
		return;
	h = &l->h[i];
	/* An ack of a grant never issued would kill grants still in use. */
	if (seq == 0 || seq >= next_seq(h))
		return;
	if (seq > h->acked_seq)
		h->acked_seq = seq;
	holder_sync(l, i, now);
}

/* One dimension of a grant: a decrease as is, an increase out of headroom. */
static uint64_t issue_share(uint64_t target, uint64_t committed, uint64_t sum, uint64_t capacity)
{
	uint64_t room = sum < capacity ? capacity - sum : 0;

	if (target <= committed)
		return target;
	return target - committed <= room ? target : committed + room;
}

static bool issue(struct ledger *l, size_t i, uint64_t seq, uint64_t target_rate,
		  uint64_t target_burst, bool exact, uint64_t now, uint64_t live_ns,
		  struct ledger_grant *out)
{
	struct ledger_holder *h = &l->h[i];
	struct ledger_grant g;

	/* Every holder is in sync after this: grants die by an ack (which
	 * syncs its holder) or by a deadline, and none has passed unless the
	 * full gc just ran. So the ring holds live grants only.
	 */
	ledger_fresh(l, now);
	if (h->n >= LEDGER_MAX_PENDING)
		return false;
	g.seq = seq;
	g.rate = exact ? target_rate : issue_share(target_rate, h->c_rate, l->sum_rate, l->rate);
	g.burst = exact ? target_burst : issue_share(target_burst, h->c_burst, l->sum_burst, l->burst);
	g.deadline_ns = live_ns > UINT64_MAX - now ? UINT64_MAX : now + live_ns;
	h->next_seq = g.seq + 1;
	h->g[h->n++] = g;
	/* The holder is in sync at now and g is live: its commitment is the
	 * larger of the two (what holder_sync would find, without the walk:
	 * a per-key ledger records every grant of its limit).
	 */
	if (g.rate > h->c_rate) {
		l->sum_rate += g.rate - h->c_rate;
		h->c_rate = g.rate;
	}
	if (g.burst > h->c_burst) {
		l->sum_burst += g.burst - h->c_burst;
		h->c_burst = g.burst;
	}
	if (g.deadline_ns < l->next_expiry)
		l->next_expiry = g.deadline_ns;
	if (out)
		*out = g;
	return true;
}

void ledger_peek(struct ledger *l, size_t i, uint64_t target_rate, uint64_t target_burst,
		 uint64_t now, uint64_t *rate, uint64_t *burst)
{
	*rate = *burst = 0;
	if (i >= l->cap)
		return;
	ledger_fresh(l, now);
	*rate = issue_share(target_rate, l->h[i].c_rate, l->sum_rate, l->rate);
	*burst = issue_share(target_burst, l->h[i].c_burst, l->sum_burst, l->burst);
}

void ledger_room_others(struct ledger *l, size_t i, uint64_t now, uint64_t *rate,
			uint64_t *burst)
{
	uint64_t or, ob;

	*rate = *burst = 0;
	if (i >= l->cap)
		return;
	ledger_fresh(l, now);
	or = l->sum_rate - l->h[i].c_rate;
	ob = l->sum_burst - l->h[i].c_burst;
	*rate = or < l->rate ? l->rate - or : 0;
	*burst = ob < l->burst ? l->burst - ob : 0;
}

void ledger_holder_clear(struct ledger *l, size_t i)
{
	struct ledger_holder *h;

	if (i >= l->cap)
		return;
	h = &l->h[i];
	l->sum_rate -= h->c_rate;
	l->sum_burst -= h->c_burst;
	h->n = 0;
	h->c_rate = h->c_burst = 0;
}

bool ledger_issue(struct ledger *l, size_t i, uint64_t target_rate, uint64_t target_burst,
		  uint64_t now, uint64_t live_ns, struct ledger_grant *out)
{
	if (i >= l->cap)
		return false;
	return issue(l, i, next_seq(&l->h[i]), target_rate, target_burst, false, now, live_ns, out);
}

bool ledger_issue_seq(struct ledger *l, size_t i, uint64_t seq, uint64_t target_rate,
		      uint64_t target_burst, uint64_t now, uint64_t live_ns,
		      struct ledger_grant *out)
{
	/* Numbering only goes up: a seq at or below one issued before would
	 * make an ack of the older grant kill the newer one.
	 */
	if (i >= l->cap || seq == 0 || seq < next_seq(&l->h[i]))
		return false;
	return issue(l, i, seq, target_rate, target_burst, false, now, live_ns, out);
}

bool ledger_record_seq(struct ledger *l, size_t i, uint64_t seq, uint64_t rate, uint64_t burst,
		       uint64_t now, uint64_t live_ns, struct ledger_grant *out)
{
	if (i >= l->cap || seq == 0 || seq < next_seq(&l->h[i]))
		return false;
	return issue(l, i, seq, rate, burst, true, now, live_ns, out);
}

bool ledger_holder_within(const struct ledger *l, size_t i, const struct ledger *ref, uint64_t now)
{
	const struct ledger_holder *h, *r;

	if (i >= l->cap)
		return true;
	h = &l->h[i];
	if (i >= ref->cap)
		return holder_max(h, now, false) == 0 && holder_max(h, now, true) == 0;
	r = &ref->h[i];
	for (uint32_t k = 0; k < holder_n(h); k++) {
		const struct ledger_grant *g = &h->g[k];
		bool covered = false;

		if (!grant_live(h, g, now))
			continue;
		for (uint32_t j = 0; j < holder_n(r) && !covered; j++)
			covered = r->g[j].seq == g->seq && grant_live(r, &r->g[j], now) &&
				  r->g[j].deadline_ns >= g->deadline_ns &&
				  r->g[j].rate >= g->rate && r->g[j].burst >= g->burst;
		if (!covered)
			return false;
	}
	return true;
}

int ledger_targets(const struct ledger *l, uint64_t *rate, uint64_t *burst)
{
	uint64_t *demand = malloc(l->cap * sizeof(*demand));
	uint64_t *share = malloc(l->cap * sizeof(*share));
	uint32_t *weight = malloc(l->cap * sizeof(*weight));
	size_t *idx = malloc(l->cap * sizeof(*idx)), n = 0;
	int err = demand && share && weight && idx ? 0 : -ENOMEM;

	for (size_t i = 0; i < l->cap; i++) {
		rate[i] = 0;
		burst[i] = 0;
		if (err || !l->h[i].active)
			continue;
		idx[n] = i;
		demand[n] = l->h[i].demand;
		weight[n] = l->h[i].weight;
		n++;
	}
	if (!err)
		alloc_maxmin(l->rate, n, demand, weight, share);
	/* Burst: half of B evenly among the holders asking, the rest in
	 * proportion to the rate share (floored). A holder with a small rate
	 * share still holds some burst: with burst in proportion alone, a
	 * gateway at 2.5/s of R 100, B 20 held floor(0.5) = 0 tokens and
	 * refused every packet of every key. sum <= n * base + rest = B.
	 */
	uint64_t base = n ? l->burst / (2 * n) : 0, rest = l->burst - base * n;

	for (size_t k = 0; k < n; k++) {
		rate[idx[k]] = share[k];
		burst[idx[k]] =
		    l->rate ? base + (uint64_t)((u128)rest * share[k] / l->rate) : 0;
	}
	free(demand);
	free(share);
	free(weight);
	free(idx);
	return err;
}

int ledger_check(const struct ledger *l, uint64_t now)
{
	if (sum_walk(l, now, false) > l->rate || sum_walk(l, now, true) > l->burst)
		return -ERANGE;
	return 0;
}
