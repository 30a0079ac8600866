// SPDX-License-Identifier: MIT
/*
 * What `leaseline top` prints (user/lib/keyfmt.c): a bucket key of every
 * key mode as people write it (IPv4, IPv6 compressed, /prefix when the
 * limit aggregates, proto/port, flows with ports or without), and the wait
 * a deny hint says, checked against the hint the datapath computes
 * (bpf/bucket.h): the wait shown is never shorter than the real one and at
 * most one rounding step (2^16 ns) longer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/keyfmt.h"
#include "tb_math.h"

/* An ll_key_id as the datapath builds it: IPv4 as ::ffff:a.b.c.d. */
static void put_addr(__u32 a[4], int family, const char *ip)
{
	memset(a, 0, 16);
	if (family == 4) {
		a[2] = htonl(0x0000ffff);
		assert_int_equal(inet_pton(AF_INET, ip, &a[3]), 1);
	} else {
		assert_int_equal(inet_pton(AF_INET6, ip, a), 1);
	}
}

static struct ll_key_id addr_key(int family, const char *ip)
{
	struct ll_key_id k;

	memset(&k, 0, sizeof(k));
	k.family = (uint8_t)family;
	put_addr(k.addr, family, ip);
	return k;
}

static struct ll_key_id port_key(uint8_t proto, uint16_t port)
{
	struct ll_key_id k;

	memset(&k, 0, sizeof(k));
	k.proto = proto;
	k.dport = htons(port);
	return k;
}

static struct ll_key_id flow_key(int family, uint8_t proto, const char *src, uint16_t sport,
				 const char *dst, uint16_t dport)
{
	struct ll_key_id k;

	memset(&k, 0, sizeof(k));
	k.family = (uint8_t)family;
	k.proto = proto;
	k.sport = htons(sport);
	k.dport = htons(dport);
	put_addr(k.addr, family, src);
	put_addr(k.addr2, family, dst);
	return k;
}

static void expect_key(const struct ll_key_id *k, uint8_t mode, uint8_t p4, uint8_t p6,
		       const char *want)
{
	char buf[KEYFMT_LEN];
	int n = keyfmt_key(k, mode, p4, p6, buf, sizeof(buf));

	if (strcmp(buf, want))
		fail_msg("mode %u: got '%s', expected '%s'", mode, buf, want);
	assert_int_equal(n, (int)strlen(want));
}

static void test_ip_keys(void **state)
{
	struct ll_key_id k;

	(void)state;
	k = addr_key(4, "198.18.0.10");
	expect_key(&k, LL_KEY_SRC_IP, 32, 128, "198.18.0.10");
	expect_key(&k, LL_KEY_DST_IP, 32, 128, "198.18.0.10");
	/* A prefix limit's key holds the masked address: shown with its length. */
	k = addr_key(4, "198.18.0.0");
	expect_key(&k, LL_KEY_SRC_IP, 24, 64, "198.18.0.0/24");
	k = addr_key(4, "0.0.0.0");
	expect_key(&k, LL_KEY_SRC_IP, 0, 0, "0.0.0.0"); /* /0 is every address: no length */
	k = addr_key(6, "2001:db8::1");
	expect_key(&k, LL_KEY_SRC_IP, 32, 128, "2001:db8::1");
	k = addr_key(6, "2001:db8:0:1::");
	expect_key(&k, LL_KEY_SRC_IP, 24, 64, "2001:db8:0:1::/64");
	/* RFC 5952: the longest run of zeros compressed, lower case. */
	k = addr_key(6, "2001:0DB8:0000:0000:0001:0000:0000:0001");
	expect_key(&k, LL_KEY_DST_IP, 32, 128, "2001:db8::1:0:0:1");
	/* The IPv6 prefix length applies to IPv6 keys only, and the reverse. */
	k = addr_key(4, "198.18.0.0");
	expect_key(&k, LL_KEY_DST_IP, 16, 48, "198.18.0.0/16");
	k = addr_key(6, "2001:db8::");
	expect_key(&k, LL_KEY_DST_IP, 16, 48, "2001:db8::/48");
}

static void test_port_keys(void **state)
{
	struct ll_key_id k;

	(void)state;
	k = port_key(IPPROTO_UDP, 53);
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "udp/53");
	k = port_key(IPPROTO_TCP, 443);
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "tcp/443");
	k = port_key(IPPROTO_UDP, 0); /* UDP without a port: non-first fragments */
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "udp/0");
	k = port_key(IPPROTO_ICMP, 0);
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "icmp");
	k = port_key(IPPROTO_ICMPV6, 0);
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "icmpv6");
	k = port_key(47, 0); /* GRE: by number */
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "47");
}

static void test_flow_keys(void **state)
{
	struct ll_key_id k;

	(void)state;
	k = flow_key(4, IPPROTO_TCP, "198.18.0.1", 1234, "198.18.0.2", 80);
	expect_key(&k, LL_KEY_FLOW, 32, 128, "tcp 198.18.0.1:1234 -> 198.18.0.2:80");
	k = flow_key(6, IPPROTO_UDP, "2001:db8::1", 5353, "2001:db8::2", 53);
	expect_key(&k, LL_KEY_FLOW, 32, 128, "udp [2001:db8::1]:5353 -> [2001:db8::2]:53");
	k = flow_key(4, IPPROTO_ICMP, "198.18.0.1", 0, "198.18.0.2", 0);
	expect_key(&k, LL_KEY_FLOW, 32, 128, "icmp 198.18.0.1 -> 198.18.0.2");
	/* A flow key keeps whole addresses whatever the limit's prefix fields say. */
	k = flow_key(4, IPPROTO_UDP, "198.18.0.1", 40000, "198.19.0.1", 7000);
	expect_key(&k, LL_KEY_FLOW, 24, 64, "udp 198.18.0.1:40000 -> 198.19.0.1:7000");
}

static void test_overflow_key(void **state)
{
	struct ll_key_id k;

	(void)state;
	memset(&k, 0, sizeof(k));
	k.family = LL_OVERFLOW_FAMILY;
	expect_key(&k, LL_KEY_SRC_IP, 32, 128, "(overflow)");
	expect_key(&k, LL_KEY_FLOW, 32, 128, "(overflow)");
	expect_key(&k, LL_KEY_DST_PORT, 32, 128, "(overflow)");
}

/* The hint bpf/bucket.h bucket_take stores when a packet of class `class`
 * (its cost need_s sub-tokens) finds `tokens`, at rate `rate`.
 */
static uint64_t dp_hint(uint64_t now, uint64_t tokens, uint64_t need_s, uint64_t rate,
			uint32_t class)
{
	if (need_s <= tokens)
		return 0;
	return (rate ? (now + (need_s - tokens + rate - 1) / rate) & ~LL_HINT_CLASS_MASK
		     : ~LL_HINT_CLASS_MASK) |
	       class;
}

static void expect_retry(const struct keyfmt_retry *r, const char *want)
{
	char buf[96];

	keyfmt_retry_str(r, buf, sizeof(buf));
	if (strcmp(buf, want))
		fail_msg("got '%s', expected '%s'", buf, want);
}

static void test_retry_states(void **state)
{
	const uint64_t now = 1000 * NSEC_PER_SEC, step = LL_HINT_CLASS_MASK + 1;
	struct keyfmt_retry r;
	uint64_t h;

	(void)state;
	/* No hint: the last charge admitted, or nothing was ever denied. */
	r = keyfmt_retry(0, true, now);
	assert_int_equal(r.state, KEYFMT_RETRY_NOW);
	expect_retry(&r, "now");

	/* 1 packet/s, empty: the next token is 1 s away. */
	h = dp_hint(now, 0, TB_SCALE, 1, 0);
	r = keyfmt_retry(h, true, now);
	assert_int_equal(r.state, KEYFMT_RETRY_WAIT);
	assert_true(r.wait_ns >= NSEC_PER_SEC && r.wait_ns <= NSEC_PER_SEC + step);
	expect_retry(&r, "in 1.00 s");
	/* The same hint read 982 ms later. */
	r = keyfmt_retry(h, true, now + 982 * NSEC_PER_MSEC);
	assert_int_equal(r.state, KEYFMT_RETRY_WAIT);
	expect_retry(&r, "in 18.0 ms");
	/* Past the end of its rounding step: the next packet is charged. */
	r = keyfmt_retry(h, true, (h & ~LL_HINT_CLASS_MASK) + step);
	assert_int_equal(r.state, KEYFMT_RETRY_NOW);
	/* Inside the step, the instant reached but not the step's end. */
	r = keyfmt_retry(h, true, (h & ~LL_HINT_CLASS_MASK) + step - 1000);
	assert_int_equal(r.state, KEYFMT_RETRY_WAIT);
	expect_retry(&r, "in <0.1 ms");

	/* A stale hint (the bucket moved to another generation) refuses nothing. */
	r = keyfmt_retry(h, false, now);
	assert_int_equal(r.state, KEYFMT_RETRY_NOW);

	/* Rate 0 for this key here (a global key cut to nothing): never. */
	h = dp_hint(now, 0, TB_SCALE, 0, 0);
	r = keyfmt_retry(h, true, now);
	assert_int_equal(r.state, KEYFMT_RETRY_NEVER);
	expect_retry(&r, "never (rate 0 here)");

	/* Bytes mode: the hint is for frames of its class or larger. */
	h = dp_hint(now, 50 * TB_SCALE, 100 * TB_SCALE, 1000, 100);
	r = keyfmt_retry(h, true, now);
	assert_int_equal(r.state, KEYFMT_RETRY_WAIT);
	assert_int_equal(r.class, 100);
	expect_retry(&r, "in 50.1 ms for frames of 100 bytes or more"); /* 50 ms + the step */
	h = dp_hint(now, 0, 1500 * TB_SCALE, 0, 1500);
	r = keyfmt_retry(h, true, now);
	expect_retry(&r, "never (rate 0 here) for frames of 1500 bytes or more");
}

/* Over a sweep of rates, token levels and clocks: the wait shown from the
 * datapath's hint is at least the time until the bucket holds the packet's
 * cost, and at most one rounding step more.
 */
static void test_retry_bounds(void **state)
{
	static const uint64_t rates[] = {1, 3, 50, 1000, 65537, 1000000, 123456789, TB_MAX_RATE};
	const uint64_t step = LL_HINT_CLASS_MASK + 1;
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		for (int j = 0; j < 2000; j++) {
			uint64_t now, tokens, need = TB_SCALE, real, h;
			struct keyfmt_retry r;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			now = NSEC_PER_SEC + (x % (1000 * NSEC_PER_SEC));
			tokens = (x >> 20) % need;
			real = (need - tokens + rates[i] - 1) / rates[i]; /* ns until it can pay */
			h = dp_hint(now, tokens, need, rates[i], 0);
			r = keyfmt_retry(h, true, now);
			if (r.state != KEYFMT_RETRY_WAIT || r.wait_ns < real ||
			    r.wait_ns > real + step)
				fail_msg(
				    "rate %llu tokens %llu: wait %llu ns (state %d), real %llu "
				    "ns",
				    (unsigned long long)rates[i], (unsigned long long)tokens,
				    (unsigned long long)r.wait_ns, r.state,
				    (unsigned long long)real);
		}
	}
}

static void test_proto_names(void **state)
{
	char b[8];

	(void)state;
	assert_string_equal(keyfmt_proto(IPPROTO_TCP, b, sizeof(b)), "tcp");
	assert_string_equal(keyfmt_proto(IPPROTO_UDP, b, sizeof(b)), "udp");
	assert_string_equal(keyfmt_proto(IPPROTO_SCTP, b, sizeof(b)), "sctp");
	assert_string_equal(keyfmt_proto(255, b, sizeof(b)), "255");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ip_keys),	 cmocka_unit_test(test_port_keys),
	    cmocka_unit_test(test_flow_keys),	 cmocka_unit_test(test_overflow_key),
	    cmocka_unit_test(test_retry_states), cmocka_unit_test(test_retry_bounds),
	    cmocka_unit_test(test_proto_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
