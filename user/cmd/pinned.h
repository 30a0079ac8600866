/* SPDX-License-Identifier: MIT */
/*
 * The pinned maps `status` and `top` read, opened by name from a pin dir
 * (dp_pinned_open), each command asking for the ones it reads. Never
 * written.
 */
#ifndef LEASELINE_CMD_PINNED_H
#define LEASELINE_CMD_PINNED_H

/* Each an fd, -1 when not open. */
struct pinned {
	int state, policy, buckets, flow_buckets, limit_stats, rule_stats, parse_stats, leases,
	    fence;
	int shadow_win; /* optional: -1 if unreadable, then no window fields */
};

/* A struct pinned with nothing open, to close safely before pinned_open. */
#define PINNED_NONE ((struct pinned){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1})

/* Which maps a command reads (or'ed into pinned_open's which). */
enum {
	PINNED_STATE = 1u << 0,	       /* ll_state */
	PINNED_POLICY = 1u << 1,       /* ll_policy */
	PINNED_BUCKETS = 1u << 2,      /* ll_buckets */
	PINNED_FLOW_BUCKETS = 1u << 3, /* ll_flow_buckets */
	PINNED_LIMIT_STATS = 1u << 4,  /* ll_limit_stats */
	PINNED_RULE_STATS = 1u << 5,   /* ll_rule_stats */
	PINNED_PARSE_STATS = 1u << 6,  /* ll_parse_stats */
	PINNED_LEASES = 1u << 7,       /* ll_leases */
	PINNED_FENCE = 1u << 8,	       /* ll_fence */
	PINNED_SHADOW_WIN = 1u << 9,   /* ll_shadow_win, optional */
};

/* Open the maps of which pinned under dir, in the order above, every other
 * fd of p set to -1. Stops at the first missing one that is not optional
 * (said in a log line) and returns its negative errno; 0 when all are open.
 */
int pinned_open(const char *dir, unsigned int which, struct pinned *p);
/* Close every fd of p that is open. */
void pinned_close(struct pinned *p);

#endif /* LEASELINE_CMD_PINNED_H */
