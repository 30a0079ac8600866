/* SPDX-License-Identifier: MIT */
/*
 * The usage ledger's PostgreSQL engine (usage_db_pg.c), behind usage_db.h:
 * only usage_db.c includes this.
 */
#ifndef LEASELINE_COORD_USAGE_DB_PG_H
#define LEASELINE_COORD_USAGE_DB_PG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct udb_pg;
struct udb_pg_stmt;

enum udb_pg_type { UDB_PG_NULL, UDB_PG_INT8, UDB_PG_TEXT, UDB_PG_BYTEA };

int udb_pg_open(struct udb_pg **db, const char *uri, bool readonly, char *err, size_t err_len);
void udb_pg_close(struct udb_pg *db);
int udb_pg_exec(struct udb_pg *db, const char *sql);
int udb_pg_prepare(struct udb_pg *db, const char *sql, struct udb_pg_stmt **s);
void udb_pg_finalize(struct udb_pg_stmt *s);
void udb_pg_reset(struct udb_pg_stmt *s);
void udb_pg_clear(struct udb_pg_stmt *s);
void udb_pg_bind(struct udb_pg_stmt *s, int i, enum udb_pg_type t, const void *v, size_t len);
int udb_pg_step(struct udb_pg_stmt *s);
int64_t udb_pg_col_i64(struct udb_pg_stmt *s, int col);
const char *udb_pg_col_text(struct udb_pg_stmt *s, int col);
const void *udb_pg_col_blob(struct udb_pg_stmt *s, int col, size_t *len);
long udb_pg_changes(struct udb_pg *db);
bool udb_pg_in_txn(struct udb_pg *db);
const char *udb_pg_errmsg(struct udb_pg *db);
bool udb_pg_no_table(struct udb_pg *db);

#endif /* LEASELINE_COORD_USAGE_DB_PG_H */
