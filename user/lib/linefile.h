/* SPDX-License-Identifier: MIT */
/*
 * Line-oriented list files (override files, prefix sets): a regular file
 * only, reached through no symbolic link, read a line at a time with a
 * bound on its length, and errors as FILE:LINE:COL of the line being read;
 * until a line has been read as an entry, an error shows none of its text. One reader, so every list file is
 * opened, bounded and reported alike.
 */
#ifndef LEASELINE_LIB_LINEFILE_H
#define LEASELINE_LIB_LINEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/cfg_types.h"

#define LINE_FILE_MAX 512 /* longest line, newline excluded */

struct line_file {
	const char *path;
	const char *what; /* its kind, as line_file_open was told */
	uint32_t line;	  /* the current line's number, 1-based */
	uint32_t entries; /* lines read as entries so far (the caller counts them) */
	const char *text; /* the current line (NUL-terminated, no newline), for columns */
	struct cfg_err *err;
	FILE *f;
	char buf[LINE_FILE_MAX + 2];
};

/* Open path for reading; what names its kind in the error ("overrides",
 * "the prefix set"). 0 or a negative errno (err set when given).
 */
int line_file_open(struct line_file *lf, const char *path, const char *what, struct cfg_err *err);
/* The next line into lf->buf (lf->text, lf->line): 1, 0 at the end, or a
 * negative errno (a line too long: -EINVAL with the error at it; a read
 * error: -EIO).
 */
int line_file_next(struct line_file *lf);
void line_file_close(struct line_file *lf);
/* Set the error "PATH:LINE:COL: message" (COL of `at` in lf->text; no
 * column when at is NULL) and return -EINVAL. Before the first entry
 * (lf->entries 0) the message says only that the file is not of its kind.
 */
__attribute__((format(printf, 3, 4))) int line_file_fail(struct line_file *lf, const char *at,
							 const char *fmt, ...);
/* Room for one more element in *v (n used of *cap, each size bytes),
 * doubling from first: 0 or -ENOMEM (*v unchanged then).
 */
int line_file_grow(void **v, size_t *cap, size_t n, size_t size, size_t first);

#endif
