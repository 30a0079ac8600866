// SPDX-License-Identifier: MIT
/*
 * Log sink shared by every command. The only process-wide state in the
 * program: one level, set once from the command line.
 */
#include <stdarg.h>
#include <stdio.h>

#include <bpf/libbpf.h>

#include "log.h"

static enum log_level cur_level = LOG_INFO;

void log_set_level(enum log_level level)
{
	cur_level = level;
}

enum log_level log_get_level(void)
{
	return cur_level;
}

static void log_vprint(enum log_level level, const char *fmt, va_list ap)
{
	if (level > cur_level)
		return;
	vfprintf(stderr, fmt, ap);
}

void log_print(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vprint(level, fmt, ap);
	va_end(ap);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	enum log_level l = level == LIBBPF_WARN	  ? LOG_WARN
			   : level == LIBBPF_INFO ? LOG_INFO
						  : LOG_DEBUG;

	/* libbpf's info chatter is debug detail for an operator. */
	if (l == LOG_INFO)
		l = LOG_DEBUG;
	log_vprint(l, fmt, ap);
	return 0;
}

void log_hook_libbpf(void)
{
	libbpf_set_print(libbpf_print);
}
