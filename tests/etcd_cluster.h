/* SPDX-License-Identifier: MIT */
/*
 * A real etcd cluster for a test binary (Debian's etcd-server 3.4): up to 3
 * members on loopback ports chosen here, data in a temporary directory,
 * started once per binary (group setup) and killed and removed on every
 * exit path (etcd_cluster_stop, also from atexit; a crash kills the
 * members too: PR_SET_PDEATHSIG). Members can be stopped
 * (SIGSTOP), continued and killed to make the faults the tests need.
 */
#ifndef LEASELINE_TESTS_ETCD_CLUSTER_H
#define LEASELINE_TESTS_ETCD_CLUSTER_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "free_port.h"

#define ETCD_MAX_MEMBERS 3

struct etcd_cluster {
	int n;
	pid_t pid[ETCD_MAX_MEMBERS];
	int client_port[ETCD_MAX_MEMBERS], peer_port[ETCD_MAX_MEMBERS];
	char url[ETCD_MAX_MEMBERS][48]; /* http://127.0.0.1:PORT (https:// with pki) */
	char dir[64];
	/* Set before etcd_cluster_start: clients speak mutual TLS, with the
	 * certificates tests/tls/mkcerts.sh made in this directory. etcd serves
	 * both.crt (IP SAN 127.0.0.1, serverAuth and clientAuth: etcd 3.4's
	 * JSON gateway dials etcd's own gRPC port with it, and with
	 * --client-cert-auth a certificate without clientAuth is refused there);
	 * clients need one signed by ca.crt.
	 */
	char pki[64];
};

static struct etcd_cluster *etcd_atexit_cluster;

static inline void etcd_cluster_stop(struct etcd_cluster *e)
{
	char cmd[128];

	if (e == etcd_atexit_cluster)
		etcd_atexit_cluster = NULL; /* it may be freed next */
	if (!e || !e->n)
		return;
	for (int i = 0; i < e->n; i++) {
		if (e->pid[i] > 0) {
			kill(e->pid[i], SIGCONT);
			kill(e->pid[i], SIGKILL);
			waitpid(e->pid[i], NULL, 0);
			e->pid[i] = 0;
		}
	}
	if (e->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
		if (system(cmd))
			fprintf(stderr, "etcd fixture: cannot remove %s\n", e->dir);
	}
	e->n = 0;
}

static inline void etcd_atexit(void)
{
	etcd_cluster_stop(etcd_atexit_cluster);
}

static inline pid_t etcd_member_spawn(struct etcd_cluster *e, int i, const char *initial)
{
	char name[16], data[96], curl[48], purl[48], log[112];
	pid_t pid;

	snprintf(name, sizeof(name), "m%d", i);
	snprintf(data, sizeof(data), "%s/%s", e->dir, name);
	snprintf(curl, sizeof(curl), "%s://127.0.0.1:%d", e->pki[0] ? "https" : "http",
		 e->client_port[i]);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", e->peer_port[i]);
	snprintf(log, sizeof(log), "%s/%s.log", e->dir, name);
	pid = fork();
	if (pid == 0 && e->pki[0]) {
		char cert[96], key[96], ca[96];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(cert, sizeof(cert), "%s/both.crt", e->pki);
		snprintf(key, sizeof(key), "%s/both.key", e->pki);
		snprintf(ca, sizeof(ca), "%s/ca.crt", e->pki);
		execlp("etcd", "etcd", "--name", name, "--data-dir", data, "--listen-client-urls",
		       curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
		       "--initial-advertise-peer-urls", purl, "--initial-cluster", initial,
		       "--initial-cluster-state", "new", "--initial-cluster-token",
		       "leaseline-test", "--heartbeat-interval", "100", "--election-timeout",
		       "1000", "--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca,
		       "--client-cert-auth", "--logger", "zap", "--log-outputs", log, (char *)NULL);
		_exit(127);
	}
	if (pid == 0) {
		/* The test crashing must not leave a cluster behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execlp("etcd", "etcd", "--name", name, "--data-dir", data, "--listen-client-urls",
		       curl, "--advertise-client-urls", curl, "--listen-peer-urls", purl,
		       "--initial-advertise-peer-urls", purl, "--initial-cluster", initial,
		       "--initial-cluster-state", "new", "--initial-cluster-token",
		       "leaseline-test", "--heartbeat-interval", "100", "--election-timeout",
		       "1000", "--logger", "zap", "--log-outputs", log, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Every member answers a linearizable read (etcdctl: the cluster has a
 * leader and quorum), within wait_ms.
 */
static inline bool etcd_cluster_healthy(const struct etcd_cluster *e, int wait_ms)
{
	char cmd[1024];
	size_t n = 0;
	struct timespec ts;
	long end;

	n += (size_t)snprintf(cmd + n, sizeof(cmd) - n,
			      "ETCDCTL_API=3 etcdctl --dial-timeout=500ms --command-timeout=1s ");
	if (e->pki[0])
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n,
				      "--cacert=%s/ca.crt --cert=%s/gw-1.crt --key=%s/gw-1.key ",
				      e->pki, e->pki, e->pki);
	n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "--endpoints=");
	for (int i = 0; i < e->n && n < sizeof(cmd); i++)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "%s%s", i ? "," : "", e->url[i]);
	snprintf(cmd + n, sizeof(cmd) - n, " endpoint health >/dev/null 2>&1");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + wait_ms;
	for (;;) {
		if (system(cmd) == 0)
			return true;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > end)
			return false;
		usleep(100 * 1000);
	}
}

/* Start n (1..3) members and wait until they serve (10 s at most). 0 or -1. */
static inline int etcd_cluster_start(struct etcd_cluster *e, int n)
{
	char initial[256], pki[sizeof(e->pki)];
	size_t at = 0;

	memcpy(pki, e->pki, sizeof(pki));
	memset(e, 0, sizeof(*e));
	memcpy(e->pki, pki, sizeof(pki));
	snprintf(e->dir, sizeof(e->dir), "/tmp/ll-etcd-XXXXXX");
	if (n < 1 || n > ETCD_MAX_MEMBERS || !mkdtemp(e->dir))
		return -1;
	etcd_atexit_cluster = e;
	atexit(etcd_atexit);
	e->n = n;
	for (int i = 0; i < n; i++) {
		e->client_port[i] = test_free_port();
		e->peer_port[i] = test_free_port();
		if (e->client_port[i] < 0 || e->peer_port[i] < 0)
			return -1;
		snprintf(e->url[i], sizeof(e->url[i]), "%s://127.0.0.1:%d",
			 e->pki[0] ? "https" : "http", e->client_port[i]);
		at +=
		    (size_t)snprintf(initial + at, sizeof(initial) - at,
				     "%sm%d=http://127.0.0.1:%d", i ? "," : "", i, e->peer_port[i]);
	}
	for (int i = 0; i < n; i++) {
		e->pid[i] = etcd_member_spawn(e, i, initial);
		if (e->pid[i] < 0)
			return -1;
	}
	if (!etcd_cluster_healthy(e, 10000)) {
		fprintf(stderr, "etcd fixture: the cluster did not come up (logs in %s)\n", e->dir);
		return -1;
	}
	return 0;
}

/* SIGSTOP, SIGCONT or SIGKILL member i. */
static inline int etcd_member_signal(struct etcd_cluster *e, int i, int sig)
{
	if (i < 0 || i >= e->n || e->pid[i] <= 0)
		return -1;
	if (kill(e->pid[i], sig))
		return -1;
	if (sig == SIGKILL) {
		waitpid(e->pid[i], NULL, 0);
		e->pid[i] = 0;
	}
	return 0;
}

/* Make member i etcd's own leader (etcdctl move-leader; a no-op when it
 * already is): tests that need the worst case of a fault, not the one
 * the election happened to give.
 */
static inline int etcd_move_leader(const struct etcd_cluster *e, int i)
{
	char cmd[768], all[256];
	size_t n = 0;

	if (i < 0 || i >= e->n)
		return -1;
	for (int k = 0; k < e->n && n < sizeof(all); k++)
		n += (size_t)snprintf(all + n, sizeof(all) - n, "%s%s", k ? "," : "", e->url[k]);
	snprintf(cmd, sizeof(cmd),
		 "export ETCDCTL_API=3; id=$(etcdctl --command-timeout=2s --endpoints=%s "
		 "endpoint status -w fields | sed -n 's/^\"MemberID\" : //p') && "
		 "[ -n \"$id\" ] && etcdctl --command-timeout=5s --endpoints=%s move-leader "
		 "$(printf %%x \"$id\") >/dev/null",
		 e->url[i], all);
	return system(cmd) == 0 ? 0 : -1;
}

#endif /* LEASELINE_TESTS_ETCD_CLUSTER_H */
