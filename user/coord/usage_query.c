// SPDX-License-Identifier: MIT
/*
 * Queries of the usage ledger (usage_ledger.h), for `leaseline usage`: each
 * opens the file read-only (WAL: it reads while the coordinator writes),
 * sums the hour rows of usage or key_usage into the periods asked for, or
 * lists one counters identity's key marks.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

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

/* The times a query works with: years 1 to 9999. A --from or --to of
 * "@9223372036854775807", or an hour of a crafted file at the ends of
 * int64, would overflow the period arithmetic (uledger_period_next adds
 * to it) and gmtime_r fails beyond them.
 */
#define QUERY_T_MIN (-62135596800LL) /* 0001-01-01T00:00:00Z */
#define QUERY_T_MAX 253402300799LL   /* 9999-12-31T23:59:59Z */

static int64_t time_clamp(int64_t t)
{
	return t < QUERY_T_MIN ? QUERY_T_MIN : t > QUERY_T_MAX ? QUERY_T_MAX : t;
}

/* A name of row r's column col into buf: a NULL (a crafted file) as "",
 * cut to the buffer, and every control byte shown as '?': the ledger's
 * names come from agents (holders, key texts) or from any file given as
 * --ledger, and what `leaseline usage` prints of them must not drive the
 * terminal (escapes) or break a CSV line.
 */
static void col_name(sqlite3_stmt *s, int col, char *buf, size_t len)
{
	const unsigned char *t = sqlite3_column_text(s, col);
	size_t i = 0;

	for (; t && t[i] && i + 1 < len; i++)
		buf[i] = t[i] < 0x20 || t[i] == 0x7f ? '?' : (char)t[i];
	buf[i] = '\0';
}

/* usum(x): SUM that saturates at INT64_MAX instead of failing with
 * "integer overflow", and takes a figure no writer of this build stores (a
 * negative one, or a REAL SQLite made of an overflowing add) as INT64_MAX:
 * a sum at INT64_MAX is "more than anything", which --reconcile shows as
 * over its contract, never as within it.
 */
static void usum_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	sqlite3_int64 *acc = sqlite3_aggregate_context(ctx, sizeof(*acc)), v;

	(void)argc;
	if (!acc)
		return;
	switch (sqlite3_value_type(argv[0])) {
	case SQLITE_NULL:
		return;
	case SQLITE_INTEGER:
		v = sqlite3_value_int64(argv[0]);
		break;
	default: {
		double d = sqlite3_value_double(argv[0]);

		v = d >= 0 && d < 9.2e18 ? (sqlite3_int64)d : -1;
	}
	}
	if (v < 0 || __builtin_add_overflow(*acc, v, acc))
		*acc = INT64_MAX;
}

static void usum_final(sqlite3_context *ctx)
{
	sqlite3_int64 *acc = sqlite3_aggregate_context(ctx, 0);

	sqlite3_result_int64(ctx, acc ? *acc : 0);
}

/* Open the ledger read-only (usum registered); a lock held by the
 * coordinator is waited for up to 2 s. An SQLite result code.
 */
static int query_open(const char *path, sqlite3 **db)
{
	int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL);

	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(*db, 2000);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(*db, "usum", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
					     NULL, NULL, usum_step, usum_final);
	return rc;
}

/* The SQL of every usage query: the hour rows of usage (per limit) or of
 * key_usage (per_key: per limit and key, ?5 the key or NULL for all)
 * summed, as sums lists, into q's periods and by holder if q->by_holder
 * (else holder ''), ordered by period, limit, key, holder.
 */
static void query_sql(char *sql, size_t len, const struct uledger_query *q, bool per_key,
		      const char *sums)
{
	const char *key = per_key ? ", key" : "", *holder = q->by_holder ? ", holder" : "";

	snprintf(sql, len,
		 "SELECT %s AS p, limit_name%s, %s, %s FROM %s WHERE (?1 IS NULL OR "
		 "limit_name = ?1) AND (?2 IS NULL OR holder = ?2) %sAND hour >= ?3 AND "
		 "(?4 = 0 OR hour < ?4) GROUP BY p, limit_name%s%s ORDER BY p, limit_name%s%s",
		 period_sql(q->period), key, q->by_holder ? "holder" : "''", sums,
		 per_key ? "key_usage" : "usage", per_key ? "AND (?5 IS NULL OR key = ?5) " : "",
		 key, holder, key, holder);
}

/* Open the ledger read-only and prepare q's query (query_sql), bound as ?1
 * limit, ?2 holder, ?3 and ?4 the first seconds of the periods q spans
 * (?4 0: no end). An SQLite result code.
 */
static int query_prepare(const char *path, const struct uledger_query *q, bool per_key,
			 const char *sums, sqlite3 **db, sqlite3_stmt **s)
{
	int64_t from = q->from ? uledger_period_start(q->period, time_clamp(q->from)) : 0;
	int64_t to = q->to ? uledger_period_next(
				 q->period, uledger_period_start(q->period, time_clamp(q->to) - 1))
			   : 0;
	char sql[1200];
	int rc = query_open(path, db);

	query_sql(sql, sizeof(sql), q, per_key, sums);
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
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc = query_prepare(
	    path, q, true,
	    "usum(ap), usum(ab), usum(dp), usum(db), usum(fp), usum(fb), usum(bp), usum(bb)", &db,
	    &s);

	if (rc == SQLITE_OK) {
		if (key)
			sqlite3_bind_text(s, 5, key, -1, SQLITE_STATIC);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			struct uledger_key_row r = {0};

			r.start = time_clamp(sqlite3_column_int64(s, 0));
			r.end = uledger_period_next(q->period, r.start);
			col_name(s, 1, r.limit, sizeof(r.limit));
			col_name(s, 2, r.key, sizeof(r.key));
			col_name(s, 3, r.holder, sizeof(r.holder));
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
	int rc = query_open(path, &db);

	/* BLOBs compare as memcmp: the order a caller sorting by (uid,
	 * memcmp(key), born) merges with. The primary key's (holder, ident)
	 * prefix finds the rows.
	 */
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(
		    db,
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
			col_name(s, 3, r.limit, sizeof(r.limit));
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
	/* A ledger from before per-key usage has no marks. */
	return query_finish(path, db, s, rc, true);
}

int uledger_query(const char *path, const struct uledger_query *q,
		  int (*cb)(const struct uledger_row *r, void *arg), void *arg)
{
	sqlite3_stmt *s = NULL;
	sqlite3 *db = NULL;
	int rc = query_prepare(
	    path, q, false, "usum(admitted), usum(denied), usum(fallback), usum(bypass)", &db, &s);

	if (rc == SQLITE_OK) {
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			struct uledger_row r = {0};

			r.start = time_clamp(sqlite3_column_int64(s, 0));
			r.end = uledger_period_next(q->period, r.start);
			col_name(s, 1, r.limit, sizeof(r.limit));
			col_name(s, 2, r.holder, sizeof(r.holder));
			col_totals(s, 3, &r.t);
			if (cb(&r, arg)) {
				rc = SQLITE_DONE;
				break;
			}
		}
	}
	return query_finish(path, db, s, rc, false);
}
