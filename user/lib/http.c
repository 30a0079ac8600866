// SPDX-License-Identifier: MIT
/*
 * The metrics endpoints of both daemons, served by libmicrohttpd on a
 * thread of its own (one event loop over every connection, so clients that
 * connect and say nothing wait out their own timeout without delaying a
 * scrape). Invariants: a request is read within a bounded memory pool; a
 * client idle for HTTP_IDLE_S (idle_s) is cut off; at most HTTP_MAX_CONNS are open;
 * none of that ever holds the daemon's lease or grant loop, which shares
 * only the writer's lock (held while the text is produced into memory,
 * never while a client is read from or written to).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "lib/http.h"
#include "lib/net.h"

#define HTTP_IDLE_S	 2   /* a connection silent this long is closed */
#define HTTP_MAX_CONNS	 128 /* beyond: refused at accept */
#define HTTP_POOL_BYTES	 (16 * 1024) /* a request's line and headers */
#define HTTP_CONTENT_TYPE "text/plain; version=0.0.4"

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned int status,
			     struct MHD_Response *r)
{
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **req)
{
	struct http_server *s = cls;
	struct MHD_Response *r;
	char *body = NULL;
	size_t blen = 0;
	FILE *f;

	(void)version;
	(void)upload;
	if (strcmp(method, MHD_HTTP_METHOD_GET) || strcmp(url, "/metrics")) {
		/* Nothing of a body is kept: answered once it has all come. */
		if (*upload_len) {
			*upload_len = 0;
			return MHD_YES;
		}
		r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
		return queue(conn, MHD_HTTP_NOT_FOUND, r);
	}
	if (!*req) { /* the first call has the headers; answer on the next */
		*req = s;
		return MHD_YES;
	}
	f = open_memstream(&body, &blen);
	if (!f)
		return MHD_NO;
	if (s->lock)
		pthread_mutex_lock(s->lock);
	s->write(f, s->arg);
	if (s->lock)
		pthread_mutex_unlock(s->lock);
	if (fclose(f)) {
		free(body);
		return MHD_NO;
	}
	r = MHD_create_response_from_buffer(blen, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_CONTENT_TYPE);
	return queue(conn, MHD_HTTP_OK, r);
}

int http_listen(struct http_server *s, const char *addr)
{
	*s = (struct http_server){.fd = net_listen(addr)};
	return s->fd < 0 ? s->fd : 0;
}

int http_serve(struct http_server *s, http_writer write, void *arg, pthread_mutex_t *lock)
{
	s->write = write;
	s->arg = arg;
	s->lock = lock;
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
				answer, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->fd,
				MHD_OPTION_CONNECTION_TIMEOUT,
				(unsigned int)(s->idle_s ? s->idle_s : HTTP_IDLE_S),
				MHD_OPTION_CONNECTION_LIMIT, (unsigned int)HTTP_MAX_CONNS,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_POOL_BYTES,
				MHD_OPTION_END);
	if (!s->d) {
		close(s->fd);
		s->fd = -1;
		return -EIO;
	}
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
	if (s->d) {
		MHD_stop_daemon(s->d); /* joins its thread and closes the socket */
		s->d = NULL;
	} else if (s->fd >= 0) {
		close(s->fd);
	}
	s->fd = -1;
}
