// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: what `leaseline usage --ledger FILE` reads. A crafted
 * SQLite file is hard to mutate usefully, so the ledger is written with the
 * real writer API (usage_ledger.h) from fuzzed operations, names of any
 * bytes and integers that lean to the extremes (0, 2^63 - 1, 2^63,
 * 2^64 - 1, times far before 1970 and after 9999), then read by the real
 * command (usage_run: the queries of usage_query.c and the text, CSV and
 * JSON printers, per limit or per key, plain or --reconcile).
 *
 * What a crafted file can hold that the writer never writes is added by
 * hand: tables made without NOT NULL before the writer opens the file, and
 * rows of any values (NULL, text in integer columns, blobs, reals, hours
 * at the ends of int64) inserted beside the writer's.
 *
 * The input: byte 0 picks the query (period, format, --keys, --reconcile,
 * a --from/--to); then operations, each one byte and its fields:
 *   0 a report (uledger_record_ident), 1 a METER batch (uledger_record_keys),
 *   2 which limits are metered (uledger_set_metered), 3 a retention step
 *   (uledger_prune, with a now and a retention as the coordinator passes:
 *   time() and coord.yaml's 1d to 36600d), 4 a crafted row of usage or
 *   key_usage (bit 0x08 of byte 0: the tables without NOT NULL).
 * Whatever the bytes: no crash, leak or UB (the sanitizers); what the
 * command prints on stdout holds no control byte but newlines (a name
 * full of terminal escapes must not reach the terminal); JSON parses.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <json-c/json.h>
#include <sqlite3.h>

#include "fuzz/fuzz_tmp.h"
#include "lib/config.h"
#include "cmd/usage_cmd.h"
#include "coord/usage_ledger.h"

#define MAX_OPS	    12
#define MAX_ENTRIES 4
#define T0	    1764979200 /* 2025-12-06: the ledger's hours near today */

struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t rd_u8(struct rd *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

static uint64_t rd_u64(struct rd *r)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | rd_u8(r);
	return v;
}

/* A count or total: small, an extreme, or any 64 bits. */
static uint64_t rd_int(struct rd *r)
{
	uint8_t k = rd_u8(r);

	switch (k & 7) {
	case 0:
		return k >> 3;
	case 1:
		return INT64_MAX - (k >> 3);
	case 2:
		return (uint64_t)INT64_MAX + 1 + (k >> 3);
	case 3:
		return UINT64_MAX - (k >> 3);
	case 4:
		return (uint64_t)(k >> 3) << 40;
	default:
		return rd_u64(r);
	}
}

/* A time the writer is given (uledger_now: time()): near T0 mostly, else
 * within a century of it. Hours beyond come in crafted rows (op 4).
 */
static int64_t rd_time(struct rd *r)
{
	const int64_t century = 100LL * 366 * 86400;
	uint8_t k = rd_u8(r);

	if (k < 192)
		return T0 + (int64_t)k * 3600 * 7;
	return T0 - century + (int64_t)(rd_u64(r) % (uint64_t)(2 * century));
}

/* A name of any bytes (cut at a NUL, as C strings are), or one of the policy's. */
static const char *rd_name(struct rd *r, char *buf, size_t cap)
{
	static const char *const pool[] = {"a", "k", "b", "gw-1"};
	uint8_t k = rd_u8(r);
	size_t n;

	if (k < 128)
		return pool[k & 3];
	n = (size_t)(k - 128) % cap;
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)rd_u8(r);
	buf[n] = '\0';
	return buf;
}

static void op_report(struct uledger *lg, sqlite3 *h_, struct rd *r)
{
	(void)h_;
	char holder[64], names[MAX_ENTRIES][32];
	struct uledger_entry e[MAX_ENTRIES];
	const char *h = rd_name(r, holder, sizeof(holder));
	uint64_t inc = rd_int(r), ident = rd_int(r), seq = rd_int(r);
	int64_t now = rd_time(r);
	size_t n = 1 + rd_u8(r) % MAX_ENTRIES;

	memset(e, 0, sizeof(e));
	for (size_t i = 0; i < n; i++) {
		e[i].limit = rd_name(r, names[i], sizeof(names[i]));
		e[i].t.admitted = rd_int(r);
		e[i].t.denied = rd_int(r);
		e[i].t.fallback = rd_int(r);
		e[i].t.bypass = rd_int(r);
		/* The bound: a contract, or a holder's lease (rate 0 a bucket of
		 * 0), after a slot take with the contract's part before it.
		 */
		e[i].c.rate = rd_int(r);
		e[i].c.burst = rd_int(r);
		e[i].c.lease = rd_u8(r) & 1;
		e[i].c.backlog_s = (uint32_t)rd_int(r);
		e[i].c.pre = rd_u8(r) & 1;
		e[i].c.pre_ago_s = (uint32_t)rd_int(r);
		e[i].c.pre_rate = rd_int(r);
		e[i].c.pre_burst = rd_int(r);
	}
	uledger_record_ident(lg, h, inc, ident, seq, now, 1, e, n);
}

static void op_keys(struct uledger *lg, sqlite3 *h_, struct rd *r)
{
	(void)h_;
	char holder[64], limit[32], texts[MAX_ENTRIES][128];
	struct uledger_key_entry e[MAX_ENTRIES];
	const char *h = rd_name(r, holder, sizeof(holder));
	uint64_t ident = rd_int(r), uid = rd_int(r);
	const char *l = rd_name(r, limit, sizeof(limit));
	int64_t now = rd_time(r);
	size_t n = 1 + rd_u8(r) % MAX_ENTRIES;

	memset(e, 0, sizeof(e));
	for (size_t i = 0; i < n; i++) {
		uint8_t *k = (uint8_t *)&e[i].key;

		for (size_t b = 0; b < sizeof(e[i].key); b++)
			k[b] = rd_u8(r);
		e[i].born = rd_int(r);
		e[i].key_text = rd_name(r, texts[i], sizeof(texts[i]));
		for (int c = 0; c < LL_METER_CLASSES; c++) {
			e[i].pkts[c] = rd_int(r);
			e[i].bytes[c] = rd_int(r);
		}
	}
	uledger_record_keys(lg, h, ident, uid, l, now, 1, e, n);
}

static void op_metered(struct uledger *lg, sqlite3 *h_, struct rd *r)
{
	(void)h_;
	char names[3][32];
	const char *v[3];
	size_t n = rd_u8(r) % 4;

	for (size_t i = 0; i < n; i++)
		v[i] = rd_name(r, names[i], sizeof(names[i]));
	uledger_set_metered(lg, v, n, rd_time(r));
}

/* Any SQLite value into parameter i. */
static void rd_value(struct rd *r, sqlite3_stmt *s, int i)
{
	uint8_t k = rd_u8(r) % 5;
	char buf[64];
	uint64_t u;
	double d;

	switch (k) {
	case 0:
		sqlite3_bind_null(s, i);
		break;
	case 1:
		sqlite3_bind_int64(s, i, (sqlite3_int64)rd_int(r));
		break;
	case 2:
		sqlite3_bind_text(s, i, rd_name(r, buf, sizeof(buf)), -1, SQLITE_TRANSIENT);
		break;
	case 3:
		u = rd_u64(r);
		memcpy(&d, &u, sizeof(d));
		sqlite3_bind_double(s, i, d);
		break;
	default:
		rd_name(r, buf, 17);
		sqlite3_bind_blob(s, i, buf, (int)strlen(buf), SQLITE_TRANSIENT);
	}
}

/* A row as a crafted file may have it: any value in any column. */
static void op_crafted(struct uledger *lg, sqlite3 *h, struct rd *r)
{
	(void)lg;
	static const char *const sql[] = {
	    "INSERT OR REPLACE INTO usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	    "INSERT OR REPLACE INTO key_usage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
	    "?11, ?12)",
	};
	int t = rd_u8(r) & 1;
	sqlite3_stmt *s = NULL;

	if (sqlite3_prepare_v2(h, sql[t], -1, &s, NULL) == SQLITE_OK) {
		for (int i = 1; i <= (t ? 12 : 7); i++)
			rd_value(r, s, i);
		sqlite3_step(s);
	}
	sqlite3_finalize(s);
}

/* A retention step as the writer thread takes it: now from time(), a
 * retention coord.yaml allows (1d to 36600d).
 */
static void op_prune(struct uledger *lg, sqlite3 *h_, struct rd *r)
{
	int64_t now = T0 + rd_u8(r) * 86400LL * 30;
	uint64_t ret = CFG_LEDGER_RETENTION_MIN_S +
		       rd_u64(r) % (CFG_LEDGER_RETENTION_MAX_S - CFG_LEDGER_RETENTION_MIN_S + 1);

	(void)h_;
	uledger_prune(lg, now, ret, 64);
}

static void (*const op[5])(struct uledger *, sqlite3 *, struct rd *) = {
    op_report, op_keys, op_metered, op_prune, op_crafted,
};

/* Bytes a terminal would act on: C0 control characters (ESC, BEL, CR)
 * but the newline. DEL and bytes >= 0x80 pass: UTF-8 names are names.
 */
static void check_printable(const char *what, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 && c != '\n') {
			fprintf(stderr, "%s: control byte 0x%02x at %zu: %.*s\n", what, c, i,
				(int)(n < 400 ? n : 400), s);
			abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char policy[] =
	    "version: 1\nlimits:\n"
	    "  - {name: a, scope: global, rate: 1000, burst: 100, meter: true}\n"
	    "  - {name: k, key: src-ip, scope: global, unit: bytes, rate: 10M, burst: 1M, "
	    "meter: true}\n"
	    "rules:\n  - {name: all, limits: [a, k]}\n";
	static const char coord[] = "listen: 127.0.0.1:0\npolicy: policy.yaml\nstate-dir: state\n"
				    "lease: {ttl: 300ms, refresh: 100ms}\ngateways: 4\n";
	static char db[256], cfg[256];
	static int memfd = -1;
	static const char *const names[] = {"a", "k"};
	struct rd r = {data, size};
	static const char lax_schema[] =
	    "CREATE TABLE usage (limit_name, holder, hour, admitted, denied, fallback, bypass, "
	    "PRIMARY KEY (limit_name, holder, hour));"
	    "CREATE TABLE key_usage (limit_name, key, holder, hour, ap, ab, dp, db, fp, fb, bp, "
	    "bb, PRIMARY KEY (limit_name, key, holder, hour));";
	struct uledger *lg;
	sqlite3 *h;
	struct usage_opts o = {0};
	bool printed = false;
	uint8_t q;
	int saved, ops = 0;
	off_t len;
	char *out;

	if (memfd < 0) {
		const char *dir = fuzz_dir("usage");

		fuzz_write_file(dir, "policy.yaml", policy, sizeof(policy) - 1);
		fuzz_write_file(dir, "coord.yaml", coord, sizeof(coord) - 1);
		snprintf(cfg, sizeof(cfg), "%s/coord.yaml", dir);
		snprintf(db, sizeof(db), "%s/ledger.db", dir);
		memfd = memfd_create("usage-out", MFD_CLOEXEC);
		if (memfd < 0)
			abort();
	}
	q = rd_u8(&r);
	for (size_t i = 0; i < 3; i++) {
		static const char *const sfx[] = {"", "-wal", "-shm"};
		char p[300];

		snprintf(p, sizeof(p), "%s%s", db, sfx[i]);
		unlink(p);
	}
	if (sqlite3_open(db, &h) != SQLITE_OK)
		abort();
	if (q & 0x08)
		sqlite3_exec(h, lax_schema, NULL, NULL, NULL);
	if (uledger_open(&lg, db))
		abort();
	uledger_set_metered(lg, names, 2, T0);
	while (r.n && ops++ < MAX_OPS)
		op[rd_u8(&r) % 5](lg, h, &r);
	uledger_close(lg);
	sqlite3_close(h);

	/* The policy (units, contracts) only where it decides something:
	 * parsing it costs more than the rest of a run.
	 */
	o.ledger = db;
	o.json_printed = &printed;
	o.period = (enum uledger_period)(q % 3);
	o.format = (enum usage_format)(q / 3 % 3);
	o.keys = q & 0x10;
	o.reconcile = q & 0x20;
	if (q & 0x40)
		o.from = T0 + 3600;
	if (q & 0x80)
		o.to = T0 + 86400 * 40;
	/* The policy (the contracts) only to reconcile: parsing it costs
	 * more than the rest of a run (without it the units print as "").
	 */
	o.config = o.reconcile ? cfg : NULL;
	fflush(stdout);
	saved = dup(1);
	if (saved < 0 || ftruncate(memfd, 0) || lseek(memfd, 0, SEEK_SET) || dup2(memfd, 1) < 0)
		abort();
	usage_run(&o);
	fflush(stdout);
	if (dup2(saved, 1) < 0)
		abort();
	close(saved);
	len = lseek(memfd, 0, SEEK_END);
	out = malloc((size_t)len + 1);
	if (!out || pread(memfd, out, (size_t)len, 0) != len)
		abort();
	out[len] = '\0';
	if (getenv("LL_FUZZ_VERBOSE"))
		fputs(out, stderr);
	check_printable("usage output", out, (size_t)len);
	if (printed) {
		json_object *j = json_tokener_parse(out);

		if (!j) {
			fprintf(stderr, "usage --json printed no JSON: %.400s\n", out);
			abort();
		}
		json_object_put(j);
	}
	free(out);
	return 0;
}
