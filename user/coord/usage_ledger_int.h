/* SPDX-License-Identifier: MIT */
/*
 * What the usage ledger's files share and nothing else includes:
 * usage_ledger.c (opening the ledger: its schema and statements; which limits
 * are metered; latency; the ledger's clock and periods), usage_record.c
 * (reports and METER batches written), usage_query.c (read-only queries for
 * `leaseline usage`) and usage_retention.c (pruning). The API is
 * usage_ledger.h.
 */
#ifndef LEASELINE_COORD_USAGE_LEDGER_INT_H
#define LEASELINE_COORD_USAGE_LEDGER_INT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#include "coord/usage_db.h"
#include "coord/usage_ledger.h"

#define LAT_SAMPLES 4096 /* arrival-to-commit latencies kept (uledger_latency) */

/* The statements prepared at open (stmt_sql in usage_ledger.c). */
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
	ST_SPEND_GET,
	ST_SPEND_PUT,
	ST_HSERIES_GET,
	ST_HSERIES_COUNT,
	ST_HSERIES_PUT,
	ST_N,
};

/* A handle: one database connection (usage_db.h), its statements,
 * counters and latencies.
 */
struct uledger {
	struct udb *db;
	int64_t marks_pruned_before; /* closed incarnations older than this: pruned */
	/* retention's cursors over the usage tables (primary key order) */
	char cur_limit[64], cur_key[160], cur_holder[96];
	int64_t cur_hour;
	bool cur_set, kcur_set;
	bool pass_u, pass_k; /* this pass has scanned usage, key_usage to the end */
	char kcur_limit[64], kcur_key[160], kcur_holder[96];
	int64_t kcur_hour;
	struct udb_stmt *st[ST_N];
	struct uledger_counters c;
	uint32_t series_quota;			/* uledger_set_series_quota */
	int64_t clamp_logged_s, quota_logged_s; /* log lines: one a minute */
	uint64_t lat[LAT_SAMPLES];
	size_t n_lat, lat_next;
};

/* Four totals (admitted, denied, fallback, bypass) from column first on. */
static inline void col_totals(struct udb_stmt *s, int first, struct uledger_totals *t)
{
	t->admitted = (uint64_t)udb_col_i64(s, first);
	t->denied = (uint64_t)udb_col_i64(s, first + 1);
	t->fallback = (uint64_t)udb_col_i64(s, first + 2);
	t->bypass = (uint64_t)udb_col_i64(s, first + 3);
}

#endif /* LEASELINE_COORD_USAGE_LEDGER_INT_H */
