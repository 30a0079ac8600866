/* SPDX-License-Identifier: MIT */
/*
 * What the tests that run a real coordinator process share
 * (test_coord_proto.c, test_usage_proto.c): a free loopback port, the binary
 * under test, files in the fixture's directory, its log, and a disk to fill.
 * Include after cmocka.h.
 */
#ifndef LEASELINE_TESTS_COORD_FX_H
#define LEASELINE_TESTS_COORD_FX_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A loopback TCP port free a moment ago, or -1. */
static inline int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

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
