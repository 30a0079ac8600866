/* SPDX-License-Identifier: MIT */
/* The Internet checksum for the benchmarks' frames (RFC 1071). */
#ifndef LEASELINE_BENCH_CSUM_H
#define LEASELINE_BENCH_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* One's-complement sum of len bytes (len even) as 16-bit words in memory
 * order, folded and not inverted: ~ of it is the checksum field, and it is
 * also the base to which an incremental update adds.
 */
static inline uint16_t csum_partial16(const void *p, size_t len)
{
	const uint16_t *w = p;
	uint32_t s = 0;

	for (size_t i = 0; i < len / 2; i++)
		s += w[i];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

#endif
