/* SPDX-License-Identifier: MIT */
/*
 * Prefix set files (reference §4, rule matches "src-set" and "dst-set"): one
 * prefix a line, IPv4 or IPv6, a bare address meaning its full length,
 * blank lines and '#' comments allowed:
 *
 *     # partners: never limited
 *     198.18.16.0/20
 *     198.18.99.7
 *     2001:db8:100::/40   # the v6 range
 *
 * A prefix must have its host bits zero and appear once. Errors name
 * FILE:LINE:COL. Pure code: no kernel.
 */
#ifndef LEASELINE_LIB_SETS_H
#define LEASELINE_LIB_SETS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cfg_types.h"

struct set_entry {
	uint8_t family;	  /* 4 or 6 */
	uint8_t plen;	  /* prefix length in the family's bits */
	uint8_t addr[16]; /* network order, IPv4 in the first 4 bytes, host bits zero */
	uint32_t line;
};

/* Read the set file path, whose prefixes may number at most budget (what
 * LL_MAX_SET_ENTRIES leaves after the policy's other sets; `used` of them,
 * for the message). 0 and *out (malloc'd, *n entries, sorted by family,
 * address, length) on success; -EINVAL with err ("FILE:LINE:COL: ...") for
 * a bad line, a duplicate or one prefix past the bound; another negative
 * errno when the file cannot be read (err filled too).
 */
int set_load(const char *path, size_t budget, size_t used, struct set_entry **out, size_t *n,
	     struct cfg_err *err);

/* A digest of a loaded set's content (its sorted prefixes, lines aside):
 * equal digests, the same set.
 */
uint64_t set_digest(const struct set_entry *v, size_t n);

#endif /* LEASELINE_LIB_SETS_H */
