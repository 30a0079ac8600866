/* SPDX-License-Identifier: MIT */
/*
 * The build's version, one string for every place that shows it: `leaseline
 * -V`/`--version`/`version`, logs, metrics. The Makefile makes it at build
 * time from `git describe` ("0.2.0" on a tag v0.2.0, "0.2.0-3-gabc1234" past
 * it; without a tag, VERSION in the Makefile and the commit:
 * "0.1.0+g3d65f32ab12c", "-dirty" when the tree had changes; outside git,
 * VERSION alone). `make LL_VERSION=...` overrides it (packagers).
 */
#ifndef LEASELINE_LIB_VERSION_H
#define LEASELINE_LIB_VERSION_H

/* NUL-terminated, never empty. A const char[], not a literal: print it with
 * "%s" (only version.o is rebuilt when the version changes).
 */
extern const char ll_version[];
#define LL_VERSION ll_version

#endif /* LEASELINE_LIB_VERSION_H */
