/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoints' HTTP server (reference §7): answers GET /metrics
 * with the text a writer produces, anything else with 404. Shared by the
 * agent and the coordinator; knows nothing of what it serves.
 */
#ifndef LEASELINE_HTTP_H
#define LEASELINE_HTTP_H

#include <stdio.h>

/* Listen on "host:port"; returns the non-blocking socket fd or a negative errno. */
int http_listen(const char *addr);

typedef int (*http_writer)(FILE *f, void *arg);

/* Accept and answer one pending connection, if any (non-blocking), with
 * the text `write` produces.
 */
void http_serve(int listen_fd, http_writer write, void *arg);

#endif /* LEASELINE_HTTP_H */
