// SPDX-License-Identifier: MIT
/*
 * Host tests of include/tb_math.h, the token arithmetic the XDP program runs:
 * edge cases of the clock, exactness against a 128-bit reference, the
 * overflow bounds, and long runs whose admitted total must be burst + rate*t.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "tb_math.h"
#include "unit/rnd.h"

typedef unsigned __int128 u128;

static struct tb_params params(__u64 rate, __u64 burst)
{
	struct tb_params p = {.rate = rate, .burst_s = burst * TB_SCALE};

	p.fill_ns = tb_fill_ns(rate, p.burst_s);
	return p;
}

/* What tb_refill must compute, in exact 128-bit arithmetic. */
static __u64 ref_refill(__u64 tokens, __u64 last, __u64 now, const struct tb_params *p)
{
	u128 t;

	if (tokens >= p->burst_s)
		return p->burst_s;
	if (now <= last)
		return tokens;
	t = (u128)tokens + (u128)p->rate * (now - last);
	return t > p->burst_s ? p->burst_s : (__u64)t;
}

static void test_zero_elapsed(void **state)
{
	struct tb_params p = params(1000, 10);

	(void)state;
	assert_true(tb_refill(5 * TB_SCALE, 100, 100, &p) == 5 * TB_SCALE);
	assert_true(tb_refill(0, 0, 0, &p) == 0);
	assert_true(tb_refill(0, ~0ULL, ~0ULL, &p) == 0);
}

static void test_clock_backwards(void **state)
{
	struct tb_params p = params(1000, 10);

	(void)state;
	assert_true(tb_refill(3 * TB_SCALE, 200, 100, &p) == 3 * TB_SCALE);
	assert_true(tb_refill(3 * TB_SCALE, ~0ULL, 0, &p) == 3 * TB_SCALE);
	assert_true(tb_refill(0, 1, 0, &p) == 0);
}

static void test_huge_elapsed(void **state)
{
	struct tb_params p = params(1000, 10);
	struct tb_params max = params(TB_MAX_RATE, TB_MAX_BURST);

	(void)state;
	assert_true(tb_refill(0, 0, ~0ULL, &p) == p.burst_s);
	assert_true(tb_refill(p.burst_s - 1, 0, ~0ULL, &p) == p.burst_s);
	assert_true(tb_refill(0, 0, ~0ULL, &max) == max.burst_s);
	assert_true(tb_refill(0, 1, ~0ULL, &max) == max.burst_s);
}

/* rate * dt sub-tokens, nothing rounded: 1000 tokens/s for 1 ms is exactly 1 token. */
static void test_exact_refill(void **state)
{
	struct tb_params p = params(1000, 10);

	(void)state;
	assert_true(tb_refill(0, 0, 1000000, &p) == TB_SCALE);
	assert_true(tb_refill(0, 0, 1, &p) == 1000);
	assert_true(tb_refill(7, 5, 6, &p) == 1007);
	assert_true(tb_refill(0, 0, 9999999, &p) == 9999999000ULL);
	assert_true(tb_refill(0, 0, 10000000, &p) == p.burst_s); /* fill_ns exactly */
	assert_true(p.fill_ns == 10000000);
}

static void test_full_and_over_full(void **state)
{
	struct tb_params p = params(1000, 10);

	(void)state;
	assert_true(tb_refill(p.burst_s, 0, 1, &p) == p.burst_s);
	/* More than the capacity (a burst that was lowered) comes back clamped. */
	assert_true(tb_refill(p.burst_s + 12345, 0, 0, &p) == p.burst_s);
	assert_true(tb_refill(~0ULL, 5, 1, &p) == p.burst_s);
}

static void test_rate_zero_never_refills(void **state)
{
	struct tb_params p = params(0, 10);

	(void)state;
	assert_true(p.fill_ns == 0);
	assert_true(tb_refill(0, 0, ~0ULL, &p) == 0);
	assert_true(tb_refill(4 * TB_SCALE, 0, 1000000000, &p) == 4 * TB_SCALE);
}

static void test_fill_ns_rounds_up(void **state)
{
	(void)state;
	assert_true(tb_fill_ns(0, 100) == 0);
	assert_true(tb_fill_ns(3, 10) == 4);
	assert_true(tb_fill_ns(5, 10) == 2);
	assert_true(tb_fill_ns(1000, 10 * TB_SCALE) == 10000000);
	assert_true(tb_fill_ns(TB_MAX_RATE, 1) == 1);
	assert_true(tb_fill_ns(1, TB_MAX_BURST * TB_SCALE) == TB_MAX_BURST * TB_SCALE);
}

static void test_saturation_boundary(void **state)
{
	struct tb_params p = params(3, 1); /* fill_ns = ceil(10^9 / 3) = 333333334 */

	(void)state;
	assert_true(p.fill_ns == 333333334);
	assert_true(tb_refill(0, 0, p.fill_ns - 1, &p) == 3 * (p.fill_ns - 1));
	assert_true(tb_refill(0, 0, p.fill_ns - 1, &p) < p.burst_s);
	assert_true(tb_refill(0, 0, p.fill_ns, &p) == p.burst_s);
}

/* A new generation: the old rate settles up to the reload, the new one after
 * it; a lower burst clamps and a changed rate never grants a fresh full bucket.
 */
static void test_rate_change(void **state)
{
	struct tb_params old = params(100, 1000), fast = params(10, 500), small = params(10, 50);
	__u64 t;

	(void)state;
	t = tb_refill(0, 0, 1000000000, &old); /* 1 s at 100/s */
	assert_true(t == 100 * TB_SCALE);
	t = tb_clamp(t, fast.burst_s);
	assert_true(t == 100 * TB_SCALE);
	t = tb_refill(t, 1000000000, 2000000000, &fast); /* 1 s at 10/s */
	assert_true(t == 110 * TB_SCALE);
	t = tb_clamp(t, small.burst_s); /* burst lowered to 50 */
	assert_true(t == 50 * TB_SCALE);
	t = tb_refill(t, 2000000000, 2500000000, &small);
	assert_true(t == small.burst_s);
}

/* Splitting an interval anywhere, at one rate, changes nothing. */
static void test_refill_is_additive(void **state)
{
	uint64_t s = 1;
	__u64 i, t0, mid, now, a, b;
	struct tb_params p;

	(void)state;
	for (i = 0; i < 200000; i++) {
		p = params(rnd_in(&s, 1, TB_MAX_RATE), rnd_in(&s, 1, 1000000));
		t0 = rnd_in(&s, 0, p.burst_s);
		now = rnd_in(&s, 0, 4 * p.fill_ns);
		mid = rnd_in(&s, 0, now);
		a = tb_refill(tb_refill(t0, 0, mid, &p), mid, now, &p);
		b = tb_refill(t0, 0, now, &p);
		if (a != b)
			fail_msg("rate %llu t0 %llu split at %llu of %llu", p.rate, t0, mid, now);
	}
}

static void test_clamp_to_lower_burst(void **state)
{
	(void)state;
	assert_true(tb_clamp(1000, 500) == 500);
	assert_true(tb_clamp(400, 500) == 400);
	assert_true(tb_clamp(500, 500) == 500);
	assert_true(tb_clamp(~0ULL, 0) == 0);
}

static void test_take(void **state)
{
	__u64 t = 5 * TB_SCALE;

	(void)state;
	assert_int_equal(tb_take(&t, 6 * TB_SCALE), 0);
	assert_true(t == 5 * TB_SCALE);
	assert_int_equal(tb_take(&t, 5 * TB_SCALE), 1);
	assert_true(t == 0);
	assert_int_equal(tb_take(&t, 1), 0);
	assert_int_equal(tb_take(&t, 0), 1);
}

static void test_cost(void **state)
{
	(void)state;
	assert_true(tb_cost(0, 1500) == TB_SCALE);
	assert_true(tb_cost(1, 1500) == 1500 * TB_SCALE);
	assert_true(tb_cost(1, 0) == 0);
	assert_true(tb_cost(1, 65535) == 65535 * TB_SCALE);
}

/* A rollback is exact: refunding after any refill equals never having debited. */
static void test_refund_exact(void **state)
{
	uint64_t s = 2;
	__u64 i, t, c, dt, with, without;
	struct tb_params p;

	(void)state;
	for (i = 0; i < 500000; i++) {
		p = params(rnd_in(&s, 0, TB_MAX_RATE),
			   rnd_in(&s, 1, 1 + (i & 1 ? 100 : TB_MAX_BURST)));
		t = rnd_in(&s, 0, p.burst_s);
		c = rnd_in(&s, 0, t);
		dt = rnd_in(&s, 0, i & 2 ? p.fill_ns + 2 : 1000);
		with = t;
		assert_int_equal(tb_take(&with, c), 1);
		with = tb_refund(tb_refill(with, 0, dt, &p), c, p.burst_s);
		without = tb_refill(t, 0, dt, &p);
		if (with != without)
			fail_msg("t %llu cost %llu dt %llu: %llu"
				 " != %llu",
				 t, c, dt, with, without);
	}
	assert_true(tb_refund(0, 100, 50) == 50); /* a cost above the burst */
	assert_true(tb_refund(49, 1, 50) == 50);
	assert_true(tb_refund(~0ULL - 1, ~0ULL, ~0ULL) == ~0ULL);
}

/* The bounds are tight: one more token of burst would let burst_s + rate wrap. */
static void test_overflow_bounds(void **state)
{
	(void)state;
	assert_true((u128)TB_MAX_BURST * TB_SCALE + TB_MAX_RATE <= ~0ULL);
	assert_true((u128)(TB_MAX_BURST + 1) * TB_SCALE + TB_MAX_RATE > ~0ULL);
}

static void test_refill_at_max_rate_and_burst(void **state)
{
	struct tb_params p = params(TB_MAX_RATE, TB_MAX_BURST);
	uint64_t s = 3;
	__u64 i, t, dt, want;
	static const __u64 tokens[] = {0, 1, TB_SCALE, TB_MAX_BURST * TB_SCALE - 1};

	(void)state;
	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
		for (dt = p.fill_ns - 3; dt <= p.fill_ns + 3; dt++) {
			want = ref_refill(tokens[i], 0, dt, &p);
			assert_true(tb_refill(tokens[i], 0, dt, &p) == want);
		}
	}
	for (i = 0; i < 500000; i++) {
		t = rnd_in(&s, 0, p.burst_s);
		dt = rnd_in(&s, 0, i & 1 ? p.fill_ns + 1 : ~0ULL);
		if (tb_refill(t, 0, dt, &p) != ref_refill(t, 0, dt, &p))
			fail_msg("t %llu dt %llu", t, dt);
	}
}

/* Random rates, bursts, balances and times over the whole allowed range. */
static void test_refill_matches_reference(void **state)
{
	uint64_t s = 4;
	__u64 i, t, last, now;
	struct tb_params p;

	(void)state;
	for (i = 0; i < 1000000; i++) {
		p = params(rnd_in(&s, 0, TB_MAX_RATE), rnd_in(&s, 1, TB_MAX_BURST));
		t = rnd_in(&s, 0, p.burst_s + (i & 7 ? 0 : TB_SCALE));
		last = rnd(&s);
		now = i & 1 ? rnd(&s) : last + rnd_in(&s, 0, p.fill_ns + 1);
		if (tb_refill(t, last, now, &p) != ref_refill(t, last, now, &p))
			fail_msg("rate %llu burst_s %llu t %llu last %llu"
				 " now %llu",
				 p.rate, p.burst_s, t, last, now);
	}
}

/* A sender that always has a packet waiting, served at irregular instants
 * chosen so that the bucket never caps between them (rate * dt < burst - cost).
 * Then nothing is lost: admitted + balance == burst + rate * t exactly, and so
 * admitted lies in [burst + rate*t - cost, burst + rate*t] after every step.
 */
static void long_window(__u64 seed, __u64 steps, const struct tb_params *p, int bytes, __u64 max_dt)
{
	uint64_t s = seed;
	__u64 now = 0, tokens = p->burst_s, dt, cost;
	u128 budget, admitted_s = 0; /* sub-tokens: 10^19 after ~3 min at 100 MB/s */
	__u64 i;

	cost = tb_cost(bytes, bytes ? rnd_in(&s, 64, 1500) : 1);
	for (i = 0; i <= steps; i++) {
		/* Step 0 spends the initial burst at t = 0. Then half the steps come
		 * nearly back to back, the others spread out; some have dt = 0.
		 */
		dt = i == 0 ? 0 : rnd_in(&s, 0, i & 1 ? 100 : max_dt);
		tokens = tb_refill(tokens, now, now + dt, p);
		now += dt;
		while (tb_take(&tokens, cost)) {
			admitted_s += cost;
			cost = tb_cost(bytes, bytes ? rnd_in(&s, 64, 1500) : 1);
		}
		budget = (u128)p->burst_s + (u128)p->rate * now;
		if (admitted_s + tokens != budget)
			fail_msg("step %llu: admitted + balance != burst + rate * t", i);
		if (admitted_s > budget || admitted_s + cost < budget)
			fail_msg("step %llu: admitted outside [budget - cost, budget]", i);
	}
	print_message("    %llu steps over %.3f s: admitted %llu of budget %.0f %s\n", steps,
		      now / 1e9, (__u64)(admitted_s / TB_SCALE),
		      (double)((p->burst_s + (u128)p->rate * now) / TB_SCALE),
		      bytes ? "bytes" : "packets");
}

static void test_long_window_packets(void **state)
{
	struct tb_params p = params(1000000, 100); /* 1 Mpps, 100 packets of burst */

	(void)state;
	long_window(5, 1000000, &p, 0, 90000); /* 90 us * 1 Mpps = 90 tokens < 99 */
}

static void test_long_window_bytes(void **state)
{
	struct tb_params p = params(100000000, 100000); /* 100 MB/s, 100 kB of burst */

	(void)state;
	long_window(6, 1000000, &p, 1, 900000); /* 900 us = 90 kB < 100 kB - 1500 */
}

/* An odd rate whose per-ns refill is not a round number of sub-tokens. */
static void test_long_window_odd_rate(void **state)
{
	struct tb_params p = params(7919, 10); /* 7919 packets/s */

	(void)state;
	long_window(7, 1000000, &p, 0, 1000000); /* 1 ms = 7.9 tokens < 9 */
}

/* The contract itself, for every window [t_j, t_k] and not only from t = 0:
 * admitted in it <= burst + rate * (t_k - t_j), with gaps long enough to cap
 * the bucket and a sender that is sometimes idle and sometimes floods.
 * With m_j = admitted before step j - rate * t_j, the worst window ending at
 * step k is admitted_k - rate * t_k - min(m_j), so one pass checks them all.
 */
static void test_any_window_at_most_burst_plus_rate(void **state)
{
	struct tb_params p = params(5000, 300);
	uint64_t s = 8;
	__u64 now = 0, tokens = p.burst_s, dt, offered, i;
	__int128 admitted = 0, lowest = 0, excess, worst = -1;

	(void)state;
	for (i = 0; i < 1000000; i++) {
		dt = rnd_in(&s, 0, i % 97 == 0 ? 200000000 : 200000);
		tokens = tb_refill(tokens, now, now + dt, &p);
		now += dt;
		if (admitted - (__int128)p.rate * now < lowest)
			lowest = admitted - (__int128)p.rate * now;
		offered = i % 1000 < 10 ? 1000 : rnd_in(&s, 0, 3);
		while (offered-- && tb_take(&tokens, TB_SCALE))
			admitted += TB_SCALE;
		excess = admitted - (__int128)p.rate * now - lowest;
		if (excess > (__int128)p.burst_s)
			fail_msg("step %llu: a window admitted more than burst + rate * w", i);
		if (excess > worst)
			worst = excess;
	}
	/* The bound is reached, so the check above is not vacuous. */
	assert_true(worst == (__int128)p.burst_s);
}

/* The datapath's clock lags (bpf/clock.h): the coarse clock reads the last
 * tick (TICK ns), held up to 5 ticks while timekeeping stalls, and some
 * packets read the precise clock instead (near a lease's expiry). A bucket
 * that fills in 20 ms or more (LL_COARSE_MIN_FILL_NS; faster ones are charged
 * by the precise clock) charged by such readings, never ahead of true time
 * t, with last_ns moving only forward (tb_settle), a sender sometimes
 * flooding, sometimes idle:
 *  - from t = 0 (the clock current), never more than B + R*t: no clock
 *    reading credits time that has not passed;
 *  - over any window w, at most B + R*(w + L), L the largest lag: tokens owed
 *    from before a window that starts while the clock lags arrive up to L
 *    late (a delay, like a packet's scheduling, within the contract's delta);
 *  - a saturating sender gets at least B + R*(t - L) - 1 packet: the worst
 *    under-admission is R*L, and it does not accumulate.
 * And why the precise clock below 20 ms: at fill < TICK, a tick's refill is
 * clamped to B, and a saturating sender gets B per tick, far below R.
 */
#define TICK 4000000ull /* HZ = 250 */

/* Admitted by a sender of one packet per `gap` ns for `secs` s, charged by
 * the tick clock, from full.
 */
static __int128 tick_clock_flood(const struct tb_params *p, __u64 gap, __u64 ns)
{
	__u64 t, tokens = p->burst_s, last = 0;
	__int128 admitted = 0;

	for (t = 0; t <= ns; t += gap) {
		tokens = tb_settle(tokens, &last, 1, 1, 0, p, p, 0, t / TICK * TICK);
		if (tb_take(&tokens, TB_SCALE))
			admitted += TB_SCALE;
	}
	return admitted;
}

static void test_lagging_clock_never_over_admits(void **state)
{
	struct tb_params p = params(100000, 2000), fast = params(100000, 50);
	uint64_t s = 14;
	__u64 t = 0, tokens = p.burst_s, last = 0, c, lag, maxlag = 0, stall = 0, offered;
	__int128 admitted = 0, lowest = 0, excess, worst = -1;
	int i;

	(void)state;
	assert_true(p.fill_ns >= 5 * TICK && fast.fill_ns < TICK);
	for (i = 0; i < 2000000; i++) {
		t += rnd_in(&s, 0, i % 5000 == 0 ? 50000000 : 20000);
		if (stall == 0 && rnd(&s) % 20000 == 0)
			stall = t / TICK * TICK; /* timekeeping stalls, 5 ticks at most */
		if (stall && t - stall > 5 * TICK)
			stall = 0;
		c = rnd(&s) % 7 == 0 ? t : (stall ? stall : t / TICK * TICK);
		lag = t - c;
		if (lag > maxlag)
			maxlag = lag;
		tokens = tb_settle(tokens, &last, 1, 1, 0, &p, &p, 0, c);
		if (admitted - (__int128)p.rate * t < lowest)
			lowest = admitted - (__int128)p.rate * t;
		offered = i % 10000 < 500 ? 50 : rnd_in(&s, 0, 2);
		while (offered-- && tb_take(&tokens, TB_SCALE))
			admitted += TB_SCALE;
		if (admitted > (__int128)p.burst_s + (__int128)p.rate * t)
			fail_msg("step %d: more than B + R*t since the start", i);
		excess = admitted - (__int128)p.rate * t - lowest;
		if (excess > (__int128)p.burst_s + (__int128)p.rate * (6 * TICK))
			fail_msg("step %d: a window admitted more than B + R*(w + L)", i);
		if (excess > worst)
			worst = excess;
	}
	assert_true(maxlag <= 6 * TICK);
	/* The lag shows: some window saw tokens owed from before it. */
	assert_true(worst > (__int128)p.burst_s);

	/* A saturating sender (5 R) for 1 s: at most B + R*t, at least
	 * B + R*(t - TICK) - 1; at fill < TICK, B per tick (12.5k/s, not 100k/s).
	 */
	admitted = tick_clock_flood(&p, 2000, 1000000000ull);
	assert_true(admitted <= (__int128)p.burst_s + (__int128)p.rate * 1000000000ull);
	assert_true(admitted >=
		    (__int128)p.burst_s + (__int128)p.rate * (1000000000ull - TICK) - TB_SCALE);
	admitted = tick_clock_flood(&fast, 2000, 1000000000ull);
	assert_true(admitted <= (__int128)(251 * 50) * TB_SCALE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_zero_elapsed),
	    cmocka_unit_test(test_lagging_clock_never_over_admits),
	    cmocka_unit_test(test_clock_backwards),
	    cmocka_unit_test(test_huge_elapsed),
	    cmocka_unit_test(test_exact_refill),
	    cmocka_unit_test(test_full_and_over_full),
	    cmocka_unit_test(test_rate_zero_never_refills),
	    cmocka_unit_test(test_fill_ns_rounds_up),
	    cmocka_unit_test(test_saturation_boundary),
	    cmocka_unit_test(test_rate_change),
	    cmocka_unit_test(test_refill_is_additive),
	    cmocka_unit_test(test_clamp_to_lower_burst),
	    cmocka_unit_test(test_take),
	    cmocka_unit_test(test_cost),
	    cmocka_unit_test(test_refund_exact),
	    cmocka_unit_test(test_overflow_bounds),
	    cmocka_unit_test(test_refill_at_max_rate_and_burst),
	    cmocka_unit_test(test_refill_matches_reference),
	    cmocka_unit_test(test_long_window_packets),
	    cmocka_unit_test(test_long_window_bytes),
	    cmocka_unit_test(test_long_window_odd_rate),
	    cmocka_unit_test(test_any_window_at_most_burst_plus_rate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
