// SPDX-License-Identifier: MIT
/*
 * The usage ledger inside a real `leaseline coord` process, fed by fake
 * agents over the wire protocol: metered limits only; duplicates and
 * replays count once; an hour boundary (the ledger's clock injected with
 * LEASELINE_LEDGER_NOW_FILE) splits usage by arrival; bypass shows as
 * bypass; `leaseline usage` prints it (text, CSV, JSON, --reconcile). The
 * coordinator killed with SIGKILL while it is inside a write (pwrite64,
 * fdatasync or fsync seen in /proc/PID/task/TID/syscall, on the writer thread), again and again
 * while reports flow: nothing lost, nothing doubled. A full disk: no grant for the metered limits,
 * the agent reports again, nothing lost or doubled. meter: turned on, off and on by SIGHUP over a
 * running agent bills only what it admitted while metered. The ledger's writes on their own thread:
 * grants do not wait for them, its queue is bounded, SIGTERM acks nothing uncommitted. Every test
 * ends with the ledger's totals equal, exactly, to what the fake agents counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "integ/coord_fx.h"

#include <sqlite3.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "lib/monotonic.h"
#include "lib/conn.h"
#include "lib/net.h"
#include "coord/usage_ledger.h"
#include "lib/wire.h"

#define TTL_MS	   300
#define WAIT_MS	   3000
#define N_LIM	   3 /* a, b metered; c not */
#define MAX_AGENTS 12
/* 2026-11-30T23:00:00Z */
#define T0 1796079600LL
/* An agent's incarnation is its start (CLOCK_REALTIME ns): these agents
 * started after the coordinator (clock T0 + 600) began metering, so their
 * first reports count from 0.
 */
#define INC(x) ((uint64_t)(T0 + 700) * 1000000000ull + (x))

struct agent {
	char name[16];
	uint64_t inc, seq;
	uint64_t ident;			  /* the counters identity its HELLO gives */
	struct uledger_totals t[N_LIM];	  /* its counters now (this incarnation's totals) */
	struct uledger_totals acc[N_LIM]; /* counted by incarnations whose pins were lost */
	struct conn c;
	bool up;
	bool k_granted; /* a grant of limit k on this connection */
};

struct fx {
	pid_t pid;
	int port, metrics_port;
	char dir[64];
	char now_file[96];
	struct wire_msg *m;
	bool small_disk;
	struct agent ag[MAX_AGENTS];
	int n_ag;
};

static bool want_small_disk;
static bool want_unmetered; /* b not metered at the start (a is: the ledger opens) */
static bool want_retention; /* ledger-retention: 1d */

/* Renamed into place: a reader between truncate and write would find the
 * file empty and take the real clock (a jump forward the ledger's bounds
 * then hold against every later report).
 */
static void set_now(struct fx *fx, int64_t t)
{
	char v[32], from[160], to[160];

	snprintf(v, sizeof(v), "%lld\n", (long long)t);
	write_file(fx->dir, "now.tmp", v);
	snprintf(from, sizeof(from), "%s/now.tmp", fx->dir);
	snprintf(to, sizeof(to), "%s/now", fx->dir);
	assert_int_equal(rename(from, to), 0);
}

static bool log_has(struct fx *fx, const char *s)
{
	return coord_log_has(fx->dir, s);
}

/* Start (or restart) the coordinator; 0 once it listens. Each run binds
 * port 0 for both listeners: fx->port and fx->metrics_port are this run's.
 */
static int coord_start(struct fx *fx)
{
	char cfg[128], log[128];

	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", fx->dir);
	snprintf(log, sizeof(log), "%s/coord.log", fx->dir);
	unlink(log); /* a restart must not find the last run's "listening" */
	fx->pid = fork();
	if (fx->pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		dup2(out, 2);
		setenv("LEASELINE_LEDGER_NOW_FILE", fx->now_file, 1);
		execl(bin(), bin(), "coord", "-c", cfg, (char *)NULL);
		_exit(127);
	}
	if (fx->pid < 0)
		return -1;
	return coord_wait_ready(fx->dir, &fx->pid, &fx->port, &fx->metrics_port);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	char coord[256], policy[512];

	if (!fx || access(bin(), X_OK))
		return -1;
	signal(SIGPIPE, SIG_IGN);
	fx->m = malloc(sizeof(*fx->m));
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/ll-usage-proto-XXXXXX");
	if (!fx->m || !mkdtemp(fx->dir))
		return -1;
	chmod(fx->dir, 0755); /* the coordinator runs as nobody: it reads the clock file */
	snprintf(fx->now_file, sizeof(fx->now_file), "%s/now", fx->dir);
	set_now(fx, T0 + 600);
	snprintf(policy, sizeof(policy),
		 "version: 1\nlimits:\n"
		 "  - {name: a, scope: global, rate: 900, burst: 90, meter: true}\n"
		 "  - {name: b, scope: global, rate: 900, burst: 90%s}\n"
		 "  - {name: c, scope: global, rate: 900, burst: 90}\n"
		 "  - {name: k, key: src-ip, scope: global, rate: 100, burst: 10, meter: true}\n"
		 "rules:\n  - {name: all, limits: [a, b, c, k]}\n",
		 want_unmetered ? "" : ", meter: true");
	write_file(fx->dir, "policy.yaml", policy);
	if (want_small_disk) {
		char st[96];

		snprintf(st, sizeof(st), "%s/state", fx->dir);
		fx->small_disk =
		    !mkdir(st, 0700) && !mount("tmpfs", st, "tmpfs", 0, "size=1m,mode=0700");
	}
	snprintf(coord, sizeof(coord),
		 "listen: 127.0.0.1:0\npolicy: policy.yaml\nstate-dir: state\n"
		 "lease: {ttl: %dms, refresh: 100ms}\ngateways: 8\nmetrics: 127.0.0.1:0\n%s%s",
		 TTL_MS, getuid() == 0 ? "user: nobody\n" : "",
		 want_retention ? "ledger-retention: 1d\n" : "");
	write_file(fx->dir, "coord.yaml", coord);
	*state = fx;
	return coord_start(fx);
}

static int setup_unmetered(void **state)
{
	int rc;

	want_unmetered = true;
	rc = setup(state);
	want_unmetered = false;
	return rc;
}

static int setup_small_disk(void **state)
{
	int rc;

	want_small_disk = true;
	rc = setup(state);
	want_small_disk = false;
	return rc;
}

static int setup_retention(void **state)
{
	int rc;

	want_retention = true;
	rc = setup(state);
	want_retention = false;
	return rc;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[160];
	int st = 0;

	for (int i = 0; i < fx->n_ag; i++)
		if (fx->ag[i].up)
			conn_close(&fx->ag[i].c);
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
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ---- fake agents ---- */

static struct agent *agent_new(struct fx *fx, const char *name, uint64_t inc)
{
	struct agent *a = &fx->ag[fx->n_ag++];

	memset(a, 0, sizeof(*a));
	snprintf(a->name, sizeof(a->name), "%s", name);
	a->inc = inc;
	return a;
}

/* Drain what the coordinator sent; count grants per limit (index). */
static int drain(struct fx *fx, struct agent *a, int *grants)
{
	int n = 0, err;

	if (!a->up)
		return -1;
	err = conn_read(&a->c);
	while (conn_next(&a->c, fx->m) > 0) {
		if (fx->m->type == WIRE_GRANT && !strcmp(fx->m->grant.limit, "k") &&
		    fx->m->grant.rate)
			a->k_granted = true;
		if (fx->m->type == WIRE_GRANT && grants) {
			grants[fx->m->grant.limit[0] - 'a']++;
			n++;
		}
	}
	if (err) {
		conn_close(&a->c);
		a->up = false;
		return -1;
	}
	return n;
}

/* Connect and say hello; false if the coordinator is not there. */
static bool agent_connect(struct fx *fx, struct agent *a)
{
	struct sockaddr_storage sa;
	char addr[32];
	socklen_t len;
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", fx->port);
	assert_int_equal(net_addr(addr, &sa, &len), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sa, len)) {
		close(fd);
		return false;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	conn_init(&a->c, fd);
	a->k_granted = false;
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "%s", a->name);
	fx->m->hello.incarnation = a->inc;
	fx->m->hello.counters_ident = a->ident;
	a->up = conn_send(&a->c, fx->m) == 0;
	return a->up;
}

/* Send one report with the agent's totals now, seq `seq`. */
static int agent_report_seq(struct fx *fx, struct agent *a, uint64_t seq)
{
	struct wire_report *r = &fx->m->report;

	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(r->holder, sizeof(r->holder), "%s", a->name);
	r->incarnation = a->inc;
	r->seq = seq;
	r->n = N_LIM;
	for (int l = 0; l < N_LIM; l++) {
		struct wire_report_entry *e = &r->e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "%c", 'a' + l);
		e->admitted = a->t[l].admitted;
		e->denied = a->t[l].denied;
		e->fallback = a->t[l].fallback;
		e->bypass = a->t[l].bypass;
		e->demand = 100;
	}
	return conn_send(&a->c, fx->m);
}

static int agent_report(struct fx *fx, struct agent *a)
{
	return agent_report_seq(fx, a, ++a->seq);
}

static void agent_count(struct agent *a, uint64_t adm, uint64_t den, uint64_t byp)
{
	for (int l = 0; l < N_LIM; l++) {
		a->t[l].admitted += adm * (uint64_t)(l + 1);
		a->t[l].denied += den;
		a->t[l].bypass += byp;
	}
}

/* ---- the ledger as written ---- */

static int add_row(const struct uledger_row *r, void *arg)
{
	struct uledger_totals *t = arg;

	t->admitted += r->t.admitted;
	t->denied += r->t.denied;
	t->fallback += r->t.fallback;
	t->bypass += r->t.bypass;
	return 0;
}

static struct uledger_totals ledger_sum(struct fx *fx, const char *limit, const char *holder)
{
	struct uledger_query q = {
	    .period = ULEDGER_MONTH, .limit = limit, .holder = holder, .by_holder = 1};
	struct uledger_totals t = {0};
	char path[128];

	snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
	if (uledger_query(path, &q, add_row, &t))
		memset(&t, 0xff, sizeof(t));
	return t;
}

/* What its datapath counted, all incarnations together. */
static struct uledger_totals counted(const struct agent *a, int l)
{
	return (struct uledger_totals){
	    .admitted = a->acc[l].admitted + a->t[l].admitted,
	    .denied = a->acc[l].denied + a->t[l].denied,
	    .fallback = a->acc[l].fallback + a->t[l].fallback,
	    .bypass = a->acc[l].bypass + a->t[l].bypass,
	};
}

static bool ledger_equals(struct fx *fx, const struct agent *a, int l)
{
	char lim[2] = {(char)('a' + l), 0};
	struct uledger_totals g = ledger_sum(fx, lim, a->name), w = counted(a, l);

	return !memcmp(&g, &w, sizeof(g));
}

/* The agent restarts: a new incarnation (a later start), seq from 1; its
 * counters go on if it kept its pins, else begin at 0 (a reboot).
 */
static void agent_restart(struct fx *fx, struct agent *a, bool kept_pins)
{
	if (a->up)
		conn_close(&a->c);
	a->up = false;
	a->inc += 1000000000ull; /* started a second later */
	a->seq = 0;
	if (!kept_pins)
		for (int l = 0; l < N_LIM; l++) {
			a->acc[l] = counted(a, l);
			memset(&a->t[l], 0, sizeof(a->t[l]));
		}
	assert_true(agent_connect(fx, a));
}

/* Report (spaced past the coordinator's 100 ms between records) until the
 * ledger holds every metered total of every agent; then check exactly.
 */
static void settle(struct fx *fx)
{
	uint64_t end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	bool all;

	do {
		usleep(120 * 1000);
		all = true;
		for (int i = 0; i < fx->n_ag; i++) {
			struct agent *a = &fx->ag[i];

			drain(fx, a, NULL);
			if (!a->up)
				assert_true(agent_connect(fx, a));
			agent_report(fx, a);
		}
		usleep(50 * 1000);
		for (int i = 0; i < fx->n_ag; i++)
			for (int l = 0; l < 2; l++)
				all &= ledger_equals(fx, &fx->ag[i], l);
	} while (!all && clock_now_ns() < end);
	for (int i = 0; i < fx->n_ag; i++) {
		struct uledger_totals g;

		for (int l = 0; l < 2; l++) {
			char lim[2] = {(char)('a' + l), 0};
			struct uledger_totals w = counted(&fx->ag[i], l);

			g = ledger_sum(fx, lim, fx->ag[i].name);
			assert_int_equal(g.admitted, w.admitted);
			assert_int_equal(g.denied, w.denied);
			assert_int_equal(g.fallback, w.fallback);
			assert_int_equal(g.bypass, w.bypass);
		}
		g = ledger_sum(fx, "c", fx->ag[i].name); /* not metered: nothing */
		assert_int_equal(g.admitted, 0);
	}
}

/* One sample of the coordinator's /metrics: its value, or -1. */
static double metric(struct fx *fx, const char *sample)
{
	char req[] = "GET /metrics HTTP/1.0\r\n\r\n", *buf = malloc(1 << 20), *p;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)fx->metrics_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	size_t n = 0;
	ssize_t r;
	double v = -1;

	assert_non_null(buf);
	if (fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1)
		while (n < (1 << 20) - 1 && (r = read(fd, buf + n, (1 << 20) - 1 - n)) > 0)
			n += (size_t)r;
	buf[n] = '\0';
	/* at a line's start: "# HELP NAME ..." and "# TYPE NAME counter" name it too */
	for (p = buf; (p = strstr(p, sample)) && p > buf && p[-1] != '\n' && *sample != '\n'; p++)
		;
	if (p)
		v = strtod(p + strlen(sample), NULL);
	if (fd >= 0)
		close(fd);
	free(buf);
	return v;
}

static int run_cli(struct fx *fx, const char *args, char *out, size_t cap)
{
	char cmd[512];
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s usage -c %s/coord.yaml %s", bin(), fx->dir, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	return WEXITSTATUS(pclose(p));
}

/* Duplicates and replays over TCP, agent restarts keeping and losing their
 * pins, an hour boundary, bypass, and the CLI.
 */
static void test_metered_end_to_end(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	char out[8192], want[128];

	assert_true(agent_connect(fx, a));
	for (int i = 0; i < 5; i++) {
		agent_count(a, 100, 3, 0);
		assert_int_equal(agent_report(fx, a), 0);
		usleep(20 * 1000);
	}
	assert_int_equal(agent_report_seq(fx, a, a->seq), 0); /* retransmitted */
	assert_int_equal(agent_report_seq(fx, a, 2), 0);      /* replayed */
	settle(fx);
	/* Restarts: one keeping its pins (totals go on), one losing them. */
	agent_restart(fx, a, true);
	agent_count(a, 7, 0, 0);
	settle(fx);
	agent_restart(fx, a, false);
	agent_count(a, 3, 0, 0);
	settle(fx);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_entries_total{kind=\"continued\"} ") ==
		    2); /* a and b */
	assert_true(metric(fx, "leaseline_coord_usage_ledger_entries_total{kind=\"restarted\"} ") ==
		    2);
	/* The hour ends: what comes now is the next hour's. */
	set_now(fx, T0 + 3600 + 5);
	agent_count(a, 40, 0, 0);
	settle(fx);
	/* The lease died and the gateway failed open. */
	agent_count(a, 0, 0, 1000000000);
	settle(fx);
	assert_int_equal(run_cli(fx, "--csv --limit a", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "period_start,period_end,limit,holder,unit,admitted"));
	assert_non_null(strstr(out, "2026-11-30T23:00:00Z,2026-12-01T00:00:00Z,a,gw-1,packets,"
				    "510,15,0,0\n"));
	snprintf(want, sizeof(want),
		 "2026-12-01T00:00:00Z,2026-12-01T01:00:00Z,a,gw-1,packets,40,0,"
		 "0,1000000000\n");
	assert_non_null(strstr(out, want));
	assert_int_equal(run_cli(fx, "--period month -j", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"period\":\"2026-11\""));
	assert_non_null(strstr(out, "\"bypass\":1000000000"));
	assert_int_equal(
	    run_cli(fx, "--period day --holder gw-1 --from 2026-12-01", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "2026-12-01"));
	assert_null(strstr(out, "2026-11-30"));
	assert_int_equal(run_cli(fx, "--reconcile", out, sizeof(out)), 1);
	assert_non_null(strstr(out, "bypass 1000000000"));
	printf("%s", out);
	/* Filters that match nothing the ledger ever held are mistakes, said
	 * (exit 2, naming what it has), not an empty table (issue 28).
	 */
	assert_int_equal(run_cli(fx, "--limit nope 2>&1", out, sizeof(out)), 2);
	assert_non_null(strstr(out, "--limit 'nope': no such limit in the ledger (it has: a, b"));
	assert_int_equal(run_cli(fx, "--holder nobody 2>&1", out, sizeof(out)), 2);
	assert_non_null(strstr(out, "--holder 'nobody': no such holder in the ledger (it has: gw-1"));
	assert_int_equal(run_cli(fx, "--from 2026-12-02 --to 2026-12-01 2>&1", out, sizeof(out)),
			 2);
	assert_non_null(strstr(out, "--from is not before --to"));
	assert_int_equal(run_cli(fx, "-j --csv 2>&1", out, sizeof(out)), 2);
	assert_int_equal(run_cli(fx, "--limit c 2>&1", out, sizeof(out)), 0); /* the policy's */
}

/* 1 when a thread of pid is inside system call a or b (-1: none), as
 * /proc/PID/task/TID/syscall shows: the ledger's writes and syncs run on
 * the coordinator's writer thread, not its main one. 0 when none is; -1
 * when the process is gone.
 */
static int any_thread_in(pid_t pid, long a, long b)
{
	char path[300], buf[128];
	struct dirent *d;
	DIR *dir;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while (r == 0 && (d = readdir(dir))) {
		ssize_t n;
		long nr;
		int fd;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/syscall", pid, d->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		nr = strtol(buf, NULL, 10);
		r = nr == a || (b >= 0 && nr == b);
	}
	closedir(dir);
	return r;
}

/* Reports flow from 4 agents; the coordinator is killed with SIGKILL while
 * inside its ledger commit (pwrite64 of WAL frames, or their fdatasync, as
 * /proc/PID/task/TID/syscall shows, of the writer thread), restarted, the agents reconnect (same
 * incarnation, seq going on), KILLS times. Then the ledger holds exactly
 * what the agents counted.
 */
#define KILLS 10
static void test_kill9_mid_write(void **state)
{
	struct fx *fx = *state;
	int mid_write[2] = {0, 0};
	uint64_t seed = 7;
	int64_t now = T0 + 600;

	for (int i = 0; i < 4; i++) {
		char name[16];

		snprintf(name, sizeof(name), "gw-%d", i + 1);
		assert_true(agent_connect(fx, agent_new(fx, name, INC(100 + (uint64_t)i))));
	}
	for (int round = 0; round < KILLS; round++) {
		uint64_t end = clock_now_ns() + 2000 * NSEC_PER_MSEC;
		bool hit = false;

		while (!hit && clock_now_ns() < end) {
			for (int i = 0; i < fx->n_ag; i++) {
				struct agent *a = &fx->ag[i];

				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				agent_count(a, 1 + (seed >> 33) % 500, (seed >> 20) % 7, 0);
				drain(fx, a, NULL);
				agent_report(fx, a);
			}
			/* The ledger's clock moves on as the counts do: at most
			 * 998 a report, within what each holder's lease (900/s
			 * over 4 of them) passes in 10 s. A frozen clock let a
			 * slow hunt for the write outspend the ledger's bound
			 * (the lease's burst + rate x (ttl + 60 s)) and be cut.
			 */
			now += 10;
			set_now(fx, now);
			/* Watch its system call for a while: a write's sync. */
			for (int k = 0; k < 200 && !hit; k++) {
				/* Odd rounds: writing the WAL's frames (the commit
				 * frame not yet there); even: syncing them.
				 */
				int r = round % 2
					    ? any_thread_in(fx->pid, SYS_pwrite64, -1)
					    : any_thread_in(fx->pid, SYS_fdatasync, SYS_fsync);

				if (r < 0)
					break;
				hit = r == 1;
			}
		}
		mid_write[round % 2] += hit;
		kill(fx->pid, SIGKILL);
		waitpid(fx->pid, NULL, 0);
		fx->pid = -1;
		/* What the agents count meanwhile is theirs to report later. */
		for (int i = 0; i < fx->n_ag; i++) {
			agent_count(&fx->ag[i], 10, 1, 0);
			if (fx->ag[i].up)
				conn_close(&fx->ag[i].c);
			fx->ag[i].up = false;
		}
		assert_int_equal(coord_start(fx), 0);
		for (int i = 0; i < fx->n_ag; i++)
			assert_true(agent_connect(fx, &fx->ag[i]));
	}
	settle(fx);
	/* What the last run measured: report arrival to ledger commit. */
	for (int i = 0; i < 30; i++) { /* more reports to measure */
		usleep(110 * 1000);
		for (int k = 0; k < fx->n_ag; k++) {
			drain(fx, &fx->ag[k], NULL);
			agent_count(&fx->ag[k], 5, 0, 0);
			agent_report(fx, &fx->ag[k]);
		}
	}
	settle(fx);
	printf("in the coordinator (4 agents, 2 metered limits a report, fsync): arrival to "
	       "commit p50 %.3f ms, p99 %.3f ms over %.0f reports\n",
	       1e3 * metric(fx, "leaseline_coord_usage_ledger_commit_seconds{quantile=\"0.5\"} "),
	       1e3 * metric(fx, "leaseline_coord_usage_ledger_commit_seconds{quantile=\"0.99\"} "),
	       metric(fx, "leaseline_coord_usage_ledger_reports_total{result=\"recorded\"} "));
	assert_true(metric(fx, "leaseline_coord_usage_ledger_commit_seconds{quantile=\"0.5\"} ") >
		    0);
	printf("coordinator killed %d times while reports flowed: %d inside pwrite64 of the "
	       "ledger's WAL, %d inside its fdatasync/fsync; ledger = agents' totals\n",
	       KILLS, mid_write[1], mid_write[0]);
	assert_true(mid_write[0] + mid_write[1] >= 3);
}

/* Report until the ledger holds `want` for (limit, holder); bounded. */
static bool ledger_reaches(struct fx *fx, struct agent *a, const char *limit,
			   struct uledger_totals want)
{
	uint64_t end = clock_now_ns() + 2 * WAIT_MS * NSEC_PER_MSEC;
	struct uledger_totals g;

	do {
		usleep(120 * 1000);
		drain(fx, a, NULL);
		agent_report(fx, a);
		usleep(50 * 1000);
		g = ledger_sum(fx, limit, a->name);
	} while (memcmp(&g, &want, sizeof(g)) && clock_now_ns() < end);
	return !memcmp(&g, &want, sizeof(g));
}

/* meter: true added by a reload over a running agent: what it admitted
 * before is not billed (its first report after is the baseline); what it
 * admits after is, exactly. Removed and added again: the gap is not billed.
 */
static void test_meter_turned_on_by_reload(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	struct uledger_totals want = {0};

	assert_true(agent_connect(fx, a));
	agent_count(a, 5000, 50, 0); /* b (index 1) not metered yet: 10000 admitted */
	assert_int_equal(agent_report(fx, a), 0);
	usleep(150 * 1000);
	set_now(fx, T0 + 800); /* the agent started at T0 + 700: before the metering */
	write_file(fx->dir, "policy.yaml",
		   "version: 2\nlimits:\n"
		   "  - {name: a, scope: global, rate: 900, burst: 90, meter: true}\n"
		   "  - {name: b, scope: global, rate: 900, burst: 90, meter: true}\n"
		   "  - {name: c, scope: global, rate: 900, burst: 90}\n"
		   "rules:\n  - {name: all, limits: [a, b, c]}\n");
	kill(fx->pid, SIGHUP);
	for (int i = 0; i < 100 && !log_has(fx, "limit 'b' metered from now on"); i++)
		usleep(20 * 1000);
	assert_true(log_has(fx, "limit 'b' metered from now on"));
	/* Baseline: the first report after; then 40 more admitted (x2 for b). */
	assert_true(ledger_reaches(fx, a, "b", want));
	agent_count(a, 40, 1, 0);
	want.admitted = 80;
	want.denied = 1;
	assert_true(ledger_reaches(fx, a, "b", want));
	/* Not metered, 1000 more admitted, metered again: the gap is not billed. */
	write_file(fx->dir, "policy.yaml",
		   "version: 3\nlimits:\n"
		   "  - {name: a, scope: global, rate: 900, burst: 90, meter: true}\n"
		   "  - {name: b, scope: global, rate: 900, burst: 90}\n"
		   "  - {name: c, scope: global, rate: 900, burst: 90}\n"
		   "rules:\n  - {name: all, limits: [a, b, c]}\n");
	kill(fx->pid, SIGHUP);
	for (int i = 0; i < 100 && !log_has(fx, "limit 'b' is not metered now"); i++)
		usleep(20 * 1000);
	agent_count(a, 500, 0, 0);
	agent_report(fx, a);
	usleep(150 * 1000);
	write_file(fx->dir, "policy.yaml",
		   "version: 4\nlimits:\n"
		   "  - {name: a, scope: global, rate: 900, burst: 90, meter: true}\n"
		   "  - {name: b, scope: global, rate: 900, burst: 90, meter: true}\n"
		   "  - {name: c, scope: global, rate: 900, burst: 90}\n"
		   "rules:\n  - {name: all, limits: [a, b, c]}\n");
	set_now(fx, T0 + 900);
	kill(fx->pid, SIGHUP);
	for (int i = 0; i < 100 && !log_has(fx, "policy version 4"); i++)
		usleep(20 * 1000);
	assert_true(ledger_reaches(fx, a, "b", want)); /* the baseline again */
	agent_count(a, 3, 0, 0);
	want.admitted += 6;
	assert_true(ledger_reaches(fx, a, "b", want));
}

static int fill_disk(struct fx *fx)
{
	return coord_fill_disk(fx->dir);
}

/* A full disk: the report whose usage cannot be written gets no grant for
 * its metered limits (the unmetered one is granted); the agent reports the
 * same totals again once there is room; nothing lost or doubled.
 */
static void test_disk_full(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	int grants[N_LIM] = {0};
	char path[128];
	uint64_t end;

	if (!fx->small_disk)
		skip(); /* mounting a tmpfs needs root */
	assert_true(agent_connect(fx, a));
	usleep(TTL_MS * 1100 + 100 * 1000); /* the quiet period: grants flow after it */
	agent_count(a, 100, 1, 0);
	settle(fx);
	assert_int_equal(fill_disk(fx), 0);
	agent_count(a, 250, 2, 0); /* no bypass: the usage log would fail too */
	usleep(150 * 1000);
	drain(fx, a, NULL);
	assert_int_equal(agent_report(fx, a), 0);
	end = clock_now_ns() + 500 * NSEC_PER_MSEC;
	while (clock_now_ns() < end && !grants[2]) {
		poll(NULL, 0, 10);
		drain(fx, a, grants);
	}
	assert_int_equal(grants[0], 0);
	assert_int_equal(grants[1], 0);
	assert_int_equal(grants[2], 1);
	assert_true(log_has(fx, "cannot record usage of 'gw-1' in the usage ledger"));
	snprintf(path, sizeof(path), "%s/state/fill", fx->dir);
	assert_int_equal(unlink(path), 0);
	settle(fx);
	memset(grants, 0, sizeof(grants));
	end = clock_now_ns() + 500 * NSEC_PER_MSEC;
	usleep(150 * 1000);
	agent_report(fx, a);
	while (clock_now_ns() < end && !(grants[0] && grants[1])) {
		poll(NULL, 0, 10);
		drain(fx, a, grants);
	}
	assert_true(grants[0] && grants[1]);
}

/* ---- per-key usage (METER batches) ---- */

#define NK 4 /* keys of limit k per fake agent: 198.18.0.1 .. 198.18.0.4 */

struct kstate {
	uint64_t ident, seq;
	uint64_t pkts[NK][LL_METER_CLASSES], bytes[NK][LL_METER_CLASSES];
};

static void kcount(struct kstate *k, int key, uint64_t adm, uint64_t den, uint64_t byp)
{
	k->pkts[key][LL_METER_ADMITTED] += adm;
	k->pkts[key][LL_METER_DENIED] += den;
	k->pkts[key][LL_METER_BYPASS] += byp;
	k->bytes[key][LL_METER_ADMITTED] += adm * 100;
	k->bytes[key][LL_METER_DENIED] += den * 100;
	k->bytes[key][LL_METER_BYPASS] += byp * 100;
}

/* A lease of limit k on a's connection, as a real agent holds one before
 * its keys admit anything: the coordinator bounds each key's admitted
 * figure by what it granted the holder (reference §6.3, Bounds). Reports
 * of k alone (its own totals 0: they sum its keys), until a grant comes
 * of a rate above 0 (after the quiet period; the ledger commits the
 * report first).
 */
static void k_lease(struct fx *fx, struct agent *a)
{
	uint64_t end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;

	while (a->up && !a->k_granted && clock_now_ns() < end) {
		struct wire_report *r = &fx->m->report;

		WIRE_MSG_CLEAR(fx->m, report.n);
		fx->m->type = WIRE_REPORT;
		snprintf(r->holder, sizeof(r->holder), "%s", a->name);
		r->incarnation = a->inc;
		r->seq = ++a->seq;
		r->n = 1;
		memset(&r->e[0], 0, sizeof(r->e[0]));
		snprintf(r->e[0].limit, sizeof(r->e[0].limit), "k");
		r->e[0].demand = 100;
		if (conn_send(&a->c, fx->m))
			break;
		for (int i = 0; i < 12 && !a->k_granted; i++) {
			usleep(10 * 1000);
			drain(fx, a, NULL);
		}
	}
	if (!a->k_granted) {
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "tail -15 %s/coord.log", fx->dir);
		(void)!system(cmd);
		fail_msg("no grant of k for '%s'", a->name);
	}
}

/* A METER batch of limit `limit` with the totals of `snap` (or now), seq. */
static int meter_send(struct fx *fx, struct agent *a, const struct kstate *snap, uint64_t seq,
		      const char *limit)
{
	struct wire_meter *mt = &fx->m->meter;

	/* A batch's identity is its connection's HELLO's: another one, another
	 * HELLO (as an agent whose pins were made again says hello again).
	 */
	if (a->ident != snap->ident) {
		if (a->up)
			conn_close(&a->c);
		a->up = false;
		a->ident = snap->ident;
	}
	if (!a->up && !agent_connect(fx, a))
		return -1;
	if (!strcmp(limit, "k") && !a->k_granted)
		k_lease(fx, a);
	WIRE_MSG_CLEAR(fx->m, meter.n);
	fx->m->type = WIRE_METER;
	snprintf(mt->holder, sizeof(mt->holder), "%s", a->name);
	mt->incarnation = a->inc;
	mt->ident = snap->ident;
	mt->seq = seq;
	snprintf(mt->limit, sizeof(mt->limit), "%s", limit);
	mt->limit_uid = 3;
	mt->n = NK;
	for (int i = 0; i < NK; i++) {
		memset(&mt->e[i], 0, sizeof(mt->e[i]));
		mt->e[i].key.family = 4;
		mt->e[i].key.addr[2] = htonl(0xffff);
		mt->e[i].key.addr[3] = htonl(0xc6120001u + (uint32_t)i); /* 198.18.0.1 + i */
		memcpy(mt->e[i].pkts, snap->pkts[i], sizeof(mt->e[i].pkts));
		memcpy(mt->e[i].bytes, snap->bytes[i], sizeof(mt->e[i].bytes));
	}
	return conn_send(&a->c, fx->m);
}

/* The status of the ack of batch seq, or -1 if none came in time. */
static int meter_ack_of(struct fx *fx, struct agent *a, uint64_t seq)
{
	uint64_t end = clock_now_ns() + WAIT_MS * NSEC_PER_MSEC;

	while (a->up && clock_now_ns() < end) {
		int err = conn_read(&a->c);

		while (conn_next(&a->c, fx->m) > 0) {
			if (fx->m->type == WIRE_GRANT && !strcmp(fx->m->grant.limit, "k") &&
			    fx->m->grant.rate)
				a->k_granted = true;
			if (fx->m->type == WIRE_METER_ACK && fx->m->meter_ack.seq == seq)
				return fx->m->meter_ack.status;
		}
		if (err && err != -EAGAIN) {
			conn_close(&a->c);
			a->up = false;
			break;
		}
		poll(NULL, 0, 5);
	}
	return -1;
}

struct kled {
	uint64_t pkts[NK][LL_METER_CLASSES], bytes[NK][LL_METER_CLASSES];
};

static int add_krow(const struct uledger_key_row *r, void *arg)
{
	struct kled *k = arg;
	unsigned last;

	if (sscanf(r->key, "198.18.0.%u", &last) != 1 || last < 1 || last > NK)
		return 0;
	for (int c = 0; c < LL_METER_CLASSES; c++) {
		k->pkts[last - 1][c] += r->pkts[c];
		k->bytes[last - 1][c] += r->bytes[c];
	}
	return 0;
}

static bool kled_equals(struct fx *fx, const char *holder, const struct kstate *want)
{
	struct uledger_query q = {
	    .period = ULEDGER_MONTH, .limit = "k", .holder = holder, .by_holder = 1};
	struct kled got = {0};
	char path[128];

	snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
	if (uledger_query_keys(path, &q, NULL, add_krow, &got))
		return false;
	if (getenv("KDEBUG"))
		for (int i = 0; i < NK; i++)
			fprintf(stderr, "key %d: got %llu/%llu want %llu/%llu\n", i,
				(unsigned long long)got.pkts[i][0],
				(unsigned long long)got.bytes[i][0],
				(unsigned long long)want->pkts[i][0],
				(unsigned long long)want->bytes[i][0]);
	return !memcmp(got.pkts, want->pkts, sizeof(got.pkts)) &&
	       !memcmp(got.bytes, want->bytes, sizeof(got.bytes));
}

/* Send the totals now until the coordinator records them (it may be down
 * or full meanwhile: the agent's map holds them), then compare exactly.
 */
static void ksend(struct fx *fx, struct agent *a, struct kstate *k)
{
	int st = -1;

	for (int i = 0; i < 50 && st != WIRE_METER_RECORDED; i++) {
		if (!a->up)
			assert_true(agent_connect(fx, a));
		meter_send(fx, a, k, ++k->seq, "k");
		st = meter_ack_of(fx, a, k->seq);
	}
	assert_int_equal(st, WIRE_METER_RECORDED);
}

static void ksettle_as(struct fx *fx, struct agent *a, struct kstate *k, const struct kstate *want)
{
	ksend(fx, a, k);
	assert_true(kled_equals(fx, a->name, want));
}

static void ksettle(struct fx *fx, struct agent *a, struct kstate *k)
{
	ksettle_as(fx, a, k, k);
}

/* Batches duplicated, replayed, reordered and delayed count once; limits
 * not metered per key are refused; `leaseline usage --keys` shows it, and
 * --reconcile --keys finds a key over its own contract.
 */
static void test_keys_end_to_end(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	struct kstate k = {.ident = 0xabcdef12345ull}, old[3];
	char out[8192];

	assert_true(agent_connect(fx, a));
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < NK; j++)
			kcount(&k, j, 10 * (uint64_t)(j + 1), (uint64_t)i, 0);
		old[i] = k;
		old[i].seq = ++k.seq;
		assert_int_equal(meter_send(fx, a, &k, k.seq, "k"), 0);
		assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_RECORDED);
	}
	/* duplicated, replayed and reordered: older totals under any seq */
	assert_int_equal(meter_send(fx, a, &old[2], old[2].seq, "k"), 0);
	assert_int_equal(meter_ack_of(fx, a, old[2].seq), WIRE_METER_RECORDED);
	assert_int_equal(meter_send(fx, a, &old[0], old[0].seq, "k"), 0);
	assert_int_equal(meter_send(fx, a, &old[1], ++k.seq, "k"), 0);
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_RECORDED);
	assert_true(kled_equals(fx, "gw-1", &k));
	/* delayed by minutes (the ledger's clock moved on): still nothing */
	set_now(fx, T0 + 900);
	assert_int_equal(meter_send(fx, a, &old[1], ++k.seq, "k"), 0);
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_RECORDED);
	/* bypass after the lease expired: per key, as bypass */
	kcount(&k, 0, 0, 0, 77);
	ksettle(fx, a, &k);
	/* a malformed key (a field its mode does not use): the batch refused */
	{
		struct wire_meter *mt = &fx->m->meter;

		meter_send(fx, a, &old[0], 0, "k");
		WIRE_MSG_CLEAR(fx->m, meter.n);
		fx->m->type = WIRE_METER;
		snprintf(mt->holder, sizeof(mt->holder), "%s", a->name);
		mt->incarnation = a->inc;
		mt->ident = k.ident;
		mt->seq = ++k.seq;
		snprintf(mt->limit, sizeof(mt->limit), "k");
		mt->n = 1;
		memset(&mt->e[0], 0, sizeof(mt->e[0]));
		mt->e[0].key.family = 4;
		mt->e[0].key.addr[2] = htonl(0xffff);
		mt->e[0].key.addr[3] = htonl(0xc6120001u);
		mt->e[0].key.dport = 53; /* src-ip keys have no port */
		mt->e[0].pkts[0] = 1000000;
		assert_int_equal(conn_send(&a->c, fx->m), 0);
		assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_REFUSED);
	}
	/* not metered per key: refused, never recorded */
	assert_int_equal(meter_send(fx, a, &k, ++k.seq, "a"), 0);
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_REFUSED);
	assert_int_equal(meter_send(fx, a, &k, ++k.seq, "nope"), 0);
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_REFUSED);
	assert_true(kled_equals(fx, "gw-1", &k));
	assert_true(
	    metric(fx, "leaseline_coord_usage_ledger_key_batches_total{result=\"refused\"} ") == 3);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_key_entries_total{kind=\"stale\"} ") >=
		    3 * NK);

	assert_int_equal(run_cli(fx, "--keys --period month", out, sizeof(out)), 0);
	printf("%s", out);
	assert_non_null(strstr(out, "198.18.0.4"));
	assert_non_null(strstr(out, "120")); /* 198.18.0.4: 40 x 3 admitted */
	assert_int_equal(run_cli(fx, "--key 198.18.0.1 --csv", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"198.18.0.1\",gw-1,30,3000,3,300,0,0,77,7700"));
	assert_null(strstr(out, "198.18.0.2"));
	assert_int_equal(run_cli(fx, "--keys -j --period day", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"key\":\"198.18.0.3\""));
	assert_non_null(strstr(out, "\"bytes\":{\"admitted\":9000"));
	/* 198.18.0.4 passed 120 in its hour: within 10 + 100 * 3600 (the
	 * hour is over by the CLI's clock); 500000 more is over.
	 */
	assert_int_equal(run_cli(fx, "--keys --reconcile", out, sizeof(out)), 0);
	/* 500,000 more claimed at once: the ledger counts what gw-1's grants
	 * of k could have let the key pass (its largest share's bucket, the
	 * contract only for the time before this run knew its grants: the
	 * ledger's clock jumped 300 s, so some of it), never more than the
	 * key's contract (a full bucket, 10 + 100 x 3600); the rest is cut and
	 * counted.
	 */
	kcount(&k, 3, 500000, 0, 0);
	ksend(fx, a, &k);
	{
		struct kled got = {0};
		struct uledger_query q = {
		    .period = ULEDGER_MONTH, .limit = "k", .holder = "gw-1", .by_holder = 1};
		char path[128];
		uint64_t n;

		snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
		assert_int_equal(uledger_query_keys(path, &q, NULL, add_krow, &got), 0);
		n = got.pkts[3][LL_METER_ADMITTED];
		print_message("500,000 claimed for 198.18.0.4: %llu counted (the key's contract: "
			      "%u)\n",
			      (unsigned long long)(n - 120), 10 + 100 * 3600);
		assert_true(n > 120 && n <= 120 + 10 + 100 * 3600);
	}
	assert_true(metric(fx, "leaseline_coord_usage_ledger_bounded_total{kind=\"lease\"} ") >= 1);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_clamped_units_total ") >=
		    500000 - (10 + 100 * 3600));
	assert_true(
	    log_has(fx, "more than its lease, its contract or the line rate could have passed"));
	/* Fail-open (bypass, bounded by the line rate alone): over the
	 * hour's bound, which --reconcile finds.
	 */
	kcount(&k, 3, 0, 0, 400000);
	ksend(fx, a, &k);
	assert_int_equal(run_cli(fx, "--keys --reconcile", out, sizeof(out)), 1);
	printf("%s", out);
	assert_non_null(strstr(out, "198.18.0.4"));
	assert_null(strstr(out, "198.18.0.1 "));
}

/* Forged figures over the wire (issue 25, D): a holder with a real
 * certificate reports a total that would wrap the sums (2^64 - 5e8), or
 * break them (2^63 - 1), or sends METER batches under a counters identity
 * its HELLO did not give (each new identity counted its keys from 0
 * again: 100 became 400). Refused, counted; the other holders' overuse
 * still shows in --reconcile.
 */
static void test_forged_usage_refused(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7)), *b = agent_new(fx, "gw-2", INC(8));
	struct kstate k = {.ident = 0x100}, other;
	char out[8192];
	int st;

	assert_true(agent_connect(fx, a));
	assert_true(agent_connect(fx, b));
	/* Limit a: 2 x 2,000,000 in an hour whose contract is 90 + 900 x
	 * 3600: over, though each holder's figure is within what the
	 * contract could have passed it (not clamped).
	 */
	a->t[0].admitted += 2000000;
	b->t[0].admitted += 2000000;
	settle(fx);
	assert_int_equal(run_cli(fx, "--reconcile --limit a", out, sizeof(out)), 1);
	for (int forged = 0; forged < 2; forged++) {
		struct agent *f = agent_new(fx, forged ? "gw-4" : "gw-3", INC(9));

		assert_true(agent_connect(fx, f));
		f->t[0].admitted = forged ? INT64_MAX : UINT64_MAX - 500000000ull;
		assert_int_equal(agent_report(fx, f), 0);
		for (int i = 0; i < 100 && f->up; i++) {
			drain(fx, f, NULL);
			poll(NULL, 0, 10);
		}
		assert_false(f->up); /* dropped: a protocol error */
	}
	assert_true(metric(fx, "leaseline_coord_usage_ledger_bounded_total{kind=\"forged\"} ") ==
		    2);
	assert_true(log_has(fx, "report with a total above 2^62"));
	assert_int_equal(ledger_sum(fx, "a", "gw-3").admitted, 0);
	assert_int_equal(ledger_sum(fx, "a", "gw-4").admitted, 0);
	assert_int_equal(run_cli(fx, "--reconcile --limit a", out, sizeof(out)), 1);
	assert_non_null(strstr(out, "late reports"));
	assert_int_equal(run_cli(fx, "--limit a", out, sizeof(out)), 0);

	/* METER: the HELLO said 0x100; a batch under 0x400 is refused. */
	for (int j = 0; j < NK; j++)
		kcount(&k, j, 100, 0, 0);
	ksettle(fx, a, &k);
	other = k;
	other.ident = 0x400;
	a->ident = 0x400; /* what the batch claims; the connection's HELLO said 0x100 */
	meter_send(fx, a, &other, ++k.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_REFUSED);
	assert_true(log_has(fx, "names counters identity 0000000000000400, its hello "
				"0000000000000100: refused"));
	a->ident = 0x100;
	/* A key total above 2^62: refused. */
	other = k;
	other.pkts[0][LL_METER_ADMITTED] = (1ull << 62) + 1;
	meter_send(fx, a, &other, ++k.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_REFUSED);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_bounded_total{kind=\"forged\"} ") ==
		    4);
	/* Each key counted once: 100, not 400. */
	st = kled_equals(fx, "gw-1", &k);
	assert_true(st);
}

/* n reports, spaced past the coordinator's 100 ms between records. */
static void reports_spaced(struct fx *fx, struct agent *a, int n)
{
	for (int i = 0; i < n; i++) {
		usleep(120 * 1000);
		drain(fx, a, NULL);
		assert_int_equal(agent_report(fx, a), 0);
	}
}

/* a connected, its totals recorded once in the quiet period after the
 * start and once after it: from here its lease bounds its reports.
 */
static void lease_bounded(struct fx *fx, struct agent *a)
{
	assert_true(agent_connect(fx, a));
	agent_count(a, 10, 1, 0);
	settle(fx);
	usleep(2 * TTL_MS * 1000); /* the quiet period after the start is over */
	agent_count(a, 10, 1, 0);
	settle(fx);
}

/* Past its first recorded report (and the quiet period after the start),
 * a holder's admitted figure is bounded by its own lease, not the
 * contract: gw-1 claims 2,000,000 more of limit a (contract 900/s, burst
 * 90; 3.2M would fit the contract's hour) and gets at most its lease's
 * burst + rate x (ttl + 60 s), the ledger's clock standing still.
 */
static void test_usage_bounded_by_lease(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	const uint64_t bound = 90 + 900 * ((TTL_MS + 999) / 1000 + ULEDGER_LEASE_SLACK_S);
	uint64_t before, got;

	lease_bounded(fx, a);
	before = ledger_sum(fx, "a", "gw-1").admitted;
	a->t[0].admitted += 2000000;
	reports_spaced(fx, a, 10);
	usleep(200 * 1000);
	got = ledger_sum(fx, "a", "gw-1").admitted - before;
	print_message("2,000,000 claimed past the lease: %llu counted (bound %llu)\n",
		      (unsigned long long)got, (unsigned long long)bound);
	assert_true(got > 0);
	assert_true(got <= bound);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_bounded_total{kind=\"lease\"} ") >= 1);
	assert_true(log_has(fx, "more than its lease, its contract or the line rate"));
}

/* A holder that gives its slot up (its grants dead, eight others take the
 * slots) and comes back 6 s later in another: its first report there is
 * bounded by its contract only up to when its last grant died, and by its
 * new lease (nothing yet) after. Before, the contract bounded the whole
 * gap: 900/s for every second it stayed away, each time.
 */
static void test_usage_bounded_after_slot_take(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	/* The lease's bucket, then the contract for the ttl, a refresh and 2 s
	 * of rounding (the ledger counts whole seconds).
	 */
	const uint64_t bound = 90 + 900 * ((TTL_MS + 999) / 1000 + ULEDGER_LEASE_SLACK_S) +
			       900 * ((TTL_MS + 100 + 999) / 1000 + 2);
	uint64_t before, got, t_start;
	char name[16];

	lease_bounded(fx, a);
	reports_spaced(fx, a, 3); /* its row down to the lease's bucket */
	usleep(120 * 1000);
	t_start = clock_now_ns();
	before = ledger_sum(fx, "a", "gw-1").admitted;
	conn_close(&a->c);
	a->up = false;
	usleep(2 * TTL_MS * 1000); /* every grant of gw-1 dead */
	for (int i = 0; i < 8; i++) {
		struct agent *o;
		char said[48];

		snprintf(name, sizeof(name), "other-%d", i);
		o = agent_new(fx, name, INC(20 + i));
		assert_true(agent_connect(fx, o));
		/* Served before the next dials: one address holds at most 4
		 * connections without a HELLO.
		 */

		snprintf(said, sizeof(said), "holder 'other-%d' connected", i);
		for (int k = 0; k < 50 && !log_has(fx, said); k++)
			usleep(20 * 1000);
	}
	for (int i = 0; i < 50 && !log_has(fx, "holder 'gw-1' gone with no live grant"); i++)
		usleep(20 * 1000);
	if (!log_has(fx, "holder 'gw-1' gone with no live grant")) {
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "tail -25 %s/coord.log", fx->dir);
		(void)!system(cmd);
		fail_msg("gw-1's slot was not reclaimed");
	}
	for (int i = 1; i < fx->n_ag; i++) {
		conn_close(&fx->ag[i].c);
		fx->ag[i].up = false;
	}
	fx->n_ag = 1; /* settle() no longer brings them back */
	sleep(6);
	/* The ledger's clock (frozen at T0 + 600 since the start) moves by
	 * what passed, rounded up.
	 */
	set_now(fx, T0 + 600 + (int64_t)((clock_now_ns() - t_start + NSEC_PER_SEC - 1) / NSEC_PER_SEC));
	assert_true(agent_connect(fx, a)); /* a fresh slot: other-0's */
	a->t[0].admitted += 2000000;
	reports_spaced(fx, a, 10);
	usleep(200 * 1000);
	got = ledger_sum(fx, "a", "gw-1").admitted - before;
	print_message("2,000,000 claimed after 6 s away: %llu counted (bound %llu; the contract "
		      "over the gap would add %u)\n",
		      (unsigned long long)got, (unsigned long long)bound, 900 * 6);
	assert_true(got > 0);
	assert_true(got <= bound);
}

/* The coordinator killed with SIGKILL again and again while batches flow
 * (inside its WAL writes or syncs when caught there); the agent sends what
 * was not acknowledged again. The agent's pins kept over a restart (same
 * identity: a continuation), then lost (a new identity from 0). Ledger =
 * what the datapath counted, exactly.
 */
static void test_keys_kill9_and_restarts(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	struct kstate k = {.ident = 0x1111}, lost = {0};
	int mid = 0;

	assert_true(agent_connect(fx, a));
	for (int round = 0; round < 6; round++) {
		bool hit = false;
		uint64_t end = clock_now_ns() + 1000 * NSEC_PER_MSEC;

		while (!hit && clock_now_ns() < end) {
			for (int j = 0; j < NK; j++)
				kcount(&k, j, 1 + (uint64_t)round, 1, 0);
			if (a->up)
				meter_send(fx, a, &k, ++k.seq, "k");
			for (int t = 0; t < 100 && !hit; t++) {
				int r = any_thread_in(fx->pid, SYS_pwrite64, -1);

				if (r == 0)
					r = any_thread_in(fx->pid, SYS_fdatasync, SYS_fsync);
				if (r < 0)
					break;
				hit = r == 1;
			}
		}
		mid += hit;
		kill(fx->pid, SIGKILL);
		waitpid(fx->pid, NULL, 0);
		fx->pid = -1;
		kcount(&k, 0, 5, 0, 0); /* counted while the coordinator was away */
		if (a->up)
			conn_close(&a->c);
		a->up = false;
		assert_int_equal(coord_start(fx), 0);
		assert_true(agent_connect(fx, a));
	}
	ksettle(fx, a, &k);
	/* agent restart keeping its pins: same identity, seq from 1 again */
	agent_restart(fx, a, true);
	k.seq = 0;
	kcount(&k, 1, 9, 0, 0);
	ksettle(fx, a, &k);
	/* reboot: pins lost, a new identity counting from 0 */
	lost = k;
	agent_restart(fx, a, false);
	memset(&k, 0, sizeof(k));
	k.ident = 0x2222;
	kcount(&k, 2, 4, 0, 0);
	{
		struct kstate want = k;
		int st = -1;

		for (int j = 0; j < NK; j++)
			for (int c = 0; c < LL_METER_CLASSES; c++) {
				want.pkts[j][c] += lost.pkts[j][c];
				want.bytes[j][c] += lost.bytes[j][c];
			}
		for (int i = 0; i < 50 && st != WIRE_METER_RECORDED; i++) {
			meter_send(fx, a, &k, ++k.seq, "k");
			st = meter_ack_of(fx, a, k.seq);
		}
		assert_int_equal(st, WIRE_METER_RECORDED);
		assert_true(kled_equals(fx, "gw-1", &want));
	}
	printf("per-key batches: coordinator killed 6 times, %d inside a ledger write or sync; "
	       "ledger = counted\n",
	       mid);
}

/* ledger-retention on a real coordinator: an identity silent past it is
 * pruned (at the pass a restart starts), and its batch replayed afterwards
 * is refused, never counted from 0 again; an identity that kept reporting
 * keeps its marks and goes on.
 */
static void test_keys_retention(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	struct kstate old = {.ident = 0x5151}, live = {.ident = 0x6262}, snap;
	struct uledger_query q = {
	    .period = ULEDGER_HOUR, .limit = "k", .by_holder = 1, .to = T0 + 600 + 86400};
	struct kled before = {0};
	char path[128];
	double v = -1;

	snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
	assert_true(agent_connect(fx, a));
	for (int j = 0; j < NK; j++) {
		kcount(&old, j, 10, 1, 0);
		kcount(&live, j, 20, 2, 0);
	}
	meter_send(fx, a, &old, ++old.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, old.seq), WIRE_METER_RECORDED);
	snap = old;
	meter_send(fx, a, &live, ++live.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, live.seq), WIRE_METER_RECORDED);
	/* Two days on: the live identity reports again, the old one not. */
	set_now(fx, T0 + 600 + 2 * 86400);
	kcount(&live, 0, 5, 0, 0);
	meter_send(fx, a, &live, ++live.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, live.seq), WIRE_METER_RECORDED);
	/* A restart begins a retention pass. */
	kill(fx->pid, SIGTERM);
	waitpid(fx->pid, NULL, 0);
	fx->pid = -1;
	conn_close(&a->c);
	a->up = false;
	assert_int_equal(coord_start(fx), 0);
	for (int i = 0; i < 200 && v < 1; i++) {
		v = metric(fx, "leaseline_coord_usage_ledger_pruned_total{kind=\"identities\"} ");
		poll(NULL, 0, 20);
	}
	assert_true(v == 1);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_pruned_total{kind=\"usage\"} ") >= 1);
	/* Nothing of the first day is left. */
	assert_int_equal(uledger_query_keys(path, &q, NULL, add_krow, &before), 0);
	for (int j = 0; j < NK; j++)
		assert_int_equal(before.pkts[j][LL_METER_ADMITTED], 0);
	/* The pruned identity replayed: refused (its marks are gone). */
	assert_true(agent_connect(fx, a));
	meter_send(fx, a, &snap, ++old.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, old.seq), WIRE_METER_REFUSED);
	assert_true(metric(fx, "leaseline_coord_usage_ledger_pruned_total{kind=\"refused\"} ") ==
		    1);
	assert_true(log_has(fx, "silent past ledger-retention"));
	/* The live one: its replay adds nothing, its news count. */
	meter_send(fx, a, &live, ++live.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, live.seq), WIRE_METER_RECORDED);
	kcount(&live, 1, 3, 0, 0);
	meter_send(fx, a, &live, ++live.seq, "k");
	assert_int_equal(meter_ack_of(fx, a, live.seq), WIRE_METER_RECORDED);
	{
		struct uledger_query all = {.period = ULEDGER_MONTH, .limit = "k", .by_holder = 1};
		struct kled got = {0};

		assert_int_equal(uledger_query_keys(path, &all, NULL, add_krow, &got), 0);
		/* what is left: the live identity's usage after the first day */
		assert_int_equal(got.pkts[0][LL_METER_ADMITTED], 5);
		assert_int_equal(got.pkts[1][LL_METER_ADMITTED], 3);
		assert_int_equal(got.pkts[2][LL_METER_ADMITTED], 0);
	}
}

/* A full disk: the batch is not written and the ack says send it again;
 * with room again it counts once.
 */
static void test_keys_disk_full(void **state)
{
	struct fx *fx = *state;
	struct agent *a = agent_new(fx, "gw-1", INC(7));
	struct kstate k = {.ident = 0x3333};
	char path[128];
	int st;

	if (!fx->small_disk)
		skip();
	assert_true(agent_connect(fx, a));
	kcount(&k, 0, 10, 0, 0);
	ksettle(fx, a, &k);
	assert_int_equal(fill_disk(fx), 0);
	for (int j = 0; j < NK; j++)
		kcount(&k, j, 5000, 3, 0);
	/* the WAL may still hold room for a page or two: fill what it takes */
	st = WIRE_METER_RECORDED;
	for (int i = 0; i < 20 && st == WIRE_METER_RECORDED; i++) {
		kcount(&k, i % NK, 1, 0, 0);
		meter_send(fx, a, &k, ++k.seq, "k");
		st = meter_ack_of(fx, a, k.seq);
		if (st == WIRE_METER_RECORDED)
			fill_disk(fx);
	}
	assert_int_equal(st, WIRE_METER_RETRY);
	assert_true(
	    metric(fx, "leaseline_coord_usage_ledger_key_batches_total{result=\"retry\"} ") >= 1);
	snprintf(path, sizeof(path), "%s/state/fill", fx->dir);
	assert_int_equal(unlink(path), 0);
	ksettle(fx, a, &k);
	meter_send(fx, a, &k, ++k.seq, "k"); /* and once more: nothing doubles */
	assert_int_equal(meter_ack_of(fx, a, k.seq), WIRE_METER_RECORDED);
	assert_true(kled_equals(fx, "gw-1", &k));
}

/* METER acks that came on a's connection until now (any status). */
static int meter_acks_now(struct fx *fx, struct agent *a)
{
	int n = 0;

	if (!a->up)
		return 0;
	conn_read(&a->c);
	while (conn_next(&a->c, fx->m) > 0)
		n += fx->m->type == WIRE_METER_ACK;
	return n;
}

/* Grants do not wait for the ledger's writes (issue 12). Another process
 * holds the ledger's write lock, so each write of the coordinator waits in
 * SQLite's busy handler (1 s) and then fails. METER batches sent then queue
 * at the ledger's writer thread while the loop goes on: a report of the
 * unmetered limit b, sent after them on another connection, is granted
 * before those batches are answered; its metered limit a gets no grant
 * while its write cannot commit. Released: the batches sent again and the
 * reports are recorded, exactly. Before the writer thread the loop itself
 * waited, a second per batch, and answered them all before the report.
 */
#define BLOCKED_BATCHES 6
static void test_grants_do_not_wait_for_ledger(void **state)
{
	struct fx *fx = *state;
	struct agent *m = agent_new(fx, "gw-1", INC(7)), *g = agent_new(fx, "gw-2", INC(8));
	struct kstate k = {.ident = 0x4444};
	int grants[N_LIM] = {0}, acks;
	char path[128];
	uint64_t end;
	sqlite3 *db;

	assert_true(agent_connect(fx, m));
	assert_true(agent_connect(fx, g));
	/* Past the quiet period: g's reports are granted. */
	end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	while (!grants[1] && clock_now_ns() < end) {
		agent_count(g, 1, 0, 0);
		agent_report(fx, g);
		usleep(110 * 1000);
		drain(fx, g, grants);
	}
	assert_true(grants[1] > 0);
	kcount(&k, 0, 10, 0, 0);
	ksettle(fx, m, &k);

	snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	for (int i = 0; i < BLOCKED_BATCHES; i++) {
		kcount(&k, i % NK, 1, 0, 0);
		assert_int_equal(meter_send(fx, m, &k, ++k.seq, "k"), 0);
	}
	usleep(100 * 1000); /* the coordinator reads them first */
	drain(fx, g, NULL);
	memset(grants, 0, sizeof(grants));
	agent_count(g, 1, 0, 0);
	assert_int_equal(agent_report(fx, g), 0);
	end = clock_now_ns() + 3 * BLOCKED_BATCHES * NSEC_PER_SEC; /* a bound, not a figure */
	while (!grants[1] && g->up && clock_now_ns() < end) {
		drain(fx, g, grants);
		poll(NULL, 0, 5);
	}
	acks = meter_acks_now(fx, m);
	printf("ledger locked: b granted with %d of the %d batches sent before it answered; "
	       "a granted %d times\n",
	       acks, BLOCKED_BATCHES, grants[0]);
	assert_true(grants[1] > 0);
	assert_true(acks < BLOCKED_BATCHES);
	assert_int_equal(grants[0], 0);
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(db);

	ksettle(fx, m, &k);
	assert_true(ledger_reaches(fx, g, "a", counted(g, 0)));
	assert_true(kled_equals(fx, "gw-1", &k));
}

/* METER acks with `status` that came on a's connection until now; others
 * counted in *other.
 */
static int meter_acks_status(struct fx *fx, struct agent *a, int status, int *other)
{
	int n = 0;

	if (!a->up)
		return 0;
	conn_read(&a->c);
	while (conn_next(&a->c, fx->m) > 0)
		if (fx->m->type == WIRE_METER_ACK) {
			if (fx->m->meter_ack.status == status)
				n++;
			else if (other)
				(*other)++;
		}
	return n;
}

/* The writer's queue is bounded (LEASELINE_LEDGER_QUEUE_BYTES: a few
 * batches here): with the ledger's write lock held elsewhere, batches
 * beyond it are answered RETRY at once and counted, none is recorded. A
 * SIGTERM then, jobs queued and one waiting in SQLite: the coordinator
 * exits, no batch acked RECORDED. Released and restarted: the batches sent
 * again are recorded, exactly. One holder filling the queue fills only its
 * share of it: another holder's batch still queues.
 */
static void test_writer_queue_full_and_sigterm(void **state)
{
	struct fx *fx = *state;
	struct agent *m = agent_new(fx, "gw-1", INC(7));
	struct kstate k = {.ident = 0x5555};
	int retry = 0, recorded = 0, other = 0, status;
	char path[128];
	uint64_t end;
	sqlite3 *db;

	kill(fx->pid, SIGTERM);
	waitpid(fx->pid, NULL, 0);
	setenv("LEASELINE_LEDGER_QUEUE_BYTES", "2048", 1); /* about 4 batches of NK keys */
	assert_int_equal(coord_start(fx), 0);
	unsetenv("LEASELINE_LEDGER_QUEUE_BYTES");
	assert_true(agent_connect(fx, m));
	kcount(&k, 0, 10, 0, 0);
	ksettle(fx, m, &k);

	snprintf(path, sizeof(path), "%s/state/ledger.db", fx->dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	for (int i = 0; i < 16; i++) {
		kcount(&k, i % NK, 1, 0, 0);
		assert_int_equal(meter_send(fx, m, &k, ++k.seq, "k"), 0);
	}
	end = clock_now_ns() + WAIT_MS * NSEC_PER_MSEC; /* a bound, not a figure */
	while (!retry && clock_now_ns() < end) {
		retry += meter_acks_status(fx, m, WIRE_METER_RETRY, &other);
		poll(NULL, 0, 5);
	}
	recorded += other;
	assert_true(retry > 0);
	assert_true(metric(fx, "\nleaseline_coord_usage_ledger_queue_full_total ") >= 1);
	/* gw-1 has its share of the queue (a quarter: 8 gateways): gw-2's batch
	 * still finds room, queued behind the lock, not answered retry.
	 */
	assert_true(metric(fx, "\nleaseline_coord_usage_ledger_holder_share_full_total ") >= 1);
	{
		struct agent *o = agent_new(fx, "gw-2", INC(8));
		struct kstate ko = {.ident = 0x6666};
		int o_retry = 0, o_other = 0;

		o->ident = ko.ident; /* its HELLO names the batch's identity */
		assert_true(agent_connect(fx, o));
		/* No grant can come while the ledger is locked (its report
		 * would be recorded first), and this batch is not recorded
		 * either: sent without one.
		 */
		o->k_granted = true;
		kcount(&ko, 0, 10, 0, 0);
		assert_int_equal(meter_send(fx, o, &ko, ++ko.seq, "k"), 0);
		end = clock_now_ns() + 300 * NSEC_PER_MSEC;
		while (clock_now_ns() < end) {
			o_retry += meter_acks_status(fx, o, WIRE_METER_RETRY, &o_other);
			poll(NULL, 0, 5);
		}
		assert_int_equal(o_retry, 0);
		assert_int_equal(o_other, 0); /* nor recorded: the ledger is locked */
		conn_close(&o->c);
		o->up = false;
	}
	{
		double q = metric(fx, "\nleaseline_coord_usage_ledger_queue_bytes ");

		assert_true(q >= 0 && q <= 2048);
	}

	kill(fx->pid, SIGTERM);
	end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	while (waitpid(fx->pid, &status, WNOHANG) != fx->pid && clock_now_ns() < end)
		poll(NULL, 0, 10);
	assert_true(clock_now_ns() < end); /* it exited */
	fx->pid = -1;
	other = 0;
	recorded += meter_acks_status(fx, m, WIRE_METER_RECORDED, &other);
	printf("writer's queue full: %d batches answered retry at once; SIGTERM with batches "
	       "queued: %d acked recorded\n",
	       retry, recorded);
	assert_int_equal(recorded, 0);
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(db);

	assert_int_equal(coord_start(fx), 0);
	conn_close(&m->c);
	m->up = false;
	ksettle(fx, m, &k);
	assert_true(kled_equals(fx, "gw-1", &k));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_metered_end_to_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_forged_usage_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_usage_bounded_by_lease, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_usage_bounded_after_slot_take, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_mid_write, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_meter_turned_on_by_reload, setup_unmetered,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_disk_full, setup_small_disk, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_end_to_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_kill9_and_restarts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_disk_full, setup_small_disk, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_retention, setup_retention, teardown),
	    cmocka_unit_test_setup_teardown(test_grants_do_not_wait_for_ledger, setup_unmetered,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_writer_queue_full_and_sigterm, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
