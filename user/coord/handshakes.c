// SPDX-License-Identifier: MIT
/*
 * The door (handshakes.h): accept, place, handshake, hand over. Runs on its
 * own thread and touches nothing of struct coord: what it shares with the
 * main loop is the queue and the TLS context (under mu) and its counters
 * (atomics).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "coord/handshakes.h"
#include "coord/slots.h"
#include "coord/state.h"
#include "lib/conn.h"
#include "lib/log.h"
#include "lib/monotonic.h"

#define HS_TICK_MS     20
#define HS_EPOLL_BATCH 64
/* Accepts per turn: the handshakes in progress are read between batches. */
#define HS_ACCEPT_BATCH 16
#define HS_LISTEN	0
#define HS_STOP		1
#define HS_CONN0	2
#define HS_REASONS	32

struct handshakes {
	pthread_t th;
	int ep, listen_fd, stop_fd, ready_fd;
	bool listening; /* the listener is watched (not while the queue is full) */
	uint32_t per_address, per_prefix;
	struct cconn **tab; /* handshakes in progress: the door's own */
	struct slot_table st;
	pthread_mutex_t mu; /* the queue and *tls */
	struct tls_ctx *tls;
	struct cconn **q;
	size_t q_len, q_cap;
	struct hs_counts n; /* written by the door only, atomically */
	/* Failures, said once a minute per reason (the last HS_REASONS). */
	struct {
		char why[160];
		uint64_t say_ns, unsaid;
	} said[HS_REASONS];
};

#define COUNT(hs, f) __atomic_fetch_add(&(hs)->n.f, 1, __ATOMIC_RELAXED)

static void hs_close(struct handshakes *hs, size_t i)
{
	struct cconn *cc = hs->tab[i];

	conn_close(&cc->c);
	free(cc);
	hs->tab[i] = NULL;
}

/* Queue cc for the main loop; the eventfd says so. */
static void hand_over(struct handshakes *hs, struct cconn *cc)
{
	bool room;

	pthread_mutex_lock(&hs->mu);
	room = hs->q_len < hs->q_cap;
	if (room)
		hs->q[hs->q_len++] = cc;
	if (room && hs->q_len == 1 && eventfd_write(hs->ready_fd, 1))
		pr_warn("handshakes: cannot wake the main loop: %s\n", strerror(errno));
	pthread_mutex_unlock(&hs->mu);
	if (!room) { /* never, by the bound on q_cap: kept so */
		COUNT(hs, full);
		conn_close(&cc->c);
		free(cc);
	}
}

static void watch(struct handshakes *hs, size_t i, int op)
{
	struct cconn *cc = hs->tab[i];
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HS_CONN0 + i};

	if (cc->c.want_write)
		ev.events |= EPOLLOUT;
	if (op == EPOLL_CTL_ADD || ev.events != cc->events) {
		if (epoll_ctl(hs->ep, op, cc->c.fd, &ev)) {
			hs_close(hs, i);
			return;
		}
		cc->events = ev.events;
	}
}

/* A refused handshake, with which side refused and why: each reason said
 * at most once a minute, with how many went unsaid since (a stranger
 * failing every second, or a flood, is a line a minute per reason).
 */
static void say_failure(struct handshakes *hs, const struct cconn *cc, uint64_t now)
{
	const char *why = conn_tls_why(&cc->c)[0] ? conn_tls_why(&cc->c) : "refused";
	char addr[INET6_ADDRSTRLEN];
	size_t k, oldest = 0;

	for (k = 0; k < HS_REASONS && strcmp(hs->said[k].why, why); k++)
		if (hs->said[k].say_ns < hs->said[oldest].say_ns)
			oldest = k;
	if (k == HS_REASONS) { /* a new reason takes the oldest's place */
		k = oldest;
		snprintf(hs->said[k].why, sizeof(hs->said[k].why), "%s", why);
		hs->said[k].say_ns = 0;
		hs->said[k].unsaid = 0;
	}
	if (now < hs->said[k].say_ns) {
		hs->said[k].unsaid++;
		return;
	}
	pr_info("TLS handshake from %s failed: %s (%llu more so in the last minute)\n",
		slots_addr_str(cc->peer, addr, sizeof(addr)), why,
		(unsigned long long)hs->said[k].unsaid);
	hs->said[k].say_ns = now + 60 * NSEC_PER_SEC;
	hs->said[k].unsaid = 0;
}

static void drive(struct handshakes *hs, size_t i, uint32_t events)
{
	struct cconn *cc = hs->tab[i];
	int r;

	if (!cc)
		return;
	if (events & EPOLLIN)
		cc->spoke = true;
	r = conn_handshake(&cc->c);
	if (r == 0) {
		watch(hs, i, EPOLL_CTL_MOD);
		return;
	}
	if (r < 0) {
		if (r == -EPROTO) {
			COUNT(hs, tls_failures);
			say_failure(hs, cc, clock_now_ns());
		}
		hs_close(hs, i);
		return;
	}
	epoll_ctl(hs->ep, EPOLL_CTL_DEL, cc->c.fd, NULL);
	cc->events = 0;
	hs->tab[i] = NULL;
	hand_over(hs, cc);
}

static bool queue_full(struct handshakes *hs)
{
	size_t n;

	pthread_mutex_lock(&hs->mu);
	n = hs->q_len;
	pthread_mutex_unlock(&hs->mu);
	return n >= hs->st.n;
}

/* One accepted connection: placed in the table (TLS) or handed over. */
static void admit(struct handshakes *hs, int fd, const struct sockaddr_storage *sa,
		  uint64_t batch_ns)
{
	uint64_t now = clock_now_ns();
	struct slot_pick p;
	struct cconn *cc;
	uint8_t peer[16];
	size_t i;

	slots_peer_bytes(sa, peer);
	if (hs->tls) {
		slots_pick(&hs->st, peer, batch_ns, now, &p);
		if (p.same_address >= hs->per_address || p.same_prefix >= hs->per_prefix) {
			if (p.same_address >= hs->per_address)
				COUNT(hs, crowded);
			else
				COUNT(hs, prefix);
			close(fd);
			return;
		}
		if (p.free < 0 && p.victim >= 0) {
			COUNT(hs, evicted);
			hs_close(hs, (size_t)p.victim);
			p.free = p.victim;
		}
		if (p.free < 0) {
			COUNT(hs, full);
			close(fd);
			return;
		}
	}
	if (!(cc = calloc(1, sizeof(*cc)))) {
		close(fd);
		return;
	}
	/* Grants go out one frame at a time: do not let Nagle hold them. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	conn_init(&cc->c, fd);
	cc->holder = -1;
	cc->accepted_ns = now;
	memcpy(cc->peer, peer, 16);
	if (!hs->tls) {
		hand_over(hs, cc);
		return;
	}
	pthread_mutex_lock(&hs->mu);
	i = conn_tls_start(&cc->c, hs->tls, NULL) ? SIZE_MAX : (size_t)p.free;
	pthread_mutex_unlock(&hs->mu);
	if (i == SIZE_MAX) {
		conn_close(&cc->c);
		free(cc);
		return;
	}
	hs->tab[i] = cc;
	watch(hs, i, EPOLL_CTL_ADD);
}

static void accept_batch(struct handshakes *hs)
{
	uint64_t batch_ns = clock_now_ns();

	for (int n = 0; n < HS_ACCEPT_BATCH; n++) {
		struct sockaddr_storage sa = {};
		socklen_t salen = sizeof(sa);
		int fd = accept4(hs->listen_fd, (struct sockaddr *)&sa, &salen,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		admit(hs, fd, &sa, batch_ns);
	}
}

/* Watch the listener only while the queue has room: the kernel's backlog
 * holds connections the main loop is not taking.
 */
static void listen_watch(struct handshakes *hs)
{
	bool want = !queue_full(hs);
	struct epoll_event ev = {.events = want ? EPOLLIN : 0, .data.u64 = HS_LISTEN};

	if (want != hs->listening && !epoll_ctl(hs->ep, EPOLL_CTL_MOD, hs->listen_fd, &ev))
		hs->listening = want;
}

static void deadline(struct handshakes *hs, uint64_t now)
{
	for (size_t i = 0; i < hs->st.n; i++)
		if (hs->tab[i] && now - hs->tab[i]->accepted_ns > COORD_HELLO_DEADLINE_NS) {
			COUNT(hs, timeouts);
			hs_close(hs, i);
		}
}

static void *hs_main(void *arg)
{
	struct handshakes *hs = arg;

	pthread_setname_np(pthread_self(), "ll-door"); /* top -H, perf */
	for (;;) {
		struct epoll_event ev[HS_EPOLL_BATCH];
		int n = epoll_wait(hs->ep, ev, HS_EPOLL_BATCH, HS_TICK_MS);
		bool listen = false;

		/* Handshakes in progress first, then new connections. */
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u64 == HS_STOP)
				return NULL;
			if (ev[i].data.u64 == HS_LISTEN)
				listen = true;
			else
				drive(hs, (size_t)(ev[i].data.u64 - HS_CONN0), ev[i].events);
		}
		if (listen)
			accept_batch(hs);
		deadline(hs, clock_now_ns());
		listen_watch(hs);
	}
}

int handshakes_fd(const struct handshakes *hs)
{
	return hs->ready_fd;
}

size_t handshakes_take(struct handshakes *hs, struct cconn **out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&hs->mu);
	n = hs->q_len < max ? hs->q_len : max;
	memcpy(out, hs->q, n * sizeof(*out));
	memmove(hs->q, hs->q + n, (hs->q_len - n) * sizeof(*hs->q));
	hs->q_len -= n;
	if (!hs->q_len) {
		eventfd_t v;

		(void)eventfd_read(hs->ready_fd, &v); /* readable again with the next one */
	}
	pthread_mutex_unlock(&hs->mu);
	return n;
}

int handshakes_reload_tls(struct handshakes *hs, const struct cfg_tls *c, char *err, size_t len)
{
	int r;

	pthread_mutex_lock(&hs->mu);
	r = tls_ctx_load(hs->tls, c, true, err, len);
	pthread_mutex_unlock(&hs->mu);
	return r;
}

void handshakes_counts(const struct handshakes *hs, struct hs_counts *out)
{
	const uint64_t *src = (const uint64_t *)&hs->n;
	uint64_t *dst = (uint64_t *)out;

	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

static void hs_free(struct handshakes *hs)
{
	for (size_t i = 0; hs->tab && i < hs->st.n; i++)
		if (hs->tab[i])
			hs_close(hs, i);
	for (size_t i = 0; i < hs->q_len; i++) {
		conn_close(&hs->q[i]->c);
		free(hs->q[i]);
	}
	slots_free(&hs->st);
	if (hs->ep >= 0)
		close(hs->ep);
	if (hs->stop_fd >= 0)
		close(hs->stop_fd);
	if (hs->ready_fd >= 0)
		close(hs->ready_fd);
	pthread_mutex_destroy(&hs->mu);
	free(hs->tab);
	free(hs->q);
	free(hs);
}

int handshakes_start(struct handshakes **out, int listen_fd, struct tls_ctx *tls, size_t slots,
		     uint32_t per_address, uint32_t per_prefix)
{
	struct handshakes *hs = calloc(1, sizeof(*hs));
	sigset_t all, old;
	int err;

	if (!hs)
		return -ENOMEM;
	pthread_mutex_init(&hs->mu, NULL);
	hs->listen_fd = listen_fd;
	hs->tls = tls && tls->ctx ? tls : NULL;
	hs->per_address = per_address;
	hs->per_prefix = per_prefix;
	hs->ep = hs->stop_fd = hs->ready_fd = -1;
	hs->ep = epoll_create1(EPOLL_CLOEXEC);
	hs->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	hs->ready_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	hs->tab = calloc(slots, sizeof(*hs->tab));
	/* Accepts stop with a table's worth queued; the handshakes in progress
	 * (a table's worth) still finish, a turn's worth of events and accepts
	 * at a time.
	 */
	hs->q_cap = 2 * slots + HS_EPOLL_BATCH + HS_ACCEPT_BATCH;
	hs->q = calloc(hs->q_cap, sizeof(*hs->q));
	if (hs->ep < 0 || hs->stop_fd < 0 || hs->ready_fd < 0) {
		err = -errno;
		goto fail;
	}
	err = -ENOMEM;
	if (!hs->tab || !hs->q || slots_init(&hs->st, hs->tab, slots))
		goto fail;
	if (epoll_ctl(hs->ep, EPOLL_CTL_ADD, listen_fd,
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = HS_LISTEN}) ||
	    epoll_ctl(hs->ep, EPOLL_CTL_ADD, hs->stop_fd,
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = HS_STOP})) {
		err = -errno;
		goto fail;
	}
	hs->listening = true;
	/* Signals are the main thread's (the loop acts on their flags). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	err = -pthread_create(&hs->th, NULL, hs_main, hs);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		goto fail;
	*out = hs;
	return 0;
fail:
	hs_free(hs);
	return err;
}

void handshakes_stop(struct handshakes *hs)
{
	if (!hs)
		return;
	if (eventfd_write(hs->stop_fd, 1) == 0)
		pthread_join(hs->th, NULL);
	hs_free(hs);
}
