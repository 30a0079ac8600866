// SPDX-License-Identifier: MIT
/*
 * File-system helpers (see fs.h). No state.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

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
	FILE *f = fopen(path, "rb");
	size_t cap = 4096, n = 0;
	char *b = NULL;
	int err = 0;

	if (!f)
		return -errno;
	/* Read to the end, whatever the file is (a pipe has no size to ask),
	 * but never keep more than max + 1 bytes: one more says "too big".
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
