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
#ifndef LEASELINE_WIRE_H
#define LEASELINE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ll_types.h"

#define WIRE_MAGIC	 0x4c4c5731u /* "LLW1" */
#define WIRE_VERSION	 2	     /* 2: grants no longer carry the failure policy */
#define WIRE_HDR_LEN	 12
#define WIRE_MAX_PAYLOAD (64 * 1024) /* a policy document must fit */
#define WIRE_MAX_POLICY	 (WIRE_MAX_PAYLOAD - 64)
#define WIRE_HOLDER_LEN	 64 /* holder ids (node names), NUL included */
#define WIRE_MAX_ENTRIES LL_MAX_LIMITS

enum wire_type {
	WIRE_HELLO = 1,	 /* agent -> coord, first frame */
	WIRE_POLICY = 2, /* coord -> agent */
	WIRE_GRANT = 3,	 /* coord -> agent */
	WIRE_REPORT = 4, /* agent -> coord; also the acknowledgement of grants */
};

struct wire_hello {
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;	 /* changes every agent start (e.g. boot time ns) */
	uint64_t max_epoch_seen; /* highest coordinator epoch this holder has seen */
	uint64_t policy_version; /* version the agent runs, 0 if none */
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
};

struct wire_report {
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	uint64_t max_epoch_seen;
	uint64_t seq; /* report sequence, increasing per incarnation; starts at 1 */
	uint32_t n;
	struct wire_report_entry e[WIRE_MAX_ENTRIES];
};

struct wire_msg {
	uint16_t type;
	union {
		struct wire_hello hello;
		struct wire_policy policy;
		struct wire_grant grant;
		struct wire_report report;
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

/* Decode the first frame in buf[0..len). Returns the number of bytes the
 * frame used (> 0), 0 if more bytes are needed, or -EPROTO (bad magic,
 * version, type, length, or payload that does not parse exactly).
 */
int wire_decode(const uint8_t *buf, size_t len, struct wire_msg *m);

const char *wire_type_name(uint16_t type);

#endif /* LEASELINE_WIRE_H */
