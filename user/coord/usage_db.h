/* SPDX-License-Identifier: MIT */
/*
 * The usage ledger's database: one small statement interface with two
 * engines behind it, so that what the ledger writes, queries and prunes is
 * one copy of SQL and logic (usage_record.c, usage_query.c,
 * usage_retention.c) whichever the coordinator was given:
 *   SQLite      a file path: one coordinator's own ledger (usage_db.c)
 *   PostgreSQL  a "postgresql://" or "postgres://" URI: the ledger that
 *               replicas share, each leader writing in turn (usage_db_pg.c)
 * The SQL is written once, in the subset both speak: parameters ?1..?N,
 * INSERT .. ON CONFLICT, row values, upsert SETs with qualified columns.
 * What differs (the schema's types, BEGIN, the start of a month) the
 * caller chooses by udb_is_pg.
 *
 * Results: 0 or a negative errno; udb_step: UDB_ROW, UDB_DONE or a negative
 * errno (-EBUSY: a lock or a serialization conflict, nothing written: do it
 * again; -ENOENT: no such table; -ENOSPC, -ENOMEM, -EACCES; -EIO else).
 * A bound text or blob is the caller's until the statement is stepped.
 * Bindings stay across udb_reset until udb_clear.
 */
#ifndef LEASELINE_COORD_USAGE_DB_H
#define LEASELINE_COORD_USAGE_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { UDB_DONE = 0, UDB_ROW = 1 };

#define UDB_MAX_PARAMS 1024 /* parameters of one statement */

struct udb;
struct udb_stmt;

/* Whether where names a PostgreSQL database (else it is an SQLite file). */
bool udb_where_is_pg(const char *where);

/* Open a ledger's database, to write (created if need be; the schema is
 * the caller's) or readonly. A failure: a negative errno, its text in err.
 */
int udb_open(struct udb **db, const char *where, bool readonly, char *err, size_t err_len);
void udb_close(struct udb *db);
bool udb_is_pg(const struct udb *db);

/* A script of statements without parameters. */
int udb_exec(struct udb *db, const char *sql);
int udb_prepare(struct udb *db, const char *sql, struct udb_stmt **s);
void udb_finalize(struct udb_stmt *s);

void udb_reset(struct udb_stmt *s);
void udb_clear(struct udb_stmt *s);
void udb_bind_i64(struct udb_stmt *s, int i, int64_t v);
void udb_bind_text(struct udb_stmt *s, int i, const char *v); /* NULL: a NULL text */
void udb_bind_blob(struct udb_stmt *s, int i, const void *v, size_t len);
int udb_step(struct udb_stmt *s);
/* Step a statement that returns no row, and reset it: 0 or a negative errno. */
int udb_step_done(struct udb_stmt *s);

/* Columns of the row udb_step returned: NULL as 0, NULL or empty. */
int64_t udb_col_i64(struct udb_stmt *s, int col);
const char *udb_col_text(struct udb_stmt *s, int col);
const void *udb_col_blob(struct udb_stmt *s, int col, size_t *len);

/* Rows the last statement changed; whether a transaction is open; the
 * last error's text; whether it was a missing table.
 */
long udb_changes(struct udb *db);
bool udb_in_txn(struct udb *db);
const char *udb_errmsg(struct udb *db);
bool udb_no_table(struct udb *db);

#endif /* LEASELINE_COORD_USAGE_DB_H */
