/* SPDX-License-Identifier: MIT */
/*
 * Coordinator-side capacity accounting for one global limit (rate R,
 * burst B). Two parts:
 *
 *  alloc_maxmin: demand-driven, weighted max-min fair targets. Holders that
 *  need less than their fair share get what they need; the rest is split
 *  among the others by weight; capacity nobody demands is spread by weight
 *  too (so a demand rise is served without a round of decreases).
 *
 *  struct ledger: what every holder may still be spending. A grant counts
 *  as live from issue until it is superseded by a later grant that the
 *  holder acknowledged, or until its deadline (issue + ttl*(1+rho) + delta).
 *  A holder's committed share is the max over its live grants. Increases are
 *  issued only out of headroom R - sum(committed), so capacity taken from one
 *  holder reaches another only after the decrease took effect (acknowledged
 *  or expired). Invariant, checked after every change: sum of committed
 *  rates <= R and sum of committed bursts <= B (after the fallback reserve).
 *
 * Pure code: no I/O, no clock reads (times are passed in), unit-tested.
 */
#ifndef LEASELINE_COORD_LEDGER_H
#define LEASELINE_COORD_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Holders a ledger has room for after ledger_init; ledger_reserve grows it
 * (the coordinator sizes it to coord.yaml's gateways:).
 */
#define LEDGER_MAX_HOLDERS 64
#define LEDGER_MAX_PENDING 8 /* unacknowledged grants remembered per holder */

/* targets[i] <= demand[i] unless capacity is left over; sum(targets) <= capacity.
 * weight 0 is treated as 1 (weight may be NULL: all 1).
 * Rounding: each target is the exact (rational) max-min share rounded down or
 * up; the units that rounding down leaves go one each to the largest
 * fractional parts, ties to the lower index, so sum(targets) == capacity
 * whenever n > 0 and no target exceeds a demand the exact share is below.
 */
void alloc_maxmin(uint64_t capacity, size_t n, const uint64_t *demand, const uint32_t *weight,
		  uint64_t *targets);

struct ledger_grant {
	uint64_t seq;
	uint64_t rate, burst;
	uint64_t deadline_ns; /* coordinator clock; live while now <= deadline_ns */
};

struct ledger_holder {
	bool active; /* registered (connected or with live grants) */
	uint32_t weight;
	uint64_t demand;
	uint64_t next_seq;  /* seq of the next grant; starts at 1 */
	uint64_t acked_seq; /* highest seq the holder acknowledged */
	uint32_t n;	    /* live grants, oldest first */
	struct ledger_grant g[LEDGER_MAX_PENDING];
	uint64_t c_rate, c_burst; /* committed share as last synced (see struct ledger) */
};

/* sum_rate/sum_burst cache the sum of every holder's committed share. They
 * are exact whenever no grant has passed its deadline unnoticed, which
 * next_expiry (a lower bound of every live grant's deadline) tells: past it,
 * the next issue re-syncs every holder first. So an issue or a check costs
 * O(1) amortised instead of a walk over all holders.
 */
struct ledger {
	uint64_t rate, burst; /* capacity left for leases after the fallback reserve */
	size_t cap;	      /* holders h has room for */
	struct ledger_holder *h;
	uint64_t sum_rate, sum_burst;
	uint64_t next_expiry;
};

/* Every holder inactive, no grants, next_seq 1; the capacity set. Room for
 * LEDGER_MAX_HOLDERS holders. 0 or -ENOMEM.
 */
int ledger_init(struct ledger *l, uint64_t rate, uint64_t burst);
int ledger_reserve(struct ledger *l, size_t holders);
void ledger_free(struct ledger *l);
/* Deep copy (for a policy reload that keeps a limit's grants). */
int ledger_copy(struct ledger *dst, const struct ledger *src);
/* Deep copy with room for the first `holders` slots only (more if a later
 * slot is not empty): a per-key ledger needs no more slots than gateways.
 */
int ledger_copy_n(struct ledger *dst, const struct ledger *src, size_t holders);

/* Cached check: is the sum of committed shares above capacity now? */
bool ledger_over(struct ledger *l, uint64_t now);
/* Cached sums, exact at now. */
uint64_t ledger_sum_rate_fast(struct ledger *l, uint64_t now);
uint64_t ledger_sum_burst_fast(struct ledger *l, uint64_t now);

/* Committed share of holder i at time now (max over its live grants). */
uint64_t ledger_committed_rate(const struct ledger *l, size_t i, uint64_t now);
uint64_t ledger_committed_burst(const struct ledger *l, size_t i, uint64_t now);
uint64_t ledger_sum_rate(const struct ledger *l, uint64_t now);
uint64_t ledger_sum_burst(const struct ledger *l, uint64_t now);

/* true when no grant of holder i can still be spent at now (every one past
 * its deadline): its slot may be given to another holder.
 */
bool ledger_holder_idle(const struct ledger *l, size_t i, uint64_t now);
/* Empty holder i's slot (call only when idle); grant numbering continues
 * above every slot's, so a holder returning elsewhere sees no replay.
 */
void ledger_holder_reset(struct ledger *l, size_t i);

/* Drop dead grants (deadline passed, or superseded by an acked later one). */
void ledger_gc(struct ledger *l, uint64_t now);

/* The holder acknowledged grant `seq` (it applied it): earlier grants die,
 * the acked one stays live until its deadline. Acks of an older seq than one
 * already acked, repeated acks and acks of seqs never issued change nothing.
 * The holder must never apply a grant older than one it applied.
 */
void ledger_ack(struct ledger *l, size_t i, uint64_t seq, uint64_t now);

/* Issue holder i a grant toward (target_rate, target_burst): a decrease or
 * equal is issued as is; an increase is cut to what headroom allows (never
 * below the current committed share). Returns true and fills *out if a grant
 * was issued; false if the holder's pending-grant ring is full.
 */
bool ledger_issue(struct ledger *l, size_t i, uint64_t target_rate, uint64_t target_burst,
		  uint64_t now, uint64_t live_ns, struct ledger_grant *out);

/* What ledger_issue would give holder i toward (target_rate, target_burst)
 * now, without issuing anything.
 */
void ledger_peek(struct ledger *l, size_t i, uint64_t target_rate, uint64_t target_burst,
		 uint64_t now, uint64_t *rate, uint64_t *burst);
/* The capacity less every other holder's commitment (0 where they fill it):
 * the most holder i could hold were its own commitment unknown.
 */
void ledger_room_others(struct ledger *l, size_t i, uint64_t now, uint64_t *rate,
			uint64_t *burst);

/* Forget every grant of holder i, keeping its numbering (next seq, acked):
 * for a per-key ledger whose holder can no longer spend any of them (its
 * limit's lease is dead everywhere), so its next grants go on numbering.
 */
void ledger_holder_clear(struct ledger *l, size_t i);

/* ledger_issue with the seq given, not the holder's next one: a per-key
 * ledger records the grant its limit's ledger just issued under the limit's
 * number, so one ack acknowledges both. seq must be above every seq issued
 * to holder i in this ledger (false otherwise, and when the ring is full).
 */
bool ledger_issue_seq(struct ledger *l, size_t i, uint64_t seq, uint64_t target_rate,
		      uint64_t target_burst, uint64_t now, uint64_t live_ns,
		      struct ledger_grant *out);

/* ledger_issue_seq of exactly (rate, burst), headroom or not: a record of
 * what holder i is known to hold already (an adopted per-key entry), never
 * a grant that lets it spend more. The sum may exceed the capacity after
 * it (ledger_over): the caller knows why.
 */
bool ledger_record_seq(struct ledger *l, size_t i, uint64_t seq, uint64_t rate, uint64_t burst,
		       uint64_t now, uint64_t live_ns, struct ledger_grant *out);

/* true when every live grant of holder i in l is matched by a live grant of
 * the same seq in ref, with a deadline no earlier, whose rate and burst are
 * at least as large: what holder i may spend under l, ref accounts for too,
 * and goes on accounting for as long as the acks of one go to the other.
 */
bool ledger_holder_within(const struct ledger *l, size_t i, const struct ledger *ref, uint64_t now);

/* Targets for every active holder from its demand and weight: rate by
 * alloc_maxmin; burst half evenly among the n active holders (B / 2n each,
 * floored) and the rest in proportion to the rate share (floored), so a
 * small rate share still comes with some burst. Both sum to at most the
 * ledger's capacity. rate[] and burst[] hold l->cap entries; inactive
 * holders get 0 (and R = 0 gives everyone 0). 0 or -ENOMEM.
 */
int ledger_targets(const struct ledger *l, uint64_t *rate, uint64_t *burst);

/* Check the invariant; returns 0 or -ERANGE. */
int ledger_check(const struct ledger *l, uint64_t now);

#endif /* LEASELINE_COORD_LEDGER_H */
