// SPDX-License-Identifier: MIT
/*
 * Grant tags: HMAC-SHA-256 (OpenSSL's EVP_MAC) over a fixed encoding of the grant,
 * cut to WIRE_TAG_LEN bytes (grant_tag.h).
 */
#include <ctype.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

#include "coord/grant_tag.h"

/* "LLG1" | len holder | holder (lower case) | len limit | limit | 6 u64 big-endian;
 * a per-key entry: "LLK1" | the same names | 3 u64 | key | 2 u64.
 */
#define TAG_MSG_MAX (4 + 1 + WIRE_HOLDER_LEN + 1 + LL_NAME_LEN + 6 * 8 + sizeof(struct ll_key_id))

static size_t put_str(uint8_t *p, const char *s, size_t max, bool lower)
{
	size_t n = strnlen(s, max);

	p[0] = (uint8_t)n;
	for (size_t i = 0; i < n; i++)
		p[1 + i] = lower ? (uint8_t)tolower((unsigned char)s[i]) : (uint8_t)s[i];
	return 1 + n;
}

static size_t put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
	return 8;
}

/* The domain, the names and the numbers every tag starts with. */
static size_t put_head(uint8_t *msg, const char *domain, const struct grant_tag_in *g)
{
	size_t n = 0;

	memcpy(msg, domain, 4);
	n += 4;
	n += put_str(msg + n, g->holder, WIRE_HOLDER_LEN - 1, true);
	n += put_str(msg + n, g->limit, LL_NAME_LEN - 1, false);
	n += put_u64(msg + n, g->incarnation);
	n += put_u64(msg + n, g->epoch);
	n += put_u64(msg + n, g->seq);
	return n;
}

/* One HMAC context a thread, keyed once: re-initialised with the key it
 * holds, a tag costs the hashing only (one-shot HMAC() fetched the digest
 * and keyed a context for every tag: 3.5 us each, which a grant carrying
 * per-key entries pays once an entry).
 */
static _Thread_local EVP_MAC_CTX *mac_ctx;
static _Thread_local uint8_t mac_key[GRANT_KEY_LEN];
static _Thread_local bool mac_keyed;

static EVP_MAC_CTX *mac_for(const uint8_t key[GRANT_KEY_LEN])
{
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
	    OSSL_PARAM_construct_end(),
	};

	if (!mac_ctx) {
		EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);

		mac_ctx = m ? EVP_MAC_CTX_new(m) : NULL;
		EVP_MAC_free(m);
		if (!mac_ctx)
			return NULL;
	}
	if (mac_keyed && !CRYPTO_memcmp(key, mac_key, GRANT_KEY_LEN))
		return EVP_MAC_init(mac_ctx, NULL, 0, NULL) ? mac_ctx : NULL;
	mac_keyed = false;
	if (!EVP_MAC_init(mac_ctx, key, GRANT_KEY_LEN, params))
		return NULL;
	memcpy(mac_key, key, GRANT_KEY_LEN);
	mac_keyed = true;
	return mac_ctx;
}

static void mac(const uint8_t key[GRANT_KEY_LEN], const uint8_t *msg, size_t n,
		uint8_t tag[WIRE_TAG_LEN])
{
	EVP_MAC_CTX *ctx = mac_for(key);
	uint8_t md[EVP_MAX_MD_SIZE];
	size_t md_len = 0;

	if (!ctx || !EVP_MAC_update(ctx, msg, n) || !EVP_MAC_final(ctx, md, &md_len, sizeof(md)) ||
	    md_len < WIRE_TAG_LEN) {
		/* Never a tag anyone could guess: all ones proves nothing, as
		 * no HMAC is checked against it (grant_tag_ok recomputes).
		 */
		memset(tag, 0xff, WIRE_TAG_LEN);
		return;
	}
	memcpy(tag, md, WIRE_TAG_LEN);
	OPENSSL_cleanse(md, sizeof(md));
}

/* In constant time: is tag the one wanted (and not the all-ones of a failure)? */
static bool tag_matches(const uint8_t want[WIRE_TAG_LEN], const uint8_t tag[WIRE_TAG_LEN])
{
	uint8_t ones[WIRE_TAG_LEN];

	memset(ones, 0xff, sizeof(ones));
	return !CRYPTO_memcmp(want, ones, WIRE_TAG_LEN) ? false
							: !CRYPTO_memcmp(want, tag, WIRE_TAG_LEN);
}

void grant_tag(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
	       uint8_t tag[WIRE_TAG_LEN])
{
	uint8_t msg[TAG_MSG_MAX];
	size_t n = put_head(msg, "LLG1", g);

	n += put_u64(msg + n, g->rate);
	n += put_u64(msg + n, g->burst);
	n += put_u64(msg + n, g->ttl_ns);
	mac(key, msg, n, tag);
}

bool grant_tag_ok(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		  const uint8_t tag[WIRE_TAG_LEN])
{
	uint8_t want[WIRE_TAG_LEN];

	grant_tag(key, g, want);
	return tag_matches(want, tag);
}

void grant_key_tag(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		   const struct ll_key_id *k, uint64_t rate, uint64_t burst, uint8_t tag[WIRE_TAG_LEN])
{
	uint8_t msg[TAG_MSG_MAX];
	size_t n = put_head(msg, "LLK1", g);

	memcpy(msg + n, k, sizeof(*k));
	n += sizeof(*k);
	n += put_u64(msg + n, rate);
	n += put_u64(msg + n, burst);
	mac(key, msg, n, tag);
}

bool grant_key_tag_ok(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		      const struct ll_key_id *k, uint64_t rate, uint64_t burst,
		      const uint8_t tag[WIRE_TAG_LEN])
{
	uint8_t want[WIRE_TAG_LEN];

	grant_key_tag(key, g, k, rate, burst, want);
	return tag_matches(want, tag);
}
