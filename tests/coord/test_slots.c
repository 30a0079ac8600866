// SPDX-License-Identifier: MIT
/*
 * Connection slots (user/coord/slots.c): what a new connection's address
 * and prefix already hold, and with the table full, which connection gives
 * way: one from the prefix holding the most slots (silent before spoken,
 * spoken only past the grace, older first), never a holder, never one
 * accepted in the batch in progress. Tables of every fill are checked
 * against a brute-force count of the same rule.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "coord/slots.h"
#include "coord/state.h"
#include "../unit/rnd.h"

#define N     32
#define BATCH (10 * NSEC_PER_SEC) /* the batch in progress started here */
#define NOW   (BATCH + NSEC_PER_MSEC)

static void v4(uint8_t a[16], unsigned b2, unsigned b3)
{
	memset(a, 0, 16);
	a[10] = a[11] = 0xff;
	a[12] = 198;
	a[13] = 19;
	a[14] = (uint8_t)b2;
	a[15] = (uint8_t)b3;
}

static void v6(uint8_t a[16], unsigned b5, unsigned b15)
{
	memset(a, 0, 16);
	a[0] = 0x20;
	a[1] = 0x01;
	a[5] = (uint8_t)b5;
	a[15] = (uint8_t)b15;
}

struct fx {
	struct cconn *tab[N];
	struct cconn pool[N];
	struct slot_table t;
};

static struct cconn *put(struct fx *f, size_t i, const uint8_t peer[16], uint64_t acc, bool spoke,
			 int holder)
{
	struct cconn *cc = &f->pool[i];

	memset(cc, 0, sizeof(*cc));
	memcpy(cc->peer, peer, 16);
	cc->accepted_ns = acc;
	cc->spoke = spoke;
	cc->holder = holder;
	f->tab[i] = cc;
	return cc;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || slots_init(&f->t, f->tab, N))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	slots_free(&f->t);
	free(f);
	return 0;
}

static void test_prefixes(void **state)
{
	uint8_t a[16], b[16];

	(void)state;
	v4(a, 40, 1);
	v4(b, 40, 200);
	assert_true(slots_same_prefix(a, b));
	v4(b, 41, 1);
	assert_false(slots_same_prefix(a, b));
	v6(a, 7, 1);
	v6(b, 7, 99);
	assert_true(slots_same_prefix(a, b));
	v6(b, 8, 1);
	assert_false(slots_same_prefix(a, b));
	v4(a, 0, 1); /* ::ffff:198.19.0.1 is not 2001::/48's, nor any v6 */
	assert_false(slots_same_prefix(a, b));
}

/* Counts by address and prefix; holders count for neither. */
static void test_counts(void **state)
{
	struct fx *f = *state;
	struct slot_pick p;
	uint8_t a[16];

	v4(a, 40, 1);
	put(f, 0, a, 1, false, -1);
	put(f, 1, a, 1, false, -1);
	put(f, 2, a, 1, false, 3); /* a holder from the same address */
	v4(a, 40, 2);
	put(f, 3, a, 1, false, -1);
	v4(a, 41, 1);
	put(f, 4, a, 1, false, -1);
	v4(a, 40, 1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.same_address, 2);
	assert_int_equal(p.same_prefix, 3);
	assert_int_equal(p.free, 5);
	assert_int_equal(p.victim, -1);
}

/* A full table: the fullest prefix gives way, whatever the ages. */
static void test_fullest_prefix_gives_way(void **state)
{
	struct fx *f = *state;
	struct slot_pick p;
	uint8_t a[16];

	for (size_t i = 0; i < N; i++) {
		/* Prefix 40 holds 4 of the oldest; prefix 50 the other 28, newer. */
		v4(a, i < 4 ? 40 : 50, (unsigned)i);
		put(f, i, a, 100 + i, false, -1);
	}
	v4(a, 60, 1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.free, -1);
	assert_int_equal(p.victim, 4); /* the oldest of prefix 50 */
	/* Its own prefix the fullest: one of its own gives way. */
	v4(a, 50, 200);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.victim, 4);
}

/* Silent before spoken; spoken only past the grace; holders and the
 * batch in progress never.
 */
static void test_who_may_give_way(void **state)
{
	struct fx *f = *state;
	struct slot_pick p;
	uint8_t a[16];

	for (size_t i = 0; i < N; i++) {
		v4(a, 70, (unsigned)i);
		/* Holders, and one accepted in this batch, all of them... */
		put(f, i, a, BATCH, false, i % 2 ? -1 : (int)i);
	}
	v4(a, 80, 1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.victim, -1); /* nobody may */
	/* ...but one spoke recently (not past the grace), one long ago. */
	put(f, 1, f->tab[1]->peer, NOW - COORD_PENDING_GRACE_NS / 2, true, -1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.victim, -1);
	put(f, 3, f->tab[3]->peer, NOW - COORD_PENDING_GRACE_NS, true, -1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.victim, 3);
	/* A silent one goes before it, though younger. */
	put(f, 5, f->tab[5]->peer, BATCH - 1000, false, -1);
	slots_pick(&f->t, a, BATCH, NOW, &p);
	assert_int_equal(p.victim, 5);
}

/* Random tables against the rule, counted by brute force. */
static void test_random_tables(void **state)
{
	struct fx *f = *state;
	uint64_t seed0 = 0x51075eedULL, seed = seed0;

	for (int round = 0; round < 2000; round++) {
		uint32_t count[N], pfx_of[N];
		uint8_t peer[16], pfx[N][16];
		struct slot_pick p;
		long want = -1;
		size_t np = 0;

		for (size_t i = 0; i < N; i++) {
			unsigned pf = (unsigned)(rnd(&seed) % 5);
			bool six = pf == 4;
			uint64_t acc = rnd(&seed) % (BATCH + NSEC_PER_MSEC);

			if (six)
				v6(peer, 1, (unsigned)(rnd(&seed) % 4));
			else
				v4(peer, pf, (unsigned)(rnd(&seed) % 4));
			put(f, i, peer, acc, rnd(&seed) % 2, rnd(&seed) % 6 ? -1 : 0);
		}
		for (size_t i = 0; i < N; i++) {
			size_t k;

			if (f->tab[i]->holder >= 0)
				continue;
			for (k = 0; k < np && !slots_same_prefix(pfx[k], f->tab[i]->peer); k++)
				;
			if (k == np) {
				memcpy(pfx[np], f->tab[i]->peer, 16);
				count[np++] = 0;
			}
			count[k]++;
			pfx_of[i] = (uint32_t)k;
		}
		/* The rule, slowly: the fullest prefix with a candidate; in it
		 * a silent one first, oldest first; ties between prefixes to
		 * one with a silent candidate, then the older candidate.
		 */
		{
			long best_k = -1, best_c[N];
			bool best_silent[N];
			uint64_t best_ns[N];

			for (size_t k = 0; k < np; k++) {
				long c = -1;
				bool silent = false;

				for (size_t i = 0; i < N; i++) {
					const struct cconn *cc = f->tab[i];
					bool ok;

					if (cc->holder >= 0 || pfx_of[i] != k || cc->accepted_ns >= BATCH)
						continue;
					ok = !cc->spoke || NOW - cc->accepted_ns >= COORD_PENDING_GRACE_NS;
					if (!ok)
						continue;
					if (c < 0 || (!cc->spoke && !silent) ||
					    (!cc->spoke == silent && cc->accepted_ns < f->tab[c]->accepted_ns)) {
						c = (long)i;
						silent = !cc->spoke;
					}
				}
				best_c[k] = c;
				best_silent[k] = silent;
				best_ns[k] = c >= 0 ? f->tab[c]->accepted_ns : 0;
				if (c < 0)
					continue;
				if (best_k < 0 || count[k] > count[best_k] ||
				    (count[k] == count[best_k] &&
				     (silent > best_silent[best_k] ||
				      (silent == best_silent[best_k] && best_ns[k] < best_ns[best_k]))))
					best_k = (long)k;
			}
			want = best_k < 0 ? -1 : best_c[best_k];
		}
		v4(peer, 9, 9);
		slots_pick(&f->t, peer, BATCH, NOW, &p);
		if (p.victim != want)
			fail_msg("seed %llu round %d: victim %ld, the rule says %ld",
				 (unsigned long long)seed0, round, p.victim, want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prefixes),
	    cmocka_unit_test_setup_teardown(test_counts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fullest_prefix_gives_way, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_who_may_give_way, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_random_tables, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
