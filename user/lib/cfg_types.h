/* SPDX-License-Identifier: MIT */
/*
 * What the configuration walker (walk.h) and the schema (config.h) share,
 * without either including the other: the error every reader of a file
 * reports, one line "FILE:LINE:COL: message" (1-based line and column of
 * the offending node), and the size of a host:port.
 */
#ifndef LEASELINE_CFG_TYPES_H
#define LEASELINE_CFG_TYPES_H

#define CFG_ERR_LEN  512
#define CFG_ADDR_LEN 128 /* "host:port" or "[v6]:port", NUL included */

struct cfg_err {
	char msg[CFG_ERR_LEN]; /* "FILE:LINE:COL: message", no trailing newline */
};

#endif /* LEASELINE_CFG_TYPES_H */
