// SPDX-License-Identifier: MIT
/*
 * A holder's session with the coordinator: its HELLO (checked against its
 * certificate and the epoch, given a slot by name) and its REPORTs, each
 * answered with a GRANT per global limit it names: durable fallback and
 * bypass totals first, then acks and demands, hot keys, and the grants
 * themselves (none during the quiet period).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>

#include "lib/monotonic.h"
#include "lib/conn.h"
#include "coord/coord_int.h"
#include "coord/grant_tag.h"
#include "coord/hotkeys.h"
#include "lib/lease_clock.h"
#include "coord/ledger.h"
#include "lib/log.h"
#include "coord/state.h"
#include "coord/usage_ledger.h"
#include "coord/store.h"
#include "coord/telemetry.h"
#include "lib/wire.h"

/* A holder slot taken or given up: its per-limit state starts at 0. */
static void holder_lim_clear(struct coord *co, int hi)
{
	if (co->hl_cap)
		memset(holder_lim(co, hi, 0), 0, co->hl_cap * sizeof(struct cholder_limit));
}

/* A disconnected holder none of whose grants can still be spent gives its
 * slot up (names made up by a stranger, or gateways gone for good, must not
 * keep real ones out). Its durable usage totals stay in the store by name.
 */
static bool holder_reclaim(struct coord *co, int hi, uint64_t now)
{
	struct cholder *h = &co->h[hi];

	if (!h->used || h->conn >= 0)
		return false;
	for (uint32_t l = 0; l < co->n_limits; l++)
		if (!ledger_holder_idle(&co->lim[l].led, (size_t)hi, now) ||
		    !hotkeys_holder_idle(&co->lim[l].hot, (size_t)hi, now))
			return false;
	pr_info("holder '%s' gone with no live grant: its slot is reused\n", h->name);
	lease_gone(co, hi);
	for (uint32_t l = 0; l < co->n_limits; l++) {
		ledger_holder_reset(&co->lim[l].led, (size_t)hi);
		hotkeys_holder_reset(&co->lim[l].hot, (size_t)hi, now);
		co->lim[l].dirty = true;
	}
	memset(h, 0, sizeof(*h));
	holder_lim_clear(co, hi);
	h->conn = -1;
	co->holders_reclaimed++;
	return true;
}

static int holder_find(struct coord *co, const char *name)
{
	uint64_t now = clock_now_ns();
	int free_slot = -1;

	for (int i = 0; i < (int)co->cfg.gateways; i++) {
		if (co->h[i].used && !strcasecmp(co->h[i].name, name))
			return i;
		if (!co->h[i].used && free_slot < 0)
			free_slot = i;
	}
	for (int i = 0; free_slot < 0 && i < (int)co->cfg.gateways; i++)
		if (holder_reclaim(co, i, now))
			free_slot = i;
	return free_slot;
}

void on_hello(struct coord *co, int ci, const struct wire_hello *m)
{
	char addr[INET6_ADDRSTRLEN];
	unsigned char cert[32];
	bool raised = false;
	struct cholder *h;
	int hi;

	/* A holder is who its certificate says: checked before the name can
	 * take a slot, replace a connection or move the epoch.
	 */
	if (!conn_peer_named(&co->conns[ci]->c, m->holder)) {
		co->tls_refused++;
		pr_warn("holder '%s' from %s refused: its certificate does not name it\n",
			m->holder, peer_str(co->conns[ci], addr, sizeof(addr)));
		conn_drop(co, ci, "certificate does not name the holder");
		return;
	}
	/* A replica that does not lead serves nobody: it names the leader. */
	if (!coord_leads(co)) {
		redirect_hello(co, ci, m->holder);
		return;
	}
	/* One certificate is one holder: another name its DNS names also
	 * match (gw-1 and gw-2 on one certificate) is refused while the first
	 * is live; names that differ only in case are one holder (DNS has no
	 * case, and holder_find compares so).
	 */
	if (conn_peer_digest(&co->conns[ci]->c, cert)) {
		for (int i = 0; i < (int)co->cfg.gateways; i++) {
			const struct cholder *o = &co->h[i];

			if (o->used && o->conn >= 0 && o->conn != ci &&
			    strcasecmp(o->name, m->holder) &&
			    !memcmp(o->cert, cert, sizeof(cert))) {
				co->tls_refused++;
				pr_warn(
				    "holder '%s' from %s refused: its certificate already serves "
				    "holder '%s'\n",
				    m->holder, peer_str(co->conns[ci], addr, sizeof(addr)),
				    o->name);
				conn_drop(co, ci, "certificate serves another holder");
				return;
			}
		}
	}
	hi = holder_find(co, m->holder);
	if (hi < 0) {
		co->refused++;
		pr_warn("holder '%s' refused: already serving %u gateways (coord.yaml gateways:)\n",
			m->holder, co->cfg.gateways);
		conn_drop(co, ci, "too many gateways");
		return;
	}
	/* The new epoch would be max_epoch_seen + 1: the bound is on that step,
	 * as the store checks it.
	 */
	if (m->max_epoch_seen > co->epoch &&
	    (m->max_epoch_seen >= LEASE_EPOCH_MAX - 1 ||
	     m->max_epoch_seen - co->epoch >= LEASE_EPOCH_STEP_MAX)) {
		co->protocol_errors++;
		pr_warn("holder '%s' claims epoch %llu, out of bounds from ours %llu: refused\n",
			m->holder, (unsigned long long)m->max_epoch_seen,
			(unsigned long long)co->epoch);
		conn_drop(co, ci, "epoch out of bounds");
		return;
	}
	if (m->max_epoch_seen > co->epoch && co->h[hi].used && co->h[hi].epoch_raised) {
		/* A holder's claim is evidence, not an order: each moves the
		 * epoch once in a run. Its connection is served under ours; its
		 * fence refuses our grants until we pass its claim, which the
		 * claim it made once already did, unless it claims more now.
		 */
		co->epoch_claims_ignored++;
		pr_warn("holder '%s' claims epoch %llu > ours %llu again: ignored (one move per "
			"holder and run)\n",
			m->holder, (unsigned long long)m->max_epoch_seen,
			(unsigned long long)co->epoch);
	} else if (m->max_epoch_seen > co->epoch) {
		/* Someone ran with a later epoch than our log knows: our state was
		 * lost. Never issue under an epoch a holder has seen surpassed.
		 * The quiet period is not restarted: every grant this process did
		 * not issue was issued before it started, and dies within the
		 * quiet period that began then.
		 */
		pr_warn("holder '%s' has seen epoch %llu > ours %llu: moving to epoch %llu\n",
			m->holder, (unsigned long long)m->max_epoch_seen,
			(unsigned long long)co->epoch, (unsigned long long)m->max_epoch_seen + 1);
		if (co->el) {
			/* Replicas: etcd's counter moves, in a transaction that
			 * checks this replica still leads; the view brings it.
			 */
			election_floor(co->el, m->max_epoch_seen);
		} else if (coord_store_bump(&co->store, m->max_epoch_seen + 1)) {
			co->store_failures++;
			pr_warn("holder '%s': cannot record epoch %llu: dropping it\n", m->holder,
				(unsigned long long)m->max_epoch_seen + 1);
			conn_drop(co, ci, "cannot record a new epoch");
			return;
		} else {
			co->epoch = co->store.epoch;
		}
		raised = true;
	}
	h = &co->h[hi];
	if (h->used && h->conn >= 0 && h->conn != ci)
		conn_drop(co, h->conn, "replaced by a new connection");
	if (!h->used) {
		memset(h, 0, sizeof(*h));
		holder_lim_clear(co, hi);
		h->used = true;
		snprintf(h->name, sizeof(h->name), "%s", m->holder);
		for (uint32_t l = 0; l < co->n_limits; l++)
			coord_store_usage_get(&co->store, h->name, co->lim[l].name,
					      &holder_lim(co, hi, l)->fallback,
					      &holder_lim(co, hi, l)->bypass);
		lease_slot_taken(co, hi, clock_now_ns());
	}
	h->epoch_raised |= raised;
	if (h->incarnation != m->incarnation)
		h->report_seq = 0;
	h->incarnation = m->incarnation;
	h->counters_ident = m->counters_ident;
	h->conn = ci;
	memcpy(h->cert, cert, sizeof(h->cert)); /* zero without TLS */
	/* What it holds of per-key grants is not known on a new connection. */
	for (uint32_t l = 0; l < co->n_limits; l++)
		hotkeys_holder_connect(&co->lim[l].hot, (size_t)hi);
	co->conns[ci]->holder = hi;
	/* Its share comes with the next recomputation (<= COORD_RECOMPUTE_NS):
	 * recomputing here would make a storm of hellos quadratic.
	 */
	h->last_report_ns = clock_now_ns();
	holder_asking(co, hi, true);
	pr_info("holder '%s' connected (incarnation %llu)\n", h->name,
		(unsigned long long)m->incarnation);
	send_policy(co, ci);
}

/* Fallback and bypass admissions are recorded durably before anything else
 * happens with this report: no bypass is ever silent. -EIO if the record
 * could not be written: then no grant answers the report (a failed write
 * means no grant), and the holder reports the same totals again.
 */
static int record_usage(struct coord *co, struct cholder *h, uint32_t l,
			const struct wire_report_entry *e, uint64_t now)
{
	struct cholder_limit *hl = holder_lim(co, (int)(h - co->h), l);

	if (e->fallback <= hl->fallback && e->bypass <= hl->bypass)
		return 0;
	/* At most one record per holder and limit per interval: a peer sending
	 * rising totals as fast as it can gets no fsync storm, and no grant for
	 * totals not yet durable (it reports them again within a refresh).
	 */
	if (now - hl->usage_ns < COORD_USAGE_MIN_INTERVAL_NS)
		return -EAGAIN;
	hl->usage_ns = now;
	if (coord_store_usage(&co->store, h->name, co->lim[l].name, e->fallback, e->bypass)) {
		co->store_failures++;
		pr_warn("cannot record usage of '%s': %s; no grant until it can\n", h->name,
			strerror(errno));
		return -EIO;
	}
	if (e->bypass > hl->bypass)
		pr_info("holder '%s' limit '%s': %llu packets admitted fail-open in total\n",
			h->name, co->lim[l].name, (unsigned long long)e->bypass);
	hl->fallback = e->fallback > hl->fallback ? e->fallback : hl->fallback;
	hl->bypass = e->bypass > hl->bypass ? e->bypass : hl->bypass;
	return 0;
}

/* One grant for holder hi: the limit's share and, under its seq, the
 * changes to the holder's per-key grants of the limit's hot keys (or the
 * whole set).
 */
void grant_one(struct coord *co, int ci, int hi, struct climit *c, uint64_t report_seq,
	       uint64_t now)
{
	uint64_t live = lease_deadline(now, co->cfg.ttl_ns) - now;
	struct cholder_limit *hl = holder_lim(co, hi, (uint32_t)(c - co->lim));
	uint64_t t_rate = c->t_rate[hi], t_burst = c->t_burst[hi];
	struct wire_msg *m = co->out;
	struct hotkeys_out ko = {.keys = m->grant.keys};
	struct ledger_grant g;
	int r;

	/* In the quiet period the ledger does not know every live share: a
	 * holder's proven share is renewed as it is (grant_allowed), and
	 * capacity moves only once every unknown share is dead.
	 */
	if (now < co->quiet_until) {
		t_rate = hl->adopt_rate;
		t_burst = hl->adopt_burst;
	}
	/* Cleared up to the key list only: hotkeys_grant fills what it sends. */
	WIRE_MSG_CLEAR(m, grant.n_keys);
	/* What it holds of a per-key limit's keys is not known either: a cut
	 * renews them and raises none.
	 */
	if (now < co->quiet_until && c->hot.on)
		r = hotkeys_grant_cut(&c->hot, &c->led, (size_t)hi, t_rate, t_burst, now, live,
				      &g, &ko);
	else
		r = hotkeys_grant(&c->hot, &c->led, (size_t)hi, t_rate, t_burst, now, live, &g,
				  &ko);
	if (r == 0) {
		co->ring_full++;
		return;
	}
	lease_note(hl, g.rate, g.burst); /* committed, sent or not */
	meter_note(hl, g.rate, g.burst); /* the cold keys' share */
	for (uint32_t i = 0; i < ko.n; i++)
		meter_note(hl, ko.keys[i].rate, ko.keys[i].burst);
	if (now + live > co->h[hi].lease_end_ns)
		co->h[hi].lease_end_ns = now + live;
	check_invariant(co, c, now);
	if (r < 0) {
		/* Counted in the ledgers until its deadline; a grant that cannot
		 * name what the holder must hold must not go out.
		 */
		co->key_ledger_full++;
		pr_debug("limit '%s': grant %llu for '%s' not sent: a hot key's ledger is full\n",
			 c->name, (unsigned long long)g.seq, co->h[hi].name);
		return;
	}
	m->grant.n_keys = ko.n;
	m->grant.keys_full = ko.mode;
	m->grant.keys_base = ko.base;
	m->type = WIRE_GRANT;
	snprintf(m->grant.limit, sizeof(m->grant.limit), "%s", c->name);
	snprintf(m->grant.holder, sizeof(m->grant.holder), "%s", co->h[hi].name);
	m->grant.incarnation = co->h[hi].incarnation;
	m->grant.epoch = co->epoch;
	m->grant.seq = g.seq;
	m->grant.report_seq = report_seq;
	m->grant.policy_version = co->pol->version;
	m->grant.rate = g.rate;
	m->grant.burst = g.burst;
	m->grant.ttl_ns = co->cfg.ttl_ns;
	m->grant.refresh_ns = co->cfg.refresh_ns;
	{
		struct grant_tag_in in = {.holder = co->h[hi].name,
					  .limit = c->name,
					  .incarnation = m->grant.incarnation,
					  .epoch = m->grant.epoch,
					  .seq = m->grant.seq,
					  .rate = m->grant.rate,
					  .burst = m->grant.burst,
					  .ttl_ns = m->grant.ttl_ns};

		grant_tag(co->store.grant_key, &in, m->grant.tag);
		/* Each entry set, for its adoption (adopt_key). */
		for (uint32_t i = 0; i < m->grant.n_keys; i++) {
			struct wire_key_grant *k = &m->grant.keys[i];

			if (k->op == WIRE_KEY_SET)
				grant_key_tag(co->store.grant_key, &in, &k->key, k->rate,
					      k->burst, k->tag);
			else
				memset(k->tag, 0, sizeof(k->tag));
		}
	}
	if (!send_msg(co, ci, m)) {
		co->grants++;
		c->hot.key_grants += m->grant.n_keys;
	}
}

bool grant_allowed(struct coord *co, int hi, const struct climit *c, uint64_t now)
{
	if (!coord_may_grant(co, now))
		return false;
	return now >= co->quiet_until || holder_lim(co, hi, (uint32_t)(c - co->lim))->adopted;
}

/* Adoption (docs/protocol.md): in the quiet period after a start, a holder
 * re-presents the grant of an earlier epoch it holds, with the tag that
 * proves it. The share the tag proves, cut to the contract and to what the
 * ledger has room for, goes into the ledger as held (acknowledged) and is
 * renewed at once under this epoch, never raised until the quiet period
 * ends: every share this process does not know of is one it never
 * replaces, and Σ of what it knows plus what it does not stays within what
 * the last epoch granted. Once per holder and limit in a run. A per-key
 * limit's keys are renewed by cuts (hotkeys_grant_cut): no key rises, so
 * the same holds for each key.
 */
static void adopt(struct coord *co, int hi, struct climit *c, const struct wire_report_entry *e,
		  uint64_t now)
{
	struct cholder_limit *hl = holder_lim(co, hi, (uint32_t)(c - co->lim));
	const struct cholder *h = &co->h[hi];
	uint64_t rate = e->held_rate, burst = e->held_burst, ttl = e->held_ttl_ns;
	struct ledger_grant g;

	if (now >= co->quiet_until || hl->adopt_tried || !e->applied_epoch ||
	    e->applied_epoch >= co->epoch || !e->held_left_ns)
		return;
	/* A version-6 agent cannot take a cut (keys_full 2): its per-key limits
	 * wait out the quiet period, as with a version-6 coordinator.
	 */
	if (c->hot.on && h->conn >= 0 && co->conns[h->conn] &&
	    co->conns[h->conn]->c.peer_version < 7)
		return;
	hl->adopt_tried = true; /* one try: a refused proof is not tried again */
	if (!grant_tag_ok(co->store.grant_key,
			  &(struct grant_tag_in){.holder = h->name,
						 .limit = c->name,
						 .incarnation = h->incarnation,
						 .epoch = e->applied_epoch,
						 .seq = e->applied_seq,
						 .rate = rate,
						 .burst = burst,
						 .ttl_ns = ttl},
			  e->held_tag)) {
		co->adopt_refused++;
		pr_warn("holder '%s' limit '%s': the share it re-presents (epoch %llu seq %llu, "
			"%llu/s) is not proven by its tag: not adopted\n",
			h->name, c->name, (unsigned long long)e->applied_epoch,
			(unsigned long long)e->applied_seq, (unsigned long long)rate);
		return;
	}
	if (rate > c->led.rate || burst > c->led.burst || ttl > LEASE_TTL_MAX_NS) {
		co->adopt_clamped++;
		rate = rate < c->led.rate ? rate : c->led.rate;
		burst = burst < c->led.burst ? burst : c->led.burst;
		ttl = ttl < LEASE_TTL_MAX_NS ? ttl : LEASE_TTL_MAX_NS;
	}
	/* Held from now for as long as the proven grant could live: the
	 * holder's "time left" is its claim, the grant's ttl is proven.
	 */
	if (!ledger_issue(&c->led, (size_t)hi, rate, burst, now, lease_deadline(now, ttl) - now,
			  &g))
		return;
	ledger_ack(&c->led, (size_t)hi, g.seq, now);
	if (g.rate < rate || g.burst < burst)
		co->adopt_clamped++; /* the ledger had less room than proven */
	hl->adopted = true;
	hl->adopt_rate = g.rate;
	hl->adopt_burst = g.burst;
	lease_note(hl, rate, burst); /* what it proved it held, before any cut to room */
	if (lease_deadline(now, ttl) > co->h[hi].lease_end_ns)
		co->h[hi].lease_end_ns = lease_deadline(now, ttl);
	co->adopted++;
	c->dirty = true;
	check_invariant(co, c, now);
	pr_info("holder '%s' limit '%s': adopted %llu/s burst %llu of epoch %llu\n", h->name,
		c->name, (unsigned long long)g.rate, (unsigned long long)g.burst,
		(unsigned long long)e->applied_epoch);
}

/* Adoption of a per-key entry (docs/protocol.md): in the quiet period,
 * once the holder's share of the limit is adopted, a hot key it lists with
 * the entry it holds from that share's epoch and a tag that proves it keeps
 * that entry through the quiet period (hotkeys_adopt; its cuts name it),
 * within the key's contract and room.
 */
static int adopt_key(struct coord *co, int hi, struct climit *c,
		     const struct wire_report_entry *e, const struct wire_hot *w, uint64_t now)
{
	const struct cholder *h = &co->h[hi];
	struct hotkey_holder *kh;
	int idx;

	if (!w->held_seq || now >= co->quiet_until ||
	    !holder_lim(co, hi, (uint32_t)(c - co->lim))->adopted ||
	    w->held_seq > e->applied_seq || (idx = hotkeys_find(&c->hot, &w->key)) < 0)
		return 0;
	kh = &c->hot.k[idx].h[hi];
	if (kh->flags & HK_ADOPT_TRIED)
		return 0; /* one try, as for the share: a tag is checked once */
	if (!grant_key_tag_ok(co->store.grant_key,
			      &(struct grant_tag_in){.holder = h->name,
						     .limit = c->name,
						     .incarnation = h->incarnation,
						     .epoch = e->applied_epoch,
						     .seq = w->held_seq},
			      &w->key, w->held_rate, w->held_burst, w->held_tag)) {
		kh->flags |= HK_ADOPT_TRIED;
		/* Logged at the 1st, 2nd, 4th, 8th...: a holder lists 1024 keys. */
		c->hot.adopt_refused++;
		if (!(c->hot.adopt_refused & (c->hot.adopt_refused - 1)))
			pr_warn("holder '%s' limit '%s': a per-key entry it re-presents (epoch %llu "
				"seq %llu, %llu/s) is not proven by its tag: not adopted (%llu so "
				"far)\n",
				h->name, c->name, (unsigned long long)e->applied_epoch,
				(unsigned long long)w->held_seq, (unsigned long long)w->held_rate,
				(unsigned long long)c->hot.adopt_refused);
		return 0;
	}
	meter_note(holder_lim(co, hi, (uint32_t)(c - co->lim)), w->held_rate, w->held_burst);
	return hotkeys_adopt(&c->hot, (size_t)hi, &w->key, w->held_rate, w->held_burst);
}

/* The report's hot keys: each one listed has the demand given (0: none)
 * until the holder lists it again or goes quiet. A key wanting more than
 * the holder's share (what it holds and will keep of the limit) becomes hot.
 */
static void hot_report(struct coord *co, int hi, const struct wire_report *r,
		       struct climit *const *cl, uint64_t now)
{
	uint64_t share[WIRE_MAX_ENTRIES];
	uint32_t adopted[WIRE_MAX_ENTRIES] = {0};

	for (uint32_t i = 0; i < r->n; i++) {
		struct climit *c = cl[i];

		if (!c || !c->hot.on)
			continue;
		share[i] = ledger_committed_rate(&c->led, (size_t)hi, now);
		if (c->t_rate[hi] < share[i])
			share[i] = c->t_rate[hi];
	}
	for (uint32_t k = 0; k < r->n_hot; k++) {
		const struct wire_hot *w = &r->hot[k];
		struct climit *c = w->entry < r->n ? cl[w->entry] : NULL;

		if (!c || !c->hot.on)
			continue;
		hotkeys_report_key(&c->hot, &c->led, (size_t)hi, &w->key, w->demand,
				   share[w->entry], now);
		adopted[w->entry] += adopt_key(co, hi, c, &r->e[w->entry], w, now);
	}
	for (uint32_t i = 0; i < r->n; i++)
		if (adopted[i])
			pr_info("holder '%s' limit '%s': adopted %u per-key entries of epoch %llu\n",
				co->h[hi].name, cl[i]->name, adopted[i],
				(unsigned long long)r->e[i].applied_epoch);
}

void on_report(struct coord *co, int ci, const struct wire_report *r)
{
	int hi = co->conns[ci]->holder;
	struct climit *cl[WIRE_MAX_ENTRIES];
	bool recorded[WIRE_MAX_ENTRIES];
	uint64_t now = clock_now_ns();
	struct cholder *h;

	if (hi < 0 || strcmp(co->h[hi].name, r->holder) ||
	    co->h[hi].incarnation != r->incarnation) {
		co->protocol_errors++;
		conn_drop(co, ci, "report from a holder that did not say hello");
		return;
	}
	/* No total may reach a figure whose sums could wrap (usage_ledger.h). */
	for (uint32_t i = 0; i < r->n; i++)
		if (r->e[i].admitted > ULEDGER_TOTAL_MAX || r->e[i].denied > ULEDGER_TOTAL_MAX ||
		    r->e[i].fallback > ULEDGER_TOTAL_MAX || r->e[i].bypass > ULEDGER_TOTAL_MAX) {
			co->protocol_errors++;
			co->usage_forged++;
			conn_drop(co, ci, "report with a total above 2^62");
			return;
		}
	h = &co->h[hi];
	if (r->seq <= h->report_seq) {
		co->stale_reports++; /* retransmitted or reordered: totals are absolute anyway */
		return;
	}
	h->report_seq = r->seq;
	h->last_report_ns = now;
	if (!h->asking) {
		pr_info("holder '%s' reports again\n", h->name);
		holder_asking(co, hi, true);
	}
	/* Acks and demands first, then the hot keys (a key made hot now copies
	 * the limit's ledger as acknowledged), then the grants.
	 */
	for (uint32_t i = 0; i < r->n; i++) {
		const struct wire_report_entry *e = &r->e[i];
		struct climit *c = cl[i] = limit_by_name(co, e->limit);
		uint32_t l;

		recorded[i] = false;
		if (!c)
			continue;
		l = (uint32_t)(c - co->lim);
		recorded[i] = record_usage(co, h, l, e, now) == 0;
		telemetry_report(co, hi, c, l, e, now); /* before the acks */
		adopt(co, hi, c, e, now);
		if (e->applied_epoch == co->epoch) {
			/* One ack for the share and every per-key grant it came with. */
			ledger_ack(&c->led, (size_t)hi, e->applied_seq, now);
			hotkeys_ack(&c->hot, (size_t)hi, e->applied_seq, now);
		}
		if (c->led.h[hi].demand != e->demand) {
			c->led.h[hi].demand = e->demand;
			c->dirty = true;
		}
		/* Fresh targets when due (a holder that just joined gets its share
		 * in this grant, not the next), still at most every 50 ms a limit.
		 */
		if (c->dirty && now >= c->next_recompute_ns)
			targets_recompute(c, now);
	}
	hot_report(co, hi, r, cl, now);
	record_metered(co, h, ci, hi, r, cl, recorded, now);
	for (uint32_t i = 0; i < r->n; i++) {
		struct climit *c = cl[i];

		if (!c)
			continue;
		check_invariant(co, c, now);
		if (recorded[i] && grant_allowed(co, hi, c, now) && co->conns[ci])
			grant_one(co, ci, hi, c, r->seq, now);
	}
}
