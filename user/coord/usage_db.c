// SPDX-License-Identifier: MIT
/*
 * The usage ledger's database (usage_db.h): the SQLite engine here, and
 * each call handed to PostgreSQL's (usage_db_pg.c) when the handle is one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "lib/config.h"
#include "coord/usage_db.h"
#include "coord/usage_db_pg.h"

struct udb {
	sqlite3 *lite;
	struct udb_pg *pg;
};

struct udb_stmt {
	struct udb *db;
	sqlite3_stmt *lite;
	struct udb_pg_stmt *pg;
};

bool udb_where_is_pg(const char *where)
{
	return cfg_ledger_is_pg(where);
}

/* An SQLite result code as 0 or a negative errno. */
static int lite_errno(int rc)
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

/* usum(x): SUM that saturates at INT64_MAX instead of failing with
 * "integer overflow", and takes a figure no writer of this build stores (a
 * negative one, or a REAL SQLite made of an overflowing add) as INT64_MAX:
 * a sum at INT64_MAX is "more than anything", which --reconcile shows as
 * over its contract, never as within it. PostgreSQL's is in its schema
 * (usage_ledger.c).
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

int udb_open(struct udb **out, const char *where, bool readonly, char *err, size_t err_len)
{
	struct udb *db = calloc(1, sizeof(*db));
	int rc;

	*out = NULL;
	if (err_len)
		err[0] = '\0';
	if (!db) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	if (udb_where_is_pg(where)) {
		rc = udb_pg_open(&db->pg, where, readonly, err, err_len);
		if (rc) {
			free(db);
			return rc;
		}
		*out = db;
		return 0;
	}
	rc = sqlite3_open_v2(where, &db->lite,
			     readonly ? SQLITE_OPEN_READONLY
				      : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
					    SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(db->lite, "usum", 1,
					     SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, NULL,
					     usum_step, usum_final);
	if (rc == SQLITE_OK) {
		/* A lock held by the other side is waited for (a reader up to 2 s). */
		sqlite3_busy_timeout(db->lite, readonly ? 2000 : 1000);
		*out = db;
		return 0;
	}
	snprintf(err, err_len, "%s", db->lite ? sqlite3_errmsg(db->lite) : sqlite3_errstr(rc));
	sqlite3_close(db->lite);
	free(db);
	rc = lite_errno(rc);
	return rc ? rc : -EIO;
}

void udb_close(struct udb *db)
{
	if (!db)
		return;
	if (db->pg)
		udb_pg_close(db->pg);
	else
		sqlite3_close(db->lite);
	free(db);
}

bool udb_is_pg(const struct udb *db)
{
	return db->pg != NULL;
}

int udb_exec(struct udb *db, const char *sql)
{
	int rc;

	if (db->pg)
		return udb_pg_exec(db->pg, sql);
	rc = lite_errno(sqlite3_exec(db->lite, sql, NULL, NULL, NULL));
	return rc;
}

int udb_prepare(struct udb *db, const char *sql, struct udb_stmt **out)
{
	struct udb_stmt *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->db = db;
	if (db->pg)
		rc = udb_pg_prepare(db->pg, sql, &s->pg);
	else
		rc = lite_errno(sqlite3_prepare_v3(db->lite, sql, -1, SQLITE_PREPARE_PERSISTENT,
						   &s->lite, NULL));
	if (rc == -EIO && !db->pg && udb_no_table(db))
		rc = -ENOENT;
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void udb_finalize(struct udb_stmt *s)
{
	if (!s)
		return;
	if (s->pg)
		udb_pg_finalize(s->pg);
	else
		sqlite3_finalize(s->lite);
	free(s);
}

void udb_reset(struct udb_stmt *s)
{
	if (s->pg)
		udb_pg_reset(s->pg);
	else
		sqlite3_reset(s->lite);
}

void udb_clear(struct udb_stmt *s)
{
	if (s->pg)
		udb_pg_clear(s->pg);
	else
		sqlite3_clear_bindings(s->lite);
}

void udb_bind_i64(struct udb_stmt *s, int i, int64_t v)
{
	if (s->pg)
		udb_pg_bind(s->pg, i, UDB_PG_INT8, &v, sizeof(v));
	else
		sqlite3_bind_int64(s->lite, i, v);
}

void udb_bind_text(struct udb_stmt *s, int i, const char *v)
{
	if (s->pg)
		udb_pg_bind(s->pg, i, UDB_PG_TEXT, v, v ? strlen(v) : 0);
	else if (v)
		sqlite3_bind_text(s->lite, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s->lite, i);
}

void udb_bind_blob(struct udb_stmt *s, int i, const void *v, size_t len)
{
	if (s->pg)
		udb_pg_bind(s->pg, i, UDB_PG_BYTEA, v, len);
	else if (len)
		sqlite3_bind_blob(s->lite, i, v, (int)len, SQLITE_STATIC);
	else
		sqlite3_bind_zeroblob(s->lite, i, 0);
}

int udb_step(struct udb_stmt *s)
{
	int rc;

	if (s->pg)
		return udb_pg_step(s->pg);
	rc = sqlite3_step(s->lite);
	if (rc == SQLITE_ROW)
		return UDB_ROW;
	if (rc == SQLITE_DONE)
		return UDB_DONE;
	rc = lite_errno(rc);
	if (!rc)
		rc = -EIO;
	if (rc == -EIO && udb_no_table(s->db))
		rc = -ENOENT;
	return rc;
}

int udb_step_done(struct udb_stmt *s)
{
	int rc = udb_step(s);

	udb_reset(s);
	return rc == UDB_ROW ? 0 : rc;
}

int64_t udb_col_i64(struct udb_stmt *s, int col)
{
	return s->pg ? udb_pg_col_i64(s->pg, col) : sqlite3_column_int64(s->lite, col);
}

const char *udb_col_text(struct udb_stmt *s, int col)
{
	return s->pg ? udb_pg_col_text(s->pg, col)
		     : (const char *)sqlite3_column_text(s->lite, col);
}

const void *udb_col_blob(struct udb_stmt *s, int col, size_t *len)
{
	const void *v;

	if (s->pg)
		return udb_pg_col_blob(s->pg, col, len);
	v = sqlite3_column_blob(s->lite, col);
	*len = (size_t)sqlite3_column_bytes(s->lite, col);
	return v;
}

long udb_changes(struct udb *db)
{
	return db->pg ? udb_pg_changes(db->pg) : sqlite3_changes(db->lite);
}

bool udb_in_txn(struct udb *db)
{
	return db->pg ? udb_pg_in_txn(db->pg) : !sqlite3_get_autocommit(db->lite);
}

const char *udb_errmsg(struct udb *db)
{
	return db->pg ? udb_pg_errmsg(db->pg) : sqlite3_errmsg(db->lite);
}

bool udb_no_table(struct udb *db)
{
	if (db->pg)
		return udb_pg_no_table(db->pg);
	return (sqlite3_errcode(db->lite) & 0xff) == SQLITE_ERROR &&
	       strstr(sqlite3_errmsg(db->lite), "no such table");
}
