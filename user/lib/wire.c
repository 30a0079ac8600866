// SPDX-License-Identifier: MIT
/*
 * Frames of the agent <-> coordinator protocol (docs/protocol.md). Each message is a table of
 * fields walked by one encoder and one decoder, so the two cannot disagree on a layout. The
 * decoder accepts exactly what the encoder produces: never reads past len, never allocates.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "lib/wire.h"
#include "lib/util.h"

#define member_size(type, member) sizeof(((type *)0)->member)

/* Wire widths of the length prefixes: names are short, a policy needs 32 bits. */
#define WIRE_NAME_LEN_BYTES  1
#define WIRE_BLOB_LEN_BYTES  4
#define WIRE_COUNT_LEN_BYTES 2

/* Largest encodings: a name is u8 length + (buffer size - NUL); an entry is
 * its name, 11 u64 and the held grant's tag.
 */
#define WIRE_HOLDER_MAX	   (WIRE_NAME_LEN_BYTES + WIRE_HOLDER_LEN - 1)
#define WIRE_LIMIT_MAX	   (WIRE_NAME_LEN_BYTES + LL_NAME_LEN - 1)
#define WIRE_ENTRY_MAX	   (WIRE_LIMIT_MAX + 11 * 8 + WIRE_TAG_LEN)
#define WIRE_KEY_LEN	   sizeof(struct ll_key_id)
#define WIRE_HOT_MAX	   (1 + WIRE_KEY_LEN + 4 * 8 + WIRE_TAG_LEN)
#define WIRE_KEY_GRANT_MAX (WIRE_KEY_LEN + 1 + 2 * 8 + WIRE_TAG_LEN)
#define WIRE_REPORT_MAX                                                                            \
	(WIRE_HOLDER_MAX + 3 * 8 + WIRE_COUNT_LEN_BYTES + WIRE_MAX_ENTRIES * WIRE_ENTRY_MAX +      \
	 WIRE_COUNT_LEN_BYTES + WIRE_MAX_HOT * WIRE_HOT_MAX)
#define WIRE_GRANT_MAX                                                                             \
	(WIRE_LIMIT_MAX + WIRE_HOLDER_MAX + 10 * 8 + WIRE_TAG_LEN + 1 + WIRE_COUNT_LEN_BYTES +     \
	 WIRE_MAX_KEY_GRANTS * WIRE_KEY_GRANT_MAX)
#define WIRE_POLICY_MAX	     (2 * 8 + WIRE_BLOB_LEN_BYTES + WIRE_MAX_POLICY)
#define WIRE_METER_ENTRY_MAX (WIRE_KEY_LEN + 8 + 2 * LL_METER_CLASSES * 8)
#define WIRE_METER_MAX                                                                             \
	(WIRE_HOLDER_MAX + 3 * 8 + WIRE_LIMIT_MAX + 8 + WIRE_COUNT_LEN_BYTES +                     \
	 WIRE_MAX_METER * WIRE_METER_ENTRY_MAX)

/* The largest messages must fit the frame bound that the decoder enforces. */
_Static_assert(WIRE_POLICY_MAX <= WIRE_MAX_PAYLOAD, "a full policy must fit one frame");
_Static_assert(WIRE_REPORT_MAX <= WIRE_MAX_PAYLOAD, "a full report must fit one frame");
_Static_assert(WIRE_METER_MAX <= WIRE_MAX_PAYLOAD, "a full meter batch must fit one frame");
_Static_assert(LL_METER_CLASSES == 4, "the meter entry's table names four classes");
_Static_assert(WIRE_GRANT_MAX <= WIRE_MAX_PAYLOAD, "a grant with every per-key grant must fit");
_Static_assert(WIRE_MAX_ENTRIES <= 256, "a hot key names its entry in a u8");
_Static_assert(WIRE_MAX_ENTRIES < (1 << (8 * WIRE_COUNT_LEN_BYTES)), "entry count is a u16");

enum wire_kind {
	WK_END,
	WK_U8,	  /* u8, value <= max */
	WK_U64,	  /* u64 */
	WK_NAME,  /* u8 length + 1..size-1 bytes of [A-Za-z0-9_.-]; NUL-terminated in memory */
	WK_BLOB,  /* u32 length (a uint32_t at aux) + length bytes, length <= max */
	WK_ARRAY, /* u16 count (a uint32_t at aux) + count elements of sub, count <= max */
	WK_BYTES, /* size raw bytes (a key: checked by its user) */
	WK_ADDR,  /* as WK_NAME, may be empty, and ':', '[', ']' too (host:port) */
};

struct wire_field {
	enum wire_kind kind;
	size_t off;  /* of the value in the structure */
	size_t size; /* WK_NAME: buffer size; WK_ARRAY: element size */
	size_t aux;  /* WK_BLOB, WK_ARRAY: offset of the length or count */
	uint64_t max;
	const struct wire_field *sub; /* WK_ARRAY: fields of one element */
	uint16_t since; /* only in frames of this version or later (0: every version) */
};

/* One field per line, in wire order: each table reads as its layout in docs/protocol.md. */
/* clang-format off */
#define F_U8(t, f, m)  {.kind = WK_U8, .off = offsetof(t, f), .max = (m)}
#define F_U64(t, f)    {.kind = WK_U64, .off = offsetof(t, f)}
#define F_NAME(t, f)   {.kind = WK_NAME, .off = offsetof(t, f), .size = member_size(t, f)}
#define F_BLOB(t, f, n, m)                                                                        \
	{.kind = WK_BLOB, .off = offsetof(t, f), .aux = offsetof(t, n), .max = (m)}
#define F_ARRAY(t, f, n, m, s)                                                                    \
	{.kind = WK_ARRAY,                                                                         \
	 .off = offsetof(t, f),                                                                    \
	 .size = member_size(t, f[0]),                                                             \
	 .aux = offsetof(t, n),                                                                    \
	 .max = (m),                                                                               \
	 .sub = (s)}
#define F_BYTES(t, f)  {.kind = WK_BYTES, .off = offsetof(t, f), .size = member_size(t, f)}
/* Fields added in version v: absent from older frames (decoded as 0). */
#define F_U64_SINCE(t, f, v)   {.kind = WK_U64, .off = offsetof(t, f), .since = (v)}
#define F_BYTES_SINCE(t, f, v)                                                                    \
	{.kind = WK_BYTES, .off = offsetof(t, f), .size = member_size(t, f), .since = (v)}
#define F_ADDR(t, f)   {.kind = WK_ADDR, .off = offsetof(t, f), .size = member_size(t, f)}
#define F_END {.kind = WK_END}

#define MSG struct wire_msg
#define ENT struct wire_report_entry
#define KG  struct wire_key_grant
#define HOT struct wire_hot
#define ME  struct wire_meter_entry

static const struct wire_field hello_fields[] = {
	F_NAME(MSG, hello.holder),
	F_U64(MSG, hello.incarnation),
	F_U64(MSG, hello.max_epoch_seen),
	F_U64(MSG, hello.policy_version),
	F_U64(MSG, hello.counters_ident),
	F_END,
};

static const struct wire_field policy_fields[] = {
	F_U64(MSG, policy.epoch),
	F_U64(MSG, policy.version),
	F_BLOB(MSG, policy.yaml, policy.len, WIRE_MAX_POLICY),
	F_END,
};

static const struct wire_field key_grant_fields[] = {
	F_BYTES(KG, key),
	F_U8(KG, op, WIRE_KEY_REMOVE),
	F_U64(KG, rate),
	F_U64(KG, burst),
	F_BYTES_SINCE(KG, tag, 8),
	F_END,
};

static const struct wire_field grant_fields[] = {
	F_NAME(MSG, grant.limit),
	F_NAME(MSG, grant.holder),
	F_U64(MSG, grant.incarnation),
	F_U64(MSG, grant.epoch),
	F_U64(MSG, grant.seq),
	F_U64(MSG, grant.report_seq),
	F_U64(MSG, grant.policy_version),
	F_U64(MSG, grant.rate),
	F_U64(MSG, grant.burst),
	F_U64(MSG, grant.ttl_ns),
	F_U64(MSG, grant.refresh_ns),
	F_BYTES(MSG, grant.tag),
	F_U8(MSG, grant.keys_full, WIRE_KEYS_CUT),
	F_U64(MSG, grant.keys_base),
	F_ARRAY(MSG, grant.keys, grant.n_keys, WIRE_MAX_KEY_GRANTS, key_grant_fields),
	F_END,
};

static const struct wire_field entry_fields[] = {
	F_NAME(ENT, limit),
	F_U64(ENT, applied_epoch),
	F_U64(ENT, applied_seq),
	F_U64(ENT, admitted),
	F_U64(ENT, denied),
	F_U64(ENT, fallback),
	F_U64(ENT, bypass),
	F_U64(ENT, demand),
	F_U64(ENT, held_rate),
	F_U64(ENT, held_burst),
	F_U64(ENT, held_ttl_ns),
	F_U64(ENT, held_left_ns),
	F_BYTES(ENT, held_tag),
	F_END,
};

static const struct wire_field hot_fields[] = {
	F_U8(HOT, entry, WIRE_MAX_ENTRIES - 1),
	F_BYTES(HOT, key),
	F_U64(HOT, demand),
	F_U64_SINCE(HOT, held_seq, 8),
	F_U64_SINCE(HOT, held_rate, 8),
	F_U64_SINCE(HOT, held_burst, 8),
	F_BYTES_SINCE(HOT, held_tag, 8),
	F_END,
};

static const struct wire_field report_fields[] = {
	F_NAME(MSG, report.holder),
	F_U64(MSG, report.incarnation),
	F_U64(MSG, report.max_epoch_seen),
	F_U64(MSG, report.seq),
	F_ARRAY(MSG, report.e, report.n, WIRE_MAX_ENTRIES, entry_fields),
	F_ARRAY(MSG, report.hot, report.n_hot, WIRE_MAX_HOT, hot_fields),
	F_END,
};

static const struct wire_field meter_entry_fields[] = {
	F_BYTES(ME, key),
	F_U64(ME, born),
	F_U64(ME, pkts[0]), F_U64(ME, pkts[1]), F_U64(ME, pkts[2]), F_U64(ME, pkts[3]),
	F_U64(ME, bytes[0]), F_U64(ME, bytes[1]), F_U64(ME, bytes[2]), F_U64(ME, bytes[3]),
	F_END,
};

static const struct wire_field meter_fields[] = {
	F_NAME(MSG, meter.holder),
	F_U64(MSG, meter.incarnation),
	F_U64(MSG, meter.ident),
	F_U64(MSG, meter.seq),
	F_NAME(MSG, meter.limit),
	F_U64(MSG, meter.limit_uid),
	F_ARRAY(MSG, meter.e, meter.n, WIRE_MAX_METER, meter_entry_fields),
	F_END,
};

static const struct wire_field meter_ack_fields[] = {
	F_U64(MSG, meter_ack.ident),
	F_U64(MSG, meter_ack.seq),
	F_U8(MSG, meter_ack.status, WIRE_METER_REFUSED),
	F_END,
};

static const struct wire_field redirect_fields[] = {
	F_U64(MSG, redirect.epoch),
	F_ADDR(MSG, redirect.leader),
	F_ADDR(MSG, redirect.address),
	F_END,
};

#undef ME
#undef MSG
#undef ENT
#undef KG
#undef HOT

struct wire_desc {
	const char *name;
	const struct wire_field *fields;
};

static const struct wire_desc wire_descs[] = {
	[WIRE_HELLO] = {"hello", hello_fields},
	[WIRE_POLICY] = {"policy", policy_fields},
	[WIRE_GRANT] = {"grant", grant_fields},
	[WIRE_REPORT] = {"report", report_fields},
	[WIRE_METER] = {"meter", meter_fields},
	[WIRE_METER_ACK] = {"meter-ack", meter_ack_fields},
	[WIRE_REDIRECT] = {"redirect", redirect_fields},
};
/* clang-format on */

static const struct wire_desc *wire_desc(uint16_t type)
{
	if (type >= ARRAY_SIZE(wire_descs) || !wire_descs[type].name)
		return NULL;
	return &wire_descs[type];
}

const char *wire_type_name(uint16_t type)
{
	const struct wire_desc *d = wire_desc(type);

	return d ? d->name : "unknown";
}

/* Holder ids and limit names as the configuration accepts them (WALK_NAME);
 * addr: an address (host:port, [v6]:port), or empty.
 */
static bool name_ok(const char *s, size_t n, size_t size, bool addr)
{
	size_t i;

	if ((n == 0 && !addr) || n >= size)
		return false;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-' ||
		      (addr && (c == ':' || c == '[' || c == ']'))))
			return false;
	}
	return true;
}

/*
 * Cursors. A cursor that runs out of room stays spent and remembers it, so the walkers below
 * check once at the end instead of after every field.
 */
struct wbuf {
	uint8_t *p;
	size_t cap, off;
	bool full;
	uint16_t version; /* of the frame: which fields it carries */
};

struct rbuf {
	const uint8_t *p;
	size_t len, off;
	bool exhausted;
	uint16_t version;
};

static uint8_t *wbuf_take(struct wbuf *w, size_t n)
{
	uint8_t *at;

	if (w->full || n > w->cap - w->off) {
		w->full = true;
		return NULL;
	}
	at = w->p + w->off;
	w->off += n;
	return at;
}

static const uint8_t *rbuf_take(struct rbuf *r, size_t n)
{
	const uint8_t *at;

	if (r->exhausted || n > r->len - r->off) {
		r->exhausted = true;
		return NULL;
	}
	at = r->p + r->off;
	r->off += n;
	return at;
}

static void wbuf_put(struct wbuf *w, uint64_t v, size_t n)
{
	uint8_t *at = wbuf_take(w, n);

	while (at && n--) {
		at[n] = v & 0xff;
		v >>= 8;
	}
}

static void wbuf_bytes(struct wbuf *w, const void *src, size_t n)
{
	uint8_t *at = wbuf_take(w, n);

	if (at)
		memcpy(at, src, n);
}

/* A short read yields 0: the caller fails on r->exhausted at the end. */
static uint64_t rbuf_get(struct rbuf *r, size_t n)
{
	const uint8_t *at = rbuf_take(r, n);
	uint64_t v = 0;
	size_t i;

	for (i = 0; at && i < n; i++)
		v = v << 8 | at[i];
	return v;
}

/* Encoder: returns 0 or -EINVAL; running out of room is w->full. */

static int enc_fields(struct wbuf *w, const uint8_t *base, const struct wire_field *f);

static int enc_name(struct wbuf *w, const char *s, size_t size, bool addr)
{
	size_t n = strnlen(s, size);

	if (!name_ok(s, n, size, addr))
		return -EINVAL;
	wbuf_put(w, n, WIRE_NAME_LEN_BYTES);
	wbuf_bytes(w, s, n);
	return 0;
}

static int enc_array(struct wbuf *w, const uint8_t *base, const struct wire_field *f)
{
	uint32_t n = *(const uint32_t *)(base + f->aux);
	uint32_t i;
	int err;

	if (n > f->max)
		return -EINVAL;
	wbuf_put(w, n, WIRE_COUNT_LEN_BYTES);
	for (i = 0; i < n; i++) {
		err = enc_fields(w, base + f->off + i * f->size, f->sub);
		if (err)
			return err;
	}
	return 0;
}

static int enc_field(struct wbuf *w, const uint8_t *base, const struct wire_field *f)
{
	const uint8_t *v = base + f->off;
	uint32_t n;

	switch (f->kind) {
	case WK_U8:
		if (*v > f->max)
			return -EINVAL;
		wbuf_put(w, *v, 1);
		return 0;
	case WK_U64:
		wbuf_put(w, *(const uint64_t *)v, 8);
		return 0;
	case WK_NAME:
	case WK_ADDR:
		return enc_name(w, (const char *)v, f->size, f->kind == WK_ADDR);
	case WK_BLOB:
		n = *(const uint32_t *)(base + f->aux);
		if (n > f->max)
			return -EINVAL;
		wbuf_put(w, n, WIRE_BLOB_LEN_BYTES);
		wbuf_bytes(w, v, n);
		return 0;
	case WK_ARRAY:
		return enc_array(w, base, f);
	case WK_BYTES:
		wbuf_bytes(w, v, f->size);
		return 0;
	case WK_END:
		break;
	}
	return -EINVAL;
}

static int enc_fields(struct wbuf *w, const uint8_t *base, const struct wire_field *f)
{
	int err;

	for (; f->kind != WK_END; f++) {
		if (f->since > w->version)
			continue;
		err = enc_field(w, base, f);
		if (err)
			return err;
	}
	return 0;
}

static void put_header(uint8_t *at, uint16_t version, uint16_t type, size_t payload_len)
{
	struct wbuf w = {.p = at, .cap = WIRE_HDR_LEN};

	wbuf_put(&w, WIRE_MAGIC, 4);
	wbuf_put(&w, version, 2);
	wbuf_put(&w, type, 2);
	wbuf_put(&w, payload_len, 4);
}

/* What a frame of version v may not carry: a cut before version 7. */
static bool fits_version(const struct wire_msg *m, uint16_t v)
{
	return v >= 7 || m->type != WIRE_GRANT || m->grant.keys_full <= WIRE_KEYS_WHOLE;
}

int wire_encode(const struct wire_msg *m, uint8_t *out, size_t cap)
{
	return wire_encode_v(m, WIRE_VERSION, out, cap);
}

int wire_encode_v(const struct wire_msg *m, uint16_t version, uint8_t *out, size_t cap)
{
	const struct wire_desc *d = wire_desc(m->type);
	struct wbuf w = {.p = out, .cap = cap, .version = version ? version : WIRE_VERSION};
	uint8_t *hdr;
	int err;

	if (!version)
		version = WIRE_VERSION;
	if (!d || version < WIRE_VERSION_MIN || version > WIRE_VERSION || !fits_version(m, version))
		return -EINVAL;
	hdr = wbuf_take(&w, WIRE_HDR_LEN);
	err = enc_fields(&w, (const uint8_t *)m, d->fields);
	if (err)
		return err;
	if (w.full)
		return -EMSGSIZE;
	put_header(hdr, version, m->type, w.off - WIRE_HDR_LEN);
	return (int)w.off;
}

/* Decoder: returns 0 or -EPROTO for a value out of bounds; a short read is r->exhausted. */

static int dec_fields(struct rbuf *r, uint8_t *base, const struct wire_field *f);

static int dec_name(struct rbuf *r, char *s, size_t size, bool addr)
{
	size_t n = rbuf_get(r, WIRE_NAME_LEN_BYTES);
	const uint8_t *at = rbuf_take(r, n);

	if (!at || !name_ok((const char *)at, n, size, addr))
		return -EPROTO;
	memcpy(s, at, n);
	memset(s + n, 0, size - n);
	return 0;
}

static int dec_array(struct rbuf *r, uint8_t *base, const struct wire_field *f)
{
	uint32_t n = rbuf_get(r, WIRE_COUNT_LEN_BYTES);
	uint32_t i;
	int err;

	if (n > f->max)
		return -EPROTO;
	*(uint32_t *)(base + f->aux) = n;
	for (i = 0; i < n && !r->exhausted; i++) {
		err = dec_fields(r, base + f->off + i * f->size, f->sub);
		if (err)
			return err;
	}
	return 0;
}

static int dec_field(struct rbuf *r, uint8_t *base, const struct wire_field *f)
{
	uint8_t *v = base + f->off;
	const uint8_t *at;
	uint64_t n;

	switch (f->kind) {
	case WK_U8:
		n = rbuf_get(r, 1);
		if (n > f->max)
			return -EPROTO;
		*v = n;
		return 0;
	case WK_U64:
		*(uint64_t *)v = rbuf_get(r, 8);
		return 0;
	case WK_NAME:
	case WK_ADDR:
		return dec_name(r, (char *)v, f->size, f->kind == WK_ADDR);
	case WK_BLOB:
		n = rbuf_get(r, WIRE_BLOB_LEN_BYTES);
		at = rbuf_take(r, n);
		if (n > f->max || !at)
			return -EPROTO;
		memcpy(v, at, n);
		*(uint32_t *)(base + f->aux) = n;
		return 0;
	case WK_ARRAY:
		return dec_array(r, base, f);
	case WK_BYTES:
		at = rbuf_take(r, f->size);
		if (!at)
			return -EPROTO;
		memcpy(v, at, f->size);
		return 0;
	case WK_END:
		break;
	}
	return -EPROTO;
}

static int dec_fields(struct rbuf *r, uint8_t *base, const struct wire_field *f)
{
	int err;

	for (; f->kind != WK_END; f++) {
		if (f->since > r->version) {
			/* Not in this version's frames (F_*_SINCE: a u64 or bytes). */
			memset(base + f->off, 0, f->kind == WK_U64 ? 8 : f->size);
			continue;
		}
		err = dec_field(r, base, f);
		if (err)
			return err;
	}
	return 0;
}

int wire_decode(const uint8_t *buf, size_t len, struct wire_msg *m)
{
	struct rbuf r = {.p = buf, .len = len};
	const struct wire_desc *d;
	uint32_t magic, plen;
	uint16_t version, type;
	int err;

	if (len < WIRE_HDR_LEN)
		return 0;
	magic = rbuf_get(&r, 4);
	version = rbuf_get(&r, 2);
	type = rbuf_get(&r, 2);
	plen = rbuf_get(&r, 4);
	d = wire_desc(type);
	m->version = version;
	if (magic == WIRE_MAGIC && (version < WIRE_VERSION_MIN || version > WIRE_VERSION))
		return -EPROTONOSUPPORT;
	if (magic != WIRE_MAGIC || !d || plen > WIRE_MAX_PAYLOAD)
		return -EPROTO;
	if (len - WIRE_HDR_LEN < plen)
		return 0;

	r = (struct rbuf){.p = buf + WIRE_HDR_LEN, .len = plen, .version = version};
	m->type = type;
	err = dec_fields(&r, (uint8_t *)m, d->fields);
	if (err || r.exhausted || r.off != r.len || !fits_version(m, version))
		return -EPROTO;
	m->version = version;
	return (int)(WIRE_HDR_LEN + plen);
}
