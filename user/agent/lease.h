/* SPDX-License-Identifier: MIT */
/*
 * Lease and fencing decisions of the agent (docs/protocol.md, "Lease clock
 * and fencing"): whether a grant may be applied, and the lease value, fence
 * and generation counter it leaves behind. Pure functions over copies of the
 * map values: nothing here reads a clock or touches a map (dp.c writes what
 * these decide), so every decision is tested without root.
 *
 * Invariants:
 *   - a grant is applied only if its epoch is not older than any epoch seen
 *     and (epoch, seq) is newer than what was applied to that limit;
 *   - a generation number is never reused, so a pool or slice of one share
 *     is never mistaken for another's;
 *   - raising a share never deposits tokens; a revived lease starts empty.
 */
#ifndef LEASELINE_LEASE_H
#define LEASELINE_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "lease_clock.h"
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

#endif /* LEASELINE_LEASE_H */
