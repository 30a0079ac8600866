// SPDX-License-Identifier: MIT
/*
 * `leaseline usage --reconcile --pin-dir DIR`: the ledger against a
 * gateway's live counters (see usage_cmd.h). On the gateway: read ll_meter
 * (each series' totals summed over CPUs, its born the CPUs' maximum) and
 * the counters identity in ll_meter_info, and merge them with the ledger's
 * key marks of (holder, identity): a mark is exactly what the ledger
 * accounted for a series (the sum of its usage rows, same transaction).
 * Both sides sorted by (limit uid, key bytes, born).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/config.h"
#include "lib/fs.h"
#include "lib/keyfmt.h"
#include "lib/out.h"
#include "cmd/usage_cmd.h"
#include "cmd/usage_int.h"
#include "lib/util.h"

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
	ifd = fs_pin_get(p);
	if (ifd < 0 || bpf_map_lookup_elem(ifd, &zero, info)) {
		err = ifd < 0 ? ifd : -errno;
		fprintf(stderr, "leaseline usage: cannot read '%s': %s\n", p, strerror(-err));
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
		mfd = fs_pin_get(p);
		if (mfd < 0) {
			err = mfd;
			fprintf(stderr, "leaseline usage: cannot open '%s': %s\n", p,
				strerror(-err));
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
		sort_n(a, got, sizeof(*a), live_cmp);
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
	const struct cfg_limit *l = x->pol ? usage_policy_limit(x->pol, limit) : NULL;
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
		out_u64(o, usage_class_names[c], pk[c]);
	out_obj_end(o);
	out_obj_begin(o, "bytes");
	for (int c = 0; c < LL_METER_CLASSES; c++)
		out_u64(o, usage_class_names[c], by[c]);
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

int usage_live(const struct usage_opts *o, const struct cfg_policy *pol, const char *path)
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
