/* SPDX-License-Identifier: MIT */
/*
 * From a parsed policy (struct cfg_policy) to the kernel's layout (struct
 * ll_policy), carrying state across reloads: a limit keeps its id (and so its
 * buckets) while its name stays; a changed rate or burst bumps its generation
 * so the datapath settles each bucket with the old rate up to the reload and
 * clamps it to the new burst. An older version is refused.
 */
#ifndef LEASELINE_AGENT_POLICY_H
#define LEASELINE_AGENT_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "lib/config.h"
#include "ll_types.h"

struct policy_compile_opts {
	const struct ll_policy *prev; /* running policy, or NULL for the first */
	uint32_t *next_uid;	      /* in/out: source of fresh limit uids */
	uint64_t now_ns;	      /* CLOCK_MONOTONIC of the reload */
	unsigned int ncpus;	      /* sizes per-CPU chunks of key-none limits */
	/* The ll_sets id of each of cp's sets (set_map_write); a policy with
	 * sets does not compile without them.
	 */
	const uint32_t *set_ids;
};

/* Returns 0, or -ESTALE (older version) / -EINVAL with err filled. */
int policy_compile(const struct cfg_policy *cp, const struct policy_compile_opts *opts,
		   struct ll_policy *out, char *err, size_t errlen);

struct dp;

/* Compile cp against the running policy and make it live through
 * dp_policy_commit: refuses an older version (-ESTALE) or a policy that does
 * not compile (-EINVAL), with err filled, and the running policy keeps
 * enforcing. Global limits get their on-loss and fallback share from cp and
 * keep their lease across the reload.
 */
int policy_apply(struct dp *dp, const struct cfg_policy *cp, char *err, size_t errlen);

/* Network-order masks for a prefix length over 128 bits. */
void policy_mask_v6(uint8_t plen, uint32_t mask[4]);

/* Id of the limit named `name` in pol, or -1. */
int policy_limit_id(const struct ll_policy *pol, const char *name);

#endif /* LEASELINE_AGENT_POLICY_H */
