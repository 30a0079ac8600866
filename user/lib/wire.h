/* SPDX-License-Identifier: MIT */
/*
 * The agent <-> coordinator wire format (docs/protocol.md). A TCP byte
 * stream (so TLS can wrap it later) of frames:
 *
 *   magic u32 'LLW1' | version u16 | type u16 | length u32 | payload[length]
 *
 * all integers big-endian. Strings are u8 length + bytes (no NUL). The
 * decoder is strict: every length is checked against what remains, a frame
 * must be consumed exactly, unknown types and versions are refused, sizes
 * are bounded. Nothing here does I/O.
 */
#ifndef LEASELINE_LIB_WIRE_H
#define LEASELINE_LIB_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ll_types.h"

#define WIRE_MAGIC 0x4c4c5731u /* "LLW1" */
/* 2: grants no longer carry the failure policy; 3: per-key grants; 4: per-key
 * grants carry changes only; 5: reports carry up to 256 limit entries
 * (LL_MAX_LIMITS), frames up to 128 KiB; HELLO's counters identity, METER and
 * METER_ACK (per-key usage); 6: grants carry a tag the holder re-presents
 * with what it holds (a restarted or new leader adopts it), REDIRECT; 7: a
 * grant's keys_full may be a cut (adoption of per-key limits); 8: per-key
 * grants carry a tag too, and hot keys re-present the entry they hold
 * (adoption of per-key entries)
 */
#define WIRE_VERSION 8
#define WIRE_VERSION_STR "8" /* for log lines */
/* The oldest version still decoded and spoken, so that a fleet upgrades
 * without a flag day: coordinators first (each answers a peer in the
 * version of its HELLO), then agents. Version 7 is 8 without the per-key
 * tags (key grants' tag, hot keys' held_*); version 6 is 7 without the cut
 * (keys_full 2).
 */
#define WIRE_VERSION_MIN 6
#define WIRE_HDR_LEN 12
/* A frame's payload: a full report (256 entries and WIRE_MAX_HOT hot keys,
 * ~126 kB) must fit. Buffers grow with what is in flight, not to this.
 */
#define WIRE_MAX_PAYLOAD (128 * 1024)
/* A policy document: 64 KiB less its message's fields, as in version 4. */
#define WIRE_MAX_POLICY	 (64 * 1024 - 64)
#define WIRE_HOLDER_LEN	 64 /* holder ids (node names), NUL included */
#define WIRE_MAX_ENTRIES LL_MAX_LIMITS
/* Per-key grants in one grant (one limit), hot keys in one report (all limits). */
#define WIRE_MAX_KEY_GRANTS 1024 /* per grant frame: a set larger than that goes in steps */
#define WIRE_MAX_HOT	    1024
/* Per-key usage entries in one METER frame (one limit): 112 bytes each. */
#define WIRE_MAX_METER 512
/* A grant's tag: HMAC-SHA-256 by the coordinators' grant key, cut to 16 bytes. */
#define WIRE_TAG_LEN 16
/* A redirect's address: host:port, NUL included. */
#define WIRE_ADDR_LEN 128

enum wire_type {
	WIRE_HELLO = 1,	    /* agent -> coord, first frame */
	WIRE_POLICY = 2,    /* coord -> agent */
	WIRE_GRANT = 3,	    /* coord -> agent */
	WIRE_REPORT = 4,    /* agent -> coord; also the acknowledgement of grants */
	WIRE_METER = 5,	    /* agent -> coord: per-key usage of one metered limit */
	WIRE_METER_ACK = 6, /* coord -> agent: a METER batch recorded (or not) */
	WIRE_REDIRECT = 7,  /* coord -> agent: not the leader; who is (then closed) */
};

struct wire_hello {
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;	 /* changes every agent start (e.g. boot time ns) */
	uint64_t max_epoch_seen; /* highest coordinator epoch this holder has seen */
	uint64_t policy_version; /* version the agent runs, 0 if none */
	uint64_t counters_ident; /* ll_meter_info.ident of its pins, 0 unknown */
};

struct wire_policy {
	uint64_t epoch;
	uint64_t version;
	uint32_t len;
	char yaml[WIRE_MAX_POLICY]; /* the policy document (reference §4), not NUL-terminated */
};

/* A share of one global limit for one holder. What happens when the lease
 * dies (on-loss, the fallback share) is the policy's, which the agent
 * applies: one truth, not two.
 */
/* A per-key grant: this holder's share of one key's contract where it
 * differs from the limit's share (rate, burst), or (op WIRE_KEY_REMOVE) the
 * key goes back to the limit's share. The key's bytes are the agent's to
 * check (family, padding, fields its key mode does not use).
 */
enum wire_key_op {
	WIRE_KEY_SET = 0,
	WIRE_KEY_REMOVE = 1,
};

struct wire_key_grant {
	struct ll_key_id key;
	uint8_t op;	/* enum wire_key_op */
	uint64_t rate;	/* tokens/s */
	uint64_t burst; /* tokens */
	/* WIRE_KEY_SET: the coordinators' proof of (holder, incarnation, limit,
	 * epoch, seq of this grant, key, rate, burst), which the holder hands
	 * back with the key in its reports (struct wire_hot). 0s for a remove.
	 */
	uint8_t tag[WIRE_TAG_LEN];
};

enum { WIRE_KEYS_CHANGES = 0, WIRE_KEYS_WHOLE = 1, WIRE_KEYS_CUT = 2 };

struct wire_grant {
	char limit[LL_NAME_LEN];
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	uint64_t epoch;
	uint64_t seq;	     /* per (epoch, holder, limit), increasing */
	uint64_t report_seq; /* the report (or 0 = hello) this grant answers: starts its clock */
	uint64_t policy_version;
	uint64_t rate;	     /* tokens/s share */
	uint64_t burst;	     /* tokens share */
	uint64_t ttl_ns;     /* duration, never a wall-clock time */
	uint64_t refresh_ns; /* hint: report again within this */
	/* The coordinators' proof that they granted exactly this (holder,
	 * incarnation, limit, epoch, seq, rate, burst, ttl): the holder hands it
	 * back in its reports, and a coordinator that has lost its memory of the
	 * grant (a restart, a new leader) adopts what the tag proves.
	 */
	uint8_t tag[WIRE_TAG_LEN];
	/* Per-key grants (docs/protocol.md): keys_full WIRE_KEYS_WHOLE, keys[]
	 * is the whole set (every key not named goes back to the share);
	 * WIRE_KEYS_CHANGES, keys[] changes the set the holder held after grant
	 * keys_base, which it acknowledged, and names every key changed since
	 * then; WIRE_KEYS_CUT, no key rises: each keeps the least of what it
	 * holds, its entry named here and the share (a coordinator that does
	 * not know what the holder holds: adoption).
	 */
	uint8_t keys_full;
	uint64_t keys_base;
	uint32_t n_keys;
	struct wire_key_grant keys[WIRE_MAX_KEY_GRANTS];
};

struct wire_report_entry {
	char limit[LL_NAME_LEN];
	uint64_t applied_epoch; /* grant currently applied (0, 0 = none) */
	uint64_t applied_seq;
	uint64_t admitted; /* absolute running totals since the incarnation began */
	uint64_t denied;
	uint64_t fallback;
	uint64_t bypass;
	uint64_t demand; /* tokens/s this holder would use */
	/* The grant applied (applied_epoch, applied_seq) as it came, and how
	 * long it has left on the holder's clock: what a coordinator that does
	 * not remember granting it may adopt (held_tag proves it). All 0 when
	 * the holder holds none it can prove.
	 */
	uint64_t held_rate;
	uint64_t held_burst;
	uint64_t held_ttl_ns;  /* the grant's ttl, as the tag covers it */
	uint64_t held_left_ns; /* until the lease dies on the holder (0: dead) */
	uint8_t held_tag[WIRE_TAG_LEN];
};

/* A key of a per-key global limit that wants more than, or other than, the
 * default share here: denied recently, or holding a per-key grant and
 * spending. entry is the index of the limit's entry in the same report.
 */
struct wire_hot {
	uint8_t entry;
	struct ll_key_id key;
	uint64_t demand; /* tokens/s this holder would use for this key */
	/* The per-key entry it holds for the key as it came: in grant held_seq
	 * of its entry's applied_epoch, with the tag that proves it, for a
	 * coordinator that does not remember it to adopt. All 0: none.
	 */
	uint64_t held_seq;
	uint64_t held_rate;
	uint64_t held_burst;
	uint8_t held_tag[WIRE_TAG_LEN];
};

struct wire_report {
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	uint64_t max_epoch_seen;
	uint64_t seq; /* report sequence, increasing per incarnation; starts at 1 */
	uint32_t n;
	struct wire_report_entry e[WIRE_MAX_ENTRIES];
	uint32_t n_hot;
	struct wire_hot hot[WIRE_MAX_HOT];
};

/* One key's absolute running totals under the counters identity (struct
 * ll_meter: by enum ll_meter_class).
 */
struct wire_meter_entry {
	struct ll_key_id key;
	uint64_t born; /* the kernel entry's ll_meter.born: with the key, the series */
	uint64_t pkts[LL_METER_CLASSES];
	uint64_t bytes[LL_METER_CLASSES];
};

/* A batch of per-key usage of one metered limit: the keys whose totals
 * changed since the coordinator last acknowledged them. Totals are absolute
 * and only grow within (ident, limit_uid): the ledger adds what they exceed
 * what it has, so any batch may be replayed, reordered or delayed.
 */
struct wire_meter {
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	uint64_t ident; /* counters identity (ll_meter_info.ident), never 0 */
	uint64_t seq;	/* batch number, increasing per incarnation: what the ack names */
	char limit[LL_NAME_LEN];
	uint64_t limit_uid; /* the limit's uid on the agent: its keys' series */
	uint32_t n;
	struct wire_meter_entry e[WIRE_MAX_METER];
};

enum wire_meter_status {
	WIRE_METER_RECORDED = 0, /* in the ledger (or already there) */
	WIRE_METER_RETRY = 1,	 /* not written (disk full, I/O): send it again */
	WIRE_METER_REFUSED = 2,	 /* not metered here, or unknown limit: do not resend */
};

struct wire_meter_ack {
	uint64_t ident;
	uint64_t seq;
	uint8_t status; /* enum wire_meter_status */
};

/* A replica that does not lead answers a HELLO with this and closes:
 * the leader it knows of (node, the address agents use, its epoch), or
 * none (leader "" and address ""): try the next address later.
 */
struct wire_redirect {
	uint64_t epoch;
	char leader[WIRE_HOLDER_LEN];
	char address[WIRE_ADDR_LEN];
};

struct wire_msg {
	uint16_t type;
	uint16_t version; /* decoded: the frame's (WIRE_VERSION_MIN..WIRE_VERSION) */
	union {
		struct wire_hello hello;
		struct wire_policy policy;
		struct wire_grant grant;
		struct wire_report report;
		struct wire_meter meter;
		struct wire_meter_ack meter_ack;
		struct wire_redirect redirect;
	};
};

/* Zero the type and one union member of a (large) message without touching
 * the rest: WIRE_MSG_CLEAR(m, grant).
 */
#define WIRE_MSG_CLEAR(m, member)                                                                  \
	memset((m), 0, offsetof(struct wire_msg, member) + sizeof((m)->member))

/* Encode one frame into out (cap bytes). Returns the frame length, or
 * -EMSGSIZE / -EINVAL (a string too long, bad type, n too large).
 */
int wire_encode(const struct wire_msg *m, uint8_t *out, size_t cap);
/* The same in an older version (0: WIRE_VERSION): -EINVAL for a version
 * outside WIRE_VERSION_MIN..WIRE_VERSION or a field it cannot carry.
 */
int wire_encode_v(const struct wire_msg *m, uint16_t version, uint8_t *out, size_t cap);

/* Decode the first frame in buf[0..len). Returns the number of bytes the
 * frame used (> 0), 0 if more bytes are needed, -EPROTONOSUPPORT (our magic,
 * a version outside WIRE_VERSION_MIN..WIRE_VERSION: a peer of another
 * build; m->version says which), or -EPROTO (bad magic, type,
 * length, or payload that does not parse exactly).
 */
int wire_decode(const uint8_t *buf, size_t len, struct wire_msg *m);

const char *wire_type_name(uint16_t type);

#endif /* LEASELINE_LIB_WIRE_H */
