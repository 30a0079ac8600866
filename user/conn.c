// SPDX-License-Identifier: MIT
/*
 * Buffered frame I/O over non-blocking sockets (see conn.h). Invariant: a
 * peer that sends a malformed frame is never parsed past it; the caller
 * drops the connection on -EPROTO.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "conn.h"

void conn_init(struct conn *c, int fd)
{
	c->fd = fd;
	c->in_len = 0;
	c->out = NULL;
	c->out_len = c->out_cap = 0;
}

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_cap = 0;
	c->in_len = 0;
}

int conn_flush(struct conn *c)
{
	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return 0;
}

int conn_send(struct conn *c, const struct wire_msg *m)
{
	size_t need = WIRE_HDR_LEN + WIRE_MAX_PAYLOAD;
	int n;

	if (c->out_len + need > c->out_cap) {
		size_t cap = c->out_len + need;
		uint8_t *p;

		if (cap > CONN_MAX_OUT + need)
			return -ENOBUFS; /* the peer is not reading */
		p = realloc(c->out, cap);
		if (!p)
			return -ENOMEM;
		c->out = p;
		c->out_cap = cap;
	}
	n = wire_encode(m, c->out + c->out_len, c->out_cap - c->out_len);
	if (n < 0)
		return n;
	c->out_len += (size_t)n;
	return conn_flush(c);
}

int conn_read(struct conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->in_len == sizeof(c->in))
			return 0; /* a full frame is buffered; decode before reading more */
		n = recv(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		c->in_len += (size_t)n;
	}
}

int conn_next(struct conn *c, struct wire_msg *m)
{
	int n = wire_decode(c->in, c->in_len, m);

	if (n <= 0)
		return n;
	memmove(c->in, c->in + n, c->in_len - (size_t)n);
	c->in_len -= (size_t)n;
	return 1;
}

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
	if (bind(fd, (struct sockaddr *)&sa, len) || listen(fd, 128))
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
