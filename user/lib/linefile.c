// SPDX-License-Identifier: MIT
/* Line-oriented list files (see linefile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "lib/linefile.h"

/* path for reading, through no symbolic link anywhere on it (openat2's
 * RESOLVE_NO_SYMLINKS, Linux 5.6; O_NOFOLLOW, the last component only,
 * where the call is missing).
 */
static int open_no_symlinks(const char *path)
{
	struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC,
			       .resolve = RESOLVE_NO_SYMLINKS};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	return fd;
}

int line_file_open(struct line_file *lf, const char *path, const char *what, struct cfg_err *err)
{
	/* A regular file only: opening a FIFO or a device could block or
	 * never end (paths come from policy files, a coordinator's included);
	 * and no symbolic link, so a path names the file it seems to.
	 */
	int fd = open_no_symlinks(path), rc;
	const char *why;
	struct stat sb;

	memset(lf, 0, sizeof(*lf));
	lf->path = path;
	lf->what = what;
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
		why = rc == -ELOOP	? "a symbolic link is on its path (name the file itself)"
		      : rc == -EINVAL ? "not a regular file"
				      : strerror(-rc);
		snprintf(err->msg, sizeof(err->msg), "%s: cannot read %s: %s", path, what, why);
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
	/* Before its first entry, the file may be anything readable (a policy
	 * naming /etc/shadow): what the line holds is not shown.
	 */
	if (!lf->entries && lf->text)
		snprintf(msg, sizeof(msg),
			 "does not parse as %s, nor did any line before it (its text is not shown)",
			 lf->what ? lf->what : "a list file");
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
