// SPDX-License-Identifier: MIT
/*
 * The coordinator: owns the policy and its version, leases shares of every
 * global limit to agents, and keeps, after every change and at all times,
 * sum of live rate shares <= R - reserve and sum of live burst shares <=
 * B - reserve (ledger.h), where reserve is the fallback shares of all
 * gateways. A restarted coordinator takes a new durable epoch before its
 * first grant and issues nothing until every grant of earlier epochs has
 * died (the quiet period).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "lib/clock.h"
#include "lib/config.h"
#include "lib/conn.h"
#include "coord/coord.h"
#include "lib/fs.h"
#include "coord/hotkeys.h"
#include "lib/keyfmt.h"
#include "lib/overrides.h"
#include "tb_math.h"
#include "lib/http.h"
#include "lib/lease_clock.h"
#include "coord/ledger.h"
#include "lib/log.h"
#include "coord/metrics.h"
#include "lib/signals.h"
#include "coord/state.h"
#include "coord/store.h"
#include "lib/tls.h"
#include "coord/usage_ledger.h"
#include "lib/wire.h"
#include "lib/util.h"

#define COORD_TICK_MS	   20
#define COORD_SPARE_CONNS  64	       /* connections beyond gateways: not yet said hello */
#define COORD_RECOMPUTE_NS 50000000ull /* targets follow demand within 50 ms */
#define COORD_EPOLL_BATCH  256
/* A connection that has not said HELLO within this is dropped, and one
 * address may hold at most pending-per-address such connections: silent
 * peers cannot take the slots real gateways need.
 */
#define COORD_HELLO_DEADLINE_NS (2 * NSEC_PER_SEC)
/* With every slot taken, a new connection takes the slot of the oldest one
 * without a HELLO that has sent nothing, or else of the oldest that has
 * spent this long without a HELLO (a gateway's TLS handshake and HELLO take
 * a round trip or two): strangers from many addresses, each under its
 * pending-per-address, cannot keep a gateway out for the whole deadline.
 */
#define COORD_PENDING_GRACE_NS (500 * NSEC_PER_MSEC)
/* Connections accepted per turn of the loop. Draining the backlog in one go
 * held the loop 10 ms (566 accepts) under 20k connects/s, the holders'
 * reports waiting; in batches, reports and the first bytes of the
 * connections just accepted are read in between. At most a quarter of the
 * spare slots: a connection is read before newer ones could make it give way.
 */
#define COORD_ACCEPT_BATCH 16
_Static_assert(COORD_ACCEPT_BATCH * 4 <= COORD_SPARE_CONNS, "a batch must not fill the spares");
/* Fallback/bypass records per holder and limit at most this often. */
#define COORD_USAGE_MIN_INTERVAL_NS (100 * NSEC_PER_MSEC)

/* ---- policy ---- */

/* A report names up to 256 limits: each found in log2(n) comparisons, not
 * a walk of all of them (a walk made a report's lookups quadratic).
 */
static struct climit *limit_by_name(struct coord *co, const char *name)
{
	uint32_t lo = 0, hi = co->n_limits;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(co->lim[co->by_name[mid]].name, name);

		if (!c)
			return &co->lim[co->by_name[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* co->by_name for the n_limits of co->lim (insertion sort: at most 256). */
static void limits_index(struct coord *co)
{
	for (uint32_t i = 0; i < co->n_limits; i++) {
		uint32_t j = i;

		while (j > 0 && strcmp(co->lim[co->by_name[j - 1]].name, co->lim[i].name) > 0) {
			co->by_name[j] = co->by_name[j - 1];
			j--;
		}
		co->by_name[j] = (uint16_t)i;
	}
}

static void climit_free(struct climit *c)
{
	ledger_free(&c->led);
	hotkeys_free(&c->hot);
	free(c->t_rate);
	free(c->t_burst);
	c->t_rate = c->t_burst = NULL;
}

static void limits_free(struct climit *lim, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		climit_free(&lim[i]);
}

/* A limit's state for the new policy: a deep copy of the running one (its
 * live grants go on counting, per-key grants included) or a fresh ledger,
 * room for every gateway.
 */
static int climit_init(struct climit *c, const struct climit *old, uint32_t gateways)
{
	int err;

	memset(c, 0, sizeof(*c));
	if (old) {
		*c = *old;
		memset(&c->hot, 0, sizeof(c->hot));
		err = ledger_copy(&c->led, &old->led);
		if (!err)
			err = hotkeys_copy(&c->hot, &old->hot);
	} else {
		err = ledger_init(&c->led, 0, 0);
	}
	c->t_rate = c->t_burst = NULL;
	if (!err)
		err = ledger_reserve(&c->led, gateways);
	if (!err) {
		c->t_rate = calloc(c->led.cap, sizeof(*c->t_rate));
		c->t_burst = calloc(c->led.cap, sizeof(*c->t_burst));
		if (!c->t_rate || !c->t_burst)
			err = -ENOMEM;
	}
	c->dirty = true;
	c->next_recompute_ns = 0;
	return err;
}

static uint64_t hash_seed(void)
{
	uint64_t seed;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = clock_now_ns() * 0x9e3779b97f4a7c15ull;
	return seed;
}

/* An override of a global limit is a key hot for good with a contract of
 * its own (less the reserve): every gateway holds its share of it.
 */
static int limit_pins(struct climit *c, const struct cfg_limit *l)
{
	uint64_t now = clock_now_ns();
	struct ovr_entry *e = NULL;
	struct cfg_err err = {0};
	size_t n = 0;
	int rc = 0;

	hotkeys_pins_begin(&c->hot);
	if (l->overrides[0]) {
		rc = ovr_load(l->overrides, l->prefix_v4, l->prefix_v6, TB_MAX_RATE, TB_MAX_BURST,
			      &e, &n, &err);
		if (rc)
			pr_warn("limit '%s': %s\n", c->name, err.msg);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct ll_key_id k = {.family = e[i].family};
		uint64_t r = e[i].kind == OVR_RATE ? e[i].rate : e[i].kind == OVR_DENY ? 0 : TB_MAX_RATE;
		uint64_t b = e[i].kind == OVR_RATE	? e[i].burst
			     : e[i].kind == OVR_DENY	? 0
							: TB_MAX_BURST;
		int p;

		if (e[i].family == 4) {
			k.addr[2] = htonl(0xffff);
			memcpy(&k.addr[3], e[i].addr, 4);
		} else {
			memcpy(k.addr, e[i].addr, 16);
		}
		r = r > c->reserve_rate ? r - c->reserve_rate : 0;
		b = b > c->reserve_burst ? b - c->reserve_burst : 0;
		p = hotkeys_pin(&c->hot, &c->led, &k, r, b, now);
		if (p < 0) {
			pr_warn("limit '%s': override on line %u not leased by its own contract: "
				"%s (at most %u hot keys a limit)\n",
				c->name, e[i].line, strerror(-p), c->hot.max);
			rc = p == -ENOSPC ? 0 : p;
			if (!rc)
				break;
		}
	}
	hotkeys_pins_end(&c->hot, c->led.rate, c->led.burst, now);
	free(e);
	return rc;
}

/* A limit with a key has a table of hot keys, kept across reloads with the
 * capacity of the new contract: dropping it while per-key grants are live
 * would let the sum over gateways exceed the contract for those keys. A
 * limit without a key has none.
 */
static int limit_hotkeys(struct coord *co, struct climit *c, const struct cfg_limit *l)
{
	int err;

	if (l->key_mode == LL_KEY_NONE) {
		if (c->hot.n)
			pr_info("limit '%s' has no key now: its %u hot keys are forgotten\n",
				c->name, c->hot.n);
		hotkeys_free(&c->hot);
		return 0;
	}
	if (!c->hot.on) {
		err = hotkeys_init(&c->hot, c->name, co->cfg.gateways, HOTKEYS_MAX, hash_seed());
		if (err)
			return err;
	}
	snprintf(c->hot.name, sizeof(c->hot.name), "%s", c->name);
	hotkeys_set_capacity(&c->hot, c->led.rate, c->led.burst, clock_now_ns());
	return limit_pins(c, l);
}

/* Global limits of pol as ledgers, keeping the ledger (live grants) of a
 * limit that stays. Fallback shares of every gateway come off the top.
 */
static int limits_build(struct coord *co, const struct cfg_policy *pol, struct climit *out,
			uint32_t *n_out)
{
	char msg[CFG_ERR_LEN];
	uint32_t n = 0;
	int err = 0;

	for (uint32_t i = 0; i < pol->n_limits && !err; i++) {
		const struct cfg_limit *l = &pol->limits[i];
		struct climit *c = &out[n];
		uint64_t fr = 0, fb = 0;

		if (l->scope != LL_SCOPE_GLOBAL)
			continue;
		err = climit_init(c, limit_by_name(co, l->name), co->cfg.gateways);
		n++;
		if (err)
			break;
		snprintf(c->name, sizeof(c->name), "%s", l->name);
		if (l->on_loss == LL_ON_LOSS_FALLBACK) {
			fr = l->fallback_rate * co->cfg.gateways;
			fb = l->fallback_burst * co->cfg.gateways;
		}
		err = cfg_reserve_check(l, co->cfg.gateways, msg, sizeof(msg));
		if (err) {
			pr_warn("%s:%d:%d: %s\n", co->cfg.policy_path, l->line, l->col, msg);
			break;
		}
		c->rate = l->rate;
		c->burst = l->burst;
		c->reserve_rate = fr;
		c->reserve_burst = fb;
		c->on_loss = l->on_loss;
		c->fb_rate = l->fallback_rate;
		c->fb_burst = l->fallback_burst;
		c->meter = l->meter;
		c->led.rate = l->rate - fr;
		c->led.burst = l->burst - fb;
		err = limit_hotkeys(co, c, l);
	}
	if (err) {
		limits_free(out, n);
		n = 0;
	}
	*n_out = n;
	return err;
}

static void holder_asking(struct coord *co, int hi, bool asking);

/* Room in co->hl for n limits per holder: a larger table, rows copied, when
 * a policy has more global limits than any before. 0 or -ENOMEM (the
 * policy is then refused and the running one stays).
 */
static int holders_grow(struct coord *co, uint32_t n)
{
	struct cholder_limit *t;

	if (n <= co->hl_cap)
		return 0;
	t = calloc((size_t)co->cfg.gateways * n, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t hi = 0; co->hl && hi < co->cfg.gateways; hi++)
		memcpy(&t[hi * n], &co->hl[hi * co->hl_cap], co->hl_cap * sizeof(*t));
	free(co->hl);
	co->hl = t;
	co->hl_cap = n;
	return 0;
}

/* A holder slot taken or given up: its per-limit state starts at 0. */
static void holder_lim_clear(struct coord *co, int hi)
{
	if (co->hl_cap)
		memset(holder_lim(co, hi, 0), 0, co->hl_cap * sizeof(struct cholder_limit));
}

static int policy_load(struct coord *co, bool initial)
{
	struct cfg_policy *pol = calloc(1, sizeof(*pol));
	struct climit *lim = calloc(LL_MAX_LIMITS, sizeof(*lim));
	struct cfg_err e;
	char *yaml = NULL;
	size_t len = 0;
	uint32_t n = 0;
	int err = pol && lim ? 0 : -ENOMEM;

	/* Parse the very bytes that will be pushed to the agents. */
	if (!err && (err = fs_read_file(co->cfg.policy_path, WIRE_MAX_POLICY, &yaml, &len))) {
		char msg[CFG_ERR_LEN];
		struct stat st;

		if (err == -EFBIG && stat(co->cfg.policy_path, &st) == 0) {
			cfg_policy_too_big(co->cfg.policy_path, (uint64_t)st.st_size, msg,
					   sizeof(msg));
			pr_warn("%s\n", msg);
		} else {
			pr_warn("cannot read '%s': %s\n", co->cfg.policy_path, strerror(-err));
		}
	}
	if (!err && (err = cfg_policy_parse(co->cfg.policy_path, yaml, len, false, pol, &e)))
		pr_warn("%s\n", e.msg);
	if (!err && co->pol && pol->version <= co->pol->version && !initial) {
		pr_warn("policy version %llu refused: not newer than the running version %llu\n",
			(unsigned long long)pol->version, (unsigned long long)co->pol->version);
		err = -ESTALE;
	}
	if (!err)
		err = limits_build(co, pol, lim, &n);
	if (!err && (err = holders_grow(co, n))) {
		pr_warn("no memory for %u global limits of %u gateways\n", n, co->cfg.gateways);
		limits_free(lim, n);
	}
	if (!err) {
		free(co->pol);
		free(co->yaml);
		co->pol = pol;
		co->yaml = yaml;
		co->yaml_len = len;
		limits_free(co->lim, co->n_limits);
		memcpy(co->lim, lim, sizeof(co->lim));
		co->n_limits = n;
		limits_index(co);
		for (uint32_t i = 0; i < n; i++)
			if (ledger_over(&co->lim[i].led, clock_now_ns()))
				co->lim[i].drain_since_ns = clock_now_ns();
		/* A limit new in this policy starts with every holder inactive:
		 * the holders asking now ask for it too, or it would grant them
		 * nothing until they reconnect.
		 */
		for (int hi = 0; co->h && hi < (int)co->cfg.gateways; hi++)
			if (co->h[hi].used && co->h[hi].asking)
				holder_asking(co, hi, true);
		pol = NULL;
		yaml = NULL;
		pr_info("policy version %llu loaded (%u global limits)\n",
			(unsigned long long)co->pol->version, n);
	}
	free(pol);
	free(yaml);
	free(lim);
	return err;
}

/* Max-min targets from the latest demands: O(holders log holders), so done
 * at most every COORD_RECOMPUTE_NS per limit rather than per report.
 */
static void targets_recompute(struct climit *c, uint64_t now)
{
	uint64_t t0 = clock_now_ns();

	if (ledger_targets(&c->led, c->t_rate, c->t_burst))
		return; /* out of memory: keep the old targets */
	c->dirty = false;
	c->recompute_ns = clock_now_ns() - t0;
	c->next_recompute_ns = now + COORD_RECOMPUTE_NS;
}

/* Whether holder hi takes part in the max-min division. A gateway that is
 * connected but silent (a cut path TCP has not noticed, a stopped agent)
 * must not keep a share reserved that nobody spends.
 */
static void holder_asking(struct coord *co, int hi, bool asking)
{
	co->h[hi].asking = asking;
	for (uint32_t l = 0; l < co->n_limits; l++) {
		co->lim[l].led.h[hi].active = asking;
		if (!asking) {
			co->lim[l].led.h[hi].demand = 0;
			hotkeys_holder_quiet(&co->lim[l].hot, (size_t)hi, clock_now_ns());
		}
		co->lim[l].dirty = true;
	}
}

/* ---- connections ---- */

static void conn_drop(struct coord *co, int ci, const char *why)
{
	struct cconn *cc = co->conns[ci];

	if (!cc)
		return;
	if (cc->holder >= 0) {
		struct cholder *h = &co->h[cc->holder];

		co->link_drops++;
		pr_info("holder '%s' disconnected (%s)\n", h->name, why);
		h->conn = -1;
		/* It asks for nothing now; its live grants still count until they die. */
		holder_asking(co, cc->holder, false);
	}
	conn_close(&cc->c);
	free(cc);
	co->conns[ci] = NULL;
}

static int send_msg(struct coord *co, int ci, const struct wire_msg *m)
{
	int err = conn_send(&co->conns[ci]->c, m);

	if (err)
		conn_drop(co, ci, strerror(-err));
	return err;
}

static int send_policy(struct coord *co, int ci)
{
	struct wire_msg *m = co->out;

	WIRE_MSG_CLEAR(m, policy.len);
	m->type = WIRE_POLICY;
	m->policy.epoch = co->store.epoch;
	m->policy.version = co->pol->version;
	m->policy.len = (uint32_t)co->yaml_len;
	memcpy(m->policy.yaml, co->yaml, co->yaml_len);
	return send_msg(co, ci, m);
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
		if (co->h[i].used && !strcmp(co->h[i].name, name))
			return i;
		if (!co->h[i].used && free_slot < 0)
			free_slot = i;
	}
	for (int i = 0; free_slot < 0 && i < (int)co->cfg.gateways; i++)
		if (holder_reclaim(co, i, now))
			free_slot = i;
	return free_slot;
}

/* The address a connection came from, for log lines. */
static const char *peer_str(const struct cconn *cc, char *buf, size_t len)
{
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (!memcmp(cc->peer, v4mapped, sizeof(v4mapped)))
		inet_ntop(AF_INET, cc->peer + 12, buf, (socklen_t)len);
	else
		inet_ntop(AF_INET6, cc->peer, buf, (socklen_t)len);
	return buf;
}

static void on_hello(struct coord *co, int ci, const struct wire_hello *m)
{
	char addr[INET6_ADDRSTRLEN];
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
	hi = holder_find(co, m->holder);
	if (hi < 0) {
		co->refused++;
		pr_warn("holder '%s' refused: already serving %u gateways (coord.yaml gateways:)\n",
			m->holder, co->cfg.gateways);
		conn_drop(co, ci, "too many gateways");
		return;
	}
	if (m->max_epoch_seen > co->store.epoch &&
	    (m->max_epoch_seen >= LEASE_EPOCH_MAX ||
	     m->max_epoch_seen - co->store.epoch > LEASE_EPOCH_STEP_MAX)) {
		co->protocol_errors++;
		pr_warn("holder '%s' claims epoch %llu, out of bounds from ours %llu: refused\n",
			m->holder, (unsigned long long)m->max_epoch_seen,
			(unsigned long long)co->store.epoch);
		conn_drop(co, ci, "epoch out of bounds");
		return;
	}
	if (m->max_epoch_seen > co->store.epoch) {
		/* Someone ran with a later epoch than our log knows: our state was
		 * lost. Never issue under an epoch a holder has seen surpassed.
		 */
		pr_warn("holder '%s' has seen epoch %llu > ours %llu: restarting with a new "
			"epoch and a quiet period\n",
			m->holder, (unsigned long long)m->max_epoch_seen,
			(unsigned long long)co->store.epoch);
		if (coord_store_bump(&co->store, m->max_epoch_seen + 1)) {
			conn_drop(co, ci, "cannot record a new epoch");
			return;
		}
		co->quiet_until = clock_now_ns() + lease_deadline(0, co->cfg.ttl_ns);
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
			coord_store_usage_read(co->cfg.state_dir, h->name, co->lim[l].name,
					       &holder_lim(co, hi, l)->fallback,
					       &holder_lim(co, hi, l)->bypass);
	}
	if (h->incarnation != m->incarnation)
		h->report_seq = 0;
	h->incarnation = m->incarnation;
	h->counters_ident = m->counters_ident;
	h->conn = ci;
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

static void check_invariant(struct coord *co, struct climit *c, uint64_t now)
{
	uint64_t sr = ledger_sum_rate_fast(&c->led, now), sb = ledger_sum_burst_fast(&c->led, now);

	if (sr > c->max_sum_rate)
		c->max_sum_rate = sr;
	if (sb > c->max_sum_burst)
		c->max_sum_burst = sb;
	if (ledger_over(&c->led, now) && c->drain_since_ns)
		return; /* a lowered contract: decreases are on their way, no increase goes out */
	if (c->drain_since_ns) {
		c->last_drain_ns = now - c->drain_since_ns;
		c->drain_since_ns = 0;
		pr_info("limit '%s': live shares within the new contract after %.3f s\n", c->name,
			ns_to_s(c->last_drain_ns));
	}
	if (ledger_over(&c->led, now)) {
		co->violations++;
		pr_warn("limit '%s': INVARIANT VIOLATED: live shares %llu/s, %llu exceed %llu/s, "
			"%llu\n",
			c->name, (unsigned long long)sr, (unsigned long long)sb,
			(unsigned long long)c->led.rate, (unsigned long long)c->led.burst);
	}
}

/* One grant for holder hi: the limit's share and, under its seq, the
 * changes to the holder's per-key grants of the limit's hot keys (or the
 * whole set).
 */
static void grant_one(struct coord *co, int ci, int hi, struct climit *c, uint64_t report_seq,
		      uint64_t now)
{
	uint64_t live = lease_deadline(now, co->cfg.ttl_ns) - now;
	struct wire_msg *m = co->out;
	struct hotkeys_out ko = {.keys = m->grant.keys};
	struct ledger_grant g;
	int r;

	/* Cleared up to the key list only: hotkeys_grant fills what it sends. */
	WIRE_MSG_CLEAR(m, grant.n_keys);
	r = hotkeys_grant(&c->hot, &c->led, (size_t)hi, c->t_rate[hi], c->t_burst[hi], now, live,
			  &g, &ko);
	if (r == 0) {
		co->ring_full++;
		return;
	}
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
	m->grant.keys_full = ko.full;
	m->grant.keys_base = ko.base;
	m->type = WIRE_GRANT;
	snprintf(m->grant.limit, sizeof(m->grant.limit), "%s", c->name);
	snprintf(m->grant.holder, sizeof(m->grant.holder), "%s", co->h[hi].name);
	m->grant.incarnation = co->h[hi].incarnation;
	m->grant.epoch = co->store.epoch;
	m->grant.seq = g.seq;
	m->grant.report_seq = report_seq;
	m->grant.policy_version = co->pol->version;
	m->grant.rate = g.rate;
	m->grant.burst = g.burst;
	m->grant.ttl_ns = co->cfg.ttl_ns;
	m->grant.refresh_ns = co->cfg.refresh_ns;
	if (!send_msg(co, ci, m)) {
		co->grants++;
		c->hot.key_grants += m->grant.n_keys;
	}
}

/* The report's hot keys: each one listed has the demand given (0: none)
 * until the holder lists it again or goes quiet. A key wanting more than
 * the holder's share (what it holds and will keep of the limit) becomes hot.
 */
static void hot_report(int hi, const struct wire_report *r, struct climit *const *cl,
		       uint64_t now)
{
	uint64_t share[WIRE_MAX_ENTRIES];

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

		if (c && c->hot.on)
			hotkeys_report_key(&c->hot, &c->led, (size_t)hi, &w->key, w->demand,
					   share[w->entry], now);
	}
}

/* epoll data of the usage ledger's writer's eventfd (EP_LISTEN, EP_CONN0: below). */
#define EP_USAGE UINT64_MAX

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
static int usage_ledger_ensure(struct coord *co)
{
	char path[CFG_PATH_LEN + 16];
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
			pr_warn("cannot open the usage ledger '%s': %s\n", path, strerror(-err));
			return err;
		}
		pr_info("usage ledger '%s' open\n", path);
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
	err = uwriter_start(&w, lg, path, co->cfg.ledger_retention_s, usage_queue_bytes());
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
static void record_metered(struct coord *co, struct cholder *h, int ci, int hi,
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

static void on_report(struct coord *co, int ci, const struct wire_report *r)
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
		if (e->applied_epoch == co->store.epoch) {
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
	hot_report(hi, r, cl, now);
	record_metered(co, h, ci, hi, r, cl, recorded, now);
	for (uint32_t i = 0; i < r->n; i++) {
		struct climit *c = cl[i];

		if (!c)
			continue;
		check_invariant(co, c, now);
		if (recorded[i] && now >= co->quiet_until && co->conns[ci])
			grant_one(co, ci, hi, c, r->seq, now);
	}
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

/* A batch of one metered limit's per-key totals: checked here, copied to
 * the writer, which adds it to its group's transaction and hands it back
 * once that commits (usage_done sends the ack then). Not metered here:
 * refused (the agent drops it). The writer's queue full: RETRY (the agent
 * sends it again). Admission never waits for any of it.
 */
static void on_meter(struct coord *co, int ci, const struct wire_meter *mt, uint64_t now)
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
	for (uint32_t i = 0; i < mt->n; i++)
		if (!meter_key_ok(l, &mt->e[i].key)) {
			co->protocol_errors++;
			pr_warn("meter batch %llu of '%s' (limit '%s') names a malformed key: "
				"refused\n",
				(unsigned long long)mt->seq, mt->holder, mt->limit);
			meter_ack(co, ci, mt->ident, mt->seq, WIRE_METER_REFUSED);
			return;
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
static void conn_watch(struct coord *co, int ci);

static void usage_done(struct coord *co)
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
					  !j->err		? WIRE_METER_RECORDED
					  : j->err == -ESTALE ? WIRE_METER_REFUSED
							      : WIRE_METER_RETRY);
		} else {
			h->uledger_busy = false;
			if (j->err) {
				co->usage_failures++;
				pr_warn("cannot record usage of '%s' in the usage ledger: %s; no grant "
					"for its metered limits until it can\n",
					j->holder, strerror(-j->err));
			} else if (live) {
				h->uledger_ns = j->arrival_ns;
			}
			for (uint32_t i = 0; !j->err && live && i < j->n; i++) {
				struct climit *c = limit_by_name(co, j->re[i].limit);

				if (!c || !c->meter)
					continue;
				check_invariant(co, c, now);
				if (now >= co->quiet_until && co->conns[j->ci])
					grant_one(co, j->ci, j->hi, c, h->report_seq, now);
			}
		}
		if (live)
			conn_watch(co, j->ci); /* what did not fit in the socket: EPOLLOUT */
		free(j);
		j = next;
	}
}

static void on_frame(struct coord *co, int ci, const struct wire_msg *m)
{
	if (m->type == WIRE_HELLO && co->conns[ci]->holder < 0)
		on_hello(co, ci, &m->hello);
	else if (m->type == WIRE_REPORT)
		on_report(co, ci, &m->report);
	else if (m->type == WIRE_METER)
		on_meter(co, ci, &m->meter, clock_now_ns());
	else {
		co->protocol_errors++;
		conn_drop(co, ci, "unexpected message");
	}
}

static void conn_input(struct coord *co, int ci)
{
	int err = conn_read(&co->conns[ci]->c);

	while (co->conns[ci]) {
		int r = conn_next(&co->conns[ci]->c, co->msg);

		if (r == 0)
			break;
		if (r < 0) {
			co->protocol_errors++;
			conn_drop(co, ci, "malformed frame");
			return;
		}
		on_frame(co, ci, co->msg);
	}
	if (err && co->conns[ci]) {
		char addr[INET6_ADDRSTRLEN];

		if (err == -EPROTO && co->conns[ci]->c.ssl && co->conns[ci]->holder < 0) {
			co->tls_failures++;
			pr_info("TLS handshake from %s failed (no certificate, or one our CA did not "
				"sign)\n",
				peer_str(co->conns[ci], addr, sizeof(addr)));
		}
		conn_drop(co, ci, err == -ECONNRESET ? "closed by peer" : strerror(-err));
	}
}

/* epoll data: 0 the listener, 1 + index for a connection. */
#define EP_LISTEN 0
#define EP_CONN0  1

/* Watch for writability only while output is queued. */
static void conn_watch(struct coord *co, int ci)
{
	struct cconn *cc = co->conns[ci];
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EP_CONN0 + (uint64_t)ci};

	if (!cc)
		return;
	if (conn_wants_write(&cc->c))
		ev.events |= EPOLLOUT;
	if (ev.events != cc->events && !epoll_ctl(co->ep, EPOLL_CTL_MOD, cc->c.fd, &ev))
		cc->events = ev.events;
}

/* The peer's address as 16 bytes (IPv4 v4-mapped). */
static void peer_bytes(const struct sockaddr_storage *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->ss_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

/* Where a connection from peer would go: how many without a HELLO peer
 * holds, a free slot, and which connection gives way if there is none (one
 * accepted before this batch: each has had a turn to be read). One pass,
 * O(connections).
 */
struct slot_scan {
	size_t pending; /* from peer, without a HELLO */
	long free;	/* a free slot, or -1 */
	long victim;	/* the slot of the connection that gives way, or -1 */
};

static void slot_scan(const struct coord *co, const uint8_t peer[16], uint64_t batch_ns,
		      uint64_t now, struct slot_scan *s)
{
	uint64_t silent_ns = UINT64_MAX, spoke_ns = UINT64_MAX;
	long silent = -1, spoke = -1;

	s->pending = 0;
	s->free = -1;
	for (size_t ci = 0; ci < co->max_conns; ci++) {
		const struct cconn *cc = co->conns[ci];

		if (!cc) {
			if (s->free < 0)
				s->free = (long)ci;
			continue;
		}
		if (cc->holder >= 0)
			continue;
		s->pending += !memcmp(cc->peer, peer, 16);
		if (cc->accepted_ns >= batch_ns)
			continue;
		if (!cc->spoke && cc->accepted_ns < silent_ns) {
			silent_ns = cc->accepted_ns;
			silent = (long)ci;
		} else if (cc->spoke && now - cc->accepted_ns >= COORD_PENDING_GRACE_NS &&
			   cc->accepted_ns < spoke_ns) {
			spoke_ns = cc->accepted_ns;
			spoke = (long)ci;
		}
	}
	s->victim = silent >= 0 ? silent : spoke;
}

/* At most COORD_ACCEPT_BATCH: the listener stays ready, and the loop comes
 * back for the rest after the other connections' input.
 */
static void accept_all(struct coord *co)
{
	uint64_t batch_ns = clock_now_ns();

	for (int n = 0; n < COORD_ACCEPT_BATCH; n++) {
		struct sockaddr_storage sa = {};
		socklen_t salen = sizeof(sa);
		int fd = accept4(co->listen_fd, (struct sockaddr *)&sa, &salen,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event ev = {.events = EPOLLIN};
		uint64_t now = clock_now_ns();
		struct slot_scan s;
		uint8_t peer[16];
		size_t ci;

		if (fd < 0)
			return;
		peer_bytes(&sa, peer);
		slot_scan(co, peer, batch_ns, now, &s);
		if (s.pending >= co->cfg.pending_per_address) {
			co->crowded_refused++;
			close(fd);
			continue;
		}
		if (s.free < 0 && s.victim >= 0) {
			co->pending_evicted++;
			conn_drop(co, (int)s.victim, "made room for a new connection");
			s.free = s.victim;
		}
		if (s.free < 0) {
			co->full_refused++;
			close(fd);
			continue;
		}
		ci = (size_t)s.free;
		if (!(co->conns[ci] = calloc(1, sizeof(struct cconn)))) {
			close(fd);
			continue;
		}
		/* Grants go out one frame at a time: do not let Nagle hold them. */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
		conn_init(&co->conns[ci]->c, fd);
		co->conns[ci]->holder = -1;
		if (co->tls.ctx && conn_tls_start(&co->conns[ci]->c, &co->tls, NULL)) {
			conn_drop(co, (int)ci, "cannot start TLS");
			continue;
		}
		co->conns[ci]->accepted_ns = now;
		memcpy(co->conns[ci]->peer, peer, 16);
		co->conns[ci]->events = EPOLLIN;
		ev.data.u64 = EP_CONN0 + ci;
		if (epoll_ctl(co->ep, EPOLL_CTL_ADD, fd, &ev))
			conn_drop(co, (int)ci, "cannot watch it");
	}
}

/* ---- main loop ---- */

static void conn_event(struct coord *co, int ci, uint32_t events)
{
	if (!co->conns[ci])
		return;
	if (events & EPOLLOUT && conn_flush(&co->conns[ci]->c)) {
		conn_drop(co, ci, "write failed");
		return;
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
		co->conns[ci]->spoke = true;
		conn_input(co, ci);
	}
	conn_watch(co, ci);
}

/* The holders' connections first, then those without a HELLO (TLS
 * handshakes among them), then new ones: a holder's report waits for
 * neither strangers' handshakes nor a batch of accepts in the same turn.
 */
static void handle_events(struct coord *co, const struct epoll_event *ev, int n)
{
	bool listen = false, done[COORD_EPOLL_BATCH] = {false};

	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 == EP_USAGE) {
			usage_done(co); /* acks and grants the ledger's commits allow, first */
			done[i] = true;
		}
	for (int i = 0; i < n; i++) {
		uint64_t d = ev[i].data.u64;
		struct cconn *cc = d == EP_LISTEN || d == EP_USAGE ? NULL : co->conns[d - EP_CONN0];

		if (done[i]) {
			continue;
		} else if (d == EP_LISTEN) {
			listen = done[i] = true;
		} else if (cc && cc->holder >= 0) {
			conn_event(co, (int)(d - EP_CONN0), ev[i].events);
			done[i] = true;
		}
	}
	for (int i = 0; i < n; i++)
		if (!done[i])
			conn_event(co, (int)(ev[i].data.u64 - EP_CONN0), ev[i].events);
	if (listen)
		accept_all(co);
}

/* Periodic work: silent holders stop asking, targets follow demand, the
 * invariant is checked.
 */
static void tick(struct coord *co)
{
	uint64_t now = clock_now_ns(), silence = lease_deadline(0, co->cfg.ttl_ns);

	for (size_t ci = 0; ci < co->max_conns; ci++) {
		struct cconn *cc = co->conns[ci];

		if (cc && cc->holder < 0 && now - cc->accepted_ns > COORD_HELLO_DEADLINE_NS) {
			co->hello_timeouts++;
			conn_drop(co, (int)ci, "no HELLO in time");
		}
	}

	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++) {
		struct cholder *h = &co->h[hi];

		if (h->used && h->asking && now - h->last_report_ns > silence) {
			pr_info("holder '%s' silent for %.3f s: its share goes to the others\n",
				h->name, ns_to_s(now - h->last_report_ns));
			holder_asking(co, (int)hi, false);
		}
	}

	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct climit *c = &co->lim[l];

		if (c->dirty && now >= c->next_recompute_ns)
			targets_recompute(c, now);
		/* Every key visited now and then; violations seen while granting. */
		co->violations += hotkeys_tick(&c->hot, &c->led, now, false);
		check_invariant(co, c, now);
	}
}

static void reload(struct coord *co)
{
	/* New certificates for new connections; the ones up keep theirs. */
	if (co->tls.ctx) {
		char err[CFG_ERR_LEN];

		if (tls_ctx_load(&co->tls, &co->cfg.tls, true, err, sizeof(err)))
			pr_warn("%s; the certificate in use stays\n", err);
		else
			pr_info("tls: certificate '%s' reloaded\n", co->cfg.tls.cert);
	}
	pr_info("reloading policy '%s'\n", co->cfg.policy_path);
	if (policy_load(co, false)) {
		co->reloads_refused++;
		pr_warn("reload refused; policy version %llu stays\n",
			(unsigned long long)co->pol->version);
		return;
	}
	co->reloads++;
	usage_ledger_ensure(co); /* a newly metered limit; failing, its reports get no grant */
	for (int ci = 0; ci < (int)co->max_conns; ci++) {
		if (co->conns[ci] && co->conns[ci]->holder >= 0)
			send_policy(co, ci);
		conn_watch(co, ci);
	}
}

/* Become `user` once every socket is bound and the state is open: the
 * coordinator needs no privilege to lease. The state directory and its
 * files pass to that user first (compaction creates files there). Returns
 * 0, or 1 with a log line; never half-done (setgid before setuid, both
 * checked, and root cannot be regained).
 */
static int run_as(struct coord *co, const char *user)
{
	static const char *const files[] = {
	    ".", "epoch.log", "usage.log", "initialised", "ledger.db", "ledger.db-wal", "ledger.db-shm",
	};
	struct passwd *pw = getpwnam(user);

	if (!pw) {
		pr_warn("user '%s' (coord.yaml user:) does not exist\n", user);
		return 1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		if (fchownat(co->store.dir_fd, files[i], pw->pw_uid, pw->pw_gid, 0) &&
		    errno != ENOENT) {
			pr_warn("cannot give state-dir '%s' to '%s': %s\n", co->cfg.state_dir, user,
				strerror(errno));
			return 1;
		}
	if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid) ||
	    (pw->pw_uid != 0 && setuid(0) == 0)) {
		pr_warn("cannot run as '%s': %s\n", user, strerror(errno));
		return 1;
	}
	pr_info("running as '%s' (uid %u)\n", user, (unsigned)pw->pw_uid);
	return 0;
}

static int coord_start(struct coord *co)
{
	struct cfg_policy *scratch = calloc(1, sizeof(*scratch));
	struct cfg_err e;
	int err;

	if (!scratch)
		return 1;
	err = cfg_coord_load(co->path, &co->cfg, scratch, &e);
	free(scratch);
	if (err) {
		pr_warn("%s\n", e.msg);
		return 2;
	}
	co->h = calloc(co->cfg.gateways, sizeof(*co->h));
	co->max_conns = co->cfg.gateways + COORD_SPARE_CONNS;
	co->conns = calloc(co->max_conns, sizeof(*co->conns));
	co->ep = epoll_create1(EPOLL_CLOEXEC);
	if (!co->h || !co->conns || co->ep < 0)
		return 1;
	for (uint32_t i = 0; i < co->cfg.gateways; i++)
		co->h[i].conn = -1;
	if (policy_load(co, true))
		return 2;
	if (co->cfg.tls.set) {
		char msg[CFG_ERR_LEN];

		if (tls_ctx_load(&co->tls, &co->cfg.tls, true, msg, sizeof(msg))) {
			pr_warn("%s\n", msg);
			return 2;
		}
	}
	err = coord_store_open(&co->store, co->cfg.state_dir);
	if (err) {
		pr_warn("cannot use state-dir '%s': %s\n", co->cfg.state_dir, strerror(-err));
		return 1;
	}
	/* Grants of earlier epochs may be live until their deadline: wait them out. */
	co->quiet_until = clock_now_ns() + lease_deadline(0, co->cfg.ttl_ns);
	pr_info("epoch %llu (durable); quiet for %.3f s before the first grant\n",
		(unsigned long long)co->store.epoch, ns_to_s(lease_deadline(0, co->cfg.ttl_ns)));
	co->listen_fd = net_listen(co->cfg.listen);
	if (co->listen_fd < 0) {
		pr_warn("cannot listen on '%s': %s\n", co->cfg.listen, strerror(-co->listen_fd));
		return 1;
	}
	if (epoll_ctl(co->ep, EPOLL_CTL_ADD, co->listen_fd,
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = EP_LISTEN}))
		return 1;
	if (co->cfg.has_metrics) {
		int err =
		    http_start(&co->metrics, co->cfg.metrics, coord_metrics_write, co, &co->lock);

		if (err) {
			pr_warn("cannot listen for metrics on '%s': %s\n", co->cfg.metrics,
				strerror(-err));
			return 1;
		}
	}
	if (co->cfg.user[0] && run_as(co, co->cfg.user))
		return 1;
	/* As the user it runs as: the ledger's files are its own. */
	if (usage_ledger_ensure(co))
		return 1;
	pr_info("coordinator listening on %s%s\n", co->cfg.listen,
		co->tls.ctx ? " (mutual TLS)" : co->cfg.insecure ? " (insecure: no TLS)" : "");
	return 0;
}

int coord_run(const char *config_path)
{
	struct coord *co = calloc(1, sizeof(*co));
	int rc;

	if (!co)
		return 1;
	co->path = config_path;
	co->listen_fd = co->ep = co->metrics.fd = -1;
	pthread_mutex_init(&co->lock, NULL);
	co->store.dir_fd = co->store.epoch_fd = co->store.usage_fd = -1;
	co->msg = malloc(sizeof(*co->msg));
	co->out = malloc(sizeof(*co->out));
	signals_install();
	signal(SIGPIPE, SIG_IGN);
	rc = co->msg && co->out ? coord_start(co) : 1;
	while (!rc && !sig_stop) {
		struct epoll_event ev[COORD_EPOLL_BATCH];
		int n = epoll_wait(co->ep, ev, COORD_EPOLL_BATCH, COORD_TICK_MS);

		/* The state lock: the metrics thread reads struct coord under it. */
		pthread_mutex_lock(&co->lock);
		if (sig_reload) {
			sig_reload = 0;
			reload(co);
		}
		handle_events(co, ev, n);
		tick(co);
		pthread_mutex_unlock(&co->lock);
	}
	http_stop(&co->metrics);
	for (int ci = 0; co->conns && ci < (int)co->max_conns; ci++)
		conn_drop(co, ci, "coordinator exiting");
	if (co->listen_fd >= 0)
		close(co->listen_fd);
	if (co->ep >= 0)
		close(co->ep);
	limits_free(co->lim, co->n_limits);
	free(co->h);
	free(co->hl);
	free(co->conns);
	coord_store_close(&co->store);
	/* After the connections: what the writer still commits gets no ack. */
	uwriter_stop(co->uw);
	free(co->pol);
	free(co->yaml);
	tls_ctx_free(&co->tls);
	free(co->msg);
	free(co->out);
	free(co);
	return rc;
}
