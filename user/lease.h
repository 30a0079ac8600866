/* SPDX-License-Identifier: MIT */
/*
 * Agent side of leases (docs/protocol.md, "Lease clock and fencing"): when a
 * grant may be applied, when it dies, and writing it into ll_leases.
 *
 * Lease clock: the agent reads CLOCK_MONOTONIC before it sends the request a
 * grant answers (t_send) and the lease dies in the kernel at
 * t_send + ttl*(1 - rho) - delta. The coordinator counts it live until its own
 * issue time + ttl*(1 + rho) + delta. Since issue happens after t_send in real
 * time, and both clocks run within rho of real time, the kernel stops
 * spending before the coordinator hands the share to anyone else.
 */
#ifndef LEASELINE_LEASE_H
#define LEASELINE_LEASE_H

#include <stdint.h>

#include "ll_types.h"

/* rho: bound on how far CLOCK_MONOTONIC's rate may differ from real time.
 * NTP slews it by at most 500 ppm; 1000 ppm leaves a factor of two.
 */
#define LEASE_RHO_PPM 1000ull
/* delta: slack for everything not modelled (scheduling between reading the
 * clock and acting, timer granularity): 10 ms.
 */
#define LEASE_DELTA_NS 10000000ull

uint64_t lease_expiry(uint64_t t_send_ns, uint64_t ttl_ns);
uint64_t lease_deadline(uint64_t t_issue_ns, uint64_t ttl_ns);

struct lease_grant {
	uint64_t epoch, seq;
	uint64_t rate, burst; /* tokens/s, tokens */
	uint64_t expiry_ns;   /* from lease_expiry */
};

/* Fencing: 0 if a grant (epoch, seq) for limit id may be applied given f,
 * else -ESTALE (older epoch than seen, or not newer than what is applied).
 */
int lease_fence_check(const struct ll_fence *f, uint32_t id, uint64_t epoch, uint64_t seq);

/* New lease value after applying g to old at time now. A plain renewal keeps
 * the generation (slices stay valid); a changed share or a lease revived
 * after it died gets a new generation whose "prev" is what the pool was
 * spending, so the datapath settles and clamps (raising never deposits).
 * *next_gen is the agent's generation counter (ll_state.next_uid).
 */
void lease_next(const struct ll_lease *old, const struct lease_grant *g, uint64_t now,
		unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out);

/* Lease value for a global limit as the policy defines it: never granted
 * (expiry 0), on-loss and fallback share from cfg. Keeps old's share and
 * expiry when old belongs to the same limit uid (a reload).
 */
void lease_from_policy(const struct ll_lease *old, bool same_limit, const struct ll_limit_cfg *cfg,
		       unsigned int ncpus, uint32_t *next_gen, struct ll_lease *out);

#endif /* LEASELINE_LEASE_H */
