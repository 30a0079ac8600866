/* SPDX-License-Identifier: MIT */
/*
 * A real PostgreSQL 15 server (Debian's postgresql-15) for the tests of the
 * PostgreSQL-backed usage ledger, once per test binary: initdb'd into a
 * temporary directory (data/, the socket, the log <dir>/log), run as the user
 * postgres (PostgreSQL refuses root) on a loopback port chosen here, durability
 * off (a benchmark asks for it on: pg_server_start_durable), stopped and removed on every exit path (pg_server_stop, also from
 * atexit; a crash stops it too: PR_SET_PDEATHSIG, though the directory stays).
 * Build with -I$(pg_config --includedir) -lpq.
 */
#ifndef LEASELINE_TESTS_PG_SERVER_H
#define LEASELINE_TESTS_PG_SERVER_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <libpq-fe.h>

#include "free_port.h"

#define PG_SERVER_BIN "/usr/lib/postgresql/15/bin"

struct pg_server {
	pid_t pid; /* the postmaster */
	int port;
	char dir[64];  /* /tmp/llpg.XXXXXX */
	char uri[256]; /* postgresql://leaseline@127.0.0.1:PORT/postgres */
	pid_t owner;   /* the process that started it; 0: stopped */
	uid_t uid;     /* of the postgres user */
	bool durable;  /* fsync, synchronous commits, full pages: as in production */
	gid_t gid;
};

static struct pg_server *pg_atexit_server;


/* pid's wait status once it exits, -2 once ping (if any) answers, -1 after wait_ms. */
static inline int pg_wait(pid_t pid, const char *ping, int wait_ms)
{
	int status, step = ping ? 50 : 10;

	for (int i = 0; i <= wait_ms / step; i++) {
		bool up = ping && PQping(ping) == PQPING_OK;
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid || (w < 0 && errno == ECHILD)) /* ECHILD: reaped elsewhere */
			return w == pid ? status : 0;
		if (up)
			return -2;
		usleep(step * 1000);
	}
	return -1;
}

static inline void pg_server_stop(struct pg_server *p)
{
	/* Fast shutdown (SIGTERM's smart one waits for the test's connections
	 * to close), then immediate, then SIGKILL (backends exit by themselves).
	 */
	static const int sig[] = {SIGINT, SIGQUIT, SIGKILL}, wait_ms[] = {5000, 2000, 2000};
	char cmd[128];

	if (!p || p->owner != getpid()) /* stopped, or a forked child's exit */
		return;
	if (p == pg_atexit_server)
		pg_atexit_server = NULL;
	for (int i = 0; i < 3 && p->pid > 0; i++) {
		kill(p->pid, sig[i]);
		if (pg_wait(p->pid, NULL, wait_ms[i]) != -1)
			p->pid = 0;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
	if (system(cmd))
		fprintf(stderr, "pg fixture: cannot remove %s\n", p->dir);
	p->owner = 0;
}

static inline void pg_atexit(void)
{
	pg_server_stop(pg_atexit_server);
}

/* Fork and exec argv as the postgres user, output appended to <dir>/log. */
static inline pid_t pg_spawn(const struct pg_server *p, char *const argv[])
{
	char log[80];
	pid_t parent = getpid(), pid;

	snprintf(log, sizeof(log), "%s/log", p->dir);
	if ((pid = fork()) == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(p->dir) ||
		    setgroups(1, &p->gid) || setgid(p->gid) || setuid(p->uid))
			_exit(126);
		/* After setuid, which clears it; SIGQUIT also removes the shm. */
		prctl(PR_SET_PDEATHSIG, SIGQUIT);
		if (getppid() != parent)
			_exit(1);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

static inline int pg_fail(const struct pg_server *p, const char *what)
{
	char cmd[128];

	fprintf(stderr, "pg fixture: %s; the end of %s/log:\n", what, p->dir);
	snprintf(cmd, sizeof(cmd), "tail -n 20 '%s/log' >&2", p->dir);
	if (system(cmd))
		fprintf(stderr, "pg fixture: (no log)\n");
	return -1;
}

/* Start the postmaster on port (0: one free now): 0 when it answers (in
 * 20 s), 1 if it exited (port taken?), -1.
 */
static inline int pg_server_run_on(struct pg_server *p, int port_no)
{
	char bin[] = PG_SERVER_BIN "/postgres", data[80], port[16], ping[300];
	char *on_off = p->durable ? "on" : "off", fsync[16], sync[32], fpw[32];
	/* clang-format off */
	char *argv[] = {bin, "-D", data, "-k", p->dir, "-h", "127.0.0.1", "-p", port,
			"-c", fsync, "-c", sync,
			"-c", fpw, "-c", "max_connections=50",
			"-c", "shared_buffers=32MB", "-c", "logging_collector=off", NULL};
	/* clang-format on */
	int r;

	snprintf(fsync, sizeof(fsync), "fsync=%s", on_off);
	snprintf(sync, sizeof(sync), "synchronous_commit=%s", on_off);
	snprintf(fpw, sizeof(fpw), "full_page_writes=%s", on_off);
	p->port = port_no > 0 ? port_no : test_free_port();
	snprintf(data, sizeof(data), "%s/data", p->dir);
	snprintf(port, sizeof(port), "%d", p->port);
	snprintf(p->uri, sizeof(p->uri), "postgresql://leaseline@127.0.0.1:%d/postgres", p->port);
	snprintf(ping, sizeof(ping), "%s?connect_timeout=2", p->uri);
	p->pid = p->port < 0 ? -1 : pg_spawn(p, argv);
	if (p->pid < 0)
		return pg_fail(p, "no free port or no fork");
	r = pg_wait(p->pid, ping, 20000);
	if (r == -1)
		return pg_fail(p, "the server did not come up in 20 s");
	if (r != -2)
		p->pid = 0;
	return r == -2 ? 0 : 1;
}

/* initdb (superuser leaseline, trust) and start the server. 0 or -1.
 * durable: as in production (fsync on; the data on /var/tmp, a disk).
 */
static inline int pg_server_start_as(struct pg_server *p, bool durable)
{
	static bool registered;
	char bin[] = PG_SERVER_BIN "/initdb", data[80];
	/* clang-format off */
	char *initdb[] = {bin, "-D", data, "-A", "trust", "-U", "leaseline", "--no-sync",
			  "-E", "UTF8", "--locale=C", NULL};
	/* clang-format on */
	struct passwd *pw = getpwnam("postgres");
	int status, r = 1;

	memset(p, 0, sizeof(*p));
	p->durable = durable;
	if (!pw || access(bin, X_OK)) {
		fprintf(stderr, "pg fixture: needs user postgres and %s (postgresql-15)\n", bin);
		return -1;
	}
	snprintf(p->dir, sizeof(p->dir), durable ? "/var/tmp/llpg.XXXXXX" : "/tmp/llpg.XXXXXX");
	if (!mkdtemp(p->dir)) {
		fprintf(stderr, "pg fixture: mkdtemp: %s\n", strerror(errno));
		return -1;
	}
	p->owner = getpid();
	p->uid = pw->pw_uid;
	p->gid = pw->pw_gid;
	pg_atexit_server = p;
	if (!registered)
		registered = !atexit(pg_atexit);
	snprintf(data, sizeof(data), "%s/data", p->dir);
	status = -1;
	if (!chown(p->dir, p->uid, p->gid) && (p->pid = pg_spawn(p, initdb)) > 0 &&
	    (status = pg_wait(p->pid, NULL, 60000)) == -1) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	p->pid = 0;
	if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status))
		r = pg_fail(p, "chown or initdb failed");
	for (int i = 0; i < 3 && r == 1; i++)
		r = pg_server_run_on(p, 0);
	if (r == 1)
		r = pg_fail(p, "the server exited at start");
	if (r)
		pg_server_stop(p);
	return r;
}

/* CREATE DATABASE name ([a-z0-9_], dropped first if it exists, with its
 * sessions), its libpq URI into uri. 0 or -1.
 */
static inline int pg_server_create_db(struct pg_server *p, const char *name, char *uri, size_t len)
{
	char info[320], sql[2][128];
	size_t n = strlen(name);
	PGconn *c;
	int r;

	if (p->pid <= 0 || n > 63 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
		return -1;
	/* No NOTICE on stderr when there is nothing to drop. */
	snprintf(info, sizeof(info),
		 "%s?connect_timeout=5&options=-c%%20client_min_messages%%3Dwarning", p->uri);
	snprintf(sql[0], sizeof(sql[0]), "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
	snprintf(sql[1], sizeof(sql[1]), "CREATE DATABASE %s", name);
	c = PQconnectdb(info);
	r = PQstatus(c) == CONNECTION_OK ? 0 : -1;
	for (int i = 0; i < 2 && !r; i++) {
		PGresult *res = PQexec(c, sql[i]);

		r = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : -1;
		PQclear(res);
	}
	if (r)
		fprintf(stderr, "pg fixture: create database %s: %s", name, PQerrorMessage(c));
	PQfinish(c);
	if (!r &&
	    snprintf(uri, len, "postgresql://leaseline@127.0.0.1:%d/%s", p->port, name) >= (int)len)
		r = -1;
	return r;
}

static inline int pg_server_start(struct pg_server *p)
{
	return pg_server_start_as(p, false);
}

/* The server down (a fast shutdown: its clients are cut off), its data
 * kept; pg_server_up starts it again on the same port. 0 or -1.
 */
static inline int pg_server_down(struct pg_server *p)
{
	if (p->pid <= 0)
		return -1;
	kill(p->pid, SIGINT);
	if (pg_wait(p->pid, NULL, 5000) == -1) {
		kill(p->pid, SIGKILL);
		pg_wait(p->pid, NULL, 2000);
	}
	p->pid = 0;
	return 0;
}

static inline int pg_server_up(struct pg_server *p)
{
	return pg_server_run_on(p, p->port) == 0 ? 0 : -1;
}

static inline int pg_server_start_durable(struct pg_server *p)
{
	return pg_server_start_as(p, true);
}

#endif /* LEASELINE_TESTS_PG_SERVER_H */
