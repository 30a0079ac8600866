/* SPDX-License-Identifier: MIT */
/*
 * Logging in the manner of xdp-tools: pr_warn/pr_info/pr_debug to stderr,
 * a level raised by -v, and libbpf's own messages routed through it.
 */
#ifndef LEASELINE_LIB_LOG_H
#define LEASELINE_LIB_LOG_H

#include <stdbool.h>

enum log_level {
	LOG_WARN = 0,
	LOG_INFO = 1,
	LOG_DEBUG = 2,
};

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Route libbpf's messages through our levels (warn, info, debug). */
void log_hook_libbpf(void);
/* Warnings so far (every command's failure says at least one). */
unsigned int log_warn_count(void);
/* Keep warnings instead of printing them (commands under -j, which report
 * a failure as one JSON object); log_captured() returns them, lines joined
 * by "; ", and empties the store.
 */
void log_capture(bool on);
const char *log_captured(void);
void log_print(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define pr_warn(...)  log_print(LOG_WARN, __VA_ARGS__)
#define pr_info(...)  log_print(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) log_print(LOG_DEBUG, __VA_ARGS__)

#endif /* LEASELINE_LIB_LOG_H */
