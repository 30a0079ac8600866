/* SPDX-License-Identifier: MIT */
/*
 * Bucket keys as people write them, and what a bucket's deny hint says
 * about the wait, for `leaseline top` (reference §3). Pure functions of
 * their arguments: no I/O, no clock of their own.
 */
#ifndef LEASELINE_LIB_KEYFMT_H
#define LEASELINE_LIB_KEYFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ll_types.h"

/* Room for the longest key: "icmpv6 [8 groups]:65535 -> [8 groups]:65535". */
#define KEYFMT_LEN 128

/* "tcp", "udp", "icmp", "icmpv6", "sctp", "udplite", else the number ("47"). */
const char *keyfmt_proto(uint8_t proto, char *buf, size_t len);

/* An address of family 4 (addr as ::ffff:a.b.c.d, network order) or 6,
 * with "/plen" when plen is shorter than the family's full length:
 * "198.18.0.10", "198.18.0.0/24", "2001:db8::/64". Returns snprintf's result.
 */
int keyfmt_addr(uint8_t family, const __u32 addr[4], uint8_t plen, char *buf, size_t len);

/* Key k of a limit of key mode key_mode (enum ll_key_mode), whose src-ip or
 * dst-ip keys aggregate by prefix_v4 / prefix_v6:
 *   src-ip, dst-ip  "198.18.0.10", "2001:db8:0:1::/64"
 *   dst-port        "udp/53" ("icmp" for a protocol without ports)
 *   flow            "tcp 198.18.0.1:1234 -> 198.18.0.2:80",
 *                   "udp [2001:db8::1]:5353 -> [2001:db8::2]:53",
 *                   "icmp 198.18.0.1 -> 198.18.0.2" (no ports)
 *   the limit's overflow bucket  "(overflow)"
 * Returns snprintf's result.
 */
int keyfmt_key(const struct ll_key_id *k, uint8_t key_mode, uint8_t prefix_v4, uint8_t prefix_v6,
	       char *buf, size_t len);

enum keyfmt_retry_state {
	KEYFMT_RETRY_NOW,   /* no hint pending: the next packet is charged */
	KEYFMT_RETRY_WAIT,  /* the hint refuses packets of its class for wait_ns */
	KEYFMT_RETRY_NEVER, /* rate 0 for this key here: until its share or grant changes */
};

struct keyfmt_retry {
	enum keyfmt_retry_state state;
	uint64_t wait_ns; /* KEYFMT_RETRY_WAIT: from now until a retry can pass */
	uint32_t class;	  /* the hint's class: 0 in packets mode, a frame length in bytes */
};

/* What deny hint `hint` (ll_bucket.deny_hint: an instant rounded down to
 * LL_HINT_CLASS_MASK + 1 ns, the class below) says at `now`
 * (CLOCK_MONOTONIC ns). valid: the bucket is still at the generation the
 * hint was set under (a stale hint refuses nothing). The wait runs to the
 * end of the hint's rounding step, so a packet of the hint's class retried
 * then can pay, unless the key spends in between.
 */
struct keyfmt_retry keyfmt_retry(uint64_t hint, bool valid, uint64_t now);

/* "now", "in 18.3 ms", "in 2.50 s", "never (rate 0 here)"; in bytes mode
 * (class not 0) followed by " for frames of N bytes or more". Returns
 * snprintf's result.
 */
int keyfmt_retry_str(const struct keyfmt_retry *r, char *buf, size_t len);

#endif /* LEASELINE_LIB_KEYFMT_H */
