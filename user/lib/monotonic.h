/* SPDX-License-Identifier: MIT */
/*
 * Time every part of leaseline shares.
 *
 * clock_now_ns() reads CLOCK_MONOTONIC, the clock bpf_ktime_get_ns reads in the
 * kernel, so an agent's deadlines and the datapath's lease expiry compare
 * directly, and the coordinator's own deadlines never jump with wall time.
 */
#ifndef LEASELINE_LIB_MONOTONIC_H
#define LEASELINE_LIB_MONOTONIC_H

#include <stdint.h>
#include <time.h>

#define NSEC_PER_USEC 1000ull
#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_SEC  1000000000ull

static inline uint64_t ts_to_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * NSEC_PER_SEC + (uint64_t)ts->tv_nsec;
}

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts_to_ns(&ts);
}

/* Nanoseconds as seconds, for logs, metrics and status. */
static inline double ns_to_s(uint64_t ns)
{
	return (double)ns / (double)NSEC_PER_SEC;
}

#endif /* LEASELINE_LIB_MONOTONIC_H */
