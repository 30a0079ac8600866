/* SPDX-License-Identifier: MIT */
/*
 * What the harnesses that need files share: one temp directory a process
 * (in /dev/shm when it can: SQLite's and the store's fsyncs cost nothing
 * there), made on first use. libFuzzer ends a process with _Exit when it
 * finds a crash or its time is up, so atexit cannot be relied on: each
 * directory is named by its process, and the first use removes those of
 * processes gone.
 */
#ifndef LEASELINE_TESTS_FUZZ_TMP_H
#define LEASELINE_TESTS_FUZZ_TMP_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static int fuzz_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void fuzz_rm_tree(const char *path)
{
	nftw(path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Directories base/ll-fuzz-NAME-PID-* of processes that are gone. */
static void fuzz_rm_stale(const char *base, const char *prefix)
{
	size_t pl = strlen(prefix);
	DIR *d = opendir(base);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char path[512], *end;
		long pid;

		if (strncmp(de->d_name, prefix, pl))
			continue;
		pid = strtol(de->d_name + pl, &end, 10);
		if (*end != '-' || pid <= 0 || !kill((pid_t)pid, 0) || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
		fuzz_rm_tree(path);
	}
	if (d)
		closedir(d);
}

static char fuzz_dir_path[128];

static void fuzz_dir_rm(void)
{
	fuzz_rm_tree(fuzz_dir_path);
}

/* This process's directory for harness `name` (made on the first call). */
static const char *fuzz_dir(const char *name)
{
	const char *base = access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm";
	char prefix[64];

	if (fuzz_dir_path[0])
		return fuzz_dir_path;
	snprintf(prefix, sizeof(prefix), "ll-fuzz-%s-", name);
	fuzz_rm_stale(base, prefix);
	snprintf(fuzz_dir_path, sizeof(fuzz_dir_path), "%s/%s%d-XXXXXX", base, prefix,
		 (int)getpid());
	if (!mkdtemp(fuzz_dir_path))
		abort();
	atexit(fuzz_dir_rm); /* a run that ends normally (-runs=N) */
	return fuzz_dir_path;
}

/* Write text to dir/name (abort on failure: a harness without its files
 * tests nothing).
 */
static void fuzz_write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f))
		abort();
}

#endif /* LEASELINE_TESTS_FUZZ_TMP_H */
