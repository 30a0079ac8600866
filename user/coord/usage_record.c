// SPDX-License-Identifier: MIT
/*
 * The usage ledger's writes of reports (usage_ledger.h): a report's
 * per-limit totals diffed against their marks (the incarnation's, the
 * previous one's, or the limit's metering start) and added to the hour's
 * usage with the mark moved, in one transaction; and the bounds both kinds
 * of writes share (usage_ledger_int.h). METER batches: usage_keys.c.
 */
#include <errno.h>
#include <stdbool.h>

#include "lib/monotonic.h"
#include "lib/log.h"
#include "lib/util.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

/* ---- bounds (usage_ledger.h) ---- */

/* (holder, limit, key) of a limit's own spend row (key empty), in ?1..?3. */
static void bind_spend(struct udb_stmt *s, const char *holder, const char *limit)
{
	udb_reset(s);
	udb_bind_text(s, 1, holder);
	udb_bind_text(s, 2, limit);
	udb_bind_blob(s, 3, NULL, 0);
}

void ul_spend_cut(struct ul_spend *r, const struct uledger_contract *c, int64_t now_s,
		  uint64_t *adm, uint64_t *const *others, int n, uint64_t *cut)
{
	int64_t backlog = c->lease && c->backlog_s && c->backlog_s < ULEDGER_BACKLOG_S
			      ? (int64_t)c->backlog_s
			      : ULEDGER_BACKLOG_S;
	uint64_t cap = u64_sat_add(c->burst, u64_sat_mul(c->rate, (uint64_t)backlog)), line;
	int64_t dt;
	bool fresh = !r->found;

	*cut = 0;
	if (fresh) { /* a new row: as if it had refilled for the backlog */
		r->level = cap;
		r->t = now_s < INT64_MIN + backlog ? INT64_MIN : now_s - backlog;
		r->found = true;
	}
	if (now_s <= r->t)
		dt = 0;
	else if (__builtin_sub_overflow(now_s, r->t, &dt) || dt > ULEDGER_BACKLOG_S)
		dt = ULEDGER_BACKLOG_S;
	if (c->rate || c->lease) {
		/* What the bucket held (at most its cap: a bound lowered since,
		 * a contract's row now bounded by a lease) plus what flowed in
		 * over dt: an entry covers the whole interval, so the inflow
		 * counts before the cap does, which holds only what is left.
		 * With pre, the part of dt up to pre_ago_s before now flowed at
		 * the contract (and the bucket may have held the contract's
		 * cap then), the rest at the lease; a fresh row was full at
		 * that time.
		 */
		uint64_t keep = cap, in = fresh ? 0 : u64_sat_mul(c->rate, (uint64_t)dt), avail;

		if (c->pre && c->lease) {
			uint64_t dl = c->pre_ago_s < (uint64_t)dt ? c->pre_ago_s : (uint64_t)dt;
			uint64_t cap_c = u64_sat_add(
			    c->pre_burst, u64_sat_mul(c->pre_rate, (uint64_t)ULEDGER_BACKLOG_S));

			if (fresh) {
				r->level = cap_c;
				dl = c->pre_ago_s;
			}
			if (fresh || (uint64_t)dt > dl)
				keep = cap_c;
			in = u64_sat_add(u64_sat_mul(c->rate, dl),
					 fresh ? 0 : u64_sat_mul(c->pre_rate, (uint64_t)dt - dl));
		}
		avail = u64_sat_add(r->level < keep ? r->level : keep, in);

		if (*adm > avail) {
			*cut += *adm - avail;
			*adm = avail;
		}
		r->level = avail - *adm < cap ? avail - *adm : cap;
	}
	line = u64_sat_mul(ULEDGER_LINE_PPS, (uint64_t)dt + ULEDGER_SLACK_S);
	if (!c->rate && *adm > line) { /* no contract of its own: the line rate */
		*cut = u64_sat_add(*cut, *adm - line);
		*adm = line;
	}
	for (int i = 0; i < n; i++)
		if (*others[i] > line) {
			*cut = u64_sat_add(*cut, *others[i] - line);
			*others[i] = line;
		}
	r->t = now_s;
}

/* Cut what a report's entry adds to its bounds (ul_spend_cut), the
 * limit's spend row read and moved in the transaction open. 0 or a
 * negative errno.
 */
static int spend_bound(struct uledger *lg, const char *holder, const char *limit,
		       const struct uledger_contract *c, int64_t now_s, uint64_t *adm,
		       uint64_t *const *others, int n, uint64_t *cut)
{
	struct udb_stmt *s = lg->st[ST_SPEND_GET];
	struct ul_spend row = {0};
	uint64_t adm0;
	int r;

	bind_spend(s, holder, limit);
	r = udb_step(s);
	if (r == UDB_ROW) {
		row.level = (uint64_t)udb_col_i64(s, 0);
		row.t = udb_col_i64(s, 1);
		row.found = true;
	}
	udb_reset(s);
	if (r < 0)
		return r;
	adm0 = *adm;
	ul_spend_cut(&row, c, now_s, adm, others, n, cut);
	if (c->lease && *adm < adm0)
		lg->c.lease_clamped++;
	s = lg->st[ST_SPEND_PUT];
	bind_spend(s, holder, limit);
	udb_bind_i64(s, 4, ul_i64(row.level));
	udb_bind_i64(s, 5, now_s);
	return udb_step_done(s);
}

/* Whether a line said at most once a minute may be said now (*last moves). */
bool ul_once_a_minute(int64_t *last, int64_t now_s)
{
	if (now_s < *last + 60 && now_s >= *last)
		return false;
	*last = now_s;
	return true;
}

/* A bound cut an entry: counted, and said once a minute at most. */
void ul_note_clamped(struct uledger *lg, const char *holder, const char *limit, int64_t now_s,
			 uint64_t cut)
{
	lg->c.clamped++;
	lg->c.clamped_pkts = u64_sat_add(lg->c.clamped_pkts, cut);
	if (!ul_once_a_minute(&lg->clamp_logged_s, now_s))
		return;
	pr_warn("usage ledger: '%s' limit '%s' claims %llu more than its lease, its contract or "
		"the line rate could have passed: not counted (usage_clamped; said once a "
		"minute)\n",
		holder, limit, (unsigned long long)cut);
}

static void bind_key(struct udb_stmt *s, const char *limit, const char *holder)
{
	udb_reset(s);
	udb_clear(s);
	udb_bind_text(s, 1, limit);
	udb_bind_text(s, 2, holder);
}

static int totals_ge(const struct uledger_totals *a, const struct uledger_totals *b)
{
	return a->admitted >= b->admitted && a->denied >= b->denied && a->fallback >= b->fallback &&
	       a->bypass >= b->bypass;
}

/* What entry e adds (into *d) given its marks; 0 = nothing to write, 1 = write. */
static int entry_delta(struct uledger *lg, const char *holder, uint64_t inc, uint64_t ident,
		       uint64_t seq, const struct uledger_entry *e, struct uledger_totals *d,
		       int *rc)
{
	struct udb_stmt *s = lg->st[ST_MARK_GET];
	struct uledger_totals base = {0}, mark;
	int r;

	if (e->t.admitted > ULEDGER_TOTAL_MAX || e->t.denied > ULEDGER_TOTAL_MAX ||
	    e->t.fallback > ULEDGER_TOTAL_MAX || e->t.bypass > ULEDGER_TOTAL_MAX) {
		ul_note_clamped(lg, holder, e->limit, uledger_now(), ULEDGER_TOTAL_MAX);
		return 0; /* the coordinator refuses these first (a protocol error) */
	}
	bind_key(s, e->limit, holder);
	udb_bind_i64(s, 3, (int64_t)inc);
	r = udb_step(s);
	if (r == UDB_ROW) {
		uint64_t mseq = (uint64_t)udb_col_i64(s, 0);
		int current = udb_col_i64(s, 5);

		col_totals(s, 1, &mark);
		udb_reset(s);
		if (!current || seq <= mseq) {
			lg->c.stale++; /* replayed, reordered, or of a closed incarnation */
			return 0;
		}
		if (totals_ge(&e->t, &mark)) {
			base = mark;
		} else {
			lg->c.backwards++; /* the agent's counters began again */
			pr_warn("usage ledger: '%s' limit '%s': totals went backwards at seq %llu; "
				"counted from 0\n",
				holder, e->limit, (unsigned long long)seq);
		}
	} else if (r == UDB_DONE) {
		udb_reset(s);
		s = lg->st[ST_MARK_CUR];
		bind_key(s, e->limit, holder);
		r = udb_step(s);
		if (r == UDB_ROW) {
			uint64_t mident = (uint64_t)udb_col_i64(s, 5);
			uint64_t minc = (uint64_t)udb_col_i64(s, 0);

			col_totals(s, 1, &mark);
			udb_reset(s);
			/* Older than the current incarnation and than what
			 * retention pruned: a closed incarnation whose mark is
			 * gone, replayed. Not a new one (those start later).
			 */
			if (inc < minc && lg->marks_pruned_before &&
			    inc / 1000000000ull < (uint64_t)lg->marks_pruned_before) {
				lg->c.stale++;
				lg->c.pruned_refused++;
				return 0;
			}
			/* Both identities known: they say whether the pins (and
			 * the counters) were kept. Else the totals guess it.
			 */
			if (ident && mident && ident != mident) {
				lg->c.restarted++;
			} else if (totals_ge(&e->t, &mark)) {
				base = mark; /* a restart that kept its counters */
				lg->c.continued++;
			} else {
				lg->c.restarted++;
			}
			bind_key(lg->st[ST_MARK_CLOSE], e->limit, holder);
			if ((r = udb_step_done(lg->st[ST_MARK_CLOSE])))
				goto fail;
		} else if (r == UDB_DONE) {
			udb_reset(s);
			/* Never metered for this holder. An agent that started
			 * before the limit was metered holds, in its totals,
			 * what it admitted unmetered: they are the baseline.
			 */
			s = lg->st[ST_SINCE];
			udb_reset(s);
			udb_bind_text(s, 1, e->limit);
			r = udb_step(s);
			if (r == UDB_ROW &&
			    inc / 1000000000ull < (uint64_t)udb_col_i64(s, 0)) {
				base = e->t;
				lg->c.first++;
			} else if (r < 0) {
				goto fail;
			}
		} else {
			goto fail;
		}
		udb_reset(s);
	} else {
		goto fail;
	}
	d->admitted = e->t.admitted - base.admitted;
	d->denied = e->t.denied - base.denied;
	d->fallback = e->t.fallback - base.fallback;
	d->bypass = e->t.bypass - base.bypass;
	return 1;
fail:
	udb_reset(s);
	*rc = r;
	return -1;
}

static void bind_totals(struct udb_stmt *s, int first, const struct uledger_totals *t)
{
	udb_bind_i64(s, first, (int64_t)t->admitted);
	udb_bind_i64(s, first + 1, (int64_t)t->denied);
	udb_bind_i64(s, first + 2, (int64_t)t->fallback);
	udb_bind_i64(s, first + 3, (int64_t)t->bypass);
}

static int entry_write(struct uledger *lg, const char *holder, uint64_t inc, uint64_t ident,
		       uint64_t seq, int64_t now_s, const struct uledger_entry *e,
		       const struct uledger_totals *d)
{
	struct udb_stmt *s = lg->st[ST_MARK_PUT];
	int rc;

	bind_key(s, e->limit, holder);
	udb_bind_i64(s, 3, (int64_t)inc);
	udb_bind_i64(s, 4, (int64_t)seq);
	bind_totals(s, 5, &e->t);
	udb_bind_i64(s, 9, now_s);
	udb_bind_i64(s, 10, (int64_t)ident);
	if ((rc = udb_step_done(s)))
		return rc;
	if (!d->admitted && !d->denied && !d->fallback && !d->bypass)
		return 0;
	s = lg->st[ST_USAGE_ADD];
	bind_key(s, e->limit, holder);
	udb_bind_i64(s, 3, uledger_period_start(ULEDGER_HOUR, now_s));
	bind_totals(s, 4, d);
	return udb_step_done(s);
}

void ul_lat_add(struct uledger *lg, uint64_t ns)
{
	lg->lat[lg->lat_next] = ns;
	lg->lat_next = (lg->lat_next + 1) % LAT_SAMPLES;
	if (lg->n_lat < LAT_SAMPLES)
		lg->n_lat++;
}

int uledger_record(struct uledger *lg, const char *holder, uint64_t incarnation, uint64_t seq,
		   int64_t now_s, uint64_t arrival_ns, const struct uledger_entry *e, size_t n)
{
	return uledger_record_ident(lg, holder, incarnation, 0, seq, now_s, arrival_ns, e, n);
}

int uledger_record_ident(struct uledger *lg, const char *holder, uint64_t incarnation,
			 uint64_t ident, uint64_t seq, int64_t now_s, uint64_t arrival_ns,
			 const struct uledger_entry *e, size_t n)
{
	struct uledger_counters saved = lg->c;
	int rc = udb_step_done(lg->st[ST_BEGIN]);

	for (size_t i = 0; !rc && i < n; i++) {
		struct uledger_totals d;
		int r = entry_delta(lg, holder, incarnation, ident, seq, &e[i], &d, &rc);
		uint64_t *const others[] = {&d.denied, &d.fallback, &d.bypass}, cut = 0;

		if (r > 0)
			rc = spend_bound(lg, holder, e[i].limit, &e[i].c, now_s, &d.admitted,
					 others, 3, &cut);
		if (cut)
			ul_note_clamped(lg, holder, e[i].limit, now_s, cut);
		if (r > 0 && !rc)
			rc = entry_write(lg, holder, incarnation, ident, seq, now_s, &e[i], &d);
	}
	if (!rc)
		rc = udb_step_done(lg->st[ST_COMMIT]);
	if (rc) {
		pr_warn("usage ledger: report %llu of '%s' not recorded: %s\n",
			(unsigned long long)seq, holder, udb_errmsg(lg->db));
		if (udb_in_txn(lg->db))
			udb_step_done(lg->st[ST_ROLLBACK]);
		lg->c = saved; /* nothing of it happened */
		lg->c.failures++;
		return rc;
	}
	lg->c.reports++;
	ul_lat_add(lg, clock_now_ns() - arrival_ns);
	return 0;
}

