// SPDX-License-Identifier: MIT
/*
 * Host tests of user/coord/telemetry.c: the waste of a report interval and
 * when no interval is measured, the outstanding budget (the overshoot
 * bound) of a real ledger, and the fairness cohorts.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "lib/monotonic.h"
#include "coord/ledger.h"
#include "coord/telemetry.h"

#define S   NSEC_PER_SEC
#define GAP (4 * S)

static void test_key(void **state)
{
	(void)state;
	assert_int_not_equal(tele_key(""), 0);
	assert_int_not_equal(tele_key("dns-total"), tele_key("per-client"));
	assert_int_equal(tele_key("dns-total"), tele_key("dns-total"));
}

static void test_interval_waste(void **state)
{
	struct tele_slot s = {};
	uint32_t k = tele_key("total");

	(void)state;
	/* The first report is a baseline only. */
	assert_true(tele_interval(&s, k, 1000, 10 * S, GAP, 100) == 0);
	assert_true(s.rate < 0);
	/* 1 s at a committed 100/s, 30 admitted: 70 wasted, 30/s. */
	assert_true(fabs(tele_interval(&s, k, 1030, 11 * S, GAP, 100) - 70) < 1e-9);
	assert_true(fabs(s.rate - 30) < 1e-9);
	/* Admitting more than the rate share (the burst): no negative waste. */
	assert_true(tele_interval(&s, k, 1230, 12 * S, GAP, 100) == 0);
	assert_true(fabs(s.rate - 200) < 1e-9);
	/* Half a second, nothing admitted: half the share. */
	assert_true(fabs(tele_interval(&s, k, 1230, 12 * S + S / 2, GAP, 100) - 50) < 1e-9);
}

static void test_interval_none(void **state)
{
	struct tele_slot s = {};
	uint32_t k = tele_key("total");

	(void)state;
	tele_interval(&s, k, 500, 10 * S, GAP, 100);
	/* Totals went back: a new incarnation counts from 0. */
	assert_true(tele_interval(&s, k, 10, 11 * S, GAP, 100) == 0);
	assert_true(s.rate < 0);
	/* and the next interval counts from there. */
	assert_true(fabs(tele_interval(&s, k, 20, 12 * S, GAP, 100) - 90) < 1e-9);
	/* A gap beyond max_gap: the holder was gone, its grants expired. */
	assert_true(tele_interval(&s, k, 20, 17 * S, GAP, 100) == 0);
	assert_true(s.rate < 0);
	/* A reload moved another limit into the slot. */
	assert_true(tele_interval(&s, tele_key("other"), 20, 18 * S, GAP, 100) == 0);
	assert_true(s.rate < 0);
	/* The same instant twice: nothing to divide by. */
	assert_true(tele_interval(&s, tele_key("other"), 30, 18 * S, GAP, 100) == 0);
	assert_true(s.rate < 0);
}

static void test_outstanding(void **state)
{
	struct ledger l;
	struct ledger_grant g;
	uint32_t n = 99;

	(void)state;
	assert_int_equal(ledger_init(&l, 1000, 100), 0);
	assert_int_equal(ledger_reserve(&l, 3), 0);
	for (int i = 0; i < 3; i++)
		l.h[i].active = true;
	assert_true(tele_outstanding(&l, 0, &n) == 0);
	assert_int_equal(n, 0);
	/* Two spenders, live for 1 s from t = 0. */
	assert_true(ledger_issue(&l, 0, 600, 60, 0, S, &g));
	assert_true(ledger_issue(&l, 1, 400, 40, 0, S, &g));
	/* Half way: 60 + 600 x 0.5 + 40 + 400 x 0.5. */
	assert_true(fabs(tele_outstanding(&l, S / 2, &n) - 600) < 1e-6);
	assert_int_equal(n, 2);
	/* A zero share is no spender. */
	assert_true(ledger_issue(&l, 2, 0, 0, S / 2, S, &g));
	tele_outstanding(&l, S / 2, &n);
	assert_int_equal(n, 2);
	/* At the deadline only the bursts remain; past it, nothing. */
	assert_true(fabs(tele_outstanding(&l, S, &n) - 100) < 1e-6);
	assert_true(tele_outstanding(&l, S + 1, &n) == 0);
	assert_int_equal(n, 0);
	ledger_free(&l);
}

static void test_fair(void **state)
{
	struct tele_fair f = {};

	(void)state;
	/* Light: demand 51 (50 offered + 1) under a target of 300: fair 50. */
	tele_fair_add(&f, 51, 300, 50);
	/* Heavy: demand 900 over a target of 300: fair 300, got 240. */
	tele_fair_add(&f, 900, 300, 240);
	tele_fair_add(&f, 700, 300, 300);
	/* Not measured: left out. */
	tele_fair_add(&f, 700, 300, -1);
	assert_int_equal(f.holders[TELE_LIGHT], 1);
	assert_int_equal(f.holders[TELE_HEAVY], 2);
	assert_true(fabs(f.admitted[TELE_LIGHT] / f.fair[TELE_LIGHT] - 1.0) < 1e-9);
	assert_true(fabs(f.admitted[TELE_HEAVY] / f.fair[TELE_HEAVY] - 0.9) < 1e-9);
	assert_string_equal(tele_cohort_name(TELE_HEAVY), "heavy");
	assert_string_equal(telemetry_fail_name(COORD_FAIL_RING_FULL), "ring_full");
	assert_string_equal(telemetry_fail_name(COORD_FAIL_MAX), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_key),		  cmocka_unit_test(test_interval_waste),
	    cmocka_unit_test(test_interval_none), cmocka_unit_test(test_outstanding),
	    cmocka_unit_test(test_fair),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
