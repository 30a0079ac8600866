/* SPDX-License-Identifier: MIT */
/*
 * The usage ledger (reference §6.3): what each holder admitted, denied and
 * passed by fallback or fail-open (bypass) per metered global limit and UTC
 * hour, in SQLite (WAL). Kept apart from admission: the lease ledger
 * (ledger.h) decides, this one only counts.
 *
 * Reports carry absolute running totals per (holder, incarnation) and a
 * seq. For each (limit, holder, incarnation) the ledger keeps the totals it
 * last accounted (the mark); a report adds only what its totals exceed the
 * mark by, into the hour the report arrived in, and moves the mark, all in
 * one transaction. So a retransmitted, reordered, delayed or replayed report
 * adds nothing, and a crash at any point loses or doubles nothing: the
 * usage and the mark commit together or not at all, and the agent's next
 * report carries the same totals again.
 *
 * The first report of a (limit, holder) the ledger has no mark for is
 * diffed against 0, unless its incarnation (the agent's start, CLOCK_REALTIME
 * ns) is before the limit's metering began: then its totals hold what was
 * admitted unmetered, and are the baseline.
 *
 * A new incarnation of a (limit, holder) is diffed against the latest mark
 * of the previous incarnation if every total is at or above it (an agent
 * restart that kept its pinned counters continues them), else against 0
 * (its counters began again). The previous incarnation is closed then: a
 * late report of it is stale. Totals that go backwards within an
 * incarnation (a limit's counters reset by the agent) are counted as
 * `backwards` and taken as counted from 0.
 */
#ifndef LEASELINE_COORD_USAGE_LEDGER_H
#define LEASELINE_COORD_USAGE_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ll_types.h"

struct uledger;

struct uledger_totals {
	uint64_t admitted, denied, fallback, bypass;
};

/* ---- what a holder's figures may claim (reference §6.3, Bounds) ----
 *
 * Totals come from the network. A total above ULEDGER_TOTAL_MAX is refused
 * before it reaches the ledger (the coordinator: a protocol error), so no
 * stored figure or sum of a few wraps. What an entry adds is then bounded
 * per (holder, limit, key; key empty for a limit's own totals), in the
 * `spend` table, across incarnations, identities and series:
 *   - admitted, by what the contract could have admitted: a bucket of
 *     burst + rate x ULEDGER_BACKLOG_S filled at rate (so a report that
 *     comes late after an outage of the ledger still counts up to an hour
 *     of traffic at the contract), or by the holder's own lease (lease:
 *     burst + rate x backlog_s); an entry gets what the bucket held plus
 *     what flowed in over the time it covers;
 *   - denied, fallback and bypass packets (and admitted, where rate is 0),
 *     by ULEDGER_LINE_PPS since the row was last touched (at most
 *     ULEDGER_BACKLOG_S) plus a minute;
 *   - bytes of a class, by its packets x ULEDGER_FRAME_MAX.
 * What exceeds a bound is not counted (`clamped`), and the mark moves all
 * the same: it is never counted later either.
 */
#define ULEDGER_TOTAL_MAX (1ull << 62)
#define ULEDGER_BACKLOG_S 3600
#define ULEDGER_SLACK_S	  60
#define ULEDGER_LINE_PPS  (1ull << 30)
#define ULEDGER_FRAME_MAX (1ull << 18)
/* Series (key marks) a holder may have; a new series past it is refused. */
#define ULEDGER_SERIES_QUOTA (1u << 20)

/* A budget's contract, in its unit (bytes: the limit counts bytes); rate 0:
 * no contract of its own (a per-key limit's own totals sum its keys): the
 * line rate bounds its admitted figure as it does the others.
 *
 * lease: the bound is the holder's own lease, not the contract: rate and
 * burst are the most the coordinator granted it since its last recorded
 * report, the bucket holds burst + rate x backlog_s (the lease ttl plus
 * ULEDGER_LEASE_SLACK_S: a holder gets no grant of a metered limit until
 * its report is recorded, so what a late report can carry is a ttl's
 * worth), and rate 0 means nothing admitted beyond burst.
 *
 * pre (with lease): the holder's first report after it took a slot. Up
 * to pre_ago_s before now it may have spent grants its lease did not name
 * (of an earlier run, or of a slot it gave up): the contract (pre_rate,
 * pre_burst, as without lease) bounds that part, its lease the rest.
 */
struct uledger_contract {
	uint64_t rate, burst;
	bool bytes;
	bool lease;
	uint32_t backlog_s;
	bool pre;
	uint32_t pre_ago_s;
	uint64_t pre_rate, pre_burst;
};
#define ULEDGER_LEASE_SLACK_S 60

struct uledger_entry {
	const char *limit;
	struct uledger_totals t; /* absolute totals since the incarnation began */
	struct uledger_contract c;
};

struct uledger_counters {
	uint64_t reports;   /* report batches committed */
	uint64_t stale;	    /* entries not above their mark's seq, or of a closed incarnation */
	uint64_t backwards; /* entries whose totals went below the mark with a newer seq */
	uint64_t continued; /* new incarnations diffed against the previous one's mark */
	uint64_t restarted; /* new incarnations diffed against 0 */
	uint64_t first;	    /* first reports of agents older than the metering: baselines */
	uint64_t failures;  /* batches that could not be committed (nothing written) */
	/* per-key usage (uledger_keys_*) */
	uint64_t key_batches;  /* METER batches committed */
	uint64_t key_entries;  /* key entries in them */
	uint64_t key_counted;  /* entries that added usage */
	uint64_t key_stale;    /* entries at or below their mark in every field: nothing added */
	uint64_t key_failures; /* transactions of key batches not committed (nothing written) */
	/* retention (uledger_prune) */
	uint64_t pruned_refused; /* reports/batches of an incarnation or identity pruned: refused */
	uint64_t pruned_usage;	 /* usage rows deleted (per limit and per key) */
	uint64_t pruned_marks;	 /* marks deleted (per-limit incarnations, key series) */
	uint64_t pruned_idents;	 /* counters identities whose marks went */
	/* bounds (above) */
	uint64_t clamped;      /* entries of which a part was beyond its bound: not counted */
	uint64_t lease_clamped; /* of those, admitted beyond the holder's own lease */
	uint64_t clamped_pkts; /* packets (or tokens) of those parts */
	uint64_t quota;	       /* new series refused: their holder had its quota */
};

/* Open (creating) the ledger file: WAL, synchronous FULL. 0 or -errno.
 * A handle is used by one thread at a time (the coordinator: its writer
 * thread, usage_writer.h).
 */
int uledger_open(struct uledger **out, const char *path);
/* where (a path, or a PostgreSQL URI) as it may be logged: without the
 * URI's password (user:PASSWORD@, password=PASSWORD), if it has one.
 */
const char *uledger_where(const char *where, char *buf, size_t len);
void uledger_close(struct uledger *lg);

/* One report of `holder` (incarnation, seq): its metered entries, in one
 * transaction, the usage attributed to the UTC hour holding now_s.
 * arrival_ns (CLOCK_MONOTONIC) is when the report arrived, for the
 * arrival-to-commit latency. 0, or a negative errno and nothing written.
 */
int uledger_record(struct uledger *lg, const char *holder, uint64_t incarnation, uint64_t seq,
		   int64_t now_s, uint64_t arrival_ns, const struct uledger_entry *e, size_t n);

/* The same with the holder's counters identity (its HELLO's, 0 unknown): a
 * new incarnation whose identity differs from the last one's (both known)
 * began its counters again, whatever its totals; the same identity kept
 * them. Unknown on either side: the totals decide, as above.
 */
int uledger_record_ident(struct uledger *lg, const char *holder, uint64_t incarnation,
			 uint64_t ident, uint64_t seq, int64_t now_s, uint64_t arrival_ns,
			 const struct uledger_entry *e, size_t n);

const struct uledger_counters *uledger_counters(const struct uledger *lg);

/* The limits metered now: one not metered before starts its metering at
 * now_s (UTC seconds); one no longer metered loses its marks and start, so
 * that metered again it does not count what passed meanwhile. Usage rows
 * stay. 0 or -errno.
 */
int uledger_set_metered(struct uledger *lg, const char *const *limits, size_t n, int64_t now_s);

/* Arrival-to-commit latency of the last (up to 4096) committed batches, ns. */
void uledger_latency(const struct uledger *lg, uint64_t *p50, uint64_t *p99, size_t *samples);

/* The ledger's notion of now (UTC seconds): time(), unless the file named by
 * LEASELINE_LEDGER_NOW_FILE (tests only) holds a number of seconds.
 */
int64_t uledger_now(void);

/* ---- per-key usage (reference §6.3, "Per key") ----
 *
 * Per (limit, key, holder, UTC hour): admitted, denied, fallback and bypass,
 * packets and bytes, from the agents' per-key running totals (ll_meter).
 * Totals are absolute and only grow within a series: (holder, counters
 * identity, limit uid, key). For each series the ledger keeps the totals it
 * has accounted (the key mark); an entry adds, per field, what it exceeds
 * the mark by, and the mark becomes the field-wise maximum, in the same
 * transaction. Within a series every field grows, so the maximum of any
 * set of reports is the newest one's totals: a replayed, reordered, delayed
 * or duplicated batch adds nothing, and the sum of the usage rows of a
 * series equals its newest totals that reached the ledger. A new identity
 * (the agent's pins lost) is a new series, from 0.
 */
struct uledger_key_entry {
	struct ll_key_id key; /* the series' key, as the agent sent it */
	uint64_t born;	      /* when the agent's entry for it was made (ll_meter.born) */
	const char *key_text; /* the key as people write it (keyfmt), for the usage rows */
	uint64_t pkts[LL_METER_CLASSES]; /* absolute totals, enum ll_meter_class */
	uint64_t bytes[LL_METER_CLASSES];
	struct uledger_contract c; /* the key's contract (its override's, if any) */
};

/* The series a holder may have (default ULEDGER_SERIES_QUOTA). */
void uledger_set_series_quota(struct uledger *lg, uint32_t series);

/* A transaction over any number of batches (the coordinator's writer
 * thread: the METER batches of up to 200 ms), then commit (0, or -errno with nothing of
 * it written: every batch in it must be sent again).
 */
int uledger_keys_begin(struct uledger *lg);
int uledger_keys_add(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		     const char *limit, int64_t now_s, const struct uledger_key_entry *e, size_t n);
int uledger_keys_commit(struct uledger *lg, uint64_t arrival_ns);
void uledger_keys_abort(struct uledger *lg);
/* begin, add, commit: one batch alone. */
int uledger_record_keys(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
			const char *limit, int64_t now_s, uint64_t arrival_ns,
			const struct uledger_key_entry *e, size_t n);

/* 1 when retention pruned the marks of (holder, ident): its batches are
 * refused (uledger_keys_add returns -ESTALE) rather than counted from 0
 * again; 0 when not; or a negative errno.
 */
int uledger_ident_pruned(struct uledger *lg, const char *holder, uint64_t ident);
/* A caller that refused a batch on uledger_ident_pruned counts it here. */
void uledger_note_refused(struct uledger *lg);

/* Retention (reference §6.3): one bounded step, one transaction, of at most
 * about max_rows rows visited: usage rows (per limit and per key) of hours
 * ended retention_s before now_s; marks of closed incarnations not updated
 * since then (a later report of one is refused: `pruned_refused`); the
 * marks of counters identities that have not reported since then (the
 * identity tombstoned first, in key_idents, so that its batches are
 * refused, never counted from 0 again). Returns the rows deleted or
 * visited (> 0: call again), 0 when a whole pass found nothing more to do,
 * or a negative errno (nothing of the step done).
 */
int uledger_prune(struct uledger *lg, int64_t now_s, uint64_t retention_s, unsigned max_rows);

struct uledger_key_row {
	char limit[32];
	char key[128];	 /* "" when summed over keys */
	char holder[64]; /* "" when summed over holders */
	int64_t start, end;
	uint64_t pkts[LL_METER_CLASSES], bytes[LL_METER_CLASSES];
};

/* ---- queries (leaseline usage) ---- */

enum uledger_period {
	ULEDGER_HOUR = 0,
	ULEDGER_DAY,
	ULEDGER_MONTH,
};

struct uledger_row {
	char limit[32];
	char holder[64]; /* "" when summed over holders */
	int64_t start;	 /* the period's first second, UTC */
	int64_t end;	 /* the next period's first second */
	struct uledger_totals t;
};

struct uledger_query {
	enum uledger_period period;
	const char *limit;  /* NULL: every limit */
	const char *holder; /* NULL: every holder */
	int64_t from, to;   /* periods overlapping [from, to); to 0 = no end */
	int by_holder;	    /* 0: one row per (limit, period), holders summed */
};

/* Rows ordered by period, limit, holder; cb returning non-zero stops.
 * 0, or a negative errno (-ENOENT: no ledger file).
 */
int uledger_query(const char *path, const struct uledger_query *q,
		  int (*cb)(const struct uledger_row *r, void *arg), void *arg);

/* The first second of the period holding t, and of the next one. */
int64_t uledger_period_start(enum uledger_period p, int64_t t);
int64_t uledger_period_next(enum uledger_period p, int64_t start);

/* Per-key rows (q as for uledger_query; key NULL: every key),
 * ordered by period, limit, key, holder.
 */
int uledger_query_keys(const char *path, const struct uledger_query *q, const char *key,
		       int (*cb)(const struct uledger_key_row *r, void *arg), void *arg);

/* The key marks of one holder's counters identity (what the ledger has
 * accounted per series: (limit uid, key, born), totals in the order pkts
 * then bytes by class), ordered by limit uid, key bytes, born: for
 * `leaseline usage --reconcile --pin-dir`, which merges them with the
 * series in the gateway's ll_meter. cb returning non-zero stops. 0 or a
 * negative errno.
 */
struct uledger_mark_row {
	uint32_t limit_uid;
	struct ll_key_id key;
	uint64_t born;
	char limit[32];
	uint64_t pkts[LL_METER_CLASSES], bytes[LL_METER_CLASSES];
};
int uledger_query_marks(const char *path, const char *holder, uint64_t ident,
			int (*cb)(const struct uledger_mark_row *r, void *arg), void *arg);

#endif /* LEASELINE_COORD_USAGE_LEDGER_H */
