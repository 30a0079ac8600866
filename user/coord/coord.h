/* SPDX-License-Identifier: MIT */
/*
 * `leaseline coord`: the coordinator daemon (docs/global.md).
 */
#ifndef LEASELINE_COORD_COORD_H
#define LEASELINE_COORD_COORD_H

#include <stdbool.h>

/* Runs until SIGINT/SIGTERM; returns a process exit code. */
int coord_run(const char *config_path);
/* `leaseline coord-status`: etcd's view and the replica's own (coord_status.c);
 * 0 healthy, 1 not (why is printed), 2 a bad file. *printed: the document went out.
 */
int coord_status(const char *config_path, bool json, bool *printed);

#endif /* LEASELINE_COORD_COORD_H */
