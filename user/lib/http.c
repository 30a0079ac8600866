// SPDX-License-Identifier: MIT
/*
 * A minimal HTTP/1.0 responder for the metrics endpoints of both daemons,
 * on its own thread. Invariants: one request per connection, a bounded
 * read, and a client that does not send or read in time is cut off after
 * HTTP_TIMEOUT_MS; none of that ever holds the daemon's lease or grant loop,
 * which shares only the writer's lock (held while the text is produced into
 * memory, never while a client is read from or written to).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "lib/http.h"
#include "lib/net.h"

#define HTTP_REQ_MAX	2048 /* enough for a GET line and headers */
#define HTTP_TIMEOUT_MS 200

#define HTTP_STOP_POLL_MS 100 /* how soon the thread sees http_stop */

static void respond(int c, struct http_server *s)
{
	struct timeval tv = {.tv_usec = HTTP_TIMEOUT_MS * 1000};
	char req[HTTP_REQ_MAX], *body = NULL, hdr[160];
	size_t blen = 0;
	ssize_t n;
	FILE *f;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = recv(c, req, sizeof(req) - 1, 0);
	if (n <= 0)
		return;
	req[n] = '\0';
	if (strncmp(req, "GET /metrics", 12) != 0) {
		const char *nf = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";

		send(c, nf, strlen(nf), MSG_NOSIGNAL);
		return;
	}
	f = open_memstream(&body, &blen);
	if (!f)
		return;
	if (s->lock)
		pthread_mutex_lock(s->lock);
	s->write(f, s->arg);
	if (s->lock)
		pthread_mutex_unlock(s->lock);
	fclose(f);
	snprintf(hdr, sizeof(hdr),
		 "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 blen);
	if (send(c, hdr, strlen(hdr), MSG_NOSIGNAL) > 0)
		send(c, body, blen, MSG_NOSIGNAL);
	free(body);
}

static void *serve(void *arg)
{
	struct http_server *s = arg;

	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		struct pollfd p = {.fd = s->fd, .events = POLLIN};
		int c;

		if (poll(&p, 1, HTTP_STOP_POLL_MS) <= 0)
			continue;
		c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		/* The listening socket is non-blocking; the connection must not be. */
		respond(c, s);
		close(c);
	}
	return NULL;
}

int http_listen(struct http_server *s, const char *addr)
{
	*s = (struct http_server){.fd = net_listen(addr)};
	return s->fd < 0 ? s->fd : 0;
}

int http_serve(struct http_server *s, http_writer write, void *arg, pthread_mutex_t *lock)
{
	int err;

	s->write = write;
	s->arg = arg;
	s->lock = lock;
	err = -pthread_create(&s->thread, NULL, serve, s);
	if (err) {
		close(s->fd);
		s->fd = -1;
		return err;
	}
	s->running = true;
	return 0;
}

int http_start(struct http_server *s, const char *addr, http_writer write, void *arg,
	       pthread_mutex_t *lock)
{
	int err = http_listen(s, addr);

	return err ? err : http_serve(s, write, arg, lock);
}

void http_stop(struct http_server *s)
{
	if (s->running) {
		atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
		pthread_join(s->thread, NULL);
		s->running = false;
	}
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}
