/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text exposition of the datapath counters on `metrics:`
 * (SPEC §7): a minimal HTTP/1.0 responder polled from the agent's loop.
 * One request per connection, bounded reads, a slow client is cut off.
 */
#ifndef LEASELINE_METRICS_H
#define LEASELINE_METRICS_H

#include <stdio.h>

struct dp;

/* Listen on "host:port"; returns the socket fd or a negative errno. */
int metrics_listen(const char *addr);
typedef int (*metrics_writer)(FILE *f, void *arg);

/* Accept and answer one pending connection, if any (non-blocking), with
 * the text `write` produces.
 */
void metrics_serve(int listen_fd, metrics_writer write, void *arg);
/* Write the exposition text for dp's counters to f (a metrics_writer). */
int metrics_write(FILE *f, void *dp);

#endif /* LEASELINE_METRICS_H */
