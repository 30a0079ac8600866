// SPDX-License-Identifier: MIT
/*
 * The rule matches of issue #13 on the real kernel, through
 * bpf_prog_test_run_opts with crafted frames: tcp-flags (syn, VALUE/MASK),
 * icmp-type (ICMP and ICMPv6, names, ranges, lists), dst-port lists, each
 * over IPv4, IPv6 and VLAN/QinQ-tagged frames; a non-first fragment never
 * matches a header condition; a TCP or ICMP header cut off is counted as
 * malformed (LL_PARSE_TRUNC_L4) and dropped before any rule; the rules past
 * the inline scan (bpf_loop) match first-match-wins like the others; a syn
 * rule limits new connections and lets the established ones through.
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
#define S6 "2001:db8::1"
#define D6 "2001:db8:1::1"

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_PSH 0x08
#define TH_ACK 0x10
#define TH_ECE 0x40
#define TH_CWR 0x80

/* Overwrite the TCP flags byte, or the ICMP/ICMPv6 type, of a built frame. */
static void set_l4_byte(struct pkt *p, uint8_t kind, int off, uint8_t v)
{
	for (int i = 0; i < p->nrec; i++) {
		if (p->rec[i].kind == kind) {
			p->buf[p->rec[i].start + off] = v;
			return;
		}
	}
	fail_msg("no layer of kind %u in the frame", kind);
}

static void set_tcp_flags(struct pkt *p, uint8_t flags)
{
	set_l4_byte(p, PL_TCP, 13, flags);
}

static void set_icmp_type(struct pkt *p, bool v6, uint8_t type)
{
	set_l4_byte(p, v6 ? PL_ICMP6 : PL_ICMP, 0, type);
}

/* Framings every match is tried under. */
enum framing { F_V4, F_V6, F_VLAN_V4, F_QINQ_V6, F_N };
static const char *const framing_name[F_N] = {"ipv4", "ipv6", "vlan/ipv4", "qinq/ipv6"};

static void build_tcp(struct pkt *p, enum framing f, uint16_t dport, uint8_t flags)
{
	struct pkt_layer v4[] = {ETH(), IP4(S4, D4), TCP(40000, dport), {0}};
	struct pkt_layer v6[] = {ETH(), IP6(S6, D6), TCP(40000, dport), {0}};
	struct pkt_layer vl4[] = {
	    ETH(), VLAN(ETH_P_8021Q, 10), IP4(S4, D4), TCP(40000, dport), {0}};
	struct pkt_layer qq6[] = {ETH(),       VLAN(ETH_P_8021AD, 20), VLAN(ETH_P_8021Q, 10),
				  IP6(S6, D6), TCP(40000, dport),      {0}};
	const struct pkt_layer *l[F_N] = {v4, v6, vl4, qq6};

	assert_int_equal(pkt_build(p, l[f]), 0);
	set_tcp_flags(p, flags);
}

static void build_udp(struct pkt *p, enum framing f, uint16_t dport)
{
	struct pkt_layer v4[] = {ETH(), IP4(S4, D4), UDP(40000, dport), {0}};
	struct pkt_layer v6[] = {ETH(), IP6(S6, D6), UDP(40000, dport), {0}};
	struct pkt_layer vl4[] = {
	    ETH(), VLAN(ETH_P_8021Q, 10), IP4(S4, D4), UDP(40000, dport), {0}};
	struct pkt_layer qq6[] = {ETH(),       VLAN(ETH_P_8021AD, 20), VLAN(ETH_P_8021Q, 10),
				  IP6(S6, D6), UDP(40000, dport),      {0}};
	const struct pkt_layer *l[F_N] = {v4, v6, vl4, qq6};

	assert_int_equal(pkt_build(p, l[f]), 0);
}

/* The rule index p's frame is counted under (LL_MAX_RULES: the default),
 * -1 if no rule counter moved (dropped by the parser).
 */
static int matched_rule(struct fx *fx, const struct pkt *p, uint32_t n_rules, int *verdict)
{
	uint64_t before[LL_MAX_RULES + 1];
	int hit = -1;

	for (uint32_t i = 0; i < n_rules; i++)
		before[i] = hx_rule_stats(fx, i).matched_pkts;
	before[LL_MAX_RULES] = hx_rule_stats(fx, LL_MAX_RULES).matched_pkts;
	*verdict = hx_run(fx, p, 1);
	for (uint32_t i = 0; i < n_rules; i++)
		if (hx_rule_stats(fx, i).matched_pkts != before[i])
			hit = (int)i;
	if (hx_rule_stats(fx, LL_MAX_RULES).matched_pkts != before[LL_MAX_RULES])
		hit = hit < 0 ? LL_MAX_RULES : -2;
	return hit;
}

#define NONE LL_MAX_RULES /* unmatched: the default's counter */

static const char flags_policy[] =
    "version: 1\n"
    "default: pass\n"
    "limits:\n"
    "  - {name: big, rate: 1000000, burst: 1000000}\n"
    "rules:\n"
    "  - {name: syn, match: {proto: tcp, tcp-flags: syn}, limits: [big]}\n"
    "  - {name: rst, match: {proto: tcp, tcp-flags: rst/rst}, limits: [big]}\n"
    "  - {name: fin-no-ack, match: {proto: tcp, tcp-flags: 'fin/fin,ack'}, limits: [big]}\n"
    "  - {name: ece-cwr, match: {proto: tcp, tcp-flags: '0xc0/0xc0'}, limits: [big]}\n";

static void test_tcp_flags(void **state)
{
	struct fx *fx = FX(state);
	static const struct {
		uint8_t flags;
		int rule;
	} cases[] = {
	    {TH_SYN, 0},
	    {TH_SYN | TH_ECE | TH_CWR, 0}, /* ECN setup SYN: still a new connection */
	    {TH_SYN | TH_ACK, NONE},	   /* the server's answer */
	    {TH_ACK, NONE},
	    {TH_ACK | TH_PSH, NONE},
	    {TH_RST, 1},
	    {TH_RST | TH_ACK, 1},
	    {TH_FIN, 2},
	    {TH_FIN | TH_ACK, NONE},
	    {TH_ECE | TH_CWR | TH_ACK, 3},
	    {0, NONE},
	};
	struct pkt p;
	int v, fails = 0;

	assert_int_equal(hx_apply(fx, flags_policy), 0);
	for (int f = 0; f < F_N; f++) {
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			build_tcp(&p, f, 80, cases[i].flags);
			int got = matched_rule(fx, &p, 4, &v);

			if (got != cases[i].rule || v != XDP_PASS) {
				print_error("%s flags 0x%02x: rule %d (verdict %d), expected %d\n",
					    framing_name[f], cases[i].flags, got, v, cases[i].rule);
				fails++;
			}
		}
	}
	assert_int_equal(fails, 0);
}

/* A non-first fragment carries no TCP header: it never matches tcp-flags,
 * even when its payload happens to hold a SYN-looking byte.
 */
static void test_tcp_flags_fragment(void **state)
{
	struct fx *fx = FX(state);
	struct pkt_layer v4[] = {ETH(), IP4FRAG(S4, D4, 10, 0), TCP(40000, 80), {0}};
	struct pkt_layer v6[] = {ETH(), IP6(S6, D6), FRAG6(10, false), TCP(40000, 80), {0}};
	struct pkt p;
	int v;

	assert_int_equal(hx_apply(fx, flags_policy), 0);
	assert_int_equal(pkt_build(&p, v4), 0);
	set_tcp_flags(&p, TH_SYN);
	assert_int_equal(matched_rule(fx, &p, 4, &v), NONE);
	assert_int_equal(pkt_build(&p, v6), 0);
	set_tcp_flags(&p, TH_SYN);
	assert_int_equal(matched_rule(fx, &p, 4, &v), NONE);
	/* The first fragment has the header: it matches. */
	struct pkt_layer first[] = {ETH(), IP4FRAG(S4, D4, 0, 1), TCP(40000, 80), {0}};
	assert_int_equal(pkt_build(&p, first), 0);
	set_tcp_flags(&p, TH_SYN);
	assert_int_equal(matched_rule(fx, &p, 4, &v), 0);
}

/* A TCP header shorter than 20 bytes, an ICMP header shorter than 4, in
 * frames whose IP lengths agree (so only the L4 header is short): counted as
 * LL_PARSE_TRUNC_L4 and dropped, never read, under every framing.
 */
static void test_truncated_l4_headers(void **state)
{
	struct fx *fx = FX(state);
	struct {
		const char *desc;
		struct pkt_layer l[8];
	} cases[] = {
	    {"ipv4 tcp 13 bytes", {ETH(), IP4(S4, D4), PROTO(IPPROTO_TCP, 13), {0}}},
	    {"ipv4 tcp 19 bytes", {ETH(), IP4(S4, D4), PROTO(IPPROTO_TCP, 19), {0}}},
	    {"ipv6 tcp 14 bytes", {ETH(), IP6(S6, D6), PROTO(IPPROTO_TCP, 14), {0}}},
	    {"vlan ipv4 tcp 12 bytes",
	     {ETH(), VLAN(ETH_P_8021Q, 10), IP4(S4, D4), PROTO(IPPROTO_TCP, 12), {0}}},
	    {"qinq ipv6 tcp 0 bytes",
	     {ETH(),
	      VLAN(ETH_P_8021AD, 20),
	      VLAN(ETH_P_8021Q, 10),
	      IP6(S6, D6),
	      PROTO(IPPROTO_TCP, 0),
	      {0}}},
	    {"ipv6 hbh tcp 10 bytes", {ETH(), IP6(S6, D6), HBH(8), PROTO(IPPROTO_TCP, 10), {0}}},
	    {"ipv4 icmp 3 bytes", {ETH(), IP4(S4, D4), PROTO(IPPROTO_ICMP, 3), {0}}},
	    {"ipv6 icmpv6 1 byte", {ETH(), IP6(S6, D6), PROTO(IPPROTO_ICMPV6, 1), {0}}},
	};
	uint64_t before[LL_PARSE_MAX], after[LL_PARSE_MAX];
	struct pkt p;
	int fails = 0;

	assert_int_equal(hx_apply(fx, flags_policy), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t def = hx_rule_stats(fx, LL_MAX_RULES).matched_pkts;
		uint64_t syn = hx_rule_stats(fx, 0).matched_pkts;
		int v;

		assert_int_equal(pkt_build(&p, cases[i].l), 0);
		hx_parse_stats(fx, before);
		v = hx_run(fx, &p, 1);
		hx_parse_stats(fx, after);
		if (v != XDP_DROP || after[LL_PARSE_TRUNC_L4] != before[LL_PARSE_TRUNC_L4] + 1 ||
		    hx_rule_stats(fx, LL_MAX_RULES).matched_pkts != def ||
		    hx_rule_stats(fx, 0).matched_pkts != syn) {
			print_error("%s: verdict %d, trunc_l4 +%llu\n", cases[i].desc, v,
				    (unsigned long long)(after[LL_PARSE_TRUNC_L4] -
							 before[LL_PARSE_TRUNC_L4]));
			fails++;
		}
	}
	assert_int_equal(fails, 0);
}

static void test_icmp_type(void **state)
{
	struct fx *fx = FX(state);
	static const struct {
		bool v6;
		bool vlan;
		uint8_t type;
		int rule;
	} cases[] = {
	    {false, false, 8, 0},    /* echo-request */
	    {false, true, 8, 0},     /* the same, VLAN-tagged */
	    {false, false, 0, NONE}, /* echo-reply */
	    {false, false, 3, 1},    /* 3-5 */
	    {false, false, 5, 1},      {false, false, 6, NONE},
	    {false, false, 128, NONE}, /* the ICMPv6 echo-request number, under ICMP */
	    {true, false, 128, 2},     /* ICMPv6 echo-request */
	    {true, true, 128, 2},      {true, false, 135, 2}, /* neighbor-solicitation */
	    {true, false, 129, NONE},			      /* echo-reply */
	    {true, false, 8, NONE}, /* the ICMP echo-request number, under ICMPv6 */
	    {true, false, 255, 2},
	};
	struct pkt p;
	int v, fails = 0;

	assert_int_equal(
	    hx_apply(fx, "version: 1\n"
			 "default: pass\n"
			 "limits:\n"
			 "  - {name: big, rate: 1000000, burst: 1000000}\n"
			 "rules:\n"
			 "  - {name: ping, match: {proto: icmp, icmp-type: echo-request}, "
			 "limits: [big]}\n"
			 "  - {name: errs, match: {proto: icmp, icmp-type: 3-5}, limits: [big]}\n"
			 "  - {name: ping6, match: {proto: icmpv6, icmp-type: [echo-request, "
			 "neighbor-solicitation, 255]}, limits: [big]}\n"),
	    0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pkt_layer v4[] = {ETH(), IP4(S4, D4), ICMP(), {0}};
		struct pkt_layer v6[] = {ETH(), IP6(S6, D6), ICMP6(), {0}};
		struct pkt_layer vl4[] = {ETH(), VLAN(ETH_P_8021Q, 7), IP4(S4, D4), ICMP(), {0}};
		struct pkt_layer qq6[] = {
		    ETH(), VLAN(ETH_P_8021AD, 20), VLAN(ETH_P_8021Q, 7), IP6(S6, D6), ICMP6(), {0}};

		assert_int_equal(pkt_build(&p, cases[i].v6 ? (cases[i].vlan ? qq6 : v6)
							   : (cases[i].vlan ? vl4 : v4)),
				 0);
		set_icmp_type(&p, cases[i].v6, cases[i].type);
		int got = matched_rule(fx, &p, 3, &v);

		if (got != cases[i].rule) {
			print_error("%s%s type %u: rule %d, expected %d\n",
				    cases[i].vlan ? "vlan " : "", cases[i].v6 ? "icmpv6" : "icmp",
				    cases[i].type, got, cases[i].rule);
			fails++;
		}
	}
	/* A non-first fragment of an ICMP datagram has no type. */
	struct pkt_layer frag[] = {ETH(), IP4FRAG(S4, D4, 10, 0), ICMP(), {0}};
	assert_int_equal(pkt_build(&p, frag), 0);
	assert_int_equal(matched_rule(fx, &p, 3, &v), NONE);
	assert_int_equal(fails, 0);
}

static void test_dport_lists(void **state)
{
	struct fx *fx = FX(state);
	static const struct {
		bool tcp;
		uint16_t port;
		int rule;
	} cases[] = {
	    {false, 53, 0},   {false, 54, NONE},    {false, 80, 0},	 {false, 999, NONE},
	    {false, 1000, 0}, {false, 1500, 0},	    {false, 2000, 0},	 {false, 2001, NONE},
	    {false, 0, NONE}, {false, 65535, NONE}, {true, 0, 1},	 {true, 1, NONE},
	    {true, 22, 1},    {true, 443, 1},	    {true, 10, 1},	 {true, 15, 1},
	    {true, 16, NONE}, {true, 65535, 1},	    {true, 65534, NONE}, {true, 53, NONE},
	};
	struct pkt p;
	int v, fails = 0;

	assert_int_equal(
	    hx_apply(fx, "version: 1\n"
			 "default: pass\n"
			 "limits:\n"
			 "  - {name: big, rate: 1000000, burst: 1000000}\n"
			 "rules:\n"
			 "  - {name: u, match: {proto: udp, dst-port: '53,80,1000-2000'}, "
			 "limits: [big]}\n"
			 "  - {name: t, match: {proto: tcp, dst-port: [0, 22, 443, 10-12, 13, 14, "
			 "15, 65535]}, limits: [big]}\n"),
	    0);
	for (int f = 0; f < F_N; f++) {
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			if (cases[i].tcp)
				build_tcp(&p, f, cases[i].port, TH_ACK);
			else
				build_udp(&p, f, cases[i].port);
			int got = matched_rule(fx, &p, 2, &v);

			if (got != cases[i].rule) {
				print_error("%s %s/%u: rule %d, expected %d\n", framing_name[f],
					    cases[i].tcp ? "tcp" : "udp", cases[i].port, got,
					    cases[i].rule);
				fails++;
			}
		}
	}
	assert_int_equal(fails, 0);
}

/* LL_MAX_RULES rules, rule i matching udp port 10000 + i: the rules past the
 * inline scan (bpf_loop) match like the first ones, the first match wins
 * across the boundary, and an unmatched packet reaches the default.
 */
static void test_many_rules(void **state)
{
	struct fx *fx = FX(state);
	size_t size = 1 << 17, n;
	char *y = malloc(size);
	static const int hits[] = {
	    0, 1, 31, 32, 33, 63, 64, 500, LL_MAX_RULES - 2, LL_MAX_RULES - 1};
	struct pkt p;

	assert_non_null(y);
	n = (size_t)snprintf(y, size,
			     "version: 1\ndefault: drop\nlimits:\n"
			     "  - {name: big, rate: 1000000, burst: 1000000}\nrules:\n");
	for (int i = 0; i < LL_MAX_RULES; i++) {
		/* Rules 40 and 41 both match port 10040: 40 must win. */
		int port = i == 41 ? 10040 : 10000 + i;

		n += (size_t)snprintf(y + n, size - n,
				      "  - {name: r%d, match: {proto: udp, dst-port: %d}, "
				      "limits: [big]}\n",
				      i, port);
	}
	assert_true(n < size);
	assert_int_equal(hx_apply(fx, y), 0);
	free(y);
	for (size_t i = 0; i < sizeof(hits) / sizeof(hits[0]); i++) {
		hx_udp4(&p, S4, D4, 40000, (uint16_t)(10000 + hits[i]), 0);
		assert_int_equal(hx_run(fx, &p, 1), XDP_PASS);
		assert_int_equal(hx_rule_stats(fx, (uint32_t)hits[i]).matched_pkts, 1);
	}
	hx_udp4(&p, S4, D4, 40000, 10040, 0);
	assert_int_equal(hx_run(fx, &p, 1), XDP_PASS);
	assert_int_equal(hx_rule_stats(fx, 40).matched_pkts, 1);
	assert_int_equal(hx_rule_stats(fx, 41).matched_pkts, 0);
	hx_udp4(&p, S4, D4, 40000, 9999, 0);
	assert_int_equal(hx_run(fx, &p, 1), XDP_DROP);
	assert_int_equal(hx_rule_stats(fx, LL_MAX_RULES).dropped_pkts, 1);
	hx_tcp6(&p, S6, D6, 40000, 10000 + LL_MAX_RULES - 1);
	assert_int_equal(hx_run(fx, &p, 1), XDP_DROP);
}

/* The point of tcp-flags: syn: new connections per client are limited,
 * packets of established connections skip the limit. Rate 1/s, burst 3:
 * of 6 SYNs 3 pass (4 if the refill adds one meanwhile); every ACK passes;
 * another client has its own bucket.
 */
static void test_syn_limits_new_connections(void **state)
{
	struct fx *fx = FX(state);
	struct pkt p;
	uint64_t t0 = clock_now_ns(), slack;
	int passed;

	assert_int_equal(
	    hx_apply(fx, "version: 1\n"
			 "default: pass\n"
			 "limits:\n"
			 "  - {name: conn, key: src-ip, rate: 1, burst: 3}\n"
			 "rules:\n"
			 "  - {name: new-conn, match: {proto: tcp, dst-port: 80, tcp-flags: syn}, "
			 "limits: [conn]}\n"),
	    0);
	build_tcp(&p, F_V4, 80, TH_SYN);
	passed = hx_send(fx, &p, 6, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(passed, 3, 3 + slack);
	build_tcp(&p, F_V4, 80, TH_ACK);
	assert_int_equal(hx_send(fx, &p, 50, NULL), 50);
	build_tcp(&p, F_V4, 80, TH_ACK | TH_PSH);
	assert_int_equal(hx_send(fx, &p, 50, NULL), 50);
	build_tcp(&p, F_V6, 80, TH_SYN);
	assert_int_equal(hx_send(fx, &p, 3, NULL), 3);
	assert_int_equal(hx_rule_stats(fx, 0).matched_pkts, 9);
	assert_int_equal(hx_rule_stats(fx, 0).dropped_pkts, 6 - (uint64_t)passed);
	assert_int_equal(hx_rule_stats(fx, LL_MAX_RULES).matched_pkts, 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tcp_flags, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_tcp_flags_fragment, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_truncated_l4_headers, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_icmp_type, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_dport_lists, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_many_rules, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_syn_limits_new_connections, hx_setup, hx_teardown),
	};

	return cmocka_run_group_tests_name("match", tests, NULL, NULL);
}
