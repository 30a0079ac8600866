// SPDX-License-Identifier: MIT
/*
 * Buffered frame I/O over non-blocking sockets (see conn.h). Invariant: a
 * peer that sends a malformed frame is never parsed past it; the caller
 * drops the connection on -EPROTO.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"

#define CONN_IN_MIN    512 /* a report of a few limits, a grant, a hello */
#define CONN_FRAME_MAX (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD)

void conn_init(struct conn *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
}

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->in);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
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
	free(c->out);
	c->out = NULL;
	c->out_cap = 0;
	return 0;
}

static int out_append(struct conn *c, const uint8_t *p, size_t n)
{
	if (c->out_len + n > c->out_cap) {
		size_t cap = c->out_len + n;
		uint8_t *q;

		if (cap > CONN_MAX_OUT)
			return -ENOBUFS; /* the peer is not reading */
		q = realloc(c->out, cap);
		if (!q)
			return -ENOMEM;
		c->out = q;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
	return 0;
}

int conn_send(struct conn *c, const struct wire_msg *m)
{
	/* Processes using conn are single-threaded: one scratch frame will do. */
	static uint8_t frame[CONN_FRAME_MAX];
	size_t off = 0;
	int n = wire_encode(m, frame, sizeof(frame)), err;

	if (n < 0)
		return n;
	if (!c->out_len) {
		ssize_t s = send(c->fd, frame, (size_t)n, MSG_NOSIGNAL);

		if (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		off = s > 0 ? (size_t)s : 0;
	}
	err = off < (size_t)n ? out_append(c, frame + off, (size_t)n - off) : 0;
	return err ? err : conn_flush(c);
}

/* Room to read into: grow up to one maximal frame when full. */
static int in_room(struct conn *c)
{
	size_t cap;
	uint8_t *p;

	if (c->in_len < c->in_cap)
		return 1;
	if (c->in_cap >= CONN_FRAME_MAX)
		return 0; /* a full frame is buffered; decode before reading more */
	cap = c->in_cap ? c->in_cap * 2 : CONN_IN_MIN;
	if (cap > CONN_FRAME_MAX)
		cap = CONN_FRAME_MAX;
	p = realloc(c->in, cap);
	if (!p)
		return -ENOMEM;
	c->in = p;
	c->in_cap = cap;
	return 1;
}

int conn_read(struct conn *c)
{
	for (;;) {
		int room = in_room(c);
		ssize_t n;

		if (room <= 0)
			return room;
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		c->in_len += (size_t)n;
	}
}

int conn_next(struct conn *c, struct wire_msg *m)
{
	int n = c->in_len ? wire_decode(c->in, c->in_len, m) : 0;

	if (n <= 0)
		return n;
	memmove(c->in, c->in + n, c->in_len - (size_t)n);
	c->in_len -= (size_t)n;
	if (!c->in_len && c->in_cap > CONN_IN_MIN) {
		/* Drained after a large frame: give the memory back. */
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
	return 1;
}
