// SPDX-License-Identifier: MIT
/*
 * Host tests of user/coord/ledger.c: max-min targets against hand-worked examples
 * and a brute-force reference, and the grant ledger through scenarios and
 * long randomized runs (reordered, duplicated and lost grants and acks,
 * expiries) that check sum(committed) <= capacity after every event.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "coord/ledger.h"
#include "unit/rnd.h"

typedef unsigned __int128 u128;

/* True with probability pct/100. */
static bool chance(uint64_t *s, unsigned pct)
{
	return rnd(s) % 100 < pct;
}

static uint64_t w_of(const uint32_t *w, size_t i)
{
	return w && w[i] ? w[i] : 1;
}

/* ---- alloc_maxmin ---------------------------------------------------- */

#define REF_MAX_N 10 /* the reference tries all 2^n unsatisfied sets */

/*
 * Brute-force reference: the exact max-min allocation is x_i = d_i for the
 * satisfied holders and x_i = c*w_i/W for the set S of unsatisfied ones, with
 * c = capacity - sum of the satisfied demands, W = weight of S; S is the one
 * set for which every outsider's demand is at or below the level c/W and
 * every member's strictly above. Try every S, require exactly one to fit,
 * then round as documented (down, then one unit each to the largest
 * fractional parts, ties to the lower index).
 */
static void ref_maxmin(uint64_t cap, size_t n, const uint64_t *d, const uint32_t *w, uint64_t *t)
{
	u128 total = 0, c = 0, frac[REF_MAX_N], left;
	uint64_t W = 0;
	bool member[REF_MAX_N];
	size_t order[REF_MAX_N];
	int found = 0;

	assert_true(n <= REF_MAX_N);
	for (size_t i = 0; i < n; i++) {
		total += d[i];
		W += w_of(w, i);
	}
	if (n == 0)
		return;
	if (total <= cap) {
		c = cap - total;
		for (size_t i = 0; i < n; i++) {
			member[i] = true;
			t[i] = d[i];
		}
	} else {
		uint64_t found_mask = 0, found_w = 0;
		u128 found_c = 0;

		for (uint64_t mask = 1; mask < (1ULL << n); mask++) {
			u128 cs = cap, out = 0;
			uint64_t ws = 0;
			bool ok = true;

			for (size_t i = 0; i < n; i++) {
				if (mask & (1ULL << i))
					ws += w_of(w, i);
				else
					out += d[i];
			}
			if (out > cs)
				continue;
			cs -= out;
			for (size_t i = 0; i < n && ok; i++) {
				bool in = mask & (1ULL << i);
				u128 lhs = (u128)d[i] * ws, rhs = cs * w_of(w, i);

				ok = in ? lhs > rhs : lhs <= rhs;
			}
			if (!ok)
				continue;
			found++;
			found_mask = mask;
			found_w = ws;
			found_c = cs;
		}
		assert_int_equal(found, 1);
		c = found_c;
		W = found_w;
		for (size_t i = 0; i < n; i++) {
			member[i] = found_mask & (1ULL << i);
			t[i] = member[i] ? 0 : d[i];
		}
	}
	left = c;
	for (size_t i = 0; i < n; i++) {
		order[i] = i;
		frac[i] = member[i] ? c * w_of(w, i) % W : 0;
		if (member[i]) {
			t[i] += (uint64_t)(c * w_of(w, i) / W);
			left -= c * w_of(w, i) / W;
		}
	}
	/* Stable insertion sort by fraction, largest first. */
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && frac[order[k]] > frac[order[k - 1]]; k--) {
			size_t x = order[k];

			order[k] = order[k - 1];
			order[k - 1] = x;
		}
	for (size_t k = 0; left > 0; k++, left--) {
		assert_true(k < n && frac[order[k]] > 0);
		t[order[k]]++;
	}
}

/*
 * Properties that hold at any size: the targets add up to the capacity; when
 * demand exceeds capacity nobody gets more than it asked for and no single
 * unit moved from j to an unsatisfied i would leave i at or below j
 * (weighted), i.e. i can only gain by taking from someone who then ends up
 * poorer than i; with capacity left over everybody gets its demand plus its
 * weighted part of the leftover, rounded down or up.
 */
static void check_maxmin(uint64_t cap, size_t n, const uint64_t *d, const uint32_t *w,
			 const uint64_t *t)
{
	u128 total = 0, sum = 0;
	uint64_t W = 0;

	for (size_t i = 0; i < n; i++) {
		total += d[i];
		sum += t[i];
		W += w_of(w, i);
	}
	if (n == 0)
		return;
	assert_true(sum == cap);
	if (total <= cap) {
		u128 left = cap - total;

		for (size_t i = 0; i < n; i++) {
			u128 extra = left * w_of(w, i) / W;
			bool exact = left * w_of(w, i) % W == 0;

			assert_true(t[i] >= d[i]);
			assert_true(t[i] - d[i] == extra || (!exact && t[i] - d[i] == extra + 1));
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		assert_true(t[i] <= d[i]);
	for (size_t i = 0; i < n; i++) {
		if (t[i] >= d[i])
			continue;
		for (size_t j = 0; j < n; j++) {
			if (j == i || t[j] == 0)
				continue;
			/* (t_j - 1) / w_j < (t_i + 1) / w_i */
			if (!((u128)(t[j] - 1) * w_of(w, i) < ((u128)t[i] + 1) * w_of(w, j)))
				fail_msg(
				    "holder %zu (%llu of %llu, w %llu) could take a unit from %zu "
				    "(%llu, w %llu)",
				    i, (unsigned long long)t[i], (unsigned long long)d[i],
				    (unsigned long long)w_of(w, i), j, (unsigned long long)t[j],
				    (unsigned long long)w_of(w, j));
		}
	}
}

static void expect_maxmin(uint64_t cap, size_t n, const uint64_t *d, const uint32_t *w,
			  const uint64_t *want)
{
	uint64_t t[64], ref[REF_MAX_N];

	alloc_maxmin(cap, n, d, w, t);
	for (size_t i = 0; i < n; i++)
		if (t[i] != want[i])
			fail_msg("target %zu: got %llu, want %llu", i, (unsigned long long)t[i],
				 (unsigned long long)want[i]);
	check_maxmin(cap, n, d, w, t);
	if (n <= REF_MAX_N) {
		ref_maxmin(cap, n, d, w, ref);
		assert_memory_equal(t, ref, n * sizeof(t[0]));
	}
}

static void test_maxmin_equal_weights(void **state)
{
	(void)state;
	expect_maxmin(90, 3, (uint64_t[]){100, 100, 100}, (uint32_t[]){1, 1, 1},
		      (uint64_t[]){30, 30, 30});
	/* 100/3: one unit left, equal fractions, so the lowest index gets it. */
	expect_maxmin(100, 3, (uint64_t[]){100, 100, 100}, NULL, (uint64_t[]){34, 33, 33});
	expect_maxmin(2, 3, (uint64_t[]){5, 5, 5}, NULL, (uint64_t[]){1, 1, 0});
	expect_maxmin(7, 1, (uint64_t[]){100}, NULL, (uint64_t[]){7});
}

static void test_maxmin_one_small_demand(void **state)
{
	(void)state;
	expect_maxmin(90, 3, (uint64_t[]){10, 100, 100}, NULL, (uint64_t[]){10, 40, 40});
	/* Exactly at the fair share counts as satisfied. */
	expect_maxmin(90, 3, (uint64_t[]){30, 100, 100}, NULL, (uint64_t[]){30, 30, 30});
	/* Freezing one raises the level enough to freeze the next. */
	expect_maxmin(100, 4, (uint64_t[]){10, 28, 100, 100}, NULL, (uint64_t[]){10, 28, 31, 31});
}

static void test_maxmin_leftover_spread(void **state)
{
	(void)state;
	/* Leftover 40 over 3: 13 each, the remaining unit to holder 0. */
	expect_maxmin(100, 3, (uint64_t[]){10, 20, 30}, NULL, (uint64_t[]){24, 33, 43});
	/* Leftover 40 by weight 1:3. */
	expect_maxmin(100, 2, (uint64_t[]){10, 50}, (uint32_t[]){1, 3}, (uint64_t[]){20, 80});
	/* Demand equal to capacity: nothing left over. */
	expect_maxmin(60, 3, (uint64_t[]){10, 20, 30}, NULL, (uint64_t[]){10, 20, 30});
}

static void test_maxmin_weights(void **state)
{
	(void)state;
	expect_maxmin(60, 3, (uint64_t[]){1000, 1000, 1000}, (uint32_t[]){1, 2, 3},
		      (uint64_t[]){10, 20, 30});
	/* 61: exact shares 10 1/6, 20 2/6, 30 3/6; the largest fraction gets the unit. */
	expect_maxmin(61, 3, (uint64_t[]){1000, 1000, 1000}, (uint32_t[]){1, 2, 3},
		      (uint64_t[]){10, 20, 31});
	/* 65: fractions 5/6, 4/6, 3/6 with 2 units left. */
	expect_maxmin(65, 3, (uint64_t[]){1000, 1000, 1000}, (uint32_t[]){1, 2, 3},
		      (uint64_t[]){11, 22, 32});
	/* Weight 1 holder needs 5 < 10: the rest is split 2:3. */
	expect_maxmin(60, 3, (uint64_t[]){5, 1000, 1000}, (uint32_t[]){1, 2, 3},
		      (uint64_t[]){5, 22, 33});
	/* Weight 0 is weight 1. */
	expect_maxmin(10, 2, (uint64_t[]){100, 100}, (uint32_t[]){0, 1}, (uint64_t[]){5, 5});
}

static void test_maxmin_zero_demand(void **state)
{
	(void)state;
	expect_maxmin(100, 4, (uint64_t[]){0, 200, 0, 200}, NULL, (uint64_t[]){0, 50, 0, 50});
	/* Nobody wants anything: all of it is spread by weight. */
	expect_maxmin(100, 2, (uint64_t[]){0, 0}, (uint32_t[]){1, 3}, (uint64_t[]){25, 75});
}

static void test_maxmin_zero_capacity(void **state)
{
	(void)state;
	expect_maxmin(0, 3, (uint64_t[]){5, 0, 7}, (uint32_t[]){1, 2, 3}, (uint64_t[]){0, 0, 0});
	expect_maxmin(0, 2, (uint64_t[]){0, 0}, NULL, (uint64_t[]){0, 0});
	/* n == 0 writes nothing. */
	alloc_maxmin(100, 0, NULL, NULL, NULL);
}

static void test_maxmin_huge(void **state)
{
	const uint64_t cap = 100000000000ULL; /* 1e11 */
	uint64_t t[3];

	(void)state;
	/* cap * w and d * W are ~1e17 and ~2e17: fine in 64 bits, but the next
	 * cases are not.
	 */
	expect_maxmin(cap, 3, (uint64_t[]){cap, cap, cap}, (uint32_t[]){1000000, 999999, 1},
		      (uint64_t[]){50000000000ULL, 49999950000ULL, 50000ULL});
	expect_maxmin(cap, 3, (uint64_t[]){cap - 1, 7, cap}, (uint32_t[]){1000000, 1000000, 1},
		      (uint64_t[]){99999899993ULL, 7, 100000ULL});
	/* Full 64-bit capacity, demands and 32-bit weights. */
	expect_maxmin(
	    UINT64_MAX, 3, (uint64_t[]){UINT64_MAX, UINT64_MAX, UINT64_MAX},
	    (uint32_t[]){UINT32_MAX, UINT32_MAX, UINT32_MAX},
	    (uint64_t[]){6148914691236517205ULL, 6148914691236517205ULL, 6148914691236517205ULL});
	alloc_maxmin(UINT64_MAX - 1, 3, (uint64_t[]){UINT64_MAX, 1, UINT64_MAX},
		     (uint32_t[]){UINT32_MAX, 1, UINT32_MAX - 1}, t);
	check_maxmin(UINT64_MAX - 1, 3, (uint64_t[]){UINT64_MAX, 1, UINT64_MAX},
		     (uint32_t[]){UINT32_MAX, 1, UINT32_MAX - 1}, t);
	/* Demands summing past 2^64. */
	expect_maxmin(cap, 2, (uint64_t[]){UINT64_MAX, UINT64_MAX}, NULL,
		      (uint64_t[]){cap / 2, cap / 2});
}

/* Small cases against the brute-force reference, exhaustively for n <= 3. */
static void test_maxmin_bruteforce_small(void **state)
{
	uint64_t d[REF_MAX_N], t[REF_MAX_N], ref[REF_MAX_N], seed = 7;
	uint32_t w[REF_MAX_N];

	(void)state;
	for (uint64_t cap = 0; cap <= 12; cap++)
		for (uint64_t code = 0; code < 6 * 6 * 6 * 3 * 3 * 3; code++) {
			uint64_t c = code;

			for (size_t i = 0; i < 3; i++, c /= 6)
				d[i] = c % 6;
			for (size_t i = 0; i < 3; i++, c /= 3)
				w[i] = (uint32_t)(c % 3) + 1;
			alloc_maxmin(cap, 3, d, w, t);
			check_maxmin(cap, 3, d, w, t);
			ref_maxmin(cap, 3, d, w, ref);
			assert_memory_equal(t, ref, sizeof(t[0]) * 3);
		}
	for (int round = 0; round < 20000; round++) {
		size_t n = rnd_in(&seed, 1, 6);
		uint64_t cap = rnd_in(&seed, 0, 40);

		for (size_t i = 0; i < n; i++) {
			d[i] = rnd_in(&seed, 0, 15);
			w[i] = (uint32_t)rnd_in(&seed, 0, 5);
		}
		alloc_maxmin(cap, n, d, w, t);
		check_maxmin(cap, n, d, w, t);
		ref_maxmin(cap, n, d, w, ref);
		assert_memory_equal(t, ref, sizeof(t[0]) * n);
	}
}

/* Many random cases at every scale: the sum is exactly the capacity (never
 * more), the properties hold, the reference agrees where it is affordable,
 * and the result is deterministic.
 */
static void test_maxmin_random(void **state)
{
	uint64_t d[64], t[64], t2[64], ref[REF_MAX_N], seed = 12345;
	uint32_t w[64];

	(void)state;
	for (int round = 0; round < 20000; round++) {
		size_t n = chance(&seed, 50) ? rnd_in(&seed, 1, REF_MAX_N) : rnd_in(&seed, 1, 64);
		int scale = (int)rnd_in(&seed, 0, 2);
		uint64_t cap = scale == 0   ? rnd_in(&seed, 0, 1000)
			       : scale == 1 ? rnd_in(&seed, 0, 100000000000ULL)
					    : rnd(&seed);

		for (size_t i = 0; i < n; i++) {
			int kind = (int)rnd_in(&seed, 0, 4);

			d[i] = kind == 0   ? 0
			       : kind == 1 ? rnd_in(&seed, 0, cap / n + 1)
			       : kind == 2 ? rnd_in(&seed, 0, cap)
			       : kind == 3 ? rnd(&seed)
					   : rnd_in(&seed, 0, 2 * (cap / n) + 2);
			w[i] = chance(&seed, 10)   ? 0
			       : chance(&seed, 10) ? UINT32_MAX - (uint32_t)rnd_in(&seed, 0, 3)
						   : (uint32_t)rnd_in(&seed, 1, 1000000);
		}
		alloc_maxmin(cap, n, d, w, t);
		check_maxmin(cap, n, d, w, t);
		alloc_maxmin(cap, n, d, w, t2);
		assert_memory_equal(t, t2, n * sizeof(t[0]));
		if (n <= REF_MAX_N) {
			ref_maxmin(cap, n, d, w, ref);
			assert_memory_equal(t, ref, n * sizeof(t[0]));
		}
	}
}

/* ---- ledger scenarios ------------------------------------------------ */

#define LIVE 1000 /* ns a grant counts after issue, in the scenarios */

static struct ledger_grant issue(struct ledger *l, size_t i, uint64_t rate, uint64_t burst,
				 uint64_t now)
{
	struct ledger_grant g;

	assert_true(ledger_issue(l, i, rate, burst, now, LIVE, &g));
	assert_int_equal(ledger_check(l, now), 0);
	return g;
}

/* A holder's slot is free only once none of its grants can be spent; freeing
 * it gives its share back to the sums, and the next grant in that slot is
 * numbered above every slot's (a holder that returns elsewhere sees no
 * replay).
 */
static void test_ledger_holder_reset(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	ledger_init(&l, 100, 1000);
	for (int k = 0; k < 5; k++)
		issue(&l, 1, 10, 100, 0);
	g = issue(&l, 0, 60, 600, 0);
	assert_false(ledger_holder_idle(&l, 0, 0));
	assert_false(ledger_holder_idle(&l, 0, g.deadline_ns)); /* live up to and at it */
	assert_true(ledger_holder_idle(&l, 0, g.deadline_ns + 1));
	assert_int_equal(ledger_sum_rate_fast(&l, 0), 70);
	ledger_holder_reset(&l, 0);
	assert_int_equal(ledger_sum_rate_fast(&l, 0), 10);
	assert_int_equal(ledger_check(&l, 0), 0);
	g = issue(&l, 0, 5, 50, 0);
	assert_true(g.seq >= 6); /* above holder 1's five grants */
	ledger_free(&l);
}

/* A 60 -> 20 and B 40 -> 80 on R = 100: B grows only once A's cut took effect. */
static void setup_a60_b40(struct ledger *l)
{
	struct ledger_grant g;

	ledger_init(l, 100, 1000);
	g = issue(l, 0, 60, 600, 0);
	assert_int_equal(g.seq, 1);
	assert_int_equal(g.rate, 60);
	assert_int_equal(g.deadline_ns, LIVE);
	ledger_ack(l, 0, g.seq, 0);
	g = issue(l, 1, 40, 400, 0);
	assert_int_equal(g.rate, 40);
	ledger_ack(l, 1, g.seq, 0);
	assert_int_equal(ledger_sum_rate(l, 0), 100);

	g = issue(l, 0, 20, 200, 10); /* decrease: issued as is ... */
	assert_int_equal(g.seq, 2);
	assert_int_equal(g.rate, 20);
	assert_int_equal(g.burst, 200);
	assert_int_equal(ledger_committed_rate(l, 0, 10), 60); /* ... but 60 still counts */
	assert_int_equal(ledger_committed_burst(l, 0, 10), 600);

	g = issue(l, 1, 80, 800, 10); /* no headroom: B keeps what it has */
	assert_int_equal(g.rate, 40);
	assert_int_equal(g.burst, 400);
	assert_int_equal(ledger_sum_rate(l, 10), 100);
	assert_int_equal(ledger_sum_burst(l, 10), 1000);
}

static void test_ledger_decrease_then_increase_ack(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	setup_a60_b40(&l);
	ledger_ack(&l, 0, 2, 20); /* A applied 20: its 60 dies */
	assert_int_equal(ledger_committed_rate(&l, 0, 20), 20);
	assert_int_equal(ledger_committed_burst(&l, 0, 20), 200);
	assert_int_equal(ledger_sum_rate(&l, 20), 60);
	g = issue(&l, 1, 80, 800, 20);
	assert_int_equal(g.rate, 80);
	assert_int_equal(g.burst, 800);
	assert_int_equal(ledger_sum_rate(&l, 20), 100);
	assert_int_equal(ledger_sum_burst(&l, 20), 1000);
	/* A cannot grow back while B holds 80. */
	g = issue(&l, 0, 60, 600, 30);
	assert_int_equal(g.rate, 20);
	assert_int_equal(g.burst, 200);
	ledger_free(&l);
}

static void test_ledger_decrease_then_increase_expiry(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	setup_a60_b40(&l);
	/* A never acks. Its 60 (deadline LIVE) counts through now == deadline. */
	g = issue(&l, 1, 80, 800, LIVE);
	assert_int_equal(g.rate, 40);
	assert_int_equal(ledger_committed_rate(&l, 0, LIVE), 60);
	/* One ns later it is dead; A's unacked 20 (deadline 10 + LIVE) still counts. */
	assert_int_equal(ledger_committed_rate(&l, 0, LIVE + 1), 20);
	g = issue(&l, 1, 80, 800, LIVE + 1);
	assert_int_equal(g.rate, 80);
	assert_int_equal(g.burst, 800);
	assert_int_equal(ledger_sum_rate(&l, LIVE + 1), 100);
	/* After everything expired nothing is committed. */
	assert_int_equal(ledger_sum_rate(&l, 3 * LIVE), 0);
	assert_int_equal(ledger_sum_burst(&l, 3 * LIVE), 0);
	ledger_free(&l);
}

/* An increase gets exactly the headroom, rate and burst each on their own. */
static void test_ledger_partial_headroom(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	ledger_init(&l, 100, 1000);
	g = issue(&l, 0, 70, 300, 0);
	ledger_ack(&l, 0, g.seq, 0);
	g = issue(&l, 1, 50, 900, 0);
	assert_int_equal(g.rate, 30);
	assert_int_equal(g.burst, 700);
	/* Rate down, burst up on the same grant. */
	g = issue(&l, 0, 10, 500, 1);
	assert_int_equal(g.rate, 10);
	assert_int_equal(g.burst, 300); /* no burst headroom left: kept at committed */
	assert_int_equal(ledger_committed_rate(&l, 0, 1), 70);
	/* Asking for less than committed but more than the last grant: as is. */
	g = issue(&l, 0, 40, 200, 2);
	assert_int_equal(g.rate, 40);
	assert_int_equal(g.burst, 200);
	assert_int_equal(ledger_committed_rate(&l, 0, 2), 70);
	ledger_free(&l);
}

static void test_ledger_ack_order(void **state)
{
	struct ledger l, before;
	struct ledger_holder before_h;

	(void)state;
	ledger_init(&l, 100, 1000);
	issue(&l, 0, 50, 500, 0);
	issue(&l, 0, 30, 300, 0);
	issue(&l, 0, 10, 100, 0);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 50);
	ledger_ack(&l, 0, 2, 0);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 30);
	assert_int_equal(ledger_committed_burst(&l, 0, 0), 300);
	ledger_ack(&l, 0, 3, 0);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 10);
	assert_int_equal(l.h[0].acked_seq, 3);
	/* A late ack of an older grant does not bring it back. */
	ledger_ack(&l, 0, 2, 0);
	ledger_ack(&l, 0, 1, 0);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 10);
	assert_int_equal(ledger_committed_burst(&l, 0, 0), 100);
	assert_int_equal(l.h[0].acked_seq, 3);
	/* Re-acking, and acking what was never issued, change nothing. */
	memcpy(&before, &l, sizeof(l));
	memcpy(&before_h, &l.h[0], sizeof(before_h));
	ledger_ack(&l, 0, 3, 0);
	ledger_ack(&l, 0, 3, 0);
	ledger_ack(&l, 0, 4, 0);
	ledger_ack(&l, 0, UINT64_MAX, 0);
	ledger_ack(&l, 0, 0, 0);
	ledger_ack(&l, LEDGER_MAX_HOLDERS, 1, 0);
	assert_memory_equal(&before, &l, sizeof(l));
	assert_memory_equal(&before_h, &l.h[0], sizeof(before_h));
	/* The acked grant stays until its deadline. */
	assert_int_equal(ledger_committed_rate(&l, 0, LIVE), 10);
	assert_int_equal(ledger_committed_rate(&l, 0, LIVE + 1), 0);
	ledger_free(&l);
}

/* Later unacked grants stay live after an ack of an earlier one. */
static void test_ledger_ack_keeps_later(void **state)
{
	struct ledger l;

	(void)state;
	ledger_init(&l, 100, 1000);
	issue(&l, 0, 10, 100, 0);
	issue(&l, 0, 40, 400, 0);
	issue(&l, 0, 20, 200, 0);
	ledger_ack(&l, 0, 1, 0);
	assert_int_equal(l.h[0].n, 3);
	ledger_ack(&l, 0, 2, 0);
	assert_int_equal(l.h[0].n, 2);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 40);
	ledger_ack(&l, 0, 3, 0);
	assert_int_equal(l.h[0].n, 1);
	assert_int_equal(ledger_committed_rate(&l, 0, 0), 20);
	ledger_free(&l);
}

static void test_ledger_ring_full(void **state)
{
	struct ledger l;
	struct ledger_grant g = {0}, before;

	(void)state;
	ledger_init(&l, 100, 1000);
	for (uint64_t k = 1; k <= LEDGER_MAX_PENDING; k++) {
		g = issue(&l, 0, k, k, k);
		assert_int_equal(g.seq, k);
	}
	before = g;
	assert_false(ledger_issue(&l, 0, 1, 1, 100, LIVE, &g));
	assert_memory_equal(&g, &before, sizeof(g)); /* *out untouched */
	assert_int_equal(l.h[0].next_seq, LEDGER_MAX_PENDING + 1);
	assert_int_equal(l.h[0].n, LEDGER_MAX_PENDING);
	/* Another holder is not affected. */
	issue(&l, 1, 5, 5, 100);
	/* An ack of the newest frees the ring. */
	ledger_ack(&l, 0, LEDGER_MAX_PENDING, 100);
	assert_int_equal(l.h[0].n, 1);
	g = issue(&l, 0, 3, 3, 100);
	assert_int_equal(g.seq, LEDGER_MAX_PENDING + 1);
	/* Fill again (the older grants have died by then); expiry frees the ring
	 * too, but only once the deadlines have passed.
	 */
	issue(&l, 0, 3, 3, 2000);
	assert_int_equal(l.h[0].n, 1);
	while (l.h[0].n < LEDGER_MAX_PENDING)
		issue(&l, 0, 3, 3, 2000);
	assert_false(ledger_issue(&l, 0, 3, 3, 2000 + LIVE, LIVE, &g));
	assert_true(ledger_issue(&l, 0, 3, 3, 2000 + LIVE + 1, LIVE, &g));
	assert_int_equal(l.h[0].n, 1);
	assert_int_equal(ledger_check(&l, 2000 + LIVE + 1), 0);
	ledger_free(&l);
}

static void test_ledger_gc(void **state)
{
	struct ledger l;

	(void)state;
	ledger_init(&l, 100, 1000);
	issue(&l, 0, 10, 10, 0);
	issue(&l, 0, 20, 20, 500);
	issue(&l, 1, 30, 30, 0);
	ledger_gc(&l, LIVE);
	assert_int_equal(l.h[0].n, 2);
	assert_int_equal(l.h[1].n, 1);
	ledger_gc(&l, LIVE + 1);
	assert_int_equal(l.h[0].n, 1);
	assert_int_equal(l.h[0].g[0].seq, 2);
	assert_int_equal(l.h[1].n, 0);
	assert_int_equal(ledger_sum_rate(&l, LIVE + 1), 20);
	ledger_free(&l);
}

/* A fresh ledger: seqs start at 1, nothing to ack yet. */
static void test_ledger_zeroed(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	assert_int_equal(ledger_init(&l, 10, 10), 0);
	ledger_ack(&l, 0, 1, 0); /* nothing issued yet: ignored */
	assert_int_equal(l.h[0].acked_seq, 0);
	g = issue(&l, 0, 10, 10, 0);
	assert_int_equal(g.seq, 1);
	assert_int_equal(l.h[0].next_seq, 2);
	/* Deadlines saturate instead of wrapping. */
	assert_true(ledger_issue(&l, 1, 0, 0, UINT64_MAX - 5, LIVE, &g));
	assert_true(g.deadline_ns == UINT64_MAX);
	ledger_free(&l);
}

static void test_ledger_check_detects(void **state)
{
	struct ledger l;
	struct ledger_grant g;

	(void)state;
	ledger_init(&l, 100, 1000);
	issue(&l, 0, 60, 600, 0);
	issue(&l, 1, 40, 400, 0);
	assert_int_equal(ledger_check(&l, 0), 0);
	l.rate = 99; /* a capacity cut leaves the old grants over it until they die */
	assert_int_equal(ledger_check(&l, 0), -ERANGE);
	/* ... and issues no increase meanwhile, nor a negative headroom. */
	assert_true(ledger_issue(&l, 1, 50, 400, 1, LIVE, &g));
	assert_int_equal(g.rate, 40);
	assert_int_equal(ledger_check(&l, LIVE + 2), 0);
	l.rate = 100;
	l.burst = 999;
	assert_int_equal(ledger_check(&l, 0), -ERANGE);
	ledger_free(&l);
}

/*
 * A per-key ledger numbered by its limit's: ledger_issue_seq records the
 * seq it is given (gaps allowed, never going back), with the same headroom
 * rule as ledger_issue, and one ack acknowledges it as in the limit's.
 */
static void test_ledger_issue_seq(void **state)
{
	struct ledger l;
	struct ledger_grant g = {0}, before;

	(void)state;
	ledger_init(&l, 100, 1000);
	assert_false(ledger_issue_seq(&l, 0, 0, 10, 10, 0, LIVE, &g)); /* seqs start at 1 */
	assert_true(ledger_issue_seq(&l, 0, 3, 60, 600, 0, LIVE, &g));
	assert_int_equal(g.seq, 3);
	assert_int_equal(g.rate, 60);
	assert_int_equal(g.deadline_ns, LIVE);
	before = g;
	/* Never the same seq twice, never an older one. */
	assert_false(ledger_issue_seq(&l, 0, 3, 10, 10, 0, LIVE, &g));
	assert_false(ledger_issue_seq(&l, 0, 2, 10, 10, 0, LIVE, &g));
	assert_memory_equal(&g, &before, sizeof(g));
	assert_false(ledger_issue_seq(&l, LEDGER_MAX_HOLDERS, 1, 10, 10, 0, LIVE, &g));
	/* Headroom as ever: holder 1 gets what holder 0 leaves. */
	assert_true(ledger_issue_seq(&l, 1, 7, 80, 800, 0, LIVE, &g));
	assert_int_equal(g.rate, 40);
	assert_int_equal(g.burst, 400);
	/* The numbering goes on from the seq given. */
	g = issue(&l, 0, 10, 100, 1);
	assert_int_equal(g.seq, 4);
	assert_true(ledger_issue_seq(&l, 0, 9, 20, 200, 1, LIVE, &g));
	assert_int_equal(ledger_committed_rate(&l, 0, 1), 60);
	/* An ack of 9 kills 3 and 4; an ack of a seq never issued is ignored. */
	ledger_ack(&l, 0, 10, 1);
	assert_int_equal(ledger_committed_rate(&l, 0, 1), 60);
	ledger_ack(&l, 0, 9, 1);
	assert_int_equal(ledger_committed_rate(&l, 0, 1), 20);
	assert_int_equal(ledger_check(&l, 1), 0);
	/* A full ring refuses as ledger_issue does. */
	for (uint64_t k = 0; k < LEDGER_MAX_PENDING - 1; k++)
		assert_true(ledger_issue_seq(&l, 0, 20 + k, 1, 1, 2, LIVE, &g));
	assert_false(ledger_issue_seq(&l, 0, 100, 1, 1, 2, LIVE, &g));
	ledger_free(&l);
}

/* A trimmed copy keeps exactly what the original accounts for. */
static void test_ledger_copy_n(void **state)
{
	struct ledger l, c;

	(void)state;
	ledger_init(&l, 100, 1000);
	issue(&l, 0, 30, 300, 0);
	issue(&l, 2, 20, 200, 0);
	assert_int_equal(ledger_copy_n(&c, &l, 4), 0);
	assert_int_equal(c.cap, 4);
	assert_int_equal(ledger_sum_rate(&c, 0), 50);
	assert_int_equal(ledger_sum_rate_fast(&c, 0), 50);
	assert_int_equal(ledger_committed_burst(&c, 2, 0), 200);
	ledger_free(&c);
	/* A slot past the room asked for that holds grants is copied too. */
	issue(&l, 9, 10, 100, 0);
	assert_int_equal(ledger_copy_n(&c, &l, 4), 0);
	assert_int_equal(c.cap, 10);
	assert_int_equal(ledger_sum_rate(&c, 0), 60);
	assert_int_equal(ledger_committed_rate(&c, 9, 0), 10);
	ledger_free(&c);
	ledger_free(&l);
}

/* ledger_holder_within: every live grant of a holder in one ledger is
 * matched, seq for seq, by one at least as large that lives at least as long
 * in the other.
 */
static void test_ledger_holder_within(void **state)
{
	struct ledger lim, key;
	struct ledger_grant g, a;

	(void)state;
	ledger_init(&lim, 100, 1000);
	issue(&lim, 0, 50, 500, 0);
	issue(&lim, 1, 50, 500, 0);
	assert_int_equal(ledger_copy(&key, &lim), 0);
	assert_true(ledger_holder_within(&key, 0, &lim, 0)); /* a copy */
	assert_true(ledger_holder_within(&key, 2, &lim, 0)); /* nothing to cover */
	/* No headroom for the key yet: its grant 2 stays at the share. */
	g = issue(&lim, 0, 50, 500, 1);
	assert_true(ledger_issue_seq(&key, 0, g.seq, 90, 500, 1, LIVE, &a));
	assert_int_equal(a.rate, 50);
	assert_true(ledger_holder_within(&key, 0, &lim, 1));
	/* Holder 1 cut to 0 for the key: covered by its share. */
	g = issue(&lim, 1, 50, 500, 1);
	assert_true(ledger_issue_seq(&key, 1, g.seq, 0, 0, 1, LIVE, &a));
	assert_int_equal(a.rate, 0);
	assert_true(ledger_holder_within(&key, 1, &lim, 1));
	ledger_ack(&lim, 1, g.seq, 1);
	ledger_ack(&key, 1, g.seq, 1);
	/* Now holder 0 gets 70 for the key, above its share of 40. */
	g = issue(&lim, 0, 40, 400, 2);
	assert_true(ledger_issue_seq(&key, 0, g.seq, 70, 400, 2, LIVE, &a));
	assert_int_equal(a.rate, 70);
	assert_false(ledger_holder_within(&key, 0, &lim, 2));
	/* Cut back: covered only once the ack reached the key's ledger too. */
	g = issue(&lim, 0, 40, 400, 3);
	assert_true(ledger_issue_seq(&key, 0, g.seq, 40, 400, 3, LIVE, &a));
	ledger_ack(&lim, 0, g.seq, 3);
	assert_false(ledger_holder_within(&key, 0, &lim, 3)); /* 70 still live in the key's */
	ledger_ack(&key, 0, g.seq, 3);
	assert_true(ledger_holder_within(&key, 0, &lim, 3));
	/* A grant the other ledger does not have is not covered ... */
	assert_true(ledger_issue_seq(&key, 0, 50, 0, 0, 4, LIVE, &a));
	assert_false(ledger_holder_within(&key, 0, &lim, 4));
	ledger_free(&key);
	/* ... nor one that lives longer in it. */
	assert_int_equal(ledger_copy(&key, &lim), 0);
	g = issue(&lim, 0, 40, 400, 5);
	assert_true(ledger_issue_seq(&key, 0, g.seq, 40, 400, 6, LIVE, &a));
	assert_false(ledger_holder_within(&key, 0, &lim, 6));
	ledger_free(&key);
	ledger_free(&lim);
}

static void test_ledger_targets(void **state)
{
	struct ledger l;
	uint64_t rate[LEDGER_MAX_HOLDERS], burst[LEDGER_MAX_HOLDERS];

	(void)state;
	ledger_init(&l, 100, 1000);
	l.h[0] = (struct ledger_holder){.active = true, .weight = 1, .demand = 10};
	l.h[3] = (struct ledger_holder){.active = true, .weight = 1, .demand = 500};
	l.h[5] = (struct ledger_holder){.active = true, .weight = 2, .demand = 500};
	l.h[7] = (struct ledger_holder){.active = false, .weight = 9, .demand = 500};
	ledger_targets(&l, rate, burst);
	assert_int_equal(rate[0], 10);
	assert_int_equal(rate[3], 30);
	assert_int_equal(rate[5], 60);
	/* Burst: 1000 / (2 * 3) = 166 each, the 502 left by rate share. */
	assert_int_equal(burst[0], 166 + 50);  /* 502 * 10 / 100 */
	assert_int_equal(burst[3], 166 + 150); /* 502 * 30 / 100 = 150.6 */
	assert_int_equal(burst[5], 166 + 301); /* 502 * 60 / 100 = 301.2 */
	assert_true(burst[0] + burst[3] + burst[5] <= 1000);
	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		if (i != 0 && i != 3 && i != 5) {
			assert_int_equal(rate[i], 0);
			assert_int_equal(burst[i], 0);
		}
	/* Bursts are floored: 166 each, then 501 by rate share, sum <= B. */
	l.h[0].demand = 500;
	l.h[5].weight = 1;
	l.burst = 999;
	ledger_targets(&l, rate, burst);
	assert_int_equal(rate[0], 34);
	assert_int_equal(rate[3], 33);
	assert_int_equal(rate[5], 33);
	assert_int_equal(burst[0], 166 + 170); /* 501 * 34 / 100 = 170.34 */
	assert_int_equal(burst[3], 166 + 165); /* 501 * 33 / 100 = 165.33 */
	assert_true(burst[0] + burst[3] + burst[5] <= 999);
	/* Huge burst and rate: no overflow in B * r. */
	l.rate = 100000000000ULL;
	l.burst = UINT64_MAX;
	ledger_targets(&l, rate, burst);
	assert_true((u128)burst[0] + burst[3] + burst[5] <= UINT64_MAX);
	assert_true(burst[0] == UINT64_MAX / 6 + (uint64_t)((u128)(UINT64_MAX - UINT64_MAX / 6 * 3) *
							     rate[0] / l.rate));
	/* R = 0: nothing for anyone. */
	l.rate = 0;
	ledger_targets(&l, rate, burst);
	for (size_t i = 0; i < LEDGER_MAX_HOLDERS; i++)
		assert_true(rate[i] == 0 && burst[i] == 0);
	ledger_free(&l);
}

/* ---- randomized runs ------------------------------------------------- */

#define SIM_HOLDERS 8
#define SIM_EVENTS  100000
#define SIM_QUEUE   64 /* messages in flight, each way */
#define SIM_REF	    64 /* grants the reference remembers per holder */

struct ref_grant {
	uint64_t seq, rate, burst, deadline;
};

/* What the agent of a holder is spending: the newest grant it applied. */
struct agent {
	uint64_t seq, rate, burst, until;
};

struct msg {
	size_t h;
	struct ledger_grant g;
};

struct sim {
	uint64_t seed, now, live;
	bool honest; /* acks only for grants the agent applied */
	struct ledger l;
	/* Independent model of the live grants, from issues and delivered acks. */
	struct ref_grant ref[SIM_HOLDERS][SIM_REF];
	size_t nref[SIM_HOLDERS];
	uint64_t ref_acked[SIM_HOLDERS], ref_next[SIM_HOLDERS];
	struct agent agent[SIM_HOLDERS];
	struct msg grants[SIM_QUEUE];
	size_t ngrants;
	struct msg acks[SIM_QUEUE];
	size_t nacks;
	/* Evidence that the run exercised what it is meant to. */
	uint64_t cut, full, expired, peak_rate, near_full;
};

static void ref_prune(struct sim *s, size_t h)
{
	size_t kept = 0;

	for (size_t k = 0; k < s->nref[h]; k++) {
		struct ref_grant *g = &s->ref[h][k];

		if (g->seq >= s->ref_acked[h] && s->now <= g->deadline)
			s->ref[h][kept++] = *g;
		else if (s->now > g->deadline)
			s->expired++;
	}
	s->nref[h] = kept;
}

static uint64_t ref_rate(const struct sim *s, size_t h)
{
	uint64_t m = 0;

	for (size_t k = 0; k < s->nref[h]; k++)
		if (s->ref[h][k].rate > m)
			m = s->ref[h][k].rate;
	return m;
}

static uint64_t ref_burst(const struct sim *s, size_t h)
{
	uint64_t m = 0;

	for (size_t k = 0; k < s->nref[h]; k++)
		if (s->ref[h][k].burst > m)
			m = s->ref[h][k].burst;
	return m;
}

static void sim_check(struct sim *s, uint64_t event)
{
	u128 sr = 0, sb = 0, ur = 0, ub = 0;

	for (size_t h = 0; h < SIM_HOLDERS; h++)
		ref_prune(s, h);
	if (ledger_check(&s->l, s->now) != 0)
		fail_msg("event %llu: ledger_check failed", (unsigned long long)event);
	/* The cached sums the coordinator uses agree with a full walk. */
	if (ledger_sum_rate_fast(&s->l, s->now) != ledger_sum_rate(&s->l, s->now) ||
	    ledger_sum_burst_fast(&s->l, s->now) != ledger_sum_burst(&s->l, s->now))
		fail_msg("event %llu: cached sums %llu/%llu, walked %llu/%llu",
			 (unsigned long long)event,
			 (unsigned long long)ledger_sum_rate_fast(&s->l, s->now),
			 (unsigned long long)ledger_sum_burst_fast(&s->l, s->now),
			 (unsigned long long)ledger_sum_rate(&s->l, s->now),
			 (unsigned long long)ledger_sum_burst(&s->l, s->now));
	for (size_t h = 0; h < SIM_HOLDERS; h++) {
		const struct agent *a = &s->agent[h];
		uint64_t rr = ref_rate(s, h), rb = ref_burst(s, h);

		if (ledger_committed_rate(&s->l, h, s->now) != rr ||
		    ledger_committed_burst(&s->l, h, s->now) != rb)
			fail_msg("event %llu: holder %zu committed %llu/%llu, reference %llu/%llu",
				 (unsigned long long)event, h,
				 (unsigned long long)ledger_committed_rate(&s->l, h, s->now),
				 (unsigned long long)ledger_committed_burst(&s->l, h, s->now),
				 (unsigned long long)rr, (unsigned long long)rb);
		sr += rr;
		sb += rb;
		if (s->honest && a->seq && s->now <= a->until) {
			/* What the gateway really spends is covered by the ledger. */
			if (a->rate > rr || a->burst > rb)
				fail_msg("event %llu: holder %zu spends %llu/%llu over committed",
					 (unsigned long long)event, h, (unsigned long long)a->rate,
					 (unsigned long long)a->burst);
			ur += a->rate;
			ub += a->burst;
		}
	}
	if (sr > s->l.rate || sb > s->l.burst)
		fail_msg("event %llu: sum committed %llu/%llu over capacity %llu/%llu",
			 (unsigned long long)event, (unsigned long long)sr, (unsigned long long)sb,
			 (unsigned long long)s->l.rate, (unsigned long long)s->l.burst);
	assert_true(ur <= s->l.rate && ub <= s->l.burst);
	assert_true(ledger_sum_rate(&s->l, s->now) == sr);
	if (sr > s->peak_rate)
		s->peak_rate = sr;
	if (sr * 10 >= (u128)s->l.rate * 9)
		s->near_full++;
}

static void sim_issue(struct sim *s, size_t h, uint64_t tr, uint64_t tb)
{
	struct ledger_grant g;
	uint64_t cr, cb;
	u128 sr = 0, sb = 0;

	for (size_t k = 0; k < SIM_HOLDERS; k++) {
		ref_prune(s, k);
		sr += ref_rate(s, k);
		sb += ref_burst(s, k);
	}
	cr = ref_rate(s, h);
	cb = ref_burst(s, h);
	if (!ledger_issue(&s->l, h, tr, tb, s->now, s->live, &g)) {
		/* Refused only when every slot holds a live grant. */
		assert_int_equal(s->nref[h], LEDGER_MAX_PENDING);
		s->full++;
		return;
	}
	assert_true(g.seq == s->ref_next[h]);
	assert_true(g.deadline_ns == s->now + s->live);
	/* A decrease as is; an increase up to exactly the headroom. */
	if (tr <= cr)
		assert_true(g.rate == tr);
	else
		assert_true(g.rate == (tr - cr <= s->l.rate - sr ? tr : cr + s->l.rate - sr));
	if (tb <= cb)
		assert_true(g.burst == tb);
	else
		assert_true(g.burst == (tb - cb <= s->l.burst - sb ? tb : cb + s->l.burst - sb));
	if (g.rate < tr)
		s->cut++;
	s->ref_next[h]++;
	assert_true(s->nref[h] < SIM_REF);
	s->ref[h][s->nref[h]++] = (struct ref_grant){g.seq, g.rate, g.burst, g.deadline_ns};
	if (s->ngrants < SIM_QUEUE)
		s->grants[s->ngrants++] = (struct msg){h, g};
}

static void sim_ack(struct sim *s, size_t h, uint64_t seq)
{
	ledger_ack(&s->l, h, seq, s->now);
	if (seq > 0 && seq < s->ref_next[h] && seq > s->ref_acked[h])
		s->ref_acked[h] = seq;
}

/* Take a random message out of a queue (so delivery order is random). */
static struct msg take(struct sim *s, struct msg *q, size_t *n, bool keep)
{
	size_t k = rnd(&s->seed) % *n;
	struct msg m = q[k];

	if (!keep)
		q[k] = q[--*n];
	return m;
}

static void sim_event(struct sim *s)
{
	uint64_t rate[LEDGER_MAX_HOLDERS], burst[LEDGER_MAX_HOLDERS];
	uint64_t r = rnd(&s->seed) % 100, R = s->l.rate;
	size_t h = rnd(&s->seed) % SIM_HOLDERS;

	if (r < 8) {
		/* Demand changes; mostly enough to oversubscribe the limit. */
		s->l.h[h].demand = chance(&s->seed, 15) ? 0 : rnd_in(&s->seed, 0, R / 2);
	} else if (r < 10) {
		s->l.h[h].active = !s->l.h[h].active;
	} else if (r < 30) {
		ledger_targets(&s->l, rate, burst);
		sim_issue(s, h, rate[h], burst[h]);
	} else if (r < 34) {
		ledger_targets(&s->l, rate, burst);
		for (size_t k = 0; k < SIM_HOLDERS; k++)
			sim_issue(s, k, rate[k], burst[k]);
	} else if (r < 37) {
		/* Any target at all, not only the allocator's. */
		sim_issue(s, h, rnd_in(&s->seed, 0, R), rnd_in(&s->seed, 0, s->l.burst));
	} else if (r < 60 && s->ngrants) {
		/* A grant reaches its agent: possibly late, duplicated or lost. */
		struct msg m = take(s, s->grants, &s->ngrants, chance(&s->seed, 10));
		struct agent *a = &s->agent[m.h];

		if (chance(&s->seed, 5))
			return;
		/* The agent's clock started before the coordinator's: it stops first. */
		if (m.g.seq > a->seq)
			*a = (struct agent){m.g.seq, m.g.rate, m.g.burst,
					    m.g.deadline_ns - rnd_in(&s->seed, 0, s->live / 10)};
		if (s->honest && s->nacks < SIM_QUEUE)
			s->acks[s->nacks++] = (struct msg){m.h, {.seq = a->seq}};
	} else if (r < 80) {
		if (s->honest) {
			/* Acks arrive in random order, some twice, some never. */
			struct msg m;

			if (!s->nacks)
				return;
			m = take(s, s->acks, &s->nacks, chance(&s->seed, 15));
			if (!chance(&s->seed, 5))
				sim_ack(s, m.h, m.g.seq);
		} else {
			/* Acks of any issued seq, in any order, now and then one never issued. */
			uint64_t top = s->ref_next[h];

			sim_ack(s, h,
				chance(&s->seed, 5)
				    ? rnd_in(&s->seed, 0, top + 3)
				    : rnd_in(&s->seed, top > 4 ? top - 4 : 1, top - 1));
		}
	} else if (r < 97) {
		s->now += rnd_in(&s->seed, 0, s->live / 8);
	} else if (r < 98) {
		s->now += rnd_in(&s->seed, 0, 2 * s->live);
	} else {
		ledger_gc(&s->l, s->now);
	}
}

static void sim_run(uint64_t seed, bool honest, uint64_t R, uint64_t B, struct sim *s)
{
	memset(s, 0, sizeof(*s));
	s->seed = seed;
	s->honest = honest;
	s->now = 1000;
	s->live = 1000;
	ledger_init(&s->l, R, B);
	for (size_t h = 0; h < SIM_HOLDERS; h++) {
		s->l.h[h].active = true;
		s->l.h[h].weight = (uint32_t)rnd_in(&s->seed, 0, 4);
		s->l.h[h].demand = rnd_in(&s->seed, 0, R / 2);
		s->ref_next[h] = 1;
	}
	for (uint64_t e = 0; e < SIM_EVENTS; e++) {
		sim_event(s);
		sim_check(s, e);
	}
	/* Not vacuous: increases were cut, rings filled, grants expired, and the
	 * committed total came close to the capacity.
	 */
	assert_true(s->cut > 1000);
	assert_true(s->full > 100);
	assert_true(s->expired > 1000);
	assert_true(s->near_full > SIM_EVENTS / 2);
	assert_true(s->peak_rate == R);
	ledger_free(&s->l);
}

static void test_ledger_random_acks(void **state)
{
	static struct sim s;

	(void)state;
	sim_run(1, false, 1000, 4000, &s);
	sim_run(2, false, 100000000000ULL, 3000000000ULL, &s);
}

static void test_ledger_random_agents(void **state)
{
	static struct sim s;

	(void)state;
	sim_run(3, true, 1000, 4000, &s);
	sim_run(4, true, 100000000000ULL, 3000000000ULL, &s);
}

/*
 * With every grant applied and acked at once, the ledger reaches the targets
 * within two rounds of issues (the first round's increases may wait for
 * decreases issued later in it), so with demand over capacity the whole
 * capacity is committed.
 */
static void test_ledger_converges(void **state)
{
	struct ledger l;
	uint64_t rate[LEDGER_MAX_HOLDERS], burst[LEDGER_MAX_HOLDERS], seed = 99, now = 0;
	const uint64_t R = 10000, B = 70000;
	int slow = 0;

	(void)state;
	ledger_init(&l, R, B);
	for (size_t h = 0; h < SIM_HOLDERS; h++) {
		l.h[h].active = true;
		l.h[h].weight = (uint32_t)rnd_in(&seed, 1, 5);
	}
	for (int change = 0; change < 2000; change++) {
		u128 want = 0, bsum = 0;
		bool done = false;

		for (size_t h = 0; h < SIM_HOLDERS; h++)
			l.h[h].demand = rnd_in(&seed, 0, R / 3);
		/* Make sure demand covers the capacity. */
		l.h[rnd(&seed) % SIM_HOLDERS].demand += R;
		for (size_t h = 0; h < SIM_HOLDERS; h++)
			want += l.h[h].demand;
		assert_true(want >= R);
		ledger_targets(&l, rate, burst);
		for (size_t h = 0; h < SIM_HOLDERS; h++)
			bsum += burst[h];
		for (int round = 1; round <= 2; round++) {
			done = true;
			for (size_t h = 0; h < SIM_HOLDERS; h++) {
				struct ledger_grant g;

				assert_true(ledger_issue(&l, h, rate[h], burst[h], now, 1000, &g));
				ledger_ack(&l, h, g.seq, now);
				assert_int_equal(ledger_check(&l, now), 0);
				now += 1;
			}
			for (size_t h = 0; h < SIM_HOLDERS; h++)
				if (ledger_committed_rate(&l, h, now) != rate[h] ||
				    ledger_committed_burst(&l, h, now) != burst[h])
					done = false;
			if (!done)
				slow += round == 1;
			else
				break;
		}
		assert_true(done);
		assert_int_equal(ledger_sum_rate(&l, now), R);
		assert_true(ledger_sum_burst(&l, now) == bsum);
		assert_true(bsum > B - SIM_HOLDERS); /* floors lose under one unit each */
	}
	/* Some changes did need the second round. */
	assert_true(slow > 0);
	ledger_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_maxmin_equal_weights),
	    cmocka_unit_test(test_maxmin_one_small_demand),
	    cmocka_unit_test(test_maxmin_leftover_spread),
	    cmocka_unit_test(test_maxmin_weights),
	    cmocka_unit_test(test_maxmin_zero_demand),
	    cmocka_unit_test(test_maxmin_zero_capacity),
	    cmocka_unit_test(test_maxmin_huge),
	    cmocka_unit_test(test_maxmin_bruteforce_small),
	    cmocka_unit_test(test_maxmin_random),
	    cmocka_unit_test(test_ledger_holder_reset),
	    cmocka_unit_test(test_ledger_decrease_then_increase_ack),
	    cmocka_unit_test(test_ledger_decrease_then_increase_expiry),
	    cmocka_unit_test(test_ledger_partial_headroom),
	    cmocka_unit_test(test_ledger_ack_order),
	    cmocka_unit_test(test_ledger_ack_keeps_later),
	    cmocka_unit_test(test_ledger_ring_full),
	    cmocka_unit_test(test_ledger_gc),
	    cmocka_unit_test(test_ledger_zeroed),
	    cmocka_unit_test(test_ledger_check_detects),
	    cmocka_unit_test(test_ledger_issue_seq),
	    cmocka_unit_test(test_ledger_copy_n),
	    cmocka_unit_test(test_ledger_holder_within),
	    cmocka_unit_test(test_ledger_targets),
	    cmocka_unit_test(test_ledger_random_acks),
	    cmocka_unit_test(test_ledger_random_agents),
	    cmocka_unit_test(test_ledger_converges),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
