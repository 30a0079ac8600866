// SPDX-License-Identifier: MIT
/* Line-oriented list files (see linefile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/linefile.h"

int line_file_open(struct line_file *lf, const char *path, const char *what, struct cfg_err *err)
{
	/* A regular file only: opening a FIFO or a device could block or
	 * never end (paths come from policy files, a coordinator's included).
	 */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), rc;
	struct stat sb;

	memset(lf, 0, sizeof(*lf));
	lf->path = path;
	lf->err = err;
	if (fd >= 0 && (fstat(fd, &sb) || !S_ISREG(sb.st_mode))) {
		close(fd);
		fd = -1;
		errno = EINVAL;
	}
	if (fd >= 0 && !(lf->f = fdopen(fd, "r")))
		close(fd);
	if (lf->f)
		return 0;
	rc = -errno;
	if (err) {
		snprintf(err->msg, sizeof(err->msg), "%s: cannot read %s: %s", path, what,
			 strerror(-rc));
		cfg_err_at(err, path, 0, 0);
	}
	return rc;
}

int line_file_next(struct line_file *lf)
{
	size_t len;

	if (!fgets(lf->buf, sizeof(lf->buf), lf->f))
		return ferror(lf->f) ? -EIO : 0;
	len = strlen(lf->buf);
	lf->line++;
	lf->text = lf->buf;
	if (len && lf->buf[len - 1] == '\n')
		lf->buf[--len] = '\0';
	else if (len > LINE_FILE_MAX)
		return line_file_fail(lf, NULL, "line longer than %d bytes", LINE_FILE_MAX);
	return 1;
}

void line_file_close(struct line_file *lf)
{
	if (lf->f)
		fclose(lf->f);
	lf->f = NULL;
}

int line_file_fail(struct line_file *lf, const char *at, const char *fmt, ...)
{
	size_t col = at && lf->text ? (size_t)(at - lf->text) + 1 : 0;
	char msg[CFG_ERR_LEN - 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (lf->err) {
		if (col)
			snprintf(lf->err->msg, sizeof(lf->err->msg), "%s:%u:%zu: %s", lf->path,
				 lf->line, col, msg);
		else
			snprintf(lf->err->msg, sizeof(lf->err->msg), "%s:%u: %s", lf->path,
				 lf->line, msg);
		cfg_err_at(lf->err, lf->path, lf->line, col);
	}
	return -EINVAL;
}

int line_file_grow(void **v, size_t *cap, size_t n, size_t size, size_t first)
{
	size_t c;
	void *nv;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : first;
	nv = realloc(*v, c * size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = c;
	return 0;
}
