// SPDX-License-Identifier: MIT
/*
 * Per-key usage reports, the agent's side (see meter.h). Entries live in a
 * dense array (their index is stable until a compaction, which runs only
 * with nothing queued or in flight: batches and the queue name entries by
 * index), an index (lib/hashmap.h, keyed with a random seed: packets choose
 * the keys) finds a series' entry. A series is a kernel entry: its key and
 * when it was made (ll_meter.born).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "lib/conn.h"
#include "agent/dp.h"
#include "lib/log.h"
#include "agent/meter.h"

/* What the index is keyed by: a series. */
struct meter_series {
	struct ll_flow_key key;
	uint32_t pad; /* 0: every byte is hashed */
	uint64_t born;
};

_Static_assert(sizeof(struct meter_series) == sizeof(struct ll_flow_key) + 4 + 8,
	       "a meter_series has no padding but pad");

/* Whether tab[i] is series key (the index's eq). */
static bool series_eq(const struct hmap *idx, const void *key, uint32_t i)
{
	const struct meter *m = HMAP_OWNER(idx, struct meter, idx);
	const struct meter_series *s = key;

	return m->tab[i].cur.born == s->born && !memcmp(&m->tab[i].key, &s->key, sizeof(s->key));
}

/* Index every entry of tab again, in a table sized for them (a compaction
 * moved them). Out of memory, the next ent_of tries again.
 */
static int idx_build(struct meter *m)
{
	hmap_free(&m->idx);
	m->idx_stale = true;
	if (hmap_reserve(&m->idx, (uint32_t)m->used))
		return -ENOMEM;
	for (uint32_t i = 0; i < m->used; i++) {
		struct meter_series s = {.key = m->tab[i].key, .born = m->tab[i].cur.born};
		uint32_t at = i;

		hmap_put(&m->idx, &s, &at); /* room reserved: cannot fail */
	}
	m->idx_stale = false;
	return 0;
}

/* The entry of series (k, born), made if new; -1 without memory. */
static long ent_of(struct meter *m, const struct ll_flow_key *k, uint64_t born)
{
	struct meter_series s = {.key = *k, .born = born};
	uint32_t at = (uint32_t)m->used;
	long e;

	if (m->idx_stale && idx_build(m))
		return -1;
	e = hmap_find(&m->idx, &s);
	if (e >= 0)
		return e;
	if (m->used == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 1024;
		void *t = realloc(m->tab, cap * sizeof(*m->tab));

		if (!t)
			return -1;
		m->tab = t;
		m->cap = cap;
	}
	memset(&m->tab[m->used], 0, sizeof(m->tab[0]));
	m->tab[m->used].key = s.key; /* k may have been in the old tab (retire) */
	m->tab[m->used].cur.born = born;
	m->tab[m->used].acked.born = born;
	if (hmap_put(&m->idx, &s, &at) < 0)
		return -1;
	return (long)m->used++;
}

int meter_init(struct meter *m)
{
	int err;

	memset(m, 0, sizeof(*m));
	err = hmap_init(&m->idx, sizeof(struct meter_series), HMAP_MAX_ENTRIES, series_eq, NULL);
	if (err)
		return err;
	m->ring = calloc(METER_INFLIGHT, sizeof(*m->ring));
	m->queue = malloc(METER_MAX_QUEUE * sizeof(*m->queue));
	m->max_queue = METER_MAX_QUEUE;
	return m->ring && m->queue ? 0 : -ENOMEM;
}

void meter_free(struct meter *m)
{
	free(m->tab);
	hmap_free(&m->idx);
	free(m->queue);
	free(m->ring);
	memset(m, 0, sizeof(*m));
}

void meter_reconnect(struct meter *m)
{
	for (size_t i = 0; i < m->used; i++)
		m->tab[i].sent_seq = 0;
	for (size_t i = 0; i < METER_INFLIGHT; i++)
		m->ring[i].seq = 0;
	m->n_queue = m->q_next = 0;
	m->next_scan_ns = 0; /* the next step scans */
}

static bool same(const struct ll_meter *a, const struct ll_meter *b)
{
	return !memcmp(a, b, sizeof(*a));
}

static int cmp_uid(const void *a, const void *b, void *arg)
{
	const struct meter *m = arg;
	uint32_t x = m->tab[*(const uint32_t *)a].key.limit_uid,
		 y = m->tab[*(const uint32_t *)b].key.limit_uid;

	return x < y ? -1 : x > y;
}

/* Batches without an ack for too long: their keys are pending again. */
static void expire(struct meter *m, uint64_t now)
{
	for (size_t i = 0; i < METER_INFLIGHT; i++) {
		struct meter_batch *b = &m->ring[i];

		if (!b->seq || now - b->sent_ns < METER_ACK_TIMEOUT_NS)
			continue;
		for (uint32_t j = 0; j < b->n; j++)
			if (m->tab[b->idx[j]].sent_seq == b->seq)
				m->tab[b->idx[j]].sent_seq = 0;
		b->seq = 0;
		m->timed_out++;
	}
}

static bool in_flight(const struct meter *m)
{
	if (m->q_next < m->n_queue)
		return true;
	for (size_t i = 0; i < METER_INFLIGHT; i++)
		if (m->ring[i].seq)
			return true;
	return false;
}

/* Drop the entries of retired series whose last totals were acknowledged:
 * only with nothing queued or in flight (indexes change).
 */
static void compact(struct meter *m)
{
	size_t w = 0;

	if (in_flight(m))
		return;
	for (size_t i = 0; i < m->used; i++) {
		if (m->tab[i].retired && same(&m->tab[i].cur, &m->tab[i].acked))
			continue;
		m->tab[w++] = m->tab[i];
	}
	if (w == m->used)
		return;
	m->used = w;
	idx_build(m); /* out of memory: rebuilt on the next ent_of */
}

/* Retire (delete from ll_meter) an idle series whose totals were all
 * acknowledged. What a packet added between the read and the delete is in
 * the totals the delete returns: they are sent as the series' last.
 */
static void retire(struct meter *m, struct dp *dp, struct meter_ent *me, struct ll_meter *pc)
{
	struct ll_meter last = {0};

	int err = dp_meter_delete(dp, &me->key, pc);

	if (err) {
		errno = -err;
		if (errno == EINVAL || errno == ENOTSUP || errno == EOPNOTSUPP)
			m->no_retire = true; /* a kernel without it: entries stay */
		return;
	}
	for (unsigned int c = 0; c < dp->ncpus; c++) {
		for (int i = 0; i < LL_METER_CLASSES; i++) {
			last.pkts[i] += pc[c].pkts[i];
			last.bytes[i] += pc[c].bytes[i];
		}
		last.born = pc[c].born > last.born ? pc[c].born : last.born;
	}
	if (last.born != me->cur.born) {
		/* Not the series we read (it went and the key came back): the
		 * one deleted is retired all the same, its totals its last.
		 */
		long e = ent_of(m, &me->key, last.born);

		if (e < 0)
			return;
		me = &m->tab[e];
	}
	me->cur = last;
	me->retired = true;
	m->retired++;
}

/* Read ll_meter; queue the series of limits in the policy whose totals are
 * not what was acknowledged and that are not in flight; retire idle ones
 * when the map is more than half full.
 */
static void scan(struct meter *m, struct dp *dp, const struct ll_policy *pol, uint64_t now)
{
	/* Pressure is judged on the keys' part: the map's last LL_MAX_LIMITS
	 * entries are room for the overflow entries.
	 */
	uint32_t cap = dp->meter_capacity > LL_MAX_LIMITS ? dp->meter_capacity - LL_MAX_LIMITS : 0;
	struct ll_meter *pc = calloc(dp->ncpus, sizeof(*pc));
	struct ll_flow_key *k = NULL;
	struct ll_meter *v = NULL;
	size_t n = 0;
	int err = pc ? dp_meter_read(dp, &k, &v, &n) : -ENOMEM;
	bool pressed = n > cap / 2 && !m->no_retire;

	m->n_queue = m->q_next = 0;
	m->scans++;
	if (err) {
		pr_warn("cannot read ll_meter: %s\n", strerror(-err));
		free(pc);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct meter_ent *me;
		bool known = false;
		long e;

		for (uint32_t id = 0; id < LL_MAX_LIMITS && !known; id++)
			known = pol->limits[id].in_use && pol->limits[id].uid == k[i].limit_uid &&
				(pol->limits[id].flags & LL_LIM_METER);
		if (!known) {
			/* A limit no longer metered (or gone): under pressure
			 * its entries go; metered again, its keys start anew.
			 */
			if (pressed)
				dp_meter_delete(dp, &k[i], NULL);
			continue;
		}
		e = ent_of(m, &k[i], v[i].born);
		if (e < 0)
			break;
		me = &m->tab[e];
		me->seen = m->scans;
		if (me->sent_seq || me->retired)
			continue; /* in flight (its ack decides), or already gone */
		if (!same(&me->cur, &v[i])) {
			me->cur = v[i];
			me->changed_ns = now;
		} else if (!me->changed_ns) {
			me->changed_ns = now; /* first seen by this agent */
		}
		if (pressed && k[i].family != LL_OVERFLOW_FAMILY && same(&me->cur, &me->acked) &&
		    now - me->changed_ns >= METER_IDLE_NS) {
			retire(m, dp, me, pc);
			me = &m->tab[e]; /* retire may have grown the table */
		}
		if (same(&me->cur, &me->acked))
			continue;
		if (m->n_queue >= m->max_queue) {
			m->carried++;
			continue;
		}
		m->queue[m->n_queue++] = (uint32_t)e;
	}
	/* Retired series whose last totals are not acknowledged yet. */
	for (size_t e = 0; e < m->used && m->n_queue < m->max_queue; e++) {
		struct meter_ent *me = &m->tab[e];

		if (me->retired && me->seen != m->scans && !me->sent_seq &&
		    !same(&me->cur, &me->acked))
			m->queue[m->n_queue++] = (uint32_t)e;
	}
	qsort_r(m->queue, m->n_queue, sizeof(m->queue[0]), cmp_uid, m);
	free(k);
	free(v);
	free(pc);
}

static int limit_of_uid(const struct ll_policy *pol, uint32_t uid)
{
	for (int id = 0; id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use && pol->limits[id].uid == uid)
			return id;
	return -1;
}

void meter_step(struct meter *m, struct dp *dp, struct conn *c, struct wire_msg *out,
		const char *holder, uint64_t incarnation, uint64_t now)
{
	struct ll_policy *pol = NULL;

	expire(m, now);
	if (now >= m->next_scan_ns && m->q_next >= m->n_queue) {
		pol = calloc(1, sizeof(*pol));
		if (!pol || dp_policy_read(dp->policy_fd, dp->state_fd, pol))
			goto out;
		compact(m);
		m->next_scan_ns = now + METER_PERIOD_NS;
		scan(m, dp, pol, now);
	}
	/* Send while the output has room for a frame beside a report. */
	while (m->q_next < m->n_queue &&
	       c->out_len + 2 * (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD) <= CONN_MAX_OUT) {
		struct wire_meter *mt = &out->meter;
		uint32_t uid = m->tab[m->queue[m->q_next]].key.limit_uid;
		struct meter_batch *b;
		int id;

		if (!pol) {
			pol = calloc(1, sizeof(*pol));
			if (!pol || dp_policy_read(dp->policy_fd, dp->state_fd, pol))
				goto out;
		}
		b = &m->ring[(m->seq + 1) % METER_INFLIGHT];
		if (b->seq)
			break; /* METER_INFLIGHT batches unanswered: wait */
		id = limit_of_uid(pol, uid);
		WIRE_MSG_CLEAR(out, meter.n);
		out->type = WIRE_METER;
		snprintf(mt->holder, sizeof(mt->holder), "%s", holder);
		mt->incarnation = incarnation;
		mt->ident = dp->meter_ident;
		mt->seq = ++m->seq;
		mt->limit_uid = uid;
		if (id >= 0)
			snprintf(mt->limit, sizeof(mt->limit), "%s", pol->limits[id].name);
		b->n = 0;
		while (m->q_next < m->n_queue && mt->n < WIRE_MAX_METER) {
			uint32_t e = m->queue[m->q_next];
			struct meter_ent *me = &m->tab[e];
			struct wire_meter_entry *we = &mt->e[mt->n];

			if (me->key.limit_uid != uid)
				break;
			m->q_next++;
			if (id < 0)
				continue; /* its limit left the policy meanwhile */
			memcpy(&we->key, (const uint8_t *)&me->key + sizeof(me->key.limit_uid),
			       sizeof(we->key));
			we->born = me->cur.born;
			memcpy(we->pkts, me->cur.pkts, sizeof(me->cur.pkts));
			memcpy(we->bytes, me->cur.bytes, sizeof(me->cur.bytes));
			me->sent_seq = mt->seq;
			b->idx[b->n++] = e;
			mt->n++;
		}
		if (!mt->n)
			continue;
		b->seq = mt->seq;
		b->sent_ns = now;
		m->batches++;
		m->keys_sent += mt->n;
		if (conn_send(c, out)) {
			/* The link is going down: what was queued goes next time. */
			for (uint32_t j = 0; j < b->n; j++)
				m->tab[b->idx[j]].sent_seq = 0;
			b->seq = 0;
			break;
		}
	}
out:
	free(pol);
}

void meter_on_ack(struct meter *m, uint64_t ident, const struct wire_meter_ack *a)
{
	struct meter_batch *b = &m->ring[a->seq % METER_INFLIGHT];

	if (a->ident != ident || !a->seq || b->seq != a->seq)
		return; /* of another identity, or already settled */
	for (uint32_t j = 0; j < b->n; j++) {
		struct meter_ent *me = &m->tab[b->idx[j]];

		if (me->sent_seq != a->seq)
			continue;
		me->sent_seq = 0;
		/* Refused: the coordinator does not meter it; sending it again
		 * would not change that (a new policy will).
		 */
		if (a->status != WIRE_METER_RETRY)
			me->acked = me->cur;
	}
	if (a->status == WIRE_METER_RECORDED)
		m->keys_acked += b->n;
	else if (a->status == WIRE_METER_RETRY)
		m->retried++;
	else
		m->refused++;
	b->seq = 0;
}
