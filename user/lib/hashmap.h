/* SPDX-License-Identifier: MIT */
/*
 * One hash map for keys that come off the wire (the coordinator's hot keys,
 * the agent's hot keys and metered series): open addressing with linear
 * probing and backward-shift deletion (no tombstones), keyed with
 * SipHash-2-4 under a 128-bit seed drawn from getrandom() for each map, so
 * that whoever picks the keys cannot aim them at one probe sequence.
 *
 * An index, not a store: the caller keeps its entries in an array of its
 * own (their indexes stable, as its lists name them) and the map finds a
 * key's index ("ref"). A slot is 8 bytes, the ref and 32 bits of the key's
 * hash (0: empty), which probing compares before asking the caller's eq
 * whether its entry holds the key, and which growth and deletion reuse: a
 * key is hashed once per call. The slots come with the first entry and
 * double to stay at most half full; at most max entries (an add beyond is
 * refused), so at most 2 x max slots.
 */
#ifndef LEASELINE_LIB_HASHMAP_H
#define LEASELINE_LIB_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HMAP_MAX_ENTRIES (1u << 30) /* slots stay a power of two below 2^32 */

/* A SipHash key. */
struct hmap_seed {
	uint64_t k0, k1;
};

struct hmap;

/* Whether the caller's entry ref holds key. The map is the caller's, at
 * the same place in its struct, so the caller finds its entries from m
 * (HMAP_OWNER) and a copy of its struct needs no other pointer fixed.
 */
typedef bool hmap_eq_fn(const struct hmap *m, const void *key, uint32_t ref);

#define HMAP_OWNER(m, type, member) ((const type *)((const char *)(m)-offsetof(type, member)))

struct hmap_slot {
	uint32_t tag; /* hash | (hash == 0); 0: empty */
	uint32_t ref;
};

struct hmap {
	struct hmap_slot *slot; /* NULL until the first add */
	uint32_t mask;		/* slots - 1 (slots: a power of two) */
	uint32_t n;		/* entries */
	uint32_t max;		/* entries at most */
	uint32_t key_size;
	hmap_eq_fn *eq;
	struct hmap_seed seed;
};

/* SipHash-2-4 of p[0..len) under seed (Aumasson and Bernstein, 2012). */
uint64_t hmap_siphash24(const struct hmap_seed *seed, const void *p, size_t len);

/* An empty map of keys of key_size bytes (every byte hashed: zero any
 * padding), at most max entries (<= HMAP_MAX_ENTRIES). seed NULL: one from
 * getrandom() (tests pass their own). Allocates nothing. 0, -EINVAL or
 * getrandom's -errno.
 */
int hmap_init(struct hmap *m, size_t key_size, uint32_t max, hmap_eq_fn *eq,
	      const struct hmap_seed *seed);
/* Free the slots: the map is empty, and still usable (freeing twice is
 * fine).
 */
void hmap_free(struct hmap *m);
/* Empty the map, keeping its slots. */
void hmap_clear(struct hmap *m);
/* Room for n entries (at most max) without growing. 0 or -ENOMEM. */
int hmap_reserve(struct hmap *m, uint32_t n);
/* *dst becomes a copy of src (whatever dst held is not freed). 0 or
 * -ENOMEM (then dst is empty).
 */
int hmap_copy(struct hmap *dst, const struct hmap *src);

/* Key's ref, or -1. */
long hmap_find(const struct hmap *m, const void *key);
/* Key's ref in *ref: 0 it was there (*ref is its ref); 1 added, with *ref
 * as its ref; -ENOSPC (max entries) or -ENOMEM.
 */
int hmap_put(struct hmap *m, const void *key, uint32_t *ref);
/* Remove key; false if it was not there. */
bool hmap_del(struct hmap *m, const void *key);

static inline uint32_t hmap_count(const struct hmap *m)
{
	return m->n;
}

#endif /* LEASELINE_LIB_HASHMAP_H */
