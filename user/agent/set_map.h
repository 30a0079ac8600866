/* SPDX-License-Identifier: MIT */
/*
 * ll_sets: the prefix sets a policy's rules match (src-set, dst-set;
 * user/lib/sets.h), written into the kernel's LPM trie before the policy
 * that names them goes live, never in place: a set whose file changed is
 * written whole under a fresh id beside the running one, the new policy
 * flips to it, and only then are the old id's entries deleted. So a live
 * policy never matches against a half-written set, and a set file that
 * cannot be read or written leaves the running policy as it was.
 */
#ifndef LEASELINE_AGENT_SET_MAP_H
#define LEASELINE_AGENT_SET_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/config.h"
#include "ll_types.h"

struct dp;

/* Write every set cp names that the running policy prev (NULL: none) does
 * not already hold with the same file and content: ids[i], the id of
 * cp->sets[i], is the running one's or a fresh one from next_uid. 0, or a
 * negative errno with err filled and nothing the running policy reads
 * changed (what was written is deleted again).
 */
int set_map_write(struct dp *dp, const struct cfg_policy *cp, const struct ll_policy *prev,
		  uint32_t *next_uid, uint32_t *ids, char *err, size_t errlen);

/* After the commit: live is the policy packets now read, the one the last
 * set_map_write was for when applied, else the running one it kept. Delete
 * the entries of every id live does not name.
 */
void set_map_settle(struct dp *dp, const struct ll_policy *live, bool applied);

/* Forget what the agent knows of the sets written (dp_close). */
void set_map_free(struct dp *dp);

#endif /* LEASELINE_AGENT_SET_MAP_H */
