// SPDX-License-Identifier: MIT
/*
 * The coordinator's connections: accepting them into a bounded table
 * (strangers without a HELLO give way to gateways), reading frames and
 * handing each to its handler, sending, watching for writability while
 * output is queued, and dropping a connection (its holder stops asking).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>

#include "lib/monotonic.h"
#include "lib/conn.h"
#include "coord/coord_int.h"
#include "lib/log.h"
#include "coord/state.h"
#include "lib/tls.h"
#include "lib/wire.h"
#include "coord/handshakes.h"
#include "coord/slots.h"

/* Connections taken from the door per turn of the loop: between batches
 * the loop reads the holders' reports and the first bytes of the
 * connections just taken, so a flood of connects does not hold reports
 * back. At most a quarter of the spare slots: a connection is read before
 * newer ones could make it give way.
 */
#define COORD_ACCEPT_BATCH 16
_Static_assert(COORD_ACCEPT_BATCH * 4 <= COORD_SPARE_CONNS, "a batch must not fill the spares");

void conn_drop(struct coord *co, int ci, const char *why)
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

int send_msg(struct coord *co, int ci, const struct wire_msg *m)
{
	int err = conn_send(&co->conns[ci]->c, m);

	if (err)
		conn_drop(co, ci, strerror(-err));
	return err;
}

int send_policy(struct coord *co, int ci)
{
	struct wire_msg *m = co->out;

	WIRE_MSG_CLEAR(m, policy.len);
	m->type = WIRE_POLICY;
	m->policy.epoch = co->epoch;
	m->policy.version = co->pol->version;
	m->policy.len = (uint32_t)co->yaml_len;
	memcpy(m->policy.yaml, co->yaml, co->yaml_len);
	return send_msg(co, ci, m);
}

/* The address a connection came from, for log lines. */
const char *peer_str(const struct cconn *cc, char *buf, size_t len)
{
	return slots_addr_str(cc->peer, buf, len);
}

static void on_frame(struct coord *co, int ci, const struct wire_msg *m)
{
	struct cconn *cc = co->conns[ci];

	/* Answered in the version of its HELLO (an agent one version behind,
	 * during an upgrade, coordinators first); a peer that changes its
	 * version after that is broken.
	 */
	if (cc->holder >= 0 && m->version != cc->c.peer_version) {
		co->protocol_errors++;
		conn_drop(co, ci, "wire version changed after its hello");
		return;
	}
	if (m->type == WIRE_HELLO && cc->holder < 0) {
		cc->c.peer_version = m->version;
		if (m->version < WIRE_VERSION)
			co->old_version_hellos++;
		on_hello(co, ci, &m->hello);
	} else if (m->type == WIRE_REPORT)
		on_report(co, ci, &m->report);
	else if (m->type == WIRE_METER)
		on_meter(co, ci, &m->meter, clock_now_ns());
	else {
		co->protocol_errors++;
		conn_drop(co, ci, "unexpected message");
	}
}

/* A peer of another build (its frames carry a wire version this one does
 * not speak): said at most once a minute, whoever it is (strangers can
 * send such frames).
 */
static void version_refused(struct coord *co, int ci, uint16_t version)
{
	uint64_t now = clock_now_ns();
	char addr[INET6_ADDRSTRLEN];

	if (now < co->version_say_ns) {
		co->version_unsaid++;
		return;
	}
	co->version_say_ns = now + 60 * NSEC_PER_SEC;
	pr_warn("connection from %s refused: it speaks wire version %u, this build %u to "
		WIRE_VERSION_STR " (upgrade coordinators first, then agents, one version at a "
		"time; %llu more in the last minute)\n",
		peer_str(co->conns[ci], addr, sizeof(addr)), (unsigned)version, WIRE_VERSION_MIN,
		(unsigned long long)co->version_unsaid);
	co->version_unsaid = 0;
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
			if (r == -EPROTONOSUPPORT)
				version_refused(co, ci, co->msg->version);
			conn_drop(co, ci,
				  r == -EPROTONOSUPPORT ? "another wire version" : "malformed frame");
			return;
		}
		on_frame(co, ci, co->msg);
	}
	if (err && co->conns[ci])
		conn_drop(co, ci, err == -ECONNRESET ? "closed by peer" : strerror(-err));
}

/* Watch for writability only while output is queued. */
void conn_watch(struct coord *co, int ci)
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

/* Connections the door has finished with (a TLS handshake done, or just
 * accepted without TLS), placed in the table as the door places them: at
 * most COORD_ACCEPT_BATCH a turn; the door's eventfd stays readable while
 * more wait.
 */
void conns_admit(struct coord *co)
{
	struct cconn *in[COORD_ACCEPT_BATCH];
	size_t n = handshakes_take(co->hs, in, COORD_ACCEPT_BATCH);
	uint64_t batch_ns = clock_now_ns();

	for (size_t k = 0; k < n; k++) {
		struct cconn *cc = in[k];
		struct epoll_event ev = {.events = EPOLLIN};
		struct slot_pick p;
		size_t ci;

		slots_pick(&co->slots, cc->peer, batch_ns, clock_now_ns(), &p);
		if (p.same_address >= co->cfg.pending_per_address ||
		    p.same_prefix >= co->cfg.pending_per_prefix) {
			if (p.same_address >= co->cfg.pending_per_address)
				co->crowded_refused++;
			else
				co->prefix_refused++;
			conn_close(&cc->c);
			free(cc);
			continue;
		}
		if (p.free < 0 && p.victim >= 0) {
			co->pending_evicted++;
			conn_drop(co, (int)p.victim, "made room for a new connection");
			p.free = p.victim;
		}
		if (p.free < 0) {
			co->full_refused++;
			conn_close(&cc->c);
			free(cc);
			continue;
		}
		ci = (size_t)p.free;
		co->conns[ci] = cc;
		cc->events = EPOLLIN;
		ev.data.u64 = EP_CONN0 + ci;
		if (epoll_ctl(co->ep, EPOLL_CTL_ADD, cc->c.fd, &ev)) {
			conn_drop(co, (int)ci, "cannot watch it");
			continue;
		}
		/* After a handshake, its HELLO may be in already, and the
		 * handshake's last flight waiting for the socket.
		 */
		if (cc->c.ssl)
			conn_event(co, (int)ci, EPOLLIN | EPOLLOUT);
	}
}

void conn_event(struct coord *co, int ci, uint32_t events)
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

/* Connections that have not said HELLO within COORD_HELLO_DEADLINE_NS. */
void conns_hello_deadline(struct coord *co, uint64_t now)
{
	for (size_t ci = 0; ci < co->max_conns; ci++) {
		struct cconn *cc = co->conns[ci];

		if (cc && cc->holder < 0 && now - cc->accepted_ns > COORD_HELLO_DEADLINE_NS) {
			co->hello_timeouts++;
			conn_drop(co, (int)ci, "no HELLO in time");
		}
	}
}
