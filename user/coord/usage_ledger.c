// SPDX-License-Identifier: MIT
/*
 * The usage ledger in SQLite (see usage_ledger.h). Two tables:
 *   usage(limit, holder, hour, admitted, denied, fallback, bypass)
 *       one row per UTC hour; days and months are summed at query time
 *   marks(limit, holder, incarnation, seq, admitted.., current)
 *       the totals last accounted per incarnation, the high-water mark
 * Invariant: Σ usage over hours of (limit, holder) = Σ over its
 * incarnations of what each mark accounted, because both change in the same
 * transaction and only by the same difference.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "coord/usage_ledger.h"

#define LAT_SAMPLES 4096

enum {
	ST_MARK_GET,
	ST_MARK_CUR,
	ST_MARK_CLOSE,
	ST_MARK_PUT,
	ST_USAGE_ADD,
	ST_SINCE,
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_KMARK_GET,
	ST_KMARK_PUT,
	ST_KUSAGE_ADD,
	ST_KIDENT_PUT,
	ST_KIDENT_GET,
	ST_N,
};

static const char *const stmt_sql[ST_N] = {
    [ST_MARK_GET] = "SELECT seq, admitted, denied, fallback, bypass, current FROM marks "
		    "WHERE limit_name = ?1 AND holder = ?2 AND incarnation = ?3",
    [ST_MARK_CUR] = "SELECT incarnation, admitted, denied, fallback, bypass, ident FROM marks "
		    "WHERE limit_name = ?1 AND holder = ?2 AND current = 1",
    [ST_MARK_CLOSE] = "UPDATE marks SET current = 0 WHERE limit_name = ?1 AND holder = ?2 "
		      "AND current = 1",
    [ST_MARK_PUT] =
	"INSERT INTO marks (limit_name, holder, incarnation, seq, admitted, denied, "
	"fallback, bypass, current, updated, ident) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, "
	"?9, ?10) ON CONFLICT (limit_name, holder, incarnation) DO UPDATE SET "
	"seq = excluded.seq, admitted = excluded.admitted, denied = excluded.denied, "
	"fallback = excluded.fallback, bypass = excluded.bypass, "
	"updated = excluded.updated, ident = excluded.ident",
    [ST_USAGE_ADD] = "INSERT INTO usage (limit_name, holder, hour, admitted, denied, fallback, "
		     "bypass) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (limit_name, holder, "
		     "hour) DO UPDATE SET admitted = admitted + excluded.admitted, "
		     "denied = denied + excluded.denied, fallback = fallback + excluded.fallback, "
		     "bypass = bypass + excluded.bypass",
    [ST_SINCE] = "SELECT since FROM metered WHERE limit_name = ?1",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_KMARK_GET] = "SELECT ap, ab, dp, db, fp, fb, bp, bb FROM key_marks WHERE holder = ?1 AND "
		     "ident = ?2 AND limit_uid = ?3 AND key = ?4 AND limit_name = ?5 AND born = ?6",
    [ST_KMARK_PUT] =
	"INSERT INTO key_marks (holder, ident, limit_uid, key, limit_name, ap, ab, dp, db, fp, fb, "
	"bp, bb, updated, born) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
	"?14, ?15) ON CONFLICT (holder, ident, limit_name, limit_uid, key, born) DO UPDATE SET "
	"ap = excluded.ap, ab = excluded.ab, dp = excluded.dp, db = excluded.db, fp = excluded.fp, "
	"fb = excluded.fb, bp = excluded.bp, bb = excluded.bb, updated = excluded.updated",
    [ST_KUSAGE_ADD] =
	"INSERT INTO key_usage (limit_name, key, holder, hour, ap, ab, dp, db, fp, fb, bp, bb) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT (limit_name, key, "
	"holder, hour) DO UPDATE SET ap = ap + excluded.ap, ab = ab + excluded.ab, "
	"dp = dp + excluded.dp, db = db + excluded.db, fp = fp + excluded.fp, "
	"fb = fb + excluded.fb, bp = bp + excluded.bp, bb = bb + excluded.bb",
    /* One row per (holder, counters identity): when it last reported, and
     * whether retention pruned its marks (1 pruning, 2 pruned): then its
     * batches are refused, never counted again from 0.
     */
    [ST_KIDENT_PUT] = "INSERT INTO key_idents (holder, ident, last, pruned) VALUES (?1, ?2, ?3, 0) "
		      "ON CONFLICT (holder, ident) DO UPDATE SET last = excluded.last",
    [ST_KIDENT_GET] = "SELECT pruned FROM key_idents WHERE holder = ?1 AND ident = ?2",
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS usage ("
    " limit_name TEXT NOT NULL, holder TEXT NOT NULL, hour INTEGER NOT NULL,"
    " admitted INTEGER NOT NULL, denied INTEGER NOT NULL, fallback INTEGER NOT NULL,"
    " bypass INTEGER NOT NULL, PRIMARY KEY (limit_name, holder, hour)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS marks ("
    " limit_name TEXT NOT NULL, holder TEXT NOT NULL, incarnation INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, admitted INTEGER NOT NULL, denied INTEGER NOT NULL,"
    " fallback INTEGER NOT NULL, bypass INTEGER NOT NULL, current INTEGER NOT NULL,"
    " updated INTEGER NOT NULL, PRIMARY KEY (limit_name, holder, incarnation)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS metered (limit_name TEXT PRIMARY KEY, since INTEGER NOT NULL)"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS key_usage ("
    " limit_name TEXT NOT NULL, key TEXT NOT NULL, holder TEXT NOT NULL, hour INTEGER NOT NULL,"
    " ap INTEGER NOT NULL, ab INTEGER NOT NULL, dp INTEGER NOT NULL, db INTEGER NOT NULL,"
    " fp INTEGER NOT NULL, fb INTEGER NOT NULL, bp INTEGER NOT NULL, bb INTEGER NOT NULL,"
    " PRIMARY KEY (limit_name, key, holder, hour)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS key_marks ("
    " holder TEXT NOT NULL, ident INTEGER NOT NULL, limit_uid INTEGER NOT NULL, key BLOB NOT NULL,"
    " limit_name TEXT NOT NULL,"
    " ap INTEGER NOT NULL, ab INTEGER NOT NULL, dp INTEGER NOT NULL, db INTEGER NOT NULL,"
    " fp INTEGER NOT NULL, fb INTEGER NOT NULL, bp INTEGER NOT NULL, bb INTEGER NOT NULL,"
    " updated INTEGER NOT NULL, born INTEGER NOT NULL,"
    " PRIMARY KEY (holder, ident, limit_name, limit_uid, key, born))"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS key_idents ("
    " holder TEXT NOT NULL, ident INTEGER NOT NULL, last INTEGER NOT NULL,"
    " pruned INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (holder, ident)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta VALUES ('schema', '1');";

struct uledger {
	sqlite3 *db;
	int64_t marks_pruned_before; /* closed incarnations older than this: pruned */
	/* retention's cursors over the usage tables (primary key order) */
	char cur_limit[64], cur_key[160], cur_holder[96];
	int64_t cur_hour;
	bool cur_set, kcur_set;
	bool pass_u, pass_k; /* this pass has scanned usage, key_usage to the end */
	char kcur_limit[64], kcur_key[160], kcur_holder[96];
	int64_t kcur_hour;
	sqlite3_stmt *st[ST_N];
	struct uledger_counters c;
	uint64_t lat[LAT_SAMPLES];
	size_t n_lat, lat_next;
};

static int sql_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_READONLY:
	case SQLITE_PERM:
		return -EACCES;
	default:
		return -EIO;
	}
}

int uledger_open(struct uledger **out, const char *path)
{
	struct uledger *lg = calloc(1, sizeof(*lg));
	int rc;

	*out = NULL;
	if (!lg)
		return -ENOMEM;
	rc = sqlite3_open_v2(
	    path, &lg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	/* WAL: a commit is one append and fsync; readers (leaseline usage)
	 * never block the coordinator. FULL: a committed report survives a
	 * power loss too. The WAL is checkpointed every 4096 pages (16 MiB)
	 * and cut back to 1 MiB: per-key batches touch pages all over the
	 * file, and a checkpoint every 256 pages made them fall behind at 8
	 * gateways x 100k keys per 10 s (bench_coord LL_BENCH_METER: 60k
	 * entries/s and 10 s lag at 256, 71k and 3.9 s at 4096, docs/benchmarks.md).
	 */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(lg->db,
				  "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
				  "PRAGMA wal_autocheckpoint = 4096;"
				  "PRAGMA journal_size_limit = 1048576;",
				  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(lg->db, 1000);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(lg->db, schema, NULL, NULL, NULL);
	/* Marks of a ledger written before the counters identity: 0, unknown. */
	if (rc == SQLITE_OK &&
	    sqlite3_exec(lg->db, "SELECT ident FROM marks LIMIT 0", NULL, NULL, NULL) != SQLITE_OK)
		rc = sqlite3_exec(lg->db,
				  "ALTER TABLE marks ADD COLUMN ident INTEGER NOT NULL DEFAULT 0",
				  NULL, NULL, NULL);
	/* key_idents of a ledger written before retention: from the marks, once. */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(lg->db,
				  "INSERT OR IGNORE INTO key_idents (holder, ident, last, pruned) "
				  "SELECT holder, ident, MAX(updated), 0 FROM key_marks WHERE NOT "
				  "EXISTS (SELECT 1 FROM meta WHERE k = 'key_idents') GROUP BY holder, "
				  "ident; INSERT OR IGNORE INTO meta VALUES ('key_idents', '1');",
				  NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_stmt *m = NULL;

		rc = sqlite3_prepare_v2(lg->db, "SELECT v FROM meta WHERE k = 'marks_pruned_before'",
					-1, &m, NULL);
		if (rc == SQLITE_OK && sqlite3_step(m) == SQLITE_ROW)
			lg->marks_pruned_before = sqlite3_column_int64(m, 0);
		sqlite3_finalize(m);
	}
	for (int i = 0; rc == SQLITE_OK && i < ST_N; i++)
		rc = sqlite3_prepare_v3(lg->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&lg->st[i], NULL);
	if (rc != SQLITE_OK) {
		int err = sql_errno(rc);

		pr_warn("usage ledger '%s': %s\n", path,
			lg->db ? sqlite3_errmsg(lg->db) : sqlite3_errstr(rc));
		uledger_close(lg);
		return err ? err : -EIO;
	}
	*out = lg;
	return 0;
}

void uledger_close(struct uledger *lg)
{
	if (!lg)
		return;
	for (int i = 0; i < ST_N; i++)
		sqlite3_finalize(lg->st[i]);
	sqlite3_close(lg->db);
	free(lg);
}

const struct uledger_counters *uledger_counters(const struct uledger *lg)
{
	return &lg->c;
}

static int step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	sqlite3_reset(s);
	return rc == SQLITE_DONE ? 0 : rc;
}

static void bind_key(sqlite3_stmt *s, const char *limit, const char *holder)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	sqlite3_bind_text(s, 1, limit, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, holder, -1, SQLITE_STATIC);
}

static void col_totals(sqlite3_stmt *s, int first, struct uledger_totals *t)
{
	t->admitted = (uint64_t)sqlite3_column_int64(s, first);
	t->denied = (uint64_t)sqlite3_column_int64(s, first + 1);
	t->fallback = (uint64_t)sqlite3_column_int64(s, first + 2);
	t->bypass = (uint64_t)sqlite3_column_int64(s, first + 3);
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
	sqlite3_stmt *s = lg->st[ST_MARK_GET];
	struct uledger_totals base = {0}, mark;
	int r;

	bind_key(s, e->limit, holder);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)inc);
	r = sqlite3_step(s);
	if (r == SQLITE_ROW) {
		uint64_t mseq = (uint64_t)sqlite3_column_int64(s, 0);
		int current = sqlite3_column_int(s, 5);

		col_totals(s, 1, &mark);
		sqlite3_reset(s);
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
	} else if (r == SQLITE_DONE) {
		sqlite3_reset(s);
		s = lg->st[ST_MARK_CUR];
		bind_key(s, e->limit, holder);
		r = sqlite3_step(s);
		if (r == SQLITE_ROW) {
			uint64_t mident = (uint64_t)sqlite3_column_int64(s, 5);
			uint64_t minc = (uint64_t)sqlite3_column_int64(s, 0);

			col_totals(s, 1, &mark);
			sqlite3_reset(s);
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
			if ((r = step_done(lg->st[ST_MARK_CLOSE])))
				goto fail;
		} else if (r == SQLITE_DONE) {
			sqlite3_reset(s);
			/* Never metered for this holder. An agent that started
			 * before the limit was metered holds, in its totals,
			 * what it admitted unmetered: they are the baseline.
			 */
			s = lg->st[ST_SINCE];
			sqlite3_reset(s);
			sqlite3_bind_text(s, 1, e->limit, -1, SQLITE_STATIC);
			r = sqlite3_step(s);
			if (r == SQLITE_ROW &&
			    inc / 1000000000ull < (uint64_t)sqlite3_column_int64(s, 0)) {
				base = e->t;
				lg->c.first++;
			} else if (r != SQLITE_ROW && r != SQLITE_DONE) {
				goto fail;
			}
		} else {
			goto fail;
		}
		sqlite3_reset(s);
	} else {
		goto fail;
	}
	d->admitted = e->t.admitted - base.admitted;
	d->denied = e->t.denied - base.denied;
	d->fallback = e->t.fallback - base.fallback;
	d->bypass = e->t.bypass - base.bypass;
	return 1;
fail:
	sqlite3_reset(s);
	*rc = r;
	return -1;
}

static void bind_totals(sqlite3_stmt *s, int first, const struct uledger_totals *t)
{
	sqlite3_bind_int64(s, first, (sqlite3_int64)t->admitted);
	sqlite3_bind_int64(s, first + 1, (sqlite3_int64)t->denied);
	sqlite3_bind_int64(s, first + 2, (sqlite3_int64)t->fallback);
	sqlite3_bind_int64(s, first + 3, (sqlite3_int64)t->bypass);
}

static int entry_write(struct uledger *lg, const char *holder, uint64_t inc, uint64_t ident,
		       uint64_t seq, int64_t now_s, const struct uledger_entry *e,
		       const struct uledger_totals *d)
{
	sqlite3_stmt *s = lg->st[ST_MARK_PUT];
	int rc;

	bind_key(s, e->limit, holder);
	sqlite3_bind_int64(s, 3, (sqlite3_int64)inc);
	sqlite3_bind_int64(s, 4, (sqlite3_int64)seq);
	bind_totals(s, 5, &e->t);
	sqlite3_bind_int64(s, 9, now_s);
	sqlite3_bind_int64(s, 10, (sqlite3_int64)ident);
	if ((rc = step_done(s)))
		return rc;
	if (!d->admitted && !d->denied && !d->fallback && !d->bypass)
		return 0;
	s = lg->st[ST_USAGE_ADD];
	bind_key(s, e->limit, holder);
	sqlite3_bind_int64(s, 3, uledger_period_start(ULEDGER_HOUR, now_s));
	bind_totals(s, 4, d);
	return step_done(s);
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
	int rc = step_done(lg->st[ST_BEGIN]);

	for (size_t i = 0; !rc && i < n; i++) {
		struct uledger_totals d;
		int r = entry_delta(lg, holder, incarnation, ident, seq, &e[i], &d, &rc);

		if (r > 0)
			rc = entry_write(lg, holder, incarnation, ident, seq, now_s, &e[i], &d);
	}
	if (!rc)
		rc = step_done(lg->st[ST_COMMIT]);
	if (rc) {
		int err = sql_errno(rc);

		pr_warn("usage ledger: report %llu of '%s' not recorded: %s\n",
			(unsigned long long)seq, holder, sqlite3_errmsg(lg->db));
		if (!sqlite3_get_autocommit(lg->db))
			step_done(lg->st[ST_ROLLBACK]);
		lg->c = saved; /* nothing of it happened */
		lg->c.failures++;
		return err ? err : -EIO;
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
	sqlite3_stmt *s = lg->st[ST_KIDENT_GET];
	int r, pruned = 0;

	sqlite3_reset(s);
	sqlite3_bind_text(s, 1, holder, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, (sqlite3_int64)ident);
	r = sqlite3_step(s);
	if (r == SQLITE_ROW)
		pruned = sqlite3_column_int(s, 0) != 0;
	sqlite3_reset(s);
	if (r != SQLITE_ROW && r != SQLITE_DONE)
		return sql_errno(r) ? sql_errno(r) : -EIO;
	return pruned;
}

int uledger_keys_begin(struct uledger *lg)
{
	int rc;

	if (!sqlite3_get_autocommit(lg->db))
		return 0; /* already in one */
	rc = step_done(lg->st[ST_BEGIN]);
	return rc ? (sql_errno(rc) ? sql_errno(rc) : -EIO) : 0;
}

/* Field f of an entry in the columns' order (0..7: ap ab dp db fp fb bp bb). */
static uint64_t key_field(const struct uledger_key_entry *e, int f)
{
	return f & 1 ? e->bytes[f / 2] : e->pkts[f / 2];
}

int uledger_keys_add(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		     const char *limit, int64_t now_s, const struct uledger_key_entry *e, size_t n)
{
	int64_t hour = uledger_period_start(ULEDGER_HOUR, now_s);
	int rc = uledger_ident_pruned(lg, holder, ident);

	if (rc) {
		if (rc > 0) {
			lg->c.pruned_refused++;
			rc = -ESTALE;
		}
		return rc;
	}
	{
		sqlite3_stmt *s = lg->st[ST_KIDENT_PUT];

		sqlite3_reset(s);
		sqlite3_bind_text(s, 1, holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)ident);
		sqlite3_bind_int64(s, 3, now_s);
		rc = step_done(s);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		sqlite3_stmt *s = lg->st[ST_KMARK_GET];
		uint64_t mark[8] = {0}, t[8], d[8];
		bool add = false, move = false;
		int r;

		for (int f = 0; f < 8; f++)
			t[f] = key_field(&e[i], f);
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
		sqlite3_bind_text(s, 1, holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)ident);
		sqlite3_bind_int64(s, 3, (sqlite3_int64)limit_uid);
		sqlite3_bind_blob(s, 4, &e[i].key, sizeof(e[i].key), SQLITE_STATIC);
		sqlite3_bind_text(s, 5, limit, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 6, (sqlite3_int64)e[i].born);
		r = sqlite3_step(s);
		if (r == SQLITE_ROW)
			for (int f = 0; f < 8; f++)
				mark[f] = (uint64_t)sqlite3_column_int64(s, f);
		sqlite3_reset(s);
		if (r != SQLITE_ROW && r != SQLITE_DONE) {
			rc = r;
			break;
		}
		/* Field-wise: what the totals exceed the mark by; the mark
		 * becomes the maximum (a field below it is an older report's).
		 */
		for (int f = 0; f < 8; f++) {
			d[f] = t[f] > mark[f] ? t[f] - mark[f] : 0;
			if (d[f]) {
				add = true;
				mark[f] = t[f];
			}
		}
		move = add || r == SQLITE_DONE;
		lg->c.key_entries++;
		if (!add)
			lg->c.key_stale++;
		if (!move)
			continue;
		s = lg->st[ST_KMARK_PUT];
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
		sqlite3_bind_text(s, 1, holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)ident);
		sqlite3_bind_int64(s, 3, (sqlite3_int64)limit_uid);
		sqlite3_bind_blob(s, 4, &e[i].key, sizeof(e[i].key), SQLITE_STATIC);
		sqlite3_bind_text(s, 5, limit, -1, SQLITE_STATIC);
		for (int f = 0; f < 8; f++)
			sqlite3_bind_int64(s, 6 + f, (sqlite3_int64)mark[f]);
		sqlite3_bind_int64(s, 14, now_s);
		sqlite3_bind_int64(s, 15, (sqlite3_int64)e[i].born);
		if ((rc = step_done(s)) || !add)
			continue;
		lg->c.key_counted++;
		s = lg->st[ST_KUSAGE_ADD];
		sqlite3_reset(s);
		sqlite3_clear_bindings(s);
		sqlite3_bind_text(s, 1, limit, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, e[i].key_text ? e[i].key_text : "", -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 4, hour);
		for (int f = 0; f < 8; f++)
			sqlite3_bind_int64(s, 5 + f, (sqlite3_int64)d[f]);
		rc = step_done(s);
	}
	if (rc) {
		pr_warn("usage ledger: per-key usage of '%s' (limit '%s') not recorded: %s\n",
			holder, limit, sqlite3_errmsg(lg->db));
		return sql_errno(rc) ? sql_errno(rc) : -EIO;
	}
	lg->c.key_batches++;
	return 0;
}

void uledger_keys_abort(struct uledger *lg)
{
	if (!sqlite3_get_autocommit(lg->db))
		step_done(lg->st[ST_ROLLBACK]);
	lg->c.key_failures++;
}

int uledger_keys_commit(struct uledger *lg, uint64_t arrival_ns)
{
	int rc = step_done(lg->st[ST_COMMIT]);

	if (rc) {
		int err = sql_errno(rc);

		pr_warn("usage ledger: per-key batch not committed: %s\n", sqlite3_errmsg(lg->db));
		uledger_keys_abort(lg);
		return err ? err : -EIO;
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

/* The SQL of a period's first second, from an hour row's `hour`. */
static const char *period_sql(enum uledger_period p)
{
	static const char *const pexpr[] = {
	    [ULEDGER_HOUR] = "hour",
	    [ULEDGER_DAY] = "(hour - hour % 86400)",
	    [ULEDGER_MONTH] =
		"CAST(strftime('%s', hour, 'unixepoch', 'start of month') AS INTEGER)",
	};

	return pexpr[p];
}

/* Open the ledger read-only and prepare a usage query, q bound as ?1
 * limit, ?2 holder, ?3 and ?4 the first seconds of the periods q spans
 * (?4 0: no end). An SQLite result code.
 */
static int query_prepare(const char *path, const struct uledger_query *q, const char *sql,
			 sqlite3 **db, sqlite3_stmt **s)
{
	int64_t from = q->from ? uledger_period_start(q->period, q->from) : 0;
	int64_t to =
	    q->to ? uledger_period_next(q->period, uledger_period_start(q->period, q->to - 1)) : 0;
	int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL);

	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(*db, 2000);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(*db, sql, -1, s, NULL);
	if (rc == SQLITE_OK) {
		if (q->limit)
			sqlite3_bind_text(*s, 1, q->limit, -1, SQLITE_STATIC);
		if (q->holder)
			sqlite3_bind_text(*s, 2, q->holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(*s, 3, from);
		sqlite3_bind_int64(*s, 4, to);
	}
	return rc;
}

/* Close a query that ended with rc: 0 or a negative errno, the error
 * printed. A ledger without the table (no_table_ok) has no rows.
 */
static int query_finish(const char *path, sqlite3 *db, sqlite3_stmt *s, int rc, bool no_table_ok)
{
	if (no_table_ok && rc == SQLITE_ERROR && db && strstr(sqlite3_errmsg(db), "no such table"))
		rc = SQLITE_DONE;
	else if (rc != SQLITE_DONE && rc != SQLITE_OK)
		fprintf(stderr, "usage ledger '%s': %s\n", path,
			db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
	sqlite3_finalize(s);
	sqlite3_close(db);
	return rc == SQLITE_DONE || rc == SQLITE_OK ? 0 : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

int uledger_query_keys(const char *path, const struct uledger_query *q, const char *key,
		       int (*cb)(const struct uledger_key_row *r, void *arg), void *arg)
{
	char sql[1200];
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc;

	snprintf(sql, sizeof(sql),
		 "SELECT %s AS p, limit_name, key, %s, SUM(ap), SUM(ab), SUM(dp), SUM(db), "
		 "SUM(fp), SUM(fb), SUM(bp), SUM(bb) FROM key_usage WHERE (?1 IS NULL OR "
		 "limit_name = ?1) AND (?2 IS NULL OR holder = ?2) AND (?5 IS NULL OR key = ?5) "
		 "AND hour >= ?3 AND (?4 = 0 OR hour < ?4) GROUP BY p, limit_name, key%s "
		 "ORDER BY p, limit_name, key%s",
		 period_sql(q->period), q->by_holder ? "holder" : "''", q->by_holder ? ", holder" : "",
		 q->by_holder ? ", holder" : "");
	rc = query_prepare(path, q, sql, &db, &s);
	if (rc == SQLITE_OK) {
		if (key)
			sqlite3_bind_text(s, 5, key, -1, SQLITE_STATIC);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			struct uledger_key_row r = {0};

			r.start = sqlite3_column_int64(s, 0);
			r.end = uledger_period_next(q->period, r.start);
			snprintf(r.limit, sizeof(r.limit), "%s",
				 (const char *)sqlite3_column_text(s, 1));
			snprintf(r.key, sizeof(r.key), "%s",
				 (const char *)sqlite3_column_text(s, 2));
			snprintf(r.holder, sizeof(r.holder), "%s",
				 (const char *)sqlite3_column_text(s, 3));
			for (int c = 0; c < LL_METER_CLASSES; c++) {
				r.pkts[c] = (uint64_t)sqlite3_column_int64(s, 4 + 2 * c);
				r.bytes[c] = (uint64_t)sqlite3_column_int64(s, 5 + 2 * c);
			}
			if (cb(&r, arg)) {
				rc = SQLITE_DONE;
				break;
			}
		}
	}
	return query_finish(path, db, s, rc, true); /* a ledger from before per-key usage */
}

int uledger_query_marks(const char *path, const char *holder, uint64_t ident,
			int (*cb)(const struct uledger_mark_row *r, void *arg), void *arg)
{
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);

	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(db, 2000);
	/* BLOBs compare as memcmp: the order a caller sorting by (uid,
	 * memcmp(key), born) merges with. The primary key's (holder, ident)
	 * prefix finds the rows.
	 */
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db,
					"SELECT limit_uid, key, born, limit_name, ap, ab, dp, db, fp, "
					"fb, bp, bb FROM key_marks WHERE holder = ?1 AND ident = ?2 "
					"ORDER BY limit_uid, key, born",
					-1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, holder, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, (sqlite3_int64)ident);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			struct uledger_mark_row r = {0};
			const void *k = sqlite3_column_blob(s, 1);

			if (sqlite3_column_bytes(s, 1) != (int)sizeof(r.key) || !k)
				continue; /* not a key this build writes */
			r.limit_uid = (uint32_t)sqlite3_column_int64(s, 0);
			memcpy(&r.key, k, sizeof(r.key));
			r.born = (uint64_t)sqlite3_column_int64(s, 2);
			snprintf(r.limit, sizeof(r.limit), "%s",
				 (const char *)sqlite3_column_text(s, 3));
			for (int c = 0; c < LL_METER_CLASSES; c++) {
				r.pkts[c] = (uint64_t)sqlite3_column_int64(s, 4 + 2 * c);
				r.bytes[c] = (uint64_t)sqlite3_column_int64(s, 5 + 2 * c);
			}
			if (cb(&r, arg)) {
				rc = SQLITE_DONE;
				break;
			}
		}
	}
	if (rc == SQLITE_ERROR && db && strstr(sqlite3_errmsg(db), "no such table"))
		rc = SQLITE_DONE; /* a ledger from before per-key usage: no marks */
	else if (rc != SQLITE_DONE && rc != SQLITE_OK)
		fprintf(stderr, "usage ledger '%s': %s\n", path,
			db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
	sqlite3_finalize(s);
	sqlite3_close(db);
	return rc == SQLITE_DONE || rc == SQLITE_OK ? 0 : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

static bool listed(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

int uledger_set_metered(struct uledger *lg, const char *const *limits, size_t n, int64_t now_s)
{
	sqlite3_stmt *q = NULL, *d = NULL, *dm = NULL, *ins = NULL;
	int rc;

	rc = sqlite3_prepare_v2(lg->db,
				"SELECT limit_name FROM metered UNION SELECT limit_name FROM marks",
				-1, &q, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(lg->db, "DELETE FROM marks WHERE limit_name = ?1", -1, &d,
					NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(lg->db, "DELETE FROM metered WHERE limit_name = ?1", -1,
					&dm, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(lg->db,
					"INSERT OR IGNORE INTO metered (limit_name, since) VALUES "
					"(?1, ?2)",
					-1, &ins, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(lg->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	/* Not metered now: marks and start dropped (usage stays). */
	while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(q, 0);

		rc = SQLITE_OK;
		if (listed(limits, n, name))
			continue;
		pr_info("usage ledger: limit '%s' is not metered now: its marks are dropped (its "
			"usage stays)\n",
			name);
		sqlite3_bind_text(d, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(dm, 1, name, -1, SQLITE_TRANSIENT);
		rc = step_done(d);
		if (!rc)
			rc = step_done(dm);
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	/* Metered now and not before: metering starts now. */
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_text(ins, 1, limits[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(ins, 2, now_s);
		rc = step_done(ins);
		if (!rc && sqlite3_changes(lg->db))
			pr_info("usage ledger: limit '%s' metered from now on\n", limits[i]);
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(lg->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK && !sqlite3_get_autocommit(lg->db))
		sqlite3_exec(lg->db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_finalize(q);
	sqlite3_finalize(d);
	sqlite3_finalize(dm);
	sqlite3_finalize(ins);
	return rc == SQLITE_OK ? 0 : sql_errno(rc) ? sql_errno(rc) : -EIO;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void uledger_latency(const struct uledger *lg, uint64_t *p50, uint64_t *p99, size_t *samples)
{
	uint64_t s[LAT_SAMPLES];

	*p50 = *p99 = 0;
	*samples = lg->n_lat;
	if (!lg->n_lat)
		return;
	memcpy(s, lg->lat, lg->n_lat * sizeof(s[0]));
	qsort(s, lg->n_lat, sizeof(s[0]), cmp_u64);
	*p50 = s[(lg->n_lat - 1) / 2];
	*p99 = s[(lg->n_lat - 1) * 99 / 100];
}

int64_t uledger_now(void)
{
	const char *f = getenv("LEASELINE_LEDGER_NOW_FILE");

	if (f && *f) {
		FILE *fp = fopen(f, "r");
		long long v;

		if (fp) {
			int ok = fscanf(fp, "%lld", &v) == 1;

			fclose(fp);
			if (ok)
				return v;
		}
	}
	return (int64_t)time(NULL);
}

int64_t uledger_period_start(enum uledger_period p, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;

	switch (p) {
	case ULEDGER_HOUR:
		return t - ((t % 3600) + 3600) % 3600;
	case ULEDGER_DAY:
		return t - ((t % 86400) + 86400) % 86400;
	default:
		gmtime_r(&tt, &tm);
		tm.tm_mday = 1;
		tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		return (int64_t)timegm(&tm);
	}
}

int64_t uledger_period_next(enum uledger_period p, int64_t start)
{
	time_t tt = (time_t)start;
	struct tm tm;

	switch (p) {
	case ULEDGER_HOUR:
		return start + 3600;
	case ULEDGER_DAY:
		return start + 86400;
	default:
		gmtime_r(&tt, &tm);
		tm.tm_mon++; /* timegm normalises December + 1 */
		tm.tm_mday = 1;
		tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		return (int64_t)timegm(&tm);
	}
}

int uledger_query(const char *path, const struct uledger_query *q,
		  int (*cb)(const struct uledger_row *r, void *arg), void *arg)
{
	char sql[1024];
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc;

	snprintf(sql, sizeof(sql),
		 "SELECT %s AS p, limit_name, %s, SUM(admitted), SUM(denied), SUM(fallback), "
		 "SUM(bypass) FROM usage WHERE (?1 IS NULL OR limit_name = ?1) AND "
		 "(?2 IS NULL OR holder = ?2) AND hour >= ?3 AND (?4 = 0 OR hour < ?4) "
		 "GROUP BY p, limit_name%s ORDER BY p, limit_name%s",
		 period_sql(q->period), q->by_holder ? "holder" : "''", q->by_holder ? ", holder" : "",
		 q->by_holder ? ", holder" : "");
	rc = query_prepare(path, q, sql, &db, &s);
	if (rc == SQLITE_OK) {
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			struct uledger_row r = {0};

			r.start = sqlite3_column_int64(s, 0);
			r.end = uledger_period_next(q->period, r.start);
			snprintf(r.limit, sizeof(r.limit), "%s",
				 (const char *)sqlite3_column_text(s, 1));
			snprintf(r.holder, sizeof(r.holder), "%s",
				 (const char *)sqlite3_column_text(s, 2));
			col_totals(s, 3, &r.t);
			if (cb(&r, arg)) {
				rc = SQLITE_DONE;
				break;
			}
		}
	}
	return query_finish(path, db, s, rc, false);
}

/* ---- retention ---- */

/* One stretch of a usage table in primary key order after the cursor: at
 * most *budget rows visited, those of hours before hour_cut deleted. ntext:
 * the text columns before hour (usage: limit, holder; key_usage: limit,
 * key, holder). *at_end: the stretch reached the table's end (the cursor
 * starts over). Returns the rows deleted, or a sqlite error (negative).
 */
struct prune_cursor {
	char *col[3];
	size_t len[3];
	int64_t *hour;
	bool *set;
};

static long prune_usage(struct uledger *lg, const char *table, const char *const *cols, int ntext,
			struct prune_cursor *cur, int64_t hour_cut, unsigned *budget,
			bool *at_end)
{
	char sql[512], where[256], sel[128], del[256];
	sqlite3_stmt *q = NULL, *d = NULL;
	struct row {
		char t[3][160];
		int64_t hour;
	} *rows = NULL;
	unsigned n = 0, want = *budget ? *budget : 1;
	long deleted = 0;
	int rc;

	*at_end = false;
	snprintf(sel, sizeof(sel), "%s, %s%s%s, hour", cols[0], cols[1], ntext > 2 ? ", " : "",
		 ntext > 2 ? cols[2] : "");
	if (*cur->set)
		snprintf(where, sizeof(where), "WHERE (%s) > (?2, ?3, %s) ", sel,
			 ntext > 2 ? "?4, ?5" : "?4");
	else
		where[0] = '\0';
	snprintf(sql, sizeof(sql), "SELECT %s FROM %s %sORDER BY %s LIMIT ?1", sel, table, where,
		 sel);
	snprintf(del, sizeof(del), "DELETE FROM %s WHERE %s = ?1 AND %s = ?2 AND %s%s%s hour = ?%d",
		 table, cols[0], cols[1], ntext > 2 ? cols[2] : "", ntext > 2 ? " = ?3 AND" : "",
		 "", ntext + 1);
	rows = calloc(want, sizeof(*rows));
	if (!rows)
		return -SQLITE_NOMEM;
	rc = sqlite3_prepare_v2(lg->db, sql, -1, &q, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(lg->db, del, -1, &d, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(q, 1, want);
		if (*cur->set) {
			for (int c = 0; c < ntext; c++)
				sqlite3_bind_text(q, 2 + c, cur->col[c], -1, SQLITE_STATIC);
			sqlite3_bind_int64(q, 2 + ntext, *cur->hour);
		}
		while ((rc = sqlite3_step(q)) == SQLITE_ROW && n < want) {
			for (int c = 0; c < ntext; c++)
				snprintf(rows[n].t[c], sizeof(rows[n].t[c]), "%s",
					 (const char *)sqlite3_column_text(q, c));
			rows[n].hour = sqlite3_column_int64(q, ntext);
			n++;
		}
		if (rc == SQLITE_DONE || rc == SQLITE_ROW)
			rc = SQLITE_OK;
	}
	sqlite3_finalize(q);
	for (unsigned i = 0; rc == SQLITE_OK && i < n; i++) {
		if (rows[i].hour >= hour_cut)
			continue;
		sqlite3_reset(d);
		for (int c = 0; c < ntext; c++)
			sqlite3_bind_text(d, 1 + c, rows[i].t[c], -1, SQLITE_STATIC);
		sqlite3_bind_int64(d, 1 + ntext, rows[i].hour);
		rc = sqlite3_step(d) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(lg->db);
		deleted++;
	}
	sqlite3_finalize(d);
	if (rc == SQLITE_OK) {
		*budget -= n < *budget ? n : *budget;
		if (n < want) {
			*at_end = true;
			*cur->set = false;
		} else {
			for (int c = 0; c < ntext; c++)
				snprintf(cur->col[c], cur->len[c], "%s", rows[n - 1].t[c]);
			*cur->hour = rows[n - 1].hour;
			*cur->set = true;
		}
	}
	free(rows);
	return rc == SQLITE_OK ? deleted : -(long)rc;
}

static long exec_changes(struct uledger *lg, const char *sql, const char *holder, int64_t a,
			 int64_t b, int *rc)
{
	sqlite3_stmt *s = NULL;

	*rc = sqlite3_prepare_v2(lg->db, sql, -1, &s, NULL);
	if (*rc == SQLITE_OK) {
		int i = 1;

		if (holder)
			sqlite3_bind_text(s, i++, holder, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(s, i++, a);
		sqlite3_bind_int64(s, i, b);
		*rc = sqlite3_step(s);
		*rc = *rc == SQLITE_DONE ? SQLITE_OK : *rc;
	}
	sqlite3_finalize(s);
	return *rc == SQLITE_OK ? sqlite3_changes(lg->db) : 0;
}

int uledger_prune(struct uledger *lg, int64_t now_s, uint64_t retention_s, unsigned max_rows)
{
	static const char *const ucols[] = {"limit_name", "holder"};
	static const char *const kcols[] = {"limit_name", "key", "holder"};
	struct uledger_counters saved = lg->c;
	int64_t cutoff = now_s - (int64_t)retention_s;
	int64_t hour_cut = uledger_period_start(ULEDGER_HOUR, cutoff);
	int64_t pruned_before = lg->marks_pruned_before;
	unsigned budget = max_rows ? max_rows : 1;
	long work = 0, n;
	bool end_u = false, end_k = false;
	int rc;

	if (!retention_s)
		return 0;
	rc = step_done(lg->st[ST_BEGIN]);
	/* 1. Counters identities silent past the retention: tombstoned first
	 * (their batches refused from this commit on), then their marks go in
	 * bounded chunks, a step at a time.
	 */
	if (!rc) {
		sqlite3_stmt *s = NULL;
		char holder[96] = "";
		int64_t ident = 0;
		bool busy = false;

		rc = sqlite3_prepare_v2(lg->db,
					"SELECT holder, ident FROM key_idents WHERE pruned = 1 LIMIT 1",
					-1, &s, NULL);
		if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
			snprintf(holder, sizeof(holder), "%s", (const char *)sqlite3_column_text(s, 0));
			ident = sqlite3_column_int64(s, 1);
			busy = true;
		}
		sqlite3_finalize(s);
		if (rc == SQLITE_OK && busy) {
			n = exec_changes(lg,
					 "DELETE FROM key_marks WHERE (holder, ident, limit_name, "
					 "limit_uid, key, born) IN (SELECT holder, ident, limit_name, "
					 "limit_uid, key, born FROM key_marks WHERE holder = ?1 AND "
					 "ident = ?2 LIMIT ?3)",
					 holder, ident, budget, &rc);
			lg->c.pruned_marks += (uint64_t)n;
			work += n;
			budget -= (unsigned)n < budget ? (unsigned)n : budget - 1;
			if (rc == SQLITE_OK && (unsigned)n < max_rows) {
				exec_changes(lg,
					     "UPDATE key_idents SET pruned = 2 WHERE holder = ?1 AND "
					     "ident = ?2 AND ?3 = ?3",
					     holder, ident, 0, &rc);
				lg->c.pruned_idents++;
				work++;
			}
		} else if (rc == SQLITE_OK) {
			n = exec_changes(lg,
					 "UPDATE key_idents SET pruned = 1 WHERE (holder, ident) IN "
					 "(SELECT holder, ident FROM key_idents WHERE pruned = 0 AND "
					 "last < ?1 AND ?2 = ?2 LIMIT 1)",
					 NULL, cutoff, 0, &rc);
			work += n;
		}
	}
	/* 2. Marks of closed incarnations, with the bound under which a report
	 * of an incarnation without a mark is taken for a pruned one.
	 */
	if (rc == SQLITE_OK) {
		n = exec_changes(lg,
				 "DELETE FROM marks WHERE (limit_name, holder, incarnation) IN "
				 "(SELECT limit_name, holder, incarnation FROM marks WHERE current = "
				 "0 AND updated < ?1 LIMIT ?2)",
				 NULL, cutoff, budget, &rc);
		if (rc == SQLITE_OK && n) {
			if (cutoff > pruned_before)
				pruned_before = cutoff;
			exec_changes(lg,
				     "INSERT INTO meta (k, v) VALUES ('marks_pruned_before', ?1) ON "
				     "CONFLICT (k) DO UPDATE SET v = excluded.v WHERE ?2 = ?2",
				     NULL, pruned_before, 0, &rc);
		}
		lg->c.pruned_marks += (uint64_t)n;
		work += n;
	}
	/* 3. Usage rows of hours past the retention: a stretch of each table. */
	if (rc == SQLITE_OK) {
		struct prune_cursor c = {{lg->cur_limit, lg->cur_holder},
					 {sizeof(lg->cur_limit), sizeof(lg->cur_holder)},
					 &lg->cur_hour,
					 &lg->cur_set};

		n = lg->pass_u ? 0 : prune_usage(lg, "usage", ucols, 2, &c, hour_cut, &budget, &end_u);
		if (n < 0)
			rc = (int)-n;
		else
			work += n;
		lg->c.pruned_usage += n > 0 ? (uint64_t)n : 0;
	}
	if (rc == SQLITE_OK) {
		struct prune_cursor c = {{lg->kcur_limit, lg->kcur_key, lg->kcur_holder},
					 {sizeof(lg->kcur_limit), sizeof(lg->kcur_key),
					  sizeof(lg->kcur_holder)},
					 &lg->kcur_hour,
					 &lg->kcur_set};

		if (!budget)
			budget = 1;
		n = lg->pass_k ? 0
			       : prune_usage(lg, "key_usage", kcols, 3, &c, hour_cut, &budget, &end_k);
		if (n < 0)
			rc = (int)-n;
		else
			work += n;
		lg->c.pruned_usage += n > 0 ? (uint64_t)n : 0;
	}
	if (rc == SQLITE_OK)
		rc = step_done(lg->st[ST_COMMIT]);
	if (rc) {
		int err = sql_errno(rc);

		pr_warn("usage ledger: retention step not committed: %s\n", sqlite3_errmsg(lg->db));
		if (!sqlite3_get_autocommit(lg->db))
			step_done(lg->st[ST_ROLLBACK]);
		lg->c = saved;
		lg->cur_set = lg->kcur_set = false; /* start the scans over */
		lg->pass_u = lg->pass_k = false;
		return err ? err : -EIO;
	}
	lg->marks_pruned_before = pruned_before;
	lg->pass_u |= end_u;
	lg->pass_k |= end_k;
	/* Done for now: both tables scanned to their end this pass, and no
	 * mark or identity left to prune. Else the caller steps again.
	 */
	if (!work && lg->pass_u && lg->pass_k) {
		lg->pass_u = lg->pass_k = false;
		return 0;
	}
	return work > 0 ? (int)(work > INT32_MAX ? INT32_MAX : work) : 1;
}
