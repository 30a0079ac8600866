// SPDX-License-Identifier: MIT
/*
 * Replicas (coord.yaml replicas:, reference §6.4): the coordinator's side
 * of the election. The thread (election.c) decides leadership with etcd;
 * this file takes its view on the event loop and acts on it:
 *
 *  - a new term (this replica leads under an epoch it did not lead
 *    before): grants go out under that epoch after a quiet period, in
 *    which holders' proven shares are adopted (grants.c), as after a
 *    single coordinator's restart;
 *  - the same epoch again after a step-down by its own clock (etcd
 *    answered again and the key was still ours): no one else led
 *    meanwhile, so the ledger is still the truth and grants resume;
 *  - leadership lost: every holder's connection is answered with a
 *    REDIRECT naming the leader, and closed;
 *  - whatever the thread believes, no grant leaves after the deadline
 *    (t_send of the last keepalive etcd answered + ttl·(1 − ρ) − δ): a
 *    leader cut off from etcd stops on its own clock, before etcd can
 *    have made another leader.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include "lib/conn.h"
#include "lib/lease_clock.h"
#include "lib/log.h"
#include "lib/monotonic.h"
#include "coord/coord_int.h"

void election_cfg_of(const struct cfg_replicas *r, struct election_cfg *ec)
{
	memset(ec, 0, sizeof(*ec));
	ec->n_endpoints = r->n_etcd;
	ec->ttl_s = (unsigned)(r->ttl_ns / NSEC_PER_SEC);
	for (uint32_t i = 0; i < r->n_etcd && i < ELECTION_MAX_ENDPOINTS; i++)
		snprintf(ec->endpoints[i], sizeof(ec->endpoints[i]), "%s", r->etcd[i]);
	snprintf(ec->prefix, sizeof(ec->prefix), "%s", r->prefix);
	snprintf(ec->node, sizeof(ec->node), "%s", r->node);
	if (r->tls.set) {
		snprintf(ec->tls_ca, sizeof(ec->tls_ca), "%s", r->tls.ca);
		snprintf(ec->tls_cert, sizeof(ec->tls_cert), "%s", r->tls.cert);
		snprintf(ec->tls_key, sizeof(ec->tls_key), "%s", r->tls.key);
	}
	snprintf(ec->advertise, sizeof(ec->advertise), "%s", r->advertise);
}

int leadership_start(struct coord *co)
{
	const struct cfg_replicas *r = &co->cfg.replicas;
	struct election_cfg ec;
	int err;

	if (!co->cfg.has_replicas) {
		co->epoch = co->store.epoch;
		return 0;
	}
	election_cfg_of(r, &ec);
	co->epoch = 0; /* nothing is granted until this replica leads */
	co->quiet_until = UINT64_MAX;
	err = election_start(&co->el, &ec);
	if (err) {
		pr_warn("cannot start the election: %s\n", strerror(-err));
		return err;
	}
	if (epoll_ctl(co->ep, EPOLL_CTL_ADD, election_fd(co->el),
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = EP_ELECTION}))
		return -errno;
	pr_info("replica '%s' (agents dial %s): electing through etcd under %s, lease %u s\n",
		r->node, r->advertise, r->prefix, ec.ttl_s);
	return 0;
}

void leadership_stop(struct coord *co)
{
	if (co->el)
		election_stop(co->el); /* resigns: a follower takes over at once */
	co->el = NULL;
}

bool coord_may_grant(struct coord *co, uint64_t now)
{
	if (!co->el)
		return true;
	if (coord_leads(co) && now < co->ev.deadline_ns)
		return true;
	co->deadline_refusals++;
	return false;
}

void redirect_hello(struct coord *co, int ci, const char *holder)
{
	struct wire_msg *m = co->out;
	struct cconn *cc = co->conns[ci];

	WIRE_MSG_CLEAR(m, redirect);
	m->type = WIRE_REDIRECT;
	m->redirect.epoch = co->ev.epoch;
	if (!co->ev.leader) {
		snprintf(m->redirect.leader, sizeof(m->redirect.leader), "%s", co->ev.leader_node);
		snprintf(m->redirect.address, sizeof(m->redirect.address), "%s",
			 co->ev.leader_addr);
	}
	co->redirects_sent++;
	pr_debug("holder '%s': not the leader, redirected to '%s' (%s)\n", holder,
		 m->redirect.leader, m->redirect.address);
	/* Best effort: a frame this small goes straight into the socket. */
	if (!send_msg(co, ci, m))
		conn_flush(&cc->c);
	conn_drop(co, ci, "not the leader");
}

/* Leadership lost: each holder is told who leads and let go. */
static void let_go(struct coord *co)
{
	for (int ci = 0; ci < (int)co->max_conns; ci++) {
		if (co->conns[ci] && co->conns[ci]->holder >= 0)
			redirect_hello(co, ci, co->h[co->conns[ci]->holder].name);
	}
}

static void term_begin(struct coord *co, uint64_t now)
{
	co->terms++;
	co->led_epoch = co->epoch = co->ev.epoch;
	/* Grants of earlier leaders may live until their deadline: capacity
	 * moves once they are dead; proven shares are adopted meanwhile.
	 */
	co->quiet_until = now + lease_deadline(0, co->cfg.ttl_ns);
	for (uint32_t l = 0; l < co->n_limits; l++)
		hotkeys_term_begin(&co->lim[l].hot);
	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++) {
		for (uint32_t l = 0; l < co->n_limits; l++) {
			struct cholder_limit *hl = holder_lim(co, (int)hi, l);

			hl->adopt_tried = hl->adopted = false;
			hl->adopt_rate = hl->adopt_burst = 0;
		}
	}
	pr_info("leading at epoch %llu; quiet for %.3f s before capacity moves\n",
		(unsigned long long)co->epoch, ns_to_s(lease_deadline(0, co->cfg.ttl_ns)));
}

void on_election(struct coord *co)
{
	bool led = coord_leads(co);
	uint64_t now = clock_now_ns();
	char was[WIRE_HOLDER_LEN];

	memcpy(was, co->ev.leader_node, sizeof(was));
	election_view(co->el, &co->ev);
	if (!co->ev.leader && strcmp(was, co->ev.leader_node))
		pr_info("following '%s' at '%s' (epoch %llu)\n",
			co->ev.leader_node[0] ? co->ev.leader_node : "(none)", co->ev.leader_addr,
			(unsigned long long)co->ev.epoch);
	if (co->ev.leader && co->ev.epoch != co->led_epoch) {
		/* A new epoch: a new term, or this term moved past a holder's
		 * claim (election_floor), which needs no quiet period of its own
		 * (grants.c, on_hello).
		 */
		if (led && co->led_epoch) {
			co->led_epoch = co->epoch = co->ev.epoch;
			pr_info("leading at epoch %llu (moved past a holder's claim)\n",
				(unsigned long long)co->epoch);
		} else {
			term_begin(co, now);
		}
	} else if (co->ev.leader && !led) {
		pr_info("leading at epoch %llu again: etcd answered before another replica could "
			"lead\n",
			(unsigned long long)co->epoch);
	} else if (!co->ev.leader && led && co->led_epoch) {
		pr_warn("no longer leading (epoch %llu; leader now '%s' at '%s')\n",
			(unsigned long long)co->led_epoch, co->ev.leader_node, co->ev.leader_addr);
		let_go(co);
	}
}
