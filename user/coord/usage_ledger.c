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

#include "lib/log.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"
#include "lib/util.h"

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
		     "hour) DO UPDATE SET admitted = usage.admitted + excluded.admitted, "
		     "denied = usage.denied + excluded.denied, "
		     "fallback = usage.fallback + excluded.fallback, "
		     "bypass = usage.bypass + excluded.bypass",
    [ST_SINCE] = "SELECT since FROM metered WHERE limit_name = ?1",
    [ST_BEGIN] = "BEGIN IMMEDIATE", /* PostgreSQL: begin_pg */
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
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

/* PostgreSQL's: the same tables (int8 for INTEGER, bytea for BLOB; names
 * compared byte by byte, as SQLite does, so retention's cursor and
 * --ledger's order are one order) and usum, created once under a lock so
 * that replicas starting together do not race. A new database: no
 * migrations.
 */
static const char schema_pg[] =
    "BEGIN;"
    "SELECT pg_advisory_xact_lock(7456398101);"
    "CREATE TABLE IF NOT EXISTS usage ("
    " limit_name TEXT COLLATE \"C\" NOT NULL, holder TEXT COLLATE \"C\" NOT NULL,"
    " hour BIGINT NOT NULL, admitted BIGINT NOT NULL, denied BIGINT NOT NULL,"
    " fallback BIGINT NOT NULL, bypass BIGINT NOT NULL, PRIMARY KEY (limit_name, holder, hour));"
    "CREATE TABLE IF NOT EXISTS marks ("
    " limit_name TEXT COLLATE \"C\" NOT NULL, holder TEXT COLLATE \"C\" NOT NULL,"
    " incarnation BIGINT NOT NULL, seq BIGINT NOT NULL, admitted BIGINT NOT NULL,"
    " denied BIGINT NOT NULL, fallback BIGINT NOT NULL, bypass BIGINT NOT NULL,"
    " current BIGINT NOT NULL, updated BIGINT NOT NULL, ident BIGINT NOT NULL DEFAULT 0,"
    " PRIMARY KEY (limit_name, holder, incarnation));"
    "CREATE TABLE IF NOT EXISTS metered (limit_name TEXT COLLATE \"C\" PRIMARY KEY,"
    " since BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS key_usage ("
    " limit_name TEXT COLLATE \"C\" NOT NULL, key TEXT COLLATE \"C\" NOT NULL,"
    " holder TEXT COLLATE \"C\" NOT NULL, hour BIGINT NOT NULL,"
    " ap BIGINT NOT NULL, ab BIGINT NOT NULL, dp BIGINT NOT NULL, db BIGINT NOT NULL,"
    " fp BIGINT NOT NULL, fb BIGINT NOT NULL, bp BIGINT NOT NULL, bb BIGINT NOT NULL,"
    " PRIMARY KEY (limit_name, key, holder, hour));"
    "CREATE TABLE IF NOT EXISTS key_marks ("
    " holder TEXT COLLATE \"C\" NOT NULL, ident BIGINT NOT NULL, limit_uid BIGINT NOT NULL,"
    " key BYTEA NOT NULL, limit_name TEXT COLLATE \"C\" NOT NULL,"
    " ap BIGINT NOT NULL, ab BIGINT NOT NULL, dp BIGINT NOT NULL, db BIGINT NOT NULL,"
    " fp BIGINT NOT NULL, fb BIGINT NOT NULL, bp BIGINT NOT NULL, bb BIGINT NOT NULL,"
    " updated BIGINT NOT NULL, born BIGINT NOT NULL,"
    " PRIMARY KEY (holder, ident, limit_name, limit_uid, key, born));"
    "CREATE TABLE IF NOT EXISTS key_idents ("
    " holder TEXT COLLATE \"C\" NOT NULL, ident BIGINT NOT NULL, last BIGINT NOT NULL,"
    " pruned BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (holder, ident));"
    "CREATE TABLE IF NOT EXISTS spend ("
    " holder TEXT COLLATE \"C\" NOT NULL, limit_name TEXT COLLATE \"C\" NOT NULL,"
    " key BYTEA NOT NULL, level BIGINT NOT NULL, t BIGINT NOT NULL,"
    " PRIMARY KEY (holder, limit_name, key));"
    "CREATE TABLE IF NOT EXISTS holder_series (holder TEXT COLLATE \"C\" PRIMARY KEY,"
    " n BIGINT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS meta (k TEXT COLLATE \"C\" PRIMARY KEY, v TEXT);"
    /* usum (usage_db.c): a SUM of int8 that saturates at INT64_MAX */
    "CREATE OR REPLACE FUNCTION usum_step(acc BIGINT, v BIGINT) RETURNS BIGINT"
    " LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN v IS NULL THEN acc"
    " WHEN v < 0 OR acc > 9223372036854775807 - v THEN 9223372036854775807"
    " ELSE acc + v END $$;"
    "CREATE OR REPLACE AGGREGATE usum(BIGINT) (SFUNC = usum_step, STYPE = BIGINT,"
    " INITCOND = '0');"
    "INSERT INTO meta VALUES ('schema', '1') ON CONFLICT DO NOTHING;"
    "INSERT INTO meta VALUES ('key_idents', '1') ON CONFLICT DO NOTHING;"
    "COMMIT;";

/* Two replicas' writers that overlap (a deposed leader's last commit, the
 * new one's first) cannot both read one mark and move it: one of them
 * fails with a serialization error, nothing of it written (usage_db_pg.c).
 */
static const char begin_pg[] = "BEGIN ISOLATION LEVEL SERIALIZABLE";

/* SQLite's file: WAL (a commit is one append and fsync; readers, leaseline
 * usage, never block the coordinator) and FULL (a committed report
 * survives a power loss too). The WAL is checkpointed every 4096 pages (16
 * MiB) and cut back to 1 MiB: per-key batches touch pages all over the
 * file, and a checkpoint every 256 pages made them fall behind at 8
 * gateways x 100k keys per 10 s (bench_coord LL_BENCH_METER: 60k entries/s
 * and 10 s lag at 256, 71k and 3.9 s at 4096, docs/benchmarks.md). Then
 * the schema, and the migrations of files older than it.
 */
static int open_sqlite(struct uledger *lg)
{
	int rc = udb_exec(lg->db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
				  "PRAGMA wal_autocheckpoint = 4096;"
				  "PRAGMA journal_size_limit = 1048576;");

	if (!rc)
		rc = udb_exec(lg->db, schema);
	/* Marks of a ledger written before the counters identity: 0, unknown. */
	if (!rc && udb_exec(lg->db, "SELECT ident FROM marks LIMIT 0"))
		rc = udb_exec(lg->db, "ALTER TABLE marks ADD COLUMN ident INTEGER NOT NULL DEFAULT 0");
	/* key_idents of a ledger written before retention: from the marks, once. */
	if (!rc)
		rc = udb_exec(lg->db,
			      "INSERT OR IGNORE INTO key_idents (holder, ident, last, pruned) "
			      "SELECT holder, ident, MAX(updated), 0 FROM key_marks WHERE NOT "
			      "EXISTS (SELECT 1 FROM meta WHERE k = 'key_idents') GROUP BY holder, "
			      "ident; INSERT OR IGNORE INTO meta VALUES ('key_idents', '1');");
	return rc;
}

const char *uledger_where(const char *where, char *buf, size_t len)
{
	char *auth, *end, *at, *colon, *pw;

	snprintf(buf, len, "%s", where);
	if (!udb_where_is_pg(buf))
		return buf;
	auth = strstr(buf, "://") + 3;
	end = auth + strcspn(auth, "/?");
	at = memrchr(auth, '@', (size_t)(end - auth));
	colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon) /* user:PASSWORD@host: the password goes */
		memmove(colon, at, strlen(at) + 1);
	for (pw = buf; (pw = strstr(pw, "password=")); pw += 9)
		if (pw > buf && (pw[-1] == '?' || pw[-1] == '&'))
			memmove(pw + 9, pw + 9 + strcspn(pw + 9, "&"),
				strlen(pw + 9 + strcspn(pw + 9, "&")) + 1);
	return buf;
}

int uledger_open(struct uledger **out, const char *path)
{
	struct uledger *lg = calloc(1, sizeof(*lg));
	struct udb_stmt *m = NULL;
	char err[256], where[256];
	int rc;

	*out = NULL;
	if (!lg)
		return -ENOMEM;
	lg->series_quota = ULEDGER_SERIES_QUOTA;
	rc = udb_open(&lg->db, path, false, err, sizeof(err));
	if (rc) {
		pr_warn("usage ledger '%s': %s\n", uledger_where(path, where, sizeof(where)), err);
		free(lg);
		return rc;
	}
	rc = udb_is_pg(lg->db) ? udb_exec(lg->db, schema_pg) : open_sqlite(lg);
	if (!rc)
		rc = udb_prepare(lg->db, "SELECT v FROM meta WHERE k = 'marks_pruned_before'", &m);
	if (!rc && udb_step(m) == UDB_ROW)
		lg->marks_pruned_before = udb_col_i64(m, 0);
	udb_finalize(m);
	for (int i = 0; !rc && i < ST_N; i++)
		rc = udb_prepare(lg->db,
				 i == ST_BEGIN && udb_is_pg(lg->db) ? begin_pg : stmt_sql[i],
				 &lg->st[i]);
	if (rc) {
		pr_warn("usage ledger '%s': %s\n", uledger_where(path, where, sizeof(where)), udb_errmsg(lg->db));
		uledger_close(lg);
		return rc;
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
		udb_finalize(lg->st[i]);
	for (int i = 0; i < UL_KS_N; i++)
		udb_finalize(lg->kst[i]);
	udb_close(lg->db);
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

static int set_metered_once(struct uledger *lg, const char *const *limits, size_t n,
			    int64_t now_s)
{
	struct udb_stmt *q = NULL, *d = NULL, *dm = NULL, *ins = NULL;
	int rc = udb_prepare(lg->db, "SELECT limit_name FROM metered UNION SELECT limit_name FROM marks",
			     &q);

	if (!rc)
		rc = udb_prepare(lg->db, "DELETE FROM marks WHERE limit_name = ?1", &d);
	if (!rc)
		rc = udb_prepare(lg->db, "DELETE FROM metered WHERE limit_name = ?1", &dm);
	if (!rc)
		rc = udb_prepare(lg->db,
				 "INSERT INTO metered (limit_name, since) VALUES (?1, ?2) "
				 "ON CONFLICT DO NOTHING",
				 &ins);
	if (!rc)
		rc = udb_step_done(lg->st[ST_BEGIN]);
	/* Not metered now: marks and start dropped (usage stays). */
	while (!rc && (rc = udb_step(q)) == UDB_ROW) {
		const char *name = udb_col_text(q, 0);

		rc = 0;
		if (!name || listed(limits, n, name))
			continue;
		pr_info("usage ledger: limit '%s' is not metered now: its marks are dropped (its "
			"usage stays)\n",
			name);
		udb_bind_text(d, 1, name);
		udb_bind_text(dm, 1, name);
		rc = udb_step_done(d);
		if (!rc)
			rc = udb_step_done(dm);
	}
	/* Metered now and not before: metering starts now. */
	for (size_t i = 0; !rc && i < n; i++) {
		udb_bind_text(ins, 1, limits[i]);
		udb_bind_i64(ins, 2, now_s);
		rc = udb_step_done(ins);
		if (!rc && udb_changes(lg->db))
			pr_info("usage ledger: limit '%s' metered from now on\n", limits[i]);
	}
	if (!rc)
		rc = udb_step_done(lg->st[ST_COMMIT]);
	if (rc && udb_in_txn(lg->db))
		udb_step_done(lg->st[ST_ROLLBACK]);
	udb_finalize(q);
	udb_finalize(d);
	udb_finalize(dm);
	udb_finalize(ins);
	return rc;
}

/* Replicas starting together both record which limits are metered: on a
 * shared ledger one of them may lose the race (-EBUSY, nothing written)
 * and records it again, up to a second.
 */
int uledger_set_metered(struct uledger *lg, const char *const *limits, size_t n, int64_t now_s)
{
	int rc = set_metered_once(lg, limits, n, now_s);

	for (int i = 0; rc == -EBUSY && i < 20; i++) {
		struct timespec ts = {.tv_nsec = (10 + 5 * i) * 1000000L};

		nanosleep(&ts, NULL);
		rc = set_metered_once(lg, limits, n, now_s);
	}
	return rc;
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
	sort_n(s, lg->n_lat, sizeof(s[0]), cmp_u64);
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
