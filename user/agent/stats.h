/* SPDX-License-Identifier: MIT */
/*
 * Reading the datapath's per-CPU counters as totals. Shared by status,
 * tests and benchmarks so every reader sums the same way.
 */
#ifndef LEASELINE_AGENT_STATS_H
#define LEASELINE_AGENT_STATS_H

#include <stdint.h>

#include "ll_types.h"

int stats_limit(int fd, uint32_t id, struct ll_limit_stats *out);
int stats_rule(int fd, uint32_t idx, struct ll_rule_stats *out);
int stats_parse(int fd, uint64_t out[LL_PARSE_MAX]);
const char *stats_parse_reason_name(uint32_t reason);

/* Shadow denials of limit id (uid) over the last `slots` time slots of
 * ll_shadow_win up to now (CLOCK_MONOTONIC ns): the current, partial slot
 * and the slots - 1 before it, summed over CPUs. *seconds: the span that
 * covers, from the first slot's start to now (between (slots - 1) and
 * slots slot lengths). slots is at most LL_WIN_SLOTS - 1, so that no slot
 * counted can be one a CPU is about to reuse.
 */
struct stats_window {
	uint64_t pkts, bytes;
	double seconds;
};

int stats_shadow_window(int fd, uint32_t id, uint32_t uid, uint64_t now, uint32_t slots,
			struct stats_window *out);
/* Slots whose whole span is `seconds` rounded up to slots (10 s: 10 slots,
 * 10.7 s; the current one partial, so a window covers 9.7 to 10.7 s); at
 * most LL_WIN_SLOTS - 1.
 */
uint32_t stats_window_slots(double seconds);

#endif /* LEASELINE_AGENT_STATS_H */
