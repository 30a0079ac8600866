/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoints' HTTP server (reference §7, libmicrohttpd): answers
 * GET /metrics with the text a writer produces, anything else with 404, on
 * a thread of its own so that a slow or silent scraper never delays the
 * daemon's loop, nor another scraper. Shared by the agent and the
 * coordinator; knows nothing of what it serves.
 */
#ifndef LEASELINE_LIB_HTTP_H
#define LEASELINE_LIB_HTTP_H

#include <pthread.h>
#include <stdio.h>

typedef int (*http_writer)(FILE *f, void *arg);

struct MHD_Daemon;

struct http_server {
	int fd;		      /* the listening socket (the daemon's once serving) */
	struct MHD_Daemon *d; /* serving (http_serve) until http_stop */
	unsigned int idle_s;  /* cut a silent client after this (0: 2 s); set before http_serve */
	http_writer write;
	void *arg;
	pthread_mutex_t *lock; /* held around write() if set: the daemon's state lock */
};

/* Listen on "host:port" and serve from a new thread: 0 or a negative errno. */
int http_start(struct http_server *s, const char *addr, http_writer write, void *arg,
	       pthread_mutex_t *lock);
/* The same in two steps: take the port first (a daemon that cannot have it
 * stops before doing anything else), serve once there is something to serve.
 * After a failed http_listen, http_stop is still safe.
 */
int http_listen(struct http_server *s, const char *addr);
int http_serve(struct http_server *s, http_writer write, void *arg, pthread_mutex_t *lock);
/* Stop serving (the thread is joined) and close the socket. */
void http_stop(struct http_server *s);

#endif /* LEASELINE_LIB_HTTP_H */
