// SPDX-License-Identifier: MIT
/*
 * Hot keys (see hot.h). Invariants: the table never holds more than
 * HOT_CAPACITY keys; a report never lists more than WIRE_MAX_HOT; a key is
 * listed at most once per report.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/clock.h"
#include "agent/dp.h"
#include "agent/hot.h"
#include "agent/lease.h"
#include "lib/log.h"
#include "tb_math.h"

_Static_assert(LL_IS_POW2(HOT_CAPACITY), "slots are masked with HOT_CAPACITY - 1");

/* A spending key asks for 1/32 more than it spent. */
#define HOT_HEADROOM_DIV 32
/* A demand is told again once it moved by more than 1/8 of what was told. */
#define HOT_MOVE_DIV 8

/* Probe at most this far: the table is kept at most half full. */
#define HOT_MAX_LOAD (HOT_CAPACITY / 2)

static uint32_t hot_hash(uint32_t id, const struct ll_key_id *k)
{
	const uint8_t *b = (const uint8_t *)k;
	uint32_t h = 2166136261u ^ id;

	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/* The slot of (id, k), or the free slot where it would go; NULL if full. */
static struct hot_key *slot_of(struct hot_key *t, uint32_t id, const struct ll_key_id *k)
{
	uint32_t i = hot_hash(id, k) & (HOT_CAPACITY - 1);

	for (uint32_t n = 0; n < HOT_CAPACITY; n++, i = (i + 1) & (HOT_CAPACITY - 1))
		if (!t[i].used || (t[i].id == id && !memcmp(&t[i].key, k, sizeof(*k))))
			return &t[i];
	return NULL;
}

/* The entry of (id, uid, k), added if there is room; NULL if not. */
static struct hot_key *hot_get(struct hot *h, uint32_t id, uint32_t uid,
			       const struct ll_key_id *k)
{
	struct hot_key *e = slot_of(h->t, id, k);

	if (e && e->used && e->uid != uid) /* the id serves another limit now */
		*e = (struct hot_key){.used = true, .id = id, .uid = uid, .key = *k};
	if (e && e->used)
		return e;
	if (!e || h->n >= HOT_MAX_LOAD) {
		h->dropped++;
		return NULL;
	}
	*e = (struct hot_key){.used = true, .id = id, .uid = uid, .key = *k};
	h->n++;
	return e;
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
	memset(h, 0, sizeof(*h));
	h->t = calloc(HOT_CAPACITY, sizeof(*h->t));
	if (!h->t)
		return -ENOMEM;
	h->rb = ring_buffer__new(ring_fd, on_event, h, NULL);
	if (!h->rb) {
		int err = -errno;

		free(h->t);
		h->t = NULL;
		return err;
	}
	return 0;
}

void hot_close(struct hot *h)
{
	ring_buffer__free(h->rb);
	free(h->t);
	memset(h, 0, sizeof(*h));
}

void hot_reconnect(struct hot *h)
{
	for (size_t i = 0; h->t && i < HOT_CAPACITY; i++)
		h->t[i].told = 0;
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

/* The bucket's spent counter for key e of limit cfg; false if it has none. */
static bool bucket_spent(struct dp *dp, const struct ll_limit_cfg *cfg, const struct hot_key *e,
			 uint64_t *spent)
{
	struct ll_flow_key fk = {.limit_uid = e->uid};
	struct ll_key k = {.limit_uid = e->uid,
			   .proto = e->key.proto,
			   .family = e->key.family,
			   .dport = e->key.dport};
	struct ll_bucket b;
	int err;

	if (cfg->key_mode == LL_KEY_FLOW) {
		memcpy((char *)&fk + sizeof(fk.limit_uid), &e->key, sizeof(e->key));
		err = bpf_map_lookup_elem_flags(dp->flow_buckets_fd, &fk, &b, BPF_F_LOCK);
	} else {
		memcpy(k.addr, e->key.addr, sizeof(k.addr));
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
 * usage) whether or not they were denied. grant_rate gets each one's rate.
 */
static void note_grants(struct hot *h, struct dp *dp, uint32_t id, const struct ll_limit_cfg *c,
			uint64_t *grant_rate)
{
	struct lease_key *held = NULL;
	size_t n = 0;

	if (dp_key_grants_read(dp, c->uid, &held, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		struct hot_key *e = hot_get(h, id, c->uid, &held[i].key);

		if (e)
			grant_rate[e - h->t] = held[i].rate + 1; /* 0: no grant */
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
	bool have = bucket_spent(dp, c, e, &spent);

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

void hot_report(struct hot *h, struct dp *dp, const struct ll_policy *pol, const int *entry_of,
		struct wire_report *r, uint64_t window_ns, uint64_t now)
{
	uint64_t *grant_rate = calloc(HOT_CAPACITY, sizeof(*grant_rate));
	struct hot_key *keep = calloc(HOT_CAPACITY, sizeof(*keep));
	size_t kept = 0;

	r->n_hot = 0;
	h->reported = 0;
	if (!h->t || !grant_rate || !keep)
		goto out;
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
		if (limit_hot_capable(&pol->limits[id]) && entry_of[id] >= 0)
			note_grants(h, dp, id, &pol->limits[id], grant_rate);
	for (size_t i = 0; i < HOT_CAPACITY; i++) {
		struct hot_key *e = &h->t[i];
		const struct ll_limit_cfg *c = &pol->limits[e->id];
		uint64_t demand;

		if (!e->used || !limit_hot_capable(c) || c->uid != e->uid || entry_of[e->id] < 0)
			continue; /* the limit is gone or changed: forget the key */
		demand = key_demand(dp, c, e, grant_rate[i], window_ns, now);
		if (hot_moved(demand, e->told, key_contract(c))) {
			if (r->n_hot < WIRE_MAX_HOT) {
				struct wire_hot *w = &r->hot[r->n_hot++];

				w->entry = (uint8_t)entry_of[e->id];
				w->key = e->key;
				w->demand = demand;
				e->told = demand;
			} else {
				h->dropped++; /* told in a later report */
			}
		}
		/* Tracked while it holds a grant, was denied lately, or the
		 * coordinator still has a demand for it.
		 */
		if (grant_rate[i] || (e->denied_ns && now - e->denied_ns <= window_ns) || e->told)
			keep[kept++] = *e;
	}
	h->reported = r->n_hot;
	/* Rebuild without the keys that left. */
	memset(h->t, 0, HOT_CAPACITY * sizeof(*h->t));
	h->n = 0;
	for (size_t i = 0; i < kept; i++) {
		struct hot_key *e = slot_of(h->t, keep[i].id, &keep[i].key);

		if (e) {
			*e = keep[i];
			h->n++;
		}
	}
out:
	free(grant_rate);
	free(keep);
}
