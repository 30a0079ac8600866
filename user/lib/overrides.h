/* SPDX-License-Identifier: MIT */
/*
 * Per-key overrides of a limit (reference §4, "overrides"): a file the
 * policy names, one override a line, each a prefix of the limit's key with
 * its own contract:
 *
 *     # tenant tiers
 *     198.18.1.0/24   rate 10k  burst 20k
 *     198.18.2.0/24   rate 1k   burst 2k
 *     198.18.3.0/24   unlimited
 *     198.18.9.0/24   deny
 *     2001:db8::/48   rate 500  burst 1k
 *
 * The longest prefix covering a key wins. A prefix must cover whole keys
 * (no longer than the limit's prefix-v4/prefix-v6) and have its host bits
 * zero. A dst-port limit's file names ports or port ranges instead:
 *
 *     53          rate 50k burst 100k
 *     8000-8099   deny
 *
 * Errors name FILE:LINE:COL. Pure code: no kernel.
 */
#ifndef LEASELINE_LIB_OVERRIDES_H
#define LEASELINE_LIB_OVERRIDES_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cfg_types.h"

#define OVR_MAX_PER_LIMIT 131072 /* overrides in one limit's file */

enum ovr_kind {
	OVR_RATE = 0,	   /* rate and burst of its own */
	OVR_UNLIMITED = 1, /* never limited by this limit */
	OVR_DENY = 2,	   /* every packet denied by this limit */
};

struct ovr_entry {
	uint8_t family;	  /* 4 or 6; 0: a block of dst ports (ovr_load_ports) */
	uint8_t plen;	  /* prefix length in the family's bits */
	uint8_t kind;	  /* enum ovr_kind */
	uint8_t addr[16]; /* network order, IPv4 in the first 4 bytes, host bits zero */
	uint64_t rate;	  /* OVR_RATE: tokens/s */
	uint64_t burst;	  /* OVR_RATE: tokens */
	uint32_t line;
	uint16_t lo, hi; /* family 0: the line's port range the block is of */
};

/* Read path for a limit keyed by address with prefixes prefix_v4 and
 * prefix_v6, whose rate and burst bounds are max_rate and max_burst.
 * 0 and *out (malloc'd, *n entries, sorted by family, prefix, length) on
 * success; -EINVAL with err ("FILE:LINE:COL: ...") for a bad line, a
 * duplicate or too many; another negative errno when the file cannot be
 * read (err filled too).
 */
int ovr_load(const char *path, uint8_t prefix_v4, uint8_t prefix_v6, uint64_t max_rate,
	     uint64_t max_burst, struct ovr_entry **out, size_t *n, struct cfg_err *err);

/* The same for a dst-port limit: lines "PORT" or "LO-HI" then the
 * contract, the ranges disjoint (an overlap is an error at the later line).
 * Each range comes out as the aligned power-of-two blocks of ports that
 * cover it exactly: family 0, the block's first port in addr[0..1]
 * (network order), plen 16 - log2(its size); the trie finds a port's block
 * by longest prefix as it finds an address's.
 */
int ovr_load_ports(const char *path, uint64_t max_rate, uint64_t max_burst, struct ovr_entry **out,
		   size_t *n, struct cfg_err *err);

#endif /* LEASELINE_LIB_OVERRIDES_H */
