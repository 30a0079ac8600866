// SPDX-License-Identifier: MIT
/*
 * `leaseline usage` (see usage_cmd.h). Reads the ledger the coordinator
 * named by coord.yaml writes (read-only; WAL lets it read while the
 * coordinator writes), and the policy for each limit's unit and contract.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/config.h"
#include "lib/keyfmt.h"
#include "lib/out.h"
#include "lib/overrides.h"
#include "tb_math.h"
#include "cmd/usage_cmd.h"

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

static const struct cfg_limit *policy_limit(const struct cfg_policy *pol, const char *name)
{
	for (uint32_t i = 0; i < pol->n_limits; i++)
		if (!strcmp(pol->limits[i].name, name))
			return &pol->limits[i];
	return NULL;
}

static const char *unit_of(const struct print_ctx *x, const char *limit)
{
	const struct cfg_limit *l = policy_limit(x->pol, limit);

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
	const struct cfg_limit *l = policy_limit(x->pol, r->limit);
	int64_t end = r->end < x->now ? r->end : x->now;
	uint64_t secs = end > r->start ? (uint64_t)(end - r->start) : 0;
	uint64_t bound, passed = r->t.admitted + r->t.fallback + r->t.bypass, slack;
	char per[32], causes[256] = "";
	size_t n = 0, i;

	if (!l) {
		fprintf(stderr,
			"leaseline usage: limit '%s' is not in the policy: not reconciled\n",
			r->limit);
		return 0;
	}
	bound = l->burst + l->rate * secs;
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
	if (r->t.fallback && r->t.admitted + r->t.fallback > bound)
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

static const char *const class_names[LL_METER_CLASSES] = {"admitted", "denied", "fallback",
							  "bypass"};

/* A key row's counts in its limit's unit (packets, or bytes). */
static uint64_t in_unit(const struct print_ctx *x, const struct uledger_key_row *r, int c)
{
	const struct cfg_limit *l = policy_limit(x->pol, r->limit);

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
			out_u64(&x->out, class_names[c], in_unit(x, r, c));
		out_obj_begin(&x->out, "packets");
		for (int c = 0; c < LL_METER_CLASSES; c++)
			out_u64(&x->out, class_names[c], r->pkts[c]);
		out_obj_end(&x->out);
		out_obj_begin(&x->out, "bytes");
		for (int c = 0; c < LL_METER_CLASSES; c++)
			out_u64(&x->out, class_names[c], r->bytes[c]);
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
	const struct cfg_limit *l = policy_limit(x->pol, r->limit);
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
	bound = burst + rate * secs;
	adm = in_unit(x, r, LL_METER_ADMITTED);
	fb = in_unit(x, r, LL_METER_FALLBACK);
	bp = in_unit(x, r, LL_METER_BYPASS);
	passed = adm + fb + bp;
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

/* ---- reconcile against a gateway's live counters (--pin-dir) ----
 *
 * On the gateway: read ll_meter (each series' totals summed over CPUs, its
 * born the CPUs' maximum) and the counters identity in ll_meter_info, and
 * merge them with the ledger's key marks of (holder, identity): a mark is
 * exactly what the ledger accounted for a series (the sum of its usage rows,
 * same transaction). Both sides sorted by (limit uid, key bytes, born).
 */
struct live_series {
	struct ll_flow_key k;
	struct ll_meter v;
};

static int live_cmp(const void *a, const void *b)
{
	const struct live_series *x = a, *y = b;
	int c;

	if (x->k.limit_uid != y->k.limit_uid)
		return x->k.limit_uid < y->k.limit_uid ? -1 : 1;
	c = memcmp((const char *)&x->k + 4, (const char *)&y->k + 4, sizeof(struct ll_key_id));
	if (c)
		return c;
	return x->v.born < y->v.born ? -1 : x->v.born > y->v.born;
}

static int live_read(const char *pin_dir, struct ll_meter_info *info, struct live_series **out,
		     size_t *n)
{
	char p[4096];
	int ncpus = libbpf_num_possible_cpus(), mfd, ifd, err = 0;
	struct ll_meter *pc;
	struct live_series *a = NULL;
	size_t cap = 0, got = 0, bound = 4u * LL_MAX_METER_KEYS;
	__u32 zero = 0;
	bool first = true;

	*out = NULL;
	*n = 0;
	if (ncpus <= 0)
		return -EIO;
	snprintf(p, sizeof(p), "%s/ll_meter_info", pin_dir);
	ifd = bpf_obj_get(p);
	if (ifd < 0 || bpf_map_lookup_elem(ifd, &zero, info)) {
		err = -errno;
		fprintf(stderr, "leaseline usage: cannot read '%s': %s\n", p, strerror(errno));
		if (ifd >= 0)
			close(ifd);
		return err;
	}
	close(ifd);
	pc = calloc((size_t)ncpus, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	/* Flow keys in ll_meter (ll_flow_key), the other modes' in ll_meter_k
	 * (ll_key, named here as the agent names it: widened to ll_flow_key).
	 */
	for (int map = 0; !err && map < 2; map++) {
		size_t ksz = map ? sizeof(struct ll_key) : sizeof(struct ll_flow_key);
		unsigned char kb[sizeof(struct ll_flow_key)], nb[sizeof(struct ll_flow_key)];

		first = true;
		snprintf(p, sizeof(p), "%s/%s", pin_dir, map ? "ll_meter_k" : "ll_meter");
		mfd = bpf_obj_get(p);
		if (mfd < 0) {
			err = -errno;
			fprintf(stderr, "leaseline usage: cannot open '%s': %s\n", p,
				strerror(errno));
			break;
		}
		/* Key by key: a command run by hand. Bounded: a map whose keys
		 * churn under the walk cannot keep it going.
		 */
		while (!err && got < bound && !bpf_map_get_next_key(mfd, first ? NULL : kb, nb)) {
			first = false;
			memcpy(kb, nb, ksz);
			if (bpf_map_lookup_elem(mfd, kb, pc))
				continue; /* deleted meanwhile (retired) */
			if (got == cap) {
				size_t nc = cap ? 2 * cap : 1024;
				void *t = realloc(a, nc * sizeof(*a));

				if (!t) {
					err = -ENOMEM;
					break;
				}
				a = t;
				cap = nc;
			}
			memset(&a[got], 0, sizeof(a[got]));
			if (map) {
				const struct ll_key *lk = (const void *)kb;

				a[got].k.limit_uid = lk->limit_uid;
				a[got].k.proto = lk->proto;
				a[got].k.family = lk->family;
				a[got].k.dport = lk->dport;
				memcpy(a[got].k.addr, lk->addr, sizeof(lk->addr));
			} else {
				memcpy(&a[got].k, kb, sizeof(a[got].k));
			}
			for (int c = 0; c < ncpus; c++) {
				for (int i = 0; i < LL_METER_CLASSES; i++) {
					a[got].v.pkts[i] += pc[c].pkts[i];
					a[got].v.bytes[i] += pc[c].bytes[i];
				}
				if (pc[c].born > a[got].v.born)
					a[got].v.born = pc[c].born;
			}
			got++;
		}
		close(mfd);
	}
	free(pc);
	if (err) {
		free(a);
		return err;
	}
	if (got)
		qsort(a, got, sizeof(*a), live_cmp);
	*out = a;
	*n = got;
	return 0;
}

struct live_ctx {
	const struct usage_opts *o;
	const struct cfg_policy *pol;
	struct out *out;
	struct live_series *s;
	size_t n, next;
	size_t equal, behind, ahead, gone;
	uint64_t late_pkts[LL_METER_CLASSES], late_bytes[LL_METER_CLASSES];
	/* limit names by uid, learnt from the marks (a series without one) */
	struct {
		uint32_t uid;
		char name[32];
	} names[LL_MAX_LIMITS];
	size_t n_names;
};

static const char *live_limit_name(struct live_ctx *x, uint32_t uid, char *buf, size_t len)
{
	for (size_t i = 0; i < x->n_names; i++)
		if (x->names[i].uid == uid)
			return x->names[i].name;
	snprintf(buf, len, "uid:%u", uid);
	return buf;
}

static void live_key_text(struct live_ctx *x, const char *limit, const struct ll_flow_key *fk,
			  char *buf, size_t len)
{
	const struct cfg_limit *l = x->pol ? policy_limit(x->pol, limit) : NULL;
	const struct ll_key_id *k = (const struct ll_key_id *)((const char *)fk + 4);
	uint8_t mode;

	if (l) {
		keyfmt_key(k, l->key_mode, l->prefix_v4, l->prefix_v6, buf, len);
		return;
	}
	/* No policy (--ledger alone): the mode the key's fields say. */
	if (k->family == LL_OVERFLOW_FAMILY || (!k->family && (k->proto || k->dport)))
		mode = k->family ? LL_KEY_SRC_IP : LL_KEY_DST_PORT;
	else if (k->addr2[0] | k->addr2[1] | k->addr2[2] | k->addr2[3] | k->sport)
		mode = LL_KEY_FLOW;
	else
		mode = LL_KEY_SRC_IP;
	keyfmt_key(k, mode, 128, 128, buf, len);
}

static void live_totals_json(struct out *o, const char *name, const uint64_t *pk,
			     const uint64_t *by)
{
	out_obj_begin(o, name);
	out_obj_begin(o, "packets");
	for (int c = 0; c < LL_METER_CLASSES; c++)
		out_u64(o, class_names[c], pk[c]);
	out_obj_end(o);
	out_obj_begin(o, "bytes");
	for (int c = 0; c < LL_METER_CLASSES; c++)
		out_u64(o, class_names[c], by[c]);
	out_obj_end(o);
	out_obj_end(o);
}

/* One series: its live totals (NULL: only in the ledger) against its mark
 * (NULL: never reached the ledger).
 */
static void live_one(struct live_ctx *x, const struct live_series *ls,
		     const struct uledger_mark_row *m)
{
	static const uint64_t zero[LL_METER_CLASSES];
	const uint64_t *lp = (const uint64_t *)ls->v.pkts, *lb = (const uint64_t *)ls->v.bytes;
	const uint64_t *mp = m ? m->pkts : zero, *mb = m ? m->bytes : zero;
	uint64_t dp[LL_METER_CLASSES], db[LL_METER_CLASSES];
	bool late = false, ahead = false;
	char nbuf[32], key[160], causes[256] = "";
	const char *limit = m ? m->limit : live_limit_name(x, ls->k.limit_uid, nbuf, sizeof(nbuf));
	size_t n = 0;

	for (int c = 0; c < LL_METER_CLASSES; c++) {
		dp[c] = lp[c] > mp[c] ? lp[c] - mp[c] : 0;
		db[c] = lb[c] > mb[c] ? lb[c] - mb[c] : 0;
		late |= dp[c] || db[c];
		ahead |= mp[c] > lp[c] || mb[c] > lb[c];
	}
	if (x->o->limit && strcmp(x->o->limit, limit))
		return;
	live_key_text(x, limit, &ls->k, key, sizeof(key));
	if (x->o->key && strcmp(x->o->key, key))
		return;
	if (!late && !ahead) {
		x->equal++;
		return;
	}
	if (late) {
		x->behind++;
		for (int c = 0; c < LL_METER_CLASSES; c++) {
			x->late_pkts[c] += dp[c];
			x->late_bytes[c] += db[c];
		}
		n +=
		    (size_t)snprintf(causes + n, sizeof(causes) - n,
				     "late reports: counted by the datapath, not in the ledger yet "
				     "(%llu packets admitted, %llu denied",
				     (unsigned long long)dp[LL_METER_ADMITTED],
				     (unsigned long long)dp[LL_METER_DENIED]);
		if (dp[LL_METER_FALLBACK] || db[LL_METER_FALLBACK])
			n += (size_t)snprintf(causes + n, sizeof(causes) - n, ", fallback %llu",
					      (unsigned long long)dp[LL_METER_FALLBACK]);
		if (dp[LL_METER_BYPASS] || db[LL_METER_BYPASS])
			n += (size_t)snprintf(causes + n, sizeof(causes) - n, ", bypass %llu",
					      (unsigned long long)dp[LL_METER_BYPASS]);
		n += (size_t)snprintf(causes + n, sizeof(causes) - n, ")");
	}
	if (ahead) {
		x->ahead++;
		snprintf(causes + n, sizeof(causes) - n,
			 "%sthe ledger is ahead of the counters (counters reset under the same "
			 "identity)",
			 n ? "; " : "");
	}
	if (x->o->format == USAGE_JSON) {
		out_obj_begin(x->out, NULL);
		out_str(x->out, "limit", limit);
		out_str(x->out, "key", key);
		out_u64(x->out, "born", ls->v.born);
		live_totals_json(x->out, "live", lp, lb);
		live_totals_json(x->out, "ledger", mp, mb);
		live_totals_json(x->out, "late", dp, db);
		out_str(x->out, "cause", causes);
		out_obj_end(x->out);
	} else if (x->o->format == USAGE_CSV) {
		printf("%s,\"%s\",%llu", limit, key, (unsigned long long)ls->v.born);
		for (int c = 0; c < LL_METER_CLASSES; c++)
			printf(",%llu,%llu", (unsigned long long)dp[c], (unsigned long long)db[c]);
		printf(",\"%s\"\n", causes);
	} else {
		printf("%-16s %-24s %s\n", limit, key, causes);
	}
}

static int live_mark(const struct uledger_mark_row *m, void *arg)
{
	struct live_ctx *x = arg;
	struct live_series want = {0};
	size_t i;

	for (i = 0; i < x->n_names && x->names[i].uid != m->limit_uid; i++)
		;
	if (i == x->n_names && i < LL_MAX_LIMITS) {
		x->names[i].uid = m->limit_uid;
		snprintf(x->names[i].name, sizeof(x->names[i].name), "%s", m->limit);
		x->n_names++;
	}
	want.k.limit_uid = m->limit_uid;
	memcpy((char *)&want.k + 4, &m->key, sizeof(m->key));
	want.v.born = m->born;
	/* Live series before this mark: none in the ledger. */
	while (x->next < x->n && live_cmp(&x->s[x->next], &want) < 0)
		live_one(x, &x->s[x->next++], NULL);
	if (x->next < x->n && !live_cmp(&x->s[x->next], &want))
		live_one(x, &x->s[x->next++], m);
	else
		x->gone++; /* retired by the agent, or a limit no longer metered */
	return 0;
}

static int usage_live(const struct usage_opts *o, const struct cfg_policy *pol, const char *path)
{
	struct ll_meter_info info = {0};
	struct live_ctx *x = calloc(1, sizeof(*x));
	struct out out;
	int err;

	if (!x)
		return -ENOMEM;
	x->o = o;
	x->pol = pol && pol->n_limits ? pol : NULL;
	x->out = &out;
	err = live_read(o->pin_dir, &info, &x->s, &x->n);
	if (err) {
		free(x);
		return err;
	}
	if (o->format == USAGE_JSON) {
		out_init(&out, stdout, true);
		out_obj_begin(&out, NULL);
		out_str(&out, "ledger", path);
		out_str(&out, "pin_dir", o->pin_dir);
		out_str(&out, "holder", o->holder);
		out_u64(&out, "ident", info.ident);
		out_arr_begin(&out, "differences");
	} else if (o->format == USAGE_CSV) {
		puts("limit,key,born,late_admitted_packets,late_admitted_bytes,late_denied_packets,"
		     "late_denied_bytes,late_fallback_packets,late_fallback_bytes,"
		     "late_bypass_packets,late_bypass_bytes,cause");
	}
	err = uledger_query_marks(path, o->holder, info.ident, live_mark, x);
	while (!err && x->next < x->n)
		live_one(x, &x->s[x->next++], NULL);
	if (o->format == USAGE_JSON) {
		out_arr_end(&out);
		out_u64(&out, "series", x->n);
		out_u64(&out, "equal", x->equal);
		out_u64(&out, "behind", x->behind);
		out_u64(&out, "ahead", x->ahead);
		out_u64(&out, "ledger_only", x->gone);
		live_totals_json(&out, "late", x->late_pkts, x->late_bytes);
		out_u64(&out, "not_metered_packets", info.lost_pkts);
		out_u64(&out, "not_metered_bytes", info.lost_bytes);
		out_u64(&out, "overflow_packets", info.full);
		out_bool(&out, "equal_to_ledger", !x->behind && !x->ahead && !info.lost_pkts);
		out_obj_end(&out);
		out_finish(&out);
		if (o->json_printed)
			*o->json_printed = true;
	} else if (o->format == USAGE_TEXT && !err) {
		printf("%s: counters identity %016llx, %zu series: %zu equal to the ledger, %zu "
		       "behind it, %zu ahead",
		       o->pin_dir, (unsigned long long)info.ident, x->n, x->equal, x->behind,
		       x->ahead);
		if (x->gone)
			printf("; %zu series only in the ledger (retired, not compared)", x->gone);
		putchar('\n');
		if (x->behind)
			printf("late reports in all: %llu packets admitted, %llu denied, %llu "
			       "fallback, %llu bypass\n",
			       (unsigned long long)x->late_pkts[LL_METER_ADMITTED],
			       (unsigned long long)x->late_pkts[LL_METER_DENIED],
			       (unsigned long long)x->late_pkts[LL_METER_FALLBACK],
			       (unsigned long long)x->late_pkts[LL_METER_BYPASS]);
		if (info.lost_pkts)
			printf("not metered per key (ll_meter full, no overflow entry): %llu "
			       "packets, %llu bytes: never in the ledger\n",
			       (unsigned long long)info.lost_pkts,
			       (unsigned long long)info.lost_bytes);
		if (info.full)
			printf("counted under (overflow) keys (ll_meter full): %llu packets\n",
			       (unsigned long long)info.full);
	}
	err = err ? err : (x->behind || x->ahead || info.lost_pkts) ? 1 : 0;
	free(x->s);
	free(x);
	return err;
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
	if (access(path, R_OK)) {
		fprintf(stderr,
			"leaseline usage: no usage ledger at '%s' (%s): no limit has meter: true, "
			"or the coordinator has not run with one\n",
			path, strerror(errno));
		free(pol);
		return 1;
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
