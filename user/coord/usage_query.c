// SPDX-License-Identifier: MIT
/*
 * Queries of the usage ledger (usage_ledger.h), for `leaseline usage`: each
 * opens the ledger read-only (SQLite's WAL, or PostgreSQL: it reads while
 * the coordinator writes),
 * sums the hour rows of usage or key_usage into the periods asked for, or
 * lists one counters identity's key marks.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

/* The SQL of a period's first second, from an hour row's `hour`: the
 * start of a month is each engine's own.
 */
static const char *period_sql(enum uledger_period p, bool pg)
{
	static const char *const pexpr[] = {
	    [ULEDGER_HOUR] = "hour",
	    [ULEDGER_DAY] = "(hour - hour % 86400)",
	    [ULEDGER_MONTH] =
		"CAST(strftime('%s', hour, 'unixepoch', 'start of month') AS INTEGER)",
	};

	/* (hours beyond years 1 to 9999 as their ends: to_timestamp has a range) */
	if (p == ULEDGER_MONTH && pg)
		return "CAST(extract(epoch FROM date_trunc('month', to_timestamp(LEAST(GREATEST("
		       "hour, -62135596800), 253402300799)) AT TIME ZONE 'UTC')) AS BIGINT)";
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
static void col_name(struct udb_stmt *s, int col, char *buf, size_t len)
{
	const unsigned char *t = (const unsigned char *)udb_col_text(s, col);
	size_t i = 0;

	for (; t && t[i] && i + 1 < len; i++)
		buf[i] = t[i] < 0x20 || t[i] == 0x7f ? '?' : (char)t[i];
	buf[i] = '\0';
}

/* Open the ledger read-only (usum is every engine's: usage_db.h). */
static int query_open(const char *path, struct udb **db)
{
	char err[256], where[256];
	int rc = udb_open(db, path, true, err, sizeof(err));

	if (rc)
		fprintf(stderr, "usage ledger '%s': %s\n", uledger_where(path, where, sizeof(where)),
			err);
	return rc;
}

/* The SQL of every usage query: the hour rows of usage (per limit) or of
 * key_usage (per_key: per limit and key, ?5 the key or NULL for all)
 * summed, as sums lists, into q's periods and by holder if q->by_holder
 * (else holder ''), ordered by period, limit, key, holder.
 */
static void query_sql(char *sql, size_t len, const struct uledger_query *q, bool per_key,
		      const char *sums, bool pg)
{
	const char *key = per_key ? ", key" : "", *holder = q->by_holder ? ", holder" : "";

	snprintf(sql, len,
		 "SELECT %s AS p, limit_name%s, %s, %s FROM %s WHERE (?1 IS NULL OR "
		 "limit_name = ?1) AND (?2 IS NULL OR holder = ?2) %sAND hour >= ?3 AND "
		 "(?4 = 0 OR hour < ?4) GROUP BY p, limit_name%s%s ORDER BY p, limit_name%s%s",
		 period_sql(q->period, pg), key, q->by_holder ? "holder" : "''", sums,
		 per_key ? "key_usage" : "usage", per_key ? "AND (?5 IS NULL OR key = ?5) " : "",
		 key, holder, key, holder);
}

/* Open the ledger read-only and prepare q's query (query_sql), bound as ?1
 * limit, ?2 holder, ?3 and ?4 the first seconds of the periods q spans
 * (?4 0: no end). 0 or a negative errno.
 */
static int query_prepare(const char *path, const struct uledger_query *q, bool per_key,
			 const char *sums, struct udb **db, struct udb_stmt **s)
{
	int64_t from = q->from ? uledger_period_start(q->period, time_clamp(q->from)) : 0;
	int64_t to = q->to ? uledger_period_next(
				 q->period, uledger_period_start(q->period, time_clamp(q->to) - 1))
			   : 0;
	char sql[1200];
	int rc = query_open(path, db);

	if (!rc) {
		query_sql(sql, sizeof(sql), q, per_key, sums, udb_is_pg(*db));
		rc = udb_prepare(*db, sql, s);
	}
	if (!rc) {
		udb_bind_text(*s, 1, q->limit); /* NULL: every limit */
		udb_bind_text(*s, 2, q->holder);
		udb_bind_i64(*s, 3, from);
		udb_bind_i64(*s, 4, to);
	}
	return rc;
}

/* Close a query that ended with rc (UDB_DONE, or a negative errno): 0 or
 * the errno, the error printed. A ledger without the table (no_table_ok)
 * has no rows.
 */
static int query_finish(const char *path, struct udb *db, struct udb_stmt *s, int rc,
			bool no_table_ok)
{
	char where[256];

	if (rc == -ENOENT && no_table_ok && db && udb_no_table(db))
		rc = 0;
	else if (rc < 0 && db)
		fprintf(stderr, "usage ledger '%s': %s\n", uledger_where(path, where, sizeof(where)),
			udb_errmsg(db));
	udb_finalize(s);
	udb_close(db);
	return rc < 0 ? rc : 0;
}

int uledger_query_keys(const char *path, const struct uledger_query *q, const char *key,
		       int (*cb)(const struct uledger_key_row *r, void *arg), void *arg)
{
	struct udb_stmt *s = NULL;
	struct udb *db = NULL;
	int rc = query_prepare(
	    path, q, true,
	    "usum(ap), usum(ab), usum(dp), usum(db), usum(fp), usum(fb), usum(bp), usum(bb)", &db,
	    &s);

	if (!rc) {
		udb_bind_text(s, 5, key);
		while ((rc = udb_step(s)) == UDB_ROW) {
			struct uledger_key_row r = {0};

			r.start = time_clamp(udb_col_i64(s, 0));
			r.end = uledger_period_next(q->period, r.start);
			col_name(s, 1, r.limit, sizeof(r.limit));
			col_name(s, 2, r.key, sizeof(r.key));
			col_name(s, 3, r.holder, sizeof(r.holder));
			for (int c = 0; c < LL_METER_CLASSES; c++) {
				r.pkts[c] = (uint64_t)udb_col_i64(s, 4 + 2 * c);
				r.bytes[c] = (uint64_t)udb_col_i64(s, 5 + 2 * c);
			}
			if (cb(&r, arg)) {
				rc = UDB_DONE;
				udb_reset(s); /* the rest not read */
				break;
			}
		}
	}
	return query_finish(path, db, s, rc, true); /* a ledger from before per-key usage */
}

int uledger_query_marks(const char *path, const char *holder, uint64_t ident,
			int (*cb)(const struct uledger_mark_row *r, void *arg), void *arg)
{
	struct udb_stmt *s = NULL;
	struct udb *db = NULL;
	int rc = query_open(path, &db);

	/* BLOBs compare as memcmp: the order a caller sorting by (uid,
	 * memcmp(key), born) merges with. The primary key's (holder, ident)
	 * prefix finds the rows.
	 */
	if (!rc)
		rc = udb_prepare(db,
				 "SELECT limit_uid, key, born, limit_name, ap, ab, dp, db, fp, "
				 "fb, bp, bb FROM key_marks WHERE holder = ?1 AND ident = ?2 "
				 "ORDER BY limit_uid, key, born",
				 &s);
	if (!rc) {
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		while ((rc = udb_step(s)) == UDB_ROW) {
			struct uledger_mark_row r = {0};
			size_t klen;
			const void *k = udb_col_blob(s, 1, &klen);

			if (klen != sizeof(r.key) || !k)
				continue; /* not a key this build writes */
			r.limit_uid = (uint32_t)udb_col_i64(s, 0);
			memcpy(&r.key, k, sizeof(r.key));
			r.born = (uint64_t)udb_col_i64(s, 2);
			col_name(s, 3, r.limit, sizeof(r.limit));
			for (int c = 0; c < LL_METER_CLASSES; c++) {
				r.pkts[c] = (uint64_t)udb_col_i64(s, 4 + 2 * c);
				r.bytes[c] = (uint64_t)udb_col_i64(s, 5 + 2 * c);
			}
			if (cb(&r, arg)) {
				rc = UDB_DONE;
				udb_reset(s); /* the rest not read */
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
	struct udb_stmt *s = NULL;
	struct udb *db = NULL;
	int rc = query_prepare(
	    path, q, false, "usum(admitted), usum(denied), usum(fallback), usum(bypass)", &db, &s);

	if (!rc) {
		while ((rc = udb_step(s)) == UDB_ROW) {
			struct uledger_row r = {0};

			r.start = time_clamp(udb_col_i64(s, 0));
			r.end = uledger_period_next(q->period, r.start);
			col_name(s, 1, r.limit, sizeof(r.limit));
			col_name(s, 2, r.holder, sizeof(r.holder));
			col_totals(s, 3, &r.t);
			if (cb(&r, arg)) {
				rc = UDB_DONE;
				udb_reset(s); /* the rest not read */
				break;
			}
		}
	}
	return query_finish(path, db, s, rc, false);
}
