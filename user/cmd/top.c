// SPDX-License-Identifier: MIT
/*
 * `leaseline top` (see top.h). One frame reads the policy, the limits'
 * counters and every bucket (under its lock, in batches) from the pins;
 * the refreshing view keeps the previous frame's counters, sorted by limit
 * uid and key, to compute each key's rates over the interval. Invariants:
 * never writes a map; every wait is bounded and ends on SIGINT/SIGTERM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "agent/dp.h"
#include "lib/keyfmt.h"
#include "lib/log.h"
#include "lib/out.h"
#include "cmd/pinned.h"
#include "lib/signals.h"
#include "agent/stats.h"
#include "tb_math.h"
#include "cmd/top.h"
#include "lib/util.h"

/* How ll_bucket.denied counts (docs/maps.md): said in every frame. */
#define TOP_DENIED_HOW "sampled"
#define TOP_DENIED_NOTE                                                                            \
	"per-key denied counts only denials decided under the bucket's lock (at most one per "     \
	"deny-hint period and CPU; a key flooding past its hint is refused without the lock "      \
	"and counted once per period); the limit's totals count every packet"

/* One bucket as read, keyed by its limit's uid and its key. */
struct top_entry {
	uint32_t uid;
	struct ll_key_id key;
	uint32_t id; /* the limit's id in the policy read with it */
	struct ll_bucket b;
	uint64_t d_denied, d_spent; /* since the previous frame (refreshing view) */
};

struct top_snap {
	struct ll_policy *pol;
	struct ll_state st;
	struct ll_limit_stats ls[LL_MAX_LIMITS];
	struct stats_window win[LL_MAX_LIMITS]; /* shadow denials, last ~10 s */
	bool have_win[LL_MAX_LIMITS];
	struct ll_lease lease[LL_MAX_LIMITS];
	bool have_lease[LL_MAX_LIMITS];
	struct top_entry *e;
	size_t n, cap;
	uint64_t now;	 /* CLOCK_MONOTONIC when the buckets had been read */
	size_t key_size; /* of the map being read */
};

/* The recent window of a shadow limit's would-drop figure (ll_shadow_win). */
#define TOP_WINDOW_SECONDS 10.0

/* Limit id of uid in pol, or -1. */
static int limit_of_uid(const struct ll_policy *pol, uint32_t uid)
{
	for (int i = 0; i < LL_MAX_LIMITS; i++)
		if (pol->limits[i].in_use && pol->limits[i].uid == uid)
			return i;
	return -1;
}

/* A bucket map's key (an ll_key of key_size bytes, or an ll_flow_key) as
 * limit uid + ll_key_id, as bpf/bucket.h key_as_flow_key lays it out.
 */
static void key_split(const void *k, size_t key_size, uint32_t *uid, struct ll_key_id *id)
{
	const struct ll_key *kk = k;

	memset(id, 0, sizeof(*id));
	if (key_size == sizeof(struct ll_flow_key)) {
		memcpy(uid, k, sizeof(*uid));
		memcpy(id, (const uint8_t *)k + sizeof(*uid), sizeof(*id));
		return;
	}
	*uid = kk->limit_uid;
	id->proto = kk->proto;
	id->family = kk->family;
	id->dport = kk->dport;
	memcpy(id->addr, kk->addr, sizeof(id->addr));
}

static int snap_add(struct top_snap *s, const struct top_entry *e)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct top_entry *ne = realloc(s->e, cap * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		s->e = ne;
		s->cap = cap;
	}
	s->e[s->n++] = *e;
	return 0;
}

/* One bucket of a limit in the policy into the snapshot. */
static int snap_one(void *ctx, const void *k, const struct ll_bucket *b)
{
	struct top_snap *s = ctx;
	struct top_entry e = {.b = *b};
	int id;

	key_split(k, s->key_size, &e.uid, &e.key);
	id = limit_of_uid(s->pol, e.uid);
	if (id < 0)
		return 0; /* a limit no longer in the policy: the reaper's */
	e.id = (uint32_t)id;
	return snap_add(s, &e);
}

/* Every bucket of one map whose limit is in the policy. */
static int snap_read_map(struct top_snap *s, int fd, size_t key_size)
{
	s->key_size = key_size;
	return dp_buckets_walk(fd, key_size, snap_one, s);
}

static int snap_read(struct top_snap *s, const struct pinned *p)
{
	int err;

	s->n = 0;
	err = dp_state_read(p->state, &s->st);
	if (!err)
		err = dp_policy_read(p->policy, p->state, s->pol);
	if (err)
		return err;
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		memset(&s->ls[id], 0, sizeof(s->ls[id]));
		s->have_lease[id] = false;
		if (!s->pol->limits[id].in_use)
			continue;
		stats_limit(p->limit_stats, id, &s->ls[id]);
		s->have_win[id] =
		    p->shadow_win >= 0 &&
		    !stats_shadow_window(p->shadow_win, id, s->pol->limits[id].uid, clock_now_ns(),
					 stats_window_slots(TOP_WINDOW_SECONDS), &s->win[id]);
		if (s->pol->limits[id].scope == LL_SCOPE_GLOBAL)
			s->have_lease[id] =
			    !bpf_map_lookup_elem_flags(p->leases, &id, &s->lease[id], BPF_F_LOCK);
	}
	err = snap_read_map(s, p->buckets, sizeof(struct ll_key));
	if (!err)
		err = snap_read_map(s, p->flow_buckets, sizeof(struct ll_flow_key));
	s->now = clock_now_ns();
	return err;
}

static int entry_key_cmp(const void *a, const void *b)
{
	const struct top_entry *x = a, *y = b;

	if (x->uid != y->uid)
		return x->uid < y->uid ? -1 : 1;
	return memcmp(&x->key, &y->key, sizeof(x->key));
}

static uint64_t delta(uint64_t now, uint64_t then)
{
	return now >= then ? now - then : now; /* a bucket reaped and made again */
}

/* Each entry's counters since prev (sorted by entry_key_cmp); a key that
 * prev does not have counts from 0. Sorts cur the same way.
 */
static void snap_deltas(struct top_snap *cur, const struct top_snap *prev)
{
	if (cur->n)
		sort_n(cur->e, cur->n, sizeof(*cur->e), entry_key_cmp);
	for (size_t i = 0; i < cur->n; i++) {
		struct top_entry *e = &cur->e[i];
		const struct top_entry *o =
		    prev && prev->n ? bsearch(e, prev->e, prev->n, sizeof(*e), entry_key_cmp)
				    : NULL;

		e->d_denied = o ? delta(e->b.denied, o->b.denied) : e->b.denied;
		e->d_spent = o ? delta(e->b.spent, o->b.spent) : e->b.spent;
	}
}

/* ---- one limit ---------------------------------------------------------------------------- */

/* Rows are ranked by the interval's count in the refreshing view (what is
 * happening now), then by the total, then by key (a stable order).
 */
static bool g_rates;

static int by_denied(const void *a, const void *b)
{
	const struct top_entry *x = *(const struct top_entry *const *)a,
			       *y = *(const struct top_entry *const *)b;

	if (g_rates && x->d_denied != y->d_denied)
		return x->d_denied > y->d_denied ? -1 : 1;
	if (x->b.denied != y->b.denied)
		return x->b.denied > y->b.denied ? -1 : 1;
	return memcmp(&x->key, &y->key, sizeof(x->key));
}

static int by_spent(const void *a, const void *b)
{
	const struct top_entry *x = *(const struct top_entry *const *)a,
			       *y = *(const struct top_entry *const *)b;

	if (g_rates && x->d_spent != y->d_spent)
		return x->d_spent > y->d_spent ? -1 : 1;
	if (x->b.spent != y->b.spent)
		return x->b.spent > y->b.spent ? -1 : 1;
	return memcmp(&x->key, &y->key, sizeof(x->key));
}

/* 1 when bucket b's deny hint still counts: the bucket is at the generation
 * its limit charges it under now (bpf/bucket.h: a hint is read only then).
 */
static bool hint_valid(const struct top_snap *s, const struct top_entry *e)
{
	const struct ll_limit_cfg *c = &s->pol->limits[e->id];
	const struct ll_lease *l = &s->lease[e->id];

	if (c->scope != LL_SCOPE_GLOBAL)
		return e->b.gen == c->gen;
	if (!s->have_lease[e->id])
		return false;
	if (s->now < l->expiry_ns)
		return e->b.kg_seen == l->kg_ver && e->b.gen == (e->b.o_gen ? e->b.o_gen : l->gen);
	return l->on_loss == LL_ON_LOSS_FALLBACK && e->b.gen == l->fb_gen;
}

static const char *unit_rate(uint8_t unit)
{
	return unit == LL_UNIT_BYTES ? "bytes/s" : "packets/s";
}

/* Why the limit refuses key e: the bucket it is charged with. *retry_text
 * is set instead of the hint's wait when the lease decides (dead lease).
 */
static void entry_why(const struct top_snap *s, const struct top_entry *e, char *buf, size_t len,
		      const char **retry_text)
{
	const struct ll_limit_cfg *c = &s->pol->limits[e->id];
	const struct ll_lease *l = &s->lease[e->id];
	const char *shadow = c->mode == LL_MODE_SHADOW ? "shadow (nothing dropped): " : "";

	*retry_text = NULL;
	if (c->scope != LL_SCOPE_GLOBAL) {
		snprintf(buf, len, "%sover %llu %s, burst %llu (limit '%s')", shadow,
			 (unsigned long long)c->rate, unit_rate(c->unit),
			 (unsigned long long)(c->burst_s / TB_SCALE), c->name);
		return;
	}
	if (!s->have_lease[e->id]) {
		snprintf(buf, len, "%sglobal limit '%s' (its lease could not be read)", shadow,
			 c->name);
		return;
	}
	if (s->now < l->expiry_ns) {
		if (e->b.o_gen)
			snprintf(buf, len,
				 "%sover its per-key grant %llu %s, burst %llu (global limit '%s')",
				 shadow, (unsigned long long)e->b.o_rate, unit_rate(c->unit),
				 (unsigned long long)(e->b.o_burst_s / TB_SCALE), c->name);
		else
			snprintf(
			    buf, len,
			    "%sover this gateway's share %llu %s, burst %llu (global limit '%s')",
			    shadow, (unsigned long long)l->rate, unit_rate(c->unit),
			    (unsigned long long)(l->burst_s / TB_SCALE), c->name);
		return;
	}
	/* Dead (expiry 0: never granted): on-loss decides, as lease_state does. */
	const char *dead = l->expiry_ns ? "lease expired" : "no lease granted yet";

	switch (l->on_loss) {
	case LL_ON_LOSS_FALLBACK:
		snprintf(buf, len,
			 "%s%s: over the fallback share %llu %s, burst %llu (global limit '%s')",
			 shadow, dead, (unsigned long long)l->fb_rate, unit_rate(c->unit),
			 (unsigned long long)(l->fb_burst_s / TB_SCALE), c->name);
		return;
	case LL_ON_LOSS_FAIL_OPEN:
		snprintf(buf, len, "%s: fail-open admits every packet (global limit '%s')", dead,
			 c->name);
		return;
	default:
		snprintf(buf, len, "%s%s: fail-closed denies every packet (global limit '%s')",
			 shadow, dead, c->name);
		*retry_text =
		    l->expiry_ns ? "when the lease is renewed" : "when a lease is granted";
	}
}

struct row {
	char key[KEYFMT_LEN];
	char retry[96];
	char why[192];
	struct keyfmt_retry r;
	const char *retry_text;
};

static void row_make(const struct top_snap *s, const struct top_entry *e, struct row *w)
{
	const struct ll_limit_cfg *c = &s->pol->limits[e->id];

	keyfmt_key(&e->key, c->key_mode, c->prefix_v4, c->prefix_v6, w->key, sizeof(w->key));
	entry_why(s, e, w->why, sizeof(w->why), &w->retry_text);
	w->r = keyfmt_retry(e->b.deny_hint, hint_valid(s, e), s->now);
	if (w->retry_text)
		snprintf(w->retry, sizeof(w->retry), "%s", w->retry_text);
	else
		keyfmt_retry_str(&w->r, w->retry, sizeof(w->retry));
}

/* The key's own fields, as well as its text, for scripts. */
static void json_key_fields(struct out *o, const struct ll_limit_cfg *c, const struct top_entry *e)
{
	char a[INET6_ADDRSTRLEN + 8], p[8];
	const struct ll_key_id *k = &e->key;

	if (k->family == LL_OVERFLOW_FAMILY) {
		out_bool(o, "overflow", true);
		return;
	}
	switch (c->key_mode) {
	case LL_KEY_SRC_IP:
	case LL_KEY_DST_IP:
		out_u64(o, "family", k->family);
		keyfmt_addr(k->family, k->addr, 0, a, sizeof(a));
		out_str(o, "address", a);
		out_u64(o, "prefix", k->family == 4 ? c->prefix_v4 : c->prefix_v6);
		break;
	case LL_KEY_DST_PORT:
		out_str(o, "proto", keyfmt_proto(k->proto, p, sizeof(p)));
		out_u64(o, "port", ntohs(k->dport));
		break;
	case LL_KEY_FLOW:
		out_u64(o, "family", k->family);
		out_str(o, "proto", keyfmt_proto(k->proto, p, sizeof(p)));
		keyfmt_addr(k->family, k->addr, 0, a, sizeof(a));
		out_str(o, "src", a);
		out_u64(o, "sport", ntohs(k->sport));
		keyfmt_addr(k->family, k->addr2, 0, a, sizeof(a));
		out_str(o, "dst", a);
		out_u64(o, "dport", ntohs(k->dport));
		break;
	}
}

static void json_row(struct out *o, const struct top_snap *s, const struct top_entry *e,
		     double secs)
{
	const struct ll_limit_cfg *c = &s->pol->limits[e->id];
	struct row w;

	row_make(s, e, &w);
	out_obj_begin(o, NULL);
	out_str(o, "key", w.key);
	json_key_fields(o, c, e);
	out_u64(o, "denied", e->b.denied);
	if (c->mode == LL_MODE_SHADOW) /* the same count, said as what it means here */
		out_u64(o, "would_drop", e->b.denied);
	out_u64(o, "allowed", e->b.spent);
	if (secs > 0) {
		out_f64(o, "denied_per_second", (double)e->d_denied / secs);
		if (c->mode == LL_MODE_SHADOW)
			out_f64(o, "would_drop_per_second", (double)e->d_denied / secs);
		out_f64(o, "allowed_per_second", (double)e->d_spent / secs);
	}
	out_f64(o, "tokens", (double)e->b.tokens / TB_SCALE);
	/* last_ns moves under the lock only: a flood the hint refuses leaves it. */
	out_f64(o, "since_charged_seconds",
		s->now > e->b.last_ns ? ns_to_s(s->now - e->b.last_ns) : 0);
	out_str(o, "limit", c->name);
	out_str(o, "retry", w.retry);
	if (!w.retry_text && w.r.state == KEYFMT_RETRY_WAIT)
		out_f64(o, "retry_ms", (double)w.r.wait_ns / NSEC_PER_MSEC);
	else if (!w.retry_text && w.r.state == KEYFMT_RETRY_NOW)
		out_f64(o, "retry_ms", 0);
	if (w.r.class)
		out_u64(o, "retry_frame_bytes", w.r.class);
	if (e->b.denied || w.r.state != KEYFMT_RETRY_NOW || w.retry_text)
		out_str(o, "why", w.why);
	out_obj_end(o);
}

/* The entries of limit id, ranked both ways and cut to rows. */
struct ranked {
	const struct top_entry **denied, **allowed;
	size_t n_denied, n_allowed, keys;
};

static int rank(const struct top_snap *s, uint32_t id, uint32_t rows, struct ranked *r)
{
	size_t n = 0;

	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < s->n; i++)
		n += s->e[i].id == id;
	r->denied = calloc(n ? n : 1, sizeof(*r->denied));
	r->allowed = calloc(n ? n : 1, sizeof(*r->allowed));
	if (!r->denied || !r->allowed)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++) {
		const struct top_entry *e = &s->e[i];

		if (e->id != id)
			continue;
		r->keys += e->key.family != LL_OVERFLOW_FAMILY;
		if (e->b.denied)
			r->denied[r->n_denied++] = e;
		if (e->b.spent)
			r->allowed[r->n_allowed++] = e;
	}
	if (r->n_denied) /* none: the list may be NULL, and qsort must not see it */
		sort_n(r->denied, r->n_denied, sizeof(*r->denied), by_denied);
	if (r->n_allowed)
		sort_n(r->allowed, r->n_allowed, sizeof(*r->allowed), by_spent);
	if (r->n_denied > rows)
		r->n_denied = rows;
	if (r->n_allowed > rows)
		r->n_allowed = rows;
	return 0;
}

static void ranked_free(struct ranked *r)
{
	free(r->denied);
	free(r->allowed);
}

static const char *scope_name(uint8_t scope)
{
	return scope == LL_SCOPE_GLOBAL ? "global" : "local";
}

/* The limit's exact totals (ll_limit_stats) in its unit. */
static void limit_totals(const struct ll_limit_stats *st, uint8_t unit, uint64_t *allowed,
			 uint64_t *denied)
{
	bool bytes = unit == LL_UNIT_BYTES;

	*allowed =
	    bytes ? st->allowed_bytes + st->fallback_bytes : st->allowed_pkts + st->fallback_pkts;
	*denied = bytes ? st->denied_bytes + st->shadow_denied_bytes
			: st->denied_pkts + st->shadow_denied_pkts;
}

static void json_limit(struct out *o, const struct top_snap *s, const struct top_snap *prev,
		       uint32_t id, const struct ranked *r, double secs)
{
	const struct ll_limit_cfg *c = &s->pol->limits[id];
	uint64_t al, de, pal, pde;

	out_obj_begin(o, NULL);
	out_str(o, "name", c->name);
	out_u64(o, "id", id);
	out_str(o, "key", cfg_key_mode_name(c->key_mode));
	if (c->key_mode == LL_KEY_SRC_IP || c->key_mode == LL_KEY_DST_IP) {
		out_u64(o, "prefix_v4", c->prefix_v4);
		out_u64(o, "prefix_v6", c->prefix_v6);
	}
	out_str(o, "unit", cfg_unit_name(c->unit));
	out_u64(o, "rate", c->rate);
	out_u64(o, "burst", c->burst_s / TB_SCALE);
	out_str(o, "mode", cfg_mode_name(c->mode));
	out_str(o, "scope", scope_name(c->scope));
	out_bool(o, "per_key", c->key_mode != LL_KEY_NONE); /* none: no rows */
	out_u64(o, "keys", r->keys);
	limit_totals(&s->ls[id], c->unit, &al, &de);
	out_u64(o, "allowed", al);
	out_u64(o, "denied", de);
	if (secs > 0 && prev) {
		limit_totals(&prev->ls[id], c->unit, &pal, &pde);
		out_f64(o, "allowed_per_second", (double)delta(al, pal) / secs);
		out_f64(o, "denied_per_second", (double)delta(de, pde) / secs);
	}
	if (c->mode == LL_MODE_SHADOW) {
		const struct ll_limit_stats *st = &s->ls[id];

		/* Exact, from the limit's counters: what enforce would have dropped. */
		out_obj_begin(o, "would_drop");
		out_u64(o, "total_packets", st->shadow_denied_pkts);
		out_u64(o, "total_bytes", st->shadow_denied_bytes);
		if (s->have_win[id]) {
			out_f64(o, "window_seconds", s->win[id].seconds);
			out_u64(o, "window_packets", s->win[id].pkts);
			out_u64(o, "window_bytes", s->win[id].bytes);
		}
		out_obj_end(o);
	}
	out_arr_begin(o, "top_denied");
	for (size_t i = 0; i < r->n_denied; i++)
		json_row(o, s, r->denied[i], secs);
	out_arr_end(o);
	out_arr_begin(o, "top_allowed");
	for (size_t i = 0; i < r->n_allowed; i++)
		json_row(o, s, r->allowed[i], secs);
	out_arr_end(o);
	out_obj_end(o);
}

static size_t key_width(const struct top_snap *s, const struct ranked *r)
{
	size_t w = 20;
	struct row x;

	for (size_t i = 0; i < r->n_denied + r->n_allowed; i++) {
		const struct top_entry *e =
		    i < r->n_denied ? r->denied[i] : r->allowed[i - r->n_denied];
		const struct ll_limit_cfg *c = &s->pol->limits[e->id];
		size_t n = (size_t)keyfmt_key(&e->key, c->key_mode, c->prefix_v4, c->prefix_v6,
					      x.key, sizeof(x.key));

		if (n > w)
			w = n;
	}
	return w;
}

static void text_rows(FILE *f, const struct top_snap *s, const struct top_entry **v, size_t n,
		      bool denied_first, int kw, double secs)
{
	const char *unit = s->pol->limits[v[0]->id].unit == LL_UNIT_BYTES ? "bytes" : "pkts";
	/* A shadow limit's per-key denied is what enforce would have dropped. */
	const char *dn = s->pol->limits[v[0]->id].mode == LL_MODE_SHADOW ? "WOULD-DROP" : "DENIED";
	char a[24], b[24], dps[24];

	snprintf(a, sizeof(a), "%s %s", denied_first ? dn : "ALLOWED", unit);
	snprintf(b, sizeof(b), "%s", denied_first ? "ALLOWED" : dn);
	snprintf(dps, sizeof(dps), "%s/s", dn);
	fprintf(f, "    %-*s %14s %12s", kw, "KEY", a, b);
	if (secs > 0)
		fprintf(f, " %10s %10s", denied_first ? dps : "ALLOWED/s",
			denied_first ? "ALLOWED/s" : dps);
	fprintf(f, "  %s\n", denied_first ? "RETRY" : "");
	for (size_t i = 0; i < n; i++) {
		const struct top_entry *e = v[i];
		uint64_t x = denied_first ? e->b.denied : e->b.spent,
			 y = denied_first ? e->b.spent : e->b.denied,
			 dx = denied_first ? e->d_denied : e->d_spent,
			 dy = denied_first ? e->d_spent : e->d_denied;
		struct row w;

		row_make(s, e, &w);
		fprintf(f, "    %-*s %14llu %12llu", kw, w.key, (unsigned long long)x,
			(unsigned long long)y);
		if (secs > 0)
			fprintf(f, " %10.1f %10.1f", (double)dx / secs, (double)dy / secs);
		if (denied_first) {
			fprintf(f, "  %s", w.retry);
			if (e->b.o_gen || s->pol->limits[e->id].scope == LL_SCOPE_GLOBAL)
				fprintf(f, "  (%s)", w.why);
		}
		fprintf(f, "\n");
	}
}

static void text_limit(FILE *f, const struct top_snap *s, const struct top_snap *prev, uint32_t id,
		       const struct ranked *r, double secs)
{
	const struct ll_limit_cfg *c = &s->pol->limits[id];
	uint64_t al, de, pal, pde;
	char prefix[32] = "";
	int kw = (int)key_width(s, r);

	if (c->key_mode == LL_KEY_SRC_IP || c->key_mode == LL_KEY_DST_IP)
		snprintf(prefix, sizeof(prefix), " /%u /%u", c->prefix_v4, c->prefix_v6);
	limit_totals(&s->ls[id], c->unit, &al, &de);
	fprintf(
	    f, "limit %s: %s%s, %llu %s, burst %llu, %s, %s; %zu keys; allowed %llu, denied %llu",
	    c->name, cfg_key_mode_name(c->key_mode), prefix, (unsigned long long)c->rate,
	    unit_rate(c->unit), (unsigned long long)(c->burst_s / TB_SCALE), cfg_mode_name(c->mode),
	    scope_name(c->scope), r->keys, (unsigned long long)al, (unsigned long long)de);
	if (secs > 0 && prev) {
		limit_totals(&prev->ls[id], c->unit, &pal, &pde);
		fprintf(f, " (%.1f/s, %.1f/s)", (double)delta(al, pal) / secs,
			(double)delta(de, pde) / secs);
	}
	fprintf(f, "\n");
	if (c->mode == LL_MODE_SHADOW) {
		const struct ll_limit_stats *st = &s->ls[id];

		fprintf(f, "  shadow: enforce would have dropped %llu pkts (%llu bytes) in all",
			(unsigned long long)st->shadow_denied_pkts,
			(unsigned long long)st->shadow_denied_bytes);
		if (s->have_win[id])
			fprintf(f, ", %llu pkts (%.1f/s) in the last %.1f s",
				(unsigned long long)s->win[id].pkts,
				s->win[id].seconds > 0
				    ? (double)s->win[id].pkts / s->win[id].seconds
				    : 0,
				s->win[id].seconds);
		fprintf(f, "\n");
	}
	if (c->key_mode == LL_KEY_NONE) {
		fprintf(f, "  key none: one bucket for every packet, no per-key rows\n");
		return;
	}
	if (r->n_denied) {
		fprintf(f, "  %s\n",
			c->mode == LL_MODE_SHADOW ? "would drop most (shadow: none dropped)"
						  : "denied most");
		text_rows(f, s, r->denied, r->n_denied, true, kw, secs);
	} else {
		fprintf(f, "  %s\n",
			c->mode == LL_MODE_SHADOW ? "would drop most: no key"
						  : "denied most: no key denied");
	}
	if (r->n_allowed) {
		fprintf(f, "  allowed most\n");
		text_rows(f, s, r->allowed, r->n_allowed, false, kw, secs);
	} else {
		fprintf(f, "  allowed most: no key allowed\n");
	}
}

/* ---- frames ------------------------------------------------------------------------------- */

/* Id of the limit named name in pol, or -1. */
static int limit_by_name(const struct ll_policy *pol, const char *name)
{
	for (int i = 0; i < LL_MAX_LIMITS; i++)
		if (pol->limits[i].in_use && !strcmp(pol->limits[i].name, name))
			return i;
	return -1;
}

/* One warning (under -j the command's JSON error): no such limit, and the
 * limits there are.
 */
static void unknown_limit(const struct ll_policy *pol, const char *name)
{
	char list[LL_MAX_LIMITS * (LL_NAME_LEN + 2) + 1] = "";
	size_t n = 0;

	for (int i = 0; i < LL_MAX_LIMITS; i++)
		if (pol->limits[i].in_use && n < sizeof(list))
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s %s", n ? "," : "",
					      pol->limits[i].name);
	pr_warn("leaseline top: no limit '%s' in policy version %llu (limits:%s)\n", name,
		(unsigned long long)pol->version, list);
}

static int frame_print(const struct top_opts *o, const struct top_snap *s,
		       const struct top_snap *prev, double secs)
{
	bool tty = !o->json && o->interval_ns && isatty(STDOUT_FILENO), gone = false;
	int only = -1, err = 0;
	struct out out;

	if (o->limit && (only = limit_by_name(s->pol, o->limit)) < 0) {
		if (!prev) {
			unknown_limit(s->pol, o->limit);
			return TOP_NO_SUCH_LIMIT;
		}
		gone = true; /* a reload removed it while we watched */
	}
	g_rates = secs > 0;
	if (o->json) {
		out_init(&out, stdout, true);
		out_obj_begin(&out, NULL);
		out_str(&out, "pin_dir", o->pin_dir);
		out_u64(&out, "policy_version", s->st.version);
		if (secs > 0)
			out_f64(&out, "interval_seconds", secs);
		out_u64(&out, "rows", o->rows);
		out_str(&out, "denied_counter", TOP_DENIED_HOW);
		if (gone)
			out_str(&out, "note", "the limit is not in this policy version");
		out_arr_begin(&out, "limits");
	} else {
		if (tty)
			fputs("\033[H\033[2J", stdout); /* home, clear: redraw in place */
		printf("leaseline top: policy version %llu, pin-dir %s",
		       (unsigned long long)s->st.version, o->pin_dir);
		if (secs > 0)
			printf("; rates over the last %.2f s", secs);
		else if (o->interval_ns)
			printf("; rates from the next refresh");
		printf("\n\n");
		if (gone)
			printf("limit %s is not in policy version %llu\n\n", o->limit,
			       (unsigned long long)s->st.version);
	}
	for (uint32_t id = 0; id < LL_MAX_LIMITS && !err && !gone; id++) {
		struct ranked r;

		if (!s->pol->limits[id].in_use || (only >= 0 && id != (uint32_t)only))
			continue;
		err = rank(s, id, o->rows, &r);
		if (!err && o->json)
			json_limit(&out, s, prev, id, &r, secs);
		else if (!err)
			text_limit(stdout, s, prev, id, &r, secs);
		if (!err && !o->json)
			printf("\n");
		ranked_free(&r);
	}
	if (o->json) {
		out_arr_end(&out);
		out_obj_end(&out);
		out_finish(&out);
	} else {
		printf("denied (%s): %s\n", TOP_DENIED_HOW, TOP_DENIED_NOTE);
		if (o->interval_ns && !tty)
			printf("\n");
		fflush(stdout);
	}
	return err;
}

/* Sleep ns, or less if SIGINT/SIGTERM comes. 1 when asked to stop. */
static int nap(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / NSEC_PER_SEC),
			      .tv_nsec = (long)(ns % NSEC_PER_SEC)};

	while (!sig_stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
	return sig_stop != 0;
}

int top_run(const struct top_opts *o)
{
	struct pinned p = PINNED_NONE;
	/* Two snapshots of every per-limit array: ~80 kB each at LL_MAX_LIMITS 256, not for the
	 * stack. */
	struct top_snap *snaps = calloc(2, sizeof(*snaps)), *cur = snaps, *prev = NULL;
	int err = -ENOMEM;

	if (!snaps)
		return err;
	snaps[0].pol = calloc(1, sizeof(*snaps[0].pol));
	snaps[1].pol = calloc(1, sizeof(*snaps[1].pol));
	if (!snaps[0].pol || !snaps[1].pol)
		goto out;
	err = pinned_open(o->pin_dir,
			  PINNED_STATE | PINNED_POLICY | PINNED_BUCKETS | PINNED_FLOW_BUCKETS |
			      PINNED_LIMIT_STATS | PINNED_LEASES | PINNED_SHADOW_WIN,
			  &p);
	if (err)
		goto out;
	if (o->interval_ns)
		signals_install();
	for (uint32_t frame = 0;; frame++) {
		double secs;

		err = snap_read(cur, &p);
		if (err)
			break;
		snap_deltas(cur, prev);
		secs = prev ? ns_to_s(cur->now - prev->now) : 0;
		err = frame_print(o, cur, prev, secs);
		if (err || !o->interval_ns || (o->count && frame + 1 >= o->count))
			break;
		if (nap(o->interval_ns))
			break;
		prev = cur;
		cur = cur == &snaps[0] ? &snaps[1] : &snaps[0];
	}
out:
	pinned_close(&p);
	for (int i = 0; i < 2; i++) {
		free(snaps[i].pol);
		free(snaps[i].e);
	}
	free(snaps);
	return err;
}
