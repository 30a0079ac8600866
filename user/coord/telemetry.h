/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's telemetry beyond its own counters (reference §7): lease
 * waste, the outstanding budget that bounds an overshoot, fairness per
 * cohort, and why allocations failed. Read-only towards every grant: it
 * watches the reports and the ledgers, never changes what a holder gets.
 * Cardinality is bounded: per limit, per (limit, cohort) with two cohorts,
 * per reason from a fixed list.
 */
#ifndef LEASELINE_COORD_TELEMETRY_H
#define LEASELINE_COORD_TELEMETRY_H

#include <stdint.h>

struct coord;
struct climit;
struct ledger;
struct wire_report_entry;

/* Why an allocation did not happen (leaseline_coord_allocator_failures_total). */
enum coord_fail {
	COORD_FAIL_HOLDER_REFUSED,  /* a HELLO refused: `gateways` holders already served */
	COORD_FAIL_RING_FULL,	    /* no grant issued: the holder's unacknowledged ring full */
	COORD_FAIL_KEY_LEDGER_FULL, /* grant withheld: a hot key's ledger could not record it */
	COORD_FAIL_STORE,	    /* report unanswered: its usage could not be made durable */
	COORD_FAIL_LINK_DROP,	    /* a holder's connection dropped: its grants left to expire */
	COORD_FAIL_MAX,
};
const char *telemetry_fail_name(enum coord_fail r);

/* What the last report of one holder said of one limit's admissions. A
 * slot is keyed by the limit's name (tele_key), so a reload that moves a
 * limit to another index starts its baseline again instead of mixing two.
 */
struct tele_slot {
	uint32_t key;
	uint32_t pad0;
	uint64_t admitted; /* absolute total of that report */
	uint64_t ns;	   /* coordinator clock of that report; 0: no baseline */
	double rate;	   /* tokens/s admitted over the interval before it; < 0: unknown */
};

uint32_t tele_key(const char *name);

/* One report's admitted total for slot s: measure the interval since the
 * last one, and return the tokens it wasted, committed_rate x interval less
 * what was admitted (>= 0). No interval (returns 0, rate unknown) on the
 * first report, after a reload moved the slot, when the total went back (a
 * new incarnation), or after a gap over max_gap_ns (a silent or reconnected
 * holder: its grants expired in between).
 */
double tele_interval(struct tele_slot *s, uint32_t key, uint64_t admitted, uint64_t now,
		     uint64_t max_gap_ns, uint64_t committed_rate);

/* The outstanding budget of a ledger at now: over every holder with a live
 * grant, its committed burst plus its committed rate times the time until
 * its last live grant's deadline (tokens). *spenders gets how many holders
 * that is (with a share other than 0).
 */
double tele_outstanding(const struct ledger *l, uint64_t now, uint32_t *spenders);

/* Fairness of one limit over two cohorts of the holders taking part in the
 * division: light (demand at or below its max-min target: its fair share is
 * its offered load, the demand less the 1 token/s the agent adds) and heavy
 * (demand above the target: its fair share is the target). rate < 0 (not
 * measured) leaves the holder out.
 */
enum tele_cohort { TELE_LIGHT, TELE_HEAVY, TELE_COHORTS };
struct tele_fair {
	double admitted[TELE_COHORTS]; /* tokens/s */
	double fair[TELE_COHORTS];     /* tokens/s */
	uint32_t holders[TELE_COHORTS];
};
const char *tele_cohort_name(enum tele_cohort c);
void tele_fair_add(struct tele_fair *f, uint64_t demand, uint64_t target, double rate);

/* Gaps between reports longer than this many refresh intervals measure no
 * interval (the agent's link counts 4 without a grant as dead).
 */
#define TELE_MAX_GAP_REFRESH 4

/* From on_report, for each limit a report names, before its acks: the
 * interval's waste into c->waste (aggregate limits) and the holder's rate.
 */
void telemetry_report(struct coord *co, int hi, struct climit *c, uint32_t l,
		      const struct wire_report_entry *e, uint64_t now);

#endif /* LEASELINE_COORD_TELEMETRY_H */
