/* SPDX-License-Identifier: MIT */
/*
 * The lease clock both sides agree on (docs/protocol.md, "Lease clock and
 * fencing"): when a lease dies on the agent and when the coordinator may
 * count its share free again.
 *
 * The agent reads CLOCK_MONOTONIC before it sends the request a grant
 * answers (t_send), and the lease dies in the kernel at
 * t_send + ttl*(1 - rho) - delta. The coordinator counts it live until its
 * own issue time + ttl*(1 + rho) + delta. Since issue happens after t_send in
 * real time, and both clocks run within rho of real time, the kernel stops
 * spending before the coordinator hands the share to anyone else.
 *
 * Invariant: lease_expiry(t, ttl) <= t + ttl < lease_deadline(t, ttl) for
 * every t and ttl; unless the lease is dead on arrival (expiry == t), the
 * two sit at least 2*ttl*rho + 2*delta apart.
 */
#ifndef LEASELINE_LIB_LEASE_CLOCK_H
#define LEASELINE_LIB_LEASE_CLOCK_H

#include <stdint.h>

/* rho: bound on how far CLOCK_MONOTONIC's rate may differ from real time.
 * NTP slews it by at most 500 ppm; 1000 ppm leaves a factor of two.
 */
#define LEASE_RHO_PPM 1000ull
/* delta: slack for everything not modelled (scheduling between reading the
 * clock and acting, timer granularity): 10 ms.
 */
#define LEASE_DELTA_NS 10000000ull

/* Longest ttl a grant may carry (and coord.yaml may set): a vanished holder
 * must not sit on a share for longer. The agent clamps a longer one.
 */
#define LEASE_TTL_MAX_NS (3600ull * 1000000000ull)

/* Bounds on epochs, both sides (a fake peer must not poison a fence or an
 * epoch log for good): epochs stay below LEASE_EPOCH_MAX, and one step moves
 * at most LEASE_EPOCH_STEP_MAX (a restarted coordinator moves by one; a
 * million restarts is far beyond any real fleet). The agent refuses a
 * coordinator beyond them (`leaseline reset-fence` clears a poisoned
 * fence); the coordinator refuses a HELLO that would move its epoch beyond.
 */
#define LEASE_EPOCH_MAX	     (1ull << 62)
#define LEASE_EPOCH_STEP_MAX (1ull << 20)

/* Agent: when a lease granted in answer to a request sent at t_send_ns dies. */
uint64_t lease_expiry(uint64_t t_send_ns, uint64_t ttl_ns);
/* Coordinator: until when a grant issued at t_issue_ns counts as live. */
uint64_t lease_deadline(uint64_t t_issue_ns, uint64_t ttl_ns);

#endif /* LEASELINE_LIB_LEASE_CLOCK_H */
