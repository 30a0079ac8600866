/* SPDX-License-Identifier: MIT */
/*
 * The datapath as userspace sees it: load the XDP object (re-adopting the
 * maps pinned under pin_dir, so buckets survive an agent restart), read and
 * write its maps, reap idle buckets. dp decides nothing about policies or
 * leases: policy.c compiles a policy and lease_decide.c decides a grant; dp writes
 * what they decided, in the order that keeps packets safe. Functions return
 * 0 or a negative errno.
 *
 * dp.c loads (dp_open, dp_close, dp_kernel_check, dp_fill_add);
 * dp_policy.c commits a policy and writes ll_state; dp_lease.c reads and
 * writes leases, the fence and per-key grants; dp_meter.c the per-key
 * meter; dp_reap.c walks and reaps the bucket maps; dp_pinned.c opens the
 * pins for the commands (and reset-fence).
 */
#ifndef LEASELINE_AGENT_DP_H
#define LEASELINE_AGENT_DP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ll_types.h"

struct leaseline_bpf;
struct lease_key;
struct lease_key_plan;

struct dp {
	struct leaseline_bpf *skel;
	int prog_fd;
	char kernel[80];	 /* "Linux RELEASE" it was loaded on */
	uint64_t load_ms;	 /* how long the load (maps, verifier, JIT) took */
	uint32_t verified_insns; /* the verifier's count (0 before Linux 5.16) */
	int policy_fd, state_fd, pools_fd, slices_fd;
	int buckets_fd;	     /* ll_buckets: src-ip, dst-ip, dst-port keys (struct ll_key) */
	int flow_buckets_fd; /* ll_flow_buckets: flow keys (struct ll_flow_key) */
	int limit_stats_fd, rule_stats_fd, parse_stats_fd;
	int leases_fd, fence_fd;
	int key_grants_fd;     /* ll_key_grants: per-key grants of global limits */
	int overrides_fd;      /* ll_overrides: per-key overrides of local limits */
	int sets_fd;	       /* ll_sets: prefix sets of rule matches */
	void *sets_memo;       /* set_map.c: the sets written for the live policy */
	int hot_fd;	       /* ll_hot: ring buffer of keys denied under a live lease */
	int rcu_fd;	       /* map-in-map whose update waits for an RCU grace period */
	int prefix_buckets_fd; /* ll_prefix_buckets: fallback buckets of key prefixes */
	struct ll_fill *fill;  /* ll_fill, mapped: LL_FILL_MAPS entries */
	int meter_fd;	       /* ll_meter: per-key totals of metered flow limits (per CPU) */
	int meter_k_fd;	       /* ll_meter_k: the same for the other key modes (ll_key) */
	int meter_info_fd;     /* ll_meter_info: the counters' identity, what was not metered */
	uint64_t meter_ident;  /* ll_meter_info.ident as dp_open found or made it */
	uint32_t meter_capacity; /* ll_meter entries, overflow entries included */
	unsigned int ncpus;
	uint32_t flow_capacity; /* ll_flow_buckets entries, overflow buckets included */
};

struct dp_opts {
	const char *pin_dir;	/* NULL: no pinning (tests, benchmarks) */
	uint32_t max_keys;	/* ll_buckets size; 0 keeps the object's default */
	uint32_t max_flow_keys; /* ll_flow_buckets size, when flow_keys_set (else max_keys) */
	bool flow_keys_set;
	uint32_t max_meter_keys; /* ll_meter size; 0 keeps LL_MAX_METER_KEYS */
	/* Charge against bpf_ktime_get_ns, not the coarse clock (bpf/clock.h). */
	bool precise_clock;
	/* A leaseline program already running in a dispatcher (the agent
	 * restarted in multiprog mode): the new load takes over its unpinned
	 * maps when they match, so that it is the same program and stays.
	 */
	uint32_t adopt_prog_id;
};

int dp_open(struct dp *dp, const struct dp_opts *opts);
/* 0 when this kernel has every helper the program calls; else -EOPNOTSUPP
 * and, in why, one line naming the missing one and the kernel to upgrade to.
 */
int dp_kernel_check(char *why, size_t len);

/* Per-key metering (ll_meter). The counters' identity: dp_open makes one
 * (random, never 0) when the pins have none, after emptying ll_meter, so
 * totals under one identity only grow. dp_meter_read: every entry's totals
 * summed over CPUs, into a malloc'd array (*keys, *vals, *n; free both).
 */
int dp_meter_ident(struct dp *dp);
int dp_meter_read(struct dp *dp, struct ll_flow_key **keys, struct ll_meter **vals, size_t *n);
int dp_meter_info_read(struct dp *dp, struct ll_meter_info *info);
/* Delete the series named fk from whichever of ll_meter_k and ll_meter holds
 * it; with pc (ncpus entries), its per-CPU values read as it goes. 0 or a
 * negative errno (-ENOENT: in neither).
 */
int dp_meter_delete(struct dp *dp, const struct ll_flow_key *fk, struct ll_meter *pc);
void dp_close(struct dp *dp);

/* Make the compiled policy pol live, prev being the running one (all zero
 * if none): fresh state for new limits, leases[id] for each global limit,
 * then the inactive slot is written whole after an RCU grace period and
 * the slot index flips in one map update of *st (so a packet sees one
 * policy or the other). On failure *stage says which step failed.
 */
int dp_policy_commit(struct dp *dp, const struct ll_policy *pol, const struct ll_policy *prev,
		     const struct ll_lease *leases, struct ll_state *st, uint64_t now,
		     const char **stage);

/* Copies of the live state. */
int dp_state_read(int state_fd, struct ll_state *st);
int dp_policy_read(int policy_fd, int state_fd, struct ll_policy *pol);

/* In both bucket maps and ll_prefix_buckets: delete buckets of limits no
 * longer in the policy and, once the map is more than half full, buckets
 * idle long enough to be full again (deleting those changes nothing: a new
 * bucket starts full); buckets holding a per-key grant stay. Then correct
 * each bucket map's count in ll_fill. In ll_key_grants: delete the grants
 * of limits that are no longer global per-key limits.
 * Returns the number deleted or a negative errno.
 */
int dp_buckets_reap(struct dp *dp, uint64_t now_ns);

/* Add delta to the count of buckets of bucket map `which` (enum
 * ll_fill_map) in ll_fill, atomically against the datapath's own adds.
 */
void dp_fill_add(struct dp *dp, unsigned int which, int64_t delta);

/* Record in ll_state that a policy (version, 0 if unknown) was refused and
 * why, for `status` and metrics. The running policy is untouched.
 */
int dp_refusal_note(struct dp *dp, uint64_t version, const char *why, uint64_t now);

/* Record the coordinator link's counters in ll_state (for status and metrics). */
int dp_link_stats_write(struct dp *dp, const struct ll_state *from);

/* Call fn(ctx, key, bucket) for every bucket of bucket map fd (keys of
 * key_size bytes), read under the buckets' locks in batches; stops at fn's
 * first nonzero return and returns it, or a negative errno.
 */
struct ll_bucket;
int dp_buckets_walk(int fd, size_t key_size,
		    int (*fn)(void *ctx, const void *key, const struct ll_bucket *b), void *ctx);

/* The maps pinned under dir, each name into its fd; stops at the first
 * missing one that is not optional (said in a log line) and returns its
 * negative errno.
 */
struct dp_pin {
	const char *name;
	int *fd;
	bool optional; /* unreadable: *fd is -1, not an error (a map older pins may lack) */
};
int dp_pinned_open(const char *dir, const struct dp_pin *pins, size_t n);

/* The map pinned as dir/name (an fd), or a negative errno, said in a log
 * line that names the path. For the commands that read the pins.
 */
int dp_pinned_get(const char *dir, const char *name);

/* `leaseline reset-fence`: in the maps pinned under pin_dir, forget every
 * coordinator epoch and applied grant, and mark the running policy version
 * 1 (the policy goes on enforcing; the next coordinator's policy, whatever
 * its version, is accepted and migrates it). Leases are left to die at
 * their expiry. For a fence a fake coordinator poisoned. *old_epoch and
 * *old_version get what was there. 0 or a negative errno.
 */
int dp_pinned_reset_fence(const char *pin_dir, uint64_t *old_epoch, uint64_t *old_version);

int dp_fence_read(struct dp *dp, struct ll_fence *f);
int dp_fence_write(struct dp *dp, const struct ll_fence *f);
int dp_lease_read(struct dp *dp, uint32_t id, struct ll_lease *l);
/* Write what lease_grant_decide (and lease_keys_decide) decided for limit id
 * (uid): the generation counter (never moved backwards), the limit's
 * per-key set if kp, the pool emptied under l's generation if reset_pool,
 * the lease, the fence; in that order.
 */
int dp_lease_write(struct dp *dp, uint32_t id, uint32_t next_gen, bool reset_pool,
		   const struct ll_lease *l, const struct ll_fence *f, uint32_t uid,
		   const struct lease_key_plan *kp, uint64_t now);
/* The per-key grants held for limit uid (malloc'd into *out, *n of them). */
int dp_key_grants_read(struct dp *dp, uint32_t uid, struct lease_key **out, size_t *n);
/* The entries held for limit uid of the n keys named (out: room for n;
 * *n_out of them are held). 0 or a negative errno.
 */
int dp_key_grants_get(struct dp *dp, uint32_t uid, const struct lease_key *keys, size_t n,
		      struct lease_key *out, size_t *n_out);

#endif /* LEASELINE_AGENT_DP_H */
