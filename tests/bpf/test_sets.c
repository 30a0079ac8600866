// SPDX-License-Identifier: MIT
/*
 * Prefix sets (rule matches src-set and dst-set) and rule actions pass and
 * drop on the real kernel, through bpf_prog_test_run_opts with crafted
 * frames: an address in a set matches (IPv4, IPv6, VLAN and QinQ frames;
 * any prefix covering it, a /8 as a /32), one outside does not; an allow
 * rule (action pass) exempts its packets from every later rule and a deny
 * rule (action drop) drops them, each counted; a set of 100k prefixes
 * loads and matches; a reload that changes a set takes effect whole (the
 * old set's entries gone), one that leaves it alone does not rewrite it,
 * and a bad set file keeps the running policy enforcing.
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
#include "agent/set_map.h"

#define ALLOW "/tmp/leaseline-test-allow.txt"
#define DENY  "/tmp/leaseline-test-deny.txt"
#define OVR   "/tmp/leaseline-test-sets-ovr.txt"
#define D4    "198.19.0.1"
#define D6    "2001:db8:ff::1"

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* An allowlist rule, a denylist rule, then everything else limited by a
 * key-none limit of burst 5 (at 1/s: nothing refills during a test).
 */
static int apply_lists(struct fx *fx, int version)
{
	return hx_applyf(fx,
			 "version: %d\nlimits:\n  - {name: rest, rate: 1, burst: 5}\n"
			 "rules:\n"
			 "  - {name: allow, match: {src-set: " ALLOW "}, action: pass}\n"
			 "  - {name: deny, match: {src-set: " DENY "}, action: drop}\n"
			 "  - {name: all, limits: [rest]}\n",
			 version);
}

enum framing { F_V4, F_V6, F_VLAN_V4, F_QINQ_V6 };

static void build(struct pkt *p, enum framing f, const char *src)
{
	struct pkt_layer v4[] = {ETH(), IP4(src, D4), UDP(40000, 53), {0}};
	struct pkt_layer v6[] = {ETH(), IP6(src, D6), UDP(40000, 53), {0}};
	struct pkt_layer vl4[] = {ETH(), VLAN(ETH_P_8021Q, 10), IP4(src, D4), UDP(40000, 53), {0}};
	struct pkt_layer qq6[] = {ETH(),	VLAN(ETH_P_8021AD, 20), VLAN(ETH_P_8021Q, 10),
				  IP6(src, D6), UDP(40000, 53),		{0}};
	const struct pkt_layer *l[] = {v4, v6, vl4, qq6};

	assert_int_equal(pkt_build(p, l[f]), 0);
}

static int send_from(struct fx *fx, enum framing f, const char *src, int n)
{
	struct pkt p;

	build(&p, f, src);
	return hx_send(fx, &p, n, NULL);
}

/* Entries of ll_sets (all ids). */
static int set_entries(struct fx *fx)
{
	struct ll_set_key k, next, *prev = NULL;
	int n = 0;

	while (!bpf_map_get_next_key(fx->dp.sets_fd, prev, &next)) {
		k = next;
		prev = &k;
		n++;
	}
	return n;
}

static void test_allow_and_deny(void **state)
{
	struct fx *fx = FX(state);
	static const struct {
		enum framing f;
		const char *src;
		int passed; /* of 20 */
	} cases[] = {
	    {F_V4, "198.18.7.1", 20},		 /* allowed: in the /24 */
	    {F_VLAN_V4, "198.18.7.200", 20},	 /* the same through a VLAN tag */
	    {F_V4, "198.18.9.9", 20},		 /* allowed /32 inside the denied /16 */
	    {F_V4, "198.18.9.10", 0},		 /* denied: the /16 */
	    {F_VLAN_V4, "198.18.200.3", 0},	 /* denied, tagged */
	    {F_V4, "10.1.2.3", 0},		 /* denied: a /8 */
	    {F_V6, "2001:db8:a::1", 20},	 /* allowed /48 */
	    {F_QINQ_V6, "2001:db8:a:ff::9", 20}, /* the same, double-tagged */
	    {F_V6, "2001:db8:b::1", 0},		 /* denied /48 */
	    {F_V6, "2001:db8:c::1", 5},		 /* in neither: the limit */
	};
	uint64_t allow0, deny0;

	write_file(ALLOW, "# partners\n198.18.7.0/24\n198.18.9.9\n\n2001:db8:a::/48  # v6\n");
	write_file(DENY, "198.18.0.0/16\n10.0.0.0/8\n2001:db8:b::/48\n");
	assert_int_equal(apply_lists(fx, 1), 0);
	assert_int_equal(set_entries(fx), 6);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int got = send_from(fx, cases[i].f, cases[i].src, 20);

		if (got != cases[i].passed)
			fail_msg("%s: %d of 20 passed, expected %d", cases[i].src, got,
				 cases[i].passed);
	}
	/* Not in any set and not limited by the earlier rules: an IPv4 source
	 * outside both sets goes to the limit, which case 10 emptied.
	 */
	assert_int_equal(send_from(fx, F_V4, "203.0.113.1", 3), 0);
	allow0 = hx_rule_stats(fx, 0).matched_pkts;
	deny0 = hx_rule_stats(fx, 1).matched_pkts;
	assert_int_equal(allow0, 5 * 20);
	assert_int_equal(hx_rule_stats(fx, 0).dropped_pkts, 0);
	assert_int_equal(deny0, 4 * 20);
	assert_int_equal(hx_rule_stats(fx, 1).dropped_pkts, 4 * 20);
	assert_int_equal(hx_rule_stats(fx, 2).matched_pkts, 23);
	assert_int_equal(hx_rule_stats(fx, 2).dropped_pkts, 18);
}

/* dst-set and a set beside a plain prefix (both must hold); a set rule
 * past the inline scan (bpf_loop) matches too.
 */
static void test_dst_set_and_late_rules(void **state)
{
	struct fx *fx = FX(state);
	char yaml[HX_YAML_LEN];
	size_t n;
	struct pkt p;

	write_file(DENY, "198.19.0.0/24\n2001:db8:ff::/48\n");
	n = (size_t)snprintf(yaml, sizeof(yaml),
			     "version: 1\nlimits:\n  - {name: l, rate: 1, burst: 1}\nrules:\n");
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n,
				      "  - {name: r%d, match: {proto: tcp, dst-port: %d}, limits: "
				      "[l]}\n",
				      i, 1000 + i);
	n += (size_t)snprintf(yaml + n, sizeof(yaml) - n,
			      "  - {name: deny, match: {src: 198.18.0.0/16, dst-set: " DENY
			      "}, action: drop}\n");
	assert_true(n < sizeof(yaml));
	assert_int_equal(hx_apply(fx, yaml), 0);
	assert_int_equal(send_from(fx, F_V4, "198.18.1.1", 10), 0);   /* both hold */
	assert_int_equal(send_from(fx, F_V4, "198.17.1.1", 10), 10);  /* src does not */
	assert_int_equal(send_from(fx, F_V6, "2001:db8::1", 10), 10); /* src (v4) does not */
	hx_udp4(&p, "198.18.1.1", "198.19.1.1", 1, 53, 16);	      /* dst not in the set */
	assert_int_equal(hx_send(fx, &p, 10, NULL), 10);
	assert_int_equal(hx_rule_stats(fx, 40).dropped_pkts, 10);
}

/* 100k prefixes (IPv4 /32s and IPv6 /64s) load and match. */
static void test_100k(void **state)
{
	struct fx *fx = FX(state);
	FILE *f = fopen(DENY, "w");

	assert_non_null(f);
	for (int i = 0; i < 50000; i++)
		fprintf(f, "198.%d.%d.%d\n", 18 + (i >> 16), (i >> 8) & 0xff, i & 0xff);
	for (int i = 0; i < 50000; i++)
		fprintf(f, "2001:db8:%x:%x::/64\n", i >> 8, i & 0xff);
	fclose(f);
	write_file(ALLOW, "# none\n");
	assert_int_equal(apply_lists(fx, 1), 0);
	assert_int_equal(set_entries(fx), 100000);
	assert_int_equal(send_from(fx, F_V4, "198.18.0.0", 3), 0);
	assert_int_equal(send_from(fx, F_V4, "198.18.195.79", 3), 0);	  /* 49999 */
	assert_int_equal(send_from(fx, F_V4, "198.18.195.80", 3), 3);	  /* 50000: not listed */
	assert_int_equal(send_from(fx, F_V6, "2001:db8:c3:4f::7", 3), 0); /* 49999 */
	assert_int_equal(send_from(fx, F_V6, "2001:db8:c3:50::7", 3), 2); /* the limit: 5 - 3 */
}

static void test_reload(void **state)
{
	struct fx *fx = FX(state);
	struct ll_policy pol;
	struct ll_state st;
	uint32_t id1, id2;

	write_file(ALLOW, "198.18.7.0/24\n");
	write_file(DENY, "198.18.8.0/24\n198.18.9.0/24\n");
	assert_int_equal(apply_lists(fx, 1), 0);
	assert_int_equal(dp_policy_read(fx->dp.policy_fd, fx->dp.state_fd, &pol), 0);
	id1 = pol.rules[1].src_set;
	assert_int_equal(send_from(fx, F_V4, "198.18.9.1", 5), 0);
	/* The deny list changed: 9 leaves, 10 comes; the old set is gone whole. */
	write_file(DENY, "198.18.8.0/24\n198.18.10.0/24\n");
	assert_int_equal(apply_lists(fx, 2), 0);
	assert_int_equal(dp_policy_read(fx->dp.policy_fd, fx->dp.state_fd, &pol), 0);
	id2 = pol.rules[1].src_set;
	assert_int_not_equal(id2, id1);
	assert_int_equal(set_entries(fx), 3);
	assert_int_equal(send_from(fx, F_V4, "198.18.9.1", 5), 5);
	assert_int_equal(send_from(fx, F_V4, "198.18.10.1", 5), 0);
	/* Nothing changed: the same ids, nothing rewritten. */
	assert_int_equal(apply_lists(fx, 3), 0);
	assert_int_equal(dp_policy_read(fx->dp.policy_fd, fx->dp.state_fd, &pol), 0);
	assert_int_equal(pol.rules[1].src_set, id2);
	/* A bad line: refused, the running policy and its sets stay. */
	write_file(DENY, "198.18.8.0/24\n198.18.11.1/24\n");
	assert_int_equal(apply_lists(fx, 4), -EINVAL);
	assert_int_equal(dp_state_read(fx->dp.state_fd, &st), 0);
	assert_int_equal(st.version, 3);
	assert_int_equal(set_entries(fx), 3);
	assert_int_equal(send_from(fx, F_V4, "198.18.10.1", 5), 0);
	/* An agent that starts anew knows nothing of the sets written: it
	 * writes them afresh and deletes the running ones after the flip.
	 */
	set_map_free(&fx->dp);
	write_file(DENY, "198.18.8.0/24\n198.18.10.0/24\n");
	assert_int_equal(apply_lists(fx, 4), 0);
	assert_int_equal(dp_policy_read(fx->dp.policy_fd, fx->dp.state_fd, &pol), 0);
	assert_int_not_equal(pol.rules[1].src_set, id2);
	assert_int_equal(set_entries(fx), 3);
	assert_int_equal(send_from(fx, F_V4, "198.18.10.1", 5), 0);
	/* A file gone: the same. */
	unlink(DENY);
	assert_true(apply_lists(fx, 5) < 0);
	assert_int_equal(send_from(fx, F_V4, "198.18.10.1", 5), 0);
	/* The rule gone: its set goes too. */
	assert_int_equal(hx_applyf(fx, "version: 6\nlimits:\n  - {name: rest, rate: 1, burst: 5}\n"
				       "rules:\n  - {name: all, limits: [rest]}\n"),
			 0);
	assert_int_equal(set_entries(fx), 0);
}

/* The policy refused after its sets were written (its override file went
 * bad between the check and the apply): the sets written for it are
 * deleted again and the running policy's stay.
 */
static void test_refused_after_write(void **state)
{
	struct fx *fx = FX(state);
	static const char *const fmt =
	    "version: %d\nlimits:\n  - {name: rest, key: src-ip, rate: 1, burst: 5, overrides: " OVR
	    "}\nrules:\n"
	    "  - {name: allow, match: {src-set: " ALLOW "}, action: pass}\n"
	    "  - {name: deny, match: {src-set: " DENY "}, action: drop}\n"
	    "  - {name: all, limits: [rest]}\n";
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err e = {0};
	char yaml[1024], err[256] = "";

	assert_non_null(cp);
	write_file(ALLOW, "198.18.7.0/24\n");
	write_file(DENY, "198.18.8.0/24\n");
	write_file(OVR, "198.18.5.0/24 unlimited\n");
	snprintf(yaml, sizeof(yaml), fmt, 1);
	assert_int_equal(hx_apply(fx, yaml), 0);
	write_file(DENY, "198.18.9.0/24\n198.18.10.0/24\n");
	snprintf(yaml, sizeof(yaml), fmt, 2);
	assert_int_equal(cfg_policy_parse("p.yaml", yaml, strlen(yaml), true, cp, &e), 0);
	write_file(OVR, "198.18.6.0/24 deny\n198.18.5.0/24 unlimitd\n");
	assert_int_equal(policy_apply(&fx->dp, cp, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "unlimitd"));
	assert_int_equal(set_entries(fx), 2);
	assert_int_equal(send_from(fx, F_V4, "198.18.8.1", 5), 0);
	assert_int_equal(send_from(fx, F_V4, "198.18.9.1", 5), 5);
	/* The same file applied once the overrides are mended: written afresh. */
	write_file(OVR, "198.18.5.0/24 unlimited\n");
	assert_int_equal(policy_apply(&fx->dp, cp, err, sizeof(err)), 0);
	assert_int_equal(set_entries(fx), 3);
	assert_int_equal(send_from(fx, F_V4, "198.18.9.1", 5), 0);
	unlink(OVR);
	free(cp);
}

static int teardown(void **state)
{
	unlink(ALLOW);
	unlink(DENY);
	return hx_teardown(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_allow_and_deny, hx_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dst_set_and_late_rules, hx_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_100k, hx_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reload, hx_setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused_after_write, hx_setup, teardown),
	};

	return cmocka_run_group_tests_name("sets", tests, NULL, NULL);
}
