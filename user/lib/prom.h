/* SPDX-License-Identifier: MIT */
/*
 * Prometheus text exposition (format 0.0.4) helpers for both daemons'
 * metrics. Invariant the writers keep: every family is announced once with
 * # HELP and # TYPE, and all its samples follow it before the next family
 * starts (promtool check metrics holds them to it in make check).
 */
#ifndef LEASELINE_LIB_PROM_H
#define LEASELINE_LIB_PROM_H

#include <stdio.h>

/* # HELP and # TYPE lines of family name; type is counter or gauge. */
void prom_family(FILE *f, const char *name, const char *type, const char *help);

/* A sample's value and the end of its line: an integer exactly while it is
 * one (below 2^53), else 9 significant digits.
 */
void prom_value(FILE *f, double v);

/* The leaseline_build_info family: one sample, value 1, label version
 * (LL_VERSION, user/lib/version.h). Both daemons write it.
 */
void prom_build_info(FILE *f);

#endif /* LEASELINE_LIB_PROM_H */
