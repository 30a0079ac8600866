// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: one agent's whole session with a coordinator built in
 * this process (the pieces coord.c's start puts together: coord.yaml, the
 * policy, the durable store in a temp state dir made once per process),
 * its bytes fed through a socketpair into the real read path
 * (conn_event -> conn_read -> conn_next -> on_hello / on_report / on_meter)
 * for a bounded number of turns, with the periodic work of the main loop
 * (targets, hot keys, the invariant check) between turns.
 *
 * The input: byte 0 is flags, the rest is the byte stream the agent sends.
 *   bit 0  no built-in HELLO: the stream says its own (else a HELLO of
 *          holder "gw-1", incarnation 1, counters identity 7 goes first)
 *   bit 1  in the quiet period after a start (adoption; no grants)
 *   bits 2-3  how the stream is cut into writes: whole, 7, 61, 1021 bytes (at most MAX_TURNS
 *          writes: the rest is never sent)
 * Every input starts from the same state (limits rebuilt, holders empty,
 * the epoch back to the one of the open), so a run is deterministic but
 * for the clock, which only moves forward by microseconds.
 *
 * Whatever the bytes: no crash, leak or UB (the sanitizers); every frame
 * the coordinator sends decodes and is of a type it may send; no grant
 * above the limit's contract; and for every limit, after every turn, the
 * sum of live granted shares <= R and B less the reserve (the ledger), the
 * coordinator's own check never counts a violation.
 *
 * No usage-ledger writer thread runs (co->uw NULL): it would make a run
 * depend on its timing. METER batches of metered limits still go through
 * on_meter's checks (holder, limit, key shapes) and are answered RETRY;
 * reports' metered limits get no grant, the others do.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "fuzz/fuzz_tmp.h"
#include "coord/coord_int.h"
#include "coord/ledger.h"
#include "coord/state.h"
#include "coord/store.h"
#include "lib/conn.h"
#include "lib/log.h"
#include "lib/monotonic.h"
#include "lib/wire.h"

#define MAX_TURNS 64

static const char policy_text[] =
    "version: 1\n"
    "limits:\n"
    "  - {name: a, key: none, scope: global, rate: 900, burst: 90}\n"
    "  - {name: b, key: none, scope: global, rate: 1000, burst: 100, on-loss: fallback, "
    "fallback: {rate: 10, burst: 5}}\n"
    "  - {name: h, key: src-ip, scope: global, rate: 1000, burst: 1000}\n"
    "  - {name: k, key: src-ip, scope: global, rate: 500, burst: 50, meter: true}\n"
    "  - {name: d, key: dst-port, scope: global, rate: 500, burst: 50, meter: true}\n"
    "  - {name: f, key: flow, scope: global, rate: 500, burst: 50, meter: true}\n"
    "  - {name: l, key: src-ip, rate: 100, burst: 10}\n"
    "rules:\n"
    "  - {name: r1, limits: [a, b, h, k]}\n"
    "  - {name: r2, limits: [d, f, l]}\n";

static struct coord *co;
static uint64_t base_epoch;
/* The limits as the policy's load built them: each input starts from a
 * deep copy (parsing the policy again would cost most of an input's time).
 */
static struct climit pristine[LL_MAX_LIMITS];
static uint32_t n_pristine;
static uint8_t *rbuf; /* what the coordinator sent, as the agent reads it */
static struct wire_msg *rmsg;

/* Once per process: the coordinator as coord.c's start builds it, without
 * its sockets, TLS, metrics, election or usage-ledger writer.
 */
static void coord_setup(void)
{
	static const char coord_text[] =
	    "listen: 127.0.0.1:0\npolicy: policy.yaml\nstate-dir: state\n"
	    "lease: {ttl: 300ms, refresh: 100ms}\ngateways: 4\n";
	const char *dir = fuzz_dir("coord");
	struct cfg_policy *scratch = calloc(1, sizeof(*scratch));
	char path[128];
	struct cfg_err e;

	log_set_level(LOG_WARN);
	log_capture(true); /* warnings kept (bounded), not printed */

	if (!scratch)
		abort();
	fuzz_write_file(dir, "policy.yaml", policy_text, sizeof(policy_text) - 1);
	fuzz_write_file(dir, "coord.yaml", coord_text, sizeof(coord_text) - 1);
	snprintf(path, sizeof(path), "%s/coord.yaml", dir);
	co = calloc(1, sizeof(*co));
	if (!co)
		abort();
	co->path = strdup(path);
	co->listen_fd = co->ep = co->metrics.fd = -1;
	pthread_mutex_init(&co->lock, NULL);
	co->store.dir_fd = co->store.epoch_fd = co->store.usage_fd = -1;
	co->msg = malloc(sizeof(*co->msg));
	co->out = malloc(sizeof(*co->out));
	rmsg = malloc(sizeof(*rmsg));
	rbuf = malloc(CONN_MAX_OUT);
	if (cfg_coord_load(co->path, &co->cfg, scratch, &e)) {
		fprintf(stderr, "fuzz_coord_session: %s\n", e.msg);
		abort();
	}
	free(scratch);
	co->h = calloc(co->cfg.gateways, sizeof(*co->h));
	co->gone = calloc(co->cfg.gateways, sizeof(*co->gone));
	co->max_conns = co->cfg.gateways + COORD_SPARE_CONNS;
	co->conns = calloc(co->max_conns, sizeof(*co->conns));
	co->ep = epoll_create1(EPOLL_CLOEXEC);
	if (!co->msg || !co->out || !rmsg || !rbuf || !co->h || !co->gone || !co->conns || co->ep < 0 ||
	    coord_store_open(&co->store, co->cfg.state_dir) || leadership_start(co))
		abort();
	base_epoch = co->store.epoch;
	if (policy_load(co, true))
		abort();
	memcpy(pristine, co->lim, sizeof(pristine));
	n_pristine = co->n_limits;
	co->n_limits = 0; /* co->lim is pristine's until the first reset */
}

/* What a reload does for a limit that stays (limits.c climit_init), from
 * the pristine one: its own ledger, hot keys and targets.
 */
static void limit_copy(struct climit *c, const struct climit *p)
{
	*c = *p;
	memset(&c->hot, 0, sizeof(c->hot));
	c->t_rate = calloc(p->led.cap, sizeof(*c->t_rate));
	c->t_burst = calloc(p->led.cap, sizeof(*c->t_burst));
	if (ledger_copy(&c->led, &p->led) || hotkeys_copy(&c->hot, &p->hot) || !c->t_rate ||
	    !c->t_burst)
		abort();
}

/* Every input from the same state: no connection, no holder, the limits
 * built afresh from the policy (empty ledgers), the epoch of the open.
 */
static void coord_reset(bool quiet)
{
	for (int ci = 0; ci < (int)co->max_conns; ci++)
		conn_drop(co, ci, "next input");
	limits_free(co->lim, co->n_limits);
	for (uint32_t l = 0; l < n_pristine; l++)
		limit_copy(&co->lim[l], &pristine[l]);
	co->n_limits = n_pristine;
	memset(co->h, 0, co->cfg.gateways * sizeof(*co->h));
	for (uint32_t i = 0; i < co->cfg.gateways; i++)
		co->h[i].conn = -1;
	memset(co->hl, 0, (size_t)co->cfg.gateways * co->hl_cap * sizeof(*co->hl));
	co->store.epoch = co->epoch = base_epoch;
	/* HELLOs claiming later epochs append to epoch.log: keep it small
	 * (the in-memory epoch is what bump checks against).
	 */
	if (lseek(co->store.epoch_fd, 0, SEEK_END) > (1 << 20) && ftruncate(co->store.epoch_fd, 0))
		abort();
	/* The durable fallback/bypass totals a HELLO reads back: none. */
	if (ftruncate(co->store.usage_fd, 0))
		abort();
	co->violations = co->grants = co->stale_reports = co->protocol_errors = 0;
	co->meter_recorded = co->meter_retry = co->meter_refused = 0;
	co->adopted = co->adopt_refused = co->usage_failures = 0;
	co->quiet_until = quiet ? clock_now_ns() + 10 * NSEC_PER_SEC : 0;
	(void)log_captured(); /* and emptied */
}

/* The agent's end: read what came, check every frame. */
static void agent_drain(int fd, size_t *have)
{
	ssize_t n;

	while ((n = read(fd, rbuf + *have, CONN_MAX_OUT - *have)) > 0) {
		size_t off = 0;

		*have += (size_t)n;
		for (;;) {
			int r = wire_decode(rbuf + off, *have - off, rmsg);

			if (r == 0)
				break;
			if (r < 0)
				abort(); /* the coordinator sent a frame its own decoder refuses */
			if (rmsg->type != WIRE_POLICY && rmsg->type != WIRE_GRANT &&
			    rmsg->type != WIRE_METER_ACK && rmsg->type != WIRE_REDIRECT)
				abort();
			if (rmsg->type == WIRE_GRANT) {
				struct climit *c = limit_by_name(co, rmsg->grant.limit);

				if (!c || rmsg->grant.rate > c->rate ||
				    rmsg->grant.burst > c->burst || rmsg->grant.epoch != co->epoch)
					abort();
			}
			off += (size_t)r;
		}
		memmove(rbuf, rbuf + off, *have - off);
		*have -= off;
	}
}

/* The main loop's periodic work (coord_tick: targets, hot keys, the
 * coordinator's own invariant check), then the invariant from the ledgers.
 */
static void tick_and_check(void)
{
	uint64_t now;

	coord_tick(co);
	now = clock_now_ns();
	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct ledger *led = &co->lim[l].led;

		if (ledger_sum_rate(led, now) > led->rate ||
		    ledger_sum_burst(led, now) > led->burst)
			abort(); /* live shares above the contract */
	}
	if (co->violations)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[4] = {SIZE_MAX, 7, 61, 1021};
	uint8_t hello[WIRE_HDR_LEN + 256];
	struct wire_msg *m;
	struct cconn *cc;
	size_t chunk, off = 0, have = 0, hlen = 0;
	int sv[2];
	uint8_t flags;

	if (!co)
		coord_setup();
	if (size < 1)
		return 0;
	flags = data[0];
	data++;
	size--;
	coord_reset(flags & 2);
	chunk = chunks[(flags >> 2) & 3];
	if (!(flags & 1)) {
		m = co->out;
		WIRE_MSG_CLEAR(m, hello);
		m->type = WIRE_HELLO;
		snprintf(m->hello.holder, sizeof(m->hello.holder), "gw-1");
		m->hello.incarnation = 1;
		m->hello.counters_ident = 7;
		hlen = (size_t)wire_encode(m, hello, sizeof(hello));
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv))
		abort();
	cc = co->conns[0] = calloc(1, sizeof(*cc));
	if (!cc)
		abort();
	conn_init(&cc->c, sv[0]);
	cc->holder = -1;
	cc->accepted_ns = clock_now_ns();
	cc->peer[10] = cc->peer[11] = 0xff;
	cc->peer[12] = 127;
	cc->peer[15] = 1;
	cc->events = EPOLLIN;
	if (hlen && write(sv[1], hello, hlen) != (ssize_t)hlen)
		abort();
	for (int turn = 0; turn < MAX_TURNS && co->conns[0]; turn++) {
		size_t want = size - off < chunk ? size - off : chunk;
		ssize_t w = want ? write(sv[1], data + off, want) : 0;

		if (w > 0)
			off += (size_t)w;
		conn_event(co, 0, EPOLLIN);
		agent_drain(sv[1], &have);
		if (co->conns[0] && conn_wants_write(&co->conns[0]->c))
			conn_event(co, 0, EPOLLOUT);
		tick_and_check();
		if (off == size && !want)
			break; /* all sent and read (the turn after the last write) */
	}
	/* The agent goes: the coordinator sees EOF on its next read. */
	close(sv[1]);
	if (co->conns[0])
		conn_event(co, 0, EPOLLIN | EPOLLHUP);
	tick_and_check();
	if (getenv("LL_FUZZ_VERBOSE"))
		fprintf(
		    stderr,
		    "epoch %llu grants %llu stale %llu protocol_errors %llu meter "
		    "recorded/retry/refused %llu/%llu/%llu adopted %llu refused %llu "
		    "usage_failures "
		    "%llu\n",
		    (unsigned long long)co->epoch, (unsigned long long)co->grants,
		    (unsigned long long)co->stale_reports, (unsigned long long)co->protocol_errors,
		    (unsigned long long)co->meter_recorded, (unsigned long long)co->meter_retry,
		    (unsigned long long)co->meter_refused, (unsigned long long)co->adopted,
		    (unsigned long long)co->adopt_refused, (unsigned long long)co->usage_failures);
	conn_drop(co, 0, "input done");
	return 0;
}
