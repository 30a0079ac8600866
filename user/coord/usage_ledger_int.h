/* SPDX-License-Identifier: MIT */
/*
 * What the usage ledger's files share and nothing else includes:
 * usage_ledger.c (opening the ledger: its schema and statements; which limits
 * are metered; latency; the ledger's clock and periods), usage_record.c
 * (reports written; the bounds), usage_keys.c (METER batches), usage_query.c (read-only queries for
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
	ST_KIDENT_PUT,
	ST_KIDENT_GET,
	ST_SPEND_GET,
	ST_SPEND_PUT,
	ST_HSERIES_GET,
	ST_HSERIES_COUNT,
	ST_HSERIES_PUT,
	ST_N,
};

/* The per-key statements of many rows (usage_keys.c), UL_CHUNK rows each. */
#define UL_CHUNK 64
enum { UL_KS_MARKS, UL_KS_SPENDS, UL_KS_MARK_PUT, UL_KS_SPEND_PUT, UL_KS_USAGE_ADD, UL_KS_N };

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
	struct udb_stmt *kst[UL_KS_N]; /* prepared at their first full chunk */
	struct uledger_counters c;
	uint32_t series_quota;			/* uledger_set_series_quota */
	/* PostgreSQL: series made in this transaction, and since and at the
	 * last ANALYZE (usage_keys.c)
	 */
	uint64_t series_txn, series_new, series_analyzed;
	int64_t clamp_logged_s, quota_logged_s; /* log lines: one a minute */
	uint64_t lat[LAT_SAMPLES];
	size_t n_lat, lat_next;
};

/* An amount as the ledger keeps it: at most INT64_MAX. */
static inline int64_t ul_i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* A spend row (usage_ledger.h, Bounds): the contract's bucket level of a
 * (holder, limit, key) and when it was last moved; found 0: none yet.
 */
struct ul_spend {
	uint64_t level;
	int64_t t;
	bool found;
};

/* Cut what an entry adds to its bounds: *adm (admitted, by the contract's
 * bucket in r) and others[0..n) (by the line rate since r was last moved);
 * r moves to now_s. *cut: what was not counted. (usage_record.c)
 */
void ul_spend_cut(struct ul_spend *r, const struct uledger_contract *c, int64_t now_s,
		  uint64_t *adm, uint64_t *const *others, int n, uint64_t *cut);
/* A bound cut an entry: counted, and said once a minute at most. */
void ul_note_clamped(struct uledger *lg, const char *holder, const char *limit, int64_t now_s,
		     uint64_t cut);
/* Whether a line said at most once a minute may be said now (*last moves). */
bool ul_once_a_minute(int64_t *last, int64_t now_s);
/* An arrival-to-commit latency (uledger_latency). */
void ul_lat_add(struct uledger *lg, uint64_t ns);

/* Four totals (admitted, denied, fallback, bypass) from column first on. */
static inline void col_totals(struct udb_stmt *s, int first, struct uledger_totals *t)
{
	t->admitted = (uint64_t)udb_col_i64(s, first);
	t->denied = (uint64_t)udb_col_i64(s, first + 1);
	t->fallback = (uint64_t)udb_col_i64(s, first + 2);
	t->bypass = (uint64_t)udb_col_i64(s, first + 3);
}

#endif /* LEASELINE_COORD_USAGE_LEDGER_INT_H */
