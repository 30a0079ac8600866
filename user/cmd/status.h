/* SPDX-License-Identifier: MIT */
/*
 * `leaseline status`: what the pinned maps say — interfaces, policy version,
 * limits with their counters and key counts, rules, parse failures.
 */
#ifndef LEASELINE_CMD_STATUS_H
#define LEASELINE_CMD_STATUS_H

#include <stdbool.h>

int status_print(const char *pin_dir, bool json);

#endif /* LEASELINE_CMD_STATUS_H */
