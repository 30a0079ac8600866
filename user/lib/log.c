// SPDX-License-Identifier: MIT
/*
 * Log sink shared by every command. The only process-wide state in the
 * program: one level, set once from the command line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <bpf/libbpf.h>

#include "lib/log.h"

static enum log_level cur_level = LOG_INFO;
static unsigned int warn_count;
static bool capturing;
static char kept[2048], taken[sizeof(kept)];
static size_t kept_len;

void log_set_level(enum log_level level)
{
	cur_level = level;
}

enum log_level log_get_level(void)
{
	return cur_level;
}

unsigned int log_warn_count(void)
{
	return warn_count;
}

void log_capture(bool on)
{
	capturing = on;
	kept_len = 0;
	kept[0] = '\0';
}

const char *log_captured(void)
{
	memcpy(taken, kept, kept_len + 1);
	kept_len = 0;
	kept[0] = '\0';
	return taken;
}

/* Append one warning to the store: its lines joined by "; ", cut at the
 * store's size.
 */
static void keep(const char *fmt, va_list ap)
{
	char line[1024];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	for (char *nl = strchr(line, '\n'); nl; nl = strchr(nl, '\n'))
		*nl = ' ';
	if (!n)
		return;
	kept_len += (size_t)snprintf(kept + kept_len, sizeof(kept) - kept_len, "%s%s",
				     kept_len ? "; " : "", line);
	if (kept_len >= sizeof(kept))
		kept_len = sizeof(kept) - 1;
}

static void log_vprint(enum log_level level, const char *fmt, va_list ap)
{
	if (level == LOG_WARN)
		warn_count++;
	if (level == LOG_WARN && capturing) {
		keep(fmt, ap);
		return;
	}
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
