/* SPDX-License-Identifier: MIT */
/*
 * The agent's Prometheus exposition (reference §7): the datapath's counters,
 * this gateway's lease shares and the policy version, read from the maps
 * and served by http.c on `metrics:`.
 */
#ifndef LEASELINE_AGENT_AGENT_METRICS_H
#define LEASELINE_AGENT_AGENT_METRICS_H

#include <stdio.h>

/* Write the exposition text for dp's counters to f (an http_writer; arg is
 * a struct dp *).
 */
int metrics_write(FILE *f, void *dp);

#endif /* LEASELINE_AGENT_AGENT_METRICS_H */
