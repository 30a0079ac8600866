// SPDX-License-Identifier: MIT
/*
 * Per-key overrides of local limits on the real kernel (reference §4,
 * "overrides"; docs/design.md): a key covered by an override is charged
 * with its contract (the longest prefix wins; unlimited admits, deny
 * denies), every other key with the limit's. A reload that changes an
 * override migrates the key's bucket without a fresh burst (a raise
 * deposits nothing, a lower burst clamps, a removed override returns the
 * key to the limit's contract), one that leaves it alone leaves the bucket
 * alone, a bad file is refused and the running policy keeps enforcing, and
 * a change of unit starts the limit afresh with empty buckets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bpf/harness.h"

#define DST	 "198.18.200.1"
#define OVR_FILE "/tmp/leaseline-test-overrides.txt"

static void write_ovr(const char *text)
{
	FILE *f = fopen(OVR_FILE, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Local src-ip limit c (5/s, burst 10 per key) with OVR_FILE, version v. */
static int apply_c(struct fx *fx, int v, const char *unit)
{
	return hx_applyf(fx,
			 "version: %d\nlimits:\n"
			 "  - {name: c, key: src-ip, rate: 5, burst: 10, unit: %s, overrides: %s}\n"
			 "rules:\n  - {name: all, limits: [c]}\n",
			 v, unit, OVR_FILE);
}

static int send_src(struct fx *fx, const char *src, int n)
{
	struct pkt p;

	hx_udp4(&p, src, DST, 1000, 53, 16);
	return hx_send(fx, &p, n, NULL);
}

static struct ll_bucket bucket_of(struct fx *fx, const char *src)
{
	struct ll_limit_cfg cfg;
	struct ll_key k;
	struct ll_bucket b;

	assert_int_equal(hx_limit(fx, "c", &cfg), 0);
	k = hx_key_addr(cfg.uid, 4, src, 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	return b;
}

static void test_tiers(void **state)
{
	struct fx *fx = FX(state);

	write_ovr("# tiers\n"
		  "198.18.1.0/24    rate 100 burst 50\n"
		  "198.18.1.128/25  rate 1 burst 3   # the longest prefix wins\n"
		  "198.18.2.0/24    unlimited\n"
		  "198.18.3.0/24    deny\n"
		  "2001:db8::/48    rate 100 burst 7\n");
	assert_int_equal(apply_c(fx, 1, "packets"), 0);
	assert_int_equal(send_src(fx, "198.18.1.5", 100), 50);
	assert_int_equal(send_src(fx, "198.18.1.200", 100), 3);
	assert_int_equal(send_src(fx, "198.18.2.7", 1000), 1000);
	assert_int_equal(send_src(fx, "198.18.3.9", 100), 0);
	assert_int_equal(send_src(fx, "198.18.4.1", 100), 10); /* the limit's own */
	{
		struct pkt p;

		hx_udp6(&p, "2001:db8:0:1::9", "2001:db8:ff::1", 1000, 53);
		assert_int_equal(hx_send(fx, &p, 100, NULL), 7);
		hx_udp6(&p, "2001:db8:1::9", "2001:db8:ff::1", 1000, 53);
		assert_int_equal(hx_send(fx, &p, 100, NULL), 10);
	}
}

static void test_reload_migrates(void **state)
{
	struct fx *fx = FX(state);
	struct ll_bucket b0, b1;

	/* Refills at 1/s: what a key earns while a reload runs stays below 1. */
	write_ovr("198.18.1.0/24 rate 1 burst 50\n"
		  "198.18.5.0/24 rate 1 burst 50\n"
		  "198.18.6.0/24 rate 1 burst 40\n");
	assert_int_equal(apply_c(fx, 1, "packets"), 0);
	assert_int_equal(send_src(fx, "198.18.1.5", 50), 50); /* spent */
	assert_int_equal(send_src(fx, "198.18.5.5", 1), 1);   /* 49 left */
	assert_int_equal(send_src(fx, "198.18.6.5", 1), 1);   /* 39 left */
	b0 = bucket_of(fx, "198.18.6.5");
	/* 1: raised (no deposit); 5: lowered burst (clamps); 6: unchanged. */
	write_ovr("198.18.1.0/24 rate 1 burst 80\n"
		  "198.18.5.0/24 rate 1 burst 20\n"
		  "198.18.6.0/24 rate 1 burst 40\n");
	assert_int_equal(apply_c(fx, 2, "packets"), 0);
	assert_true(send_src(fx, "198.18.1.5", 20) <= 1); /* a few ms of 1/s at most */
	assert_int_equal(send_src(fx, "198.18.5.5", 100), 20);
	b1 = bucket_of(fx, "198.18.6.5");
	assert_int_equal(b1.o_gen, b0.o_gen); /* its override did not change */
	assert_int_equal(send_src(fx, "198.18.6.5", 100), 39);
	/* The override of 5 removed: the limit's contract (burst 10), no fresh burst. */
	write_ovr("198.18.1.0/24 rate 1 burst 80\n");
	assert_int_equal(apply_c(fx, 3, "packets"), 0);
	assert_true(send_src(fx, "198.18.5.5", 20) <= 1);
	/* A key never seen gets the limit's burst. */
	assert_int_equal(send_src(fx, "198.18.5.6", 20), 10);
}

static void test_bad_file_keeps_running(void **state)
{
	struct fx *fx = FX(state);
	struct ll_state st;

	write_ovr("198.18.3.0/24 deny\n");
	assert_int_equal(apply_c(fx, 1, "packets"), 0);
	write_ovr("198.18.3.0/24 den\n");
	assert_int_equal(apply_c(fx, 2, "packets"), -EINVAL);
	assert_int_equal(dp_state_read(fx->dp.state_fd, &st), 0);
	assert_int_equal(st.version, 1);
	assert_int_equal(send_src(fx, "198.18.3.1", 10), 0); /* still denied */
}

/* Packets and bytes are different tokens: a limit whose unit changes
 * starts afresh with empty buckets, refilling from the reload.
 */
static void test_unit_change(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg a, b;
	struct pkt p;

	write_ovr("");
	assert_int_equal(apply_c(fx, 1, "packets"), 0);
	assert_int_equal(send_src(fx, "198.18.4.1", 3), 3);
	assert_int_equal(hx_limit(fx, "c", &a), 0);
	assert_int_equal(apply_c(fx, 2, "bytes"), 0);
	assert_int_equal(hx_limit(fx, "c", &b), 0);
	assert_true(b.uid != a.uid);
	assert_true(b.flags & LL_LIM_EMPTY_START);
	/* burst 10 bytes, 5 bytes/s: a frame of 60+ bytes never fits anyway;
	 * so use a key of the new uid and look at its bucket: empty.
	 */
	hx_udp4(&p, "198.18.4.2", DST, 1000, 53, 16);
	assert_int_equal(hx_send(fx, &p, 1, NULL), 0);
	{
		struct ll_key k = hx_key_addr(b.uid, 4, "198.18.4.2", 32);
		struct ll_bucket bk;

		assert_int_equal(hx_bucket(fx, &k, &bk), 0);
		assert_true(bk.tokens < 10 * TB_SCALE / 2); /* refilled from the reload only */
	}
}

/* Local dst-port limit p (rate 1, burst 10 per port) with OVR_FILE, version v. */
static int apply_p(struct fx *fx, int v)
{
	return hx_applyf(fx,
			 "version: %d\nlimits:\n"
			 "  - {name: p, key: dst-port, rate: 1, burst: 10, overrides: %s}\n"
			 "rules:\n  - {name: all, match: {proto: udp}, limits: [p]}\n",
			 v, OVR_FILE);
}

static int send_port(struct fx *fx, uint16_t port, int n)
{
	struct pkt p;

	hx_udp4(&p, "198.18.0.1", DST, 1000, port, 16);
	return hx_send(fx, &p, n, NULL);
}

/* Overrides of a dst-port limit: a port, a range (split into blocks), the
 * edges of a range, unlimited and deny; a reload migrates a port's bucket
 * as an address key's (a lower burst clamps, no fresh burst); IPv6 packets
 * to the same port share its contract.
 */
static void test_dst_port(void **state)
{
	struct fx *fx = FX(state);
	struct pkt p;

	write_ovr("# ports\n"
		  "53          rate 1 burst 30\n"
		  "8000-8099   deny\n"
		  "9000-9999   unlimited\n"
		  "1000-1002   rate 1 burst 3\n");
	assert_int_equal(apply_p(fx, 1), 0);
	assert_int_equal(send_port(fx, 53, 100), 30);
	assert_int_equal(send_port(fx, 54, 100), 10); /* the limit's own */
	assert_int_equal(send_port(fx, 8000, 5), 0);
	assert_int_equal(send_port(fx, 8063, 5), 0);
	assert_int_equal(send_port(fx, 8099, 5), 0);
	assert_int_equal(send_port(fx, 8100, 100), 10);
	assert_int_equal(send_port(fx, 7999, 100), 10);
	assert_int_equal(send_port(fx, 9000, 500), 500);
	assert_int_equal(send_port(fx, 9999, 500), 500);
	assert_int_equal(send_port(fx, 10000, 100), 10);
	assert_int_equal(send_port(fx, 1000, 10), 3);
	assert_int_equal(send_port(fx, 1002, 10), 3);
	assert_int_equal(send_port(fx, 1003, 20), 10);
	hx_udp6(&p, "2001:db8::9", "2001:db8:ff::1", 1000, 9500);
	assert_int_equal(hx_send(fx, &p, 300, NULL), 300);
	/* Reload: 54 (spent at the limit's 10) gets burst 40 (no deposit); 1003
	 * leaves the limit for deny; 53 keeps its contract and its bucket.
	 */
	write_ovr("53 rate 1 burst 30\n54 rate 1 burst 40\n1003 deny\n");
	assert_int_equal(apply_p(fx, 2), 0);
	assert_true(send_port(fx, 54, 20) <= 1);
	assert_int_equal(send_port(fx, 1003, 5), 0);
	assert_true(send_port(fx, 53, 20) <= 1);
	/* The deny gone: 8000 returns to the limit's contract without a fresh
	 * burst; a port of the old range never seen gets the limit's burst.
	 */
	assert_true(send_port(fx, 8000, 100) <= 1);
	assert_int_equal(send_port(fx, 8001, 100), 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tiers, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_reload_migrates, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_bad_file_keeps_running, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_unit_change, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_dst_port, hx_setup, hx_teardown),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);

	unlink(OVR_FILE);
	return rc;
}
