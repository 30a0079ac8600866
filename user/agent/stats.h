/* SPDX-License-Identifier: MIT */
/*
 * Reading the datapath's per-CPU counters as totals. Shared by status,
 * tests and benchmarks so every reader sums the same way.
 */
#ifndef LEASELINE_STATS_H
#define LEASELINE_STATS_H

#include <stdint.h>

#include "ll_types.h"

int stats_limit(int fd, uint32_t id, struct ll_limit_stats *out);
int stats_rule(int fd, uint32_t idx, struct ll_rule_stats *out);
int stats_parse(int fd, uint64_t out[LL_PARSE_MAX]);
const char *stats_parse_reason_name(uint32_t reason);

#endif /* LEASELINE_STATS_H */
