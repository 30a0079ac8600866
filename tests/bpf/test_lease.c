// SPDX-License-Identifier: MIT
/*
 * Leases of global limits on the real kernel: a lease dies in the XDP
 * program at its expiry with no help from userspace, and on-loss decides
 * what follows (fail-closed denies, fallback spends the reserved share and
 * counts it, fail-open admits and counts bypass). Fencing refuses stale
 * grants; a raised share never deposits tokens; a lowered one clamps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bpf/harness.h"
#include "agent/lease_decide.h"
#include "agent/link.h"

#define GLOBAL_POLICY                                                                              \
	"version: 1\n"                                                                             \
	"limits:\n"                                                                                \
	"  - {name: g, key: none, scope: global, rate: 1000, burst: 1000, %s}\n"                   \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [g]}\n"

/* The same with a per-key limit: every source address has the contract
 * (1000/s, burst 1000) across gateways, this gateway its leased share of it.
 */
#define PER_KEY_POLICY                                                                             \
	"version: 1\n"                                                                             \
	"limits:\n"                                                                                \
	"  - {name: g, key: src-ip, scope: global, rate: 1000, burst: 1000, %s}\n"                 \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [g]}\n"

static int apply_global(struct fx *fx, const char *on_loss)
{
	return hx_applyf_global(fx, GLOBAL_POLICY, on_loss);
}

static int grant(struct fx *fx, uint64_t epoch, uint64_t seq, uint64_t rate, uint64_t burst,
		 uint64_t expiry_ns)
{
	struct lease_grant g = {
	    .epoch = epoch, .seq = seq, .rate = rate, .burst = burst, .expiry_ns = expiry_ns};

	int err = link_lease_apply(&fx->dp, (uint32_t)hx_limit_id(fx, "g"), &g, clock_now_ns());

	hx_clock_catch_up(); /* the share refills from the grant's instant */
	return err;
}

static struct ll_lease lease_of(struct fx *fx)
{
	struct ll_lease l;
	uint32_t id = (uint32_t)hx_limit_id(fx, "g");

	assert_int_equal(bpf_map_lookup_elem_flags(fx->dp.leases_fd, &id, &l, BPF_F_LOCK), 0);
	return l;
}

static int send_n(struct fx *fx, int n)
{
	struct pkt p;
	int passed = 0;

	hx_udp4(&p, "198.18.0.10", "198.18.1.1", 1000, 53, 0);
	for (int i = 0; i < n; i++)
		passed += hx_run(fx, &p, 1) == XDP_PASS;
	return passed;
}

#define FAR_FUTURE (clock_now_ns() + 3600 * NSEC_PER_SEC)

static void test_fail_closed_before_any_grant(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats st;

	assert_int_equal(apply_global(fx, "on-loss: fail-closed"), 0);
	assert_int_equal(send_n(fx, 5), 0);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.denied_pkts, 5);
	assert_int_equal(st.allowed_pkts + st.fallback_pkts + st.bypass_pkts, 0);
}

static void test_grant_then_expiry_stops_admission(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_stats st;
	int first;

	assert_int_equal(apply_global(fx, "on-loss: fail-closed"), 0);
	/* A global pool starts empty: the share is spent only as it refills. */
	assert_int_equal(grant(fx, 1, 1, 1, 5, FAR_FUTURE), 0);
	assert_in_range(send_n(fx, 3), 0, hx_slack(1, t0));
	/* Revive with a burst by letting the lease refill: rate 10^9/s fills in ns. */
	assert_int_equal(grant(fx, 1, 2, 1000000000, 5, FAR_FUTURE), 0);
	first = send_n(fx, 3);
	assert_int_equal(first, 3);
	/* Same share, expiry in the past: the kernel stops at once, tokens or not. */
	assert_int_equal(grant(fx, 1, 3, 1000000000, 5, clock_now_ns() - 1), 0);
	assert_int_equal(send_n(fx, 10), 0);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.denied_pkts >= 10, 1);
	assert_int_equal(st.fallback_pkts + st.bypass_pkts, 0);
}

static void test_fallback_counts_and_limits(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_stats st;
	struct ll_limit_cfg cfg;
	struct hx_pool pl;
	struct ll_lease l;
	int id, passed;

	assert_int_equal(apply_global(fx, "on-loss: fallback, fallback: {rate: 1, burst: 3}"), 0);
	id = hx_limit(fx, "g", &cfg);
	/* Never granted: the fallback share applies, from an empty pool. */
	passed = send_n(fx, 6);
	assert_in_range(passed, 0, hx_slack(1, t0) + 1);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.fallback_pkts, (uint64_t)passed);
	assert_int_equal(st.allowed_pkts, 0);
	assert_int_equal(st.denied_pkts, 6 - (uint64_t)passed);
	/* The fallback pool never holds more than the fallback burst. */
	l = lease_of(fx);
	pl = hx_pool(fx, id, l.fb_gen);
	assert_true(pl.pool.tokens + pl.slices <= 3 * TB_SCALE);
}

static void test_raise_never_deposits_lower_clamps(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg cfg;
	struct ll_lease l;
	struct hx_pool pl;
	int id;

	assert_int_equal(apply_global(fx, "on-loss: fail-closed"), 0);
	id = hx_limit(fx, "g", &cfg);
	assert_int_equal(grant(fx, 1, 1, 1000000000, 100, FAR_FUTURE), 0);
	assert_int_equal(send_n(fx, 1), 1); /* fills to 100 within ns, spends 1 */
	/* Lower the share: the next packet settles and clamps to the new burst. */
	assert_int_equal(grant(fx, 1, 2, 1, 10, FAR_FUTURE), 0);
	assert_int_equal(send_n(fx, 1), 1);
	l = lease_of(fx);
	pl = hx_pool(fx, id, l.gen);
	assert_true(pl.pool.tokens + pl.slices <= 10 * TB_SCALE);
	/* Raise the burst: what is held does not grow beyond what refilled. */
	assert_int_equal(grant(fx, 1, 3, 1, 1000, FAR_FUTURE), 0);
	assert_int_equal(send_n(fx, 1), 1);
	l = lease_of(fx);
	pl = hx_pool(fx, id, l.gen);
	assert_true(pl.pool.tokens + pl.slices <= 10 * TB_SCALE);
}

static void test_fail_open_counts_bypass(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats st;

	assert_int_equal(apply_global(fx, "on-loss: fail-open"), 0);
	assert_int_equal(send_n(fx, 7), 7);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.bypass_pkts, 7);
	assert_int_equal(st.allowed_pkts + st.denied_pkts + st.fallback_pkts, 0);
}

static void test_renewal_keeps_generation(void **state)
{
	struct fx *fx = FX(state);
	struct ll_lease a, b, c;

	assert_int_equal(apply_global(fx, "on-loss: fail-closed"), 0);
	assert_int_equal(grant(fx, 1, 1, 1000, 100, FAR_FUTURE), 0);
	a = lease_of(fx);
	assert_int_equal(grant(fx, 1, 2, 1000, 100, FAR_FUTURE), 0);
	b = lease_of(fx);
	assert_int_equal(a.gen, b.gen);
	assert_int_equal(b.seq, 2);
	assert_int_equal(grant(fx, 1, 3, 500, 100, FAR_FUTURE), 0);
	c = lease_of(fx);
	assert_int_not_equal(c.gen, b.gen);
	assert_int_equal(c.prev_gen, b.gen);
}

static void test_fencing_refuses_stale_grants(void **state)
{
	struct fx *fx = FX(state);
	struct ll_lease l;

	assert_int_equal(apply_global(fx, "on-loss: fail-closed"), 0);
	assert_int_equal(grant(fx, 2, 5, 1000, 100, FAR_FUTURE), 0);
	assert_int_equal(grant(fx, 2, 5, 9999, 100, FAR_FUTURE), -ESTALE); /* replay */
	assert_int_equal(grant(fx, 2, 4, 9999, 100, FAR_FUTURE), -ESTALE); /* reordered */
	assert_int_equal(grant(fx, 1, 9, 9999, 100, FAR_FUTURE), -ESTALE); /* older epoch */
	assert_int_equal(link_epoch_see(&fx->dp, 3, 0), 0);
	assert_int_equal(grant(fx, 2, 6, 9999, 100, FAR_FUTURE), -ESTALE); /* epoch now old */
	l = lease_of(fx);
	assert_int_equal(l.rate, 1000);
	assert_int_equal(grant(fx, 3, 1, 2000, 100, FAR_FUTURE), 0);
	l = lease_of(fx);
	assert_int_equal(l.rate, 2000);
}

/* A limit id that a removed global limit held starts with a clean fence for
 * its next global limit: the coordinator numbers a new limit's grants from 1
 * again, and they must not be taken for replays of the old limit's.
 */
static void test_reused_id_starts_fresh_fence(void **state)
{
	struct fx *fx = FX(state);
	struct lease_grant g = {.epoch = 1, .seq = 5, .rate = 10, .burst = 10};
	const char *fmt = "version: %d\nlimits:\n  - {name: %s, key: none, scope: global, rate: "
			  "100, burst: 100}\nrules:\n  - {name: all, limits: [%s]}\n";
	static const char *const names[] = {"g", "h", "k"};
	int id_g = -1;

	g.expiry_ns = FAR_FUTURE;
	for (int v = 1; v <= 3; v++) {
		assert_int_equal(hx_applyf_global(fx, fmt, v, names[v - 1], names[v - 1]), 0);
		if (v == 1) {
			id_g = hx_limit_id(fx, "g");
			assert_int_equal(
			    link_lease_apply(&fx->dp, (uint32_t)id_g, &g, clock_now_ns()), 0);
		}
	}
	/* k took g's id (h the other one while g's buckets were reaped). */
	assert_int_equal(hx_limit_id(fx, "k"), id_g);
	g.seq = 1;
	assert_int_equal(link_lease_apply(&fx->dp, (uint32_t)id_g, &g, clock_now_ns()), 0);
	/* ... and fencing still refuses a replay of k's own grant. */
	assert_int_equal(link_lease_apply(&fx->dp, (uint32_t)id_g, &g, clock_now_ns()), -ESTALE);
}

/* ---- per-key global limits ---- */

/* n packets from source src; returns how many passed. */
static int send_from(struct fx *fx, const char *src, int n)
{
	struct pkt p;
	int passed = 0;

	hx_udp4(&p, src, "198.18.1.1", 1000, 53, 0);
	for (int i = 0; i < n; i++)
		passed += hx_run(fx, &p, 1) == XDP_PASS;
	return passed;
}

/* Every key spends this gateway's share of its own contract: a burst of the
 * share each, not of the contract, and nothing before the first grant.
 */
static void test_per_key_share_per_key(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_stats st;

	assert_int_equal(hx_applyf_global(fx, PER_KEY_POLICY, "on-loss: fail-closed"), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 4), 0); /* never granted */
	assert_int_equal(grant(fx, 1, 1, 1, 5, FAR_FUTURE), 0);
	assert_in_range(send_from(fx, "198.18.0.10", 8), 5, 5 + hx_slack(1, t0));
	assert_in_range(send_from(fx, "198.18.0.11", 8), 5, 5 + hx_slack(1, t0));
	assert_in_range(send_from(fx, "198.18.0.12", 8), 5, 5 + hx_slack(1, t0));
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.allowed_pkts + st.denied_pkts, 4 + 24);
	assert_int_equal(st.new_keys, 3);
}

/* The lease dies in the kernel for every key at once, whatever each key's
 * bucket holds; on-loss then applies per key.
 */
static void test_per_key_expiry(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats st;

	assert_int_equal(hx_applyf_global(fx, PER_KEY_POLICY, "on-loss: fail-closed"), 0);
	assert_int_equal(grant(fx, 1, 1, 1, 50, FAR_FUTURE), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 3), 3);
	assert_int_equal(grant(fx, 1, 2, 1, 50, clock_now_ns() - 1), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 3), 0); /* 47 tokens left: dead */
	assert_int_equal(send_from(fx, "198.18.0.20", 3), 0); /* a new key too */
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.allowed_pkts, 3);
	assert_int_equal(st.denied_pkts, 6);
	assert_int_equal(st.fallback_pkts + st.bypass_pkts, 0);
}

/* The datapath's clock is the coarse one, which lags CLOCK_MONOTONIC by up to
 * a tick (bpf/clock.h): a lease must die at its expiry all the same, never a
 * tick late. A share that expired an instant ago by CLOCK_MONOTONIC, packets
 * sent at once: all denied. A try counts only when the coarse clock was still
 * before the expiry after the packets (so a check by the coarse clock alone
 * would have admitted them); with a 4 ms tick most tries do.
 */
static void expiry_on_lagging_clock(struct fx *fx, const char *policy)
{
	uint32_t id;
	int counted = 0;

	assert_int_equal(hx_applyf_global(fx, policy, "on-loss: fail-closed"), 0);
	id = (uint32_t)hx_limit_id(fx, "g");
	assert_int_equal(grant(fx, 1, 1, 1000000000, 1000, FAR_FUTURE), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 3), 3); /* live: tokens to spend */
	for (uint64_t seq = 2; seq < 200 && counted < 5; seq++) {
		struct lease_grant g = {.epoch = 1, .seq = seq, .rate = 1000000000, .burst = 1000};
		uint64_t exp = clock_now_ns();
		int passed;

		g.expiry_ns = exp;
		assert_int_equal(link_lease_apply(&fx->dp, id, &g, clock_now_ns()), 0);
		passed = send_from(fx, "198.18.0.10", 3);
		if (hx_coarse_ns() >= exp)
			continue; /* a tick came meanwhile: proves nothing */
		counted++;
		assert_int_equal(passed, 0);
		/* Live again, far ahead, so the next try has tokens to lose. */
		g.seq = ++seq;
		g.expiry_ns = FAR_FUTURE;
		assert_int_equal(link_lease_apply(&fx->dp, id, &g, clock_now_ns()), 0);
	}
	assert_true(counted >= 5);
}

static void test_expiry_exact_on_lagging_clock(void **state)
{
	expiry_on_lagging_clock(FX(state), GLOBAL_POLICY);
}

static void test_per_key_expiry_exact_on_lagging_clock(void **state)
{
	expiry_on_lagging_clock(FX(state), PER_KEY_POLICY);
}

static void test_per_key_fail_open_and_fallback(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0;
	struct ll_limit_stats st;

	assert_int_equal(hx_applyf_global(fx, PER_KEY_POLICY, "on-loss: fail-open"), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 4), 4);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.bypass_pkts, 4); /* every one counted */

	assert_int_equal(hx_applyf_global(fx,
				   "version: 2\nlimits:\n  - {name: g, key: src-ip, scope: global, "
				   "rate: 1000, burst: 1000, %s}\nrules:\n  - {name: all, limits: "
				   "[g]}\n",
				   "on-loss: fallback, fallback: {rate: 1, burst: 3}"),
			 0);
	/* Granted, then dead: each key spends the fallback share, its tokens
	 * from the lease clamped to the fallback burst.
	 */
	assert_int_equal(grant(fx, 1, 1, 1, 50, FAR_FUTURE), 0);
	t0 = clock_now_ns();
	assert_int_equal(send_from(fx, "198.18.0.10", 2), 2);
	assert_int_equal(grant(fx, 1, 2, 1, 50, clock_now_ns() - 1), 0);
	assert_in_range(send_from(fx, "198.18.0.10", 6), 3, 3 + hx_slack(1, t0));
	assert_in_range(send_from(fx, "198.18.0.11", 6), 3, 3 + hx_slack(1, t0));
	st = hx_stats_of(fx, "g");
	assert_in_range(st.fallback_pkts, 6, 6 + 2 * hx_slack(1, t0));
}

/* A changed share is a new generation: a raise deposits nothing into a key's
 * bucket (a spent key stays spent), a new key gets the new share's burst, a
 * lower share clamps.
 */
static void test_per_key_raise_never_deposits(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();

	assert_int_equal(hx_applyf_global(fx, PER_KEY_POLICY, "on-loss: fail-closed"), 0);
	assert_int_equal(grant(fx, 1, 1, 1, 5, FAR_FUTURE), 0);
	assert_in_range(send_from(fx, "198.18.0.10", 6), 5, 5 + hx_slack(1, t0));
	assert_int_equal(grant(fx, 1, 2, 1, 40, FAR_FUTURE), 0);
	assert_in_range(send_from(fx, "198.18.0.10", 6), 0, hx_slack(1, t0));
	assert_in_range(send_from(fx, "198.18.0.11", 50), 40, 40 + hx_slack(1, t0));
	/* Lower: the new key's 0 + refill stays; an untouched full key clamps. */
	assert_in_range(send_from(fx, "198.18.0.12", 1), 1, 1);
	assert_int_equal(grant(fx, 1, 3, 1, 4, FAR_FUTURE), 0);
	assert_in_range(send_from(fx, "198.18.0.12", 10), 4, 4 + hx_slack(1, t0));
}

/* One rule, three kinds of limit: a per-key global one, a global aggregate
 * and a local per-key one. A packet pays all or none: when the aggregate
 * refuses, the per-key debits are given back exactly.
 */
static void test_per_key_mixed_rule_all_or_nothing(void **state)
{
	struct fx *fx = FX(state);
	uint32_t pk = 0, agg = 0;
	struct ll_limit_cfg cpk, cloc;
	struct ll_bucket b;
	struct ll_key k;
	struct lease_grant g = {.epoch = 1, .seq = 1, .rate = 0, .burst = 10};

	assert_int_equal(
	    hx_applyf_global(fx,
			     "version: 1\nlimits:\n"
			     "  - {name: pk, key: src-ip, scope: global, rate: 1000, burst: 100}\n"
			     "  - {name: agg, key: none, scope: global, rate: 1000, burst: 100}\n"
			     "  - {name: loc, key: src-ip, rate: 1, burst: 100}\n"
			     "rules:\n  - {name: all, limits: [pk, agg, loc]}\n"),
	    0);
	pk = (uint32_t)hx_limit(fx, "pk", &cpk);
	agg = (uint32_t)hx_limit_id(fx, "agg");
	hx_limit(fx, "loc", &cloc);
	g.expiry_ns = FAR_FUTURE;
	assert_int_equal(link_lease_apply(&fx->dp, pk, &g, clock_now_ns()), 0);
	/* The aggregate's pool starts empty (a global pool is spent only as
	 * leased): a share of burst 3 at a rate that refills it at once.
	 */
	g.rate = 1000000000;
	g.burst = 3;
	assert_int_equal(link_lease_apply(&fx->dp, agg, &g, clock_now_ns()), 0);
	g.seq = 2;
	g.rate = 0;
	hx_clock_catch_up();
	assert_int_equal(send_from(fx, "198.18.0.10", 1), 1);
	/* Rate 0 from now on: the pool keeps what refilled up to this grant (its
	 * burst, 3), and nothing more.
	 */
	assert_int_equal(link_lease_apply(&fx->dp, agg, &g, clock_now_ns()), 0);
	assert_int_equal(send_from(fx, "198.18.0.10", 6), 3);
	assert_int_equal(hx_stats_of(fx, "agg").denied_pkts, 3);
	assert_int_equal(hx_stats_of(fx, "pk").allowed_pkts, 4);
	assert_int_equal(hx_stats_of(fx, "pk").denied_pkts, 0);
	/* The per-key buckets paid for the 4 admitted packets only: the 3 the
	 * aggregate refused were given back.
	 */
	k = hx_key_addr(cpk.uid, 4, "198.18.0.10", 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	assert_int_equal(b.tokens / TB_SCALE, 10 - 4); /* rate 0: no refill */
	k = hx_key_addr(cloc.uid, 4, "198.18.0.10", 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	assert_in_range(b.tokens / TB_SCALE, 100 - 4 - 1, 100 - 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_fail_closed_before_any_grant, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_grant_then_expiry_stops_admission, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_fallback_counts_and_limits, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_raise_never_deposits_lower_clamps, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_fail_open_counts_bypass, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_renewal_keeps_generation, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_fencing_refuses_stale_grants, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_reused_id_starts_fresh_fence, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_share_per_key, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_expiry, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_expiry_exact_on_lagging_clock, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_expiry_exact_on_lagging_clock, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_fail_open_and_fallback, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_raise_never_deposits, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_mixed_rule_all_or_nothing, hx_setup,
					    hx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
