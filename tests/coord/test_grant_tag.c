// SPDX-License-Identifier: MIT
/*
 * Grant tags (user/coord/grant_tag.c): each is the HMAC-SHA-256 of the
 * encoding docs/protocol.md gives, cut to 16 bytes, checked here against
 * OpenSSL's one-shot HMAC() over an encoding built by hand; the cached
 * context is keyed again when the key changes (a new grant key through
 * etcd); a tag proves exactly what it covers and nothing else.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "coord/grant_tag.h"

static size_t put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
	return 8;
}

/* "LLG1"/"LLK1" | 4 "gw-1" (lower case of "GW-1") | 3 "dns" | incarnation, epoch, seq */
static size_t head(uint8_t *m, const char *domain)
{
	size_t n = 0;

	memcpy(m, domain, 4);
	n += 4;
	m[n++] = 4;
	memcpy(m + n, "gw-1", 4);
	n += 4;
	m[n++] = 3;
	memcpy(m + n, "dns", 3);
	n += 3;
	n += put64(m + n, 11);
	n += put64(m + n, 7);
	n += put64(m + n, 42);
	return n;
}

static void want_hmac(const uint8_t key[GRANT_KEY_LEN], const uint8_t *m, size_t n,
		      uint8_t out[WIRE_TAG_LEN])
{
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	assert_non_null(HMAC(EVP_sha256(), key, GRANT_KEY_LEN, m, n, md, &len));
	assert_int_equal(len, 32);
	memcpy(out, md, WIRE_TAG_LEN);
}

static const struct grant_tag_in G = {.holder = "GW-1",
				      .limit = "dns",
				      .incarnation = 11,
				      .epoch = 7,
				      .seq = 42,
				      .rate = 250,
				      .burst = 500,
				      .ttl_ns = 2000000000ull};

static void test_known_answers(void **state)
{
	uint8_t k1[GRANT_KEY_LEN], k2[GRANT_KEY_LEN], m[256], want[WIRE_TAG_LEN],
	    got[WIRE_TAG_LEN];
	struct ll_key_id key = {.family = 4, .addr = {0, 0, 0xffff0000u, 0x0100000au}};
	size_t n;

	(void)state;
	for (int i = 0; i < GRANT_KEY_LEN; i++) {
		k1[i] = (uint8_t)i;
		k2[i] = (uint8_t)(0x80 + i);
	}
	/* The share: rate, burst, ttl after the head. */
	n = head(m, "LLG1");
	n += put64(m + n, 250);
	n += put64(m + n, 500);
	n += put64(m + n, 2000000000ull);
	for (int round = 0; round < 2; round++) {
		const uint8_t *k = round ? k2 : k1;

		want_hmac(k, m, n, want);
		grant_tag(k, &G, got);
		assert_memory_equal(got, want, WIRE_TAG_LEN);
		assert_true(grant_tag_ok(k, &G, want));
	}
	/* Keyed again for k1 after k2: the same tag as the first time. */
	want_hmac(k1, m, n, want);
	grant_tag(k1, &G, got);
	assert_memory_equal(got, want, WIRE_TAG_LEN);
	assert_false(grant_tag_ok(k2, &G, want));

	/* A per-key entry: the key's 40 bytes, then rate and burst. */
	n = head(m, "LLK1");
	memcpy(m + n, &key, sizeof(key));
	n += sizeof(key);
	n += put64(m + n, 900);
	n += put64(m + n, 90);
	want_hmac(k1, m, n, want);
	grant_key_tag(k1, &G, &key, 900, 90, got);
	assert_memory_equal(got, want, WIRE_TAG_LEN);
	assert_true(grant_key_tag_ok(k1, &G, &key, 900, 90, want));
	/* Nothing else is proven: another rate, burst, key or grant. */
	assert_false(grant_key_tag_ok(k1, &G, &key, 901, 90, want));
	assert_false(grant_key_tag_ok(k1, &G, &key, 900, 91, want));
	key.addr[3] ^= 1;
	assert_false(grant_key_tag_ok(k1, &G, &key, 900, 90, want));
	key.addr[3] ^= 1;
	{
		struct grant_tag_in g = G;

		g.seq++;
		assert_false(grant_key_tag_ok(k1, &g, &key, 900, 90, want));
		/* A share's tag is not a key's (another domain). */
		grant_tag(k1, &G, got);
		assert_false(grant_key_tag_ok(k1, &G, &key, 900, 90, got));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_known_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
