// SPDX-License-Identifier: MIT
/*
 * Host tests of user/lib/hashmap.c: SipHash-2-4 against the published
 * vectors; the map's bounds, growth, copy and clear; deletion inside runs
 * that wrap around the end of the table; keys aimed at one slot; and
 * randomised runs, many seeds, of puts, finds and deletes checked against a
 * plain array after every step, with the table's structure (every entry
 * reachable from its home, its tag its key's hash, each entry in one slot,
 * the count) checked as they go.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib/hashmap.h"
#include "unit/rnd.h"

/* Key 00 01 .. 0f, as two little-endian words. */
static const struct hmap_seed vec_seed = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};

/* SipHash-2-4 of the messages 00, 00 01, .. 00 01 .. 3e (0 to 63 bytes)
 * under vec_seed, as published with the reference implementation; entry
 * 15 is the paper's worked example (appendix A).
 */
static const uint64_t sip24_vectors[64] = {
    0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
    0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
    0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
    0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
    0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
    0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
    0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
    0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
    0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
    0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
    0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
    0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
    0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
    0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
    0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull,
};

static void test_siphash_vectors(void **state)
{
	unsigned char msg[64];

	(void)state;
	for (int i = 0; i < 64; i++)
		msg[i] = (unsigned char)i;
	for (size_t len = 0; len < 64; len++)
		assert_true(hmap_siphash24(&vec_seed, msg, len) == sip24_vectors[len]);
	/* Unaligned input hashes the same. */
	{
		unsigned char buf[65];

		memcpy(buf + 1, msg, 63);
		assert_true(hmap_siphash24(&vec_seed, buf + 1, 63) == sip24_vectors[63]);
	}
}

/* ---- an owner: entries in an array, the map finding their index ------- */

#define KSZ 13 /* an odd size */

struct owner {
	struct hmap m;
	unsigned char (*store)[KSZ]; /* store[ref]: the key of entry ref */
	uint32_t eq_calls;
};

static bool owner_eq(const struct hmap *m, const void *key, uint32_t ref)
{
	struct owner *o = (struct owner *)HMAP_OWNER(m, struct owner, m);

	o->eq_calls++;
	return !memcmp(o->store[ref], key, KSZ);
}

static void key_of(uint64_t id, unsigned char k[KSZ])
{
	memset(k, 0, KSZ);
	memcpy(k, &id, sizeof(id));
	k[KSZ - 1] = 0x5a;
}

static void owner_init(struct owner *o, uint32_t max, uint32_t nstore, const struct hmap_seed *s)
{
	memset(o, 0, sizeof(*o));
	assert_int_equal(hmap_init(&o->m, KSZ, max, owner_eq, s), 0);
	o->store = calloc(nstore, KSZ);
	assert_non_null(o->store);
}

static void owner_free(struct owner *o)
{
	hmap_free(&o->m);
	free(o->store);
}

/* Entry ref holds the key of id; put it in the map. */
static int owner_put(struct owner *o, uint64_t id, uint32_t ref, uint32_t *got)
{
	unsigned char k[KSZ];

	key_of(id, k);
	*got = ref;
	return hmap_put(&o->m, k, got);
}

static long owner_find(struct owner *o, uint64_t id)
{
	unsigned char k[KSZ];

	key_of(id, k);
	return hmap_find(&o->m, k);
}

static bool owner_del(struct owner *o, uint64_t id)
{
	unsigned char k[KSZ];

	key_of(id, k);
	return hmap_del(&o->m, k);
}

static uint32_t tag_of(const struct hmap *m, const void *key)
{
	uint32_t t = (uint32_t)hmap_siphash24(&m->seed, key, m->key_size);

	return t ? t : 1;
}

/* Every entry's tag is its key's, no empty slot lies between its home and
 * its slot, each ref is in one slot (nref: refs below it), the count is
 * right, the table at most half full.
 */
static void check_structure(const struct owner *o, uint32_t nref)
{
	const struct hmap *m = &o->m;
	uint8_t *seen = calloc(nref ? nref : 1, 1);
	uint32_t n = 0;

	assert_non_null(seen);
	if (!m->slot) {
		assert_int_equal(m->n, 0);
		free(seen);
		return;
	}
	assert_true(2 * m->n <= m->mask + 1);
	for (uint32_t i = 0; i <= m->mask; i++) {
		const struct hmap_slot *s = &m->slot[i];

		if (!s->tag)
			continue;
		n++;
		assert_true(s->ref < nref);
		assert_false(seen[s->ref]);
		seen[s->ref] = 1;
		assert_int_equal(s->tag, tag_of(m, o->store[s->ref]));
		for (uint32_t j = s->tag & m->mask; j != i; j = (j + 1) & m->mask)
			assert_true(m->slot[j].tag != 0);
	}
	assert_int_equal(n, m->n);
	free(seen);
}

/* ---- basics ------------------------------------------------------------- */

static void test_basics(void **state)
{
	struct hmap_seed seed = {1, 2};
	struct owner o;
	uint32_t ref;

	(void)state;
	assert_int_equal(hmap_init(&o.m, 0, 10, owner_eq, &seed), -EINVAL);
	assert_int_equal(hmap_init(&o.m, 4, 0, owner_eq, &seed), -EINVAL);
	assert_int_equal(hmap_init(&o.m, 4, 10, NULL, &seed), -EINVAL);
	assert_int_equal(hmap_init(&o.m, 4, HMAP_MAX_ENTRIES + 1, owner_eq, &seed), -EINVAL);
	owner_init(&o, 100, 100, &seed);
	assert_null(o.m.slot); /* nothing until the first put */
	assert_int_equal(owner_find(&o, 7), -1);
	assert_false(owner_del(&o, 7));
	assert_int_equal(o.eq_calls, 0);

	key_of(7, o.store[42]);
	assert_int_equal(owner_put(&o, 7, 42, &ref), 1);
	assert_int_equal(ref, 42);
	assert_int_equal(owner_put(&o, 7, 43, &ref), 0); /* there: its ref */
	assert_int_equal(ref, 42);
	assert_int_equal(owner_find(&o, 7), 42);
	assert_int_equal(owner_find(&o, 8), -1);
	assert_int_equal(hmap_count(&o.m), 1);
	assert_true(owner_del(&o, 7));
	assert_false(owner_del(&o, 7));
	assert_int_equal(owner_find(&o, 7), -1);
	assert_int_equal(hmap_count(&o.m), 0);

	/* Refs are the caller's: any value, kept as given. */
	for (uint32_t i = 0; i < 50; i++) {
		key_of(i, o.store[99 - i]);
		assert_int_equal(owner_put(&o, i, 99 - i, &ref), 1);
	}
	for (uint32_t i = 0; i < 100; i++)
		assert_int_equal(owner_find(&o, i), i < 50 ? (long)(99 - i) : -1);
	check_structure(&o, 100);
	/* The caller's eq is asked only on a tag match: about once a find. */
	o.eq_calls = 0;
	for (uint32_t i = 0; i < 100; i++)
		owner_find(&o, i);
	assert_true(o.eq_calls >= 50 && o.eq_calls <= 52);
	owner_free(&o);
	hmap_free(&o.m); /* twice is fine */
}

/* At most max entries: the put after is refused until one goes; the table
 * never passes 2 x max slots (rounded up to a power of two).
 */
static void test_bounded(void **state)
{
	struct hmap_seed seed = {3, 4};
	struct owner o;
	uint32_t ref;

	(void)state;
	owner_init(&o, 100, 200, &seed);
	for (uint32_t i = 0; i < 110; i++)
		key_of(i, o.store[i]);
	for (uint32_t i = 0; i < 100; i++)
		assert_int_equal(owner_put(&o, i, i, &ref), 1);
	for (uint32_t i = 100; i < 110; i++)
		assert_int_equal(owner_put(&o, i, i, &ref), -ENOSPC);
	assert_int_equal(o.m.mask + 1, 256);
	/* One there already is found, not refused. */
	assert_int_equal(owner_put(&o, 5, 5, &ref), 0);
	assert_true(owner_del(&o, 5));
	assert_int_equal(owner_put(&o, 100, 100, &ref), 1);
	assert_int_equal(owner_put(&o, 101, 101, &ref), -ENOSPC);
	assert_int_equal(hmap_count(&o.m), 100);
	/* reserve stops at max. */
	assert_int_equal(hmap_reserve(&o.m, 1000000), 0);
	assert_int_equal(o.m.mask + 1, 256);
	check_structure(&o, 200);
	owner_free(&o);
}

/* Growth from 8 slots to a million entries, every one found after; clear
 * keeps the slots, free gives them back and the map goes on; reserve sizes
 * the table once.
 */
static void test_growth_clear_reserve(void **state)
{
	struct hmap_seed seed = {5, 6};
	const uint32_t N = 1u << 20;
	struct owner o;
	uint32_t ref;

	(void)state;
	owner_init(&o, HMAP_MAX_ENTRIES, N + 1000, &seed);
	for (uint32_t i = 0; i < N + 1000; i++)
		key_of(i, o.store[i]);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(owner_put(&o, i, i, &ref), 1);
	assert_int_equal(o.m.mask + 1, 2 * N);
	for (uint32_t i = 0; i < N + 1000; i++)
		assert_int_equal(owner_find(&o, i), i < N ? (long)i : -1);
	{
		struct hmap_slot *s = o.m.slot;

		hmap_clear(&o.m);
		assert_ptr_equal(o.m.slot, s);
		assert_int_equal(hmap_count(&o.m), 0);
		assert_int_equal(owner_find(&o, 1), -1);
		assert_int_equal(owner_put(&o, 1, 1, &ref), 1);
		assert_int_equal(o.m.mask + 1, 2 * N);
	}
	hmap_free(&o.m);
	assert_null(o.m.slot);
	assert_true(o.m.seed.k0 == 5 && o.m.seed.k1 == 6 && o.m.key_size == KSZ);
	assert_int_equal(owner_find(&o, 1), -1);
	assert_int_equal(hmap_reserve(&o.m, 1000), 0);
	assert_int_equal(o.m.mask + 1, 2048);
	{
		struct hmap_slot *s = o.m.slot;

		for (uint32_t i = 0; i < 1000; i++)
			assert_int_equal(owner_put(&o, i, i, &ref), 1);
		assert_ptr_equal(o.m.slot, s); /* no growth */
	}
	check_structure(&o, N + 1000);
	owner_free(&o);
}

/* A copy is its own: the owner struct copied, its map copied, each goes on
 * alone (eq finds the copy's entries through the copy's map).
 */
static void test_copy(void **state)
{
	struct hmap_seed seed = {7, 8};
	struct owner a, b, e;
	uint32_t ref;

	(void)state;
	owner_init(&a, 1000, 300, &seed);
	for (uint32_t i = 0; i < 300; i++)
		key_of(i, a.store[i]);
	e = a;
	assert_int_equal(hmap_copy(&e.m, &a.m), 0); /* an empty one */
	assert_null(e.m.slot);
	for (uint32_t i = 0; i < 300; i++)
		assert_int_equal(owner_put(&a, i, i, &ref), 1);
	b = a;
	b.store = malloc(300 * KSZ);
	assert_non_null(b.store);
	memcpy(b.store, a.store, 300 * KSZ);
	assert_int_equal(hmap_copy(&b.m, &a.m), 0);
	assert_ptr_not_equal(b.m.slot, a.m.slot);
	for (uint32_t i = 0; i < 300; i += 2)
		assert_true(owner_del(&a, i));
	b.eq_calls = 0;
	for (uint32_t i = 0; i < 300; i++) {
		assert_int_equal(owner_find(&b, i), i);
		assert_int_equal(owner_find(&a, i), i % 2 ? (long)i : -1);
	}
	assert_true(b.eq_calls >= 300); /* b's own eq, through b */
	assert_int_equal(owner_put(&e, 1, 1, &ref), 1);
	check_structure(&a, 300);
	check_structure(&b, 300);
	hmap_free(&e.m);
	hmap_free(&b.m);
	free(b.store);
	owner_free(&a);
}

/* The seed decides where keys go: another seed, another table; the same
 * seed, the same; NULL draws one (two maps, two seeds).
 */
static void test_seeds(void **state)
{
	struct hmap_seed s1 = {9, 10}, s2 = {9, 11};
	struct owner a, b, c;
	struct hmap r1, r2;
	uint32_t same = 0, ref;

	(void)state;
	owner_init(&a, 1000, 500, &s1);
	owner_init(&b, 1000, 500, &s2);
	owner_init(&c, 1000, 500, &s1);
	for (uint32_t i = 0; i < 500; i++) {
		key_of(i, a.store[i]);
		key_of(i, b.store[i]);
		key_of(i, c.store[i]);
		owner_put(&a, i, i, &ref);
		owner_put(&b, i, i, &ref);
		owner_put(&c, i, i, &ref);
	}
	for (uint32_t i = 0; i <= a.m.mask; i++) {
		assert_memory_equal(&a.m.slot[i], &c.m.slot[i], sizeof(a.m.slot[i]));
		same += a.m.slot[i].tag && b.m.slot[i].tag && a.m.slot[i].ref == b.m.slot[i].ref;
	}
	assert_true(same < 50); /* by chance, about one */
	assert_int_equal(hmap_init(&r1, 4, 10, owner_eq, NULL), 0);
	assert_int_equal(hmap_init(&r2, 4, 10, owner_eq, NULL), 0);
	assert_true(r1.seed.k0 != r2.seed.k0 || r1.seed.k1 != r2.seed.k1);
	owner_free(&a);
	owner_free(&b);
	owner_free(&c);
}

/* Keys aimed at one slot under one seed (what an attacker who knew the hash
 * would send) spread under another: the longest run they make stays short.
 */
static void test_aimed_keys(void **state)
{
	struct hmap_seed known = {11, 12}, other = {13, 14};
	struct owner probe, o;
	uint32_t n = 0, longest = 0, ref;
	unsigned char k[KSZ];

	(void)state;
	owner_init(&probe, 512, 64, &known);
	owner_init(&o, 512, 64, &other);
	/* 64 keys whose home is slot 0 of 1024 under the known seed. */
	for (uint64_t id = 0; n < 64; id++) {
		key_of(id, k);
		if ((tag_of(&probe.m, k) & 1023) == 0) {
			memcpy(probe.store[n], k, KSZ);
			memcpy(o.store[n], k, KSZ);
			n++;
		}
	}
	assert_int_equal(hmap_reserve(&o.m, 512), 0);
	assert_int_equal(hmap_reserve(&probe.m, 512), 0);
	assert_int_equal(o.m.mask + 1, 1024);
	for (uint32_t i = 0; i < n; i++) {
		ref = i;
		assert_int_equal(hmap_put(&o.m, o.store[i], &ref), 1);
		ref = i;
		assert_int_equal(hmap_put(&probe.m, probe.store[i], &ref), 1);
	}
	for (uint32_t i = 0, run = 0; i <= 2 * o.m.mask + 1; i++) {
		run = o.m.slot[i & o.m.mask].tag ? run + 1 : 0;
		longest = run > longest ? run : longest;
	}
	assert_true(longest < 10);
	/* Under the known seed they make one run of 64. */
	for (uint32_t i = 0; i < 64; i++)
		assert_true(probe.m.slot[i].tag != 0);
	check_structure(&o, 64);
	check_structure(&probe, 64);
	owner_free(&probe);
	owner_free(&o);
}

/* Runs that wrap: keys whose home is one of the last slots fill the end of
 * the table and go on at slot 0, where keys at home there are pushed along;
 * deleting them, in order, in reverse and at random, leaves every other one
 * found and the structure whole.
 */
static void test_wraparound(void **state)
{
	struct hmap_seed seed = {15, 16};
	struct owner o;
	uint64_t ids[24];
	uint32_t n = 0, ref;

	(void)state;
	owner_init(&o, 32, 24, &seed);
	assert_int_equal(hmap_reserve(&o.m, 32), 0);
	assert_int_equal(o.m.mask + 1, 64);
	/* 8 keys at home in slot 62, 4 in slot 63, 6 in slot 0, 6 in slot 2. */
	{
		const uint32_t homes[4] = {62, 63, 0, 2}, want[4] = {8, 4, 6, 6};

		for (int h = 0; h < 4; h++) {
			uint32_t got = 0;
			unsigned char k[KSZ];

			for (uint64_t id = 1; got < want[h]; id++) {
				key_of(id, k);
				if ((tag_of(&o.m, k) & o.m.mask) == homes[h]) {
					key_of(id, o.store[n]);
					ids[n++] = id; /* one home each: no repeats */
					got++;
				}
			}
		}
	}
	for (uint32_t round = 0; round < 200; round++) {
		uint64_t rs = round + 1;
		bool present[24];

		hmap_clear(&o.m);
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(owner_put(&o, ids[i], i, &ref), 1);
			present[i] = true;
		}
		if (round == 0) {
			/* One run of 24 from 62: past the end, 0 and 2, to 21. */
			for (uint32_t i = 62; i != 22; i = (i + 1) & o.m.mask)
				assert_true(o.m.slot[i].tag != 0);
			assert_int_equal(o.m.slot[22].tag, 0);
		}
		check_structure(&o, n);
		for (uint32_t d = 0; d < n; d++) {
			uint32_t i = (uint32_t)(rnd(&rs) % n);

			if (round == 1)
				i = d; /* in order */
			else if (round == 2)
				i = n - 1 - d; /* in reverse */
			assert_true(owner_del(&o, ids[i]) == present[i]);
			present[i] = false;
			check_structure(&o, n);
			for (uint32_t j = 0; j < n; j++)
				assert_int_equal(owner_find(&o, ids[j]), present[j] ? (long)j : -1);
		}
	}
	owner_free(&o);
}

/* ---- randomised against a plain array ----------------------------------- */

#define R_UNIVERSE 96 /* distinct keys: often there, often not */

/* Keys of the universe, each in the entry (ref) the model gave it; a freed
 * ref's entry is scribbled on, so a stale slot cannot match.
 */
struct model {
	long ref[R_UNIVERSE]; /* -1: not there */
	uint32_t n;
	uint32_t free_refs[R_UNIVERSE], n_free;
};

static void run_random(uint64_t seed, uint32_t max, uint32_t steps)
{
	struct hmap_seed hs = {rnd(&seed), rnd(&seed)};
	struct model md;
	struct owner o;

	owner_init(&o, max, R_UNIVERSE, &hs);
	memset(o.store, 0xee, (size_t)R_UNIVERSE * KSZ);
	md.n = 0;
	md.n_free = R_UNIVERSE;
	for (uint32_t i = 0; i < R_UNIVERSE; i++) {
		md.ref[i] = -1;
		md.free_refs[i] = R_UNIVERSE - 1 - i;
	}
	for (uint32_t s = 0; s < steps; s++) {
		uint64_t id = rnd(&seed) % R_UNIVERSE, op = rnd(&seed) % 100;

		if (op < 45) {
			/* An entry for it, as a caller makes one before the put. */
			uint32_t pick = md.n_free ? (uint32_t)(rnd(&seed) % md.n_free) : 0;
			uint32_t ref = md.n_free ? md.free_refs[pick] : 0, got;
			int r;

			if (md.ref[id] < 0)
				key_of(id, o.store[ref]);
			r = owner_put(&o, id, ref, &got);
			if (md.ref[id] >= 0) {
				assert_int_equal(r, 0);
				assert_int_equal(got, md.ref[id]);
			} else if (md.n >= max) {
				assert_int_equal(r, -ENOSPC);
				memset(o.store[ref], 0xee, KSZ);
			} else {
				assert_int_equal(r, 1);
				assert_int_equal(got, ref);
				md.ref[id] = ref;
				md.free_refs[pick] = md.free_refs[--md.n_free];
				md.n++;
			}
		} else if (op < 80) {
			assert_true(owner_del(&o, id) == (md.ref[id] >= 0));
			if (md.ref[id] >= 0) {
				memset(o.store[md.ref[id]], 0xee, KSZ);
				md.free_refs[md.n_free++] = (uint32_t)md.ref[id];
				md.ref[id] = -1;
				md.n--;
			}
		} else if (op < 99) {
			assert_int_equal(owner_find(&o, id), md.ref[id]);
		} else if (rnd(&seed) % 4 == 0) {
			/* Rarely: everything goes (slots kept, or given back). */
			if (rnd(&seed) % 2)
				hmap_clear(&o.m);
			else
				hmap_free(&o.m);
			for (uint32_t i = 0; i < R_UNIVERSE; i++)
				if (md.ref[i] >= 0) {
					memset(o.store[md.ref[i]], 0xee, KSZ);
					md.free_refs[md.n_free++] = (uint32_t)md.ref[i];
					md.ref[i] = -1;
				}
			md.n = 0;
		} else {
			struct hmap c;

			assert_int_equal(hmap_copy(&c, &o.m), 0); /* the copy goes on */
			hmap_free(&o.m);
			o.m = c;
		}
		assert_int_equal(hmap_count(&o.m), md.n);
		if (s % 16 == 0)
			check_structure(&o, R_UNIVERSE);
	}
	for (uint64_t id = 0; id < R_UNIVERSE; id++)
		assert_int_equal(owner_find(&o, id), md.ref[id]);
	check_structure(&o, R_UNIVERSE);
	owner_free(&o);
}

static void test_random(void **state)
{
	(void)state;
	/* Bounded below the universe (refusals), at it, and above it (never
	 * full); small tables wrap and grow often.
	 */
	for (uint64_t seed = 1; seed <= 300; seed++) {
		run_random(seed, 1 + (uint32_t)(seed % 40), 2000);
		run_random(seed ^ 0x5555, R_UNIVERSE, 2000);
		run_random(seed ^ 0xaaaa, 4 * R_UNIVERSE, 2000);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_siphash_vectors),
	    cmocka_unit_test(test_basics),
	    cmocka_unit_test(test_bounded),
	    cmocka_unit_test(test_growth_clear_reserve),
	    cmocka_unit_test(test_copy),
	    cmocka_unit_test(test_seeds),
	    cmocka_unit_test(test_aimed_keys),
	    cmocka_unit_test(test_wraparound),
	    cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
