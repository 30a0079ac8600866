/* SPDX-License-Identifier: MIT */
/*
 * `leaseline coord`: the coordinator daemon (docs/global.md).
 */
#ifndef LEASELINE_COORD_COORD_H
#define LEASELINE_COORD_COORD_H

/* Runs until SIGINT/SIGTERM; returns a process exit code. */
int coord_run(const char *config_path);

#endif /* LEASELINE_COORD_COORD_H */
