// SPDX-License-Identifier: MIT
/*
 * Coordinated mode of the agent (see link.h). Invariants: a grant is
 * applied only as lease_grant_decide's fencing allows; its lease clock starts at
 * the send time of the report it answers, read before that report was sent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/socket.h>

#include <bpf/bpf.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "agent/link.h"
#include "lib/log.h"
#include "agent/policy.h"
#include "agent/stats.h"

#define LINK_BACKOFF_MIN_NS	100000000ull /* 100 ms */
#define LINK_BACKOFF_MAX_NS	NSEC_PER_SEC /* back within a second of a link returning */
#define LINK_REFRESH_DEFAULT	500000000ull
#define LINK_CONNECT_TIMEOUT_NS NSEC_PER_SEC
/* No grant for this many refresh intervals, once grants flowed, means the
 * link is dead even if TCP has not noticed (a cut path): redial.
 */
#define LINK_SILENCE_REFRESHES 4
/* No frame at all this long after the HELLO (a POLICY or a REDIRECT comes
 * at once from any live coordinator): the peer's kernel took the connection
 * but its process does not answer (stopped, hung). Leave it for the next
 * listed replica instead of waiting on it until TCP gives up.
 */
#define LINK_HELLO_TIMEOUT_NS (2 * NSEC_PER_SEC)
/* Policy versions from the coordinator (see version_ok): room for
 * timestamps as versions, not for a poisoned 2^64 - 1.
 */
#define LINK_VERSION_MAX      (1ull << 62)
#define LINK_VERSION_STEP_MAX (1ull << 40)

int link_init(struct link *l, const struct cfg_agent *ac)
{
	struct timespec ts;

	memset(l, 0, sizeof(*l));
	l->c.fd = -1;
	if (ac->n_coordinators) {
		memcpy(l->addrs, ac->coordinators, sizeof(l->addrs));
		l->n_addrs = ac->n_coordinators;
	} else {
		snprintf(l->addrs[0], sizeof(l->addrs[0]), "%s", ac->coordinator);
		l->n_addrs = 1;
	}
	l->redirect_to = -1;
	memcpy(l->addr, l->addrs[0], sizeof(l->addr));
	snprintf(l->holder, sizeof(l->holder), "%s", ac->node);
	clock_gettime(CLOCK_REALTIME, &ts);
	l->incarnation = ts_to_ns(&ts);
	l->refresh_ns = LINK_REFRESH_DEFAULT;
	l->backoff_ns = LINK_BACKOFF_MIN_NS;
	l->msg = malloc(sizeof(*l->msg));
	l->out = malloc(sizeof(*l->out));
	if (!l->msg || !l->out || meter_init(&l->meter))
		return -ENOMEM;
	return ac->tls.set ? link_tls_reload(l, ac) : 0;
}

int link_tls_reload(struct link *l, const struct cfg_agent *ac)
{
	char err[CFG_ERR_LEN];
	int rc;

	if (!ac->tls.set) {
		if (l->tls.ctx)
			pr_warn("reload: tls: removed; restart the agent to talk plain TCP\n");
		return 0;
	}
	rc = tls_ctx_load(&l->tls, &ac->tls, false, err, sizeof(err));
	if (rc)
		pr_warn("%s\n", err);
	else
		pr_info("tls: certificate '%s' loaded for the coordinator link\n", ac->tls.cert);
	return rc;
}

void link_free(struct link *l)
{
	hot_close(&l->hot);
	meter_free(&l->meter);
	tls_ctx_free(&l->tls);
	conn_close(&l->c);
	free(l->msg);
	free(l->out);
	l->msg = l->out = NULL;
}

int link_pollfd(const struct link *l, short *events)
{
	if (l->c.fd < 0)
		return -1;
	*events = POLLIN;
	if (l->connecting || conn_wants_write(&l->c))
		*events |= POLLOUT;
	return l->c.fd;
}

/* The link's counters and state into ll_state, for status and metrics. */
static void link_stats(struct link *l, struct dp *dp)
{
	dp_link_stats_write(dp, &(struct ll_state){.grants_applied = l->grants_applied,
						   .grants_stale = l->grants_stale,
						   .grants_clamped = l->grants_clamped,
						   .grants_bad_keys = l->grants_bad_keys,
						   .hot_keys_listed = l->hot.reported,
						   .hot_keys_dropped = l->hot.dropped,
						   .link_up = l->up,
						   .link_connects = l->connects});
	l->up_written = l->up;
}

static bool link_holds_live(const struct link *l, uint64_t now)
{
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		if (l->held[id].epoch && l->held[id].expiry_ns > now)
			return true;
	}
	return false;
}

/* A read or write error as words: a TLS failure names which side refused
 * and why (conn_tls_why).
 */
static const char *link_err(struct link *l, int err)
{
	static char buf[192];

	if (err != -EPROTO || !l->tls.ctx)
		return strerror(-err);
	snprintf(buf, sizeof(buf), "TLS %s: %s", conn_tls_established(&l->c) ? "record" : "handshake",
		 conn_tls_why(&l->c)[0] ? conn_tls_why(&l->c) : "refused");
	return buf;
}

static void link_down(struct link *l, const char *why, uint64_t now)
{
	/* Once per change of state: a link that fails the same way every
	 * second says so once (and at debug level after).
	 */
	enum log_level lv = strcmp(why, l->said_down) ? LOG_INFO : LOG_DEBUG;

	if (l->up)
		log_print(lv, "coordinator link down (%s); leases run out in the kernel\n", why);
	else
		log_print(lv, "coordinator not reachable (%s)\n", why);
	snprintf(l->said_down, sizeof(l->said_down), "%s", why);
	conn_close(&l->c);
	l->up = l->connecting = false;
	/* The next replica at once (the one a REDIRECT named first); back off
	 * only once each has been tried since the last frame.
	 */
	if (l->n_addrs > 1) {
		l->cur = l->redirect_to >= 0 ? (uint32_t)l->redirect_to : (l->cur + 1) % l->n_addrs;
		memcpy(l->addr, l->addrs[l->cur], sizeof(l->addr));
		if (++l->tried < l->n_addrs) {
			l->redirect_to = -1;
			l->next_dial_ns = now;
			return;
		}
		l->tried = 0;
	}
	l->redirect_to = -1;
	l->next_dial_ns = now + l->backoff_ns;
	l->backoff_ns =
	    l->backoff_ns * 2 > LINK_BACKOFF_MAX_NS ? LINK_BACKOFF_MAX_NS : l->backoff_ns * 2;
	/* While a lease it could re-present is alive, a restarted coordinator
	 * can adopt it only if the link is back before it dies: redial at the
	 * shortest back-off until then (bounded by the lease's life).
	 */
	if (link_holds_live(l, now))
		l->backoff_ns = LINK_BACKOFF_MIN_NS;
}

static void send_hello(struct link *l, struct dp *dp, uint64_t now)
{
	struct wire_msg *m = l->out;
	struct ll_state st = {};
	struct ll_fence f = {};
	int err;

	dp_state_read(dp->state_fd, &st);
	dp_fence_read(dp, &f);
	WIRE_MSG_CLEAR(m, hello);
	m->type = WIRE_HELLO;
	snprintf(m->hello.holder, sizeof(m->hello.holder), "%s", l->holder);
	m->hello.incarnation = l->incarnation;
	m->hello.max_epoch_seen = f.max_epoch_seen;
	m->hello.policy_version = st.version;
	m->hello.counters_ident = dp->meter_ident;
	l->hello_ns = now;
	err = conn_send(&l->c, m);
	if (err)
		link_down(l, link_err(l, err), now);
}

/* Offered load since the last report, per limit: the demand estimate. */
static uint64_t demand_of(struct link *l, uint32_t id, uint64_t offered, uint64_t now)
{
	uint64_t dt = now - l->last_sample_ns, d;

	if (!l->last_sample_ns || dt == 0 || offered < l->last_offered[id])
		return l->demand[id];
	/* Offered load counts denied packets too, so a holder held at its share
	 * shows its growth without headroom; headroom would only strand capacity
	 * with gateways that do not use it.
	 */
	d = (offered - l->last_offered[id]) * NSEC_PER_SEC / dt;
	return d + 1;
}

/* The grant applied, if this agent applied it and it is live: with its tag. */
static void held_put(const struct link_held *h, struct wire_report_entry *e, uint64_t now)
{
	if (!h->epoch || h->epoch != e->applied_epoch || h->seq != e->applied_seq ||
	    h->expiry_ns <= now)
		return;
	e->held_rate = h->rate;
	e->held_burst = h->burst;
	e->held_ttl_ns = h->ttl_ns;
	e->held_left_ns = h->expiry_ns - now;
	memcpy(e->held_tag, h->tag, sizeof(e->held_tag));
}

static void send_report(struct link *l, struct dp *dp, uint64_t now)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct wire_report *r = &l->out->report;
	int entry_of[LL_MAX_LIMITS];
	struct ll_fence f = {};
	uint32_t slot;
	int err;

	if (!pol || dp_policy_read(dp->policy_fd, dp->state_fd, pol) || dp_fence_read(dp, &f))
		goto out;
	WIRE_MSG_CLEAR(l->out, report.n);
	l->out->type = WIRE_REPORT;
	snprintf(r->holder, sizeof(r->holder), "%s", l->holder);
	r->incarnation = l->incarnation;
	r->max_epoch_seen = f.max_epoch_seen;
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *c = &pol->limits[id];
		struct wire_report_entry *e = &r->e[r->n];
		struct ll_limit_stats s;
		bool bytes = c->unit == LL_UNIT_BYTES;

		entry_of[id] = -1;
		if (!c->in_use || c->scope != LL_SCOPE_GLOBAL ||
		    stats_limit(dp->limit_stats_fd, id, &s))
			continue;
		entry_of[id] = (int)r->n;
		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "%s", c->name);
		e->applied_epoch = f.applied_epoch[id];
		e->applied_seq = f.applied_seq[id];
		held_put(&l->held[id], e, now);
		e->admitted = bytes ? s.allowed_bytes : s.allowed_pkts;
		e->denied = bytes ? s.denied_bytes : s.denied_pkts;
		e->fallback = bytes ? s.fallback_bytes : s.fallback_pkts;
		e->bypass = bytes ? s.bypass_bytes : s.bypass_pkts;
		l->demand[id] =
		    demand_of(l, id, e->admitted + e->denied + e->fallback + e->bypass, now);
		/* A per-key limit's share applies to each key: no key needs more
		 * than the whole contract, whatever all keys offer together.
		 */
		if (c->key_mode != LL_KEY_NONE && l->demand[id] > c->rate)
			l->demand[id] = c->rate;
		l->last_offered[id] = e->admitted + e->denied + e->fallback + e->bypass;
		e->demand = l->demand[id];
		r->n++;
	}
	/* Keys denied since the last report, or within a refresh interval
	 * before it (it may have gone out just before the denials began), are
	 * still hot.
	 */
	hot_report(&l->hot, dp, pol, entry_of, r,
		   (l->last_sample_ns ? now - l->last_sample_ns : 0) + l->refresh_ns, now);
	l->last_sample_ns = now;
	link_stats(l, dp);
	r->seq = ++l->report_seq;
	/* The clock was read before the send: a grant answering this report
	 * starts its lease no later than the coordinator issues it.
	 */
	slot = (uint32_t)(r->seq % LINK_SENT_RING);
	l->sent_seq[slot] = r->seq;
	l->sent_ns[slot] = now;
	err = conn_send(&l->c, l->out);
	if (err)
		link_down(l, link_err(l, err), now);
	l->next_report_ns = now + l->refresh_ns;
out:
	free(pol);
}

/* A policy version from the network may move the running one only so far:
 * a poisoned huge version would stick in the pins and refuse every real
 * policy after it.
 */
static int version_ok(struct dp *dp, uint64_t version, char *err, size_t errlen)
{
	struct ll_state st = {};

	dp_state_read(dp->state_fd, &st);
	if (version >= LINK_VERSION_MAX ||
	    (st.version && version > st.version && version - st.version > LINK_VERSION_STEP_MAX)) {
		snprintf(err, errlen,
			 "policy version %llu is out of bounds (below 2^62, at most 2^40 above the "
			 "running %llu)",
			 (unsigned long long)version, (unsigned long long)st.version);
		return -ERANGE;
	}
	return 0;
}

static void on_policy(struct link *l, struct dp *dp, const struct wire_policy *p, uint64_t now)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	char err[CFG_ERR_LEN];
	struct cfg_err e;
	int rc;

	if (!cp)
		return;
	rc = link_epoch_see(dp, p->epoch, l->incarnation);
	if (rc == -ESTALE || rc == -ERANGE) {
		pr_warn("coordinator epoch %llu is %s: dropping the link\n",
			(unsigned long long)p->epoch,
			rc == -ESTALE
			    ? "older than one already seen"
			    : "out of bounds (leaseline reset-fence clears a poisoned fence)");
		link_down(l, rc == -ESTALE ? "stale coordinator" : "epoch out of bounds", now);
		goto out;
	}
	if (rc) {
		pr_warn("cannot record coordinator epoch %llu: %s\n", (unsigned long long)p->epoch,
			strerror(-rc));
		goto out;
	}
	rc = cfg_policy_parse_served(p->yaml, p->len, cp, &e);
	if (rc)
		snprintf(err, sizeof(err), "%s", e.msg);
	else
		rc = version_ok(dp, cp->version, err, sizeof(err));
	if (!rc)
		rc = policy_apply(dp, cp, err, sizeof(err));
	if (rc) {
		/* Visible in status and metrics, not only here: the gateway keeps
		 * enforcing what it ran (or, with nothing yet, stays unattached).
		 */
		l->policies_refused++;
		dp_refusal_note(dp, p->version, err, now);
		pr_warn("policy version %llu from the coordinator refused: %s\n",
			(unsigned long long)p->version, err);
		goto out;
	}
	l->policies_applied++;
	pr_info("policy version %llu from the coordinator applied (epoch %llu)\n",
		(unsigned long long)cp->version, (unsigned long long)p->epoch);
	send_report(l, dp, clock_now_ns());
out:
	free(cp);
}

/* Send time of the request a grant answers, or 0 if it is not remembered. */
static uint64_t sent_time(const struct link *l, uint64_t report_seq)
{
	uint32_t slot = (uint32_t)(report_seq % LINK_SENT_RING);

	if (report_seq == 0)
		return l->hello_ns;
	return l->sent_seq[slot] == report_seq ? l->sent_ns[slot] : 0;
}

int link_lease_apply(struct dp *dp, uint32_t id, const struct lease_grant *g, uint64_t now)
{
	return link_lease_apply_keys(dp, id, 0, g, NULL, 0, WIRE_KEYS_WHOLE, 0, now);
}

int link_lease_apply_keys(struct dp *dp, uint32_t id, uint32_t uid, const struct lease_grant *g,
			  struct lease_key *keys, size_t n_keys, uint8_t mode, uint64_t base,
			  uint64_t now)
{
	bool full = mode != WIRE_KEYS_CHANGES; /* whole or cut: the set after it is known */
	struct lease_key *held = NULL, *cut = NULL, *want = keys;
	struct lease_key_plan kp = {0};
	struct lease_update u;
	struct ll_lease old;
	struct ll_fence f;
	struct ll_state st;
	size_t n_held = 0, n_set = n_keys;
	int err = dp_fence_read(dp, &f);

	if (!err)
		err = dp_state_read(dp->state_fd, &st);
	if (!err)
		err = dp_lease_read(dp, id, &old);
	/* Changes build on the grant the coordinator saw acknowledged. */
	if (!err && keys && !full)
		err = lease_keys_base_check(&f, id, g->epoch, base);
	if (!err)
		err = lease_grant_decide(&old, &f, st.next_uid, id, g, now, dp->ncpus, &u);
	if (!err && keys) {
		if (full) {
			err = dp_key_grants_read(dp, uid, &held, &n_held);
		} else {
			held = calloc(n_keys + 1, sizeof(*held));
			err = held ? dp_key_grants_get(dp, uid, keys, n_keys, held, &n_held)
				   : -ENOMEM;
			n_set = lease_keys_sets(keys, n_keys);
		}
		if (!err && mode == WIRE_KEYS_CUT) {
			/* Every key at the least of what it holds, its entry
			 * named and the share: nothing rises.
			 */
			cut = calloc(n_held + n_keys + 1, sizeof(*cut));
			if (!cut)
				err = -ENOMEM;
			else
				n_set = lease_keys_cut(held, n_held, keys, n_keys, g->rate,
						       g->burst, want = cut);
		}
		kp.put = calloc(n_set + 1, sizeof(*kp.put));
		kp.del = calloc(n_held + 1, sizeof(*kp.del));
		if (!err && (!kp.put || !kp.del))
			err = -ENOMEM;
	}
	if (!err && keys) {
		size_t count;

		/* The lease's count is off (never while this agent wrote it):
		 * count what is held, since 0 would make buckets skip the set.
		 */
		if (!lease_keys_count(&old, full, n_set, n_held, &count)) {
			struct lease_key *all = NULL;
			size_t n_all = 0;

			err = dp_key_grants_read(dp, uid, &all, &n_all);
			free(all);
			count = n_all + n_set;
		}
		if (!err)
			err = lease_keys_decide(&old, held, n_held, want, n_set, count, &u, &kp);
	}
	if (!err)
		err = dp_lease_write(dp, id, u.next_gen, u.reset_pool, &u.lease, &u.fence, uid,
				     keys ? &kp : NULL, now);
	free(held);
	free(cut);
	free(kp.put);
	free(kp.del);
	return err;
}

int link_epoch_see(struct dp *dp, uint64_t epoch, uint64_t incarnation)
{
	struct ll_fence f;
	int err = dp_fence_read(dp, &f);

	if (!err)
		err = lease_fence_see_epoch(&f, epoch, incarnation);
	if (!err)
		err = dp_fence_write(dp, &f);
	return err;
}

/* The limit a grant names, in the running policy: its id (and *cfg, its
 * contract) if it is a global limit and the grant was made for exactly that
 * policy version, else -1. A grant for a version this agent refused (or has
 * not applied yet) is for a contract it does not enforce.
 */
static int grant_limit(struct dp *dp, const struct wire_grant *g, struct ll_limit_cfg *cfg)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	int id = -1;

	if (pol && !dp_policy_read(dp->policy_fd, dp->state_fd, pol) &&
	    g->policy_version == pol->version)
		id = policy_limit_id(pol, g->limit);
	if (id >= 0 && pol->limits[id].scope != LL_SCOPE_GLOBAL)
		id = -1;
	if (id >= 0)
		*cfg = pol->limits[id];
	free(pol);
	return id;
}

/* A grant's per-key set as the kernel will hold it, checked against the
 * limit's key mode and clamped to its contract. A malformed set refuses the
 * whole grant: a key left out would spend the share instead of its cut.
 */
static int grant_keys(struct link *l, const struct wire_grant *g, const struct ll_limit_cfg *cfg,
		      struct lease_key **out)
{

	struct lease_key *k = calloc(g->n_keys + 1, sizeof(*k));
	int n;

	*out = k;
	if (!k)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->n_keys; i++)
		k[i] = (struct lease_key){.key = g->keys[i].key,
					  .rate = g->keys[i].rate,
					  .burst = g->keys[i].burst,
					  .remove = g->keys[i].op == WIRE_KEY_REMOVE};
	/* A whole set names no key to remove. */
	n = (g->n_keys && cfg->key_mode == LL_KEY_NONE) ? -EINVAL
							: lease_keys_clamp(cfg, k, g->n_keys);
	for (uint32_t i = 0; n >= 0 && g->keys_full != WIRE_KEYS_CHANGES && i < g->n_keys; i++)
		if (k[i].remove)
			n = -EINVAL;
	if (n < 0) {
		l->grants_bad_keys++;
		pr_warn("grant for '%s' names a malformed or repeated key: refused\n", g->limit);
		return n;
	}
	if (n > 0) {
		l->grants_clamped++;
		pr_warn("grant for '%s': %d per-key grants beyond the contract: clamped\n",
			g->limit, n);
	}
	return 0;
}

/* A grant's path: which limit (policy), whether and how (lease, pure), then
 * the map writes (dp).
 */
static void on_grant(struct link *l, struct dp *dp, const struct wire_grant *g, uint64_t now)
{
	struct lease_grant lg = {
	    .epoch = g->epoch, .seq = g->seq, .rate = g->rate, .burst = g->burst};
	uint64_t t_send = sent_time(l, g->report_seq), ttl = g->ttl_ns;
	struct lease_key *keys = NULL;
	struct ll_limit_cfg cfg;
	int id, err = -ESTALE;

	if (strcmp(g->holder, l->holder) || g->incarnation != l->incarnation || !t_send)
		goto stale;
	id = grant_limit(dp, g, &cfg);
	if (id < 0)
		goto stale;
	/* Whatever the coordinator asks, no more than the contract allows. */
	if (lease_grant_clamp(&lg, &ttl, &cfg)) {
		l->grants_clamped++;
		pr_warn("grant for '%s' beyond the contract or the ttl cap (%llu/s, burst %llu, "
			"ttl %.3f s): clamped\n",
			g->limit, (unsigned long long)g->rate, (unsigned long long)g->burst,
			ns_to_s(g->ttl_ns));
	}
	lg.expiry_ns = lease_expiry(t_send, ttl);
	err = grant_keys(l, g, &cfg, &keys);
	/* Changes only on top of a whole set this connection applied. */
	if (!err && cfg.key_mode != LL_KEY_NONE && g->keys_full == WIRE_KEYS_CHANGES &&
	    l->kg_full_uid[id] != cfg.uid) {
		pr_debug("grant for '%s' changes a per-key set not received whole: refused\n",
			 g->limit);
		err = -ESTALE;
	}
	if (!err)
		err = link_lease_apply_keys(dp, (uint32_t)id, cfg.uid, &lg,
					    cfg.key_mode == LL_KEY_NONE ? NULL : keys, g->n_keys,
					    g->keys_full, g->keys_base, now);
	free(keys);
	/* A cut leaves a set the coordinator does not know: changes need a
	 * whole set after it.
	 */
	if (!err && g->keys_full != WIRE_KEYS_CHANGES)
		l->kg_full_uid[id] = g->keys_full == WIRE_KEYS_WHOLE ? cfg.uid : 0;
	if (!err && cfg.key_mode != LL_KEY_NONE)
		hot_grant_applied(&l->hot, (uint32_t)id, cfg.uid, g); /* the entries' tags */
	if (!err) {
		l->grants_applied++;
		l->held[id] = (struct link_held){.epoch = g->epoch,
						 .seq = g->seq,
						 .rate = g->rate,
						 .burst = g->burst,
						 .ttl_ns = g->ttl_ns,
						 .expiry_ns = lg.expiry_ns};
		memcpy(l->held[id].tag, g->tag, sizeof(l->held[id].tag));
		if (g->refresh_ns && g->refresh_ns < g->ttl_ns)
			l->refresh_ns = g->refresh_ns;
		pr_debug("grant %s epoch %llu seq %llu: %llu/s burst %llu, %.3f s left\n", g->limit,
			 (unsigned long long)g->epoch, (unsigned long long)g->seq,
			 (unsigned long long)g->rate, (unsigned long long)g->burst,
			 lg.expiry_ns > now ? ns_to_s(lg.expiry_ns - now) : 0.0);
		return;
	}
stale:
	l->grants_stale++;
	pr_debug("stale grant for '%s' (epoch %llu seq %llu) not applied: %s\n", g->limit,
		 (unsigned long long)g->epoch, (unsigned long long)g->seq, strerror(-err));
}

/* Not the leader. The leader it names is dialled next only if it is one of
 * the replicas the agent file lists (the same TLS trust applies to it);
 * otherwise the next one in turn. Either way it counts as a try: replicas
 * that name each other cannot keep the agent from backing off.
 */
static void on_redirect(struct link *l, const struct wire_redirect *r, uint64_t now)
{
	int to = -1;
	bool self = false;

	l->redirects++;
	for (uint32_t i = 0; r->address[0] && i < l->n_addrs; i++) {
		if (strcmp(l->addrs[i], r->address))
			continue;
		if (i == l->cur)
			self = true;
		else
			to = (int)i;
	}
	/* The names are the peer's: shown as data (the decoder bounds them).
	 * A replica that names itself holds the leader key but may not grant
	 * (stepped down on its deadline while etcd is silent).
	 */
	pr_info("coordinator %s is not the leader (leader '%s' at '%s', epoch %llu): %s\n", l->addr,
		r->leader, r->address, (unsigned long long)r->epoch,
		to >= 0		? "dialling it"
		: self		? "it names itself (not granting while etcd is silent), trying the next"
		: r->address[0] ? "not a listed replica, trying the next"
				: "trying the next");
	l->redirect_to = to;
	link_down(l, "not the leader", now);
}

static void read_frames(struct link *l, struct dp *dp, uint64_t now)
{
	int err = conn_read(&l->c), r = 0;

	while (l->c.fd >= 0 && (r = conn_next(&l->c, l->msg)) > 0) {
		/* A frame, not a TCP connect, is a link that works: one whose TLS
		 * handshake fails keeps backing off.
		 */
		l->backoff_ns = LINK_BACKOFF_MIN_NS;
		l->heard = true;
		l->said_down[0] = 0;
		if (l->msg->type != WIRE_REDIRECT)
			l->tried = 0;
		if (l->msg->type == WIRE_GRANT)
			l->last_grant_ns = now;
		if (l->msg->type == WIRE_POLICY)
			on_policy(l, dp, &l->msg->policy, now);
		else if (l->msg->type == WIRE_GRANT)
			on_grant(l, dp, &l->msg->grant, now);
		else if (l->msg->type == WIRE_METER_ACK)
			meter_on_ack(&l->meter, dp->meter_ident, &l->msg->meter_ack);
		else if (l->msg->type == WIRE_REDIRECT) {
			on_redirect(l, &l->msg->redirect, now);
			return;
		} else
			r = -EPROTO;
		if (r < 0)
			break;
	}
	if (l->c.fd >= 0 && r < 0)
		link_down(l,
			  r == -EPROTONOSUPPORT
			      ? "the coordinator speaks another wire version than this build's "
				WIRE_VERSION_STR " (upgrade coordinators first, then agents)"
			      : "malformed frame from the coordinator",
			  now);
	else if (l->c.fd >= 0 && err)
		link_down(l, err == -ECONNRESET ? "closed by the coordinator" : link_err(l, err), now);
}

static void dial(struct link *l, uint64_t now)
{
	int fd = net_connect(l->addr);

	if (fd < 0) {
		l->next_dial_ns = now + l->backoff_ns;
		return;
	}
	conn_init(&l->c, fd);
	l->connecting = true;
	l->dial_ns = now;
}

static void connected(struct link *l, struct dp *dp, uint64_t now)
{
	int soerr = 0;
	socklen_t len = sizeof(soerr);

	l->connecting = false;
	if (getsockopt(l->c.fd, SOL_SOCKET, SO_ERROR, &soerr, &len) || soerr) {
		link_down(l, strerror(soerr ? soerr : errno), now);
		return;
	}
	if (l->tls.ctx) {
		char host[CFG_ADDR_LEN];

		tls_host_of(l->addr, host, sizeof(host));
		if (conn_tls_start(&l->c, &l->tls, host)) {
			link_down(l, "cannot start TLS", now);
			return;
		}
	}
	l->up = true;
	l->connects++;
	l->last_grant_ns = 0;
	l->heard = false;
	memset(l->kg_full_uid, 0, sizeof(l->kg_full_uid));
	hot_reconnect(&l->hot);
	meter_reconnect(&l->meter);
	pr_info("connected to coordinator %s%s\n", l->addr, l->tls.ctx ? " (TLS)" : "");
	/* Over TLS the HELLO waits in the output until the handshake is done. */
	send_hello(l, dp, now);
}

void link_step(struct link *l, struct dp *dp, short revents, uint64_t now)
{
	int err;

	if (!l->hot.t && dp->hot_fd >= 0) {
		int err = hot_open(&l->hot, dp->hot_fd);

		if (err)
			pr_warn("cannot read the hot-key ring buffer: %s; no per-key grants\n",
				strerror(-err));
		if (err)
			dp->hot_fd = -1; /* say it once */
	}
	hot_poll(&l->hot);
	/* Up or down since ll_state last said: metrics and status follow. */
	if (l->up != l->up_written)
		link_stats(l, dp);
	if (l->c.fd < 0) {
		if (now >= l->next_dial_ns)
			dial(l, now);
		return;
	}
	if (l->connecting) {
		if (revents & (POLLOUT | POLLERR | POLLHUP))
			connected(l, dp, now);
		else if (now - l->dial_ns > LINK_CONNECT_TIMEOUT_NS)
			link_down(l, "connect timed out",
				  now); /* a lost SYN backs off for minutes */
		return;
	}
	if (revents & POLLOUT && (err = conn_flush(&l->c)))
		link_down(l, err == -EPROTO ? link_err(l, err) : "write failed", now);
	if (l->c.fd >= 0 && revents & (POLLIN | POLLHUP | POLLERR))
		read_frames(l, dp, now);
	/* Once grants flow, every report is answered: silence means a dead path. */
	if (l->up && l->c.fd >= 0 && l->last_grant_ns &&
	    now - l->last_grant_ns > LINK_SILENCE_REFRESHES * l->refresh_ns) {
		link_down(l, "no word from the coordinator", now);
		return;
	}
	if (l->up && l->c.fd >= 0 && !l->heard && now - l->hello_ns > LINK_HELLO_TIMEOUT_NS) {
		link_down(l, "no answer to HELLO", now);
		return;
	}
	if (l->up && l->c.fd >= 0 && now >= l->next_report_ns)
		send_report(l, dp, now);
	/* Per-key usage once the coordinator has answered (it knows the
	 * holder): after the report, in what room the output has left.
	 */
	if (l->up && l->c.fd >= 0 && l->last_grant_ns)
		meter_step(&l->meter, dp, &l->c, l->out, l->holder, l->incarnation, now);
}
