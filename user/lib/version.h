/* SPDX-License-Identifier: MIT */
/*
 * The build's version: the Makefile passes -DLL_VERSION="..." (git describe
 * --always --dirty, or "unknown" outside a git tree).
 */
#ifndef LEASELINE_VERSION_H
#define LEASELINE_VERSION_H

#ifndef LL_VERSION
#define LL_VERSION "unknown"
#endif

#endif /* LEASELINE_VERSION_H */
