/* SPDX-License-Identifier: MIT */
/*
 * `leaseline top`: per limit, the keys denied the most and the keys
 * admitted the most, read from the pinned bucket maps (never written), with
 * why each denied key is refused and when it may retry (reference §3).
 */
#ifndef LEASELINE_CMD_TOP_H
#define LEASELINE_CMD_TOP_H

#include <stdbool.h>
#include <stdint.h>

/* Bounds of the refreshing view (-w): it never spins, and never sleeps so
 * long that a ^C seems ignored (the sleep ends early on SIGINT anyway).
 */
#define TOP_MIN_INTERVAL_NS 100000000ull	      /* 0.1 s */
#define TOP_MAX_INTERVAL_NS (3600ull * 1000000000ull) /* 1 h */
#define TOP_DEFAULT_ROWS    10
#define TOP_MAX_ROWS	    100000

struct top_opts {
	const char *pin_dir;
	const char *limit;    /* only this limit (by name); NULL: every limit */
	uint32_t rows;	      /* rows per list */
	bool json;	      /* JSON: one document per frame, one line each */
	uint64_t interval_ns; /* 0: one frame of totals; else refresh with rates */
	uint32_t count;	      /* frames to print with interval_ns; 0: until SIGINT/SIGTERM */
};

/* top_run's result when o->limit names no limit of the running policy
 * (said on stderr, with the limits there are).
 */
#define TOP_NO_SUCH_LIMIT 1

/* Returns 0, TOP_NO_SUCH_LIMIT, or a negative errno (pins missing or
 * unreadable). In the refreshing view, a limit that a reload removes after
 * the first frame leaves the frames empty (with a note) rather than ends it.
 */
int top_run(const struct top_opts *o);

#endif /* LEASELINE_CMD_TOP_H */
