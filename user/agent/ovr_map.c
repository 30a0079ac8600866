// SPDX-License-Identifier: MIT
/*
 * Writing a policy's per-key overrides into ll_overrides (see ovr_map.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "agent/dp.h"
#include "lib/log.h"
#include "lib/overrides.h"
#include "agent/ovr_map.h"
#include "tb_math.h"
#include "lib/units.h"
#include "lib/util.h"

/* One entry of the trie: its key and what it holds. */
struct ovr_kv {
	struct ll_ov_key k;
	struct ll_key_grant v;
};

static int kv_cmp(const void *a, const void *b)
{
	return memcmp(&((const struct ovr_kv *)a)->k, &((const struct ovr_kv *)b)->k,
		      sizeof(struct ll_ov_key));
}

/* The trie key of entry e of limit uid: IPv4 as v4-mapped. */
static struct ll_ov_key ov_key(uint32_t uid, const struct ovr_entry *e)
{
	struct ll_ov_key k = {.limit_uid = uid};
	uint8_t *a = (uint8_t *)k.addr;

	if (e->family == 0) { /* a block of dst ports (ovr_load_ports) */
		memcpy(a, e->addr, 2);
		k.prefixlen = 32 + e->plen;
	} else {
		k.prefixlen = 32 + units_prefix_v6map(e->family, e->addr, e->plen, a);
	}
	return k;
}

/* The contract of e as the kernel charges it (gen set by the caller). */
static struct ll_key_grant ov_value(const struct ovr_entry *e)
{
	struct ll_key_grant g = {0};

	if (e->kind == OVR_UNLIMITED) {
		g.rate = TB_MAX_RATE;
		g.burst_s = TB_MAX_BURST * TB_SCALE;
	} else if (e->kind == OVR_RATE) {
		g.rate = e->rate;
		g.burst_s = e->burst * TB_SCALE;
	}
	g.fill_ns = tb_fill_ns(g.rate, g.burst_s);
	return g;
}

/* Every entry held under uid (any uid when all), sorted. */
static int held_read(struct dp *dp, uint32_t uid, bool all, struct ovr_kv **out, size_t *n)
{
	struct ll_ov_key k, next, *prev = NULL;
	struct ovr_kv *v = NULL;
	size_t cap = 0;

	*n = 0;
	while (!bpf_map_get_next_key(dp->overrides_fd, prev, &next)) {
		k = next;
		prev = &k;
		if (!all && k.limit_uid != uid)
			continue;
		if (*n == cap) {
			struct ovr_kv *nv = realloc(v, (cap = cap ? 2 * cap : 256) * sizeof(*v));

			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[*n].k = k;
		if (bpf_map_lookup_elem(dp->overrides_fd, &k, &v[*n].v))
			continue;
		(*n)++;
	}
	sort_n(v, *n, sizeof(*v), kv_cmp);
	*out = v;
	return 0;
}

static const struct ovr_kv *held_find(const struct ovr_kv *h, size_t n, const struct ll_ov_key *k)
{
	struct ovr_kv key = {.k = *k};

	return n ? bsearch(&key, h, n, sizeof(*h), kv_cmp) : NULL;
}

/* Write limit l's overrides (read from path) under its uid; *changed when
 * any entry was put or deleted.
 */
static int limit_write(struct dp *dp, const struct cfg_limit *cl, const struct ll_limit_cfg *l,
		       uint32_t *next_uid, bool *changed, char *err, size_t errlen)
{
	struct ovr_entry *e = NULL;
	struct ovr_kv *held = NULL, *want = NULL;
	struct cfg_err ce = {0};
	size_t n = 0, nh = 0;
	int rc = 0;

	*changed = false;
	if (cl && cl->overrides[0]) {
		if (cl->key_mode == LL_KEY_DST_PORT)
			rc = ovr_load_ports(cl->overrides, TB_MAX_RATE, TB_MAX_BURST, &e, &n, &ce);
		else
			rc = ovr_load(cl->overrides, cl->prefix_v4, cl->prefix_v6, TB_MAX_RATE,
				      TB_MAX_BURST, &e, &n, &ce);
		if (rc) {
			snprintf(err, errlen, "%s", ce.msg);
			return rc;
		}
	}
	rc = held_read(dp, l->uid, false, &held, &nh);
	want = calloc(n + 1, sizeof(*want));
	if (!rc && !want)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < n; i++) {
		const struct ovr_kv *h;

		want[i].k = ov_key(l->uid, &e[i]);
		want[i].v = ov_value(&e[i]);
		h = held_find(held, nh, &want[i].k);
		if (h && h->v.rate == want[i].v.rate && h->v.burst_s == want[i].v.burst_s &&
		    h->v.gen) {
			want[i].v.gen = h->v.gen; /* unchanged: its buckets stay as they are */
			continue;
		}
		want[i].v.gen = (*next_uid)++;
		if (bpf_map_update_elem(dp->overrides_fd, &want[i].k, &want[i].v, BPF_ANY)) {
			rc = -errno;
			snprintf(err, errlen,
				 "limit '%s': cannot write override %u of %s: %s (ll_overrides "
				 "holds at most %d in all)",
				 l->name, e[i].line, cl->overrides, strerror(-rc),
				 LL_MAX_OVERRIDES);
		}
		*changed = true;
	}
	if (!rc) {
		sort_n(want, n, sizeof(*want), kv_cmp);
		for (size_t i = 0; i < nh; i++)
			if (!held_find(want, n, &held[i].k)) {
				bpf_map_delete_elem(dp->overrides_fd, &held[i].k);
				*changed = true;
			}
	}
	free(e);
	free(held);
	free(want);
	return rc;
}

int ovr_map_write(struct dp *dp, const struct cfg_policy *cp, const struct ll_policy *prev,
		  struct ll_policy *pol, uint32_t *next_uid, char *err, size_t errlen)
{
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		struct ll_limit_cfg *l = &pol->limits[id];
		const struct ll_limit_cfg *o = prev ? &prev->limits[id] : NULL;
		const struct cfg_limit *cl = NULL;
		bool same = o && o->in_use && o->uid == l->uid, changed;
		int rc;

		/* A global limit's overrides are leased by the coordinator as keys
		 * of their own (per-key grants), not looked up here.
		 */
		if (!l->in_use || l->scope == LL_SCOPE_GLOBAL)
			continue;
		for (uint32_t i = 0; i < cp->n_limits; i++)
			if (!strncmp(cp->limits[i].name, l->name, LL_NAME_LEN))
				cl = &cp->limits[i];
		/* Once a limit has had overrides its buckets may hold copies: it
		 * goes on looking them up (an empty set returns every key to the
		 * limit's contract, as a reload would, without a fresh burst).
		 */
		if ((cl && cl->overrides[0]) || (same && (o->flags & LL_LIM_OVERRIDES)))
			l->flags |= LL_LIM_OVERRIDES;
		if (!(l->flags & LL_LIM_OVERRIDES))
			continue;
		rc = limit_write(dp, cl, l, next_uid, &changed, err, errlen);
		if (rc)
			return rc;
		l->ov_ver = same ? o->ov_ver + (changed ? 1 : 0) : 1;
	}
	return 0;
}

void ovr_map_prune(struct dp *dp, const struct ll_policy *pol)
{
	struct ovr_kv *held = NULL;
	size_t n = 0, gone = 0;

	if (held_read(dp, 0, true, &held, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		bool keep = false;

		for (uint32_t id = 0; id < LL_MAX_LIMITS && !keep; id++)
			keep = pol->limits[id].in_use &&
			       pol->limits[id].uid == held[i].k.limit_uid &&
			       (pol->limits[id].flags & LL_LIM_OVERRIDES);
		if (!keep && !bpf_map_delete_elem(dp->overrides_fd, &held[i].k))
			gone++;
	}
	if (gone)
		pr_debug("%zu overrides of limits gone removed\n", gone);
	free(held);
}
