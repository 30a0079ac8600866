// SPDX-License-Identifier: MIT
/*
 * The usage ledger in SQLite (see usage_ledger.h). Its tables, among them:
 *   usage(limit, holder, hour, admitted, denied, fallback, bypass)
 *       one row per UTC hour; days and months are summed at query time
 *   marks(limit, holder, incarnation, seq, admitted.., current)
 *       the totals last accounted per incarnation, the high-water mark
 *   spend(holder, limit, key, level, t), holder_series(holder, n)
 *       the bounds on what an entry adds, and the series per holder
 * Invariant: Σ usage over hours of (limit, holder) = Σ over its
 * incarnations of what each mark accounted, because both change in the same
 * transaction and only by the same difference.
 *
 * This file opens the ledger (schema, statements), records which limits
 * are metered, and keeps its latency, clock and periods. Writing is in
 * usage_record.c, queries in usage_query.c, pruning in usage_retention.c
 * (usage_ledger_int.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "lib/log.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

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
    /* The bounds (usage_ledger.h): per (holder, limit, key) the contract's
     * bucket level and when the row was last touched.
     */
    [ST_SPEND_GET] = "SELECT level, t FROM spend WHERE holder = ?1 AND limit_name = ?2 AND "
		     "key = ?3",
    [ST_SPEND_PUT] = "INSERT INTO spend (holder, limit_name, key, level, t) VALUES (?1, ?2, ?3, "
		     "?4, ?5) ON CONFLICT (holder, limit_name, key) DO UPDATE SET "
		     "level = excluded.level, t = excluded.t",
    /* Series per holder (the quota), counted from key_marks once. */
    [ST_HSERIES_GET] = "SELECT n FROM holder_series WHERE holder = ?1",
    [ST_HSERIES_COUNT] = "SELECT count(*) FROM key_marks WHERE holder = ?1",
    [ST_HSERIES_PUT] = "INSERT INTO holder_series (holder, n) VALUES (?1, ?2) ON CONFLICT "
		       "(holder) DO UPDATE SET n = excluded.n",
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
    "CREATE TABLE IF NOT EXISTS spend ("
    " holder TEXT NOT NULL, limit_name TEXT NOT NULL, key BLOB NOT NULL,"
    " level INTEGER NOT NULL, t INTEGER NOT NULL, PRIMARY KEY (holder, limit_name, key))"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS holder_series (holder TEXT PRIMARY KEY, n INTEGER NOT NULL)"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta VALUES ('schema', '1');";

int uledger_open(struct uledger **out, const char *path)
{
	struct uledger *lg = calloc(1, sizeof(*lg));
	int rc;

	*out = NULL;
	if (!lg)
		return -ENOMEM;
	lg->series_quota = ULEDGER_SERIES_QUOTA;
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
		rc = sqlite3_exec(
		    lg->db,
		    "INSERT OR IGNORE INTO key_idents (holder, ident, last, pruned) "
		    "SELECT holder, ident, MAX(updated), 0 FROM key_marks WHERE NOT "
		    "EXISTS (SELECT 1 FROM meta WHERE k = 'key_idents') GROUP BY holder, "
		    "ident; INSERT OR IGNORE INTO meta VALUES ('key_idents', '1');",
		    NULL, NULL, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_stmt *m = NULL;

		rc = sqlite3_prepare_v2(
		    lg->db, "SELECT v FROM meta WHERE k = 'marks_pruned_before'", -1, &m, NULL);
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

void uledger_set_series_quota(struct uledger *lg, uint32_t series)
{
	lg->series_quota = series;
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

/* Times a period may hold (a billion years either side): no period
 * arithmetic near INT64_MIN or INT64_MAX wraps.
 */
#define PERIOD_T_MAX (INT64_C(1) << 55)

int64_t uledger_period_start(enum uledger_period p, int64_t t)
{
	time_t tt;
	struct tm tm;

	t = t < -PERIOD_T_MAX ? -PERIOD_T_MAX : t > PERIOD_T_MAX ? PERIOD_T_MAX : t;
	tt = (time_t)t;

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
	time_t tt;
	struct tm tm;

	start = start < -PERIOD_T_MAX ? -PERIOD_T_MAX : start > PERIOD_T_MAX ? PERIOD_T_MAX : start;
	tt = (time_t)start;

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
