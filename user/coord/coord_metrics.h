/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's Prometheus exposition (reference §7): per limit the
 * contract, the live sums of shares and each holder's share and demand;
 * the epoch, the quiet period and the protocol counters. Served by http.c.
 */
#ifndef LEASELINE_COORD_COORD_METRICS_H
#define LEASELINE_COORD_COORD_METRICS_H

#include <stdio.h>

/* Write the exposition text to f (an http_writer; arg is a struct coord *). */
int coord_metrics_write(FILE *f, void *coord);

#endif /* LEASELINE_COORD_COORD_METRICS_H */
