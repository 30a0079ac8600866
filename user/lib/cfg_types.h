/* SPDX-License-Identifier: MIT */
/*
 * What the configuration walker (walk.h) and the schema (config.h) share,
 * without either including the other: the error every reader of a file
 * reports, one line "FILE:LINE:COL: message" (1-based line and column of
 * the offending node), the sizes of a host:port and a path, and the tls:
 * section both daemons' files share.
 */
#ifndef LEASELINE_LIB_CFG_TYPES_H
#define LEASELINE_LIB_CFG_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CFG_ERR_LEN  512
#define CFG_ADDR_LEN 128 /* "host:port" or "[v6]:port", NUL included */
#define CFG_PATH_LEN 4096
/* Coordinator replicas an agent may list, and etcd members a replica may. */
#define CFG_MAX_COORDINATORS 8

/* tls: {cert, key, ca} of an agent or coordinator file (tls.h). */
struct cfg_tls {
	bool set;
	char cert[CFG_PATH_LEN]; /* this side's certificate (PEM; a chain may follow) */
	char key[CFG_PATH_LEN];	 /* its private key (PEM) */
	char ca[CFG_PATH_LEN];	 /* the CA that signs the other side's certificates */
};

struct cfg_err {
	char msg[CFG_ERR_LEN]; /* "FILE:LINE:COL: message", no trailing newline */
	/* The same place apart, for callers that report it as fields (check -j):
	 * the file the message is about ("" when none), its 1-based line and
	 * column (0 when the message is about the whole file).
	 */
	char file[CFG_PATH_LEN];
	unsigned int line, col;
};

static inline void cfg_err_at(struct cfg_err *e, const char *file, size_t line, size_t col)
{
	snprintf(e->file, sizeof(e->file), "%s", file ? file : "");
	e->line = (unsigned int)line;
	e->col = (unsigned int)col;
}

#endif /* LEASELINE_LIB_CFG_TYPES_H */
