// SPDX-License-Identifier: MIT
/*
 * The pin directory's lock (pins.h). Invariant: while an agent runs, no
 * other agent loads, applies or attaches anything with its pins.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "log.h"
#include "pins.h"

/* ---- the lock -------------------------------------------------------------------------------- */

/* The pid of the process holding a flock on (dev, ino), from /proc/locks, or 0. */
static int lock_holder(dev_t dev, ino_t ino)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256];
	int pid = 0;

	while (f && !pid && fgets(line, sizeof(line), f)) {
		unsigned int maj, min;
		unsigned long i;
		char kind[16];
		int p;

		/* "1: FLOCK  ADVISORY  WRITE 1234 00:29:13582847 0 EOF"; waiters have "->". */
		if (strstr(line, "->") ||
		    sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%lu", kind, &p, &maj, &min, &i) != 5)
			continue;
		if (!strcmp(kind, "FLOCK") && maj == major(dev) && min == minor(dev) && i == ino)
			pid = p;
	}
	if (f)
		fclose(f);
	return pid;
}

/* "2025-06-01 12:00:03 UTC" for process pid's start, or "" if unknown. */
static void proc_started(int pid, char *buf, size_t len)
{
	char path[64], stat[1024], *p;
	unsigned long long start = 0, btime = 0;
	long tck = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	n = f ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
	if (f)
		fclose(f);
	stat[n] = '\0';
	p = strrchr(stat, ')'); /* the command may hold spaces and parentheses */
	/* After ") ": state is field 3; starttime is field 22. */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu",
			 &start) != 1)
		return;
	f = fopen("/proc/stat", "re");
	while (f && fgets(stat, sizeof(stat), f))
		if (sscanf(stat, "btime %llu", &btime) == 1)
			break;
	if (f)
		fclose(f);
	if (btime && tck > 0) {
		time_t t = (time_t)(btime + start / (unsigned long long)tck);
		struct tm tm;

		if (localtime_r(&t, &tm))
			strftime(buf, len, "%Y-%m-%d %H:%M:%S %Z", &tm);
	}
}

/* Process pid's command line, spaces between arguments, cut to len. */
static void proc_cmdline(int pid, char *buf, size_t len)
{
	char path[64];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	f = fopen(path, "re");
	n = f ? fread(buf, 1, len - 1, f) : 0;
	if (f)
		fclose(f);
	while (n && buf[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
}

int pins_lock(const char *dir, int *fd)
{
	char started[64] = "", cmd[256] = "";
	struct stat sb;
	int err, pid;

	*fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*fd < 0) {
		err = -errno;
		pr_warn("cannot open pin directory '%s': %s\n", dir, strerror(-err));
		return err;
	}
	if (!flock(*fd, LOCK_EX | LOCK_NB))
		return 0;
	err = -errno;
	if (err != -EWOULDBLOCK) {
		pr_warn("cannot lock pin directory '%s': %s\n", dir, strerror(-err));
		goto fail;
	}
	err = -EBUSY;
	pid = fstat(*fd, &sb) ? 0 : lock_holder(sb.st_dev, sb.st_ino);
	if (pid) {
		proc_started(pid, started, sizeof(started));
		proc_cmdline(pid, cmd, sizeof(cmd));
	}
	if (pid)
		pr_warn("pin directory '%s' is held by another agent: pid %d%s%s%s%s%s; two agents on "
			"one pin directory would overwrite each other's policy, leases and buckets: "
			"stop that one first, or give this one a pin-dir of its own\n",
			dir, pid, started[0] ? ", started " : "", started, cmd[0] ? " ('" : "", cmd,
			cmd[0] ? "')" : "");
	else
		pr_warn("pin directory '%s' is held by another agent (a process this one cannot "
			"see: another pid namespace?); two agents on one pin directory would "
			"overwrite each other's policy, leases and buckets: stop that one first, or "
			"give this one a pin-dir of its own\n",
			dir);
fail:
	close(*fd);
	*fd = -1;
	return err;
}

void pins_unlock(int *fd)
{
	if (*fd >= 0)
		close(*fd); /* closing the last descriptor releases the flock */
	*fd = -1;
}
