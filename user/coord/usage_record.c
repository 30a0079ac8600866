// SPDX-License-Identifier: MIT
/*
 * The usage ledger's writes (usage_ledger.h): a report's per-limit totals
 * diffed against their marks (the incarnation's, the previous one's, or
 * the limit's metering start) and added to the hour's usage with the mark
 * moved, in one transaction; and METER batches of per-key totals, added
 * field by field over their key marks, many batches to a transaction.
 */
#include <errno.h>
#include <stdbool.h>

#include "lib/monotonic.h"
#include "lib/log.h"
#include "lib/util.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

/* ---- bounds (usage_ledger.h) ---- */

/* An amount as the ledger keeps it: at most INT64_MAX. */
static int64_t as_i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* (holder, limit, key) of a spend row, in ?1..?3; klen 0: a limit's own. */
static void bind_spend(struct udb_stmt *s, const char *holder, const char *limit, const void *key,
		       int klen)
{
	udb_reset(s);
	udb_bind_text(s, 1, holder);
	udb_bind_text(s, 2, limit);
	udb_bind_blob(s, 3, key, (size_t)klen);
}

/* Cut what an entry adds to its bounds: *adm (admitted, by the contract's
 * bucket) and others[0..n) (by the line rate), per (holder, limit, key), the
 * spend row moved in the transaction open. *cut: what was not counted.
 * 0 or a negative errno.
 */
static int spend_bound(struct uledger *lg, const char *holder, const char *limit, const void *key,
		       int klen, const struct uledger_contract *c, int64_t now_s, uint64_t *adm,
		       uint64_t *const *others, int n, uint64_t *cut)
{
	struct udb_stmt *s = lg->st[ST_SPEND_GET];
	uint64_t cap = u64_sat_add(c->burst, u64_sat_mul(c->rate, ULEDGER_BACKLOG_S)), level = cap,
		 line;
	int64_t t = now_s < INT64_MIN + ULEDGER_BACKLOG_S ? INT64_MIN : now_s - ULEDGER_BACKLOG_S,
		dt;
	int r;

	*cut = 0;
	bind_spend(s, holder, limit, key, klen);
	r = udb_step(s);
	if (r == UDB_ROW) {
		level = (uint64_t)udb_col_i64(s, 0);
		t = udb_col_i64(s, 1);
	}
	udb_reset(s);
	if (r < 0)
		return r;
	if (now_s <= t)
		dt = 0;
	else if (__builtin_sub_overflow(now_s, t, &dt) || dt > ULEDGER_BACKLOG_S)
		dt = ULEDGER_BACKLOG_S;
	if (c->rate) {
		level = u64_sat_add(level, u64_sat_mul(c->rate, (uint64_t)dt));
		if (level > cap)
			level = cap;
		if (*adm > level) {
			*cut += *adm - level;
			*adm = level;
		}
		level -= *adm;
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
	s = lg->st[ST_SPEND_PUT];
	bind_spend(s, holder, limit, key, klen);
	udb_bind_i64(s, 4, as_i64(level));
	udb_bind_i64(s, 5, now_s);
	return udb_step_done(s);
}

/* Whether a line said at most once a minute may be said now (*last moves). */
static bool once_a_minute(int64_t *last, int64_t now_s)
{
	if (now_s < *last + 60 && now_s >= *last)
		return false;
	*last = now_s;
	return true;
}

/* A bound cut an entry: counted, and said once a minute at most. */
static void note_clamped(struct uledger *lg, const char *holder, const char *limit, int64_t now_s,
			 uint64_t cut)
{
	lg->c.clamped++;
	lg->c.clamped_pkts = u64_sat_add(lg->c.clamped_pkts, cut);
	if (!once_a_minute(&lg->clamp_logged_s, now_s))
		return;
	pr_warn("usage ledger: '%s' limit '%s' claims %llu more than its contract or the line rate "
		"could have passed: not counted (usage_clamped; said once a minute)\n",
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
		note_clamped(lg, holder, e->limit, uledger_now(), ULEDGER_TOTAL_MAX);
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

static void lat_add(struct uledger *lg, uint64_t ns)
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
			rc = spend_bound(lg, holder, e[i].limit, NULL, 0, &e[i].c, now_s,
					 &d.admitted, others, 3, &cut);
		if (cut)
			note_clamped(lg, holder, e[i].limit, now_s, cut);
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
	lat_add(lg, clock_now_ns() - arrival_ns);
	return 0;
}

/* ---- per-key usage ---- */

void uledger_note_refused(struct uledger *lg)
{
	lg->c.pruned_refused++;
}

int uledger_ident_pruned(struct uledger *lg, const char *holder, uint64_t ident)
{
	struct udb_stmt *s = lg->st[ST_KIDENT_GET];
	int r, pruned = 0;

	udb_reset(s);
	udb_bind_text(s, 1, holder);
	udb_bind_i64(s, 2, (int64_t)ident);
	r = udb_step(s);
	if (r == UDB_ROW)
		pruned = udb_col_i64(s, 0) != 0;
	udb_reset(s);
	if (r < 0)
		return r;
	return pruned;
}

int uledger_keys_begin(struct uledger *lg)
{
	if (udb_in_txn(lg->db))
		return 0; /* already in one */
	return udb_step_done(lg->st[ST_BEGIN]);
}

/* The series (key marks) holder has: holder_series, else counted once. */
static int holder_series_get(struct uledger *lg, const char *holder, int64_t *n)
{
	struct udb_stmt *s = lg->st[ST_HSERIES_GET];
	int r;

	for (int pass = 0; pass < 2; pass++) {
		udb_reset(s);
		udb_bind_text(s, 1, holder);
		r = udb_step(s);
		if (r == UDB_ROW)
			*n = udb_col_i64(s, 0);
		udb_reset(s);
		if (r == UDB_ROW) {
			*n = *n < 0 ? 0 : *n; /* (the file edited by hand) */
			return 0;
		}
		if (r < 0)
			return r;
		s = lg->st[ST_HSERIES_COUNT]; /* a ledger from before the quota */
	}
	return -EIO; /* count(*) without a row */
}

/* A new series refused past its holder's quota: counted, said once a minute. */
static void note_quota(struct uledger *lg, const char *holder, const char *limit, int64_t now_s)
{
	lg->c.quota++;
	if (!once_a_minute(&lg->quota_logged_s, now_s))
		return;
	pr_warn("usage ledger: '%s' has its quota of %u series: a new key of limit '%s' is not "
		"recorded (usage_quota; said once a minute)\n",
		holder, lg->series_quota, limit);
}

/* Field f of an entry in the columns' order (0..7: ap ab dp db fp fb bp bb). */
static uint64_t key_field(const struct uledger_key_entry *e, int f)
{
	return f & 1 ? e->bytes[f / 2] : e->pkts[f / 2];
}

int uledger_keys_add(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		     const char *limit, int64_t now_s, const struct uledger_key_entry *e, size_t n)
{
	int64_t hour = uledger_period_start(ULEDGER_HOUR, now_s), series = -1;
	int rc = uledger_ident_pruned(lg, holder, ident);
	uint64_t added = 0;

	if (rc) {
		if (rc > 0) {
			lg->c.pruned_refused++;
			rc = -ESTALE;
		}
		return rc;
	}
	{
		struct udb_stmt *s = lg->st[ST_KIDENT_PUT];

		udb_reset(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, now_s);
		rc = udb_step_done(s);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct udb_stmt *s = lg->st[ST_KMARK_GET];
		uint64_t mark[8] = {0}, t[8], d[8], cut = 0;
		bool add = false, move = false, big = false;
		int r;

		for (int f = 0; f < 8; f++) {
			t[f] = key_field(&e[i], f);
			big |= t[f] > ULEDGER_TOTAL_MAX;
		}
		if (big) { /* the coordinator refuses these first */
			note_clamped(lg, holder, limit, now_s, ULEDGER_TOTAL_MAX);
			continue;
		}
		/* No class passes more bytes than its packets could carry (and
		 * a packet a CPU whose bytes were read before it).
		 */
		for (int f = 1; f < 8; f += 2) {
			uint64_t most = u64_sat_mul(t[f - 1] + 64, ULEDGER_FRAME_MAX);

			if (t[f] > most) {
				cut = u64_sat_add(cut, t[f] - most);
				t[f] = most;
			}
		}
		udb_reset(s);
		udb_clear(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, (int64_t)limit_uid);
		udb_bind_blob(s, 4, &e[i].key, sizeof(e[i].key));
		udb_bind_text(s, 5, limit);
		udb_bind_i64(s, 6, (int64_t)e[i].born);
		r = udb_step(s);
		if (r == UDB_ROW)
			for (int f = 0; f < 8; f++)
				mark[f] = (uint64_t)udb_col_i64(s, f);
		udb_reset(s);
		if (r < 0) {
			rc = r;
			break;
		}
		/* A new series past the holder's quota: refused, counted. */
		if (r == UDB_DONE) {
			if (series < 0 && (rc = holder_series_get(lg, holder, &series)))
				break;
			if ((uint64_t)series + added >= lg->series_quota) {
				note_quota(lg, holder, limit, now_s);
				continue;
			}
			added++;
		}
		/* Field-wise: what the totals exceed the mark by; the mark
		 * becomes the maximum (a field below it is an older report's).
		 */
		for (int f = 0; f < 8; f++) {
			d[f] = t[f] > mark[f] ? t[f] - mark[f] : 0;
			if (d[f])
				mark[f] = t[f];
		}
		{
			/* ap or ab by the contract, the other classes' packets by the
			 * line rate (bytes followed their packets above).
			 */
			int af = e[i].c.bytes ? 1 : 0;
			uint64_t *const others[] = {&d[2], &d[4], &d[6]};
			uint64_t spent = 0;

			if ((rc = spend_bound(lg, holder, limit, &e[i].key, (int)sizeof(e[i].key),
					      &e[i].c, now_s, &d[af], others, 3, &spent)))
				break;
			cut = u64_sat_add(cut, spent);
		}
		if (cut)
			note_clamped(lg, holder, limit, now_s, cut);
		for (int f = 0; f < 8; f++)
			add |= d[f] != 0;
		move = add || r == UDB_DONE; /* the mark moves past what a bound cut */
		lg->c.key_entries++;
		if (!add)
			lg->c.key_stale++;
		if (!move)
			continue;
		s = lg->st[ST_KMARK_PUT];
		udb_reset(s);
		udb_clear(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, (int64_t)limit_uid);
		udb_bind_blob(s, 4, &e[i].key, sizeof(e[i].key));
		udb_bind_text(s, 5, limit);
		for (int f = 0; f < 8; f++)
			udb_bind_i64(s, 6 + f, (int64_t)mark[f]);
		udb_bind_i64(s, 14, now_s);
		udb_bind_i64(s, 15, (int64_t)e[i].born);
		if ((rc = udb_step_done(s)) || !add)
			continue;
		lg->c.key_counted++;
		s = lg->st[ST_KUSAGE_ADD];
		udb_reset(s);
		udb_clear(s);
		udb_bind_text(s, 1, limit);
		udb_bind_text(s, 2, e[i].key_text ? e[i].key_text : "");
		udb_bind_text(s, 3, holder);
		udb_bind_i64(s, 4, hour);
		for (int f = 0; f < 8; f++)
			udb_bind_i64(s, 5 + f, (int64_t)d[f]);
		rc = udb_step_done(s);
	}
	if (!rc && added) {
		struct udb_stmt *s = lg->st[ST_HSERIES_PUT];

		udb_reset(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, series + (int64_t)added);
		rc = udb_step_done(s);
	}
	if (rc) {
		pr_warn("usage ledger: per-key usage of '%s' (limit '%s') not recorded: %s\n",
			holder, limit, udb_errmsg(lg->db));
		return rc;
	}
	lg->c.key_batches++;
	return 0;
}

void uledger_keys_abort(struct uledger *lg)
{
	if (udb_in_txn(lg->db))
		udb_step_done(lg->st[ST_ROLLBACK]);
	lg->c.key_failures++;
}

int uledger_keys_commit(struct uledger *lg, uint64_t arrival_ns)
{
	int rc = udb_step_done(lg->st[ST_COMMIT]);

	if (rc) {
		pr_warn("usage ledger: per-key batch not committed: %s\n", udb_errmsg(lg->db));
		uledger_keys_abort(lg);
		return rc;
	}
	lat_add(lg, clock_now_ns() - arrival_ns);
	return 0;
}

int uledger_record_keys(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
			const char *limit, int64_t now_s, uint64_t arrival_ns,
			const struct uledger_key_entry *e, size_t n)
{
	struct uledger_counters saved = lg->c;
	int err = uledger_keys_begin(lg);

	if (!err)
		err = uledger_keys_add(lg, holder, ident, limit_uid, limit, now_s, e, n);
	if (err) {
		uledger_keys_abort(lg);
		saved.key_failures = lg->c.key_failures;
		saved.pruned_refused = lg->c.pruned_refused;
		lg->c = saved;
		return err;
	}
	err = uledger_keys_commit(lg, arrival_ns);
	if (err) {
		saved.key_failures = lg->c.key_failures;
		lg->c = saved;
	}
	return err;
}
