// SPDX-License-Identifier: MIT
/*
 * TCP sockets from "host:port" strings (see net.h). Every socket is
 * non-blocking and close-on-exec; a listener reuses its address so a
 * restarted daemon binds at once.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "lib/net.h"

int net_addr(const char *hostport, struct sockaddr_storage *sa, socklen_t *len)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
	char host[256], *port;

	snprintf(host, sizeof(host), "%s", hostport);
	port = strrchr(host, ':');
	if (!port)
		return -EINVAL;
	*port++ = '\0';
	if (host[0] == '[') {
		size_t l = strlen(host);

		if (l < 2 || host[l - 1] != ']')
			return -EINVAL;
		host[l - 1] = '\0';
		memmove(host, host + 1, l - 1);
	}
	if (getaddrinfo(host, port, &hints, &res))
		return -EINVAL;
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* A non-blocking socket for hostport, and its address in sa and len. */
static int net_socket(const char *hostport, struct sockaddr_storage *sa, socklen_t *len)
{
	int fd, err = net_addr(hostport, sa, len);

	if (err)
		return err;
	fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

static int fail_close(int fd)
{
	int err = -errno;

	close(fd);
	return err;
}

int net_listen(const char *hostport)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int one = 1, fd = net_socket(hostport, &sa, &len);

	if (fd < 0)
		return fd;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, len) || listen(fd, SOMAXCONN))
		return fail_close(fd);
	return fd;
}

int net_connect(const char *hostport)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int one = 1, fd = net_socket(hostport, &sa, &len);

	if (fd < 0)
		return fd;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, len) && errno != EINPROGRESS)
		return fail_close(fd);
	return fd;
}

void net_bound_name(const char *hostport, int fd, char *buf, size_t len)
{
	const char *colon = strrchr(hostport, ':');
	struct sockaddr_storage sa;
	socklen_t salen = sizeof(sa);
	unsigned port;

	if (!colon || strcmp(colon + 1, "0") || getsockname(fd, (struct sockaddr *)&sa, &salen)) {
		snprintf(buf, len, "%s", hostport);
		return;
	}
	port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
					      : ((struct sockaddr_in *)&sa)->sin_port);
	snprintf(buf, len, "%.*s:%u", (int)(colon - hostport), hostport, port);
}
