/* SPDX-License-Identifier: MIT */
/*
 * Lease and fencing decisions of the agent (docs/protocol.md, "Lease clock
 * and fencing"): whether a grant may be applied, and the lease value, fence
 * and generation counter it leaves behind. Pure functions over copies of the
 * map values: nothing here reads a clock or touches a map (dp_lease.c
 * writes what these decide), so every decision is tested without root.
 *
 * Invariants:
 *   - a grant is applied only if its epoch is not older than any epoch seen
 *     and (epoch, seq) is newer than what was applied to that limit;
 *   - a generation number is never reused, so a pool or slice of one share
 *     is never mistaken for another's;
 *   - raising a share never deposits tokens; a revived lease starts empty.
 */
#ifndef LEASELINE_AGENT_LEASE_DECIDE_H
#define LEASELINE_AGENT_LEASE_DECIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/lease_clock.h"
#include "ll_types.h"

struct lease_grant {
	uint64_t epoch, seq;
	uint64_t rate, burst; /* tokens/s, tokens */
	uint64_t expiry_ns;   /* from lease_expiry */
};

/* What applying one grant to one limit writes, in this order: the
 * generation counter (ll_state.next_uid) first, so a crash later cannot
 * reuse a number; the pool, emptied under the new generation, only when
 * reset_pool; then the lease; then the fence.
 */
struct lease_update {
	uint32_t next_gen;
	bool reset_pool;
	struct ll_lease lease;
	struct ll_fence fence;
};

/* 0 if a coordinator may move this fence to epoch, -ERANGE if not. */
int lease_epoch_ok(const struct ll_fence *f, uint64_t epoch);

/* Clamp what a grant for limit cfg asks: rate and burst to the contract
 * (which a share can never exceed) and the token math's maxima, *ttl_ns to
 * LEASE_TTL_MAX_NS. Returns how many of the three were clamped.
 */
int lease_grant_clamp(struct lease_grant *g, uint64_t *ttl_ns, const struct ll_limit_cfg *cfg);

/* Fencing: 0 if a grant (epoch, seq) for limit id may be applied given f,
 * else -ESTALE (older epoch than seen, or not newer than what is applied).
 */
int lease_fence_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t seq);

/* Note a coordinator epoch (and, if nonzero, the agent's incarnation) in f;
 * -ESTALE and f untouched if the epoch is older than one already seen.
 */
int lease_fence_see_epoch(struct ll_fence *f, uint64_t epoch, uint64_t incarnation);

/* Limit id now serves another limit (or none): forget what was applied to
 * the one before, whose grants the new one's numbering owes nothing to.
 * Returns true if f changed.
 */
bool lease_fence_forget(struct ll_fence *f, uint32_t id);

/* New lease value after applying g to old at time now. A plain renewal keeps
 * the generation (slices stay valid); a changed share or a lease revived
 * after it died gets a new generation whose "prev" is what the pool was
 * spending, so the datapath settles and clamps (raising never deposits).
 * *next_gen is the agent's generation counter (ll_state.next_uid).
 */
void lease_next(const struct ll_lease *old, const struct lease_grant *g, uint64_t now,
		unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out);

/* The whole decision for grant g on limit id: -ESTALE if fencing refuses it,
 * else 0 and *u filled from the current lease, fence and counter.
 */
int lease_grant_decide(const struct ll_lease *old, const struct ll_fence *f, uint32_t next_gen,
		       uint32_t id, const struct lease_grant *g, uint64_t now, unsigned int ncpus,
		       struct lease_update *u);

/* Lease value for a global limit as the policy defines it: never granted
 * (expiry 0), on-loss and fallback share from cfg. Keeps old's share and
 * expiry when old belongs to the same limit uid (a reload).
 */
void lease_from_policy(const struct ll_lease *old, bool same_limit, const struct ll_limit_cfg *cfg,
		       unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out);

/* One per-key grant of a limit (docs/design.md, "Per-key grants for hot
 * keys"): as a grant carries it (rate, burst in tokens) and as the kernel
 * holds it (v, with its generation).
 */
struct lease_key {
	struct ll_key_id key;
	uint64_t rate, burst;
	bool remove; /* a change: the key goes back to the limit's share */
	struct ll_key_grant v;
};

/* What writing a limit's new per-key set changes in ll_key_grants: entries
 * to put (new or changed, each with a new generation) and keys to delete
 * (held, not in the new set). changed: the lease's kg_ver must move on.
 */
struct lease_key_plan {
	struct lease_key *put;
	size_t n_put;
	struct ll_key_id *del;
	size_t n_del;
	bool changed;
};

/* 0 if key k may name a key of limit cfg: its family and the fields its key
 * mode uses are possible values, every other byte is zero, and an address
 * is masked to the limit's prefix (an unmasked one would match no bucket).
 * -EINVAL otherwise.
 */
int lease_key_check(const struct ll_limit_cfg *cfg, const struct ll_key_id *k);

/* The most one key of limit cfg may be granted (rate, burst in tokens):
 * the contract, or where keys have contracts of their own
 * (LL_LIM_KEY_CONTRACTS: overrides the coordinator leases) the most the
 * token math holds.
 */
void lease_key_bound(const struct ll_limit_cfg *cfg, uint64_t *rate, uint64_t *burst);

/* Check every key of a grant's set and clamp its rate and burst to the
 * contract (a key's share is never more than its contract: lease_key_bound). -EINVAL if a
 * key is malformed or named twice: then the whole grant is refused (a key
 * dropped from the set would spend the share instead of a cut). Otherwise
 * the number of entries clamped.
 */
int lease_keys_clamp(const struct ll_limit_cfg *cfg, struct lease_key *want, size_t n);

/* Plan the move from the held set (old, n_old: v filled) to want (n_want):
 * an entry whose rate and burst are unchanged keeps its generation, any
 * other takes (*next_gen)++. Sorts both arrays; fills want[].v. put and del
 * point into want/old storage the caller provides (plan->put must have room
 * for n_want, plan->del for n_old).
 */
void lease_keys_plan(struct lease_key *old, size_t n_old, struct lease_key *want, size_t n_want,
		     uint32_t *next_gen, struct lease_key_plan *plan);

/* Move the changes of a grant that is not a whole set to the front of ch
 * (n entries, sorted by lease_keys_clamp): the entries that set a key stay,
 * those that remove one are dropped, so that lease_keys_plan(held entries
 * of the named keys, the result) plans exactly the change. Returns how
 * many set a key.
 */
size_t lease_keys_sets(struct lease_key *ch, size_t n);

/* A cut (keys_full WIRE_KEYS_CUT): the whole set after a grant that lowers
 * what keys may spend and raises none. Every held key keeps the least of
 * its entry and its cap, where a key's cap is its entry in named if named
 * there, else the grant's share (rate, burst); a named key not held gets
 * the least of its named entry and the share (without an entry it would
 * spend the share). Sorts held and named (no entry of named removes a
 * key: lease_keys_clamp and the caller check that); out has room for
 * n_held + n_named. Returns the size of the set written to out.
 */
size_t lease_keys_cut(struct lease_key *held, size_t n_held, struct lease_key *named,
		      size_t n_named, uint64_t rate, uint64_t burst, struct lease_key *out);

/* A grant of changes to limit id's per-key set (not a whole set) builds on
 * the grant the coordinator saw acknowledged: 0 if f's applied (epoch, seq)
 * for the limit is in the grant's epoch and seq is at least base, else
 * -ESTALE.
 */
int lease_keys_base_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t base);

/* The size of a limit's per-key set after a grant of n_set entries: a whole
 * set (full) is n_set; changes make the n_held held keys they name exactly
 * the n_set entries that set a key, counted from old's n_key_grants. false
 * if that count cannot be right (old counts fewer than the held keys
 * named): then *count is not set, and the size is the entries the map
 * holds plus n_set, which only the caller can count.
 */
bool lease_keys_count(const struct ll_lease *old, bool full, size_t n_set, size_t n_held,
		      size_t *count);

/* The per-key part of u (lease_grant_decide's update from old), given the
 * set's size after the grant (count): -E2BIG if count is beyond
 * LL_MAX_LIMIT_KEY_GRANTS; else plan the move from held to want
 * (lease_keys_plan, generations from u->next_gen), set the lease's
 * n_key_grants to count and, if the set changes, its kg_ver past old's.
 */
int lease_keys_decide(const struct ll_lease *old, struct lease_key *held, size_t n_held,
		      struct lease_key *want, size_t n_want, size_t count, struct lease_update *u,
		      struct lease_key_plan *plan);

#endif /* LEASELINE_AGENT_LEASE_DECIDE_H */
