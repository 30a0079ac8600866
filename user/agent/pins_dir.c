// SPDX-License-Identifier: MIT
/*
 * The pin directory itself (pins.h): who may hold it (one agent at a time,
 * a flock on the directory) and who may write it (pins_dir_audit: the
 * directory and every one above it). Its maps and their layout: pins.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "lib/monotonic.h"
#include "lib/log.h"
#include "agent/pins.h"

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
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
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

/* Who may change what is at path: root, or this process's user. */
static bool trusted_owner(const struct stat *sb)
{
	return sb->st_uid == 0 || sb->st_uid == geteuid();
}

/* Every directory above dir, up to /: root's (or this user's), and writable
 * by no one else unless sticky (others may add names there, but neither
 * rename nor remove ours). Whoever could write one could move the pin
 * directory aside and put one of their own in its place, as OpenSSH's
 * StrictModes reasons for a home directory. The sticky exception is a
 * bpffs mounted without mode=, whose root is 1777 (/sys/fs/bpf, often).
 * Parents not made yet are skipped: the agent makes them, 0700.
 */
static int pin_dir_parents_audit(const char *dir)
{
	char want[PATH_MAX], real[PATH_MAX], *cut;
	struct stat sb;

	if (snprintf(want, sizeof(want), "%s", dir) >= (int)sizeof(want))
		return -ENAMETOOLONG;
	for (;;) { /* the nearest parent that is there */
		cut = strrchr(want, '/');
		if (!cut)
			snprintf(want, sizeof(want), ".");
		else if (cut == want)
			want[1] = '\0';
		else
			*cut = '\0';
		if (realpath(want, real))
			break;
		if (errno != ENOENT || !strcmp(want, "/") || !strcmp(want, ".")) {
			int err = -errno;

			pr_warn("pin directory '%s': cannot resolve '%s': %s\n", dir, want,
				strerror(-err));
			return err;
		}
	}
	for (;;) {
		if (stat(real, &sb)) {
			int err = -errno;

			pr_warn("pin directory '%s': '%s': %s\n", dir, real, strerror(-err));
			return err;
		}
		if (!trusted_owner(&sb) || ((sb.st_mode & 022) && !(sb.st_mode & S_ISVTX))) {
			pr_warn("pin directory '%s': '%s' above it is mode %03o, owned by uid %u: "
				"whoever else can write there could swap the pin directory for their "
				"own; make it root's and not group- or other-writable, or choose a "
				"pin-dir elsewhere; nothing loaded, pinned or attached\n",
				dir, real, (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid);
			return -EPERM;
		}
		if (!strcmp(real, "/"))
			return 0;
		cut = strrchr(real, '/');
		if (cut == real)
			real[1] = '\0';
		else
			*cut = '\0';
	}
}

/* Before anything is made there: a pin directory that is a symlink, not a
 * directory, another user's, or that its group or others can write (and so
 * plant pins or swap maps in) is refused, like the coordinator's state-dir;
 * so is one under a directory others could swap it in
 * (pin_dir_parents_audit). The agent never goes through a symlink there:
 * pins_lock opens the directory O_NOFOLLOW; every pin (maps, links) is
 * opened O_PATH|O_NOFOLLOW and got through /proc/self/fd (fs_pin_get), and
 * libbpf's load is handed those fds (pins_prepare): no path is opened
 * twice. The agent chowns nothing there (privs.c only drops capabilities).
 * A bpffs mount's root takes its mode from the mount's mode= (1777 without
 * one): mounted like that the directory is refused; the agent's own mount
 * is mode=0700. Missing: fine, the agent makes it (0700).
 */
int pins_dir_audit(const char *dir)
{
	struct stat sb;
	int err = pin_dir_parents_audit(dir);

	if (err)
		return err;
	if (lstat(dir, &sb)) {
		err = -errno;
		if (err == -ENOENT)
			return 0;
		pr_warn("pin directory '%s': %s\n", dir, strerror(-err));
		return err;
	}
	if (S_ISLNK(sb.st_mode)) {
		pr_warn("pin directory '%s' is a symlink: refusing it (pin-dir must name the "
			"directory itself); nothing loaded, pinned or attached\n",
			dir);
		return -ELOOP;
	}
	if (!S_ISDIR(sb.st_mode)) {
		pr_warn("pin directory '%s' is not a directory; nothing loaded, pinned or "
			"attached\n",
			dir);
		return -ENOTDIR;
	}
	if ((sb.st_mode & 022) || !trusted_owner(&sb)) {
		pr_warn("pin directory '%s' is mode %03o, owned by uid %u: another user could "
			"plant pins or replace maps there; chown root and chmod 0700 it; nothing "
			"loaded, pinned or attached\n",
			dir, (unsigned)(sb.st_mode & 0777), (unsigned)sb.st_uid);
		return -EPERM;
	}
	return 0;
}

int pins_lock(const char *dir, int *fd)
{
	char started[64] = "", cmd[256] = "";
	struct stat sb;
	int err, pid;

	*fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
		pr_warn(
		    "pin directory '%s' is held by another agent: pid %d%s%s%s%s%s; two agents on "
		    "one pin directory would overwrite each other's policy, leases and buckets: "
		    "stop that one first, or give this one a pin-dir of its own\n",
		    dir, pid, started[0] ? ", started " : "", started, cmd[0] ? " ('" : "", cmd,
		    cmd[0] ? "')" : "");
	else
		pr_warn(
		    "pin directory '%s' is held by another agent (a process this one cannot "
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
