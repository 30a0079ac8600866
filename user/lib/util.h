/* SPDX-License-Identifier: MIT */
/* Small macros with no better home. */
#ifndef LEASELINE_LIB_UTIL_H
#define LEASELINE_LIB_UTIL_H

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* LEASELINE_LIB_UTIL_H */
