// SPDX-License-Identifier: MIT
/*
 * Hostile packets under key-table pressure (issue #10; docs/design.md,
 * "Key-table pressure"), on the real kernel through bpf_prog_test_run_opts.
 * Spoofed single-packet sources flood a small ll_buckets; once it is half
 * full, new keys are charged to their prefix's fallback bucket, so the flood
 * gets one key's worth per prefix (burst + rate * t), not a burst per
 * address, while a real new client from another prefix gets its whole
 * limit and an established client keeps its bound. A key that graduates to
 * a bucket of its own takes the fallback bucket's tokens along and never a
 * fresh burst; a refund goes back to the bucket that took the debit; the
 * agent's reaper keeps the count of buckets honest; a global limit's
 * fallback bucket spends the lease's share, never the contract.
 * Slack on exact figures comes from the clock (rate * elapsed), never a guess.
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
#include "agent/lease_decide.h"
#include "agent/link.h"

#define DST "198.19.255.1"
/* The limit under test: 5 packets of burst, 1 packet/s. */
#define B 5
#define R 1
/* ll_buckets small enough for 20k sources to fill it, big enough that the
 * keys it takes before pressure outnumber what the prefixes may admit.
 */
#define FLOOD_MAX_KEYS 2048
#define FLOOD_SOURCES  20000

static int flood_setup(void **state)
{
	return hx_setup_keys(state, FLOOD_MAX_KEYS);
}

/* One limit l on every packet; scope global needs the non-standalone parse. */
static int __attribute__((format(printf, 2, 3))) apply(struct fx *fx, const char *fmt, ...)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	char yaml[HX_YAML_LEN], err[256] = "";
	struct cfg_err e = {0};
	char limit[512];
	va_list ap;
	int rc;

	assert_non_null(cp);
	va_start(ap, fmt);
	vsnprintf(limit, sizeof(limit), fmt, ap);
	va_end(ap);
	snprintf(yaml, sizeof(yaml),
		 "version: 1\nlimits:\n  - {name: l, %s}\nrules:\n  - {name: all, limits: [l]}\n",
		 limit);
	rc = cfg_policy_parse("flood.yaml", yaml, strlen(yaml), false, cp, &e);
	if (rc)
		print_error("%s\n", e.msg);
	else
		rc = policy_apply(&fx->dp, cp, err, sizeof(err));
	if (rc)
		print_error("apply: %s\n", err);
	free(cp);
	return rc;
}

static int send4(struct fx *fx, const char *src, int n)
{
	struct pkt p;

	hx_udp4(&p, src, DST, 1000, 53, 0);
	return hx_send(fx, &p, n, NULL);
}

static int send6(struct fx *fx, const char *src, int n)
{
	struct pkt p;

	hx_udp6(&p, src, "2001:db8:ffff::1", 1000, 53);
	return hx_send(fx, &p, n, NULL);
}

struct flood {
	int before, under;	/* spoofed packets admitted before / under pressure */
	uint64_t under_from_ns; /* when pressure began */
	uint64_t mark;		/* ll_fill's mark */
};

/* FLOOD_SOURCES spoofed sources, one packet each, rotating over nprefix
 * prefixes: source i is host i / nprefix of prefix i % nprefix (addr(i)
 * writes it). Counts what was admitted before and under pressure.
 */
static struct flood flood(struct fx *fx, int nprefix, int v6,
			  void (*addr)(char *, size_t, int, int))
{
	struct flood f = {0};

	f.mark = hx_fill(fx, LL_FILL_KEYS).mark;
	for (int i = 0; i < FLOOD_SOURCES; i++) {
		char src[64];
		int under = hx_fill(fx, LL_FILL_KEYS).live >= f.mark, ok;

		if (under && !f.under_from_ns)
			f.under_from_ns = clock_now_ns();
		addr(src, sizeof(src), i % nprefix, i / nprefix);
		ok = v6 ? send6(fx, src, 1) : send4(fx, src, 1);
		assert_true(ok >= 0);
		if (under)
			f.under += ok;
		else
			f.before += ok;
	}
	assert_true(f.under_from_ns != 0); /* the flood did press the table */
	return f;
}

/* 80 /24s: 198.18.10.0/24 .. 198.18.89.0/24, 250 hosts each. */
static void addr4(char *s, size_t n, int prefix, int host)
{
	snprintf(s, n, "198.18.%d.%d", 10 + prefix, 1 + host);
}

/* 4 /48s: 2001:db8:10::/48 .. 2001:db8:13::/48, one /64 per source. */
static void addr6(char *s, size_t n, int prefix, int host)
{
	snprintf(s, n, "2001:db8:%x:%x::1", 0x10 + prefix, host);
}

/* The scenario, IPv4: an established client, then 20k spoofed
 * single-packet sources from 80 /24s into a table of 2048 keys, then a
 * real new client from another /24 sending its limit (5 back to back).
 * Before pressure each new key gets a full bucket of its own, as always
 * (the first half of the table); under pressure all spoofed keys together
 * are admitted at most 80 * (B + R * t), where the old code admitted one
 * packet per key until the table was full (about 1000 more here). The new
 * client gets its 5; the established client keeps B + R * t.
 */
static void test_flood_v4(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_stats st;
	struct flood f;
	int est, est_more, real, spoofed;

	assert_int_equal(apply(fx, "key: src-ip, rate: %d, burst: %d", R, B), 0);
	est = send4(fx, "198.18.200.7", 3);
	assert_int_equal(est, 3);
	f = flood(fx, 80, 0, addr4);
	real = send4(fx, "198.18.201.9", 5);
	est_more = send4(fx, "198.18.200.7", 10);
	st = hx_stats_of(fx, "l");
	spoofed = (int)st.allowed_pkts - est - est_more - real;
	print_message("   v4: %d spoofed admitted before pressure (mark %llu), %d under it "
		      "(bound %llu); new client %d/5; established %d\n",
		      f.before, (unsigned long long)f.mark, f.under,
		      (unsigned long long)(80 * (B + hx_slack(R, f.under_from_ns))), real,
		      est + est_more);
	assert_int_equal(spoofed, f.before + f.under);
	assert_int_equal(real, 5);
	assert_in_range(est + est_more, B, B + hx_slack(R, t0));
	assert_in_range(f.under, 0, 80 * (B + hx_slack(R, f.under_from_ns)));
	/* Every full bucket was made before pressure; under it only prefixes
	 * and the keys they admitted (graduates, with the prefix's tokens).
	 */
	assert_in_range(st.new_keys, 1, f.mark);
	assert_int_equal(st.prefix_buckets, 80 + 1);
	assert_in_range(st.graduated, 1, 80 + 1 + 80 * hx_slack(R, f.under_from_ns));
	assert_int_equal(st.overflow_pkts, 0);
}

/* The same from 4 IPv6 /48s, one /64 (one key) per source: the flood's 20k
 * keys get 4 keys' worth under pressure; a client from another /48 its 5.
 */
static void test_flood_v6(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats st;
	struct flood f;
	int real;

	assert_int_equal(apply(fx, "key: src-ip, rate: %d, burst: %d", R, B), 0);
	f = flood(fx, 4, 1, addr6);
	real = send6(fx, "2001:db8:99::9", 5);
	st = hx_stats_of(fx, "l");
	print_message("   v6: %d spoofed admitted before pressure, %d under it (bound %llu); "
		      "new client %d/5\n",
		      f.before, f.under,
		      (unsigned long long)(4 * (B + hx_slack(R, f.under_from_ns))), real);
	assert_int_equal(real, 5);
	assert_in_range(f.under, 0, 4 * (B + hx_slack(R, f.under_from_ns)));
	assert_int_equal(st.prefix_buckets, 4 + 1);
	assert_int_equal(st.allowed_pkts, (uint64_t)(f.before + f.under + real));
}

/* Graduation moves tokens: under pressure key a's first packet is paid by
 * its /24's fallback bucket (B), and the B - 1 left move into a's new
 * bucket. A neighbour b then finds the prefix empty; a gets B in all, not
 * the B + B - 1 a fresh bucket after the prefix's packet would give.
 */
static void test_graduate_no_fresh_burst(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;
	int a, nb;

	assert_int_equal(apply(fx, "key: src-ip, rate: %d, burst: %d", R, B), 0);
	hx_limit(fx, "l", &cfg);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	assert_int_equal(send4(fx, "198.18.3.1", 1), 1);
	k = hx_key_addr(cfg.uid, 4, "198.18.3.1", 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	assert_in_range(b.tokens, (B - 1) * TB_SCALE,
			(B - 1) * TB_SCALE + hx_refill_max(R, t0, b.last_ns));
	assert_int_equal(b.spent, 0); /* the prefix paid that packet */
	k = hx_key_addr(cfg.uid, 4, "198.18.3.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &k, &b), 0);
	assert_int_equal(b.spent, 1);
	assert_in_range(b.tokens, 0, hx_refill_max(R, t0, b.last_ns));
	nb = send4(fx, "198.18.3.2", 5);
	a = 1 + send4(fx, "198.18.3.1", 10);
	assert_in_range(nb, 0, hx_slack(R, t0));
	assert_in_range(a, B, B + hx_slack(R, t0));
	assert_int_equal(hx_stats_of(fx, "l").graduated, 1 + (nb > 0));
	if (!nb)
		assert_int_equal(hx_stats_of(fx, "l").prefix_pkts, 1 + 5);
}

/* A refund goes where the debit went. Rule [l, agg]: agg (key none, burst
 * 1) is spent first by another prefix's key; then key a's packet is paid
 * by its prefix's fallback bucket (a graduates with the B - 1 left) and
 * refused by agg, so that debit goes back to the prefix, not to a's bucket.
 */
static void test_refund_to_fallback(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;

	assert_int_equal(hx_apply(fx, "version: 1\nlimits:\n"
				      "  - {name: l, key: src-ip, rate: 1, burst: 5}\n"
				      "  - {name: agg, key: none, rate: 1, burst: 1}\n"
				      "rules:\n  - {name: all, limits: [l, agg]}\n"),
			 0);
	hx_limit(fx, "l", &cfg);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	assert_int_equal(send4(fx, "198.18.4.1", 1), 1);
	assert_int_equal(send4(fx, "198.18.5.1", 1), 0);
	k = hx_key_addr(cfg.uid, 4, "198.18.5.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &k, &b), 0);
	assert_in_range(b.tokens, 1 * TB_SCALE, 1 * TB_SCALE + hx_refill_max(1, t0, b.last_ns));
	assert_int_equal(b.spent, 0);
	k = hx_key_addr(cfg.uid, 4, "198.18.5.1", 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	assert_in_range(b.tokens, 4 * TB_SCALE, 4 * TB_SCALE + hx_refill_max(1, t0, b.last_ns));
	assert_int_equal(hx_stats_of(fx, "agg").denied_pkts, 1);
}

/* A rule of several limits reads each one's hint before it debits any
 * (rule_charge): for a key without a bucket under pressure, its fallback
 * bucket's. Rule [a (dst-ip), l (src-ip, burst 1)]: once l's /24 bucket
 * has refused a packet, a new key of that /24 is dropped before a is
 * charged: a's fallback bucket for the packet's destination is never made.
 */
static void test_precheck_reads_fallback_hint(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg ca, cl;
	struct ll_bucket b;
	struct ll_key k;
	struct pkt p;

	assert_int_equal(hx_apply(fx, "version: 1\nlimits:\n"
				      "  - {name: a, key: dst-ip, rate: 1000, burst: 1000}\n"
				      "  - {name: l, key: src-ip, rate: 1, burst: 1}\n"
				      "rules:\n  - {name: all, limits: [a, l]}\n"),
			 0);
	hx_limit(fx, "a", &ca);
	hx_limit(fx, "l", &cl);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	hx_udp4(&p, "198.18.9.1", "198.19.1.1", 1000, 53, 0);
	assert_int_equal(hx_run(fx, &p, 1), XDP_PASS); /* l's /24: its one token */
	hx_udp4(&p, "198.18.9.3", "198.19.1.1", 1000, 53, 0);
	assert_int_equal(hx_run(fx, &p, 1), XDP_DROP); /* refused under the lock: hint */
	hx_udp4(&p, "198.18.9.2", "198.19.2.1", 1000, 53, 0);
	assert_int_equal(hx_run(fx, &p, 1), XDP_DROP); /* refused by the hint */
	k = hx_key_addr(ca.uid, 4, "198.19.2.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &k, &b), -ENOENT);
	/* a: the first packet paid by its fallback bucket, the refused one's
	 * debit of the key's new bucket given back.
	 */
	k = hx_key_addr(ca.uid, 4, "198.19.1.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &k, &b), 0);
	assert_int_equal(b.spent, 1);
	k = hx_key_addr(ca.uid, 4, "198.19.1.1", 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	assert_int_equal(b.spent, 0);
	assert_int_equal(hx_stats_of(fx, "l").denied_pkts, 2);
	assert_int_equal(hx_stats_of(fx, "l").prefix_pkts, 2); /* the hint charged nothing */
}

/* The key each mode falls back on: the address the limit keys on cut to
 * /24 (/48), or to the limit's own shorter prefix; flow keys by their
 * source; dst-port keys by protocol and 256-port block.
 */
static void test_prefix_keys(void **state)
{
	static const struct {
		const char *limit, *src, *dst, *pfx;
		int family;
		uint8_t plen;
		uint16_t dport;
	} cases[] = {
	    {"key: src-ip", "198.18.7.9", DST, "198.18.7.0", 4, 24, 53},
	    {"key: src-ip, prefix-v4: 16", "198.18.7.9", DST, "198.18.0.0", 4, 16, 53},
	    {"key: dst-ip", "198.18.7.9", "198.19.8.9", "198.19.8.0", 4, 24, 53},
	    {"key: flow", "198.18.7.9", DST, "198.18.7.0", 4, 24, 53},
	    {"key: src-ip", "2001:db8:a:b:c::1", NULL, "2001:db8:a::", 6, 48, 53},
	    {"key: src-ip, prefix-v6: 32", "2001:db8:a:b:c::1", NULL, "2001:db8::", 6, 32, 53},
	    {"key: dst-port", "198.18.7.9", DST, NULL, 0, 0, 0x1234},
	};
	struct fx *fx = FX(state);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ll_limit_cfg cfg;
		struct ll_bucket b;
		struct ll_key k;
		struct pkt p;

		assert_int_equal(hx_teardown(state), 0);
		assert_int_equal(hx_setup(state), 0);
		fx = FX(state);
		assert_int_equal(apply(fx, "%s, rate: 1, burst: 5", cases[i].limit), 0);
		hx_limit(fx, "l", &cfg);
		hx_pressure(fx, LL_FILL_KEYS, 1);
		hx_pressure(fx, LL_FILL_FLOWS, 1);
		if (cases[i].family == 6)
			hx_udp6(&p, cases[i].src, "2001:db8:ffff::1", 1000, cases[i].dport);
		else
			hx_udp4(&p, cases[i].src, cases[i].dst, 1000, cases[i].dport, 0);
		assert_int_equal(hx_run(fx, &p, 1), XDP_PASS);
		if (cases[i].family) {
			k = hx_key_addr(cfg.uid, cases[i].family, cases[i].pfx, cases[i].plen);
		} else {
			memset(&k, 0, sizeof(k));
			k.limit_uid = cfg.uid;
			k.proto = IPPROTO_UDP;
			k.dport = htons(cases[i].dport & LL_PREFIX_PORT_MASK);
		}
		if (hx_prefix_bucket(fx, &k, &b))
			fail_msg("%s: no fallback bucket %s/%u", cases[i].limit,
				 cases[i].pfx ? cases[i].pfx : "(port block)", cases[i].plen);
		assert_int_equal(b.spent, 1);
	}
}

/* The reaper corrects ll_fill's count (here made wrong on purpose) to what
 * the maps hold, and deletes a gone limit's fallback buckets with its keys.
 */
static void test_reaper_corrects_count(void **state)
{
	struct fx *fx = FX(state);
	char src[32];

	assert_int_equal(apply(fx, "key: src-ip, rate: 1, burst: 5"), 0);
	for (int i = 0; i < 10; i++) {
		snprintf(src, sizeof(src), "198.18.6.%d", i + 1);
		assert_int_equal(send4(fx, src, 1), 1);
	}
	assert_int_equal(hx_fill(fx, LL_FILL_KEYS).live, 10 + 1); /* and the overflow bucket */
	hx_pressure(fx, LL_FILL_KEYS, 1);
	assert_int_equal(send4(fx, "198.18.7.1", 1), 1); /* a fallback bucket; graduates */
	assert_int_equal(hx_fill(fx, LL_FILL_KEYS).live, 12);
	dp_fill_add(&fx->dp, LL_FILL_KEYS, 1000);
	assert_int_equal(dp_buckets_reap(&fx->dp, clock_now_ns()), 0);
	assert_int_equal(hx_fill(fx, LL_FILL_KEYS).live, 12);
	assert_int_equal(hx_fill(fx, LL_FILL_FLOWS).live, 0);
	assert_int_equal(hx_apply(fx, "version: 2\n"
				      "limits: [{name: other, key: dst-ip, rate: 1, burst: 1}]\n"
				      "rules: [{name: r, limits: [other]}]\n"),
			 0);
	/* 11 keys, the overflow bucket and the fallback bucket go. */
	assert_int_equal(dp_buckets_reap(&fx->dp, clock_now_ns()), 13);
	assert_int_equal(hx_fill(fx, LL_FILL_KEYS).live, 1); /* other's overflow bucket */
}

/* A global limit's fallback bucket spends the lease's share (1/s, burst 3
 * here), never the contract (1000/s, 1000): a prefix's new keys get 3
 * together (the first one takes the rest along when it graduates).
 */
static void test_global_fallback_spends_share(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct lease_grant g = {.epoch = 1, .seq = 1, .rate = 1, .burst = 3};
	struct ll_limit_cfg cfg;
	struct ll_lease ls;
	struct ll_bucket b;
	struct ll_key k;
	int n;

	assert_int_equal(apply(fx, "key: src-ip, scope: global, rate: 1000, burst: 1000, "
				   "on-loss: fail-closed"),
			 0);
	hx_limit(fx, "l", &cfg);
	g.expiry_ns = clock_now_ns() + 3600 * NSEC_PER_SEC;
	assert_int_equal(
	    link_lease_apply(&fx->dp, (uint32_t)hx_limit_id(fx, "l"), &g, clock_now_ns()), 0);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	n = send4(fx, "198.18.8.1", 5) + send4(fx, "198.18.8.2", 5) + send4(fx, "198.18.8.3", 5);
	assert_in_range(n, 3, 3 + 3 * hx_slack(1, t0));
	assert_int_equal(dp_lease_read(&fx->dp, (uint32_t)hx_limit_id(fx, "l"), &ls), 0);
	k = hx_key_addr(cfg.uid, 4, "198.18.8.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &k, &b), 0);
	assert_int_equal(b.gen, ls.gen);
	assert_int_equal(b.o_gen, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_flood_v4, flood_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_flood_v6, flood_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_graduate_no_fresh_burst, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_refund_to_fallback, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_precheck_reads_fallback_hint, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_prefix_keys, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_reaper_corrects_count, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_global_fallback_spends_share, hx_setup,
					    hx_teardown),
	};

	return cmocka_run_group_tests_name("flood", tests, NULL, NULL);
}
