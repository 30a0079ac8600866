/* SPDX-License-Identifier: MIT */
/*
 * Private to the dp*.c files: what one of them makes for another. The
 * state itself is struct dp (dp.h).
 */
#ifndef LEASELINE_AGENT_DP_PRIV_H
#define LEASELINE_AGENT_DP_PRIV_H

/* The RCU barrier map (dp->rcu_fd, made by dp_open; dp_policy_commit waits
 * on it): an array-of-maps whose every update makes the kernel wait for an
 * RCU grace period. Its fd, or a negative errno.
 */
int dp_rcu_barrier_create(void);

#endif /* LEASELINE_AGENT_DP_PRIV_H */
