// SPDX-License-Identifier: MIT
/*
 * The per-key denied counter (ll_bucket.denied, docs/maps.md) on the real
 * kernel: it counts the denials decided under the bucket's lock, in the
 * limit's unit (packets, or bytes), and not the ones the deny hint decides
 * without the lock (a sample: at most one per hint period and CPU); the
 * limit's own counters still count every denial. In an all-or-nothing rule
 * the denying limit's bucket counts its denial, and the buckets whose
 * debits are given back (refunds) or that the hint spares (never charged)
 * count none: their spent is exactly what was admitted, their denied 0.
 * Counts that a 1 token/s refill could move while the test runs get that
 * slack from the clock (hx_slack), never a fixed guess.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bpf/harness.h"

#define S4 "198.18.0.1"
#define D4 "198.19.0.1"

static struct ll_bucket bucket(struct fx *fx, const char *limit, const char *src)
{
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;

	hx_limit(fx, limit, &cfg);
	k = hx_key_addr(cfg.uid, 4, src, 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	return b;
}

/* Let the bucket of src under limit forget its hint (as if the hint's
 * instant had passed) while it still holds nothing: the next packet goes to
 * the lock and is denied there.
 */
static void expire_hint(struct fx *fx, const char *limit, const char *src)
{
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;
	uint64_t now = clock_now_ns();

	hx_limit(fx, limit, &cfg);
	k = hx_key_addr(cfg.uid, 4, src, 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	b.tokens = 0;
	b.last_ns = now;
	b.deny_hint = (now - 1000000) & ~LL_HINT_CLASS_MASK;
	assert_int_equal(bpf_map_update_elem(fx->dp.buckets_fd, &k, &b, BPF_F_LOCK), 0);
	hx_clock_catch_up(); /* passed by the packet's clock too */
}

/* Packets mode: of a flood past the burst, the first denial is decided under
 * the lock and counted; the hint it leaves refuses the rest unlocked,
 * uncounted. Once the hint has passed, the next denial is counted again.
 */
static void test_denied_sampled(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_limit_stats st;
	struct ll_bucket b;
	struct pkt p;
	int n;

	assert_int_equal(hx_applyf(fx, "version: 1\n"
				       "limits:\n"
				       "  - {name: l, key: src-ip, rate: 1, burst: 2}\n"
				       "rules:\n"
				       "  - {name: all, limits: [l]}\n"),
			 0);
	hx_udp4(&p, S4, D4, 1000, 53, 0);
	n = hx_send(fx, &p, 10, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(n, 2, 2 + slack);
	b = bucket(fx, "l", S4);
	st = hx_stats_of(fx, "l");
	assert_int_equal(st.denied_pkts, 10 - n); /* the limit counts every denial */
	assert_int_equal(b.spent, n);
	/* One locked denial, plus one for each refill that let a packet in. */
	assert_in_range(b.denied, 1, 1 + slack);
	assert_true(b.deny_hint != 0);

	expire_hint(fx, "l", S4);
	n = hx_send(fx, &p, 6, NULL);
	assert_int_equal(n, 0);
	assert_int_equal(bucket(fx, "l", S4).denied, b.denied + 1);
	assert_int_equal(hx_stats_of(fx, "l").denied_pkts, st.denied_pkts + 6);
}

/* Bytes mode: the count is in bytes, like spent; a smaller frame the bucket
 * can still pay is admitted (and clears the hint), the next large one is
 * denied under the lock again.
 */
static void test_denied_bytes(void **state)
{
	struct fx *fx = FX(state);
	struct ll_bucket b;
	struct pkt big, small;

	/* 1 byte/s: no refill a test can see changes a 42-byte decision. */
	assert_int_equal(hx_applyf(fx,
				   "version: 1\n"
				   "limits:\n"
				   "  - {name: l, key: src-ip, unit: bytes, rate: 1, burst: 150}\n"
				   "rules:\n"
				   "  - {name: all, limits: [l]}\n"),
			 0);
	hx_udp4(&big, S4, D4, 1000, 53, 58);  /* 100 bytes */
	hx_udp4(&small, S4, D4, 1000, 53, 0); /* 42 bytes */
	assert_int_equal(big.len, 100);
	assert_int_equal(small.len, 42);
	assert_int_equal(hx_send(fx, &big, 1, NULL), 1);
	assert_int_equal(hx_send(fx, &big, 4, NULL), 0); /* 1 under the lock, 3 by the hint */
	b = bucket(fx, "l", S4);
	assert_int_equal(b.spent, 100);
	assert_int_equal(b.denied, 100);
	assert_int_equal(hx_stats_of(fx, "l").denied_bytes, 400);
	assert_int_equal(hx_send(fx, &small, 1, NULL), 1); /* 50 left: admitted */
	assert_int_equal(hx_send(fx, &big, 2, NULL), 0);   /* 1 under the lock, 1 by the hint */
	b = bucket(fx, "l", S4);
	assert_int_equal(b.spent, 142);
	assert_int_equal(b.denied, 200);
}

/* [a burst 10, f flow burst 10, b burst 3]: b denies from the 4th packet.
 * That packet debits a and f, b denies it under its lock (counted), a and
 * f are refunded; later packets are refused by b's hint before a or f is
 * touched. a and f: spent = admitted, denied 0; b: denied 1 (sampled), its
 * limit counter every denial.
 */
static void test_denied_all_or_nothing(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_limit_cfg cf;
	struct ll_flow_key fk;
	struct ll_bucket ba, bf, bb;
	struct pkt p;
	int n;

	assert_int_equal(hx_apply(fx, "version: 1\n"
				      "limits:\n"
				      "  - {name: a, key: src-ip, rate: 1, burst: 10}\n"
				      "  - {name: f, key: flow, rate: 1, burst: 10}\n"
				      "  - {name: b, key: src-ip, rate: 1, burst: 3}\n"
				      "rules:\n"
				      "  - {name: r, limits: [a, f, b]}\n"),
			 0);
	hx_udp4(&p, S4, D4, 1000, 53, 0);
	n = hx_send(fx, &p, 8, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(n, 3, 3 + slack);

	ba = bucket(fx, "a", S4);
	bb = bucket(fx, "b", S4);
	hx_limit(fx, "f", &cf);
	memset(&fk, 0, sizeof(fk));
	fk.limit_uid = cf.uid;
	fk.family = 4;
	fk.proto = IPPROTO_UDP;
	fk.sport = htons(1000);
	fk.dport = htons(53);
	hx_v4_mapped(fk.addr, S4, 32);
	hx_v4_mapped(fk.addr2, D4, 32);
	assert_int_equal(hx_flow_bucket(fx, &fk, &bf), 0);

	assert_int_equal(ba.spent, n); /* the 4th packet's debit given back */
	assert_int_equal(bf.spent, n);
	assert_int_equal(ba.denied, 0); /* refunded, not denied */
	assert_int_equal(bf.denied, 0);
	assert_int_equal(bb.spent, n);
	assert_in_range(bb.denied, 1, 1 + slack);
	assert_int_equal(hx_stats_of(fx, "b").denied_pkts, 8 - n);
	assert_int_equal(hx_stats_of(fx, "a").denied_pkts, 0);

	/* Past b's hint, the next packet debits a and f again, is denied by b
	 * under the lock (counted), and a and f are refunded once more.
	 */
	expire_hint(fx, "b", S4);
	assert_int_equal(hx_send(fx, &p, 1, NULL), 0);
	assert_int_equal(bucket(fx, "b", S4).denied, bb.denied + 1);
	ba = bucket(fx, "a", S4);
	assert_int_equal(hx_flow_bucket(fx, &fk, &bf), 0);
	assert_int_equal(ba.spent, n);
	assert_int_equal(bf.spent, n);
	assert_int_equal(ba.denied, 0);
	assert_int_equal(bf.denied, 0);
}

/* A shadow limit's bucket counts what it would have denied (the packets
 * pass); an enforcing limit after it in the rule is still charged.
 */
static void test_denied_shadow(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_bucket bs, be;
	struct pkt p;

	assert_int_equal(hx_apply(fx,
				  "version: 1\n"
				  "limits:\n"
				  "  - {name: s, key: src-ip, rate: 1, burst: 2, mode: shadow}\n"
				  "  - {name: e, key: src-ip, rate: 1, burst: 100}\n"
				  "rules:\n"
				  "  - {name: r, limits: [s, e]}\n"),
			 0);
	hx_udp4(&p, S4, D4, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &p, 6, NULL), 6);
	slack = hx_slack(1, t0);
	bs = bucket(fx, "s", S4);
	be = bucket(fx, "e", S4);
	assert_in_range(bs.denied, 1, 1 + slack);
	assert_in_range(bs.spent, 2, 2 + slack);
	assert_int_equal(be.spent, 6);
	assert_int_equal(be.denied, 0);
	assert_int_equal(hx_stats_of(fx, "s").shadow_denied_pkts, 6 - bs.spent);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_denied_sampled, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_denied_bytes, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_denied_all_or_nothing, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_denied_shadow, hx_setup, hx_teardown),
	};

	return cmocka_run_group_tests_name("denied", tests, NULL, NULL);
}
