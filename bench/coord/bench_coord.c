// SPDX-License-Identifier: MIT
/*
 * Coordinator scale: many simulated agents over real TCP on loopback
 * against a real `leaseline coord` pinned to one CPU. Each agent says hello,
 * then keeps one report in flight: the report, and the grants answering it
 * (one per limit), are the messages counted. Prints messages per second on
 * the coordinator's one core, grant latency percentiles (report sent -> last
 * grant received), coordinator memory per (agent, limit) lease, and how long
 * a recomputation of the shares takes. Figures, not asserts.
 *
 * Hot-keys mode (LL_BENCH_HOT=N): src-ip limits with N hot keys each, every
 * key hot on one of the agents (which tells it at demand R, as a denied key
 * is told), so every holder holds per-key grants (the agent's raise, the
 * others' cuts). A demand stands until told again: an agent tells each of
 * its keys once (at most WIRE_MAX_HOT a report, in turns), and the warm-up
 * lasts until all are told; after that each report tells LL_BENCH_CHURN
 * (default 16) keys of a neighbour a demand that moves (R/4, then 0, ...),
 * whose new targets change two holders' entries for each. LL_BENCH_AGENTS (default 8) and
 * LL_BENCH_LIMITS (default 10, at most LL_MAX_LIMITS) set the rest; LL_BENCH_PORT
 * moves the ports (default 17450 and 17451).
 *
 * The default mode takes LL_BENCH_LIMITS too (global limits per agent), and
 * LL_BENCH_AGENTS, when set, runs that one number of agents instead of the
 * series.
 * Meter mode (LL_BENCH_METER=K): one metered src-ip limit; every agent sends
 * K changed keys per period (LL_BENCH_PERIOD s, default 10) as METER
 * batches of 512, paced over the period, for LL_BENCH_PERIODS periods
 * (default 3). Prints the ledger's write rate (key entries/s), how late a
 * batch is acknowledged after it was due (p50, p99, max: the ledger's lag),
 * the coordinator's CPU and RSS, and the ledger's size per row and per day;
 * meanwhile each agent reports an unmetered limit every 100 ms, and the
 * report -> grant latency says whether the ledger's work on the
 * coordinator's loop (upserts and the commit's fsync) delays grants (run
 * with LL_BENCH_METER=512 for the baseline). LL_BENCH_FLOOD=1 makes agent
 * 0 a flood: METER batches of new series as fast as its socket takes
 * them, for the whole run; the figures are then the others'.
 * LL_BENCH_LEDGER=URI writes
 * the ledger to that PostgreSQL database instead of the state directory's
 * SQLite file (an empty database of its own: the rows are counted there).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "lib/monotonic.h"
#include "lib/conn.h"
#include "lib/wire.h"
#include "coord/usage_db.h"

#define N_LIMITS 10 /* the default */
/* Hot mode: the coordinator keeps at most LL_MAX_LIMIT_KEY_GRANTS hot keys a limit; more are
 * refused. */
#define HOTKEYS_BENCH_MAX (2 * LL_MAX_LIMIT_KEY_GRANTS)
#define PORT_BASE	  17450
#define COORD_CPU	  1
#define BENCH_CPU	  0
#define TTL_NS		  2000000000ull
#define CONNECT_WAIT	  20 /* s, for all agents to have their policy */
#define LOAD_SECONDS	  5
#define QUICK_SECONDS	  2

struct agent {
	struct conn c;
	uint64_t seq, sent_ns;
	uint32_t grants; /* of the report in flight */
	bool have_policy;
	uint64_t epoch, applied_seq[LL_MAX_LIMITS];
	uint32_t hot_next; /* hot mode: where its next report's list starts */
	uint32_t hot_told; /* keys told once */
	uint64_t hot_round;
};

struct run {
	uint32_t meter; /* meter mode: keys changed per agent per period (0: off) */
	size_t n;
	int limits, port;
	uint32_t hot; /* hot keys per limit (0: key: none limits) */
	uint32_t churn; /* hot mode: keys told a moved demand per report, once all are told */
	struct agent *a;
	int ep;
	pid_t pid;
	char dir[64];
	uint64_t msgs, reports_done, key_grants;
	uint64_t *lat;
	size_t nlat, caplat;
	struct wire_msg *msg;
};

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static double cpu_seconds(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f)) {
		if (f)
			fclose(f);
		return 0;
	}
	fclose(f);
	p = strrchr(buf, ')');
	/* fields after the command: state(3) ... utime(14) stime(15) */
	if (p &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	fclose(f);
	return 0;
}

/* Room for LL_MAX_LIMITS limit lines of ~80 bytes and the rule. */
#define BENCH_POLICY_MAX (LL_MAX_LIMITS * 96 + 512)

static int start_coord(struct run *r, const char *bin)
{
	static char policy[BENCH_POLICY_MAX];
	const char *ledger = getenv("LL_BENCH_LEDGER");
	char coord[1024], cfg[128];
	size_t off;

	snprintf(r->dir, sizeof(r->dir), "/tmp/ll-bench-coord-XXXXXX");
	if (!mkdtemp(r->dir))
		return -errno;
	off = (size_t)snprintf(policy, sizeof(policy), "version: 1\nlimits:\n");
	if (r->meter)
		off += (size_t)snprintf(policy + off, sizeof(policy) - off,
					"  - {name: m0, key: src-ip, scope: global, rate: 1G, "
					"burst: 1G, meter: true}\n");
	for (int l = 0; l < r->limits; l++)
		off += (size_t)snprintf(policy + off, sizeof(policy) - off,
					"  - {name: t%d, key: %s, scope: global, rate: 1G, "
					"burst: 1G}\n",
					l, r->hot ? "src-ip" : "none");
	off += (size_t)snprintf(policy + off, sizeof(policy) - off,
				"rules:\n  - {name: all, limits: [%s", r->meter ? "m0, t0" : "t0");
	for (int l = 1; l < r->limits && l < 4; l++)
		off += (size_t)snprintf(policy + off, sizeof(policy) - off, ", t%d", l);
	snprintf(policy + off, sizeof(policy) - off, "]}\n");
	snprintf(coord, sizeof(coord),
		 "listen: 127.0.0.1:%d\npolicy: policy.yaml\nstate-dir: state\n"
		 "lease: {ttl: 2s, refresh: 500ms}\nmetrics: 127.0.0.1:%d\ngateways: %zu\n%s%s%s",
		 r->port, r->port + 1, r->n, ledger ? "ledger: " : "", ledger ? ledger : "",
		 ledger ? "\n" : "");
	if (write_file(r->dir, "policy.yaml", policy) || write_file(r->dir, "coord.yaml", coord))
		return -EIO;
	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", r->dir);
	r->pid = fork();
	if (r->pid == 0) {
		char log[128];
		int fd;

		snprintf(log, sizeof(log), "%s/coord.log", r->dir);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		pin(COORD_CPU);
		if (fd >= 0)
			dup2(fd, 2);
		execl(bin, bin, "coord", "-c", cfg, (char *)NULL);
		_exit(127);
	}
	return r->pid > 0 ? 0 : -errno;
}

static void stop_coord(struct run *r)
{
	char cmd[128];

	if (r->pid > 0) {
		kill(r->pid, SIGTERM);
		waitpid(r->pid, NULL, 0);
	}
	if (getenv("LL_BENCH_KEEP"))
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", r->dir);
}

/* Stop the coordinator, keep its directory (the caller reads the ledger). */
static void stop_coord_keep(struct run *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGTERM);
		waitpid(r->pid, NULL, 0);
	}
	r->pid = -1;
}

static int send_hello(struct run *r, size_t i)
{
	struct wire_msg *m = r->msg;

	WIRE_MSG_CLEAR(m, hello);
	m->type = WIRE_HELLO;
	snprintf(m->hello.holder, sizeof(m->hello.holder), "agent-%zu", i);
	m->hello.incarnation = i + 1;
	m->hello.counters_ident = 0x5eed0000ull + i; /* what its METER batches name */
	return conn_send(&r->a[i].c, m);
}

/* Hot mode: key j of every limit is hot on agent j % n, at 10.(j / 65536).x.y. */
static struct ll_key_id hot_key(uint32_t j)
{
	struct ll_key_id k = {.family = 4};

	k.addr[2] = htonl(0xffff);
	k.addr[3] = htonl(0x0a000000u + j);
	return k;
}

/* The agent's hot keys from hot_next on, as many as a report carries. */
static void list_hot(struct run *r, size_t i, struct wire_report *rep)
{
	struct agent *a = &r->a[i];
	/* Its keys: (limit l, key j) for j = i, i + n, ...: `mine` per limit. */
	uint32_t mine = r->hot > i ? (uint32_t)((r->hot - 1 - i) / r->n + 1) : 0;
	uint32_t total = mine * (uint32_t)r->limits;

	bool warm = a->hot_told >= total;
	uint32_t want = warm ? r->churn : WIRE_MAX_HOT;

	rep->n_hot = 0;
	if (warm && a->hot_next == 0)
		a->hot_round++;
	for (uint32_t k = 0; k < total && rep->n_hot < want; k++) {
		uint32_t c = (a->hot_next + k) % total;
		struct wire_hot *h = &rep->hot[rep->n_hot++];

		h->entry = (uint8_t)(c / mine);
		h->key = hot_key((uint32_t)i + (c % mine) * (uint32_t)r->n);
		/* Denied: as much as it can get. */
		h->demand = 1000000000ull;
		if (warm) {
			/* Demand that moves: a quarter of a neighbour's key, then
			 * none, so two holders' entries for it change each time.
			 */
			size_t j = (i + 1) % r->n;
			uint32_t theirs = r->hot > j ? (uint32_t)((r->hot - 1 - j) / r->n + 1) : 0;

			if (!theirs) { /* one agent: no neighbour */
				rep->n_hot--;
				break;
			}
			h->key = hot_key((uint32_t)j + (c % theirs) * (uint32_t)r->n);
			h->demand = a->hot_round & 1 ? 250000000ull : 0;
		}
	}
	if (total)
		a->hot_next = (a->hot_next + rep->n_hot) % total;
	if (!warm)
		a->hot_told += rep->n_hot;
}

static int send_report(struct run *r, size_t i)
{
	struct agent *a = &r->a[i];
	struct wire_msg *m = r->msg;

	WIRE_MSG_CLEAR(m, report.n);
	m->type = WIRE_REPORT;
	snprintf(m->report.holder, sizeof(m->report.holder), "agent-%zu", i);
	m->report.incarnation = i + 1;
	m->report.max_epoch_seen = a->epoch;
	m->report.seq = ++a->seq;
	m->report.n = (uint32_t)r->limits;
	for (int l = 0; l < r->limits; l++) {
		struct wire_report_entry *e = &m->report.e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "t%d", l);
		e->applied_epoch = a->epoch;
		e->applied_seq = a->applied_seq[l];
		/* A demand that moves, so shares are recomputed under load. */
		e->demand = 1000000 + (i * 7919 + a->seq * 104729) % 1000000;
	}
	m->report.n_hot = 0;
	if (r->hot)
		list_hot(r, i, &m->report);
	a->sent_ns = clock_now_ns();
	a->grants = 0;
	r->msgs++;
	return conn_send(&a->c, m);
}

static void note_latency(struct run *r, uint64_t ns)
{
	if (r->nlat == r->caplat) {
		size_t cap = r->caplat ? r->caplat * 2 : 65536;
		uint64_t *p = realloc(r->lat, cap * sizeof(*p));

		if (!p)
			return;
		r->lat = p;
		r->caplat = cap;
	}
	r->lat[r->nlat++] = ns;
}

/* Meter mode: each agent's batches (seq -> when due, when sent). */
#define METER_RING 4096
struct meter_agent {
	uint64_t next; /* batches sent so far (the next batch's index) */
	uint64_t due_ns[METER_RING];
	uint64_t acked, retry;
};
static struct meter_agent *g_meter;
static uint64_t g_meter_t0, g_meter_period_ns, g_meter_frames;
static uint64_t *g_mlat;
static size_t g_nmlat, g_capmlat;
static bool g_flood; /* LL_BENCH_FLOOD: agent 0 sends new series without end */

/* Read what arrived for agent i; answer a completed report with the next. */
static int agent_input(struct run *r, size_t i, bool load)
{
	struct agent *a = &r->a[i];
	int err = conn_read(&a->c), k;

	while ((k = conn_next(&a->c, r->msg)) > 0) {
		struct wire_msg *m = r->msg;

		if (m->type == WIRE_METER_ACK && g_meter) {
			struct meter_agent *ma = &g_meter[i];
			uint64_t due = ma->due_ns[m->meter_ack.seq % METER_RING];

			if (m->meter_ack.status == WIRE_METER_RECORDED) {
				ma->acked++;
				if (g_nmlat == g_capmlat) {
					size_t cap = g_capmlat ? 2 * g_capmlat : 65536;
					uint64_t *p = realloc(g_mlat, cap * sizeof(*p));

					if (p) {
						g_mlat = p;
						g_capmlat = cap;
					}
				}
				if (g_nmlat < g_capmlat && !(g_flood && i == 0))
					g_mlat[g_nmlat++] = clock_now_ns() - due;
			} else {
				ma->retry++;
			}
		} else if (m->type == WIRE_POLICY) {
			a->have_policy = true;
			a->epoch = m->policy.epoch;
		} else if (m->type == WIRE_GRANT) {
			int l = atoi(m->grant.limit + 1);

			if (getenv("LL_BENCH_DEBUG"))
				fprintf(stderr,
					"agent %zu grant %s seq %llu for report %llu (at %llu)\n",
					i, m->grant.limit, (unsigned long long)m->grant.seq,
					(unsigned long long)m->grant.report_seq,
					(unsigned long long)a->seq);
			r->msgs++;
			if (l >= 0 && l < r->limits)
				a->applied_seq[l] = m->grant.seq;
			r->key_grants += m->grant.n_keys;
			if (m->grant.report_seq == a->seq && ++a->grants == (uint32_t)r->limits) {
				note_latency(r, clock_now_ns() - a->sent_ns);
				r->reports_done++;
				if (load && send_report(r, i))
					return -EIO;
			}
		}
	}
	return k < 0 ? k : err;
}

static int pump(struct run *r, int timeout_ms, bool load)
{
	struct epoll_event ev[512];
	int n = epoll_wait(r->ep, ev, 512, timeout_ms);

	for (int k = 0; k < n; k++) {
		size_t i = ev[k].data.u64;

		if (ev[k].events & EPOLLOUT)
			conn_flush(&r->a[i].c);
		if (ev[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
			int err = agent_input(r, i, load);

			if (err && err != -EAGAIN) {
				fprintf(stderr, "agent %zu: %s\n", i, strerror(-err));
				return err;
			}
		}
	}
	return 0;
}

static int connect_all(struct run *r)
{
	struct sockaddr_storage sa;
	char addr[32];
	uint64_t deadline;
	size_t ready = 0;
	socklen_t len;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", r->port);
	if (net_addr(addr, &sa, &len))
		return -EINVAL;
	for (size_t i = 0; i < r->n; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
		int fd = -1, one = 1;

		/* Blocking connect (the coordinator may still be starting: retry),
		 * then non-blocking I/O like an agent's.
		 */
		for (int t = 0; t < 200 && fd < 0; t++) {
			/* Each agent from its own loopback address, as each gateway
			 * has its own: the coordinator caps connections without a
			 * HELLO per address.
			 */
			struct sockaddr_in src = {.sin_family = AF_INET,
						  .sin_addr.s_addr =
						      htonl(0x7f010000u | (uint32_t)(i & 0xffff))};

			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd >= 0 && bind(fd, (struct sockaddr *)&src, sizeof(src))) {
				close(fd);
				return -errno;
			}
			if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, len)) {
				close(fd);
				fd = -1;
				usleep(10000);
			}
		}
		if (fd < 0)
			return -ECONNREFUSED;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		conn_init(&r->a[i].c, fd);
		epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev);
		if (send_hello(r, i))
			return -EIO;
	}
	deadline = clock_now_ns() + CONNECT_WAIT * 1000000000ull;
	while (clock_now_ns() < deadline) {
		if (pump(r, 50, false))
			return -EIO;
		/* Hellos queued while a connect was still in progress. */
		for (size_t i = 0; i < r->n; i++)
			if (r->a[i].c.out_len)
				conn_flush(&r->a[i].c);
		ready = 0;
		for (size_t i = 0; i < r->n; i++)
			ready += r->a[i].have_policy;
		if (ready == r->n)
			return 0;
	}
	fprintf(stderr, "only %zu of %zu agents got the policy\n", ready, r->n);
	return -ETIMEDOUT;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pct(const struct run *r, double p)
{
	size_t k = (size_t)(p * (double)(r->nlat - 1));

	return r->nlat ? (double)r->lat[k] / 1e6 : 0;
}

/* Over the limits, the largest (or the sum) of a per-limit family, from
 * /metrics.
 */
static double scrape(const struct run *r, const char *family, bool sum)
{
	static char buf[1 << 20];
	const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
	struct sockaddr_storage sa;
	char addr[32], fmt[128], *line;
	double acc = 0, v;
	socklen_t len;
	size_t got = 0;
	ssize_t n;
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", r->port + 1);
	if (net_addr(addr, &sa, &len))
		return -1;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) ||
	    send(fd, req, strlen(req), 0) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (got < sizeof(buf) - 1 && (n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
		got += (size_t)n;
	close(fd);
	buf[got] = '\0';
	snprintf(fmt, sizeof(fmt), "%s{limit=\"%%*[^\"]\"} %%lf", family);
	for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if (sscanf(line, fmt, &v) == 1)
			acc = sum ? acc + v : v > acc ? v : acc;
	return acc;
}

static int env_int(const char *name, int def, int lo, int hi);

static int bench_one(const char *bin, size_t n, int limits, uint32_t hot, int port, int seconds)
{
	struct run r = {.n = n,
			.ep = -1,
			.limits = limits,
			.hot = hot,
			.port = port,
			.churn = (uint32_t)env_int("LL_BENCH_CHURN", 16, 0, WIRE_MAX_HOT)};
	double cpu0, cpu1, elapsed;
	long rss0, rss1;
	uint64_t t0, msgs0, kg0;
	int err;

	r.a = calloc(n, sizeof(*r.a));
	r.msg = malloc(sizeof(*r.msg));
	r.ep = epoll_create1(0);
	if (!r.a || !r.msg || r.ep < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		r.a[i].c.fd = -1;
	err = start_coord(&r, bin);
	if (err)
		goto out;
	usleep(200000);
	rss0 = rss_kib(r.pid);
	err = connect_all(&r);
	if (err)
		goto out;
	/* The coordinator grants nothing during its quiet period (ttl(1+rho)+delta). */
	usleep((useconds_t)(TTL_NS / 1000 + 100000));
	for (size_t i = 0; i < n; i++)
		if (send_report(&r, i)) {
			err = -EIO;
			goto out;
		}
	/* Warm up one second (hot mode: until every agent told all its keys,
	 * then one second), then measure.
	 */
	for (uint64_t end = clock_now_ns() + 1000000000ull, cap = end + 60000000000ull;
	     clock_now_ns() < end;) {
		if ((err = pump(&r, 10, true)))
			goto out;
		for (size_t i = 0; hot && i < n && clock_now_ns() < cap; i++) {
			uint32_t mine = hot > i ? (uint32_t)((hot - 1 - i) / n + 1) : 0;

			if (r.a[i].hot_told < mine * (uint32_t)limits) {
				end = clock_now_ns() + 1000000000ull;
				break;
			}
		}
	}
	r.nlat = 0;
	msgs0 = r.msgs;
	kg0 = r.key_grants;
	cpu0 = cpu_seconds(r.pid);
	t0 = clock_now_ns();
	for (uint64_t end = t0 + (uint64_t)seconds * 1000000000ull; clock_now_ns() < end;)
		if ((err = pump(&r, 10, true)))
			goto out;
	elapsed = (double)(clock_now_ns() - t0) / 1e9;
	cpu1 = cpu_seconds(r.pid);
	rss1 = rss_kib(r.pid);
	qsort(r.lat, r.nlat, sizeof(*r.lat), cmp_u64);
	if (hot) {
		double keys = scrape(&r, "leaseline_coord_hot_keys", true);

		printf("  %6zu %6d %8u %9.0f %7.0f  %9.0f  %5.0f%%  %8.2f %8.2f  %8.1f  %8.0f  "
		       "%10.0f\n",
		       n, limits, hot, keys,
		       scrape(&r, "leaseline_coord_hot_keys_refused_total", true),
		       (double)(r.msgs - msgs0) / elapsed, 100.0 * (cpu1 - cpu0) / elapsed,
		       pct(&r, 0.5), pct(&r, 0.99), (double)rss1 / 1024.0,
		       keys > 0 && rss1 > rss0 ? (double)(rss1 - rss0) * 1024.0 / keys : 0.0,
		       (double)(r.key_grants - kg0) / elapsed);
	} else {
		printf("  %6zu  %10.0f  %5.0f%%  %8.2f %8.2f %8.2f  %9ld  %8.0f  %9.3f\n", n,
		       (double)(r.msgs - msgs0) / elapsed, 100.0 * (cpu1 - cpu0) / elapsed,
		       pct(&r, 0.5), pct(&r, 0.9), pct(&r, 0.99), rss1,
		       rss1 > rss0 ? (double)(rss1 - rss0) * 1024.0 / (double)(n * (size_t)limits)
				   : 0.0,
		       scrape(&r, "leaseline_coord_recompute_seconds", false) * 1e3);
	}
	fflush(stdout);
out:
	for (size_t i = 0; r.a && i < n; i++)
		conn_close(&r.a[i].c);
	stop_coord(&r);
	if (r.ep >= 0)
		close(r.ep);
	free(r.a);
	free(r.lat);
	free(r.msg);
	return err;
}

static int env_int(const char *name, int def, int lo, int hi)
{
	const char *v = getenv(name);
	int x = v ? atoi(v) : def;

	return x < lo ? lo : x > hi ? hi : x;
}

/* Batch b of agent i (period b / frames): 512 keys, totals rising each period. */
static int send_meter(struct run *r, size_t i, uint64_t b)
{
	struct wire_msg *m = r->msg;
	struct wire_meter *mt = &m->meter;
	uint64_t period = b / g_meter_frames, first = (b % g_meter_frames) * WIRE_MAX_METER;

	WIRE_MSG_CLEAR(m, meter.n);
	m->type = WIRE_METER;
	snprintf(mt->holder, sizeof(mt->holder), "agent-%zu", i);
	mt->incarnation = i + 1;
	mt->ident = 0x5eed0000ull + i;
	mt->seq = b + 1;
	snprintf(mt->limit, sizeof(mt->limit), "m0");
	mt->limit_uid = 1;
	for (uint64_t k = first; k < first + WIRE_MAX_METER && k < r->meter; k++) {
		struct wire_meter_entry *e = &mt->e[mt->n++];

		memset(e, 0, sizeof(*e));
		e->key.family = 4;
		e->key.addr[2] = htonl(0xffff);
		e->key.addr[3] = htonl(0xc6120000u | (uint32_t)k);
		e->pkts[0] = (period + 1) * (10 + k % 7);
		e->bytes[0] = e->pkts[0] * 700;
		e->pkts[1] = period * (k % 3);
		e->bytes[1] = e->pkts[1] * 700;
		if (g_flood && i == 0)
			e->born = b + 1; /* a new series every batch */
	}
	g_meter[i].due_ns[mt->seq % METER_RING] =
	    g_meter_t0 + b * g_meter_period_ns / g_meter_frames;
	return conn_send(&r->a[i].c, m);
}

static long file_size(const char *dir, const char *name)
{
	char path[160];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) ? 0 : (long)st.st_size;
}

/* Per-key usage: K changed keys per agent per period into the ledger. */
static int bench_meter(const char *bin, uint32_t keys, int port)
{
	size_t n = (size_t)env_int("LL_BENCH_AGENTS", 8, 1, 64);
	int period = env_int("LL_BENCH_PERIOD", 10, 1, 600),
	    periods = env_int("LL_BENCH_PERIODS", 3, 1, 100);
	struct run r = {.n = n, .ep = -1, .limits = 1, .port = port, .meter = keys};
	uint64_t total_batches, acked = 0, retry = 0, t_end, max_lag = 0;
	double cpu0, cpu1, elapsed;
	long rss1, db, wal;
	int err;

	g_flood = getenv("LL_BENCH_FLOOD") && atoi(getenv("LL_BENCH_FLOOD"));
	g_meter_frames = (keys + WIRE_MAX_METER - 1) / WIRE_MAX_METER;
	g_meter_period_ns = (uint64_t)period * 1000000000ull;
	total_batches = g_meter_frames * (uint64_t)periods;
	g_meter = calloc(n, sizeof(*g_meter));
	r.a = calloc(n, sizeof(*r.a));
	r.msg = malloc(sizeof(*r.msg));
	r.ep = epoll_create1(0);
	if (!g_meter || !r.a || !r.msg || r.ep < 0)
		return 1;
	printf("Per-key usage ledger: %zu gateways x %u changed keys per %d s period (%.0f key\n"
	       "entries/s), METER batches of %d paced over the period, %d periods; coordinator on\n"
	       "CPU %d (fsync on every commit), load generator on CPU %d.\n\n",
	       n, keys, period, (double)n * keys / period, WIRE_MAX_METER, periods, COORD_CPU,
	       BENCH_CPU);
	for (size_t i = 0; i < n; i++)
		r.a[i].c.fd = -1;
	err = start_coord(&r, bin);
	if (!err)
		err = connect_all(&r);
	if (err)
		goto out;
	/* Grants under the ledger's load: each agent also reports the
	 * unmetered limit t0 every 100 ms (one report in flight), and the
	 * report -> grant latency is measured as in the default mode. After
	 * the coordinator's quiet period, when it grants at all.
	 */
	usleep((useconds_t)(TTL_NS / 1000 + 100000));
	cpu0 = cpu_seconds(r.pid);
	g_meter_t0 = clock_now_ns();
	t_end = g_meter_t0 + (uint64_t)periods * g_meter_period_ns;
	while (clock_now_ns() < t_end + 30 * 1000000000ull) {
		uint64_t now = clock_now_ns(),
			 due = now < t_end ? (now - g_meter_t0) * g_meter_frames / g_meter_period_ns
					   : total_batches;

		acked = retry = 0;
		for (size_t i = 0; i < n; i++) {
			struct meter_agent *ma = &g_meter[i];
			bool flood = g_flood && i == 0;

			while (flood && now < t_end &&
			       r.a[i].c.out_len + 2 * (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD) <= CONN_MAX_OUT) {
				if (send_meter(&r, i, ma->next)) {
					err = -EIO;
					goto out;
				}
				ma->next++;
			}
			while (!flood && ma->next < due && ma->next < total_batches &&
			       r.a[i].c.out_len + 2 * (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD) <=
				   CONN_MAX_OUT) {
				if (send_meter(&r, i, ma->next)) {
					err = -EIO;
					goto out;
				}
				ma->next++;
			}
			if (now < t_end && (!r.a[i].seq || r.a[i].grants == (uint32_t)r.limits) &&
			    now - r.a[i].sent_ns >= 100000000ull && send_report(&r, i)) {
				err = -EIO;
				goto out;
			}
			if (r.a[i].c.out_len)
				conn_flush(&r.a[i].c);
			if (flood)
				continue;
			acked += ma->acked;
			retry += ma->retry;
		}
		if (now >= t_end && acked + retry >= total_batches * (n - (g_flood ? 1 : 0)))
			break;
		if ((err = pump(&r, 5, false)))
			goto out;
	}
	elapsed = (double)(clock_now_ns() - g_meter_t0) / 1e9;
	cpu1 = cpu_seconds(r.pid);
	rss1 = rss_kib(r.pid);
	qsort(g_mlat, g_nmlat, sizeof(*g_mlat), cmp_u64);
	for (size_t k = 0; k < g_nmlat; k++)
		max_lag = g_mlat[k] > max_lag ? g_mlat[k] : max_lag;
	stop_coord_keep(&r);
	{
		char dbp[160], cmd[400];
		long rows = 0;
		FILE *p;

		if (getenv("LL_BENCH_LEDGER")) {
			struct udb *u = NULL;
			struct udb_stmt *q = NULL;
			char e[256];

			db = wal = 0;
			if (!udb_open(&u, getenv("LL_BENCH_LEDGER"), true, e, sizeof(e)) &&
			    !udb_prepare(u,
					 "SELECT pg_database_size(current_database()), (SELECT "
					 "COUNT(*) FROM key_usage) + (SELECT COUNT(*) FROM key_marks)",
					 &q) &&
			    udb_step(q) == UDB_ROW) {
				db = (long)udb_col_i64(q, 0);
				rows = (long)udb_col_i64(q, 1);
			}
			udb_finalize(q);
			udb_close(u);
		} else {
			snprintf(dbp, sizeof(dbp), "%s/state/ledger.db", r.dir);
			snprintf(cmd, sizeof(cmd),
				 "sqlite3 '%s' 'PRAGMA wal_checkpoint(TRUNCATE); SELECT (SELECT "
				 "COUNT(*) FROM key_usage) + (SELECT COUNT(*) FROM key_marks);' "
				 "2>/dev/null | tail -1",
				 dbp);
			p = popen(cmd, "r");
			if (p && fscanf(p, "%ld", &rows) != 1)
				rows = 0;
			if (p)
				pclose(p);
			db = file_size(r.dir, "state/ledger.db");
			wal = file_size(r.dir, "state/ledger.db-wal");
		}
		size_t paced = n - (g_flood ? 1 : 0);

		printf("  batches %llu recorded, %llu to send again, of %llu%s; %.0f key "
		       "entries/s written over %.1f s\n",
		       (unsigned long long)acked, (unsigned long long)retry,
		       (unsigned long long)(total_batches * paced),
		       g_flood ? " (the paced agents)" : "",
		       (double)acked / (double)(total_batches * paced) * (double)keys *
			   (double)paced * periods / elapsed,
		       elapsed);
		if (g_flood)
			printf("  the flood (agent 0, new series every batch): %llu batches sent, "
			       "%llu recorded, %llu answered retry\n",
			       (unsigned long long)g_meter[0].next,
			       (unsigned long long)g_meter[0].acked,
			       (unsigned long long)g_meter[0].retry);
		printf("  lag (batch due -> recorded): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		       g_nmlat ? g_mlat[g_nmlat / 2] / 1e6 : 0.0,
		       g_nmlat ? g_mlat[(g_nmlat - 1) * 99 / 100] / 1e6 : 0.0, max_lag / 1e6);
		qsort(r.lat, r.nlat, sizeof(*r.lat), cmp_u64);
		printf("  grants meanwhile (t0, a report per agent every 100 ms): %zu, report -> "
		       "grant p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
		       r.nlat, pct(&r, 0.5), pct(&r, 0.9), pct(&r, 0.99),
		       r.nlat ? (double)r.lat[r.nlat - 1] / 1e6 : 0.0);
		printf("  coordinator: %.0f%% of a core, RSS %.1f MiB\n",
		       100.0 * (cpu1 - cpu0) / elapsed, rss1 / 1024.0);
		printf(
		    "  ledger: %ld bytes (%ld WAL) for %ld rows (usage + marks): %.0f bytes a row; "
		    "a day of hourly rows for these keys: %.2f GiB\n",
		    db, wal, rows, rows ? (double)db / rows : 0.0,
		    rows ? 24.0 * (double)n * keys * ((double)db / rows) / (1 << 30) : 0.0);
		if (!getenv("LL_BENCH_KEEP")) {
			snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r.dir);
			if (system(cmd))
				fprintf(stderr, "cannot remove %s\n", r.dir);
		}
	}
	printf("\nTarget: 8 gateways x 100k changed keys per 10 s on one core, lag <= 10 s.\n");
out:
	for (size_t i = 0; r.a && i < n; i++)
		conn_close(&r.a[i].c);
	if (err)
		stop_coord(&r);
	if (r.ep >= 0)
		close(r.ep);
	free(r.a);
	free(r.lat);
	free(r.msg);
	free(g_meter);
	return err ? 1 : 0;
}

/* Per-key grants: N hot keys per limit over a few agents. */
static int bench_hot(const char *bin, uint32_t hot, int port, bool q)
{
	size_t agents = (size_t)env_int("LL_BENCH_AGENTS", 8, 1, 1000);
	int limits = env_int("LL_BENCH_LIMITS", N_LIMITS, 1, LL_MAX_LIMITS);
	int secs = q ? QUICK_SECONDS : LOAD_SECONDS;

	printf("Per-key grants: %zu agents, %d src-ip global limits with %u hot keys each, every\n"
	       "key hot on one agent (the others' grants cut it); an agent tells each key once (at\n"
	       "most %d a report), then %u neighbour's keys a report a moving demand. Coordinator on CPU\n"
	       "%d, load generator on CPU %d; %d s measured after all keys were told plus 1 s.\n\n",
	       agents, limits, hot, WIRE_MAX_HOT,
	       (unsigned)env_int("LL_BENCH_CHURN", 16, 0, WIRE_MAX_HOT), COORD_CPU, BENCH_CPU,
	       secs);
	printf("  agents limits hot/limit  hot keys refused     msgs/s  coord  latency ms p50   p99"
	       "   RSS MiB  B/hot key  key grants/s\n");
	if (bench_one(bin, agents, limits, hot, port, secs)) {
		printf("  %6zu %6d %8u  failed\n", agents, limits, hot);
		return 1;
	}
	printf(
	    "\nTarget: 100k hot keys x 8 gateways in <= 1 GiB, >= 50000 messages/s on one core.\n");
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t full[] = {100, 1000, 10000}, quick[] = {100, 1000};
	bool q = getenv("LL_BENCH_QUICK") != NULL;
	const size_t *sizes = q ? quick : full;
	size_t nsizes = q ? 2 : 3;
	const char *bin = argc > 1 ? argv[1] : "build/leaseline";
	struct rlimit rl = {.rlim_cur = 65536, .rlim_max = 65536};
	int port = env_int("LL_BENCH_PORT", PORT_BASE, 1024, 65534);
	int rc = 0;

	if (access(bin, X_OK)) {
		fprintf(stderr, "bench_coord: no coordinator binary at '%s'\n", bin);
		return 1;
	}
	setrlimit(RLIMIT_NOFILE, &rl);
	signal(SIGPIPE, SIG_IGN);
	pin(BENCH_CPU);
	if (getenv("LL_BENCH_METER"))
		return bench_meter(bin, (uint32_t)env_int("LL_BENCH_METER", 100000, 1, 131072),
				   port);
	if (getenv("LL_BENCH_HOT"))
		return bench_hot(bin, (uint32_t)env_int("LL_BENCH_HOT", 0, 1, HOTKEYS_BENCH_MAX),
				 port, q);
	int limits = env_int("LL_BENCH_LIMITS", N_LIMITS, 1, LL_MAX_LIMITS);
	static size_t one[1];

	if (getenv("LL_BENCH_AGENTS")) {
		one[0] = (size_t)env_int("LL_BENCH_AGENTS", 100, 1, 10000);
		sizes = one;
		nsizes = 1;
	}
	printf("Coordinator scale: %d global limits per agent, every agent keeps one report in\n"
	       "flight; a message is a report or a grant. Coordinator on CPU %d, load generator\n"
	       "on CPU %d, TCP over loopback; %d s measured after 1 s of warm-up.\n\n",
	       limits, COORD_CPU, BENCH_CPU, q ? QUICK_SECONDS : LOAD_SECONDS);
	printf("  agents   msgs/s     coord  grant latency ms (p50 p90 p99)  RSS KiB  B/lease  "
	       "recompute ms\n");
	for (size_t k = 0; k < nsizes; k++)
		if (bench_one(bin, sizes[k], limits, 0, port, q ? QUICK_SECONDS : LOAD_SECONDS)) {
			printf("  %6zu  failed\n", sizes[k]);
			rc = 1;
		}
	printf(
	    "\nTargets: >= 50000 messages/s on one core; 10k agents x 10 limits in <= 512 MiB.\n");
	return rc;
}
