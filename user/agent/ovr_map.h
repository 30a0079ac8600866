/* SPDX-License-Identifier: MIT */
/*
 * ll_overrides: the per-key overrides a policy's limits name (user/lib/
 * overrides.h), written into the kernel's LPM trie before the policy that
 * points buckets at them (ov_ver) goes live, and those of limits gone
 * removed after it. An override whose contract did not change keeps its
 * generation, so a reload that leaves it alone leaves its buckets alone.
 */
#ifndef LEASELINE_AGENT_OVR_MAP_H
#define LEASELINE_AGENT_OVR_MAP_H

#include <stddef.h>

#include "lib/config.h"
#include "ll_types.h"

struct dp;

/* For every limit of pol (compiled from cp, against prev): write the
 * overrides its file names under its uid, drop those it no longer names,
 * and set its LL_LIM_OVERRIDES flag and ov_ver (moved on when its set
 * changed). next_uid: source of fresh generations. 0, or a negative errno
 * with err filled (nothing of the running policy changes meaning: the
 * entries written are those of the new uid's set, which no live bucket
 * reads before ov_ver moves on).
 */
int ovr_map_write(struct dp *dp, const struct cfg_policy *cp, const struct ll_policy *prev,
		  struct ll_policy *pol, uint32_t *next_uid, char *err, size_t errlen);

/* Remove the entries of every uid pol no longer has overrides for. */
void ovr_map_prune(struct dp *dp, const struct ll_policy *pol);

#endif /* LEASELINE_AGENT_OVR_MAP_H */
