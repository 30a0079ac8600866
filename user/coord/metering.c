// SPDX-License-Identifier: MIT
/*
 * Metered limits on the coordinator's side of the usage ledger
 * (usage_ledger.h): its writer thread (usage_writer.h) started, and told
 * after a reload which limits are metered; a report's metered totals handed
 * to it, their grants held until it commits; METER batches of per-key
 * totals checked and queued; and, from its eventfd, what it is done with
 * answered (acks, the held grants).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "coord/coord_int.h"
#include "coord/hotkeys.h"
#include "lib/log.h"
#include "coord/state.h"
#include "coord/usage_ledger.h"
#include "coord/usage_writer.h"
#include "lib/wire.h"

/* What the writer's queue may hold (jobs queued and in the open group): 64
 * MiB, about 1,300 full METER batches (8 s of 8 gateways x 100k keys per
 * 10 s). Beyond it a batch is answered RETRY and a report's metered
 * limits get no grant: the agent sends them again.
 */
#define COORD_WRITER_MAX_BYTES (64u << 20)

/* The queue's bound: COORD_WRITER_MAX_BYTES, or less when
 * LEASELINE_LEDGER_QUEUE_BYTES (tests only) says so.
 */
static size_t usage_queue_bytes(void)
{
	const char *v = getenv("LEASELINE_LEDGER_QUEUE_BYTES");
	unsigned long long b = v && *v ? strtoull(v, NULL, 10) : 0;

	return b && b < COORD_WRITER_MAX_BYTES ? (size_t)b : COORD_WRITER_MAX_BYTES;
}

/* The usage ledger's file: ledger: in coord.yaml, else state-dir/ledger.db. */
static void usage_ledger_path(const struct coord *co, char *buf, size_t len)
{
	if (co->cfg.ledger_path[0])
		snprintf(buf, len, "%s", co->cfg.ledger_path);
	else
		snprintf(buf, len, "%s/ledger.db", co->cfg.state_dir);
}

/* The usage ledger's writer thread: started at start, the ledger opened
 * here first when a limit is metered (it cannot be opened, or which limits
 * are metered cannot be recorded: the coordinator does not start). After a
 * reload the writer records the limits metered then before its next job
 * (opening the ledger if none was; failing, its jobs fail and it tries
 * again with the next). 0 or -errno.
 */
int usage_ledger_ensure(struct coord *co)
{
	char path[CFG_PATH_LEN + 16], where[256];
	const char *names[LL_MAX_LIMITS];
	struct uledger *lg = NULL;
	struct uwriter *w;
	size_t n = 0;
	int err;

	for (uint32_t l = 0; l < co->n_limits; l++)
		if (co->lim[l].meter)
			names[n++] = co->lim[l].name;
	if (co->uw) {
		uwriter_set_metered(co->uw, names, n);
		return 0;
	}
	usage_ledger_path(co, path, sizeof(path));
	if (n) {
		err = uledger_open(&lg, path);
		if (err) {
			pr_warn("cannot open the usage ledger '%s': %s\n",
				uledger_where(path, where, sizeof(where)), strerror(-err));
			return err;
		}
		pr_info("usage ledger '%s' open\n", uledger_where(path, where, sizeof(where)));
		/* When each limit's metering began (agents older than that
		 * report totals that were not metered), and which ended.
		 */
		err = uledger_set_metered(lg, names, n, uledger_now());
		if (err) {
			pr_warn("usage ledger: cannot record which limits are metered: %s\n",
				strerror(-err));
			uledger_close(lg);
			return err;
		}
	}
	err = uwriter_start(&w, lg, path, co->cfg.ledger_retention_s, co->cfg.ledger_series_quota,
			    usage_queue_bytes(), co->cfg.gateways);
	if (err) {
		pr_warn("cannot start the usage ledger's writer: %s\n", strerror(-err));
		uledger_close(lg);
		return err;
	}
	/* At start, without the state lock: the metrics thread reads co->uw. */
	pthread_mutex_lock(&co->lock);
	co->uw = w;
	pthread_mutex_unlock(&co->lock);
	if (epoll_ctl(co->ep, EPOLL_CTL_ADD, uwriter_fd(co->uw),
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = EP_USAGE}))
		return -errno;
	return 0;
}

void lease_note(struct cholder_limit *hl, uint64_t rate, uint64_t burst)
{
	if (!hl->lease_seen)
		return;
	if (rate > hl->lease_rate_max)
		hl->lease_rate_max = rate;
	if (burst > hl->lease_burst_max)
		hl->lease_burst_max = burst;
}

void lease_gone(struct coord *co, int hi)
{
	struct lease_gone *g = &co->gone[co->gone_next];

	co->gone_lost |= g->name[0] != 0;
	snprintf(g->name, sizeof(g->name), "%s", co->h[hi].name);
	g->lease_end_ns = co->h[hi].lease_end_ns;
	co->gone_next = (co->gone_next + 1) % co->cfg.gateways;
}

void meter_note(struct cholder_limit *hl, uint64_t rate, uint64_t burst)
{
	if (rate > hl->meter_rate_max)
		hl->meter_rate_max = rate;
	if (burst > hl->meter_burst_max)
		hl->meter_burst_max = burst;
}

void lease_slot_taken(struct coord *co, int hi, uint64_t now)
{
	uint64_t until = co->quiet_until;
	bool found = false;

	for (uint32_t i = 0; i < co->cfg.gateways; i++) {
		const struct lease_gone *g = &co->gone[i];

		if (g->name[0] && !strcasecmp(g->name, co->h[hi].name)) {
			found = true;
			if (g->lease_end_ns > until)
				until = g->lease_end_ns;
		}
	}
	/* Forgotten (more slots given up than remembered): a slot it held was
	 * given up before this one was taken, with every grant of it dead.
	 */
	if (!found && co->gone_lost && now > until)
		until = now;
	for (uint32_t l = 0; l < co->n_limits; l++)
		holder_lim(co, hi, l)->known_since_ns = until;
	/* In the quiet period it may spend grants nobody here saw: the
	 * contract bounds its reports until one is committed after it.
	 */
	if (now < co->quiet_until)
		return;
	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct cholder_limit *hl = holder_lim(co, hi, l);

		hl->lease_seen = true;
		hl->lease_rate_max = hl->lease_burst_max = 0;
		hl->contract_until_ns = until;
	}
}

/* What bounds the admitted figure of holder hi's report entry for limit c
 * (a limit without a key): the most it held since its last report was
 * committed to the ledger (what it held then, lease_committed, and every
 * share since, lease_note: so at least what it holds now). Before a first
 * commit in this run, or while it may hold grants this run never saw: the
 * contract; and after a slot take (lease_slot_taken), the contract up to
 * when such grants were dead, its lease after.
 */
/* The bound of what a holder's own grants (rate, burst: the most it was
 * given) let pass, and, for the time before since_ns (0: none; < now), the
 * contract `before` instead (uledger_contract.pre). Shared by reports
 * (lease_bound) and METER batches (meter_contracts).
 */
static struct uledger_contract grants_bound(const struct coord *co, uint64_t rate,
					    uint64_t burst, const struct uledger_contract *before,
					    uint64_t since_ns, uint64_t now)
{
	struct uledger_contract b = {
	    .rate = rate,
	    .burst = burst,
	    .bytes = before->bytes,
	    .lease = true,
	    .backlog_s = (uint32_t)((co->cfg.ttl_ns + NSEC_PER_SEC - 1) / NSEC_PER_SEC) +
			 ULEDGER_LEASE_SLACK_S};

	if (since_ns) {
		/* Whole seconds down: the contract's part is never shorter. */
		uint64_t ago = (now - since_ns) / NSEC_PER_SEC;

		b.pre = true;
		b.pre_rate = before->rate;
		b.pre_burst = before->burst;
		b.pre_ago_s = (uint32_t)(ago < ULEDGER_BACKLOG_S ? ago : ULEDGER_BACKLOG_S);
	}
	return b;
}

static struct uledger_contract lease_bound(const struct coord *co, int hi,
					   const struct climit *c, uint64_t now)
{
	const struct cholder_limit *hl = holder_lim(co, hi, (uint32_t)(c - co->lim));
	const struct uledger_contract contract = {.rate = c->rate, .burst = c->burst};

	if (!hl->lease_seen || (hl->contract_until_ns && hl->contract_until_ns >= now))
		return contract;
	return grants_bound(co, hl->lease_rate_max, hl->lease_burst_max, &contract,
			    hl->contract_until_ns, now);
}

/* A report of holder hi committed: the next one's bound starts from what
 * the holder holds now. Until then (a batch that failed, or still at the
 * writer) the most granted since the last commit stands. In a quiet period
 * the holder may still spend a grant of an earlier run this one never
 * saw, unless it proved what it holds (adopted): until the quiet period
 * ends, the contract bounds it.
 */
static void lease_committed(struct coord *co, int hi, struct climit *c, uint64_t now)
{
	struct cholder_limit *hl = holder_lim(co, hi, (uint32_t)(c - co->lim));

	hl->lease_seen = now >= co->quiet_until || hl->adopted;
	hl->contract_until_ns = 0;
	if (!hl->lease_seen)
		return;
	hl->lease_rate_max = ledger_committed_rate(&c->led, (size_t)hi, now);
	hl->lease_burst_max = ledger_committed_burst(&c->led, (size_t)hi, now);
}

/* The metered entries of a report go to the writer, one transaction of the
 * usage ledger (usage_ledger.h); their grants wait for its commit
 * (usage_done). Reports closer than COORD_USAGE_MIN_INTERVAL_NS to the
 * last one recorded for the holder are skipped: their totals are absolute,
 * so the next one recorded carries them (no fsync storm from a fast peer).
 * While one is at the writer, the holder's later reports get no grant for
 * their metered limits either: the grant on that commit answers them. A
 * batch that cannot be written (or queued) gets no grant for its metered
 * limits, as the usage log does: the holder reports the same totals again.
 */
void record_metered(struct coord *co, struct cholder *h, int ci, int hi,
		    const struct wire_report *r, struct climit *const *cl, bool *recorded,
		    uint64_t now)
{
	struct uw_job *j;
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->n; i++)
		if (cl[i] && cl[i]->meter)
			n++;
	if (!n)
		return;
	if (h->uledger_busy)
		goto held;
	if (h->uledger_ns && now - h->uledger_ns < COORD_USAGE_MIN_INTERVAL_NS)
		return;
	j = co->uw ? uw_job_new(UW_REPORT, n) : NULL;
	if (!j)
		goto failed;
	j->ci = ci;
	j->hi = hi;
	j->arrival_ns = now;
	j->now_s = uledger_now();
	snprintf(j->holder, sizeof(j->holder), "%s", h->name);
	j->incarnation = h->incarnation;
	j->ident = h->counters_ident;
	j->seq = r->seq;
	for (uint32_t i = 0; i < r->n; i++) {
		struct uw_rentry *e;

		if (!cl[i] || !cl[i]->meter)
			continue;
		e = &j->re[j->n++];
		snprintf(e->limit, sizeof(e->limit), "%s", cl[i]->name);
		e->t.admitted = r->e[i].admitted;
		e->t.denied = r->e[i].denied;
		e->t.fallback = r->e[i].fallback;
		e->t.bypass = r->e[i].bypass;
		/* A limit with a key sums its keys here: only the line rate. */
		if (!cl[i]->hot.on)
			e->c = lease_bound(co, hi, cl[i], now);
	}
	if (uwriter_submit(co->uw, j)) {
		free(j);
		co->usage_full++;
		goto failed;
	}
	h->uledger_busy = true;
	goto held;
failed:
	co->usage_failures++;
	pr_debug("usage of '%s' not recorded: the usage ledger's writer is busy (or none); no "
		 "grant for its metered limits until it is\n",
		 h->name);
held:
	for (uint32_t i = 0; i < r->n; i++)
		if (cl[i] && cl[i]->meter)
			recorded[i] = false;
}

/* ---- per-key usage (METER) ---- */

static void meter_ack(struct coord *co, int ci, uint64_t ident, uint64_t seq, uint8_t status)
{
	struct wire_msg *m = co->out;

	WIRE_MSG_CLEAR(m, meter_ack);
	m->type = WIRE_METER_ACK;
	m->meter_ack.ident = ident;
	m->meter_ack.seq = seq;
	m->meter_ack.status = status;
	if (status == WIRE_METER_RECORDED)
		co->meter_recorded++;
	else if (status == WIRE_METER_RETRY)
		co->meter_retry++;
	else
		co->meter_refused++;
	send_msg(co, ci, m);
}

static const struct cfg_limit *policy_limit_named(const struct coord *co, const char *name)
{
	for (uint32_t i = 0; co->pol && i < co->pol->n_limits; i++)
		if (!strcmp(co->pol->limits[i].name, name))
			return &co->pol->limits[i];
	return NULL;
}

static bool zeroes(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* A key as the limit's key mode builds it (fields it does not use zero; a
 * family the address can have) or the limit's overflow key: anything else
 * would make a series of its own for the same key and count it twice.
 */
static bool meter_key_ok(const struct cfg_limit *l, const struct ll_key_id *k)
{
	bool v4 = k->family == 4 && !k->addr[0] && !k->addr[1] && k->addr[2] == htonl(0xffff),
	     fam = v4 || k->family == 6;

	if (k->pad0)
		return false;
	if (k->family == LL_OVERFLOW_FAMILY)
		return !k->proto && !k->dport && !k->sport && zeroes(k->addr, sizeof(k->addr)) &&
		       zeroes(k->addr2, sizeof(k->addr2));
	switch (l->key_mode) {
	case LL_KEY_SRC_IP:
	case LL_KEY_DST_IP:
		return fam && !k->proto && !k->dport && !k->sport &&
		       zeroes(k->addr2, sizeof(k->addr2));
	case LL_KEY_DST_PORT:
		return !k->family && !k->sport && zeroes(k->addr, sizeof(k->addr)) &&
		       zeroes(k->addr2, sizeof(k->addr2));
	case LL_KEY_FLOW:
		return fam && (k->family == 6 ||
			       (!k->addr2[0] && !k->addr2[1] && k->addr2[2] == htonl(0xffff)));
	default:
		return false;
	}
}

static bool meter_totals_ok(const struct wire_meter_entry *e)
{
	for (int c = 0; c < LL_METER_CLASSES; c++)
		if (e->pkts[c] > ULEDGER_TOTAL_MAX || e->bytes[c] > ULEDGER_TOTAL_MAX)
			return false;
	return true;
}

/* What bounds each key's admitted figure in the ledger: the limit's
 * contract, or its override's (a pinned key's lease plus the reserve) when
 * that is larger; and from when this run knows every grant holder hi could
 * spend (known_since_ns), the most it was granted of the limit or of a key
 * in this slot (meter_note), as a lease bounds a report.
 */
static void meter_contracts(const struct coord *co, const struct cfg_limit *l, int hi,
			    uint64_t now, struct uw_job *j)
{
	const struct climit *c = limit_by_name((struct coord *)co, l->name);
	const struct cholder_limit *hl = c ? holder_lim(co, hi, (uint32_t)(c - co->lim)) : NULL;
	bool lease = hl && hl->known_since_ns && now > hl->known_since_ns;

	for (uint32_t i = 0; i < j->n; i++) {
		struct uledger_contract *k = &j->kc[i];
		int idx = c ? hotkeys_find(&c->hot, &j->ke[i].key) : -1;

		*k = (struct uledger_contract){
		    .rate = l->rate, .burst = l->burst, .bytes = l->unit == LL_UNIT_BYTES};
		if (idx >= 0 && c->hot.k[idx].pinned) {
			uint64_t r = c->hot.k[idx].led.rate + c->reserve_rate,
				 b = c->hot.k[idx].led.burst + c->reserve_burst;

			k->rate = r > k->rate ? r : k->rate;
			k->burst = b > k->burst ? b : k->burst;
		}
		if (lease)
			*k = grants_bound(co, hl->meter_rate_max, hl->meter_burst_max, k,
					  hl->known_since_ns, now);
	}
}

/* A batch of one metered limit's per-key totals: checked here, copied to
 * the writer, which adds it to its group's transaction and hands it back
 * once that commits (usage_done sends the ack then). Not metered here:
 * refused (the agent drops it). The writer's queue full: RETRY (the agent
 * sends it again). Admission never waits for any of it.
 */
void on_meter(struct coord *co, int ci, const struct wire_meter *mt, uint64_t now)
{
	int hi = co->conns[ci]->holder;
	const struct cfg_limit *l;
	struct uw_job *j;

	if (hi < 0 || strcmp(co->h[hi].name, mt->holder) ||
	    co->h[hi].incarnation != mt->incarnation) {
		co->protocol_errors++;
		conn_drop(co, ci, "meter batch from a holder that did not say hello");
		return;
	}
	l = policy_limit_named(co, mt->limit);
	if (!l || !l->meter || l->scope != LL_SCOPE_GLOBAL || l->key_mode == LL_KEY_NONE ||
	    !mt->ident) {
		meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_REFUSED);
		return;
	}
	/* A series is the holder's under the counters identity its HELLO
	 * gave: another one would count its keys again from 0.
	 */
	if (mt->ident != co->h[hi].counters_ident) {
		co->usage_forged++;
		pr_warn("meter batch %llu of '%s' names counters identity %016llx, its hello "
			"%016llx: refused\n",
			(unsigned long long)mt->seq, mt->holder, (unsigned long long)mt->ident,
			(unsigned long long)co->h[hi].counters_ident);
		meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_REFUSED);
		return;
	}
	for (uint32_t i = 0; i < mt->n; i++) {
		bool totals_ok = meter_totals_ok(&mt->e[i]);

		if (!meter_key_ok(l, &mt->e[i].key) || !totals_ok) {
			co->protocol_errors++;
			co->usage_forged += !totals_ok;
			pr_warn("meter batch %llu of '%s' (limit '%s') names a malformed key or "
				"a total above 2^62: refused\n",
				(unsigned long long)mt->seq, mt->holder, mt->limit);
			meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_REFUSED);
			return;
		}
	}
	j = co->uw && mt->n <= WIRE_MAX_METER ? uw_job_new(UW_KEYS, mt->n) : NULL;
	if (!j) {
		meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_RETRY);
		return;
	}
	j->ci = ci;
	j->hi = hi;
	j->arrival_ns = now;
	j->now_s = uledger_now();
	snprintf(j->holder, sizeof(j->holder), "%s", mt->holder);
	j->incarnation = mt->incarnation;
	j->ident = mt->ident;
	j->seq = mt->seq;
	snprintf(j->limit, sizeof(j->limit), "%s", mt->limit);
	j->limit_uid = mt->limit_uid;
	j->key_mode = l->key_mode;
	j->prefix_v4 = l->prefix_v4;
	j->prefix_v6 = l->prefix_v6;
	j->n = mt->n;
	memcpy(j->ke, mt->e, mt->n * sizeof(mt->e[0]));
	meter_contracts(co, l, hi, now, j);
	if (uwriter_submit(co->uw, j)) {
		free(j);
		co->usage_full++;
		meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_RETRY);
	}
}

/* The jobs the writer is done with: a METER batch's ack (recorded only
 * once committed; refused: its identity pruned; else sent again), a
 * report's grants of its metered limits (committed: granted now; not: none,
 * the holder reports the same totals again). Nothing for a connection or
 * incarnation that went meanwhile.
 */
void usage_done(struct coord *co)
{
	struct uw_job *j = uwriter_done(co->uw);
	uint64_t now = clock_now_ns();

	while (j) {
		struct uw_job *next = j->next;
		struct cholder *h = &co->h[j->hi];
		bool live = co->conns[j->ci] && co->conns[j->ci]->holder == j->hi &&
			    h->incarnation == j->incarnation && !strcmp(h->name, j->holder);

		if (j->kind == UW_KEYS) {
			if (live)
				meter_ack(co, j->ci, j->ident, j->seq,
					  !j->err	      ? WIRE_METER_RECORDED
					  : j->err == -ESTALE ? WIRE_METER_REFUSED
							      : WIRE_METER_RETRY);
		} else {
			h->uledger_busy = false;
			if (j->err) {
				co->usage_failures++;
				pr_warn(
				    "cannot record usage of '%s' in the usage ledger: %s; no grant "
				    "for its metered limits until it can\n",
				    j->holder, strerror(-j->err));
			} else if (live) {
				h->uledger_ns = j->arrival_ns;
			}
			for (uint32_t i = 0; !j->err && i < j->n; i++) {
				struct climit *c = limit_by_name(co, j->re[i].limit);

				if (c && !c->hot.on && !strcmp(h->name, j->holder))
					lease_committed(co, j->hi, c, now);
				if (!c || !c->meter || !live)
					continue;
				check_invariant(co, c, now);
				if (grant_allowed(co, j->hi, c, now) && co->conns[j->ci])
					grant_one(co, j->ci, j->hi, c, h->report_seq, now);
			}
		}
		if (live)
			conn_watch(co, j->ci); /* what did not fit in the socket: EPOLLOUT */
		free(j);
		j = next;
	}
}
