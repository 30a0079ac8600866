// SPDX-License-Identifier: MIT
/*
 * Wire frames (user/wire.c): every message survives a round trip, every prefix of a frame asks
 * for more, every corruption is -EPROTO, and a fuzz loop finds nothing that reads past the input
 * or decodes to a message that does not re-encode to the same bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "lib/wire.h"
#include "lib/util.h"

#define FRAME_MAX (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD)
/* Frame offsets of the header fields. */
#define HDR_MAGIC   0
#define HDR_VERSION 4
#define HDR_TYPE    6
#define HDR_LENGTH  8

/* Payload offsets in the sample frames below (holder "gw-1", limits "dns-total"/"per-client"). */
#define P	      WIRE_HDR_LEN
#define HELLO_HOLDER  P
#define REPORT_N      (P + 1 + 4 + 3 * 8)
#define REPORT_E0     (REPORT_N + 2)
#define MAX_REPORT_N  (P + WIRE_HOLDER_LEN + 3 * 8) /* holder of 63 bytes */
#define GRANT_LIMIT   P
#define GRANT_HOLDER  (P + 1 + 9)
#define GRANT_REFRESH (GRANT_HOLDER + 1 + 4 + 8 * 8)
#define POLICY_LEN    (P + 2 * 8)

/* Sizes of the sample frames, computed from docs/protocol.md rather than from the encoder. */
#define HELLO_FRAME  (P + 1 + 4 + 4 * 8)
#define GRANT_FRAME  (P + 1 + 9 + 1 + 4 + 9 * 8 + WIRE_TAG_LEN + 1 + 8 + 2)
#define KEY_LEN	     sizeof(struct ll_key_id)
#define KEY_GRANT    (KEY_LEN + 1 + 2 * 8 + WIRE_TAG_LEN)
#define HOT_ENTRY    (1 + KEY_LEN + 4 * 8 + WIRE_TAG_LEN)
/* What version 8 added: a key grant's tag, a hot key's held entry. */
#define KEY_GRANT_V8 WIRE_TAG_LEN
#define HOT_ENTRY_V8 (3 * 8 + WIRE_TAG_LEN)
#define ENTRY_FIXED  (11 * 8 + WIRE_TAG_LEN)
#define REPORT_FRAME (REPORT_E0 + 1 + 10 + ENTRY_FIXED + 1 + 9 + ENTRY_FIXED + 2)
#define POLICY_YAML  "version: 3\ndefault: pass\nlimits: []\nrules: []\n"
#define POLICY_FRAME (POLICY_LEN + 4 + sizeof(POLICY_YAML) - 1)
#define MAX_REPORT_FRAME                                                                           \
	(P + WIRE_HOLDER_LEN + 3 * 8 + 2 + WIRE_MAX_ENTRIES * (LL_NAME_LEN + ENTRY_FIXED) + 2 +    \
	 WIRE_MAX_HOT * HOT_ENTRY)
#define MAX_POLICY_FRAME (POLICY_LEN + 4 + WIRE_MAX_POLICY)

static void fill_name(char *dst, char c, size_t n)
{
	memset(dst, c, n);
	dst[n] = '\0';
}

static void sample_hello(struct wire_msg *m)
{
	m->type = WIRE_HELLO;
	strcpy(m->hello.holder, "gw-1");
	m->hello.incarnation = 0x0102030405060708ull;
	m->hello.max_epoch_seen = 7;
	m->hello.policy_version = 3;
	m->hello.counters_ident = 0xa1a2a3a4a5a6a7a8ull;
}

static void sample_hello_max(struct wire_msg *m)
{
	sample_hello(m);
	fill_name(m->hello.holder, 'h', WIRE_HOLDER_LEN - 1);
	m->hello.incarnation = UINT64_MAX;
}

static void sample_policy(struct wire_msg *m)
{
	m->type = WIRE_POLICY;
	m->policy.epoch = 7;
	m->policy.version = 3;
	m->policy.len = strlen(POLICY_YAML);
	memcpy(m->policy.yaml, POLICY_YAML, m->policy.len);
}

static void sample_policy_max(struct wire_msg *m)
{
	uint32_t i;

	sample_policy(m);
	m->policy.len = WIRE_MAX_POLICY;
	for (i = 0; i < m->policy.len; i++)
		m->policy.yaml[i] = (char)(i * 7); /* any bytes, NUL included: a blob */
}

static void sample_policy_empty(struct wire_msg *m)
{
	sample_policy(m);
	m->policy.len = 0;
	memset(m->policy.yaml, 0, sizeof(POLICY_YAML));
}

static void sample_grant(struct wire_msg *m)
{
	struct wire_grant *g = &m->grant;

	m->type = WIRE_GRANT;
	strcpy(g->limit, "dns-total");
	strcpy(g->holder, "gw-1");
	g->incarnation = 0x1122334455667788ull;
	g->epoch = 7;
	g->seq = 42;
	g->report_seq = 41;
	g->policy_version = 3;
	g->rate = 250;
	g->burst = 500;
	g->ttl_ns = 2000000000ull;
	g->refresh_ns = 500000000ull;
	for (int i = 0; i < WIRE_TAG_LEN; i++)
		g->tag[i] = (uint8_t)(0xc0 + i);
	g->keys_full = 1;
	g->keys_base = 40;
}

static void sample_grant_max(struct wire_msg *m)
{
	sample_grant(m);
	fill_name(m->grant.limit, 'L', LL_NAME_LEN - 1);
	fill_name(m->grant.holder, 'H', WIRE_HOLDER_LEN - 1);
	m->grant.refresh_ns = UINT64_MAX;
}

/* Key i, every byte of it used (the wire carries the bytes as they are). */
static void set_key(struct ll_key_id *k, uint32_t i)
{
	uint8_t *b = (uint8_t *)k;

	for (size_t j = 0; j < sizeof(*k); j++)
		b[j] = (uint8_t)(i * 31 + j);
}

static void sample_grant_keys(struct wire_msg *m)
{
	sample_grant_max(m);
	m->grant.n_keys = WIRE_MAX_KEY_GRANTS;
	for (uint32_t i = 0; i < WIRE_MAX_KEY_GRANTS; i++) {
		set_key(&m->grant.keys[i].key, i);
		m->grant.keys[i].op = (uint8_t)(i % 2);
		m->grant.keys[i].rate = i;
		m->grant.keys[i].burst = UINT64_MAX - i;
		for (int j = 0; j < WIRE_TAG_LEN; j++)
			m->grant.keys[i].tag[j] = (uint8_t)(i + 3 * j);
	}
}

static void set_entry(struct wire_report_entry *e, const char *limit, uint64_t base)
{
	strcpy(e->limit, limit);
	e->applied_epoch = base + 1;
	e->applied_seq = base + 2;
	e->admitted = base + 3;
	e->denied = base + 4;
	e->fallback = base + 5;
	e->bypass = base + 6;
	e->demand = base + 7;
	e->held_rate = base + 8;
	e->held_burst = base + 9;
	e->held_ttl_ns = base + 10;
	e->held_left_ns = base + 11;
	for (int i = 0; i < WIRE_TAG_LEN; i++)
		e->held_tag[i] = (uint8_t)(base + 12 + i);
}

static void sample_report(struct wire_msg *m)
{
	m->type = WIRE_REPORT;
	strcpy(m->report.holder, "gw-1");
	m->report.incarnation = 0x0102030405060708ull;
	m->report.max_epoch_seen = 7;
	m->report.seq = 41;
	m->report.n = 2;
	set_entry(&m->report.e[0], "per-client", 100);
	set_entry(&m->report.e[1], "dns-total", 0xff00000000000000ull);
}

static void sample_report_empty(struct wire_msg *m)
{
	sample_report(m);
	m->report.n = 0;
	memset(m->report.e, 0, 2 * sizeof(m->report.e[0]));
}

static void sample_report_max(struct wire_msg *m)
{
	char name[LL_NAME_LEN];
	uint32_t i;

	sample_report(m);
	fill_name(m->report.holder, 'r', WIRE_HOLDER_LEN - 1);
	m->report.n = WIRE_MAX_ENTRIES;
	for (i = 0; i < WIRE_MAX_ENTRIES; i++) {
		snprintf(name, sizeof(name), "%02u-abcdefghijklmnopqrstuvwxyz.A", i % 100);
		set_entry(&m->report.e[i], name, (uint64_t)i << 40);
	}
	m->report.n_hot = WIRE_MAX_HOT;
	for (i = 0; i < WIRE_MAX_HOT; i++) {
		m->report.hot[i].entry = (uint8_t)(i % WIRE_MAX_ENTRIES);
		set_key(&m->report.hot[i].key, i);
		m->report.hot[i].demand = (uint64_t)i << 32;
		m->report.hot[i].held_seq = i + 1;
		m->report.hot[i].held_rate = (uint64_t)i << 20;
		m->report.hot[i].held_burst = UINT64_MAX - i;
		for (int j = 0; j < WIRE_TAG_LEN; j++)
			m->report.hot[i].held_tag[j] = (uint8_t)(i ^ j);
	}
}

#define METER_ENTRY	(KEY_LEN + 9 * 8)
#define METER_FRAME	(P + 1 + 4 + 3 * 8 + 1 + 5 + 8 + 2 + 2 * METER_ENTRY)
#define METER_ACK_FRAME (P + 8 + 8 + 1)

static void sample_meter(struct wire_msg *m)
{
	m->type = WIRE_METER;
	strcpy(m->meter.holder, "gw-1");
	m->meter.incarnation = 0x0102030405060708ull;
	m->meter.ident = 0xfeedfacecafebeefull;
	m->meter.seq = 9;
	strcpy(m->meter.limit, "dns-1");
	m->meter.limit_uid = 77;
	m->meter.n = 2;
	for (uint32_t i = 0; i < 2; i++) {
		set_key(&m->meter.e[i].key, i);
		m->meter.e[i].born = 0x1000 + i;
		for (int c = 0; c < LL_METER_CLASSES; c++) {
			m->meter.e[i].pkts[c] = i * 100 + (uint64_t)c;
			m->meter.e[i].bytes[c] = UINT64_MAX - i - (uint64_t)c;
		}
	}
}

static void sample_meter_max(struct wire_msg *m)
{
	sample_meter(m);
	fill_name(m->meter.holder, 'm', WIRE_HOLDER_LEN - 1);
	fill_name(m->meter.limit, 'l', LL_NAME_LEN - 1);
	m->meter.n = WIRE_MAX_METER;
	for (uint32_t i = 0; i < WIRE_MAX_METER; i++) {
		set_key(&m->meter.e[i].key, i);
		m->meter.e[i].pkts[i % 4] = i;
		m->meter.e[i].bytes[3] = (uint64_t)i << 40;
	}
}

#define REDIRECT_FRAME (P + 8 + 1 + 7 + 1 + 10)

static void sample_redirect(struct wire_msg *m)
{
	m->type = WIRE_REDIRECT;
	m->redirect.epoch = 12;
	strcpy(m->redirect.leader, "coord-b");
	strcpy(m->redirect.address, "[::1]:7401");
}

/* A replica that knows of no leader: both names empty. */
static void sample_redirect_none(struct wire_msg *m)
{
	m->type = WIRE_REDIRECT;
	m->redirect.epoch = 12;
}

static void sample_redirect_max(struct wire_msg *m)
{
	sample_redirect(m);
	fill_name(m->redirect.leader, 'n', WIRE_HOLDER_LEN - 1);
	fill_name(m->redirect.address, 'a', WIRE_ADDR_LEN - 1);
}

static void sample_meter_ack(struct wire_msg *m)
{
	m->type = WIRE_METER_ACK;
	m->meter_ack.ident = 0xfeedfacecafebeefull;
	m->meter_ack.seq = 9;
	m->meter_ack.status = WIRE_METER_RETRY;
}

/* Every message type, small and at its largest. */
static const struct sample {
	const char *name;
	void (*fill)(struct wire_msg *m);
	size_t frame_len;
} samples[] = {
    {"hello", sample_hello, HELLO_FRAME},
    {"hello, longest holder", sample_hello_max, HELLO_FRAME + WIRE_HOLDER_LEN - 1 - 4},
    {"policy", sample_policy, POLICY_FRAME},
    {"policy, empty", sample_policy_empty, POLICY_LEN + 4},
    {"policy, largest", sample_policy_max, MAX_POLICY_FRAME},
    {"grant", sample_grant, GRANT_FRAME},
    {"grant, longest names", sample_grant_max,
     GRANT_FRAME + LL_NAME_LEN - 1 - 9 + WIRE_HOLDER_LEN - 1 - 4},
    {"grant, every per-key grant", sample_grant_keys,
     GRANT_FRAME + LL_NAME_LEN - 1 - 9 + WIRE_HOLDER_LEN - 1 - 4 + WIRE_MAX_KEY_GRANTS *KEY_GRANT},
    {"report", sample_report, REPORT_FRAME},
    {"report, no entries", sample_report_empty, REPORT_E0 + 2},
    {"report, 256 entries and every hot key", sample_report_max, MAX_REPORT_FRAME},
    {"meter", sample_meter, METER_FRAME},
    {"meter, every entry", sample_meter_max,
     METER_FRAME + WIRE_HOLDER_LEN - 1 - 4 + LL_NAME_LEN - 1 - 5 +
	 (WIRE_MAX_METER - 2) * METER_ENTRY},
    {"meter-ack", sample_meter_ack, METER_ACK_FRAME},
    {"redirect", sample_redirect, REDIRECT_FRAME},
    {"redirect, no leader", sample_redirect_none, P + 8 + 1 + 1},
    {"redirect, longest names", sample_redirect_max, P + 8 + WIRE_HOLDER_LEN + WIRE_ADDR_LEN},
};

enum {
	S_HELLO,
	S_HELLO_MAX,
	S_POLICY,
	S_POLICY_EMPTY,
	S_POLICY_MAX,
	S_GRANT,
	S_GRANT_MAX,
	S_GRANT_KEYS,
	S_REPORT,
	S_REPORT_EMPTY,
	S_REPORT_MAX,
	S_METER,
	S_METER_MAX,
	S_METER_ACK,
	S_REDIRECT,
	S_REDIRECT_NONE,
	S_REDIRECT_MAX,
	S_COUNT
};
_Static_assert(S_COUNT == ARRAY_SIZE(samples), "one index per sample");

/* Encoded samples, made once; tests copy what they corrupt. */
static struct wire_msg *msgs[S_COUNT];
static uint8_t *frames[S_COUNT];
static size_t frame_lens[S_COUNT];
/* Decode target, and scratch whose end is the end of a heap block (ASan sees any over-read). */
static struct wire_msg *out;
static uint8_t *scratch;

static int setup(void **state)
{
	size_t i;
	int rc;

	(void)state;
	out = calloc(1, sizeof(*out));
	scratch = malloc(FRAME_MAX + 1);
	if (!out || !scratch)
		return -1;
	for (i = 0; i < S_COUNT; i++) {
		msgs[i] = calloc(1, sizeof(*msgs[i]));
		frames[i] = malloc(FRAME_MAX);
		if (!msgs[i] || !frames[i])
			return -1;
		samples[i].fill(msgs[i]);
		rc = wire_encode(msgs[i], frames[i], FRAME_MAX);
		if (rc <= 0)
			return -1;
		frame_lens[i] = rc;
	}
	return 0;
}

static int teardown(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < S_COUNT; i++) {
		free(msgs[i]);
		free(frames[i]);
	}
	free(out);
	free(scratch);
	return 0;
}

/* Decode len bytes placed at the very end of the scratch block. */
static int decode_tail(const uint8_t *buf, size_t len)
{
	uint8_t *at = scratch + FRAME_MAX + 1 - len;

	memmove(at, buf, len);
	return wire_decode(at, len, out);
}

static void put_be(uint8_t *at, uint64_t v, size_t width)
{
	while (width--) {
		at[width] = v & 0xff;
		v >>= 8;
	}
}

static uint64_t get_be(const uint8_t *at, size_t width)
{
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < width; i++)
		v = v << 8 | at[i];
	return v;
}

static void test_round_trip(void **state)
{
	size_t i;
	int rc;

	(void)state;
	for (i = 0; i < S_COUNT; i++) {
		if (frame_lens[i] != samples[i].frame_len)
			fail_msg("%s: encoded %zu bytes, expected %zu", samples[i].name,
				 frame_lens[i], samples[i].frame_len);
		memset(out, 0, sizeof(*out));
		rc = decode_tail(frames[i], frame_lens[i]);
		if (rc != (int)frame_lens[i])
			fail_msg("%s: decode returned %d, expected %zu", samples[i].name, rc,
				 frame_lens[i]);
		/* Both sides start zeroed and the decoder zero-fills names: whole structs
		 * compare, once the version the decoder read is checked and set aside.
		 */
		if (out->version != WIRE_VERSION)
			fail_msg("%s: decoded version %u", samples[i].name, out->version);
		out->version = 0;
		if (memcmp(out, msgs[i], sizeof(*out)))
			fail_msg("%s: decoded message differs from the one encoded",
				 samples[i].name);
	}
}

/* The exact bytes of the sample hello, as docs/protocol.md shows them. */
static void test_hello_bytes(void **state)
{
	static const uint8_t expect[] = {
	    0x4c, 0x4c, 0x57, 0x31, 0x00, 0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x25, /* header */
	    0x04, 'g',	'w',  '-',  '1',					    /* holder */
	    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* incarnation */
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, /* max_epoch_seen */
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, /* policy_version */
	    0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, /* counters_ident */
	};

	(void)state;
	assert_int_equal(frame_lens[S_HELLO], sizeof(expect));
	assert_memory_equal(frames[S_HELLO], expect, sizeof(expect));
}

static void test_every_prefix_needs_more(void **state)
{
	size_t i, len;
	int rc;

	(void)state;
	for (i = 0; i < S_COUNT; i++) {
		for (len = 0; len < frame_lens[i]; len++) {
			rc = decode_tail(frames[i], len);
			if (rc != 0)
				fail_msg("%s: %zu of %zu bytes: decode returned %d, expected 0",
					 samples[i].name, len, frame_lens[i], rc);
		}
	}
}

/* One field of a sample frame overwritten (or moved by delta) before decoding. */
struct corruption {
	const char *desc;
	int sample;
	size_t off, width;
	int64_t value;
	bool delta; /* add value to the field instead of storing it */
	int rc;	    /* FRAME_OK: the whole frame decodes */
};

#define FRAME_OK 1

static const struct corruption header_cases[] = {
    {"magic", S_HELLO, HDR_MAGIC, 4, 0x4c4c5732, false, -EPROTO},
    {"magic, first byte", S_HELLO, HDR_MAGIC, 1, 0, false, -EPROTO},
    /* Another build: told apart from garbage, so the log can say so. */
    {"version 0", S_HELLO, HDR_VERSION, 2, 0, false, -EPROTONOSUPPORT},
    {"version 2", S_HELLO, HDR_VERSION, 2, WIRE_VERSION + 1, false, -EPROTONOSUPPORT},
    {"version 5", S_HELLO, HDR_VERSION, 2, WIRE_VERSION_MIN - 1, false, -EPROTONOSUPPORT},
    {"version 256", S_HELLO, HDR_VERSION, 2, 0x100 | WIRE_VERSION, false, -EPROTONOSUPPORT},
    {"type 0", S_HELLO, HDR_TYPE, 2, 0, false, -EPROTO},
    {"type 8", S_HELLO, HDR_TYPE, 2, WIRE_REDIRECT + 1, false, -EPROTO},
    {"type 65535", S_HELLO, HDR_TYPE, 2, 65535, false, -EPROTO},
    {"type 257", S_HELLO, HDR_TYPE, 2, 0x100 | WIRE_HELLO, false, -EPROTO},
    {"length max + 1", S_HELLO, HDR_LENGTH, 4, WIRE_MAX_PAYLOAD + 1, false, -EPROTO},
    {"length 2^31", S_HELLO, HDR_LENGTH, 4, 0x80000000, false, -EPROTO},
    {"length 2^32 - 1", S_HELLO, HDR_LENGTH, 4, 0xffffffff, false, -EPROTO},
};

static const struct corruption payload_cases[] = {
    /* control: the corruption harness itself leaves a valid frame valid */
    {"nothing changed", S_GRANT, GRANT_REFRESH, 1, 0, true, FRAME_OK},
    {"frame length one short", S_HELLO, HDR_LENGTH, 4, -1, true, -EPROTO},
    {"frame length one long (trailing byte)", S_HELLO, HDR_LENGTH, 4, 1, true, -EPROTO},
    {"frame length 0", S_HELLO, HDR_LENGTH, 4, 0, false, -EPROTO},
    {"holder length 0", S_HELLO, HELLO_HOLDER, 1, 0, false, -EPROTO},
    {"holder length beyond the payload", S_HELLO, HELLO_HOLDER, 1, 63, false, -EPROTO},
    {"holder length 255", S_HELLO, HELLO_HOLDER, 1, 255, false, -EPROTO},
    {"holder length one short", S_HELLO, HELLO_HOLDER, 1, -1, true, -EPROTO},
    {"holder length one long", S_HELLO, HELLO_HOLDER, 1, 1, true, -EPROTO},
    {"holder with '/'", S_HELLO, HELLO_HOLDER + 2, 1, '/', false, -EPROTO},
    {"holder with a space", S_HELLO, HELLO_HOLDER + 1, 1, ' ', false, -EPROTO},
    {"holder with NUL", S_HELLO, HELLO_HOLDER + 4, 1, 0, false, -EPROTO},
    {"holder with 0x80", S_HELLO, HELLO_HOLDER + 1, 1, 0x80, false, -EPROTO},
    {"holder with ':'", S_GRANT, GRANT_HOLDER + 1, 1, ':', false, -EPROTO},
    {"limit name length 0", S_GRANT, GRANT_LIMIT, 1, 0, false, -EPROTO},
    {"limit name length 32", S_GRANT_MAX, GRANT_LIMIT, 1, LL_NAME_LEN, false, -EPROTO},
    {"limit name with '*'", S_GRANT, GRANT_LIMIT + 9, 1, '*', false, -EPROTO},
    {"grant one byte long", S_GRANT, HDR_LENGTH, 4, 1, true, -EPROTO},
    {"report n 257", S_REPORT, REPORT_N, 2, WIRE_MAX_ENTRIES + 1, false, -EPROTO},
    {"report n 65535", S_REPORT, REPORT_N, 2, 65535, false, -EPROTO},
    {"report n 257 with 256 entries", S_REPORT_MAX, MAX_REPORT_N, 2, 1, true, -EPROTO},
    {"report n one more than sent", S_REPORT, REPORT_N, 2, 1, true, -EPROTO},
    {"report n one fewer than sent", S_REPORT, REPORT_N, 2, -1, true, -EPROTO},
    {"entry name length 0", S_REPORT, REPORT_E0, 1, 0, false, -EPROTO},
    {"entry name with '@'", S_REPORT, REPORT_E0 + 1, 1, '@', false, -EPROTO},
    {"policy length one long", S_POLICY, POLICY_LEN, 4, 1, true, -EPROTO},
    {"policy length one short", S_POLICY, POLICY_LEN, 4, -1, true, -EPROTO},
    {"policy length 2^32 - 1", S_POLICY, POLICY_LEN, 4, 0xffffffff, false, -EPROTO},
    {"policy length max + 1", S_POLICY_MAX, POLICY_LEN, 4, 1, true, -EPROTO},
};

/* The frame, corrupted, followed by one spare byte: a frame must stop where its length says. */
static int run_corruption(const struct corruption *c, size_t *frame_len)
{
	size_t len = frame_lens[c->sample];
	uint8_t *buf = malloc(len + 1);
	uint64_t v = c->value;
	int rc;

	assert_non_null(buf);
	memcpy(buf, frames[c->sample], len);
	buf[len] = 0;
	if (c->delta)
		v += get_be(buf + c->off, c->width);
	put_be(buf + c->off, v, c->width);
	rc = decode_tail(buf, len + 1);
	free(buf);
	*frame_len = len;
	return rc;
}

static void run_corruptions(const struct corruption *cases, size_t n)
{
	size_t i, len;
	int rc, want;

	for (i = 0; i < n; i++) {
		rc = run_corruption(&cases[i], &len);
		want = cases[i].rc == FRAME_OK ? (int)len : cases[i].rc;
		if (rc != want)
			fail_msg("%s: decode returned %d, expected %d", cases[i].desc, rc, want);
	}
}

/* Version 7, an agent one version behind: a grant goes out without its
 * keys' tags and a report without its hot keys' held entries, and both
 * decode with those fields 0.
 */
static void test_version_7(void **state)
{
	static uint8_t buf[FRAME_MAX];
	int n;

	(void)state;
	n = wire_encode_v(msgs[S_GRANT_KEYS], 7, buf, sizeof(buf));
	assert_int_equal(n, (int)(frame_lens[S_GRANT_KEYS] - WIRE_MAX_KEY_GRANTS * KEY_GRANT_V8));
	assert_int_equal(decode_tail(buf, (size_t)n), n);
	assert_int_equal(out->version, 7);
	for (uint32_t i = 0; i < WIRE_MAX_KEY_GRANTS; i++) {
		static const uint8_t zero[WIRE_TAG_LEN];

		assert_memory_equal(out->grant.keys[i].tag, zero, WIRE_TAG_LEN);
		assert_int_equal(out->grant.keys[i].burst, msgs[S_GRANT_KEYS]->grant.keys[i].burst);
	}
	n = wire_encode_v(msgs[S_REPORT_MAX], 7, buf, sizeof(buf));
	assert_int_equal(n, (int)(frame_lens[S_REPORT_MAX] - WIRE_MAX_HOT * HOT_ENTRY_V8));
	memset(out, 0xee, sizeof(*out)); /* what a v7 frame lacks is zeroed, not left */
	assert_int_equal(decode_tail(buf, (size_t)n), n);
	assert_int_equal(out->report.n_hot, WIRE_MAX_HOT);
	for (uint32_t i = 0; i < WIRE_MAX_HOT; i++) {
		const struct wire_hot *w = &out->report.hot[i];

		assert_int_equal(w->held_seq | w->held_rate | w->held_burst, 0);
		assert_int_equal(w->held_tag[0] | w->held_tag[WIRE_TAG_LEN - 1], 0);
		assert_int_equal(w->demand, msgs[S_REPORT_MAX]->report.hot[i].demand);
	}
}

/* Version 6 (WIRE_VERSION_MIN), an agent two versions behind: its frames
 * decode, with their version; a frame goes out in 6 when asked, and then
 * carries no cut, which 6 does not know (refused to encode, and refused in
 * a version-6 frame that claims one).
 */
static void test_version_6(void **state)
{
	static uint8_t buf[FRAME_MAX];
	int n;

	(void)state;
	memcpy(buf, frames[S_HELLO], frame_lens[S_HELLO]);
	put_be(buf + HDR_VERSION, 6, 2);
	assert_int_equal(decode_tail(buf, frame_lens[S_HELLO]), (int)frame_lens[S_HELLO]);
	assert_int_equal(out->version, 6);
	assert_string_equal(out->hello.holder, msgs[S_HELLO]->hello.holder);

	n = wire_encode_v(msgs[S_GRANT_KEYS], 6, buf, sizeof(buf));
	assert_int_equal(n, (int)(frame_lens[S_GRANT_KEYS] - WIRE_MAX_KEY_GRANTS * KEY_GRANT_V8));
	assert_int_equal(get_be(buf + HDR_VERSION, 2), 6);
	assert_int_equal(decode_tail(buf, (size_t)n), n);
	assert_int_equal(out->version, 6);

	msgs[S_GRANT_KEYS]->grant.keys_full = WIRE_KEYS_CUT;
	assert_int_equal(wire_encode_v(msgs[S_GRANT_KEYS], 6, buf, sizeof(buf)), -EINVAL);
	n = wire_encode_v(msgs[S_GRANT_KEYS], 7, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(decode_tail(buf, (size_t)n), n);
	assert_int_equal(out->grant.keys_full, WIRE_KEYS_CUT);
	put_be(buf + HDR_VERSION, 6, 2);
	assert_int_equal(decode_tail(buf, (size_t)n), -EPROTO);
	msgs[S_GRANT_KEYS]->grant.keys_full = WIRE_KEYS_WHOLE;
	assert_int_equal(wire_encode_v(msgs[S_HELLO], 5, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(wire_encode_v(msgs[S_HELLO], WIRE_VERSION + 1, buf, sizeof(buf)), -EINVAL);
}

static void test_header_corruption(void **state)
{
	(void)state;
	run_corruptions(header_cases, ARRAY_SIZE(header_cases));
}

/* A bad header is refused as soon as the header is in, without waiting for the payload. */
static void test_header_refused_early(void **state)
{
	uint8_t hdr[WIRE_HDR_LEN];
	size_t i;
	int rc;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(header_cases); i++) {
		memcpy(hdr, frames[header_cases[i].sample], sizeof(hdr));
		put_be(hdr + header_cases[i].off, header_cases[i].value, header_cases[i].width);
		rc = decode_tail(hdr, sizeof(hdr));
		if (rc != header_cases[i].rc)
			fail_msg("%s, header only: decode returned %d", header_cases[i].desc, rc);
	}
}

static void test_payload_corruption(void **state)
{
	(void)state;
	run_corruptions(payload_cases, ARRAY_SIZE(payload_cases));
}

/* For every sample: one more or one fewer payload byte, with the length to match, is refused. */
static void test_payload_must_be_exact(void **state)
{
	uint8_t *buf = malloc(FRAME_MAX + 1);
	size_t i, len;
	int rc;

	(void)state;
	assert_non_null(buf);
	for (i = 0; i < S_COUNT; i++) {
		len = frame_lens[i];
		memcpy(buf, frames[i], len);
		buf[len] = 'x';
		put_be(buf + HDR_LENGTH, len + 1 - WIRE_HDR_LEN, 4);
		rc = decode_tail(buf, len + 1);
		if (rc != -EPROTO)
			fail_msg("%s + 1 byte: decode returned %d", samples[i].name, rc);
		put_be(buf + HDR_LENGTH, len - 1 - WIRE_HDR_LEN, 4);
		rc = decode_tail(buf, len - 1);
		if (rc != -EPROTO)
			fail_msg("%s - 1 byte: decode returned %d", samples[i].name, rc);
	}
	free(buf);
}

/* Payloads written by hand: the name and count bounds, exactly at and one past the limit.
 * pb_decode returns FRAME_OK when the whole frame decodes.
 */
struct pb {
	uint8_t *b;
	size_t n;
};

static void pb_put(struct pb *p, uint64_t v, size_t width)
{
	put_be(p->b + p->n, v, width);
	p->n += width;
}

static void pb_name(struct pb *p, size_t len, char c)
{
	pb_put(p, len, 1);
	memset(p->b + p->n, c, len);
	p->n += len;
}

static int pb_decode(struct pb *p, uint16_t type)
{
	uint8_t *hdr = p->b - WIRE_HDR_LEN;
	int rc;

	put_be(hdr + HDR_MAGIC, WIRE_MAGIC, 4);
	put_be(hdr + HDR_VERSION, WIRE_VERSION, 2);
	put_be(hdr + HDR_TYPE, type, 2);
	put_be(hdr + HDR_LENGTH, p->n, 4);
	rc = decode_tail(hdr, WIRE_HDR_LEN + p->n);
	return rc == (int)(WIRE_HDR_LEN + p->n) ? FRAME_OK : rc;
}

static int craft_hello(uint8_t *buf, size_t holder_len)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};

	pb_name(&p, holder_len, 'a');
	pb_put(&p, 1, 8);
	pb_put(&p, 2, 8);
	pb_put(&p, 3, 8);
	pb_put(&p, 4, 8);
	return pb_decode(&p, WIRE_HELLO);
}

static unsigned craft_keys_full; /* what craft_grant writes as keys_full */

static int craft_grant(uint8_t *buf, size_t limit_len, size_t extra)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};
	int i;

	pb_name(&p, limit_len, 'z');
	pb_name(&p, 4, 'g');
	for (i = 0; i < 9; i++)
		pb_put(&p, i, 8);
	pb_put(&p, 0, WIRE_TAG_LEN);	   /* tag */
	pb_put(&p, craft_keys_full, 1);	   /* keys_full */
	pb_put(&p, 0, 8);		   /* keys_base */
	pb_put(&p, 0, 2);		   /* no per-key grants */
	for (size_t j = 0; j < extra; j++) /* bytes past the last field */
		pb_put(&p, 0, 1);
	return pb_decode(&p, WIRE_GRANT);
}

static int craft_report(uint8_t *buf, size_t n, size_t limit_len)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};
	size_t i;

	pb_name(&p, 4, 'g');
	pb_put(&p, 1, 8);
	pb_put(&p, 2, 8);
	pb_put(&p, 3, 8);
	pb_put(&p, n, 2);
	for (i = 0; i < n; i++) {
		pb_name(&p, limit_len, 'e');
		pb_put(&p, i, 8);
		pb_put(&p, 0, ENTRY_FIXED - 8);
	}
	pb_put(&p, 0, 2); /* no hot keys */
	return pb_decode(&p, WIRE_REPORT);
}

/* A report with one entry and n_hot hot keys naming entry `entry`. */
static int craft_hot(uint8_t *buf, size_t n_hot, unsigned entry)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};
	size_t i;

	pb_name(&p, 4, 'g');
	pb_put(&p, 1, 8);
	pb_put(&p, 2, 8);
	pb_put(&p, 3, 8);
	pb_put(&p, 1, 2);
	pb_name(&p, 1, 'e');
	pb_put(&p, 0, ENTRY_FIXED);
	pb_put(&p, n_hot, 2);
	for (i = 0; i < n_hot; i++) {
		pb_put(&p, entry, 1);
		memset(p.b + p.n, 0xa5, KEY_LEN);
		p.n += KEY_LEN;
		pb_put(&p, i, 8);
		pb_put(&p, 0, HOT_ENTRY_V8); /* no held entry */
	}
	return pb_decode(&p, WIRE_REPORT);
}

/* A meter batch of n entries (count as sent: count), ack status `status`. */
static int craft_meter(uint8_t *buf, size_t count, size_t n)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};

	pb_name(&p, 4, 'g');
	pb_put(&p, 1, 8);
	pb_put(&p, 2, 8);
	pb_put(&p, 3, 8);
	pb_name(&p, 3, 'l');
	pb_put(&p, 5, 8);
	pb_put(&p, count, 2);
	for (size_t i = 0; i < n; i++) {
		memset(p.b + p.n, 0x5a, KEY_LEN);
		p.n += KEY_LEN;
		pb_put(&p, 99, 8); /* born */
		for (int c = 0; c < 8; c++)
			pb_put(&p, i + (size_t)c, 8);
	}
	return pb_decode(&p, WIRE_METER);
}

static int craft_meter_ack(uint8_t *buf, unsigned status)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};

	pb_put(&p, 1, 8);
	pb_put(&p, 2, 8);
	pb_put(&p, status, 1);
	return pb_decode(&p, WIRE_METER_ACK);
}

/* A redirect naming leader "c" at address addr (as bytes: any of them). */
static int craft_redirect(uint8_t *buf, const char *addr, size_t len)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};

	pb_put(&p, 9, 8);
	pb_name(&p, 1, 'c');
	pb_put(&p, len, 1);
	memcpy(p.b + p.n, addr, len);
	p.n += len;
	return pb_decode(&p, WIRE_REDIRECT);
}

static int craft_policy(uint8_t *buf, size_t yaml_len)
{
	struct pb p = {.b = buf + WIRE_HDR_LEN};

	pb_put(&p, 7, 8);
	pb_put(&p, 3, 8);
	pb_put(&p, yaml_len, 4);
	memset(p.b + p.n, '#', yaml_len);
	p.n += yaml_len;
	return pb_decode(&p, WIRE_POLICY);
}

static void test_bounds_by_hand(void **state)
{
	/* A payload one byte past WIRE_MAX_POLICY still fits a frame: its own bound refuses it. */
	uint8_t *buf = calloc(1, FRAME_MAX + 1);

	(void)state;
	assert_non_null(buf);
	assert_int_equal(craft_hello(buf, 0), -EPROTO);
	assert_int_equal(craft_hello(buf, 1), FRAME_OK);
	assert_int_equal(craft_hello(buf, WIRE_HOLDER_LEN - 1), FRAME_OK);
	assert_string_equal(out->hello.holder + WIRE_HOLDER_LEN - 2, "a");
	assert_int_equal(craft_hello(buf, WIRE_HOLDER_LEN), -EPROTO);
	assert_int_equal(craft_hello(buf, 255), -EPROTO);

	assert_int_equal(craft_grant(buf, 0, 0), -EPROTO);
	assert_int_equal(craft_grant(buf, LL_NAME_LEN - 1, 0), FRAME_OK);
	assert_int_equal(craft_grant(buf, LL_NAME_LEN, 0), -EPROTO);
	assert_int_equal(craft_grant(buf, 1, 0), FRAME_OK);
	assert_int_equal(out->grant.refresh_ns, 8);
	/* A version-1 grant (on-loss and fallback share after refresh_ns). */
	assert_int_equal(craft_grant(buf, 1, 17), -EPROTO);
	/* Version 7: keys_full is a whole set, changes or a cut, nothing else. */
	craft_keys_full = WIRE_KEYS_CUT;
	assert_int_equal(craft_grant(buf, 1, 0), FRAME_OK);
	assert_int_equal(out->grant.keys_full, WIRE_KEYS_CUT);
	craft_keys_full = WIRE_KEYS_CUT + 1;
	assert_int_equal(craft_grant(buf, 1, 0), -EPROTO);
	craft_keys_full = 0;

	assert_int_equal(craft_report(buf, 0, 1), FRAME_OK);
	assert_int_equal(craft_report(buf, WIRE_MAX_ENTRIES, LL_NAME_LEN - 1), FRAME_OK);
	assert_int_equal(out->report.n, WIRE_MAX_ENTRIES);
	assert_int_equal(out->report.e[WIRE_MAX_ENTRIES - 1].applied_epoch, WIRE_MAX_ENTRIES - 1);
	assert_int_equal(craft_report(buf, WIRE_MAX_ENTRIES + 1, 1), -EPROTO);
	assert_int_equal(craft_report(buf, 1, LL_NAME_LEN), -EPROTO);
	assert_int_equal(craft_report(buf, 1, 0), -EPROTO);
	/* Version 5: a report carries one entry for each of 256 limits, not one more. */
	assert_int_equal(craft_report(buf, 256, LL_NAME_LEN - 1), FRAME_OK);
	assert_int_equal(out->report.n, 256);
	assert_int_equal(out->report.e[255].applied_epoch, 255);
	assert_int_equal(craft_report(buf, 257, 1), -EPROTO);

	assert_int_equal(craft_hot(buf, WIRE_MAX_HOT, WIRE_MAX_ENTRIES - 1), FRAME_OK);
	assert_int_equal(out->report.n_hot, WIRE_MAX_HOT);
	assert_int_equal(out->report.hot[WIRE_MAX_HOT - 1].demand, WIRE_MAX_HOT - 1);
	assert_int_equal(craft_hot(buf, WIRE_MAX_HOT + 1, 0), -EPROTO);
	/* Every u8 names an entry a report may have (256 of them): one past
	 * this report's n decodes, and the coordinator ignores it (on_report).
	 */
	assert_int_equal(craft_hot(buf, 1, WIRE_MAX_ENTRIES - 1), FRAME_OK);
	assert_int_equal(out->report.hot[0].entry, 255);

	assert_int_equal(craft_meter(buf, 0, 0), FRAME_OK);
	assert_int_equal(craft_meter(buf, WIRE_MAX_METER, WIRE_MAX_METER), FRAME_OK);
	assert_int_equal(out->meter.n, WIRE_MAX_METER);
	assert_int_equal(out->meter.e[WIRE_MAX_METER - 1].bytes[3], WIRE_MAX_METER - 1 + 7);
	assert_int_equal(craft_meter(buf, WIRE_MAX_METER + 1, WIRE_MAX_METER + 1), -EPROTO);
	assert_int_equal(craft_meter(buf, 3, 2), -EPROTO); /* a count beyond the bytes */
	assert_int_equal(craft_meter(buf, 1, 2), -EPROTO); /* bytes beyond the count */
	assert_int_equal(craft_meter_ack(buf, WIRE_METER_REFUSED), FRAME_OK);
	assert_int_equal(craft_meter_ack(buf, WIRE_METER_REFUSED + 1), -EPROTO);

	/* A redirect's address is host:port or [v6]:port, bounded, and nothing else. */
	assert_int_equal(craft_redirect(buf, "10.0.0.2:7401", 13), FRAME_OK);
	assert_string_equal(out->redirect.address, "10.0.0.2:7401");
	assert_int_equal(craft_redirect(buf, "[fe80::1]:7401", 14), FRAME_OK);
	assert_int_equal(craft_redirect(buf, "", 0), FRAME_OK);
	assert_int_equal(craft_redirect(buf, "a/b:1", 5), -EPROTO);
	assert_int_equal(craft_redirect(buf, "a b:1", 5), -EPROTO);
	assert_int_equal(craft_redirect(buf, "a\0b:1", 4), -EPROTO);
	{
		char big[WIRE_ADDR_LEN];

		memset(big, 'a', sizeof(big));
		assert_int_equal(craft_redirect(buf, big, WIRE_ADDR_LEN - 1), FRAME_OK);
		assert_int_equal(craft_redirect(buf, big, WIRE_ADDR_LEN), -EPROTO);
	}

	assert_int_equal(craft_policy(buf, 0), FRAME_OK);
	assert_int_equal(craft_policy(buf, WIRE_MAX_POLICY), FRAME_OK);
	assert_int_equal(craft_policy(buf, WIRE_MAX_POLICY + 1), -EPROTO);
	free(buf);
}

/* All samples in one stream: each decode takes exactly one frame; a cut frame waits. */
static void test_back_to_back(void **state)
{
	uint8_t *stream;
	size_t total = 0, at, i;
	int rc;

	(void)state;
	for (i = 0; i < S_COUNT; i++)
		total += frame_lens[i];
	stream = malloc(total);
	assert_non_null(stream);
	for (i = 0, at = 0; i < S_COUNT; at += frame_lens[i], i++)
		memcpy(stream + at, frames[i], frame_lens[i]);

	for (i = 0, at = 0; i < S_COUNT; i++) {
		rc = wire_decode(stream + at, total - at, out);
		assert_int_equal(rc, frame_lens[i]);
		assert_int_equal(out->type, msgs[i]->type);
		/* the next frame cut one byte short: this one still decodes, the next waits */
		if (i + 1 < S_COUNT) {
			rc = wire_decode(stream + at, frame_lens[i] + frame_lens[i + 1] - 1, out);
			assert_int_equal(rc, frame_lens[i]);
			rc = wire_decode(stream + at + rc, frame_lens[i + 1] - 1, out);
			assert_int_equal(rc, 0);
		}
		at += frame_lens[i];
	}
	assert_int_equal(wire_decode(stream + at, total - at, out), 0);
	free(stream);
}

/* xorshift64: deterministic, so a failure reproduces with the same iteration number. */
static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

#define FUZZ_ITERATIONS 200000
#define FUZZ_SEED	0x9e3779b97f4a7c15ull
#define FUZZ_HOT_BYTES	128 /* half the mutations land here: headers, names, counts */

static uint8_t fuzz_byte(uint64_t *s, size_t len)
{
	static const uint8_t edges[] = {0, 1, 2, 3, 0x3f, 0x40, 0x41, 0x7f, 0x80, 0xff};
	uint64_t r = rnd_next(s);

	if (r & 1)
		return edges[(r >> 1) % ARRAY_SIZE(edges)];
	if (r & 2)
		return (uint8_t)(len + (int)((r >> 8) % 5) - 2); /* near a plausible length */
	return r >> 16;
}

static void fuzz_mutate(uint64_t *s, uint8_t *buf, size_t len)
{
	size_t k = 1 + rnd_next(s) % 4, pos, span;

	while (k--) {
		span = (rnd_next(s) & 1) && len > FUZZ_HOT_BYTES ? FUZZ_HOT_BYTES : len;
		pos = rnd_next(s) % span;
		buf[pos] = fuzz_byte(s, len - pos);
	}
}

static void fuzz_check(const uint8_t *buf, size_t len, int rc, uint8_t *reenc, size_t iter)
{
	if (rc != 0 && rc != -EPROTO && rc != -EPROTONOSUPPORT && (rc < 0 || (size_t)rc > len))
		fail_msg("iteration %zu: decode of %zu bytes returned %d", iter, len, rc);
	if (rc <= 0)
		return;
	/* One encoding per message: what decodes must re-encode to the same bytes
	 * (in the version it came in).
	 */
	if (wire_encode_v(out, out->version, reenc, FRAME_MAX) != rc || memcmp(reenc, buf, rc))
		fail_msg("iteration %zu: decoded frame does not re-encode to its bytes", iter);
}

static void test_fuzz(void **state)
{
	uint8_t *buf = malloc(FRAME_MAX + 1), *reenc = malloc(FRAME_MAX), *at;
	size_t seen[3] = {0}; /* need more, -EPROTO, a frame */
	uint64_t s = FUZZ_SEED;
	size_t iter, i, len;
	int rc;

	(void)state;
	assert_non_null(buf);
	assert_non_null(reenc);
	for (iter = 0; iter < FUZZ_ITERATIONS; iter++) {
		i = rnd_next(&s) % S_COUNT;
		len = frame_lens[i];
		memcpy(buf, frames[i], len);
		fuzz_mutate(&s, buf, len);
		if (rnd_next(&s) % 4 == 0)
			len = rnd_next(&s) % (len + 1);
		at = scratch + FRAME_MAX + 1 - len;
		memcpy(at, buf, len);
		rc = wire_decode(at, len, out);
		fuzz_check(at, len, rc, reenc, iter);
		seen[rc == 0 ? 0 : rc < 0 ? 1 : 2]++;
	}
	print_message("fuzz: %zu need more, %zu refused, %zu decoded\n", seen[0], seen[1], seen[2]);
	assert_true(seen[0] && seen[1] && seen[2]);
	free(buf);
	free(reenc);
}

/* A change that makes a sample unencodable, and the error the encoder must return. */
struct bad_msg {
	const char *desc;
	int sample;
	void (*spoil)(struct wire_msg *m);
	int rc;
};

static void holder_no_nul(struct wire_msg *m)
{
	memset(m->hello.holder, 'a', WIRE_HOLDER_LEN);
}

static void holder_empty(struct wire_msg *m)
{
	m->hello.holder[0] = '\0';
}

static void holder_space(struct wire_msg *m)
{
	strcpy(m->hello.holder, "gw 1");
}

static void limit_no_nul(struct wire_msg *m)
{
	memset(m->grant.limit, 'a', LL_NAME_LEN);
}

static void grant_holder_slash(struct wire_msg *m)
{
	strcpy(m->grant.holder, "gw/1");
}

/* A valid 257th entry sits just past the array (still inside the union): only the count check
 * can refuse this report.
 */
static void report_n_257(struct wire_msg *m)
{
	struct wire_report_entry extra;
	size_t at = offsetof(struct wire_msg, report.e) + WIRE_MAX_ENTRIES * sizeof(extra);

	assert_true(at + sizeof(extra) <= sizeof(*m));
	memset(&extra, 0, sizeof(extra));
	set_entry(&extra, "one-too-many", 0);
	memcpy((uint8_t *)m + at, &extra, sizeof(extra));
	m->report.n = WIRE_MAX_ENTRIES + 1;
}

static void entry_empty_name(struct wire_msg *m)
{
	m->report.e[1].limit[0] = '\0';
}

static void policy_too_long(struct wire_msg *m)
{
	m->policy.len = WIRE_MAX_POLICY + 1;
}

static void type_0(struct wire_msg *m)
{
	m->type = 0;
}

static void type_5(struct wire_msg *m)
{
	m->type = WIRE_REPORT + 1;
}

static const struct bad_msg bad_msgs[] = {
    {"holder of 64 bytes, no NUL", S_HELLO, holder_no_nul, -EINVAL},
    {"empty holder", S_HELLO, holder_empty, -EINVAL},
    {"holder with a space", S_HELLO, holder_space, -EINVAL},
    {"limit name of 32 bytes, no NUL", S_GRANT, limit_no_nul, -EINVAL},
    {"grant holder with '/'", S_GRANT, grant_holder_slash, -EINVAL},
    {"report n 257", S_REPORT_MAX, report_n_257, -EINVAL},
    {"entry with an empty name", S_REPORT, entry_empty_name, -EINVAL},
    {"policy longer than WIRE_MAX_POLICY", S_POLICY_MAX, policy_too_long, -EINVAL},
    {"type 0", S_HELLO, type_0, -EINVAL},
    {"type 5", S_HELLO, type_5, -EINVAL},
};

static void test_encode_refuses(void **state)
{
	struct wire_msg *m = malloc(sizeof(*m));
	uint8_t *buf = malloc(FRAME_MAX);
	size_t i;
	int rc;

	(void)state;
	assert_non_null(m);
	assert_non_null(buf);
	for (i = 0; i < ARRAY_SIZE(bad_msgs); i++) {
		memcpy(m, msgs[bad_msgs[i].sample], sizeof(*m));
		bad_msgs[i].spoil(m);
		rc = wire_encode(m, buf, FRAME_MAX);
		if (rc != bad_msgs[i].rc)
			fail_msg("%s: encode returned %d, expected %d", bad_msgs[i].desc, rc,
				 bad_msgs[i].rc);
	}
	free(m);
	free(buf);
}

#define GUARD_LEN  16
#define GUARD_BYTE 0xa5

/* Every capacity short of the frame is -EMSGSIZE, and nothing is written past the capacity. */
static void test_encode_small_buffer(void **state)
{
	uint8_t *buf = malloc(FRAME_MAX + GUARD_LEN);
	uint8_t guard[GUARD_LEN];
	size_t i, cap;
	int rc;

	(void)state;
	assert_non_null(buf);
	memset(guard, GUARD_BYTE, sizeof(guard));
	for (i = 0; i < S_COUNT; i++) {
		/* Every cap in a frame's first and last 1024 bytes (headers, names,
		 * counts, the last entries), every 61st in between: the big frames
		 * (64 KiB policies, 1024-key grants) tried at every cap took 42 s
		 * under ASan, quadratic, for no field more.
		 */
		for (cap = 0; cap < frame_lens[i];
		     cap += cap < 1024 || cap + 1024 >= frame_lens[i] ? 1 : 61) {
			memset(buf + cap, GUARD_BYTE, GUARD_LEN);
			rc = wire_encode(msgs[i], buf, cap);
			if (rc != -EMSGSIZE || memcmp(buf + cap, guard, GUARD_LEN))
				fail_msg(
				    "%s into %zu bytes: encode returned %d or wrote past the end",
				    samples[i].name, cap, rc);
		}
		assert_int_equal(wire_encode(msgs[i], buf, frame_lens[i]), frame_lens[i]);
	}
	free(buf);
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(wire_type_name(WIRE_HELLO), "hello");
	assert_string_equal(wire_type_name(WIRE_POLICY), "policy");
	assert_string_equal(wire_type_name(WIRE_GRANT), "grant");
	assert_string_equal(wire_type_name(WIRE_REPORT), "report");
	assert_string_equal(wire_type_name(WIRE_METER), "meter");
	assert_string_equal(wire_type_name(WIRE_METER_ACK), "meter-ack");
	assert_string_equal(wire_type_name(0), "unknown");
	assert_string_equal(wire_type_name(WIRE_REDIRECT), "redirect");
	assert_string_equal(wire_type_name(WIRE_REDIRECT + 1), "unknown");
	assert_string_equal(wire_type_name(65535), "unknown");
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_hello_bytes),
	    cmocka_unit_test(test_every_prefix_needs_more),
	    cmocka_unit_test(test_version_6),
	    cmocka_unit_test(test_version_7),
	    cmocka_unit_test(test_header_corruption),
	    cmocka_unit_test(test_header_refused_early),
	    cmocka_unit_test(test_payload_corruption),
	    cmocka_unit_test(test_payload_must_be_exact),
	    cmocka_unit_test(test_bounds_by_hand),
	    cmocka_unit_test(test_back_to_back),
	    cmocka_unit_test(test_fuzz),
	    cmocka_unit_test(test_encode_refuses),
	    cmocka_unit_test(test_encode_small_buffer),
	    cmocka_unit_test(test_type_names),
	};

	return cmocka_run_group_tests_name("wire", tests, setup, teardown);
}
