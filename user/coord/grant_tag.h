/* SPDX-License-Identifier: MIT */
/*
 * Grant tags (docs/protocol.md, "Adoption"): every grant carries an
 * HMAC-SHA-256, cut to WIRE_TAG_LEN bytes, of what it grants, by a key only
 * the coordinators have (state-dir/grant.key for one coordinator, shared
 * through etcd by replicas). The holder hands the tag back with the grant it
 * holds. A coordinator that does not remember the grant (it restarted, or
 * it is a new leader) adopts exactly what the tag proves, never more: a
 * certified peer cannot make up a share it was not given.
 *
 * Holder names are bound in lower case: one holder, whatever case its
 * HELLO used (holders compare without case).
 *
 * A per-key entry set in a grant has a tag of its own (another domain):
 * the grant's names and (incarnation, epoch, seq), the key's bytes and the
 * entry's (rate, burst). The holder re-presents it with the key in its hot
 * list, and a new leader adopts the entry as it adopts the share.
 */
#ifndef LEASELINE_COORD_GRANT_TAG_H
#define LEASELINE_COORD_GRANT_TAG_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/wire.h"

#define GRANT_KEY_LEN 32

struct grant_tag_in {
	const char *holder, *limit;
	uint64_t incarnation, epoch, seq, rate, burst, ttl_ns;
};

void grant_tag(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
	       uint8_t tag[WIRE_TAG_LEN]);
/* In constant time: does tag prove g? */
bool grant_tag_ok(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		  const uint8_t tag[WIRE_TAG_LEN]);
/* The tag of key k's entry (rate, burst) set by grant g (whose rate, burst
 * and ttl it does not cover), and its check.
 */
void grant_key_tag(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		   const struct ll_key_id *k, uint64_t rate, uint64_t burst, uint8_t tag[WIRE_TAG_LEN]);
bool grant_key_tag_ok(const uint8_t key[GRANT_KEY_LEN], const struct grant_tag_in *g,
		      const struct ll_key_id *k, uint64_t rate, uint64_t burst,
		      const uint8_t tag[WIRE_TAG_LEN]);

#endif /* LEASELINE_COORD_GRANT_TAG_H */
