// SPDX-License-Identifier: MIT
/*
 * The usage ledger's per-key writes (usage_ledger.h): METER batches of
 * per-key totals, added field by field over their key marks, many batches
 * to a transaction.
 *
 * A batch is a handful of statements whatever its size: its key marks and
 * its spend rows are read UL_CHUNK keys a statement, every entry is then
 * worked out in memory in the batch's order (an entry that repeats a
 * series or a key sees what the one before it left, as if each had been
 * read and written alone), and what moved is written back UL_CHUNK rows a
 * statement. On SQLite that saves little; on PostgreSQL, where every
 * statement is a round trip to the server, it is the difference between
 * five round trips a key and a few a batch.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/monotonic.h"
#include "lib/log.h"
#include "lib/util.h"
#include "coord/usage_ledger.h"
#include "coord/usage_ledger_int.h"

/* One series of the batch: its mark as read (found) and as it is now. */
struct kmark {
	const struct uledger_key_entry *e; /* its first entry: key and born */
	uint64_t v[8];
	bool found, dirty;
};

/* One key's spend row. */
struct kspend {
	const struct uledger_key_entry *e;
	struct ul_spend r;
	bool dirty;
};

/* One usage row (limit, key text, holder, hour): what the batch adds. */
struct kuse {
	const char *text;
	uint64_t d[8];
};

/* An open-addressed index of the batch's series, keys or texts: slot i
 * holds 1 + the entry's index, 0 when empty.
 */
struct kindex {
	uint32_t *slot;
	uint32_t mask;
};

static int index_init(struct kindex *x, size_t n)
{
	size_t size = 16;

	while (size < 2 * n)
		size *= 2;
	x->slot = calloc(size, sizeof(*x->slot));
	x->mask = (uint32_t)size - 1;
	return x->slot ? 0 : -ENOMEM;
}

static uint32_t fnv(const void *p, size_t len, uint32_t h)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/* Field f of an entry in the columns' order (0..7: ap ab dp db fp fb bp bb). */
static uint64_t key_field(const struct uledger_key_entry *e, int f)
{
	return f & 1 ? e->bytes[f / 2] : e->pkts[f / 2];
}

static const char *text_of(const struct uledger_key_entry *e)
{
	return e->key_text ? e->key_text : "";
}

/* ---- reading: key marks and spend rows of the batch ---- */

/* Statements of k rows, built from a head, a row with ?1..?S shared and
 * '#' for each of the row's own parameters (numbered after the shared
 * ones, row by row), and a tail. A chunk of UL_CHUNK rows is prepared once
 * (lg->kst); a shorter one for the batch's end, then finalized.
 */
static int rows_prepare(struct uledger *lg, int kind, int k, struct udb_stmt **s, bool *own)
{
	static const struct {
		const char *head, *row, *sep, *tail;
		int shared;
	} kinds[UL_KS_N] = {
	    /* By key, the series told apart by born here: a (key, born) list
	     * was a scan of the holder's series on PostgreSQL.
	     */
	    [UL_KS_MARKS] =
		{"SELECT key, born, ap, ab, dp, db, fp, fb, bp, bb FROM key_marks WHERE "
		 "holder = ?1 AND ident = ?2 AND limit_uid = ?3 AND limit_name = ?4 "
		 "AND key IN (",
		 "#", ", ", ")", 4},
	    /* A join on the list (PostgreSQL: one index probe a key; an IN list
	     * cost four times as much here, bench_usage_ledger).
	     */
	    [UL_KS_SPENDS] = {"SELECT s.key, s.level, s.t FROM (VALUES ", "(#)", ", ",
			      ") AS k JOIN spend AS s ON s.holder = ?1 AND s.limit_name = ?2 AND "
			      "s.key = k.column1",
			      2},
	    [UL_KS_MARK_PUT] = {"INSERT INTO key_marks (holder, ident, limit_uid, key, limit_name, "
				"ap, ab, dp, db, fp, fb, bp, bb, updated, born) VALUES ",
				"(?1, ?2, ?3, #, ?4, #, #, #, #, #, #, #, #, ?5, #)", ", ",
				" ON CONFLICT (holder, ident, limit_name, limit_uid, key, born) DO "
				"UPDATE SET ap = excluded.ap, ab = excluded.ab, dp = excluded.dp, "
				"db = excluded.db, fp = excluded.fp, fb = excluded.fb, "
				"bp = excluded.bp, bb = excluded.bb, updated = excluded.updated",
				5},
	    [UL_KS_SPEND_PUT] = {"INSERT INTO spend (holder, limit_name, key, level, t) VALUES ",
				 "(?1, ?2, #, #, ?3)", ", ",
				 " ON CONFLICT (holder, limit_name, key) DO UPDATE SET "
				 "level = excluded.level, t = excluded.t",
				 3},
	    [UL_KS_USAGE_ADD] =
		{"INSERT INTO key_usage (limit_name, key, holder, hour, ap, ab, "
		 "dp, db, fp, fb, bp, bb) VALUES ",
		 "(?1, #, ?2, ?3, #, #, #, #, #, #, #, #)", ", ",
		 " ON CONFLICT (limit_name, key, holder, hour) DO UPDATE SET "
		 "ap = key_usage.ap + excluded.ap, ab = key_usage.ab + excluded.ab, "
		 "dp = key_usage.dp + excluded.dp, db = key_usage.db + excluded.db, "
		 "fp = key_usage.fp + excluded.fp, fb = key_usage.fb + excluded.fb, "
		 "bp = key_usage.bp + excluded.bp, bb = key_usage.bb + excluded.bb",
		 3},
	};
	size_t cap = strlen(kinds[kind].head) + strlen(kinds[kind].tail) + 1 +
		     (size_t)k * (strlen(kinds[kind].row) * 3 + 8);
	char *sql, *o;
	int next = kinds[kind].shared + 1, rc;

	*own = k != UL_CHUNK;
	if (!*own && lg->kst[kind]) {
		*s = lg->kst[kind];
		udb_reset(*s);
		return 0;
	}
	sql = malloc(cap);
	if (!sql)
		return -ENOMEM;
	o = sql + sprintf(sql, "%s", kinds[kind].head);
	for (int r = 0; r < k; r++) {
		if (r)
			o += sprintf(o, "%s", kinds[kind].sep);
		for (const char *p = kinds[kind].row; *p; p++)
			if (*p == '#')
				o += sprintf(o, "?%d", next++);
			else
				*o++ = *p;
	}
	sprintf(o, "%s", kinds[kind].tail);
	rc = udb_prepare(lg->db, sql, s);
	free(sql);
	if (!rc && !*own)
		lg->kst[kind] = *s;
	return rc;
}

static void rows_done(struct udb_stmt *s, bool own)
{
	if (own)
		udb_finalize(s);
	else if (s)
		udb_reset(s);
}

static struct kmark *mark_find(struct kmark *m, const struct kindex *x, const void *key,
			       uint64_t born)
{
	uint32_t h = fnv(&born, sizeof(born), fnv(key, sizeof(struct ll_key_id), 2166136261u));

	for (uint32_t i = h & x->mask; x->slot[i]; i = (i + 1) & x->mask) {
		struct kmark *c = &m[x->slot[i] - 1];

		if (c->e->born == born && !memcmp(&c->e->key, key, sizeof(c->e->key)))
			return c;
	}
	return NULL;
}

static struct kspend *spend_find(struct kspend *sp, const struct kindex *x, const void *key)
{
	uint32_t h = fnv(key, sizeof(struct ll_key_id), 2166136261u);

	for (uint32_t i = h & x->mask; x->slot[i]; i = (i + 1) & x->mask)
		if (!memcmp(&sp[x->slot[i] - 1].e->key, key, sizeof(struct ll_key_id)))
			return &sp[x->slot[i] - 1];
	return NULL;
}

static struct kuse *use_find(struct kuse *u, const struct kindex *x, const char *text)
{
	uint32_t h = fnv(text, strlen(text), 2166136261u);

	for (uint32_t i = h & x->mask; x->slot[i]; i = (i + 1) & x->mask)
		if (!strcmp(u[x->slot[i] - 1].text, text))
			return &u[x->slot[i] - 1];
	return NULL;
}

/* The slot where a new entry of hash h goes. */
static uint32_t *index_free(struct kindex *x, uint32_t h)
{
	uint32_t i = h & x->mask;

	while (x->slot[i])
		i = (i + 1) & x->mask;
	return &x->slot[i];
}

/* Read the marks of the batch's series, UL_CHUNK a statement. */
static int marks_read(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		      const char *limit, struct kmark *m, size_t n, const struct kindex *x)
{
	for (size_t at = 0; at < n; at += UL_CHUNK) {
		int k = n - at < UL_CHUNK ? (int)(n - at) : UL_CHUNK, r;
		struct udb_stmt *s;
		bool own;

		if ((r = rows_prepare(lg, UL_KS_MARKS, k, &s, &own)))
			return r;
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, (int64_t)limit_uid);
		udb_bind_text(s, 4, limit);
		for (int i = 0; i < k; i++)
			udb_bind_blob(s, 5 + i, &m[at + i].e->key, sizeof(m[at + i].e->key));
		while ((r = udb_step(s)) == UDB_ROW) {
			size_t klen;
			const void *key = udb_col_blob(s, 0, &klen);
			struct kmark *c = klen == sizeof(struct ll_key_id) && key
					      ? mark_find(m, x, key, (uint64_t)udb_col_i64(s, 1))
					      : NULL;

			if (!c)
				continue;
			for (int f = 0; f < 8; f++)
				c->v[f] = (uint64_t)udb_col_i64(s, 2 + f);
			c->found = true;
		}
		rows_done(s, own);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Read the spend rows of the batch's keys, UL_CHUNK a statement. */
static int spends_read(struct uledger *lg, const char *holder, const char *limit, struct kspend *sp,
		       size_t n, const struct kindex *x)
{
	for (size_t at = 0; at < n; at += UL_CHUNK) {
		int k = n - at < UL_CHUNK ? (int)(n - at) : UL_CHUNK, r;
		struct udb_stmt *s;
		bool own;

		if ((r = rows_prepare(lg, UL_KS_SPENDS, k, &s, &own)))
			return r;
		udb_bind_text(s, 1, holder);
		udb_bind_text(s, 2, limit);
		for (int i = 0; i < k; i++)
			udb_bind_blob(s, 3 + i, &sp[at + i].e->key, sizeof(sp[at + i].e->key));
		while ((r = udb_step(s)) == UDB_ROW) {
			size_t klen;
			const void *key = udb_col_blob(s, 0, &klen);
			struct kspend *c =
			    klen == sizeof(struct ll_key_id) && key ? spend_find(sp, x, key) : NULL;

			if (!c)
				continue;
			c->r.level = (uint64_t)udb_col_i64(s, 1);
			c->r.t = udb_col_i64(s, 2);
			c->r.found = true;
		}
		rows_done(s, own);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- writing back what moved ---- */

static int marks_write(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		       const char *limit, int64_t now_s, struct kmark *const *w, size_t n)
{
	for (size_t at = 0; at < n; at += UL_CHUNK) {
		int k = n - at < UL_CHUNK ? (int)(n - at) : UL_CHUNK, r;
		struct udb_stmt *s;
		bool own;

		if ((r = rows_prepare(lg, UL_KS_MARK_PUT, k, &s, &own)))
			return r;
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, (int64_t)limit_uid);
		udb_bind_text(s, 4, limit);
		udb_bind_i64(s, 5, now_s);
		for (int i = 0; i < k; i++) {
			const struct kmark *c = w[at + (size_t)i];
			int p = 6 + 10 * i;

			udb_bind_blob(s, p, &c->e->key, sizeof(c->e->key));
			for (int f = 0; f < 8; f++)
				udb_bind_i64(s, p + 1 + f, (int64_t)c->v[f]);
			udb_bind_i64(s, p + 9, (int64_t)c->e->born);
		}
		r = udb_step_done(s);
		if (own)
			udb_finalize(s); /* a cached one: udb_step_done reset it */
		if (r)
			return r;
	}
	return 0;
}

static int spends_write(struct uledger *lg, const char *holder, const char *limit, int64_t now_s,
			struct kspend *const *w, size_t n)
{
	for (size_t at = 0; at < n; at += UL_CHUNK) {
		int k = n - at < UL_CHUNK ? (int)(n - at) : UL_CHUNK, r;
		struct udb_stmt *s;
		bool own;

		if ((r = rows_prepare(lg, UL_KS_SPEND_PUT, k, &s, &own)))
			return r;
		udb_bind_text(s, 1, holder);
		udb_bind_text(s, 2, limit);
		udb_bind_i64(s, 3, now_s);
		for (int i = 0; i < k; i++) {
			udb_bind_blob(s, 4 + 2 * i, &w[at + (size_t)i]->e->key,
				      sizeof(w[at + (size_t)i]->e->key));
			udb_bind_i64(s, 5 + 2 * i, ul_i64(w[at + (size_t)i]->r.level));
		}
		r = udb_step_done(s);
		if (own)
			udb_finalize(s); /* a cached one: udb_step_done reset it */
		if (r)
			return r;
	}
	return 0;
}

static int uses_write(struct uledger *lg, const char *holder, const char *limit, int64_t hour,
		      const struct kuse *u, size_t n)
{
	for (size_t at = 0; at < n; at += UL_CHUNK) {
		int k = n - at < UL_CHUNK ? (int)(n - at) : UL_CHUNK, r;
		struct udb_stmt *s;
		bool own;

		if ((r = rows_prepare(lg, UL_KS_USAGE_ADD, k, &s, &own)))
			return r;
		udb_bind_text(s, 1, limit);
		udb_bind_text(s, 2, holder);
		udb_bind_i64(s, 3, hour);
		for (int i = 0; i < k; i++) {
			int p = 4 + 9 * i;

			udb_bind_text(s, p, u[at + (size_t)i].text);
			for (int f = 0; f < 8; f++)
				udb_bind_i64(s, p + 1 + f, ul_i64(u[at + (size_t)i].d[f]));
		}
		r = udb_step_done(s);
		if (own)
			udb_finalize(s); /* a cached one: udb_step_done reset it */
		if (r)
			return r;
	}
	return 0;
}

/* ---- the batch ---- */

void uledger_note_refused(struct uledger *lg)
{
	lg->c.pruned_refused++;
}

int uledger_ident_pruned(struct uledger *lg, const char *holder, uint64_t ident)
{
	struct udb_stmt *s = lg->st[ST_KIDENT_GET];
	int r, pruned = 0;

	udb_reset(s);
	udb_bind_text(s, 1, holder);
	udb_bind_i64(s, 2, (int64_t)ident);
	r = udb_step(s);
	if (r == UDB_ROW)
		pruned = udb_col_i64(s, 0) != 0;
	udb_reset(s);
	if (r < 0)
		return r;
	return pruned;
}

int uledger_keys_begin(struct uledger *lg)
{
	if (udb_in_txn(lg->db))
		return 0; /* already in one */
	return udb_step_done(lg->st[ST_BEGIN]);
}

/* The series (key marks) holder has: holder_series, else counted once. */
static int holder_series_get(struct uledger *lg, const char *holder, int64_t *n)
{
	struct udb_stmt *s = lg->st[ST_HSERIES_GET];
	int r;

	for (int pass = 0; pass < 2; pass++) {
		udb_reset(s);
		udb_bind_text(s, 1, holder);
		r = udb_step(s);
		if (r == UDB_ROW)
			*n = udb_col_i64(s, 0);
		udb_reset(s);
		if (r == UDB_ROW) {
			*n = *n < 0 ? 0 : *n; /* (the file edited by hand) */
			return 0;
		}
		if (r < 0)
			return r;
		s = lg->st[ST_HSERIES_COUNT]; /* a ledger from before the quota */
	}
	return -EIO; /* count(*) without a row */
}

/* A new series refused past its holder's quota: counted, said once a minute. */
static void note_quota(struct uledger *lg, const char *holder, const char *limit, int64_t now_s)
{
	lg->c.quota++;
	if (!ul_once_a_minute(&lg->quota_logged_s, now_s))
		return;
	pr_warn("usage ledger: '%s' has its quota of %u series: a new key of limit '%s' is not "
		"recorded (usage_quota; said once a minute)\n",
		holder, lg->series_quota, limit);
}

/* The batch's working set: a series, a key and a usage row per entry at
 * most, each with its index.
 */
struct kbatch {
	struct kmark *m;
	struct kspend *sp;
	struct kuse *u;
	struct kmark **mw;
	struct kspend **sw;
	struct kmark **em; /* per entry: its series (NULL: refused before) */
	struct kspend **es;
	struct kindex xm, xs, xu;
	size_t nm, ns, nu;
};

static void batch_free(struct kbatch *b)
{
	free(b->m);
	free(b->sp);
	free(b->u);
	free(b->mw);
	free(b->sw);
	free(b->em);
	free(b->es);
	free(b->xm.slot);
	free(b->xs.slot);
	free(b->xu.slot);
}

/* Index the batch's entries: one series per (key, born), one spend row per
 * key (an entry of a total too big to be real has neither).
 */
static int batch_index(struct kbatch *b, const struct uledger_key_entry *e, size_t n)
{
	size_t m = n + 1;

	b->m = calloc(m, sizeof(*b->m));
	b->sp = calloc(m, sizeof(*b->sp));
	b->u = calloc(m, sizeof(*b->u));
	b->mw = calloc(m, sizeof(*b->mw));
	b->sw = calloc(m, sizeof(*b->sw));
	b->em = calloc(m, sizeof(*b->em));
	b->es = calloc(m, sizeof(*b->es));
	if (!b->m || !b->sp || !b->u || !b->mw || !b->sw || !b->em || !b->es ||
	    index_init(&b->xm, n) || index_init(&b->xs, n) || index_init(&b->xu, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool big = false;

		for (int f = 0; f < 8; f++)
			big |= key_field(&e[i], f) > ULEDGER_TOTAL_MAX;
		if (big)
			continue;
		b->em[i] = mark_find(b->m, &b->xm, &e[i].key, e[i].born);
		if (!b->em[i]) {
			uint32_t h = fnv(&e[i].born, sizeof(e[i].born),
					 fnv(&e[i].key, sizeof(e[i].key), 2166136261u));

			b->em[i] = &b->m[b->nm];
			b->m[b->nm].e = &e[i];
			*index_free(&b->xm, h) = (uint32_t)++b->nm;
		}
		b->es[i] = spend_find(b->sp, &b->xs, &e[i].key);
		if (!b->es[i]) {
			uint32_t h = fnv(&e[i].key, sizeof(e[i].key), 2166136261u);

			b->es[i] = &b->sp[b->ns];
			b->sp[b->ns].e = &e[i];
			*index_free(&b->xs, h) = (uint32_t)++b->ns;
		}
	}
	return 0;
}

/* What entry e adds to its usage row (by key text). */
static void use_add(struct kbatch *b, const struct uledger_key_entry *e, const uint64_t *d)
{
	const char *text = text_of(e);
	struct kuse *u = use_find(b->u, &b->xu, text);

	if (!u) {
		u = &b->u[b->nu];
		u->text = text;
		*index_free(&b->xu, fnv(text, strlen(text), 2166136261u)) = (uint32_t)++b->nu;
	}
	for (int f = 0; f < 8; f++)
		u->d[f] = u64_sat_add(u->d[f], d[f]);
}

int uledger_keys_add(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
		     const char *limit, int64_t now_s, const struct uledger_key_entry *e, size_t n)
{
	int64_t hour = uledger_period_start(ULEDGER_HOUR, now_s), series = -1;
	int rc = uledger_ident_pruned(lg, holder, ident);
	struct kbatch b = {0};
	size_t nmw = 0, nsw = 0;
	uint64_t added = 0;

	if (rc) {
		if (rc > 0) {
			lg->c.pruned_refused++;
			rc = -ESTALE;
		}
		return rc;
	}
	{
		struct udb_stmt *s = lg->st[ST_KIDENT_PUT];

		udb_reset(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, (int64_t)ident);
		udb_bind_i64(s, 3, now_s);
		rc = udb_step_done(s);
	}
	if (!rc)
		rc = batch_index(&b, e, n);
	if (!rc)
		rc = marks_read(lg, holder, ident, limit_uid, limit, b.m, b.nm, &b.xm);
	if (!rc)
		rc = spends_read(lg, holder, limit, b.sp, b.ns, &b.xs);
	for (size_t i = 0; !rc && i < n; i++) {
		struct kmark *m = b.em[i];
		uint64_t t[8], d[8], cut = 0;
		bool add = false, fresh;

		if (!m) { /* the coordinator refuses these first */
			ul_note_clamped(lg, holder, limit, now_s, ULEDGER_TOTAL_MAX);
			continue;
		}
		for (int f = 0; f < 8; f++)
			t[f] = key_field(&e[i], f);
		/* No class passes more bytes than its packets could carry (and
		 * a packet a CPU whose bytes were read before it).
		 */
		for (int f = 1; f < 8; f += 2) {
			uint64_t most = u64_sat_mul(t[f - 1] + 64, ULEDGER_FRAME_MAX);

			if (t[f] > most) {
				cut = u64_sat_add(cut, t[f] - most);
				t[f] = most;
			}
		}
		/* A new series past the holder's quota: refused, counted. */
		fresh = !m->found;
		if (fresh) {
			if (series < 0 && (rc = holder_series_get(lg, holder, &series)))
				break;
			if ((uint64_t)series + added >= lg->series_quota) {
				note_quota(lg, holder, limit, now_s);
				continue;
			}
			added++;
			m->found = true; /* an entry repeating it finds it */
		}
		/* Field-wise: what the totals exceed the mark by; the mark
		 * becomes the maximum (a field below it is an older report's).
		 */
		for (int f = 0; f < 8; f++) {
			d[f] = t[f] > m->v[f] ? t[f] - m->v[f] : 0;
			if (d[f])
				m->v[f] = t[f];
		}
		{
			/* ap or ab by the contract, the other classes' packets by the
			 * line rate (bytes followed their packets above).
			 */
			int af = e[i].c.bytes ? 1 : 0;
			uint64_t *const others[] = {&d[2], &d[4], &d[6]};
			uint64_t spent = 0, adm0 = d[af];

			ul_spend_cut(&b.es[i]->r, &e[i].c, now_s, &d[af], others, 3, &spent);
			if (e[i].c.lease && d[af] < adm0)
				lg->c.lease_clamped++; /* by the holder's grants */
			if (!b.es[i]->dirty)
				b.sw[nsw++] = b.es[i];
			b.es[i]->dirty = true;
			cut = u64_sat_add(cut, spent);
		}
		if (cut)
			ul_note_clamped(lg, holder, limit, now_s, cut);
		for (int f = 0; f < 8; f++)
			add |= d[f] != 0;
		lg->c.key_entries++;
		if (!add)
			lg->c.key_stale++;
		/* The mark moves past what a bound cut, and a new one is made. */
		if ((add || fresh) && !m->dirty) {
			m->dirty = true;
			b.mw[nmw++] = m;
		}
		if (!add)
			continue;
		lg->c.key_counted++;
		use_add(&b, &e[i], d);
	}
	if (!rc)
		rc = spends_write(lg, holder, limit, now_s, b.sw, nsw);
	if (!rc)
		rc = marks_write(lg, holder, ident, limit_uid, limit, now_s, b.mw, nmw);
	if (!rc)
		rc = uses_write(lg, holder, limit, hour, b.u, b.nu);
	lg->series_txn += rc ? 0 : added;
	if (!rc && added) {
		struct udb_stmt *s = lg->st[ST_HSERIES_PUT];

		udb_reset(s);
		udb_bind_text(s, 1, holder);
		udb_bind_i64(s, 2, series + (int64_t)added);
		rc = udb_step_done(s);
	}
	batch_free(&b);
	if (rc) {
		pr_warn("usage ledger: per-key usage of '%s' (limit '%s') not recorded: %s\n",
			holder, limit, rc == -ENOMEM ? "out of memory" : udb_errmsg(lg->db));
		return rc;
	}
	lg->c.key_batches++;
	return 0;
}

/* PostgreSQL plans a batch's reads by the tables' statistics, and a new
 * table has none: it then scans a holder's every series for each chunk of
 * keys (bench_coord, 8 x 100k new keys: 9.5k entries/s, 50 s behind).
 * Autovacuum takes them within a minute or so; the writer does not wait
 * for it: once the series made since the last ANALYZE are as many as there
 * were then (and at least 1000), it takes them itself, after the commit.
 */
static void analyze_if_grown(struct uledger *lg)
{
	uint64_t t0;

	if (!udb_is_pg(lg->db) || lg->series_new < 1000 || lg->series_new < lg->series_analyzed)
		return;
	t0 = clock_now_ns();
	if (udb_exec(lg->db, "ANALYZE key_marks; ANALYZE spend; ANALYZE key_usage")) {
		pr_warn("usage ledger: ANALYZE: %s\n", udb_errmsg(lg->db));
		return;
	}
	lg->series_analyzed += lg->series_new;
	lg->series_new = 0;
	pr_debug("usage ledger: statistics taken at %llu new series (%.1f ms)\n",
		 (unsigned long long)lg->series_analyzed, (double)(clock_now_ns() - t0) / 1e6);
}

void uledger_keys_abort(struct uledger *lg)
{
	lg->series_txn = 0;
	if (udb_in_txn(lg->db))
		udb_step_done(lg->st[ST_ROLLBACK]);
	lg->c.key_failures++;
}

int uledger_keys_commit(struct uledger *lg, uint64_t arrival_ns)
{
	int rc = udb_step_done(lg->st[ST_COMMIT]);

	if (rc) {
		pr_warn("usage ledger: per-key batch not committed: %s\n", udb_errmsg(lg->db));
		uledger_keys_abort(lg);
		return rc;
	}
	ul_lat_add(lg, clock_now_ns() - arrival_ns);
	lg->series_new += lg->series_txn;
	lg->series_txn = 0;
	analyze_if_grown(lg);
	return 0;
}

int uledger_record_keys(struct uledger *lg, const char *holder, uint64_t ident, uint64_t limit_uid,
			const char *limit, int64_t now_s, uint64_t arrival_ns,
			const struct uledger_key_entry *e, size_t n)
{
	struct uledger_counters saved = lg->c;
	int err = uledger_keys_begin(lg);

	if (!err)
		err = uledger_keys_add(lg, holder, ident, limit_uid, limit, now_s, e, n);
	if (err) {
		uledger_keys_abort(lg);
		saved.key_failures = lg->c.key_failures;
		saved.pruned_refused = lg->c.pruned_refused;
		lg->c = saved;
		return err;
	}
	err = uledger_keys_commit(lg, arrival_ns);
	if (err) {
		saved.key_failures = lg->c.key_failures;
		lg->c = saved;
	}
	return err;
}
