// SPDX-License-Identifier: MIT
/*
 * The usage ledger's retention (usage_ledger.h, uledger_prune): bounded
 * steps, one transaction each, that tombstone and then prune counters
 * identities silent past the retention, drop marks of closed incarnations,
 * and walk both usage tables in primary key order deleting hours past it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/log.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

/* One stretch of a usage table in primary key order after the cursor: at
 * most *budget rows visited, those of hours before hour_cut deleted. ntext:
 * the text columns before hour (usage: limit, holder; key_usage: limit,
 * key, holder). *at_end: the stretch reached the table's end (the cursor
 * starts over). Returns the rows deleted, or a negative errno.
 */
struct prune_cursor {
	char *col[3];
	size_t len[3];
	int64_t *hour;
	bool *set;
};

static long prune_usage(struct uledger *lg, const char *table, const char *const *cols, int ntext,
			struct prune_cursor *cur, int64_t hour_cut, unsigned *budget, bool *at_end)
{
	char sql[512], where[256], sel[128], del[256];
	struct udb_stmt *q = NULL, *d = NULL;
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
		return -ENOMEM;
	rc = udb_prepare(lg->db, sql, &q);
	if (!rc)
		rc = udb_prepare(lg->db, del, &d);
	if (!rc) {
		udb_bind_i64(q, 1, want);
		if (*cur->set) {
			for (int c = 0; c < ntext; c++)
				udb_bind_text(q, 2 + c, cur->col[c]);
			udb_bind_i64(q, 2 + ntext, *cur->hour);
		}
		while ((rc = udb_step(q)) == UDB_ROW && n < want) {
			for (int c = 0; c < ntext; c++)
				snprintf(rows[n].t[c], sizeof(rows[n].t[c]), "%s",
					 udb_col_text(q, c) ? udb_col_text(q, c) : "");
			rows[n].hour = udb_col_i64(q, ntext);
			n++;
		}
		if (rc > 0)
			rc = 0;
	}
	udb_finalize(q);
	for (unsigned i = 0; !rc && i < n; i++) {
		if (rows[i].hour >= hour_cut)
			continue;
		udb_reset(d);
		for (int c = 0; c < ntext; c++)
			udb_bind_text(d, 1 + c, rows[i].t[c]);
		udb_bind_i64(d, 1 + ntext, rows[i].hour);
		rc = udb_step_done(d);
		deleted++;
	}
	udb_finalize(d);
	if (!rc) {
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
	return rc ? rc : deleted;
}

static long exec_changes(struct uledger *lg, const char *sql, const char *holder, int64_t a,
			 int64_t b, int *rc)
{
	struct udb_stmt *s = NULL;

	*rc = udb_prepare(lg->db, sql, &s);
	if (!*rc) {
		int i = 1;

		if (holder)
			udb_bind_text(s, i++, holder);
		udb_bind_i64(s, i++, a);
		udb_bind_i64(s, i, b);
		*rc = udb_step(s);
		*rc = *rc > 0 ? 0 : *rc;
	}
	udb_finalize(s);
	return *rc ? 0 : udb_changes(lg->db);
}

int uledger_prune(struct uledger *lg, int64_t now_s, uint64_t retention_s, unsigned max_rows)
{
	static const char *const ucols[] = {"limit_name", "holder"};
	static const char *const kcols[] = {"limit_name", "key", "holder"};
	struct uledger_counters saved = lg->c;
	int64_t cutoff, hour_cut;
	int64_t pruned_before = lg->marks_pruned_before;
	unsigned budget = max_rows ? max_rows : 1;
	long work = 0, n;
	bool end_u = false, end_k = false;
	int rc;

	if (!retention_s)
		return 0;
	/* A retention longer than the clock's past keeps everything. */
	if (retention_s > (uint64_t)INT64_MAX ||
	    __builtin_sub_overflow(now_s, (int64_t)retention_s, &cutoff) || cutoff < 0)
		return 0;
	hour_cut = uledger_period_start(ULEDGER_HOUR, cutoff);
	rc = udb_step_done(lg->st[ST_BEGIN]);
	/* 1. Counters identities silent past the retention: tombstoned first
	 * (their batches refused from this commit on), then their marks go in
	 * bounded chunks, a step at a time.
	 */
	if (!rc) {
		struct udb_stmt *s = NULL;
		char holder[96] = "";
		int64_t ident = 0;
		bool busy = false;

		rc = udb_prepare(lg->db,
				 "SELECT holder, ident FROM key_idents WHERE pruned = 1 LIMIT 1", &s);
		if (!rc && udb_step(s) == UDB_ROW) {
			snprintf(holder, sizeof(holder), "%s",
				 udb_col_text(s, 0) ? udb_col_text(s, 0) : "");
			ident = udb_col_i64(s, 1);
			busy = true;
		}
		udb_finalize(s);
		if (!rc && busy) {
			n = exec_changes(
			    lg,
			    "DELETE FROM key_marks WHERE (holder, ident, limit_name, "
			    "limit_uid, key, born) IN (SELECT holder, ident, limit_name, "
			    "limit_uid, key, born FROM key_marks WHERE holder = ?1 AND "
			    "ident = ?2 LIMIT ?3)",
			    holder, ident, budget, &rc);
			lg->c.pruned_marks += (uint64_t)n;
			work += n;
			if (!rc && n)
				exec_changes(lg,
					     "UPDATE holder_series SET n = CASE WHEN n > ?2 THEN "
					     "n - ?2 ELSE 0 END WHERE holder = ?1 AND ?3 = ?3",
					     holder, n, 0, &rc);
			budget -= (unsigned)n < budget ? (unsigned)n : budget - 1;
			if (!rc && (unsigned)n < max_rows) {
				exec_changes(
				    lg,
				    "UPDATE key_idents SET pruned = 2 WHERE holder = ?1 AND "
				    "ident = ?2 AND ?3 = ?3",
				    holder, ident, 0, &rc);
				lg->c.pruned_idents++;
				work++;
			}
		} else if (!rc) {
			n = exec_changes(
			    lg,
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
	if (!rc) {
		n = exec_changes(
		    lg,
		    "DELETE FROM marks WHERE (limit_name, holder, incarnation) IN "
		    "(SELECT limit_name, holder, incarnation FROM marks WHERE current = "
		    "0 AND updated < ?1 LIMIT ?2)",
		    NULL, cutoff, budget, &rc);
		if (!rc && n) {
			if (cutoff > pruned_before)
				pruned_before = cutoff;
			exec_changes(
			    lg,
			    "INSERT INTO meta (k, v) VALUES ('marks_pruned_before', ?1) ON "
			    "CONFLICT (k) DO UPDATE SET v = excluded.v WHERE ?2 = ?2",
			    NULL, pruned_before, 0, &rc);
		}
		lg->c.pruned_marks += (uint64_t)n;
		work += n;
	}
	/* The bounds' rows untouched since the cut (a new one starts as they
	 * would have refilled: usage_ledger.h).
	 */
	if (!rc) {
		n = exec_changes(lg,
				 "DELETE FROM spend WHERE (holder, limit_name, key) IN (SELECT "
				 "holder, limit_name, key FROM spend WHERE t < ?1 LIMIT ?2)",
				 NULL, cutoff, budget, &rc);
		work += n;
	}
	/* 3. Usage rows of hours past the retention: a stretch of each table. */
	if (!rc) {
		struct prune_cursor c = {{lg->cur_limit, lg->cur_holder},
					 {sizeof(lg->cur_limit), sizeof(lg->cur_holder)},
					 &lg->cur_hour,
					 &lg->cur_set};

		n = lg->pass_u ? 0
			       : prune_usage(lg, "usage", ucols, 2, &c, hour_cut, &budget, &end_u);
		if (n < 0)
			rc = (int)n;
		else
			work += n;
		lg->c.pruned_usage += n > 0 ? (uint64_t)n : 0;
	}
	if (!rc) {
		struct prune_cursor c = {
		    {lg->kcur_limit, lg->kcur_key, lg->kcur_holder},
		    {sizeof(lg->kcur_limit), sizeof(lg->kcur_key), sizeof(lg->kcur_holder)},
		    &lg->kcur_hour,
		    &lg->kcur_set};

		if (!budget)
			budget = 1;
		n = lg->pass_k
			? 0
			: prune_usage(lg, "key_usage", kcols, 3, &c, hour_cut, &budget, &end_k);
		if (n < 0)
			rc = (int)n;
		else
			work += n;
		lg->c.pruned_usage += n > 0 ? (uint64_t)n : 0;
	}
	if (!rc)
		rc = udb_step_done(lg->st[ST_COMMIT]);
	if (rc) {
		pr_warn("usage ledger: retention step not committed: %s\n", udb_errmsg(lg->db));
		if (udb_in_txn(lg->db))
			udb_step_done(lg->st[ST_ROLLBACK]);
		lg->c = saved;
		lg->cur_set = lg->kcur_set = false; /* start the scans over */
		lg->pass_u = lg->pass_k = false;
		return rc;
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
