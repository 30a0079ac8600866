/* SPDX-License-Identifier: MIT */
/*
 * Two coordinator replicas (coord-a, coord-b) on a real etcd (three
 * members on loopback, tests/etcd_cluster.h) for the replicas' tests:
 * their files under a prefix of each test's own, sharing a grant key and,
 * if asked, a usage ledger in a real PostgreSQL (tests/pg_server.h, one
 * server for the binary, a database per test). Started once per binary
 * (replica_group_setup); each test spawns, kills and stops the replicas.
 */
#ifndef LEASELINE_TESTS_INTEG_REPLICA_FX_H
#define LEASELINE_TESTS_INTEG_REPLICA_FX_H

#include <stdbool.h>

#include "integ/coord_fx.h"
#include "etcd_cluster.h"
#include "pg_server.h"

#include "lib/conn.h"
#include "lib/monotonic.h"
#include "lib/wire.h"

#define TTL_MS	 3000 /* the holders' lease: outlives a failover (etcd ttl 5 s) */
#define ETCD_TTL "5s"
#define WAIT_MS	 3000
#define LEAD_MS	 20000 /* a follower leads within etcd's ttl + margin */

struct replica {
	pid_t pid;
	int port, mport; /* agents', metrics' */
	char dir[64];
	char node[16];
};

struct fx {
	struct etcd_cluster etcd;
	struct pg_server pg; /* the shared usage ledger's server, if started */
	struct replica r[2];
	struct wire_msg *m;
	char prefix[48];
	char ledger[256]; /* this test's database, "" if none */
	int run;
};

static struct fx *gfx;

static inline int replica_group_setup(void **state, bool with_pg)
{
	gfx = calloc(1, sizeof(*gfx));
	if (!gfx || access(bin(), X_OK))
		return -1;
	gfx->m = malloc(sizeof(*gfx->m));
	if (!gfx->m || etcd_cluster_start(&gfx->etcd, 3))
		return -1;
	if (with_pg && pg_server_start(&gfx->pg))
		return -1;
	*state = gfx;
	return 0;
}

static inline int replica_group_teardown(void **state)
{
	(void)state;
	pg_server_stop(&gfx->pg);
	etcd_cluster_stop(&gfx->etcd);
	free(gfx->m);
	free(gfx);
	return 0;
}

static inline void replica_spawn(struct fx *fx, struct replica *r)
{
	char cfg[128], log[128];
	int st;

	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", r->dir);
	snprintf(log, sizeof(log), "%s/coord.log", r->dir);
	if (truncate(log, 0) && errno != ENOENT)
		fail_msg("cannot empty %s", log);
	r->pid = fork();
	if (r->pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		dup2(out, 2);
		execl(bin(), bin(), "coord", "-c", cfg, (char *)NULL);
		_exit(127);
	}
	assert_true(r->pid > 0);
	assert_int_equal(coord_wait_ready(r->dir, &r->pid, &st, NULL), 0);
	(void)fx;
}

/* Both replicas' files, under a prefix of this test's own: policy, and
 * with_ledger, a database of the test's own as both replicas' ledger:.
 */
static inline int replica_setup(void **state, const char *policy, bool with_ledger)
{
	struct fx *fx = gfx;
	static const char key[33] = "0123456789abcdef0123456789abcdef";
	char coord[1536], path[96], ledger[300] = "";

	snprintf(fx->prefix, sizeof(fx->prefix), "/leaseline/test-%d-%d", (int)getpid(), ++fx->run);
	fx->ledger[0] = '\0';
	if (with_ledger) {
		char name[16];

		snprintf(name, sizeof(name), "ledger%d", fx->run);
		if (pg_server_create_db(&fx->pg, name, fx->ledger, sizeof(fx->ledger)))
			return -1;
		snprintf(ledger, sizeof(ledger), "ledger: %s\n", fx->ledger);
	}
	for (int i = 0; i < 2; i++) {
		struct replica *r = &fx->r[i];
		FILE *f;

		snprintf(r->dir, sizeof(r->dir), "/tmp/ll-replica-XXXXXX");
		if (!mkdtemp(r->dir))
			return -1;
		snprintf(r->node, sizeof(r->node), "coord-%c", 'a' + i);
		r->port = test_free_port();
		r->mport = test_free_port();
		write_file(r->dir, "policy.yaml", policy);
		snprintf(path, sizeof(path), "%s/grant.key", r->dir);
		f = fopen(path, "w");
		if (!f || fwrite(key, 1, 32, f) != 32)
			return -1;
		fclose(f);
		snprintf(coord, sizeof(coord),
			 "listen: 127.0.0.1:%d\npolicy: policy.yaml\nstate-dir: state\n"
			 "grant-key: grant.key\n"
			 "lease: {ttl: %dms, refresh: 200ms}\ngateways: 4\nmetrics: 127.0.0.1:%d\n"
			 "%sreplicas:\n  etcd: [%s, %s, %s]\n  prefix: %s\n  node: %s\n"
			 "  advertise: 127.0.0.1:%d\n  ttl: %s\n",
			 r->port, TTL_MS, r->mport, ledger, fx->etcd.url[0], fx->etcd.url[1],
			 fx->etcd.url[2], fx->prefix, r->node, r->port, ETCD_TTL);
		write_file(r->dir, "coord.yaml", coord);
	}
	*state = fx;
	return 0;
}

static inline int replica_teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[128];

	for (int i = 0; i < fx->etcd.n; i++)
		etcd_member_signal(&fx->etcd, i, SIGCONT); /* a failed test may leave one stopped */
	for (int i = 0; i < 2; i++) {
		struct replica *r = &fx->r[i];

		if (r->pid > 0) {
			kill(r->pid, SIGCONT);
			kill(r->pid, SIGKILL);
			waitpid(r->pid, NULL, 0);
			r->pid = 0;
		}
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
		if (system(cmd))
			return -1;
	}
	return 0;
}

/* Wait (bounded) until r's log has a line containing s. */
static inline bool log_within(const struct replica *r, const char *s, int wait_ms)
{
	uint64_t end = clock_now_ns() + (uint64_t)wait_ms * NSEC_PER_MSEC;

	while (clock_now_ns() < end) {
		if (coord_log_has(r->dir, s))
			return true;
		usleep(20 * 1000);
	}
	return false;
}

static inline void dial(const struct replica *r, struct conn *c)
{
	coord_dial(r->port, c);
}

static inline int recv_msg(struct conn *c, struct wire_msg *m, int wait_ms)
{
	return coord_recv(c, m, wait_ms);
}

static inline void send_hello(struct fx *fx, struct conn *c, const char *holder, uint64_t seen)
{
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "%s", holder);
	fx->m->hello.incarnation = 7;
	fx->m->hello.max_epoch_seen = seen;
	assert_int_equal(conn_send(c, fx->m), 0);
}

/* The epoch of a replica's "leading at epoch N" line, 0 if none. */
static inline uint64_t led_epoch(const struct replica *r)
{
	char path[160], line[512];
	unsigned long long e = 0, v;
	FILE *f;

	snprintf(path, sizeof(path), "%s/coord.log", r->dir);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "leading at epoch ");

		if (p && sscanf(p, "leading at epoch %llu", &v) == 1)
			e = v;
	}
	if (f)
		fclose(f);
	return e;
}
#endif /* LEASELINE_TESTS_INTEG_REPLICA_FX_H */
