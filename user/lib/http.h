/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoints' HTTP server (reference §7): answers GET /metrics
 * with the text a writer produces, anything else with 404, on a thread of
 * its own so that a slow or silent scraper never delays the daemon's loop.
 * Shared by the agent and the coordinator; knows nothing of what it serves.
 */
#ifndef LEASELINE_LIB_HTTP_H
#define LEASELINE_LIB_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

typedef int (*http_writer)(FILE *f, void *arg);

struct http_server {
	int fd;
	pthread_t thread;
	atomic_int stop; /* set by http_stop, read by the server thread */
	bool running;
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
/* Stop the thread (within ~100 ms) and close the socket. */
void http_stop(struct http_server *s);

#endif /* LEASELINE_LIB_HTTP_H */
