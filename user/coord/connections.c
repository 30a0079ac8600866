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
/* Connections accepted per turn of the loop: between batches the loop reads
 * the holders' reports and the first bytes of the connections just
 * accepted, so a flood of connects does not hold reports back. At most a
 * quarter of the spare slots: a connection is read before newer ones could
 * make it give way.
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
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

	if (!memcmp(cc->peer, v4mapped, sizeof(v4mapped)))
		inet_ntop(AF_INET, cc->peer + 12, buf, (socklen_t)len);
	else
		inet_ntop(AF_INET6, cc->peer, buf, (socklen_t)len);
	return buf;
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
void accept_all(struct coord *co)
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
