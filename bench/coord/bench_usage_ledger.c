// SPDX-License-Identifier: MIT
/*
 * The usage ledger (user/coord/usage_ledger.c) on each engine, both on the
 * machine's disk (/var/tmp): a real SQLite file (synchronous FULL: an fsync
 * per commit), then a real PostgreSQL 15 (tests/pg_server.h, fsync and
 * synchronous commits on, over loopback TCP), each figure on a fresh
 * ledger: the arrival-to-commit latency of a report of 4 metered limits,
 * the throughput at the widest report (WIRE_MAX_ENTRIES metered limits),
 * per-key entries of METER batches (1000 keys, many batches a
 * transaction, as the writer groups them: new series, then updates), and (SQLite) the bytes one
 * (limit, holder, hour) row takes in the file. PostgreSQL's figures are
 * also given as a ratio to SQLite's of this run. Prints figures, asserts
 * nothing; exits 1 when a ledger cannot be written at all.
 * docs/reference.md ("How late", "Size") and docs/benchmarks.md quote them.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "coord/usage_db.h"
#include "pg_server.h"

#include "lib/monotonic.h"
#include "coord/usage_ledger.h"
#include "lib/wire.h"

/* 2026-11-30T23:00:00Z: an hour before a day and a month end. */
#define T0 1796079600LL

struct fx {
	char dir[64];
	char path[256];
	struct uledger *lg;
	const char *engine;
};

static struct pg_server pg;
static bool use_pg;

static int fx_open(struct fx *fx)
{
	static int n_db;

	memset(fx, 0, sizeof(*fx));
	fx->engine = use_pg ? "PostgreSQL" : "SQLite";
	snprintf(fx->dir, sizeof(fx->dir), "/var/tmp/ll-bench-uledger-XXXXXX");
	if (!mkdtemp(fx->dir)) {
		perror("bench_usage_ledger: mkdtemp");
		fx->dir[0] = '\0';
		return -1;
	}
	snprintf(fx->path, sizeof(fx->path), "%s/ledger.db", fx->dir);
	if (use_pg) {
		char name[24];

		snprintf(name, sizeof(name), "bench%d", ++n_db);
		if (pg_server_create_db(&pg, name, fx->path, sizeof(fx->path)))
			return -1;
	}
	if (uledger_open(&fx->lg, fx->path)) {
		fprintf(stderr, "bench_usage_ledger: cannot open %s\n", fx->path);
		return -1;
	}
	return 0;
}

static void fx_close(struct fx *fx)
{
	char cmd[128];

	if (fx->lg)
		uledger_close(fx->lg);
	fx->lg = NULL;
	if (!fx->dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	if (system(cmd))
		fprintf(stderr, "bench_usage_ledger: cannot remove %s\n", fx->dir);
}

static struct uledger_totals tot(uint64_t a, uint64_t d, uint64_t f, uint64_t b)
{
	return (struct uledger_totals){.admitted = a, .denied = d, .fallback = f, .bypass = b};
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Arrival to commit, one report of 4 metered limits a transaction. */
static int commit_latency(struct fx *fx, double *fig)
{
	uint64_t p50, p99;
	size_t n;

	for (uint64_t s = 1; s <= 400; s++) {
		struct uledger_entry e[4] = {
		    {.limit = "a"}, {.limit = "b"}, {.limit = "c"}, {.limit = "d"}};

		for (int i = 0; i < 4; i++)
			e[i].t = tot(s * 1000, s * 10, 0, 0);
		if (uledger_record(fx->lg, s % 8 ? "gw-1" : "gw-2", 7, s, T0 + (int64_t)s,
				   clock_now_ns(), e, 4))
			return -1;
	}
	uledger_latency(fx->lg, &p50, &p99, &n);
	printf("usage ledger (%s): arrival to commit over %zu reports (4 limits each, fsync): "
	       "p50 %.3f ms, p99 %.3f ms\n",
	       fx->engine, n, (double)p50 / 1e6, (double)p99 / 1e6);
	*fig = (double)p50 / 1e6;
	return 0;
}

/* Throughput at the widest report: WIRE_MAX_ENTRIES (256) metered limits
 * in each, one transaction and fsync per report, 8 holders.
 */
static int throughput(struct fx *fx, double *fig)
{
	static struct uledger_entry e[WIRE_MAX_ENTRIES];
	static char names[WIRE_MAX_ENTRIES][16];
	uint64_t t0, ns;
	const int reports = 200, n = WIRE_MAX_ENTRIES;

	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "tenant-%03d", i);
		e[i].limit = names[i];
	}
	t0 = clock_now_ns();
	for (int r = 1; r <= reports; r++) {
		char holder[16];

		snprintf(holder, sizeof(holder), "gw-%d", r % 8);
		for (int i = 0; i < n; i++)
			e[i].t = tot((uint64_t)r * 1000 + (uint64_t)i, (uint64_t)r, 0, 0);
		if (uledger_record(fx->lg, holder, 7, (uint64_t)r, T0 + r, clock_now_ns(), e,
				   (size_t)n))
			return -1;
	}
	ns = clock_now_ns() - t0;
	printf("usage ledger (%s): %d reports of %d metered limits in %.3f s: %.0f reports/s, "
	       "%.0f entries/s (fsync each report)\n",
	       fx->engine, reports, n, (double)ns / 1e9, reports / ((double)ns / 1e9),
	       reports * n / ((double)ns / 1e9));
	*fig = reports * n / ((double)ns / 1e9);
	return 0;
}

/* Per-key entries: 8 holders' METER batches of 1000 keys, their totals
 * growing, 8 batches a transaction (the writer groups what is queued). The
 * first round makes the series; then the tables' statistics are taken
 * (what autovacuum's ANALYZE does on PostgreSQL within a minute of the
 * first inserts: without them it scans a holder's series for each chunk
 * of keys), and the rounds after it, updates of those series, are timed.
 */
static int key_round(struct fx *fx, struct uledger_key_entry *e, int n, int holders, int r)
{
	if (uledger_keys_begin(fx->lg))
		return -1;
	for (int h = 0; h < holders; h++) {
		char holder[16];

		snprintf(holder, sizeof(holder), "gw-%d", h);
		for (int i = 0; i < n; i++) {
			e[i].pkts[LL_METER_ADMITTED] = (uint64_t)r * 10;
			e[i].bytes[LL_METER_ADMITTED] = (uint64_t)r * 1000;
		}
		if (uledger_keys_add(fx->lg, holder, 0xfeed, 3, "per-src", T0 + r, e, (size_t)n))
			return -1;
	}
	return uledger_keys_commit(fx->lg, clock_now_ns()) ? -1 : 0;
}

static int key_throughput(struct fx *fx, double *fig)
{
	static struct uledger_key_entry e[1000];
	static char text[1000][20];
	const int holders = 8, rounds = 8, n = 1000;
	uint64_t t0, t_new, ns;
	struct udb *db = NULL;
	char err[256];

	for (int i = 0; i < n; i++) {
		memset(&e[i], 0, sizeof(e[i]));
		e[i].key.family = 4;
		e[i].key.addr[2] = 0xffff0000u;
		e[i].key.addr[3] = (uint32_t)i + 1;
		snprintf(text[i], sizeof(text[i]), "198.18.%d.%d", i / 250, i % 250);
		e[i].key_text = text[i];
		e[i].c = (struct uledger_contract){.rate = 1000, .burst = 100};
	}
	t0 = clock_now_ns();
	if (key_round(fx, e, n, holders, 1))
		return -1;
	t_new = clock_now_ns() - t0;
	if (use_pg && (udb_open(&db, fx->path, false, err, sizeof(err)) ||
		       udb_exec(db, "ANALYZE key_marks; ANALYZE spend; ANALYZE key_usage"))) {
		udb_close(db);
		return -1;
	}
	udb_close(db);
	t0 = clock_now_ns();
	for (int r = 2; r <= rounds; r++)
		if (key_round(fx, e, n, holders, r))
			return -1;
	ns = clock_now_ns() - t0;
	*fig = (double)holders * (rounds - 1) * n / ((double)ns / 1e9);
	printf("usage ledger (%s): per-key entries, %d holders x %d keys, a transaction a round: "
	       "new series %.0f entries/s (the first round); updates %.0f entries/s (%d rounds "
	       "in %.3f s)\n",
	       fx->engine, holders, n, (double)holders * n / ((double)t_new / 1e9), *fig,
	       rounds - 1, (double)ns / 1e9);
	return 0;
}

/* Bytes per (limit, holder, hour) row: a month of 8 holders x 16 limits,
 * realistic magnitudes, the file as it stands after a checkpoint. The rows
 * go in with SQLite directly, into the table the ledger created.
 */
static int row_size(struct fx *fx, double *fig)
{
	const int holders = 8, limits = 16, hours = 24 * 30;
	sqlite3 *db = NULL;
	sqlite3_stmt *s = NULL;
	struct stat st;
	uint64_t seed = 42;
	long rows = 0;
	int rc = -1;

	uledger_close(fx->lg);
	fx->lg = NULL;
	if (sqlite3_open(fx->path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "INSERT INTO usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, &s,
			       NULL) != SQLITE_OK)
		goto out;
	for (int h = 0; h < hours; h++)
		for (int l = 0; l < limits; l++)
			for (int g = 0; g < holders; g++) {
				char lname[32], hname[32];

				snprintf(lname, sizeof(lname), "tenant-%04d", l);
				snprintf(hname, sizeof(hname), "gw-%02d.example", g);
				sqlite3_bind_text(s, 1, lname, -1, SQLITE_TRANSIENT);
				sqlite3_bind_text(s, 2, hname, -1, SQLITE_TRANSIENT);
				sqlite3_bind_int64(s, 3, T0 + 3600LL * h);
				sqlite3_bind_int64(s, 4, (sqlite3_int64)(rnd(&seed) % 100000000));
				sqlite3_bind_int64(s, 5, (sqlite3_int64)(rnd(&seed) % 1000000));
				sqlite3_bind_int64(s, 6, (sqlite3_int64)(rnd(&seed) % 1000));
				sqlite3_bind_int64(s, 7, (sqlite3_int64)(rnd(&seed) % 100));
				if (sqlite3_step(s) != SQLITE_DONE)
					goto out;
				sqlite3_reset(s);
				rows++;
			}
	if (sqlite3_exec(db, "COMMIT; PRAGMA wal_checkpoint(TRUNCATE);", NULL, NULL, NULL) !=
	    SQLITE_OK)
		goto out;
	sqlite3_finalize(s);
	s = NULL;
	sqlite3_close(db);
	db = NULL;
	if (stat(fx->path, &st))
		goto out;
	printf("usage ledger: %ld rows (%d holders x %d limits x %d hours) in %lld bytes: "
	       "%.1f bytes per (limit, holder, hour) row; %.1f KiB per holder and limit a day\n",
	       rows, holders, limits, hours, (long long)st.st_size, (double)st.st_size / rows,
	       (double)st.st_size / rows * 24 / 1024);
	*fig = (double)st.st_size / rows;
	rc = 0;
out:
	if (rc && db)
		fprintf(stderr, "bench_usage_ledger: sqlite: %s\n", sqlite3_errmsg(db));
	sqlite3_finalize(s);
	sqlite3_close(db);
	return rc;
}

int main(void)
{
	static const struct {
		const char *name, *unit;
		int (*run)(struct fx *fx, double *fig);
		bool sqlite_only;
	} figs[] = {
	    {"commit latency p50", "ms", commit_latency, false},
	    {"report throughput", "entries/s", throughput, false},
	    {"per-key throughput", "entries/s", key_throughput, false},
	    {"row size", "bytes", row_size, true},
	};
	double base[sizeof(figs) / sizeof(figs[0])] = {0};
	int failed = 0;

	for (int engine = 0; engine < 2; engine++) {
		if (engine == 1) {
			if (pg_server_start_durable(&pg)) {
				fprintf(stderr, "bench_usage_ledger: no PostgreSQL server\n");
				return 1;
			}
			use_pg = true;
		}
		for (size_t i = 0; i < sizeof(figs) / sizeof(figs[0]); i++) {
			struct fx fx;
			double fig = 0;

			if (use_pg && figs[i].sqlite_only)
				continue;
			if (fx_open(&fx) || figs[i].run(&fx, &fig)) {
				fprintf(stderr, "bench_usage_ledger: %s (%s): failed\n", figs[i].name,
					fx.engine);
				failed = 1;
			} else if (!use_pg) {
				base[i] = fig;
			} else if (base[i] > 0) {
				printf("usage ledger: %s, PostgreSQL / SQLite: %.2f (%.1f / %.1f %s)\n",
				       figs[i].name, fig / base[i], fig, base[i], figs[i].unit);
			}
			fx_close(&fx);
		}
	}
	pg_server_stop(&pg);
	return failed;
}
