// SPDX-License-Identifier: MIT
/* The build's version (version.h); the Makefile passes LL_VERSION_STRING. */
#include "lib/version.h"

#ifndef LL_VERSION_STRING
#define LL_VERSION_STRING "unknown"
#endif

const char ll_version[] = LL_VERSION_STRING;
