/* SPDX-License-Identifier: MIT */
/* Small macros with no better home. */
#ifndef LEASELINE_LIB_UTIL_H
#define LEASELINE_LIB_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* qsort of n elements, none at all included: qsort's base may not be
 * NULL even then (UBSan: an empty table's NULL array is UB).
 */
static inline void sort_n(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
	if (n)
		qsort(base, n, size, cmp);
}

/* a + b and a x b, UINT64_MAX when they would wrap: for figures that came
 * from the network, where a wrapped sum would read as small.
 */
static inline uint64_t u64_sat_add(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t u64_sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

#endif /* LEASELINE_LIB_UTIL_H */
