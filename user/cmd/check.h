/* SPDX-License-Identifier: MIT */
/* `leaseline check -c FILE`: validate an agent, coordinator or policy file. */
#ifndef LEASELINE_CMD_CHECK_H
#define LEASELINE_CMD_CHECK_H

#include <stdbool.h>

#include "lib/cfg_types.h"

enum { CHECK_RUNTIME = 1, CHECK_USAGE = 2 };

/* Check path; print "FILE: ok (...)" (json: one object) and return 0, or
 * return CHECK_USAGE (a configuration error) or CHECK_RUNTIME (out of
 * memory) with *e the error, printed by the caller.
 */
int check_file(const char *path, bool json, struct cfg_err *e);

#endif /* LEASELINE_CMD_CHECK_H */
