/* SPDX-License-Identifier: MIT */
/* Deterministic PRNG for the randomised unit tests (splitmix64): the state
 * lives in each test, so a failure reproduces with the same seed.
 */
#ifndef LEASELINE_TESTS_RND_H
#define LEASELINE_TESTS_RND_H

#include <stdint.h>

static inline uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform-ish in [lo, hi]. */
static inline uint64_t rnd_in(uint64_t *s, uint64_t lo, uint64_t hi)
{
	uint64_t span = hi - lo;

	return span == ~0ULL ? rnd(s) : lo + rnd(s) % (span + 1);
}

#endif
