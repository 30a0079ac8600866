// SPDX-License-Identifier: MIT
/*
 * `leaseline usage` (see usage_cmd.h). Reads the ledger the coordinator
 * named by coord.yaml writes (read-only; WAL lets it read while the
 * coordinator writes), and the policy for each limit's unit and contract.
 * This file prints the ledger by period (per limit, or per key) and
 * reconciles it with the contract; usage_live.c reconciles it with a
 * gateway's live counters (--pin-dir).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "lib/config.h"
#include "lib/util.h"
#include "lib/out.h"
#include "lib/overrides.h"
#include "tb_math.h"
#include "cmd/usage_cmd.h"
#include "cmd/usage_int.h"

static const char *const period_names[] = {"hour", "day", "month"};

int usage_parse_time(const char *s, int64_t *out)
{
	static const char *const fmts[] = {
	    "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M",
	    "%Y-%m-%dT%HZ",	  "%Y-%m-%dT%H",       "%Y-%m-%d",	  "%Y-%m"};
	char *end;

	if (s[0] == '@') {
		long long v = strtoll(s + 1, &end, 10);

		if (end == s + 1 || *end || v < 0)
			return -EINVAL;
		*out = v;
		return 0;
	}
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		struct tm tm = {.tm_mday = 1};

		end = strptime(s, fmts[i], &tm);
		if (end && !*end) {
			*out = (int64_t)timegm(&tm);
			return 0;
		}
	}
	return -EINVAL;
}

static void fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The period as people name it: 2026-11-01T10Z, 2026-11-01, 2026-11. */
static void fmt_period(enum uledger_period p, int64_t t, char *buf, size_t len)
{
	static const char *const f[] = {"%Y-%m-%dT%HZ", "%Y-%m-%d", "%Y-%m"};
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, len, f[p], &tm);
}

struct print_ctx {
	const struct usage_opts *o;
	const struct cfg_policy *pol;
	struct out out;
	size_t rows;
	/* reconcile */
	int64_t now;
	size_t over;
	struct {
		char limit[32];
		int64_t end;	/* the end of its last period seen */
		uint64_t slack; /* what that period left of B + R*T */
	} prev[128];
	size_t n_prev;
};

const struct cfg_limit *usage_policy_limit(const struct cfg_policy *pol, const char *name)
{
	for (uint32_t i = 0; i < pol->n_limits; i++)
		if (!strcmp(pol->limits[i].name, name))
			return &pol->limits[i];
	return NULL;
}

static const char *unit_of(const struct print_ctx *x, const char *limit)
{
	const struct cfg_limit *l = usage_policy_limit(x->pol, limit);

	return l ? cfg_unit_name(l->unit) : "";
}

/* A row's period as printed: its start and end, and its name. */
struct row_when {
	char start[32], end[32], per[32];
};

/* Format a row's period into *w; in JSON, open the row's object with the
 * fields every row kind begins with (period, start, end, limit).
 */
static void row_begin(struct print_ctx *x, int64_t start, int64_t end, const char *limit,
		      struct row_when *w)
{
	fmt_time(start, w->start, sizeof(w->start));
	fmt_time(end, w->end, sizeof(w->end));
	fmt_period(x->o->period, start, w->per, sizeof(w->per));
	if (x->o->format != USAGE_JSON)
		return;
	out_obj_begin(&x->out, NULL);
	out_str(&x->out, "period", w->per);
	out_str(&x->out, "start", w->start);
	out_str(&x->out, "end", w->end);
	out_str(&x->out, "limit", limit);
}

static int print_row(const struct uledger_row *r, void *arg)
{
	struct print_ctx *x = arg;
	struct row_when w;

	row_begin(x, r->start, r->end, r->limit, &w);
	switch (x->o->format) {
	case USAGE_JSON:
		out_str(&x->out, "holder", r->holder);
		out_str(&x->out, "unit", unit_of(x, r->limit));
		out_u64(&x->out, "admitted", r->t.admitted);
		out_u64(&x->out, "denied", r->t.denied);
		out_u64(&x->out, "fallback", r->t.fallback);
		out_u64(&x->out, "bypass", r->t.bypass);
		out_obj_end(&x->out);
		break;
	case USAGE_CSV:
		printf("%s,%s,%s,%s,%s,%llu,%llu,%llu,%llu\n", w.start, w.end, r->limit, r->holder,
		       unit_of(x, r->limit), (unsigned long long)r->t.admitted,
		       (unsigned long long)r->t.denied, (unsigned long long)r->t.fallback,
		       (unsigned long long)r->t.bypass);
		break;
	default:
		printf("%-14s %-20s %-24s %-8s %14llu %14llu %12llu %12llu\n", w.per, r->limit,
		       r->holder, unit_of(x, r->limit), (unsigned long long)r->t.admitted,
		       (unsigned long long)r->t.denied, (unsigned long long)r->t.fallback,
		       (unsigned long long)r->t.bypass);
	}
	x->rows++;
	return 0;
}

/* Reconcile one (limit, period) summed over holders: what passed (admitted,
 * fallback, bypass) against B + R·T, T the period (up to now for the
 * current one). Over it, the causes: bypass (fail-open, never within the
 * contract), fallback (beyond its reserve), late reports (admitted alone
 * over the bound: usage is attributed to the period its report arrived in,
 * so one period's spending can land in the next).
 */
static int reconcile_row(const struct uledger_row *r, void *arg)
{
	struct print_ctx *x = arg;
	const struct cfg_limit *l = usage_policy_limit(x->pol, r->limit);
	int64_t end = r->end < x->now ? r->end : x->now;
	uint64_t secs = end > r->start ? (uint64_t)(end - r->start) : 0;
	uint64_t bound,
	    passed = u64_sat_add(u64_sat_add(r->t.admitted, r->t.fallback), r->t.bypass), slack;
	char per[32], causes[256] = "";
	size_t n = 0, i;

	if (!l) {
		fprintf(stderr,
			"leaseline usage: limit '%s' is not in the policy: not reconciled\n",
			r->limit);
		return 0;
	}
	bound = u64_sat_add(l->burst, u64_sat_mul(l->rate, secs));
	/* The same limit's period before, if it was the one just before. */
	for (i = 0; i < x->n_prev && strcmp(x->prev[i].limit, r->limit); i++)
		;
	if (i == x->n_prev && i < sizeof(x->prev) / sizeof(x->prev[0])) {
		snprintf(x->prev[i].limit, sizeof(x->prev[i].limit), "%s", r->limit);
		x->prev[i].end = 0;
		x->n_prev++;
	}
	slack = 0;
	if (i < x->n_prev) {
		slack = x->prev[i].end == r->start ? x->prev[i].slack : 0;
		x->prev[i].end = r->end;
		x->prev[i].slack = bound > r->t.admitted ? bound - r->t.admitted : 0;
	}
	if (passed <= bound)
		return 0;
	if (r->t.bypass)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, "%sbypass %llu",
				      n ? ", " : "", (unsigned long long)r->t.bypass);
	if (r->t.fallback && u64_sat_add(r->t.admitted, r->t.fallback) > bound)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, "%sfallback %llu",
				      n ? ", " : "", (unsigned long long)r->t.fallback);
	if (r->t.admitted > bound)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, "%slate reports%s",
				      n ? ", " : "",
				      r->t.admitted - bound <= slack
					  ? " (the period before had the room)"
					  : " (more than the period before left: check for "
					    "a gateway spending an expired lease)");
	x->over++;
	fmt_period(x->o->period, r->start, per, sizeof(per));
	if (x->o->format == USAGE_JSON) {
		out_obj_begin(&x->out, NULL);
		out_str(&x->out, "period", per);
		out_str(&x->out, "limit", r->limit);
		out_str(&x->out, "unit", cfg_unit_name(l->unit));
		out_u64(&x->out, "admitted", r->t.admitted);
		out_u64(&x->out, "fallback", r->t.fallback);
		out_u64(&x->out, "bypass", r->t.bypass);
		out_u64(&x->out, "bound", bound);
		out_u64(&x->out, "excess", passed - bound);
		out_str(&x->out, "cause", causes);
		out_obj_end(&x->out);
	} else if (x->o->format == USAGE_CSV) {
		printf("%s,%s,%s,%llu,%llu,%llu,%llu,%llu,\"%s\"\n", per, r->limit,
		       cfg_unit_name(l->unit), (unsigned long long)r->t.admitted,
		       (unsigned long long)r->t.fallback, (unsigned long long)r->t.bypass,
		       (unsigned long long)bound, (unsigned long long)(passed - bound), causes);
	} else {
		printf("%-14s %-20s passed %llu %s > B + R*T = %llu by %llu: %s\n", per, r->limit,
		       (unsigned long long)passed, cfg_unit_name(l->unit),
		       (unsigned long long)bound, (unsigned long long)(passed - bound), causes);
	}
	return 0;
}

/* ---- per key ---- */

const char *const usage_class_names[LL_METER_CLASSES] = {"admitted", "denied", "fallback",
							 "bypass"};

/* A key row's counts in its limit's unit (packets, or bytes). */
static uint64_t in_unit(const struct print_ctx *x, const struct uledger_key_row *r, int c)
{
	const struct cfg_limit *l = usage_policy_limit(x->pol, r->limit);

	return l && l->unit == LL_UNIT_BYTES ? r->bytes[c] : r->pkts[c];
}

static int print_key_row(const struct uledger_key_row *r, void *arg)
{
	struct print_ctx *x = arg;
	struct row_when w;

	row_begin(x, r->start, r->end, r->limit, &w);
	switch (x->o->format) {
	case USAGE_JSON:
		out_str(&x->out, "key", r->key);
		out_str(&x->out, "holder", r->holder);
		out_str(&x->out, "unit", unit_of(x, r->limit));
		for (int c = 0; c < LL_METER_CLASSES; c++)
			out_u64(&x->out, usage_class_names[c], in_unit(x, r, c));
		out_obj_begin(&x->out, "packets");
		for (int c = 0; c < LL_METER_CLASSES; c++)
			out_u64(&x->out, usage_class_names[c], r->pkts[c]);
		out_obj_end(&x->out);
		out_obj_begin(&x->out, "bytes");
		for (int c = 0; c < LL_METER_CLASSES; c++)
			out_u64(&x->out, usage_class_names[c], r->bytes[c]);
		out_obj_end(&x->out);
		out_obj_end(&x->out);
		break;
	case USAGE_CSV:
		printf("%s,%s,%s,\"%s\",%s", w.start, w.end, r->limit, r->key, r->holder);
		for (int c = 0; c < LL_METER_CLASSES; c++)
			printf(",%llu,%llu", (unsigned long long)r->pkts[c],
			       (unsigned long long)r->bytes[c]);
		putchar('\n');
		break;
	default:
		printf("%-14s %-16s %-24s %-16s %-8s %14llu %12llu %12llu %12llu\n", w.per,
		       r->limit, r->key, r->holder, unit_of(x, r->limit),
		       (unsigned long long)in_unit(x, r, LL_METER_ADMITTED),
		       (unsigned long long)in_unit(x, r, LL_METER_DENIED),
		       (unsigned long long)in_unit(x, r, LL_METER_FALLBACK),
		       (unsigned long long)in_unit(x, r, LL_METER_BYPASS));
	}
	x->rows++;
	return 0;
}

/* A key's contract: its override's (the longest prefix covering its
 * address, src-ip and dst-ip limits) or the limit's. 0 with *unlimited set:
 * no bound.
 */
struct key_contract {
	const struct cfg_limit *l;
	struct ovr_entry *ov;
	size_t n_ov;
};

static struct key_contract *contracts; /* per limit of the policy, loaded once */

static void key_bound(const struct print_ctx *x, const struct uledger_key_row *r,
		      const struct cfg_limit *l, uint64_t *rate, uint64_t *burst, bool *unlimited)
{
	struct key_contract *kc = NULL;
	uint8_t a[16];
	char txt[128], *slash;
	int fam = 0, best = -1;

	*rate = l->rate;
	*burst = l->burst;
	*unlimited = false;
	for (uint32_t i = 0; contracts && i < x->pol->n_limits; i++)
		if (contracts[i].l == l)
			kc = &contracts[i];
	if (!kc || !kc->n_ov)
		return;
	snprintf(txt, sizeof(txt), "%s", r->key);
	if ((slash = strchr(txt, '/')))
		*slash = '\0';
	if (inet_pton(AF_INET, txt, a) == 1)
		fam = 4;
	else if (inet_pton(AF_INET6, txt, a) == 1)
		fam = 6;
	for (size_t i = 0; fam && i < kc->n_ov; i++) {
		const struct ovr_entry *o = &kc->ov[i];
		int bits = o->plen, ok = o->family == fam;

		for (int b = 0; ok && b < bits; b++)
			ok = ((a[b / 8] ^ o->addr[b / 8]) & (0x80 >> (b % 8))) == 0;
		if (ok && (best < 0 || o->plen > kc->ov[best].plen))
			best = (int)i;
	}
	if (best < 0)
		return;
	if (kc->ov[best].kind == OVR_UNLIMITED)
		*unlimited = true;
	else if (kc->ov[best].kind == OVR_DENY)
		*rate = *burst = 0;
	else {
		*rate = kc->ov[best].rate;
		*burst = kc->ov[best].burst;
	}
}

/* Per (limit, key, period), summed over holders: what passed against the
 * key's contract B + R·T (its override's, or the limit's), with causes.
 */
static int reconcile_key_row(const struct uledger_key_row *r, void *arg)
{
	struct print_ctx *x = arg;
	const struct cfg_limit *l = usage_policy_limit(x->pol, r->limit);
	int64_t end = r->end < x->now ? r->end : x->now;
	uint64_t secs = end > r->start ? (uint64_t)(end - r->start) : 0;
	uint64_t rate, burst, bound, adm, fb, bp, passed;
	char per[32], causes[256] = "";
	bool unlimited;
	size_t n = 0;

	if (!l)
		return 0;
	key_bound(x, r, l, &rate, &burst, &unlimited);
	if (unlimited)
		return 0;
	bound = u64_sat_add(burst, u64_sat_mul(rate, secs));
	adm = in_unit(x, r, LL_METER_ADMITTED);
	fb = in_unit(x, r, LL_METER_FALLBACK);
	bp = in_unit(x, r, LL_METER_BYPASS);
	passed = u64_sat_add(u64_sat_add(adm, fb), bp);
	if (passed <= bound)
		return 0;
	if (bp)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, "%sbypass %llu",
				      n ? ", " : "", (unsigned long long)bp);
	if (fb && adm + fb > bound)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, "%sfallback %llu",
				      n ? ", " : "", (unsigned long long)fb);
	if (adm > bound)
		n += (size_t)snprintf(causes + n, sizeof(causes) - n,
				      "%slate reports (usage counts in the period its report "
				      "arrived in)",
				      n ? ", " : "");
	x->over++;
	fmt_period(x->o->period, r->start, per, sizeof(per));
	if (x->o->format == USAGE_JSON) {
		out_obj_begin(&x->out, NULL);
		out_str(&x->out, "period", per);
		out_str(&x->out, "limit", r->limit);
		out_str(&x->out, "key", r->key);
		out_str(&x->out, "unit", cfg_unit_name(l->unit));
		out_u64(&x->out, "admitted", adm);
		out_u64(&x->out, "fallback", fb);
		out_u64(&x->out, "bypass", bp);
		out_u64(&x->out, "bound", bound);
		out_u64(&x->out, "excess", passed - bound);
		out_str(&x->out, "cause", causes);
		out_obj_end(&x->out);
	} else if (x->o->format == USAGE_CSV) {
		printf("%s,%s,\"%s\",%s,%llu,%llu,%llu,%llu,%llu,\"%s\"\n", per, r->limit, r->key,
		       cfg_unit_name(l->unit), (unsigned long long)adm, (unsigned long long)fb,
		       (unsigned long long)bp, (unsigned long long)bound,
		       (unsigned long long)(passed - bound), causes);
	} else {
		printf("%-14s %-16s %-24s passed %llu %s > B + R*T = %llu by %llu: %s\n", per,
		       r->limit, r->key, (unsigned long long)passed, cfg_unit_name(l->unit),
		       (unsigned long long)bound, (unsigned long long)(passed - bound), causes);
	}
	return 0;
}

static void contracts_load(const struct cfg_policy *pol)
{
	contracts = calloc(pol->n_limits + 1, sizeof(*contracts));
	for (uint32_t i = 0; contracts && i < pol->n_limits; i++) {
		const struct cfg_limit *l = &pol->limits[i];
		struct cfg_err e;

		contracts[i].l = l;
		if (l->overrides[0] &&
		    ovr_load(l->overrides, l->prefix_v4, l->prefix_v6, TB_MAX_RATE, TB_MAX_BURST,
			     &contracts[i].ov, &contracts[i].n_ov, &e))
			fprintf(stderr,
				"leaseline usage: %s: keys reconciled against the limit's "
				"contract\n",
				e.msg);
	}
}

static int usage_keys(const struct usage_opts *o, struct print_ctx *x, const char *path,
		      const struct uledger_query *q)
{
	int err;

	if (o->format == USAGE_JSON) {
		out_init(&x->out, stdout, true);
		out_obj_begin(&x->out, NULL);
		out_str(&x->out, "ledger", path);
		out_str(&x->out, "period", period_names[o->period]);
		out_arr_begin(&x->out, o->reconcile ? "differences" : "rows");
	} else if (o->format == USAGE_CSV) {
		puts(o->reconcile
			 ? "period,limit,key,unit,admitted,fallback,bypass,bound,excess,cause"
			 : "period_start,period_end,limit,key,holder,admitted_packets,"
			   "admitted_bytes,denied_packets,denied_bytes,fallback_packets,"
			   "fallback_bytes,bypass_packets,bypass_bytes");
	} else if (!o->reconcile) {
		printf("%-14s %-16s %-24s %-16s %-8s %14s %12s %12s %12s\n", "PERIOD", "LIMIT",
		       "KEY", "HOLDER", "UNIT", "ADMITTED", "DENIED", "FALLBACK", "BYPASS");
	}
	if (o->reconcile)
		contracts_load(x->pol);
	err = uledger_query_keys(path, q, o->key, o->reconcile ? reconcile_key_row : print_key_row,
				 x);
	if (o->format == USAGE_JSON) {
		out_arr_end(&x->out);
		if (o->reconcile)
			out_bool(&x->out, "within_contract", !x->over);
		out_obj_end(&x->out);
		out_finish(&x->out);
		if (o->json_printed)
			*o->json_printed = true;
	} else if (o->reconcile && !x->over && !err && o->format == USAGE_TEXT) {
		printf("every key and %s within its B + R*T\n", period_names[o->period]);
	}
	for (uint32_t i = 0; contracts && i < x->pol->n_limits; i++)
		free(contracts[i].ov);
	free(contracts);
	contracts = NULL;
	return err;
}

/* What the ledger names, for --limit and --holder: a name it has never
 * recorded (nor, for a limit, the policy) is a mistake to say, not an
 * empty answer (issue 28: `--limit nope` printed a header and exit 0).
 */
struct known {
	const char *limit, *holder;
	bool limit_seen, holder_seen;
	char limits[256], holders[256]; /* ", "-separated, distinct, cut short */
};

static void known_add(char *list, size_t cap, const char *name)
{
	size_t n = strlen(list), k = strlen(name);
	const char *p = list;

	if (!name[0])
		return;
	while ((p = strstr(p, name)))
		if ((p == list || p[-1] == ' ') && (p[k] == ',' || !p[k]))
			return;
		else
			p++;
	if (n + k + 3 < cap)
		snprintf(list + n, cap - n, "%s%s", n ? ", " : "", name);
	else if (n + 5 < cap && !strstr(list, "..."))
		snprintf(list + n, cap - n, ", ...");
}

static int known_row(const struct uledger_row *r, void *arg)
{
	struct known *k = arg;

	k->limit_seen |= k->limit && !strcmp(r->limit, k->limit);
	k->holder_seen |= k->holder && !strcmp(r->holder, k->holder);
	known_add(k->limits, sizeof(k->limits), r->limit);
	known_add(k->holders, sizeof(k->holders), r->holder);
	return 0;
}

/* 0, or 2 with a line naming what the ledger (and policy) has. */
static int usage_check_names(const struct usage_opts *o, const struct cfg_policy *pol,
			     const char *path)
{
	struct known k = {.limit = o->limit, .holder = o->holder};
	struct uledger_query q = {.period = ULEDGER_MONTH, .by_holder = 1};
	int err;

	if (!o->limit && !o->holder)
		return 0;
	err = uledger_query(path, &q, known_row, &k);
	if (err)
		return 0; /* the query proper says why */
	for (uint32_t i = 0; o->limit && i < pol->n_limits; i++)
		k.limit_seen |= !strcmp(pol->limits[i].name, o->limit);
	if (o->limit && !k.limit_seen) {
		fprintf(stderr, "leaseline usage: --limit '%s': no such limit in the ledger (%s%s)\n",
			o->limit, k.limits[0] ? "it has: " : "it is empty",
			k.limits[0] ? k.limits : "");
		return 2;
	}
	if (o->holder && !k.holder_seen) {
		fprintf(stderr,
			"leaseline usage: --holder '%s': no such holder in the ledger (%s%s)\n",
			o->holder, k.holders[0] ? "it has: " : "it is empty",
			k.holders[0] ? k.holders : "");
		return 2;
	}
	return 0;
}

int usage_run(const struct usage_opts *o)
{
	struct cfg_policy *pol = calloc(1, sizeof(*pol));
	struct print_ctx x = {.o = o, .pol = pol, .now = uledger_now()};
	struct uledger_query q = {.period = o->period,
				  .limit = o->limit,
				  .holder = o->holder,
				  .from = o->from,
				  .to = o->to,
				  .by_holder = !o->reconcile};
	struct cfg_coord co;
	char path[CFG_PATH_LEN + 16];
	struct cfg_err e;
	int err;

	if (!pol)
		return 1;
	memset(&co, 0, sizeof(co));
	if (o->config && cfg_coord_load(o->config, &co, pol, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		free(pol);
		return 2;
	}
	if (o->ledger)
		snprintf(path, sizeof(path), "%s", o->ledger);
	else if (co.ledger_path[0])
		snprintf(path, sizeof(path), "%s", co.ledger_path);
	else
		snprintf(path, sizeof(path), "%s/ledger.db", co.state_dir);
	if (!cfg_ledger_is_pg(path) && access(path, R_OK)) {
		fprintf(stderr,
			"leaseline usage: no usage ledger at '%s' (%s): no limit has meter: true, "
			"or the coordinator has not run with one\n",
			path, strerror(errno));
		free(pol);
		return 1;
	}
	if ((err = usage_check_names(o, pol, path))) {
		free(pol);
		return err;
	}
	if (o->pin_dir) {
		err = usage_live(o, pol, path);
		free(pol);
		if (err < 0) {
			fprintf(stderr, "leaseline usage: cannot reconcile '%s' with '%s': %s\n",
				path, o->pin_dir, strerror(-err));
			return 1;
		}
		return err;
	}
	if (o->keys || o->key) {
		err = usage_keys(o, &x, path, &q);
		goto done;
	}
	if (o->format == USAGE_JSON) {
		out_init(&x.out, stdout, true);
		out_obj_begin(&x.out, NULL);
		out_str(&x.out, "ledger", path);
		out_str(&x.out, "period", period_names[o->period]);
		out_arr_begin(&x.out, o->reconcile ? "differences" : "rows");
	} else if (o->format == USAGE_CSV) {
		puts(o->reconcile ? "period,limit,unit,admitted,fallback,bypass,bound,excess,cause"
				  : "period_start,period_end,limit,holder,unit,admitted,denied,"
				    "fallback,bypass");
	} else if (!o->reconcile) {
		printf("%-14s %-20s %-24s %-8s %14s %14s %12s %12s\n", "PERIOD", "LIMIT", "HOLDER",
		       "UNIT", "ADMITTED", "DENIED", "FALLBACK", "BYPASS");
	}
	err = uledger_query(path, &q, o->reconcile ? reconcile_row : print_row, &x);
	if (o->format == USAGE_JSON) {
		out_arr_end(&x.out);
		if (o->reconcile)
			out_bool(&x.out, "within_contract", !x.over);
		out_obj_end(&x.out);
		out_finish(&x.out);
		if (o->json_printed)
			*o->json_printed = true;
	} else if (o->reconcile && !x.over && !err && o->format == USAGE_TEXT) {
		printf("every limit and %s within B + R*T\n", period_names[o->period]);
	}
done:
	free(pol);
	if (err) {
		fprintf(stderr, "leaseline usage: cannot read the ledger '%s': %s\n", path,
			strerror(-err));
		return 1;
	}
	return o->reconcile && x.over ? 1 : 0;
}
