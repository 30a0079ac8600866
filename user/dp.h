/* SPDX-License-Identifier: MIT */
/*
 * The datapath as userspace sees it: load the XDP object (re-adopting the
 * maps pinned under pin_dir, so buckets survive an agent restart), apply a
 * policy atomically, reap idle buckets. Functions return 0 or a negative errno.
 */
#ifndef LEASELINE_DP_H
#define LEASELINE_DP_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "ll_types.h"

struct leaseline_bpf;

struct dp {
	struct leaseline_bpf *skel;
	int prog_fd;
	int policy_fd, state_fd, pools_fd, slices_fd;
	int buckets_fd;	     /* ll_buckets: src-ip, dst-ip, dst-port keys (struct ll_key) */
	int flow_buckets_fd; /* ll_flow_buckets: flow keys (struct ll_flow_key) */
	int limit_stats_fd, rule_stats_fd, parse_stats_fd;
	int leases_fd, fence_fd;
	int rcu_fd; /* map-in-map whose update waits for an RCU grace period */
	unsigned int ncpus;
};

struct dp_opts {
	const char *pin_dir; /* NULL: no pinning (tests, benchmarks) */
	uint32_t max_keys;	/* ll_buckets size; 0 keeps the object's default */
	uint32_t max_flow_keys; /* ll_flow_buckets size, when flow_keys_set (else max_keys) */
	bool flow_keys_set;
};

int dp_open(struct dp *dp, const struct dp_opts *opts);
void dp_close(struct dp *dp);

/* Compile cp against the running policy and make it live: the inactive slot
 * is written whole, then the slot index flips in one map update, so a packet
 * sees one policy or the other. Refuses an older version (-ESTALE).
 */
int dp_policy_apply(struct dp *dp, const struct cfg_policy *cp, char *err, size_t errlen);

/* Copies of the live state. */
int dp_state_read(int state_fd, struct ll_state *st);
int dp_policy_read(int policy_fd, int state_fd, struct ll_policy *pol);

/* In both bucket maps: delete buckets of limits no longer in the policy
 * and, once the map is more than half full, buckets idle long enough to be
 * full again (deleting those changes nothing: a new bucket starts full).
 * Returns the number deleted or a negative errno.
 */
int dp_buckets_reap(struct dp *dp, uint64_t now_ns);

struct lease_grant;

/* Apply a grant to global limit id if fencing allows (-ESTALE otherwise):
 * lease value, generation counter and fence state, in that order.
 */
int dp_lease_apply(struct dp *dp, uint32_t id, const struct lease_grant *g, uint64_t now);
int dp_fence_read(struct dp *dp, struct ll_fence *f);
/* Note a coordinator epoch; -ESTALE if older than one already seen. */
int dp_fence_see_epoch(struct dp *dp, uint64_t epoch, uint64_t incarnation);

uint64_t dp_now_ns(void); /* CLOCK_MONOTONIC, the clock bpf_ktime_get_ns reads */

#endif /* LEASELINE_DP_H */
