/* SPDX-License-Identifier: MIT */
/*
 * What the files of the coordinator's daemon share with each other and
 * with nothing else: coord.c (start, main loop, reload, exit), limits.c
 * (the policy's global limits), connections.c (accept, read, write, drop),
 * grants.c (HELLO and REPORT, answered with GRANTs), metering.c (the
 * usage ledger's writer: metered reports and METER batches) and
 * leadership.c (replicas: the election's view, redirects). The state
 * they work on is state.h's; every function here runs on the main loop,
 * under the state lock. Connections come from the door's thread
 * (handshakes.h), which touches none of it.
 */
#ifndef LEASELINE_COORD_COORD_INT_H
#define LEASELINE_COORD_COORD_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/monotonic.h"
#include "coord/state.h"
#include "lib/wire.h"

#define COORD_SPARE_CONNS 64 /* connections beyond gateways: not yet said hello */
/* Fallback/bypass records per holder and limit at most this often. */
#define COORD_USAGE_MIN_INTERVAL_NS (100 * NSEC_PER_MSEC)

/* epoll data: 0 the door's eventfd (connections it has finished with), 1
 * + index for a connection, EP_USAGE the usage ledger's writer's eventfd,
 * EP_ELECTION the election's.
 */
#define EP_DOOR	    0
#define EP_CONN0    1
#define EP_USAGE    UINT64_MAX
#define EP_ELECTION (UINT64_MAX - 1) /* the election thread's eventfd (replicas:) */

/* coord.c: the main loop's periodic work (every COORD_TICK_MS). */
void coord_tick(struct coord *co);

/* limits.c */
struct climit *limit_by_name(struct coord *co, const char *name);
void limits_free(struct climit *lim, uint32_t n);
/* Read, parse and take the policy file (initial: at start, any version). */
int policy_load(struct coord *co, bool initial);
void targets_recompute(struct climit *c, uint64_t now);
void holder_asking(struct coord *co, int hi, bool asking);
void check_invariant(struct coord *co, struct climit *c, uint64_t now);

/* connections.c */
void conn_drop(struct coord *co, int ci, const char *why);
int send_msg(struct coord *co, int ci, const struct wire_msg *m);
int send_policy(struct coord *co, int ci);
void conn_watch(struct coord *co, int ci);
const char *peer_str(const struct cconn *cc, char *buf, size_t len);
void conns_admit(struct coord *co);
void conn_event(struct coord *co, int ci, uint32_t events);
void conns_hello_deadline(struct coord *co, uint64_t now);

/* grants.c */
void on_hello(struct coord *co, int ci, const struct wire_hello *m);
void on_report(struct coord *co, int ci, const struct wire_report *r);
void grant_one(struct coord *co, int ci, int hi, struct climit *c, uint64_t report_seq,
	       uint64_t now);
/* May holder hi be granted limit c now: past the quiet period, or in it
 * with a share it proved (adoption).
 */
bool grant_allowed(struct coord *co, int hi, const struct climit *c, uint64_t now);

/* leadership.c (replicas:; without them this replica always leads) */
int leadership_start(struct coord *co);
/* The election's settings from the replicas: section. */
void election_cfg_of(const struct cfg_replicas *r, struct election_cfg *ec);
void leadership_stop(struct coord *co);
/* The election's view changed (its eventfd, EP_ELECTION). */
void on_election(struct coord *co);
/* It leads and now is before its deadline: grants may go out (counted
 * when they may not).
 */
bool coord_may_grant(struct coord *co, uint64_t now);
/* Answer a HELLO with REDIRECT (the leader known, or none) and close. */
void redirect_hello(struct coord *co, int ci, const char *holder);

/* metering.c */
int usage_ledger_ensure(struct coord *co);
/* A share committed to (or adopted from) a holder: its usage ledger bound
 * for the report that covers it rises to at least (rate, burst).
 */
void lease_note(struct cholder_limit *hl, uint64_t rate, uint64_t burst);
/* A share of limit c, or of one of its keys, granted to (or adopted
 * from) a holder: what any of its keys may spend rises to at least it.
 */
void meter_note(struct cholder_limit *hl, uint64_t rate, uint64_t burst);
/* Holder hi gives its slot up (all its grants dead): remembered by name. */
void lease_gone(struct coord *co, int hi);
/* Holder hi has taken a fresh slot: outside the quiet period, the contract
 * bounds its first report only up to when every grant it may have held
 * died (that of its last slot, remembered by lease_gone, or the quiet
 * period's end), its lease from then.
 */
void lease_slot_taken(struct coord *co, int hi, uint64_t now);
void record_metered(struct coord *co, struct cholder *h, int ci, int hi,
		    const struct wire_report *r, struct climit *const *cl, bool *recorded,
		    uint64_t now);
void on_meter(struct coord *co, int ci, const struct wire_meter *mt, uint64_t now);
void usage_done(struct coord *co);

#endif /* LEASELINE_COORD_COORD_INT_H */
