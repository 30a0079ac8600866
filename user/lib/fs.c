// SPDX-License-Identifier: MIT
/*
 * File-system helpers (see fs.h). No state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

#include <bpf/bpf.h>

#include "lib/fs.h"

int fs_mkdir_p(const char *dir, mode_t mode)
{
	char buf[PATH_MAX];

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(buf, mode) && errno != EEXIST ? -errno : 0;
}

int fs_read_file(const char *path, size_t max, char **buf, size_t *len)
{
	/* A regular file only: a FIFO would block a daemon's loop in open()
	 * or read() on a reload (opened without blocking, then refused).
	 */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	size_t cap = 4096, n = 0;
	struct stat sb;
	char *b = NULL;
	int err = 0;
	FILE *f;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		err = S_ISDIR(sb.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return err;
	}
	f = fdopen(fd, "rb");
	if (!f) {
		err = -errno;
		close(fd);
		return err;
	}
	/* Read to the end, but never keep more than max + 1 bytes: one more
	 * says "too big".
	 */
	for (;;) {
		size_t got;

		if (!b || n + 1 == cap) {
			char *nb = realloc(b, b ? cap * 2 : cap);

			if (!nb) {
				err = -ENOMEM;
				break;
			}
			cap = b ? cap * 2 : cap;
			b = nb;
		}
		got = fread(b + n, 1, cap - n - 1, f); /* room for the NUL */
		n += got;
		if (n > max) {
			err = -EFBIG;
			break;
		}
		if (got == 0) {
			if (ferror(f))
				err = errno ? -errno : -EIO;
			break;
		}
	}
	fclose(f);
	if (err) {
		free(b);
		return err;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

uint64_t fs_netns_ino(void)
{
	struct stat sb;

	return stat("/proc/self/ns/net", &sb) ? 0 : (uint64_t)sb.st_ino;
}

int fs_pin_get(const char *path)
{
	int o = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd, err;
	char via[32];
	struct stat sb;

	if (o < 0)
		return -errno;
	if (fstat(o, &sb))
		err = -errno;
	else
		err = S_ISLNK(sb.st_mode) ? -ELOOP : 0;
	if (err) {
		close(o);
		return err;
	}
	snprintf(via, sizeof(via), "/proc/self/fd/%d", o);
	fd = bpf_obj_get(via);
	err = fd < 0 ? -errno : 0;
	close(o);
	return fd < 0 ? err : fd;
}
