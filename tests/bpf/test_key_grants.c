// SPDX-License-Identifier: MIT
/*
 * The per-key buckets' spent counter on the real kernel (docs/design.md,
 * "Per-key grants for hot keys": the agent reads it as a key's usage):
 * spent counts what a bucket admitted and gives back what a rollback
 * refunds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bpf/harness.h"
#include "lease.h"
#include "link.h"

#define FAR_FUTURE (clock_now_ns() + 3600 * NSEC_PER_SEC)
#define SRC_A	   "198.18.0.10"
#define DST	   "198.18.1.1"

/* A policy from printf-style text; scope global is allowed (not standalone). */
static int __attribute__((format(printf, 2, 3))) apply(struct fx *fx, const char *fmt, ...)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	char yaml[HX_YAML_LEN], err[256] = "";
	struct cfg_err e = {0};
	va_list ap;
	int rc;

	assert_non_null(cp);
	va_start(ap, fmt);
	vsnprintf(yaml, sizeof(yaml), fmt, ap);
	va_end(ap);
	rc = cfg_policy_parse("key-grants.yaml", yaml, strlen(yaml), false, cp, &e);
	if (rc)
		print_error("%s\n", e.msg);
	else
		rc = policy_apply(&fx->dp, cp, err, sizeof(err));
	if (rc)
		print_error("apply: %s\n", err);
	free(cp);
	return rc;
}

/* Lease this gateway a share (rate, burst) of limit `name`'s contract. */
static int share(struct fx *fx, const char *name, uint64_t seq, uint64_t rate, uint64_t burst,
		 uint64_t expiry_ns)
{
	struct lease_grant g = {
	    .epoch = 1, .seq = seq, .rate = rate, .burst = burst, .expiry_ns = expiry_ns};

	return link_lease_apply(&fx->dp, (uint32_t)hx_limit_id(fx, name), &g, clock_now_ns());
}

static struct ll_bucket bucket_of(struct fx *fx, uint32_t uid, const char *src)
{
	struct ll_key k = hx_key_addr(uid, 4, src, 32);
	struct ll_bucket b;

	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	return b;
}

/* ---- tests ---- */

/* spent: packets admitted in packets mode, bytes in bytes mode, local and
 * global; a rollback (a later limit of the rule denies) gives it back.
 */
static void test_spent(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg cb, cp, cg;
	struct ll_bucket b;
	struct pkt p;

	assert_int_equal(apply(fx,
			       "version: 1\nlimits:\n"
			       "  - {name: gb, key: src-ip, scope: global, unit: bytes, "
			       "rate: 100000, burst: 100000}\n"
			       "  - {name: lb, key: src-ip, unit: bytes, rate: 1, burst: 100000}\n"
			       "  - {name: lp, key: src-ip, rate: 1, burst: 4}\n"
			       "rules:\n  - {name: all, limits: [gb, lb, lp]}\n"),
			 0);
	hx_limit(fx, "gb", &cg);
	hx_limit(fx, "lb", &cb);
	hx_limit(fx, "lp", &cp);
	assert_int_equal(share(fx, "gb", 1, 1, 50000, FAR_FUTURE), 0);
	hx_udp4(&p, SRC_A, DST, 1000, 53, 100);
	/* 4 admitted, then lp denies and gb and lb give their debits back. */
	assert_int_equal(hx_send(fx, &p, 6, NULL), 4);
	assert_int_equal(hx_stats_of(fx, "lp").denied_pkts, 2);
	b = bucket_of(fx, cg.uid, SRC_A);
	assert_int_equal(b.spent, 4 * p.len);
	b = bucket_of(fx, cb.uid, SRC_A);
	assert_int_equal(b.spent, 4 * p.len);
	b = bucket_of(fx, cp.uid, SRC_A);
	assert_int_equal(b.spent, 4);
	/* Without the refunds: 5 * len in gb and lb. */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_spent, hx_setup, hx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
