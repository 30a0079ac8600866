// SPDX-License-Identifier: MIT
/*
 * The coordinator over its real protocol on loopback: a real `leaseline
 * coord` process, a client speaking the wire format. Every global limit a
 * report names gets a grant answering it; shares sum to at most the
 * contract; nothing is granted during the quiet period; a retransmitted
 * report gets nothing; a malformed frame costs that connection only. On a
 * per-key limit, a hot key's per-key grants never let the gateways together
 * spend more than the contract on it, through cooling and a reload.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "integ/coord_fx.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "lib/monotonic.h"
#include "lib/conn.h"
#include "lib/lease_clock.h"
#include "lib/wire.h"

#define TTL_MS	 300
#define N_LIMITS 3
#define RATE	 900
#define GATEWAYS 4
#define WAIT_MS	 3000

struct fx {
	pid_t pid;
	int port;	  /* the one it got for listen: 127.0.0.1:0, from its log */
	uint64_t t_start; /* before the coordinator started: its quiet period ends after
			     t_start + the quiet time */
	char dir[64];
	struct wire_msg *m;
	bool small_disk; /* state/ is a 256 KiB tmpfs (setup_small_disk, as root) */
};

/* The next setup puts the state directory on a small tmpfs. */
static bool want_small_disk;
/* The next setup's lease ttl, if not TTL_MS. */
static int want_ttl_ms;

/* Readiness: the coordinator logs "coordinator listening on ADDR" once its
 * socket is bound and its quiet period has started; ADDR has the port it
 * got. Wait for that line in its log (bounded), or for it to exit.
 */
static int wait_ready(struct fx *fx)
{
	return coord_wait_ready(fx->dir, &fx->pid, &fx->port, NULL);
}

/* A file of overrides the next setup_policy writes beside the policy. */
static const char *setup_tiers;

/* Start (or start again) the coordinator of fx->dir and wait until it listens. */
static int spawn(struct fx *fx)
{
	char cfg[128], log[128];

	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", fx->dir);
	snprintf(log, sizeof(log), "%s/coord.log", fx->dir);
	/* Emptied before the fork: the wait must not read a previous run's port. */
	truncate(log, 0);
	fx->t_start = clock_now_ns();
	fx->pid = fork();
	if (fx->pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		dup2(out, 2);
		execl(bin(), bin(), "coord", "-c", cfg, (char *)NULL);
		_exit(127);
	}
	return fx->pid > 0 ? wait_ready(fx) : -1;
}

static int setup_policy(void **state, const char *policy)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char coord[256];

	if (!fx || access(bin(), X_OK))
		return -1;
	fx->m = malloc(sizeof(*fx->m));
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ll-coord-proto-XXXXXX");
	if (!fx->m || !mkdtemp(fx->dir))
		return -1;
	write_file(fx->dir, "policy.yaml", policy);
	if (setup_tiers)
		write_file(fx->dir, "tiers.txt", setup_tiers);
	if (want_small_disk) {
		char st[96];

		snprintf(st, sizeof(st), "%s/state", fx->dir);
		fx->small_disk =
		    !mkdir(st, 0700) && !mount("tmpfs", st, "tmpfs", 0, "size=256k,mode=0700");
	}
	snprintf(coord, sizeof(coord),
		 "listen: 127.0.0.1:0\npolicy: policy.yaml\nstate-dir: state\n"
		 "lease: {ttl: %dms, refresh: 100ms}\ngateways: %d\n%s",
		 want_ttl_ms ? want_ttl_ms : TTL_MS, GATEWAYS,
		 getuid() == 0 ? "user: nobody\n" : ""); /* it needs no privilege */
	write_file(fx->dir, "coord.yaml", coord);
	*state = fx;
	return spawn(fx);
}

static int setup(void **state)
{
	return setup_policy(state, "version: 1\nlimits:\n"
				   "  - {name: a, key: none, scope: global, rate: 900, burst: 90}\n"
				   "  - {name: b, key: none, scope: global, rate: 900, burst: 90}\n"
				   "  - {name: c, key: none, scope: global, rate: 900, burst: 90}\n"
				   "rules:\n  - {name: all, limits: [a, b, c]}\n");
}

/* One per-key global limit: each client address gets 1000/s across gateways. */
static int setup_perkey(void **state)
{
	return setup_policy(state,
			    "version: 1\nlimits:\n"
			    "  - {name: k, key: src-ip, scope: global, rate: 1000, burst: 1000}\n"
			    "rules:\n  - {name: all, limits: [k]}\n");
}

/* The same limit with an override: client 10.0.0.1 has 600/s of its own. */
static int setup_perkey_override(void **state)
{
	int rc;

	setup_tiers = "10.0.0.1/32 rate 600 burst 600\n";
	rc = setup_policy(state,
			  "version: 1\nlimits:\n"
			  "  - {name: k, key: src-ip, scope: global, rate: 1000, burst: 1000, "
			  "overrides: tiers.txt}\n"
			  "rules:\n  - {name: all, limits: [k]}\n");
	setup_tiers = NULL;
	return rc;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[128];
	int st = 0;

	if (fx->pid > 0) {
		kill(fx->pid, SIGTERM);
		waitpid(fx->pid, &st, 0);
	}
	if (fx->small_disk) {
		snprintf(cmd, sizeof(cmd), "%s/state", fx->dir);
		umount2(cmd, MNT_DETACH);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	if (system(cmd))
		return -1;
	free(fx->m);
	free(fx);
	/* The coordinator must have exited cleanly, not crashed. */
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A blocking TCP connection to the coordinator. Ready (setup waited for
 * it): the first connect succeeds.
 */
static int raw_connect(struct fx *fx)
{
	struct sockaddr_storage sa;
	char addr[32];
	socklen_t len;
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fx->port);
	assert_int_equal(net_addr(addr, &sa, &len), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
	return fd;
}

static void dial(struct fx *fx, struct conn *c)
{
	coord_dial(fx->port, c);
}

/* Next frame within wait_ms: 1 and *m, 0 on timeout, -ECONNRESET if closed. */
static int recv_msg(struct conn *c, struct wire_msg *m, int wait_ms)
{
	return coord_recv(c, m, wait_ms);
}

/* HELLO as holder; true if the coordinator answered with its policy. */
static bool hello_served(struct fx *fx, struct conn *c, const char *holder)
{
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "%s", holder);
	fx->m->hello.incarnation = 7;
	assert_int_equal(conn_send(c, fx->m), 0);
	return recv_msg(c, fx->m, WAIT_MS) == 1 && fx->m->type == WIRE_POLICY;
}

static void hello(struct fx *fx, struct conn *c, const char *holder)
{
	assert_true(hello_served(fx, c, holder));
	assert_int_equal(fx->m->policy.version, 1);
}

/* A report with every limit's fallback total at `fallback`. */
static void report_fb(struct fx *fx, struct conn *c, const char *holder, uint64_t seq,
		      uint64_t epoch, const uint64_t *applied, uint64_t fallback)
{
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "%s", holder);
	fx->m->report.incarnation = 7;
	fx->m->report.seq = seq;
	fx->m->report.n = N_LIMITS;
	for (int l = 0; l < N_LIMITS; l++) {
		struct wire_report_entry *e = &fx->m->report.e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "%c", 'a' + l);
		e->applied_epoch = epoch;
		e->applied_seq = applied ? applied[l] : 0;
		e->demand = 10000;
		e->fallback = fallback;
	}
	assert_int_equal(conn_send(c, fx->m), 0);
}

static void report(struct fx *fx, struct conn *c, const char *holder, uint64_t seq, uint64_t epoch,
		   const uint64_t *applied)
{
	report_fb(fx, c, holder, seq, epoch, applied, 0);
}

/* Collect the grants answering report seq; returns how many came. */
static int grants(struct fx *fx, struct conn *c, uint64_t seq, uint64_t *rate, uint64_t *gseq,
		  uint64_t *epoch)
{
	int n = 0;

	while (n < N_LIMITS && recv_msg(c, fx->m, WAIT_MS / 3) == 1) {
		int l;

		assert_int_equal(fx->m->type, WIRE_GRANT);
		assert_int_equal(fx->m->grant.report_seq, seq);
		l = fx->m->grant.limit[0] - 'a';
		assert_in_range(l, 0, N_LIMITS - 1);
		rate[l] = fx->m->grant.rate;
		gseq[l] = fx->m->grant.seq;
		*epoch = fx->m->grant.epoch;
		assert_int_equal(fx->m->grant.ttl_ns, TTL_MS * NSEC_PER_MSEC);
		n++;
	}
	return n;
}

/* Report from holder on c until every limit's grant has rate `want`
 * (targets follow demand within 50 ms): bounded, no sleeping. Returns the
 * next report seq.
 */
static uint64_t report_until(struct fx *fx, struct conn *c, const char *holder, uint64_t seq,
			     uint64_t *epoch, uint64_t *rate, uint64_t *gseq, uint64_t want)
{
	uint64_t end = clock_now_ns() + WAIT_MS * NSEC_PER_MSEC;

	for (;; seq++) {
		bool all = true;
		int n;

		report(fx, c, holder, seq, *epoch, gseq);
		n = grants(fx, c, seq, rate, gseq, epoch);
		/* None: still in the quiet period (the fixture's t_start is before
		 * the coordinator's own start, by however long a loaded machine
		 * took to exec it); otherwise every limit answers.
		 */
		if (n == 0 && clock_now_ns() < end)
			continue;
		assert_int_equal(n, N_LIMITS);
		for (int l = 0; l < N_LIMITS; l++)
			all &= rate[l] == want;
		if (all)
			return seq + 1;
		assert_true(clock_now_ns() < end);
	}
}

static void test_every_limit_granted_within_contract(void **state)
{
	struct fx *fx = *state;
	uint64_t r1[N_LIMITS] = {0}, r2[N_LIMITS] = {0}, s1[N_LIMITS] = {0}, s2[N_LIMITS] = {0};
	uint64_t epoch = 0, seq1, seq2, t_sent;
	uint64_t quiet_end = fx->t_start + lease_deadline(0, TTL_MS * NSEC_PER_MSEC);
	struct conn c1, c2;
	int n;

	dial(fx, &c1);
	hello(fx, &c1, "gw-1");
	/* Quiet period: it ends no earlier than quiet_end, and a report sent
	 * before then gets no grant. On a machine too slow to send it in time,
	 * any grant that answers it must at least come after quiet_end.
	 */
	report(fx, &c1, "gw-1", 1, 0, NULL);
	t_sent = clock_now_ns();
	n = grants(fx, &c1, 1, r1, s1, &epoch);
	if (t_sent < quiet_end)
		assert_int_equal(n, 0);
	else if (n)
		assert_true(clock_now_ns() >= quiet_end);
	/* After it, every limit a report names gets a grant answering it;
	 * alone, gw-1 gets the whole contract.
	 */
	seq1 = report_until(fx, &c1, "gw-1", 2, &epoch, r1, s1, RATE);
	dial(fx, &c2);
	hello(fx, &c2, "gw-2");
	report(fx, &c2, "gw-2", 1, 0, NULL);
	assert_int_equal(grants(fx, &c2, 1, r2, s2, &epoch), N_LIMITS);
	for (int l = 0; l < N_LIMITS; l++)
		assert_int_equal(r2[l], 0); /* no headroom: gw-1 holds it all */
	/* gw-1 is cut to its fair half; gw-2's increase waits until that
	 * decrease has taken effect (acknowledged): decreases first.
	 */
	seq1 = report_until(fx, &c1, "gw-1", seq1, &epoch, r1, s1, RATE / 2);
	seq2 = 2;
	report(fx, &c2, "gw-2", seq2, epoch, s2);
	assert_int_equal(grants(fx, &c2, seq2++, r2, s2, &epoch), N_LIMITS);
	for (int l = 0; l < N_LIMITS; l++) {
		assert_int_equal(r1[l], RATE / 2);
		assert_int_equal(r2[l], 0);
	}
	report(fx, &c1, "gw-1", seq1, epoch, s1); /* acks the decrease */
	assert_int_equal(grants(fx, &c1, seq1, r1, s1, &epoch), N_LIMITS);
	seq2 = report_until(fx, &c2, "gw-2", seq2, &epoch, r2, s2, RATE / 2);
	for (int l = 0; l < N_LIMITS; l++) {
		assert_true(r1[l] + r2[l] <= RATE);
		assert_int_equal(r1[l], RATE / 2);
	}
	/* A retransmitted report (same seq) is old news: no grant. */
	report(fx, &c2, "gw-2", seq2 - 1, epoch, s2);
	assert_int_equal(grants(fx, &c2, seq2 - 1, r2, s2, &epoch), 0);
	conn_close(&c1);
	conn_close(&c2);
}

/* 256 global limits, t0..t255 (LL_MAX_LIMITS): the policy, every report
 * and the grants answering it carry all of them.
 */
#define M_LIMITS 256

static int setup_many(void **state)
{
	size_t size = M_LIMITS * 80 + 128, n;
	char *policy = malloc(size);
	int rc;

	if (!policy)
		return -1;
	n = (size_t)snprintf(policy, size, "version: 1\nlimits:\n");
	for (int l = 0; l < M_LIMITS; l++)
		n += (size_t)snprintf(
		    policy + n, size - n,
		    "  - {name: t%d, key: none, scope: global, rate: %d, burst: 90}\n", l, RATE);
	snprintf(policy + n, size - n, "rules:\n  - {name: all, limits: [t0, t127, t254, t255]}\n");
	rc = setup_policy(state, policy);
	free(policy);
	return rc;
}

/* A report naming all M_LIMITS limits, acknowledging the grants in applied. */
static void report_many(struct fx *fx, struct conn *c, const char *holder, uint64_t seq,
			uint64_t epoch, const uint64_t *applied)
{
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "%s", holder);
	fx->m->report.incarnation = 7;
	fx->m->report.seq = seq;
	fx->m->report.n = M_LIMITS;
	for (int l = 0; l < M_LIMITS; l++) {
		struct wire_report_entry *e = &fx->m->report.e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "t%d", l);
		e->applied_epoch = epoch;
		e->applied_seq = applied[l];
		e->demand = 10000;
	}
	assert_int_equal(conn_send(c, fx->m), 0);
}

/* The grants answering report seq (at most one per limit): how many came. */
static int grants_many(struct fx *fx, struct conn *c, uint64_t seq, uint64_t *rate, uint64_t *gseq,
		       uint64_t *epoch)
{
	int n = 0;

	while (n < M_LIMITS && recv_msg(c, fx->m, n ? WAIT_MS : WAIT_MS / 10) == 1) {
		int l;

		assert_int_equal(fx->m->type, WIRE_GRANT);
		assert_int_equal(fx->m->grant.report_seq, seq);
		assert_int_equal(fx->m->grant.limit[0], 't');
		l = atoi(fx->m->grant.limit + 1);
		assert_in_range(l, 0, M_LIMITS - 1);
		rate[l] = fx->m->grant.rate;
		gseq[l] = fx->m->grant.seq;
		*epoch = fx->m->grant.epoch;
		n++;
	}
	return n;
}

/* Two agents report all 256 limits until each holds half of every one:
 * every grant of every limit answers, and at every step the two latest
 * shares of each limit sum to at most its contract R.
 */
static void test_256_limits_granted_within_contract(void **state)
{
	struct fx *fx = *state;
	static uint64_t rate[2][M_LIMITS], gseq[2][M_LIMITS];
	const char *name[2] = {"gw-1", "gw-2"};
	uint64_t epoch = 0, seq[2] = {1, 1};
	uint64_t end = clock_now_ns() + 6 * WAIT_MS * NSEC_PER_MSEC;
	struct conn c[2];
	bool half = false;

	memset(rate, 0, sizeof(rate));
	memset(gseq, 0, sizeof(gseq));
	for (int a = 0; a < 2; a++) {
		dial(fx, &c[a]);
		hello(fx, &c[a], name[a]);
	}
	while (!half) {
		assert_true(clock_now_ns() < end);
		for (int a = 0; a < 2; a++) {
			int n;

			report_many(fx, &c[a], name[a], seq[a], epoch, gseq[a]);
			n = grants_many(fx, &c[a], seq[a]++, rate[a], gseq[a], &epoch);
			/* None in the quiet period, then one for every limit. */
			assert_true(n == 0 || n == M_LIMITS);
		}
		half = true;
		for (int l = 0; l < M_LIMITS; l++) {
			assert_true(rate[0][l] + rate[1][l] <= RATE);
			half &= rate[0][l] == RATE / 2 && rate[1][l] == RATE / 2;
		}
	}
	assert_int_equal(rate[0][255], RATE / 2);
	assert_int_equal(rate[1][255], RATE / 2);
	conn_close(&c[0]);
	conn_close(&c[1]);
}

/* Limit l of the policies below: a, b, c, then t3..t255. */
static void lim_name(char *buf, size_t len, int l)
{
	if (l < 3)
		snprintf(buf, len, "%c", 'a' + l);
	else
		snprintf(buf, len, "t%d", l);
}

static int lim_index(const char *name)
{
	return name[0] == 't' ? atoi(name + 1) : name[0] - 'a';
}

/* A report of limits 0..n-1, a, b and c with `bypass` admitted fail-open. */
static void report_list(struct fx *fx, struct conn *c, const char *holder, uint64_t seq,
			uint64_t epoch, const uint64_t *applied, int n, uint64_t bypass)
{
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "%s", holder);
	fx->m->report.incarnation = 7;
	fx->m->report.seq = seq;
	fx->m->report.n = (uint32_t)n;
	for (int l = 0; l < n; l++) {
		struct wire_report_entry *e = &fx->m->report.e[l];

		memset(e, 0, sizeof(*e));
		lim_name(e->limit, sizeof(e->limit), l);
		e->applied_epoch = epoch;
		e->applied_seq = applied[l];
		e->demand = 10000;
		e->bypass = l < 3 ? bypass : 0;
	}
	assert_int_equal(conn_send(c, fx->m), 0);
}

/* Grants answering report seq, limits named as lim_name: how many came. */
static int grants_list(struct fx *fx, struct conn *c, uint64_t seq, int n, uint64_t *rate,
		       uint64_t *gseq, uint64_t *epoch)
{
	int got = 0;

	while (got < n && recv_msg(c, fx->m, got ? WAIT_MS : WAIT_MS / 10) == 1) {
		int l;

		if (fx->m->type == WIRE_POLICY)
			continue; /* the reload's, before its grants */
		assert_int_equal(fx->m->type, WIRE_GRANT);
		assert_int_equal(fx->m->grant.report_seq, seq);
		l = lim_index(fx->m->grant.limit);
		assert_in_range(l, 0, n - 1);
		rate[l] = fx->m->grant.rate;
		gseq[l] = fx->m->grant.seq;
		*epoch = fx->m->grant.epoch;
		got++;
	}
	return got;
}

/* Lines of the coordinator's log containing s. */
static int log_count(struct fx *fx, const char *s)
{
	char path[160], line[512];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/coord.log", fx->dir);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL;
	if (f)
		fclose(f);
	return n;
}

/* A reload from 3 global limits to 256 while a holder is connected: the
 * coordinator's per-holder table grows and keeps what it held (the holder's
 * durable bypass totals of a, b and c are not news again), and every one of
 * the 256 limits is granted.
 */
static void test_reload_3_to_256_limits(void **state)
{
	struct fx *fx = *state;
	static uint64_t rate[M_LIMITS], gseq[M_LIMITS];
	size_t size = M_LIMITS * 80 + 128, n;
	char *policy = malloc(size);
	uint64_t epoch = 0, seq = 1, end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	struct conn c;
	int got;

	assert_non_null(policy);
	memset(rate, 0, sizeof(rate));
	memset(gseq, 0, sizeof(gseq));
	dial(fx, &c);
	hello(fx, &c, "gw-1");
	do {
		assert_true(clock_now_ns() < end);
		report_list(fx, &c, "gw-1", seq, epoch, gseq, N_LIMITS, 5);
		got = grants_list(fx, &c, seq++, N_LIMITS, rate, gseq, &epoch);
	} while (got < N_LIMITS);
	assert_int_equal(log_count(fx, "packets admitted fail-open in total"), N_LIMITS);

	n = (size_t)snprintf(policy, size, "version: 2\nlimits:\n");
	for (int l = 0; l < M_LIMITS; l++) {
		char name[8];

		lim_name(name, sizeof(name), l);
		n += (size_t)snprintf(
		    policy + n, size - n,
		    "  - {name: %s, key: none, scope: global, rate: %d, burst: 90}\n", name, RATE);
	}
	snprintf(policy + n, size - n, "rules:\n  - {name: all, limits: [a, b, c, t255]}\n");
	/* Readable by the coordinator once it runs as nobody. */
	assert_int_equal(chmod(fx->dir, 0755), 0);
	write_file(fx->dir, "policy.yaml", policy);
	free(policy);
	assert_int_equal(kill(fx->pid, SIGHUP), 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_POLICY);
	assert_int_equal(fx->m->policy.version, 2);
	assert_true(coord_log_has(fx->dir, "policy version 2 loaded (256 global limits)"));

	end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	do {
		assert_true(clock_now_ns() < end);
		report_list(fx, &c, "gw-1", seq, epoch, gseq, M_LIMITS, 5);
		got = grants_list(fx, &c, seq++, M_LIMITS, rate, gseq, &epoch);
		assert_true(got == 0 || got == M_LIMITS);
	} while (got < M_LIMITS || rate[255] != RATE);
	for (int l = 0; l < M_LIMITS; l++)
		assert_true(rate[l] <= RATE);
	/* The same totals after the reload: nothing new to log. */
	assert_int_equal(log_count(fx, "packets admitted fail-open in total"), N_LIMITS);
	assert_false(coord_log_has(fx->dir, "INVARIANT VIOLATED"));
	conn_close(&c);
}

static void test_malformed_frame_costs_only_that_connection(void **state)
{
	struct fx *fx = *state;
	static const uint8_t junk[16] = {0x4c, 0x4c, 0x57, 0x31, 0, 1, 0, 99};
	struct conn bad, good;

	dial(fx, &bad);
	assert_int_equal(send(bad.fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	assert_int_equal(recv_msg(&bad, fx->m, WAIT_MS), -ECONNRESET);
	conn_close(&bad);
	dial(fx, &good);
	hello(fx, &good, "gw-3");
	conn_close(&good);
	/* A frame of another wire version is a peer of another build: said so. */
	assert_true(coord_log_has(fx->dir, "it speaks wire version 1, this build 6 to " WIRE_VERSION_STR));
}

/* An agent one wire version behind (6, during an upgrade: coordinators
 * first) is served in its version: the policy and its grants come in
 * version-6 frames, a version-7 agent beside it gets version 7. One that
 * changes its version after its HELLO is dropped.
 */
static void test_older_agent_served_in_its_version(void **state)
{
	struct fx *fx = *state;
	uint64_t rate[N_LIMITS], gseq[N_LIMITS], epoch[N_LIMITS], seq = 1;
	uint64_t end = clock_now_ns() + WAIT_MS * NSEC_PER_MSEC;
	struct conn old, cur;

	dial(fx, &old);
	old.peer_version = 6;
	assert_true(hello_served(fx, &old, "gw-old"));
	assert_int_equal(fx->m->version, 6);
	/* Past the quiet period of the fixture's start, its limits granted. */
	for (int n = 0; n < N_LIMITS; seq++) {
		assert_true(clock_now_ns() < end);
		report(fx, &old, "gw-old", seq, 0, NULL);
		n = grants(fx, &old, seq, rate, gseq, epoch);
	}
	assert_int_equal(fx->m->type, WIRE_GRANT);
	assert_int_equal(fx->m->version, 6);
	dial(fx, &cur);
	assert_true(hello_served(fx, &cur, "gw-cur"));
	assert_int_equal(fx->m->version, WIRE_VERSION);
	/* The old one now says version 7: not the peer it said it was. */
	old.peer_version = 0;
	report(fx, &old, "gw-old", seq, 0, NULL);
	assert_int_equal(recv_msg(&old, fx->m, WAIT_MS), -ECONNRESET);
	assert_true(coord_log_has(fx->dir, "wire version changed after its hello"));
	conn_close(&old);
	conn_close(&cur);
}

/* A HELLO claiming the farthest epoch a step allows is taken (the new epoch
 * is one past it, a whole step); one past that is refused and logged. The
 * edge case passed the HELLO's check, then the store refused the bump, and
 * the connection dropped with nothing logged.
 */
static void test_hello_epoch_step_bound(void **state)
{
	struct fx *fx = *state;
	struct conn c;

	dial(fx, &c);
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "gw-far");
	fx->m->hello.incarnation = 7;
	fx->m->hello.max_epoch_seen = 1 + LEASE_EPOCH_STEP_MAX; /* a fresh coordinator is at 1 */
	assert_int_equal(conn_send(&c, fx->m), 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), -ECONNRESET);
	conn_close(&c);
	assert_true(coord_log_has(fx->dir, "holder 'gw-far' claims epoch 1048577, out of bounds "
					   "from ours 1: refused"));
	dial(fx, &c);
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "gw-far");
	fx->m->hello.incarnation = 7;
	fx->m->hello.max_epoch_seen = LEASE_EPOCH_STEP_MAX;
	assert_int_equal(conn_send(&c, fx->m), 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_POLICY);
	conn_close(&c);
	assert_true(coord_log_has(fx->dir, "has seen epoch 1048576 > ours 1"));
}

/* A certified gateway's epoch claim is evidence, not an order (issue 25,
 * B): gw-1 says HELLO every 0.3 s claiming the coordinator's epoch + 1.
 * The first claim moves the epoch once (past it); the rest are ignored and counted,
 * and none of them starts a quiet period: gw-2, reporting throughout,
 * is granted every limit in every report round of the attack.
 */
static void test_epoch_claims_cannot_stall_grants(void **state)
{
	struct fx *fx = *state;
	uint64_t rate[N_LIMITS], gseq[N_LIMITS] = {0}, epoch = 0, seq = 1, last_hello = 0;
	uint64_t end, epoch0, claims = 0;
	struct conn c2, c1;
	int rounds = 0;

	dial(fx, &c2);
	hello(fx, &c2, "gw-2");
	epoch0 = fx->m->policy.epoch;
	/* Past the quiet period of the start: grants flow. */
	while (clock_now_ns() <
	       fx->t_start + lease_deadline(0, TTL_MS * NSEC_PER_MSEC) + 200 * NSEC_PER_MSEC)
		usleep(10 * 1000); /* t_start is before the coordinator's own start */
	seq = report_until(fx, &c2, "gw-2", seq, &epoch, rate, gseq, RATE);
	end = clock_now_ns() + 2 * NSEC_PER_SEC;
	while (clock_now_ns() < end) {
		if (clock_now_ns() - last_hello >= 300 * NSEC_PER_MSEC) {
			dial(fx, &c1);
			WIRE_MSG_CLEAR(fx->m, hello);
			fx->m->type = WIRE_HELLO;
			snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "gw-1");
			fx->m->hello.incarnation = 7;
			fx->m->hello.max_epoch_seen = epoch + 1;
			assert_int_equal(conn_send(&c1, fx->m), 0);
			assert_int_equal(recv_msg(&c1, fx->m, WAIT_MS), 1);
			assert_int_equal(fx->m->type, WIRE_POLICY);
			conn_close(&c1);
			last_hello = clock_now_ns();
			claims++;
		}
		/* gw-2 acknowledges what it holds, under whatever epoch it came. */
		report(fx, &c2, "gw-2", seq, epoch, gseq);
		assert_int_equal(grants(fx, &c2, seq, rate, gseq, &epoch), N_LIMITS);
		seq++;
		rounds++;
		usleep(50 * 1000);
	}
	assert_true(claims >= 6);
	assert_true(rounds >= 10);
	assert_int_equal(epoch, epoch0 + 2); /* moved once, past the first claim */
	assert_int_equal(log_count(fx, "claims epoch"), (int)claims - 1);
	assert_true(coord_log_has(fx->dir, "again: ignored (one move per holder and run)"));
	conn_close(&c2);
}

/* Adoption (docs/protocol.md): after a kill -9 and a restart on the same
 * state, a holder that re-presents the grants it holds, with their tags, is
 * granted at once under the new epoch, in the quiet period, exactly what
 * it proved (never more); a tag that does not prove the share earns nothing
 * until the quiet period is over.
 */
static int setup_adopt(void **state)
{
	int rc;

	want_ttl_ms = 3000; /* a quiet period long enough to tell adoption from its end */
	rc = setup(state);
	want_ttl_ms = 0;
	return rc;
}

/* A report whose entries re-present held[] (tag byte 0 xor-ed with flip). */
static void report_held(struct fx *fx, struct conn *c, const char *holder, uint64_t seq,
			const struct coord_held *held, uint8_t flip)
{
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "%s", holder);
	fx->m->report.incarnation = 7;
	fx->m->report.seq = seq;
	fx->m->report.n = N_LIMITS;
	for (int l = 0; l < N_LIMITS; l++) {
		struct wire_report_entry *e = &fx->m->report.e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "%c", 'a' + l);
		e->demand = 10000;
		if (!held)
			continue;
		coord_entry_held(e, &held[l], 2 * NSEC_PER_SEC);
		e->held_tag[0] ^= flip;
	}
	assert_int_equal(conn_send(c, fx->m), 0);
}

/* The grants answering report seq within wait_ms, into got[]: how many. */
static int grants_held(struct fx *fx, struct conn *c, uint64_t seq, struct coord_held *got,
		       int wait_ms)
{
	int n = 0;

	while (n < N_LIMITS && recv_msg(c, fx->m, wait_ms) == 1) {
		const struct wire_grant *g = &fx->m->grant;
		int l;

		assert_int_equal(fx->m->type, WIRE_GRANT);
		assert_int_equal(g->report_seq, seq);
		l = g->limit[0] - 'a';
		assert_in_range(l, 0, N_LIMITS - 1);
		got[l] = coord_held_of(g);
		n++;
	}
	return n;
}

static void test_restart_adopts_proven_shares(void **state)
{
	struct fx *fx = *state;
	struct coord_held h1[N_LIMITS] = {0}, h2[N_LIMITS] = {0}, a1[N_LIMITS] = {0}, x[N_LIMITS];
	uint64_t end = clock_now_ns() + 10 * NSEC_PER_SEC, seq = 1, quiet_end;
	struct conn c1, c2;
	int st;

	dial(fx, &c1);
	hello(fx, &c1, "gw-1");
	dial(fx, &c2);
	hello(fx, &c2, "gw-2");
	/* First the quiet period of a fresh start: both granted half each. */
	for (;; seq++) {
		bool half = true;

		report_held(fx, &c1, "gw-1", seq, h1[0].epoch ? h1 : NULL, 0);
		grants_held(fx, &c1, seq, h1, 300);
		report_held(fx, &c2, "gw-2", seq, h2[0].epoch ? h2 : NULL, 0);
		grants_held(fx, &c2, seq, h2, 300);
		for (int l = 0; l < N_LIMITS; l++)
			half &= h1[l].rate == RATE / 2 && h2[l].rate == RATE / 2;
		if (half)
			break;
		assert_true(clock_now_ns() < end);
	}
	for (int l = 0; l < N_LIMITS; l++)
		assert_int_equal(h1[l].epoch, 1);
	conn_close(&c1);
	conn_close(&c2);

	kill(fx->pid, SIGKILL);
	waitpid(fx->pid, &st, 0);
	assert_int_equal(spawn(fx), 0);
	quiet_end = fx->t_start + 3 * NSEC_PER_SEC;

	/* gw-1 proves its shares: granted at once, epoch 2, the same rates. */
	dial(fx, &c1);
	hello(fx, &c1, "gw-1");
	report_held(fx, &c1, "gw-1", ++seq, h1, 0);
	assert_int_equal(grants_held(fx, &c1, seq, a1, 1000), N_LIMITS);
	assert_true(clock_now_ns() < quiet_end); /* not the quiet period's end: adoption */
	for (int l = 0; l < N_LIMITS; l++) {
		assert_int_equal(a1[l].epoch, 2);
		assert_int_equal(a1[l].rate,
				 RATE / 2); /* what it proved, though it asks for 10000 */
		assert_true(a1[l].burst <= h1[l].burst);
	}
	assert_true(coord_log_has(fx->dir, "holder 'gw-1' limit 'a': adopted 450/s"));

	/* gw-2's tags do not prove its shares (one byte changed): nothing in
	 * the quiet period.
	 */
	dial(fx, &c2);
	hello(fx, &c2, "gw-2");
	report_held(fx, &c2, "gw-2", ++seq, h2, 0x01);
	assert_int_equal(grants_held(fx, &c2, seq, x, 500), 0);
	assert_true(coord_log_has(fx->dir, "holder 'gw-2' limit 'a': the share it re-presents"));
	/* And gw-1 renewing in the quiet period gets no more than it proved. */
	report_held(fx, &c1, "gw-1", ++seq, a1, 0);
	assert_int_equal(grants_held(fx, &c1, seq, a1, 1000), N_LIMITS);
	for (int l = 0; l < N_LIMITS; l++)
		assert_int_equal(a1[l].rate, RATE / 2);
	conn_close(&c1);
	conn_close(&c2);
}

/* 1 once the coordinator closed fd (EOF or reset), 0 if still open after wait_ms. */
static int closed_within(int fd, int wait_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char b;

	if (poll(&p, 1, wait_ms) <= 0)
		return 0;
	return recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

/* Silent peers cannot hold the slots real gateways need: one address gets
 * at most 4 connections that have not said HELLO (the rest are closed at
 * once), and each is dropped 2 s after it was accepted without a HELLO.
 * A gateway that says HELLO is served meanwhile.
 */
static void test_silent_connections_reclaimed(void **state)
{
	struct fx *fx = *state;
	int fd[8], open_now = 0;
	struct conn c;

	for (int i = 0; i < 8; i++)
		fd[i] = raw_connect(fx); /* and say nothing */
	for (int i = 0; i < 8; i++)
		open_now += !closed_within(fd[i], 200);
	assert_int_equal(open_now, 4);
	/* The deadline: every one closed well within 2 s + a tick or two. */
	for (int i = 0; i < 8; i++)
		assert_true(closed_within(fd[i], WAIT_MS));
	for (int i = 0; i < 8; i++)
		close(fd[i]);
	dial(fx, &c);
	hello(fx, &c, "gw-9");
	conn_close(&c);
}

/* A blocking TCP connection to the coordinator from loopback address src. */
static int raw_connect_from(struct fx *fx, const char *src)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct sockaddr_storage sa;
	char addr[32];
	socklen_t len;
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fx->port);
	assert_int_equal(net_addr(addr, &sa, &len), 0);
	assert_int_equal(inet_pton(AF_INET, src, &from.sin_addr), 1);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
	return fd;
}

/* The coordinator's connection table: its gateways and 64 more. */
#define TABLE (GATEWAYS + 64)

/* Every slot taken by connections from many addresses, each address within
 * its 4 pending and each /24 within its 32: a gateway is served all the
 * same (before, it was closed on accept until a slot freed). The oldest
 * silent connection gives way; one that has sent something keeps its slot
 * for 0.5 s, and a newcomer then finds no room, until that has passed.
 */
static void test_full_table_makes_room(void **state)
{
	struct fx *fx = *state;
	int fd[TABLE], late;
	struct conn gw;
	char src[32];

	for (int i = 0; i < TABLE; i++) {
		snprintf(src, sizeof(src), "127.1.%d.1", i / 4); /* 4 an address and a /24 */
		fd[i] = raw_connect_from(fx, src); /* and say nothing */
	}
	assert_false(closed_within(fd[TABLE - 1], 200)); /* all accepted and held */
	dial(fx, &gw);
	hello(fx, &gw, "gw-1");
	assert_true(closed_within(fd[0], WAIT_MS)); /* the oldest silent one made room */
	for (int i = 1; i < TABLE; i++)
		assert_false(closed_within(fd[i], 0));
	for (int i = 0; i < TABLE; i++)
		close(fd[i]);
	conn_close(&gw);
	poll(NULL, 0, 200); /* the coordinator sees the closes */

	/* Connections that have sent something (a frame's first byte) but no HELLO. */
	for (int i = 0; i < TABLE; i++) {
		snprintf(src, sizeof(src), "127.2.%d.1", i / 4);
		fd[i] = raw_connect_from(fx, src);
		assert_int_equal(send(fd[i], "L", 1, 0), 1);
	}
	assert_false(closed_within(fd[TABLE - 1], 200));
	late = raw_connect_from(fx, "127.3.0.1");
	assert_true(closed_within(late, 300)); /* refused: nobody gives way yet */
	close(late);
	poll(NULL, 0, 500); /* the grace has passed for the first ones */
	dial(fx, &gw);
	hello(fx, &gw, "gw-2");
	assert_true(closed_within(fd[0], WAIT_MS));
	for (int i = 0; i < TABLE; i++)
		close(fd[i]);
	conn_close(&gw);
}

/* One /24 holds at most pending-per-prefix (32) connections without a
 * HELLO, from however many addresses; and with the table full, the prefix
 * holding the most gives way, not the oldest connection: strangers of one
 * /24 cannot push out the rest.
 */
static void test_prefix_budget(void **state)
{
	struct fx *fx = *state;
	int fd[TABLE], extra, late;
	struct conn gw;
	char src[32];

	for (int i = 0; i < 32; i++) {
		snprintf(src, sizeof(src), "127.4.0.%d", 1 + i); /* 32 addresses of one /24 */
		fd[i] = raw_connect_from(fx, src);
	}
	assert_false(closed_within(fd[31], 200));
	extra = raw_connect_from(fx, "127.4.0.200");
	assert_true(closed_within(extra, WAIT_MS)); /* the 33rd of the /24 */
	close(extra);
	late = raw_connect_from(fx, "127.4.1.1"); /* the next /24 is another's */
	assert_false(closed_within(late, 200));
	close(late);
	for (int i = 0; i < 32; i++)
		close(fd[i]);
	poll(NULL, 0, 200);

	/* The older 36 from 9 /24s (4 each), then 32 newer ones of one /24. */
	for (int i = 0; i < TABLE; i++) {
		if (i < TABLE - 32)
			snprintf(src, sizeof(src), "127.5.%d.1", i / 4);
		else
			snprintf(src, sizeof(src), "127.6.0.%d", 1 + i);
		fd[i] = raw_connect_from(fx, src);
		if (i == TABLE - 33)
			poll(NULL, 0, 50); /* the two groups in different batches */
	}
	assert_false(closed_within(fd[TABLE - 1], 200));
	dial(fx, &gw);
	hello(fx, &gw, "gw-1");
	assert_true(closed_within(fd[TABLE - 32], WAIT_MS)); /* the oldest of the fullest /24 */
	for (int i = 0; i < TABLE; i++)
		if (i != TABLE - 32)
			assert_false(closed_within(fd[i], 0));
	for (int i = 0; i < TABLE; i++)
		close(fd[i]);
	conn_close(&gw);
}

/* Holder slots: with GATEWAYS of them taken by holders that said HELLO and
 * left with no grant, a new gateway is served, not refused ("already
 * serving N gateways" until a restart, before).
 */
static void test_holder_slots_reclaimed(void **state)
{
	struct fx *fx = *state;
	struct conn c[GATEWAYS], fresh;
	char name[16];

	for (int i = 0; i < GATEWAYS; i++) {
		snprintf(name, sizeof(name), "made-up-%d", i);
		dial(fx, &c[i]);
		hello(fx, &c[i], name);
	}
	for (int i = 0; i < GATEWAYS; i++)
		conn_close(&c[i]);
	/* The coordinator sees the closes before this HELLO (loopback FINs come
	 * first); a few bounded tries only absorb scheduling, while a refused
	 * holder would be refused every time.
	 */
	for (int t = 0;; t++) {
		dial(fx, &fresh);
		if (hello_served(fx, &fresh, "gw-real"))
			break;
		conn_close(&fresh);
		assert_true(t < 4);
	}
	conn_close(&fresh);
}

/* Started as root with user: nobody, the coordinator leases as nobody (the
 * other tests here get their grants from it all the same).
 */
/* Issue 25, G: a symlink planted in the state directory (ledger.db-shm ->
 * a file root owns) is refused at start, not handed to the user the
 * coordinator runs as; so is a state directory others can write.
 */
static void test_state_symlink_not_chowned(void **state)
{
	struct fx *fx = *state;
	char victim[128], link_path[128], st_dir[96];
	struct stat st;
	int status;

	if (getuid() != 0)
		skip();
	kill(fx->pid, SIGTERM);
	waitpid(fx->pid, &status, 0);
	snprintf(victim, sizeof(victim), "%s/victim", fx->dir);
	write_file(fx->dir, "victim", "root's\n");
	assert_int_equal(chmod(victim, 0600), 0);
	snprintf(link_path, sizeof(link_path), "%s/state/ledger.db-shm", fx->dir);
	unlink(link_path);
	assert_int_equal(symlink(victim, link_path), 0);
	assert_int_equal(spawn(fx), -1); /* it exits before it listens */
	fx->pid = -1;
	assert_int_equal(stat(victim, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_true(coord_log_has(fx->dir, "ledger.db-shm is a symlink: refusing"));

	assert_int_equal(unlink(link_path), 0);
	snprintf(st_dir, sizeof(st_dir), "%s/state", fx->dir);
	assert_int_equal(chmod(st_dir, 0777), 0);
	assert_int_equal(spawn(fx), -1);
	fx->pid = -1;
	assert_true(coord_log_has(fx->dir, "is writable by group or others"));
	assert_int_equal(chmod(st_dir, 0700), 0);
}

static void test_runs_unprivileged(void **state)
{
	struct fx *fx = *state;
	char path[64], line[256];
	unsigned ruid = 0, euid = 0;
	FILE *f;

	if (getuid() != 0)
		skip();
	snprintf(path, sizeof(path), "/proc/%d/status", (int)fx->pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		sscanf(line, "Uid: %u %u", &ruid, &euid);
	fclose(f);
	assert_int_equal(ruid, 65534);
	assert_int_equal(euid, 65534);
}

/* ---- per-key grants ---- */

#define PK_RATE	   1000
#define PK_COOL_MS 3000 /* HOTKEYS_COOL_NS */
#define PK_SENT	   512

/* A fake agent of the per-key limit `k`: it applies (and acknowledges in
 * its next report) every grant it gets, and remembers what each grant lets
 * it spend on key K until the grant dies: acknowledged past, or its lease
 * over (ttl from the send time of the report it answers, as an agent counts
 * it).
 */
struct pk_grant {
	uint64_t seq, expiry, rate, burst; /* for K: its entry, or the share */
	bool entry;
};

struct pk_agent {
	const char *name;
	struct conn c;
	uint64_t seq, sent_ns[PK_SENT];
	uint64_t epoch, applied, acked;
	struct pk_grant g[64];
	size_t ng;
	struct pk_grant last;
	uint64_t share, policy;
	/* The entry for K it holds (grants carry changes on top of a whole set). */
	bool full_seen, has;
	uint64_t krate, kburst, told;
	/* The grant that set the entry, and its tag (re-presented after a
	 * restart); kforge: re-present this rate instead of the one proven.
	 */
	uint64_t kseq, kforge;
	uint8_t ktag[WIRE_TAG_LEN];
};

static struct ll_key_id pk_key(void)
{
	struct ll_key_id k = {.family = 4};

	k.addr[2] = htonl(0xffff);
	k.addr[3] = htonl(0x0a000001); /* 10.0.0.1 */
	return k;
}

/* A report of agent a (K listed if hot); held: it re-presents that grant
 * of k (after a restart), as applied.
 */
static void pk_report_as(struct fx *fx, struct pk_agent *a, bool hot, const struct coord_held *held)
{
	struct wire_report *r = &fx->m->report;
	struct ll_key_id k = pk_key();

	WIRE_MSG_CLEAR(fx->m, report.hot[1]);
	fx->m->type = WIRE_REPORT;
	snprintf(r->holder, sizeof(r->holder), "%s", a->name);
	r->incarnation = 7;
	r->max_epoch_seen = held ? held->epoch : a->epoch;
	r->seq = ++a->seq;
	r->n = 1;
	snprintf(r->e[0].limit, sizeof(r->e[0].limit), "k");
	r->e[0].applied_epoch = a->epoch;
	r->e[0].applied_seq = a->applied;
	if (held)
		coord_entry_held(&r->e[0], held, 2 * NSEC_PER_SEC);
	r->e[0].demand = PK_RATE;
	if (hot || a->told) {
		/* Denied on K: "as much as it can get"; or told it wants none now
		 * (a demand stands until it is told again).
		 */
		r->n_hot = 1;
		r->hot[0] = (struct wire_hot){.entry = 0, .key = k, .demand = hot ? PK_RATE : 0};
		a->told = r->hot[0].demand;
		if (held && a->has && a->kseq) {
			r->hot[0].held_seq = a->kseq;
			r->hot[0].held_rate = a->kforge ? a->kforge : a->krate;
			r->hot[0].held_burst = a->kburst;
			memcpy(r->hot[0].held_tag, a->ktag, WIRE_TAG_LEN);
		}
	}
	a->acked = a->applied;
	a->sent_ns[a->seq % PK_SENT] = clock_now_ns();
	assert_int_equal(conn_send(&a->c, fx->m), 0);
}

static void pk_report(struct fx *fx, struct pk_agent *a, bool hot)
{
	pk_report_as(fx, a, hot, NULL);
}

/* The contract the sum is checked against (a reload lowers it). */
static uint64_t pk_cap = PK_RATE;

/* Sum over agents of the most a live grant lets each spend on K; returns it. */
static uint64_t pk_check_sum(struct pk_agent *ag, size_t n)
{
	uint64_t now = clock_now_ns(), sr = 0, sb = 0;

	for (size_t i = 0; i < n; i++) {
		struct pk_agent *a = &ag[i];
		uint64_t mr = 0, mb = 0;
		size_t kept = 0;

		for (size_t j = 0; j < a->ng; j++) {
			if (a->g[j].seq < a->acked || now > a->g[j].expiry)
				continue;
			a->g[kept++] = a->g[j];
			mr = a->g[j].rate > mr ? a->g[j].rate : mr;
			mb = a->g[j].burst > mb ? a->g[j].burst : mb;
		}
		a->ng = kept;
		sr += mr;
		sb += mb;
	}
	if (sr > pk_cap || sb > pk_cap)
		fail_msg("agents may spend %llu/s, %llu on K: over the contract %llu",
			 (unsigned long long)sr, (unsigned long long)sb,
			 (unsigned long long)pk_cap);
	return sr > sb ? sr : sb;
}

/* Agent a applies the grant in fx->m; the sum is checked. */
static void pk_take(struct fx *fx, struct pk_agent *ag, size_t n, size_t i)
{
	struct pk_agent *a = &ag[i];
	struct ll_key_id k = pk_key();
	struct wire_grant *g = &fx->m->grant;
	struct pk_grant pg = {0};

	assert_int_equal(fx->m->type, WIRE_GRANT);
	assert_true(g->report_seq <= a->seq && a->seq - g->report_seq < PK_SENT);
	assert_true(g->seq > a->applied);
	assert_string_equal(g->limit, "k");
	assert_true(g->n_keys <= 1);
	pg.seq = g->seq;
	pg.expiry = a->sent_ns[g->report_seq % PK_SENT] + TTL_MS * NSEC_PER_MSEC;
	/* A whole set, or changes on top of one it applied and acknowledged. */
	if (g->keys_full) {
		a->full_seen = true;
		a->has = false;
	} else {
		assert_true(a->full_seen);
		assert_true(g->keys_base <= a->acked);
	}
	if (g->n_keys) {
		assert_memory_equal(&g->keys[0].key, &k, sizeof(k));
		a->has = g->keys[0].op == WIRE_KEY_SET;
		if (g->keys_full == WIRE_KEYS_CUT) {
			a->krate = a->krate < g->keys[0].rate ? a->krate : g->keys[0].rate;
			a->kburst = a->kburst < g->keys[0].burst ? a->kburst : g->keys[0].burst;
		} else {
			a->krate = g->keys[0].rate;
			a->kburst = g->keys[0].burst;
		}
		a->kseq = a->has ? g->seq : 0;
		memcpy(a->ktag, g->keys[0].tag, WIRE_TAG_LEN);
	}
	pg.entry = a->has;
	pg.rate = a->has ? a->krate : g->rate;
	pg.burst = a->has ? a->kburst : g->burst;
	a->share = g->rate;
	a->epoch = g->epoch;
	a->applied = g->seq;
	a->last = pg;
	assert_true(a->ng < sizeof(a->g) / sizeof(a->g[0]));
	a->g[a->ng++] = pg;
	pk_check_sum(ag, n);
}

/* One round for agent a: a report, the grant answering it (a policy pushed
 * meanwhile is noted).
 */
static void pk_round(struct fx *fx, struct pk_agent *ag, size_t n, size_t i, bool hot)
{
	pk_report(fx, &ag[i], hot);
	for (;;) {
		assert_int_equal(recv_msg(&ag[i].c, fx->m, WAIT_MS), 1);
		if (fx->m->type != WIRE_POLICY)
			break;
		ag[i].policy = fx->m->policy.version;
	}
	assert_int_equal(fx->m->grant.report_seq, ag[i].seq);
	pk_take(fx, ag, n, i);
}

/* Whether the coordinator's log has a line containing s. */
static bool log_has(struct fx *fx, const char *s)
{
	return coord_log_has(fx->dir, s);
}

/*
 * Per-key grants end to end: gateways A and B share the limit (500/s each).
 * A is denied on client 10.0.0.1 and lists it hot: B's grants cut the key to
 * 0 (B does not want it), and once B applied that, A's grants give it
 * nearly all of the contract. At every grant, what both may spend on the
 * key stays within 1000/s. A stops listing the key: it cools after 3 s, and
 * then no grant carries it.
 */
/* Agents A and B at their fair half of the limit, then A lists K until its
 * grants give it at least 90% of K while B's cut it.
 */
/* Agents A and B say hello; A reports through the quiet period until its
 * first grant, which it takes.
 */
static void pk_start(struct fx *fx, struct pk_agent *ag)
{
	uint64_t end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;

	for (size_t i = 0; i < 2; i++) {
		dial(fx, &ag[i].c);
		hello(fx, &ag[i].c, ag[i].name);
	}
	/* The quiet period: reports answered by nothing until it ends. */
	pk_report(fx, &ag[0], false);
	while (recv_msg(&ag[0].c, fx->m, 50) != 1) {
		pk_report(fx, &ag[0], false);
		assert_true(clock_now_ns() < end);
	}
	pk_take(fx, ag, 2, 0);
}

static void pk_make_hot(struct fx *fx, struct pk_agent *ag)
{
	uint64_t end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	struct pk_agent *A = &ag[0], *B = &ag[1];

	pk_cap = PK_RATE;
	pk_start(fx, ag);
	/* Both reach their fair half of the limit; no key is hot yet. */
	while (A->share != PK_RATE / 2 || B->share != PK_RATE / 2 || A->last.seq < 3) {
		pk_round(fx, ag, 2, 0, false);
		pk_round(fx, ag, 2, 1, false);
		assert_false(A->last.entry || B->last.entry);
		assert_true(clock_now_ns() < end);
	}
	/* A lists K. B's grants cut it; A's raise it once the cut is applied. */
	for (int round = 0;; round++) {
		pk_round(fx, ag, 2, 0, true);
		pk_round(fx, ag, 2, 1, false);
		assert_true(B->last.entry);
		assert_int_equal(B->last.rate, 0);
		if (getenv("LL_TEST_VERBOSE"))
			print_message(
			    "round %d: A share %llu K %s%llu, B share %llu K %s%llu\n", round,
			    (unsigned long long)A->share, A->last.entry ? "entry " : "",
			    (unsigned long long)A->last.rate, (unsigned long long)B->share,
			    B->last.entry ? "entry " : "", (unsigned long long)B->last.rate);
		if (A->last.entry && A->last.rate >= PK_RATE * 9 / 10)
			break;
		assert_true(round < 20);
	}
	for (int round = 0; round < 5; round++) {
		pk_round(fx, ag, 2, 0, true);
		pk_round(fx, ag, 2, 1, false);
		assert_true(A->last.entry && A->last.rate >= PK_RATE * 9 / 10);
		assert_true(B->last.entry && B->last.rate == 0);
	}
}

/*
 * Per-key grants end to end: gateways A and B share the limit (500/s each).
 * A is denied on client 10.0.0.1 and lists it hot: B's grants cut the key to
 * 0 (B does not want it), and once B applied that, A's grants give it
 * nearly all of the contract. At every grant, what both may spend on the
 * key stays within 1000/s. A stops listing the key: it cools after 3 s, and
 * then no grant carries it.
 */
static void test_per_key_grants(void **state)
{
	struct fx *fx = *state;
	struct pk_agent ag[2] = {{.name = "gw-a"}, {.name = "gw-b"}};
	uint64_t end, t_stop, t_gone = 0;
	struct pk_agent *A = &ag[0], *B = &ag[1];

	pk_make_hot(fx, ag);
	assert_true(log_has(fx, "key 10.0.0.1 is hot"));
	/* A stops listing K: K goes out of the grants only once it has cooled. */
	t_stop = clock_now_ns();
	end = t_stop + (PK_COOL_MS + 2 * WAIT_MS) * NSEC_PER_MSEC;
	while (clock_now_ns() < end) {
		pk_round(fx, ag, 2, 0, false);
		pk_round(fx, ag, 2, 1, false);
		if (!A->last.entry && !B->last.entry) {
			if (!t_gone)
				t_gone = clock_now_ns();
		} else {
			assert_int_equal(t_gone, 0); /* once gone, it stays gone */
		}
		if (t_gone && clock_now_ns() - t_gone > 500 * NSEC_PER_MSEC)
			break;
		poll(NULL, 0, 50);
	}
	if (getenv("LL_TEST_VERBOSE"))
		print_message("K gone from the grants %.3f s after A stopped listing it\n",
			      t_gone ? (double)(t_gone - t_stop) / 1e9 : -1.0);
	assert_true(t_gone);
	assert_true(t_gone - t_stop >= (PK_COOL_MS - 500) * NSEC_PER_MSEC);
	assert_true(A->share == PK_RATE / 2 && B->share == PK_RATE / 2);
	assert_true(log_has(fx, "key 10.0.0.1 no longer hot"));
	conn_close(&A->c);
	conn_close(&B->c);
}

/* The per-key limit with a quiet period long enough to look into. */
static int setup_perkey_adopt(void **state)
{
	int rc;

	want_ttl_ms = 3000;
	rc = setup_perkey(state);
	want_ttl_ms = 0;
	return rc;
}

/* Restarted with K hot, the coordinator renews a version-7 agent's per-key
 * limit by a cut (keys_full 2) in the quiet period; a version-6 agent,
 * which cannot take a cut, gets no grant of it until the quiet period ends
 * (as under a version-6 coordinator), and never a cut.
 */
static void test_older_agent_gets_no_cut(void **state)
{
	struct fx *fx = *state;
	struct pk_agent ag[2] = {{.name = "gw-a"}, {.name = "gw-b"}};
	struct pk_agent *A = &ag[0], *B = &ag[1];
	struct coord_held ha, hb;
	uint64_t quiet_end, end;
	int st, got_a = 0;

	pk_make_hot(fx, ag);
	pk_round(fx, ag, 2, 0, true);
	ha = coord_held_of(&fx->m->grant);
	pk_round(fx, ag, 2, 1, false);
	hb = coord_held_of(&fx->m->grant);
	conn_close(&A->c);
	conn_close(&B->c);
	kill(fx->pid, SIGKILL);
	waitpid(fx->pid, &st, 0);
	assert_int_equal(spawn(fx), 0);
	quiet_end = fx->t_start + 3 * NSEC_PER_SEC;

	dial(fx, &B->c);
	hello(fx, &B->c, B->name);
	pk_report_as(fx, B, true, &hb);
	assert_int_equal(recv_msg(&B->c, fx->m, 1000), 1);
	assert_int_equal(fx->m->type, WIRE_GRANT);
	assert_int_equal(fx->m->grant.keys_full, WIRE_KEYS_CUT);
	assert_true(clock_now_ns() < quiet_end);

	dial(fx, &A->c);
	A->c.peer_version = 6;
	hello(fx, &A->c, A->name);
	end = quiet_end + 2 * NSEC_PER_SEC;
	while (clock_now_ns() < end) {
		pk_report_as(fx, A, true, &ha);
		if (recv_msg(&A->c, fx->m, 200) != 1)
			continue;
		assert_int_equal(fx->m->type, WIRE_GRANT);
		assert_int_equal(fx->m->version, 6);
		assert_true(fx->m->grant.keys_full != WIRE_KEYS_CUT);
		/* Only once the quiet period is over (the fixture's t_start is
		 * before the coordinator's own start: no earlier than that).
		 */
		assert_true(clock_now_ns() >= quiet_end - 100 * NSEC_PER_MSEC);
		got_a++;
		break;
	}
	assert_int_equal(got_a, 1);
	conn_close(&A->c);
	conn_close(&B->c);
}

/* Restarted with K hot, the coordinator keeps each proven per-key entry
 * through the quiet period: A re-presents its entry for K (nearly all of
 * the contract) with the entry's tag, and its cut names K at that entry,
 * so A keeps spending it. B re-presents its entry (0/s) claiming the whole
 * contract: the tag does not prove that, the entry is not adopted (counted
 * and logged), and B's cut raises nothing.
 */
static void test_restart_adopts_per_key_entries(void **state)
{
	struct fx *fx = *state;
	struct pk_agent ag[2] = {{.name = "gw-a"}, {.name = "gw-b"}};
	struct pk_agent *A = &ag[0], *B = &ag[1];
	struct coord_held ha, hb;
	uint64_t a_key;
	int st;

	pk_make_hot(fx, ag);
	pk_round(fx, ag, 2, 0, true);
	ha = coord_held_of(&fx->m->grant);
	pk_round(fx, ag, 2, 1, false);
	hb = coord_held_of(&fx->m->grant);
	assert_true(A->has && A->kseq && A->krate >= PK_RATE * 9 / 10);
	assert_true(B->has && B->kseq);
	a_key = A->krate;
	conn_close(&A->c);
	conn_close(&B->c);
	kill(fx->pid, SIGKILL);
	waitpid(fx->pid, &st, 0);
	assert_int_equal(spawn(fx), 0);

	dial(fx, &A->c);
	hello(fx, &A->c, A->name);
	A->ng = 0;
	A->full_seen = false;
	pk_report_as(fx, A, true, &ha);
	assert_int_equal(recv_msg(&A->c, fx->m, 1000), 1);
	assert_int_equal(fx->m->type, WIRE_GRANT);
	assert_int_equal(fx->m->grant.keys_full, WIRE_KEYS_CUT);
	assert_int_equal(fx->m->grant.n_keys, 1);
	assert_int_equal(fx->m->grant.keys[0].op, WIRE_KEY_SET);
	assert_int_equal(fx->m->grant.keys[0].rate, a_key); /* kept, not cut to a part */
	assert_true(log_has(fx, "holder 'gw-a' limit 'k': adopted 1 per-key entries"));

	dial(fx, &B->c);
	hello(fx, &B->c, B->name);
	B->kforge = PK_RATE;
	pk_report_as(fx, B, true, &hb);
	assert_int_equal(recv_msg(&B->c, fx->m, 1000), 1);
	assert_int_equal(fx->m->type, WIRE_GRANT);
	assert_int_equal(fx->m->grant.keys_full, WIRE_KEYS_CUT);
	for (uint32_t i = 0; i < fx->m->grant.n_keys; i++)
		assert_true(fx->m->grant.keys[i].rate <= PK_RATE - a_key);
	assert_true(log_has(fx, "holder 'gw-b' limit 'k': a per-key entry it re-presents"));
	conn_close(&A->c);
	conn_close(&B->c);
}

/*
 * A reload keeps the hot keys: with A holding nearly all of K, the contract
 * is lowered to 600/s. A's per-key grant comes down to the new contract as
 * decreases do (B's cut stays), what both may spend on K never exceeds the
 * old contract meanwhile, and once within the new one it stays there; no
 * violation is logged. (Were the hot keys forgotten, B's first grant after
 * the reload would give it its share of K while A's grant of nearly 1000
 * still lives.)
 */
static void test_per_key_grants_reload(void **state)
{
	struct fx *fx = *state;
	struct pk_agent ag[2] = {{.name = "gw-a"}, {.name = "gw-b"}};
	struct pk_agent *A = &ag[0], *B = &ag[1];
	uint64_t end;
	bool within = false;

	pk_make_hot(fx, ag);
	/* Readable by the coordinator once it runs as nobody. */
	assert_int_equal(chmod(fx->dir, 0755), 0);
	write_file(fx->dir, "policy.yaml",
		   "version: 2\nlimits:\n"
		   "  - {name: k, key: src-ip, scope: global, rate: 600, burst: 600}\n"
		   "rules:\n  - {name: all, limits: [k]}\n");
	assert_int_equal(kill(fx->pid, SIGHUP), 0);
	/* B hears of the reload first, and reports first: its grant is the
	 * first one the new policy's state composes.
	 */
	assert_int_equal(recv_msg(&B->c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_POLICY);
	B->policy = fx->m->policy.version;
	end = clock_now_ns() + WAIT_MS * NSEC_PER_MSEC;
	for (;;) {
		pk_round(fx, ag, 2, 1, false);
		pk_round(fx, ag, 2, 0, true);
		if (A->policy == 2 && B->policy == 2 && !within && pk_check_sum(ag, 2) <= 600) {
			within = true;
			pk_cap = 600; /* from now on, the new contract */
		}
		if (within && A->last.entry && A->last.rate == 600 && B->last.entry &&
		    B->last.rate == 0)
			break;
		assert_true(clock_now_ns() < end);
	}
	for (int round = 0; round < 5; round++) {
		pk_round(fx, ag, 2, 1, false);
		pk_round(fx, ag, 2, 0, true);
		assert_true(A->last.entry && A->last.rate == 600 && B->last.rate == 0);
	}
	assert_true(log_has(fx, "policy version 2 loaded"));
	assert_false(log_has(fx, "INVARIANT VIOLATED"));
	pk_cap = PK_RATE;
	conn_close(&A->c);
	conn_close(&B->c);
}

/*
 * An override of a global limit is leased by its own contract: client
 * 10.0.0.1 has 600/s while the limit gives every other client 1000/s. It is
 * a key of its own from the first grant (a whole set naming it to both
 * gateways), A denied on it gets at most 600 in all, and what both may
 * spend on it never exceeds 600 at any grant.
 */
static void test_per_key_override(void **state)
{
	struct fx *fx = *state;
	struct pk_agent ag[2] = {{.name = "gw-a"}, {.name = "gw-b"}};
	struct pk_agent *A = &ag[0], *B = &ag[1];
	int round;

	pk_cap = 600;
	pk_start(fx, ag);
	/* Before anyone wants it, both hold an entry for it: its contract spread. */
	pk_round(fx, ag, 2, 1, false);
	assert_true(A->last.entry && B->last.entry);
	assert_true(A->last.rate + B->last.rate <= 600);
	for (round = 0; round < 30; round++) {
		pk_round(fx, ag, 2, 0, true);
		pk_round(fx, ag, 2, 1, false);
		if (A->last.entry && A->last.rate >= 540)
			break;
	}
	if (getenv("LL_TEST_VERBOSE"))
		print_message("A holds %llu/s of the override's 600 after %d rounds, B %llu\n",
			      (unsigned long long)A->last.rate, round,
			      (unsigned long long)B->last.rate);
	assert_true(round < 30);
	assert_true(A->last.rate <= 600);
	assert_true(log_has(fx, "policy version 1 loaded"));
	assert_false(log_has(fx, "INVARIANT VIOLATED"));
	pk_cap = PK_RATE;
	conn_close(&A->c);
	conn_close(&B->c);
}

static int setup_small_disk(void **state)
{
	int rc;

	want_small_disk = true;
	rc = setup(state);
	want_small_disk = false;
	return rc;
}

/* Fill the state tmpfs: 0 once it is full. */
static int fill_disk(struct fx *fx)
{
	return coord_fill_disk(fx->dir);
}

/* A full disk at runtime: a report whose fallback totals cannot be recorded
 * gets no grant (a failed write means no grant), counted and logged; once
 * there is room again the same totals are recorded and granted.
 */
static void test_disk_full_no_grant(void **state)
{
	struct fx *fx = *state;
	uint64_t rate[N_LIMITS] = {0}, gseq[N_LIMITS] = {0}, epoch = 0, seq;
	char path[128];
	struct conn c;

	if (!fx->small_disk)
		skip(); /* mounting a tmpfs needs root */
	uint64_t quiet_end = fx->t_start + lease_deadline(0, TTL_MS * NSEC_PER_MSEC);

	dial(fx, &c);
	hello(fx, &c, "gw-1");
	while (clock_now_ns() < quiet_end + 50 * NSEC_PER_MSEC)
		usleep(10 * 1000); /* grants flow once the quiet period is over */
	seq = report_until(fx, &c, "gw-1", 1, &epoch, rate, gseq, RATE);
	assert_int_equal(fill_disk(fx), 0);
	usleep(150 * 1000); /* past the usage records' 100 ms spacing */
	report_fb(fx, &c, "gw-1", seq, epoch, gseq, 100);
	assert_int_equal(grants(fx, &c, seq, rate, gseq, &epoch), 0);
	assert_true(log_has(fx, "cannot record usage of 'gw-1'"));
	snprintf(path, sizeof(path), "%s/state/fill", fx->dir);
	assert_int_equal(unlink(path), 0);
	usleep(150 * 1000);
	report_fb(fx, &c, "gw-1", ++seq, epoch, gseq, 100);
	assert_int_equal(grants(fx, &c, seq, rate, gseq, &epoch), N_LIMITS);
	conn_close(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_every_limit_granted_within_contract, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_256_limits_granted_within_contract, setup_many,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_reload_3_to_256_limits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hello_epoch_step_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_epoch_claims_cannot_stall_grants, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_restart_adopts_proven_shares, setup_adopt,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_malformed_frame_costs_only_that_connection, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_older_agent_served_in_its_version, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_silent_connections_reclaimed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_full_table_makes_room, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_prefix_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_state_symlink_not_chowned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runs_unprivileged, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_holder_slots_reclaimed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_grants, setup_perkey, teardown),
	    cmocka_unit_test_setup_teardown(test_older_agent_gets_no_cut, setup_perkey_adopt,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_restart_adopts_per_key_entries,
					    setup_perkey_adopt, teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_grants_reload, setup_perkey, teardown),
	    cmocka_unit_test_setup_teardown(test_per_key_override, setup_perkey_override, teardown),
	    cmocka_unit_test_setup_teardown(test_disk_full_no_grant, setup_small_disk, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
