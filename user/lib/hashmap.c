// SPDX-License-Identifier: MIT
/*
 * The keyed hash map (see hashmap.h). SipHash-2-4 as the paper specifies it
 * ("SipHash: a fast short-input PRF", Aumasson and Bernstein, 2012): the
 * message in 64-bit little-endian words, the last one padded with zeros and
 * carrying the length mod 256 in its top byte; c = 2 rounds per word, d = 4
 * after v2 ^= 0xff. Probing: a key's home slot is its tag masked, the run
 * from there to the first empty slot holds it if it is present; deletion
 * moves each later entry of the run back into the hole when its home lets
 * it (wrapping around the end of the table), so no run is ever broken.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "lib/hashmap.h"

#define HMAP_MIN_SLOTS 8u

static inline uint64_t rotl(uint64_t x, unsigned int b)
{
	return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3)                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = rotl(v1, 13);                                                                 \
		v1 ^= v0;                                                                          \
		v0 = rotl(v0, 32);                                                                 \
		v2 += v3;                                                                          \
		v3 = rotl(v3, 16);                                                                 \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = rotl(v3, 21);                                                                 \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = rotl(v1, 17);                                                                 \
		v1 ^= v2;                                                                          \
		v2 = rotl(v2, 32);                                                                 \
	} while (0)

uint64_t hmap_siphash24(const struct hmap_seed *seed, const void *p, size_t len)
{
	const unsigned char *in = p;
	uint64_t v0 = seed->k0 ^ 0x736f6d6570736575ull;
	uint64_t v1 = seed->k1 ^ 0x646f72616e646f6dull;
	uint64_t v2 = seed->k0 ^ 0x6c7967656e657261ull;
	uint64_t v3 = seed->k1 ^ 0x7465646279746573ull;
	uint64_t m;
	size_t i, tail = len & 7;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&m, in + i, 8);
		m = le64toh(m);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	m = (uint64_t)(len & 0xff) << 56;
	for (size_t j = 0; j < tail; j++)
		m |= (uint64_t)in[i + j] << (8 * j);
	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;
	v2 ^= 0xff;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

static inline uint32_t tag_of(const struct hmap *m, const void *key)
{
	uint32_t t = (uint32_t)hmap_siphash24(&m->seed, key, m->key_size);

	return t ? t : 1;
}

int hmap_init(struct hmap *m, size_t key_size, uint32_t max, hmap_eq_fn *eq,
	      const struct hmap_seed *seed)
{
	memset(m, 0, sizeof(*m));
	if (!key_size || key_size > UINT32_MAX || !eq || !max || max > HMAP_MAX_ENTRIES)
		return -EINVAL;
	m->key_size = (uint32_t)key_size;
	m->max = max;
	m->eq = eq;
	if (seed) {
		m->seed = *seed;
		return 0;
	}
	for (;;) {
		ssize_t r = getrandom(&m->seed, sizeof(m->seed), 0);

		if (r == (ssize_t)sizeof(m->seed))
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

void hmap_free(struct hmap *m)
{
	free(m->slot);
	m->slot = NULL;
	m->mask = 0;
	m->n = 0;
}

void hmap_clear(struct hmap *m)
{
	if (m->slot)
		memset(m->slot, 0, ((size_t)m->mask + 1) * sizeof(*m->slot));
	m->n = 0;
}

/* Move every entry into a table of `slots` slots (a power of two). */
static int resize(struct hmap *m, uint32_t slots)
{
	struct hmap_slot *s = calloc(slots, sizeof(*s));
	uint32_t mask = slots - 1;

	if (!s)
		return -ENOMEM;
	for (uint32_t i = 0; m->slot && i <= m->mask; i++) {
		uint32_t j;

		if (!m->slot[i].tag)
			continue;
		for (j = m->slot[i].tag & mask; s[j].tag; j = (j + 1) & mask)
			;
		s[j] = m->slot[i];
	}
	free(m->slot);
	m->slot = s;
	m->mask = mask;
	return 0;
}

/* Slots for n entries at most half full. */
static uint32_t slots_for(uint32_t n)
{
	uint32_t s = HMAP_MIN_SLOTS;

	while (s / 2 < n)
		s *= 2;
	return s;
}

int hmap_reserve(struct hmap *m, uint32_t n)
{
	uint32_t want = slots_for(n < m->max ? n : m->max);

	if (m->slot && m->mask + 1 >= want)
		return 0;
	return resize(m, want);
}

int hmap_copy(struct hmap *dst, const struct hmap *src)
{
	size_t bytes = src->slot ? ((size_t)src->mask + 1) * sizeof(*src->slot) : 0;

	*dst = *src;
	dst->slot = NULL;
	if (!bytes)
		return 0;
	dst->slot = malloc(bytes);
	if (!dst->slot) {
		hmap_free(dst);
		return -ENOMEM;
	}
	memcpy(dst->slot, src->slot, bytes);
	return 0;
}

/* The slot holding key (whose tag is t), or -1. */
static long find(const struct hmap *m, const void *key, uint32_t t)
{
	if (!m->n)
		return -1;
	for (uint32_t i = t & m->mask; m->slot[i].tag; i = (i + 1) & m->mask)
		if (m->slot[i].tag == t && m->eq(m, key, m->slot[i].ref))
			return i;
	return -1;
}

long hmap_find(const struct hmap *m, const void *key)
{
	long i;

	if (!m->n)
		return -1;
	i = find(m, key, tag_of(m, key));
	return i < 0 ? -1 : (long)m->slot[i].ref;
}

int hmap_put(struct hmap *m, const void *key, uint32_t *ref)
{
	uint32_t t = tag_of(m, key), i;
	long at = find(m, key, t);

	if (at >= 0) {
		*ref = m->slot[at].ref;
		return 0;
	}
	if (m->n >= m->max)
		return -ENOSPC;
	if (!m->slot || m->n + 1 > (m->mask + 1) / 2) {
		if (resize(m, m->slot ? 2 * (m->mask + 1) : HMAP_MIN_SLOTS))
			return -ENOMEM;
	}
	for (i = t & m->mask; m->slot[i].tag; i = (i + 1) & m->mask)
		;
	m->slot[i].tag = t;
	m->slot[i].ref = *ref;
	m->n++;
	return 1;
}

bool hmap_del(struct hmap *m, const void *key)
{
	long at = m->n ? find(m, key, tag_of(m, key)) : -1;
	uint32_t hole, j;

	if (at < 0)
		return false;
	hole = j = (uint32_t)at;
	for (;;) {
		uint32_t home;

		j = (j + 1) & m->mask;
		if (!m->slot[j].tag)
			break;
		home = m->slot[j].tag & m->mask;
		/* Entry j may fill the hole unless its home lies cyclically in
		 * (hole, j]: then the hole is before its home.
		 */
		if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
			m->slot[hole] = m->slot[j];
			hole = j;
		}
	}
	m->slot[hole].tag = 0;
	m->n--;
	return true;
}
