// SPDX-License-Identifier: MIT
/*
 * Hot keys (see hot.h). Invariants: the table never holds more than
 * HOT_CAPACITY / 2 keys; a report never lists more than WIRE_MAX_HOT; a key
 * is listed at most once per report (one walk of the table, which changes
 * only after it).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "agent/hot.h"
#include "agent/lease_decide.h"
#include "lib/log.h"
#include "tb_math.h"

_Static_assert(LL_IS_POW2(HOT_CAPACITY), "the map's slots are a power of two");
_Static_assert(sizeof(struct hot_id) == 4 + sizeof(struct ll_key_id), "a hot_id has no padding");

/* A spending key asks for 1/32 more than it spent. */
#define HOT_HEADROOM_DIV 32
/* A demand is told again once it moved by more than 1/8 of what was told. */
#define HOT_MOVE_DIV 8

/* Keys tracked at most: the key map is kept at most half full. */
#define HOT_MAX_LOAD (HOT_CAPACITY / 2)

/* Whether t[i] is (id, key) (the map's eq). */
static bool hot_eq(const struct hmap *m, const void *hid, uint32_t i)
{
	const struct hot *h = HMAP_OWNER(m, struct hot, map);

	return !memcmp(&h->t[i].hid, hid, sizeof(struct hot_id));
}

/* The entry of (id, uid, k), added if there is room; NULL if not. */
static struct hot_key *hot_get(struct hot *h, uint32_t id, uint32_t uid,
			       const struct ll_key_id *k)
{
	struct hot_id hid = {.id = id, .key = *k};
	uint32_t i = (uint32_t)h->n;
	int r = hmap_put(&h->map, &hid, &i);

	if (r < 0) {
		h->dropped++;
		return NULL;
	}
	if (r == 1)
		h->n++;
	/* New, or the id serves another limit now: from nothing. */
	if (r == 1 || h->t[i].uid != uid)
		h->t[i] = (struct hot_key){.hid = hid, .uid = uid};
	return &h->t[i];
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct hot *h = ctx;
	const struct ll_hot_event *ev = data;
	struct hot_key *e;

	if (size < sizeof(*ev) || ev->limit_id >= LL_MAX_LIMITS)
		return 0;
	h->events++;
	e = hot_get(h, ev->limit_id, ev->limit_uid, &ev->key);
	if (e && ev->ns > e->denied_ns)
		e->denied_ns = ev->ns;
	return 0;
}

int hot_open(struct hot *h, int ring_fd)
{
	int err;

	memset(h, 0, sizeof(*h));
	err = hmap_init(&h->map, sizeof(struct hot_id), HOT_MAX_LOAD, hot_eq, NULL);
	if (err)
		return err;
	/* All the room now: taking in events never allocates. */
	h->t = calloc(HOT_MAX_LOAD, sizeof(*h->t));
	if (!h->t || hmap_reserve(&h->map, HOT_MAX_LOAD)) {
		err = -ENOMEM;
	} else {
		h->rb = ring_buffer__new(ring_fd, on_event, h, NULL);
		err = h->rb ? 0 : -errno;
	}
	if (err) {
		free(h->t);
		hmap_free(&h->map);
		memset(h, 0, sizeof(*h));
	}
	return err;
}

void hot_close(struct hot *h)
{
	ring_buffer__free(h->rb);
	free(h->t);
	hmap_free(&h->map);
	memset(h, 0, sizeof(*h));
}

void hot_reconnect(struct hot *h)
{
	for (size_t i = 0; i < h->n; i++)
		h->t[i].told = 0;
}

void hot_grant_applied(struct hot *h, uint32_t id, uint32_t uid, const struct wire_grant *g)
{
	if (!h->t)
		return;
	if (g->keys_full != WIRE_KEYS_CHANGES)
		for (size_t i = 0; i < h->n; i++)
			if (h->t[i].hid.id == id)
				h->t[i].proof = (struct hot_proof){0};
	for (uint32_t i = 0; i < g->n_keys; i++) {
		const struct wire_key_grant *k = &g->keys[i];
		struct hot_id hid = {.id = id, .key = k->key};
		struct hot_key *e;

		if (k->op == WIRE_KEY_REMOVE) {
			long at = hmap_find(&h->map, &hid);

			if (at >= 0)
				h->t[at].proof = (struct hot_proof){0};
			continue;
		}
		e = hot_get(h, id, uid, &k->key);
		if (!e)
			continue; /* not tracked: not re-presented either */
		e->proof = (struct hot_proof){
		    .epoch = g->epoch, .seq = g->seq, .rate = k->rate, .burst = k->burst};
		memcpy(e->proof.tag, k->tag, sizeof(e->proof.tag));
	}
}

/* Whether demand d must be told, the coordinator having told. */
static bool hot_moved(uint64_t d, uint64_t told, uint64_t contract)
{
	uint64_t tol = told / HOT_MOVE_DIV;

	if (!d || !told)
		return d != told;
	if ((d == contract) != (told == contract))
		return true;
	return d > told + tol || d + tol < told;
}

void hot_poll(struct hot *h)
{
	if (h->rb)
		ring_buffer__consume(h->rb);
}

/* The bucket's spent counter for key of limit cfg; false if it has none. */
static bool bucket_spent(struct dp *dp, const struct ll_limit_cfg *cfg,
			 const struct ll_key_id *key, uint64_t *spent)
{
	struct ll_flow_key fk = {.limit_uid = cfg->uid};
	struct ll_key k = {.limit_uid = cfg->uid,
			   .proto = key->proto,
			   .family = key->family,
			   .dport = key->dport};
	struct ll_bucket b;
	int err;

	if (cfg->key_mode == LL_KEY_FLOW) {
		memcpy((char *)&fk + sizeof(fk.limit_uid), key, sizeof(*key));
		err = bpf_map_lookup_elem_flags(dp->flow_buckets_fd, &fk, &b, BPF_F_LOCK);
	} else {
		memcpy(k.addr, key->addr, sizeof(k.addr));
		err = bpf_map_lookup_elem_flags(dp->buckets_fd, &k, &b, BPF_F_LOCK);
	}
	if (err)
		return false;
	*spent = b.spent;
	return true;
}

static bool limit_hot_capable(const struct ll_limit_cfg *c)
{
	return c->in_use && c->scope == LL_SCOPE_GLOBAL && c->key_mode != LL_KEY_NONE;
}

/* Note the per-key grants held for limit id: they are tracked (for their
 * usage) whether or not they were denied, each with its rate.
 */
static void note_grants(struct hot *h, struct dp *dp, uint32_t id, const struct ll_limit_cfg *c)
{
	struct lease_key *held = NULL;
	size_t n = 0;

	if (dp_key_grants_read(dp, c->uid, &held, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		struct hot_key *e = hot_get(h, id, c->uid, &held[i].key);

		if (e)
			e->grant = held[i].rate + 1; /* 0: no grant */
	}
	free(held);
}

/* A granted key's demand from what it spent: a little headroom so that it
 * can grow (a key that outgrows it is denied and asks for the contract),
 * not so much that its unused part strands capacity another gateway is
 * denied for: with a quarter, seven gateways at 0.1 R each held 0.875 R
 * and left the eighth, denied, 0.125 R (82% utilization).
 */
static uint64_t hot_with_headroom(uint64_t rate)
{
	return rate + rate / HOT_HEADROOM_DIV + 1;
}

/* The most a key of limit c can ask for: what it may be granted (the
 * coordinator's max-min caps it by the key's own contract).
 */
static uint64_t key_contract(const struct ll_limit_cfg *c)
{
	uint64_t rate, burst;

	lease_key_bound(c, &rate, &burst);
	return rate;
}

/* Demand of key e for this report, or 0 to leave it out. */
static uint64_t key_demand(struct dp *dp, const struct ll_limit_cfg *c, struct hot_key *e,
			   uint64_t grant_plus1, uint64_t window_ns, uint64_t now)
{
	uint64_t spent = 0, demand = 0;
	bool have = bucket_spent(dp, c, &e->hid.key, &spent);

	if (e->denied_ns && now - e->denied_ns <= window_ns)
		demand = key_contract(c);
	else if (grant_plus1 && have && e->spent_ns && spent >= e->spent && now > e->spent_ns)
		demand = hot_with_headroom((uint64_t)((unsigned __int128)(spent - e->spent) *
						       NSEC_PER_SEC / (now - e->spent_ns)));
	else if (grant_plus1 && have && !e->spent_ns)
		demand = grant_plus1 - 1; /* first look: keep what it holds */
	if (have) {
		e->spent = spent;
		e->spent_ns = now;
	}
	if (grant_plus1 && demand == 1)
		demand = 0; /* spent nothing: wants none */
	return demand < key_contract(c) ? demand : key_contract(c);
}

/* The entry key e holds, for adoption: only one it holds in the kernel,
 * set under the epoch of the share it applied.
 */
static void hot_held(struct wire_hot *w, const struct hot_key *e, uint64_t grant, uint64_t epoch)
{
	w->held_seq = w->held_rate = w->held_burst = 0;
	memset(w->held_tag, 0, sizeof(w->held_tag));
	if (!grant || !e->proof.seq || e->proof.epoch != epoch)
		return;
	w->held_seq = e->proof.seq;
	w->held_rate = e->proof.rate;
	w->held_burst = e->proof.burst;
	memcpy(w->held_tag, e->proof.tag, sizeof(w->held_tag));
}

void hot_report(struct hot *h, struct dp *dp, const struct ll_policy *pol, const int *entry_of,
		struct wire_report *r, uint64_t window_ns, uint64_t now)
{
	size_t kept = 0;

	r->n_hot = 0;
	h->reported = 0;
	if (!h->t)
		return;
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
		if (limit_hot_capable(&pol->limits[id]) && entry_of[id] >= 0)
			note_grants(h, dp, id, &pol->limits[id]);
	for (size_t i = 0; i < h->n; i++) {
		struct hot_key *e = &h->t[i];
		uint32_t id = e->hid.id;
		const struct ll_limit_cfg *c = &pol->limits[id];
		uint64_t demand, grant = e->grant;

		e->grant = 0;
		if (!limit_hot_capable(c) || c->uid != e->uid || entry_of[id] < 0)
			continue; /* the limit is gone or changed: forget the key */
		demand = key_demand(dp, c, e, grant, window_ns, now);
		if (hot_moved(demand, e->told, key_contract(c))) {
			if (r->n_hot < WIRE_MAX_HOT) {
				struct wire_hot *w = &r->hot[r->n_hot++];

				w->entry = (uint8_t)entry_of[id];
				w->key = e->hid.key;
				w->demand = demand;
				e->told = demand;
				hot_held(w, e, grant, r->e[entry_of[id]].applied_epoch);
			} else {
				h->dropped++; /* told in a later report */
			}
		}
		/* Tracked while it holds a grant, was denied lately, or the
		 * coordinator still has a demand for it.
		 */
		if (grant || (e->denied_ns && now - e->denied_ns <= window_ns) || e->told)
			h->t[kept++] = *e;
	}
	h->reported = r->n_hot;
	if (kept == h->n)
		return;
	/* Without the keys that left, in the same order: indexes again (in
	 * the slots taken at open, so the puts cannot fail).
	 */
	h->n = kept;
	hmap_clear(&h->map);
	for (uint32_t i = 0; i < kept; i++) {
		uint32_t at = i;

		hmap_put(&h->map, &h->t[i].hid, &at);
	}
}
