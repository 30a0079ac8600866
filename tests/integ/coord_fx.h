/* SPDX-License-Identifier: MIT */
/*
 * What the tests that run a real coordinator process share
 * (test_coord_proto.c, test_usage_proto.c): the binary under test, files in
 * the fixture's directory, its log, the wait for it to listen (on port 0:
 * the port it got is read from its log), a connection to it and its next
 * frame, and a disk to fill.
 * Include after cmocka.h.
 */
#ifndef LEASELINE_TESTS_COORD_FX_H
#define LEASELINE_TESTS_COORD_FX_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "lib/conn.h"
#include "lib/monotonic.h"
#include "lib/net.h"
#include "lib/wire.h"

/* How long a coordinator may take to start listening: generous, for a
 * loaded machine (the wait polls, and ends as soon as it listens).
 */
#define COORD_READY_MS 30000

/* The leaseline binary under test: $LL_BIN, else build/leaseline. */
static inline const char *bin(void)
{
	const char *b = getenv("LL_BIN");

	return b ? b : "build/leaseline";
}

static inline void write_file(const char *dir, const char *name, const char *text)
{
	char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Whether dir/coord.log has a line containing s. */
static inline bool coord_log_has(const char *dir, const char *s)
{
	char path[160], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/coord.log", dir);
	f = fopen(path, "r");
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, s) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* The port of the last line of dir/coord.log saying "WHAT listening on
 * HOST:PORT" (a whole line: one being written is not read yet), or -1.
 */
static inline int coord_log_port(const char *dir, const char *what)
{
	char path[160], line[512], pat[64];
	int port = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/coord.log", dir);
	snprintf(pat, sizeof(pat), "%s listening on ", what);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, pat), *end;
		long v;

		if (!p || !strchr(line, '\n'))
			continue;
		p += strlen(pat);
		end = p + strcspn(p, " \n");
		*end = '\0';
		p = strrchr(p, ':');
		v = p ? strtol(p + 1, &end, 10) : 0;
		if (p && !*end && v > 0 && v <= 65535)
			port = (int)v;
	}
	if (f)
		fclose(f);
	return port;
}

/* Wait, up to COORD_READY_MS, for the coordinator *pid started in dir (its
 * stderr in dir/coord.log) to log "coordinator listening on HOST:PORT",
 * the last thing it does at start, and set *port to PORT (the one the
 * kernel chose: the fixtures configure listen: 127.0.0.1:0). If
 * metrics_port, also the port of its "metrics listening on" line (metrics:
 * 127.0.0.1:0), logged before. 0, or -1 with the reason and the log on
 * stderr: it exited first (*pid is then -1), or the deadline passed.
 */
static inline int coord_wait_ready(const char *dir, pid_t *pid, int *port, int *metrics_port)
{
	struct timespec t0, t;
	char path[160], line[512];
	long ms = 0;
	FILE *f;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((*port = coord_log_port(dir, "coordinator")) < 0) {
		if (waitpid(*pid, NULL, WNOHANG) == *pid) {
			*pid = -1;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms > COORD_READY_MS)
			break;
		poll(NULL, 0, 5);
	}
	if (*port > 0 && metrics_port)
		*metrics_port = coord_log_port(dir, "metrics");
	if (*port > 0 && (!metrics_port || *metrics_port > 0))
		return 0;
	if (*port > 0)
		fprintf(stderr, "coordinator in %s: no \"metrics listening on\" line\n", dir);
	else if (*pid < 0)
		fprintf(stderr, "coordinator in %s exited before it listened\n", dir);
	else
		fprintf(stderr, "coordinator in %s: not listening after %d s\n", dir,
			COORD_READY_MS / 1000);
	snprintf(path, sizeof(path), "%s/coord.log", dir);
	f = fopen(path, "r");
	for (int n = 0; f && n < 40 && fgets(line, sizeof(line), f); n++)
		fprintf(stderr, "  coord.log: %s", line);
	if (f)
		fclose(f);
	return -1;
}

/* A connection to 127.0.0.1:port, non-blocking, as conn c. */
static inline void coord_dial(int port, struct conn *c)
{
	struct sockaddr_storage sa;
	char addr[32];
	socklen_t len;
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	assert_int_equal(net_addr(addr, &sa, &len), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	conn_init(c, fd);
}

/* The next frame within wait_ms: 1 and *m, 0 on timeout, -ECONNRESET if closed. */
static inline int coord_recv(struct conn *c, struct wire_msg *m, int wait_ms)
{
	uint64_t end = clock_now_ns() + (uint64_t)wait_ms * NSEC_PER_MSEC;

	for (;;) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		int r = conn_next(c, m), err;

		if (r)
			return r;
		if (clock_now_ns() >= end)
			return 0;
		poll(&p, 1, 20);
		err = conn_read(c);
		if (err)
			return conn_next(c, m) ? 1 : err;
	}
}

/* A grant as it came, to re-present in a report (docs/protocol.md, "Adoption"). */
struct coord_held {
	uint64_t epoch, seq, rate, burst, ttl;
	uint8_t tag[WIRE_TAG_LEN];
};

static inline struct coord_held coord_held_of(const struct wire_grant *g)
{
	struct coord_held h = {
	    .epoch = g->epoch, .seq = g->seq, .rate = g->rate, .burst = g->burst, .ttl = g->ttl_ns};

	memcpy(h.tag, g->tag, WIRE_TAG_LEN);
	return h;
}

/* Entry e names h as applied and re-presents it, left_ns still to live. */
static inline void coord_entry_held(struct wire_report_entry *e, const struct coord_held *h,
				    uint64_t left_ns)
{
	e->applied_epoch = h->epoch;
	e->applied_seq = h->seq;
	e->held_rate = h->rate;
	e->held_burst = h->burst;
	e->held_ttl_ns = h->ttl;
	e->held_left_ns = left_ns;
	memcpy(e->held_tag, h->tag, WIRE_TAG_LEN);
}

/* Fill dir/state (a small tmpfs): 0 once it is full. */
static inline int coord_fill_disk(const char *dir)
{
	static const char chunk[4096];
	char path[160];
	int fd;

	snprintf(path, sizeof(path), "%s/state/fill", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	for (int i = 0; i < 1024; i++) /* 4 MiB at most: the tmpfs holds far less */
		if (write(fd, chunk, sizeof(chunk)) < 0)
			break;
	close(fd);
	return errno == ENOSPC ? 0 : -EIO;
}

#endif /* LEASELINE_TESTS_COORD_FX_H */
