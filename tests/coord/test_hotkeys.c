// SPDX-License-Identifier: MIT
/*
 * Host tests of user/coord/hotkeys.c: the hot-key table (hash lookups,
 * bounds, standing demands), composition of grants that carry changes only
 * (a new key's ledger is the limit's, cuts before raises, unacknowledged
 * changes named again, whole sets on a new connection or a dead lease,
 * cooling and dropping), reloads, and a long randomised run that models
 * every holder's side (the per-key entries it holds after applying grants
 * as they arrive, late, twice or never) and checks after every event that
 * it holds exactly what the coordinator composed, that for every key the
 * sum over holders of the most they may spend stays within capacity, and
 * that the coordinator's ledgers account for at least that.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "lib/monotonic.h"
#include "coord/hotkeys.h"
#include "coord/ledger.h"
#include "lib/log.h"
#include "unit/rnd.h"

typedef unsigned __int128 u128;

#define LIVE  (300 * NSEC_PER_MSEC) /* a grant's life on the coordinator */
#define SEED  0x1234
#define NHOLD 4

static struct ll_key_id key_v4(uint32_t ip)
{
	struct ll_key_id k = {.family = 4};

	k.addr[2] = htonl(0xffff);
	k.addr[3] = htonl(ip);
	return k;
}

static bool chance(uint64_t *s, unsigned pct)
{
	return rnd(s) % 100 < pct;
}

static struct wire_key_grant keys[WIRE_MAX_KEY_GRANTS];
static struct hotkeys_out out = {.keys = keys};

/* A grant to holder h toward (tr, tb), which must be issued and sendable;
 * out holds what it names.
 */
static struct ledger_grant grant(struct hotkeys *t, struct ledger *lim, size_t h, uint64_t tr,
				 uint64_t tb, uint64_t now)
{
	struct ledger_grant g;

	assert_int_equal(hotkeys_grant(t, lim, h, tr, tb, now, LIVE, &g, &out), 1);
	assert_int_equal(ledger_check(lim, now), 0);
	assert_int_equal(hotkeys_check(t, now), 0);
	return g;
}

static void ack(struct hotkeys *t, struct ledger *lim, size_t h, uint64_t seq, uint64_t now)
{
	ledger_ack(lim, h, seq, now);
	hotkeys_ack(t, h, seq, now);
}

/* One report of holder h listing key with demand d. */
static int report(struct hotkeys *t, const struct ledger *lim, size_t h,
		  const struct ll_key_id *key, uint64_t d, uint64_t share, uint64_t now)
{
	return hotkeys_report_key(t, lim, h, key, d, share, now);
}

/* The entry the last grant names for key, or NULL. */
static const struct wire_key_grant *named(const struct ll_key_id *key)
{
	for (uint32_t i = 0; i < out.n; i++)
		if (!memcmp(&keys[i].key, key, sizeof(*key)))
			return &keys[i];
	return NULL;
}

/* ---- the table ---------------------------------------------------------- */

/* Drop key idx: nobody above its share for the cooling time, no entry held
 * (no grant was ever composed in these table tests).
 */
static void drop(struct hotkeys *t, const struct ledger *lim, const struct ll_key_id *k,
		 uint64_t *now)
{
	report(t, lim, 0, k, 0, 99, *now);
	*now += HOTKEYS_COOL_NS + 1;
	hotkeys_tick(t, lim, *now, true);
}

/* Up to max keys by the 40 bytes (keys that differ in one byte are two
 * keys); the next is refused and counted; keys at or below the share need no
 * per-key grant; lookups stay right through many drops (backward-shift
 * deletion, slots reused) and additions.
 */
static void test_table(void **state)
{
	static bool in[4096];
	struct hotkeys t;
	struct ledger lim;
	uint64_t seed = 7, now = 10 * NSEC_PER_SEC;
	const uint32_t max = 1024;
	uint32_t n = 0;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	assert_int_equal(hotkeys_init(&t, "l", NHOLD, HOTKEYS_MAX + 5, SEED), 0);
	assert_int_equal(t.max, HOTKEYS_MAX); /* never more than an agent holds */
	hotkeys_free(&t);
	assert_int_equal(hotkeys_init(&t, "l", NHOLD, max, SEED), 0);
	for (uint32_t i = 0; i < max; i++) {
		struct ll_key_id k = key_v4(i);

		assert_int_equal(report(&t, &lim, 0, &k, 100, 99, now), 1);
		assert_int_equal(report(&t, &lim, 0, &k, 100, 99, now), 0); /* twice */
	}
	assert_int_equal(t.n, max);
	{
		struct ll_key_id k = key_v4(max), k0 = key_v4(0);

		assert_int_equal(report(&t, &lim, 1, &k, 100, 99, now), -ENOSPC);
		assert_int_equal(t.refused, 1);
		assert_int_equal(hotkeys_find(&t, &k), -1);
		/* One byte of padding makes another key. */
		k0.pad0 = 1;
		assert_int_equal(hotkeys_find(&t, &k0), -1);
		k0.pad0 = 0;
		assert_true(hotkeys_find(&t, &k0) >= 0);
	}
	for (uint32_t i = 0; i < max; i++) {
		struct ll_key_id k = key_v4(i);
		int idx = hotkeys_find(&t, &k);

		assert_true(idx >= 0);
		assert_memory_equal(&t.k[idx].key, &k, sizeof(k));
	}
	/* Random drops and additions; the table agrees with a plain array. */
	for (uint32_t i = 0; i < max; i++)
		in[i] = true;
	n = max;
	for (int step = 0; step < 6000; step++) {
		uint32_t ip = (uint32_t)(rnd(&seed) % 4096);
		struct ll_key_id k = key_v4(ip);
		int idx = hotkeys_find(&t, &k);

		assert_int_equal(idx >= 0, in[ip]);
		if (in[ip] && chance(&seed, 50)) {
			drop(&t, &lim, &k, &now);
			assert_int_equal(hotkeys_find(&t, &k), -1);
			in[ip] = false;
			n--;
		} else if (!in[ip]) {
			int r = report(&t, &lim, 0, &k, 100, 99, now);

			assert_int_equal(r, n < max ? 1 : -ENOSPC);
			if (r == 1) {
				in[ip] = true;
				n++;
			}
		}
		assert_int_equal(t.n, n);
		assert_true(t.top <= max);
		if (step % 1000 == 0)
			for (uint32_t j = 0; j < 4096; j++) {
				struct ll_key_id kj = key_v4(j);

				assert_int_equal(hotkeys_find(&t, &kj) >= 0, in[j]);
			}
	}
	/* A listing at or below the holder's share makes nothing hot. */
	{
		struct ll_key_id k = key_v4(9999);

		assert_int_equal(report(&t, &lim, 0, &k, 99, 99, now), 0);
		assert_int_equal(hotkeys_find(&t, &k), -1);
	}
	assert_true(t.made >= max);
	assert_true(t.dropped > 500);
	hotkeys_free(&t);
	hotkeys_free(&t); /* twice is fine */
	ledger_free(&lim);
}

/* A demand stands until its holder lists the key again (0: it wants none)
 * or goes quiet; a key cools once nobody is above its share for the
 * cooling time, and heats up when someone is again.
 */
static void test_standing_demand(void **state)
{
	struct ll_key_id k[2] = {key_v4(1), key_v4(2)};
	uint64_t now = NSEC_PER_SEC;
	struct hotkeys t;
	struct ledger lim;
	int i0, i1;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	assert_int_equal(report(&t, &lim, 0, &k[0], 500, 100, now), 1);
	assert_int_equal(report(&t, &lim, 0, &k[1], 600, 100, now), 1);
	i0 = hotkeys_find(&t, &k[0]);
	i1 = hotkeys_find(&t, &k[1]);
	report(&t, &lim, 1, &k[1], 50, 100, now); /* within its share */
	assert_int_equal(t.k[i1].led.h[1].demand, 50);
	assert_int_equal(t.k[i1].n_above, 1);
	/* Reports that do not list a key leave its demand as it stands. */
	report(&t, &lim, 0, &k[0], 500, 100, now);
	assert_int_equal(t.k[i1].led.h[0].demand, 600);
	/* Listed at 0: wanted no more. */
	report(&t, &lim, 0, &k[1], 0, 100, now + 1);
	assert_int_equal(t.k[i1].led.h[0].demand, 0);
	assert_false(t.k[i1].led.h[0].active);
	assert_int_equal(t.k[i1].n_above, 0);
	assert_int_equal(t.k[i1].calm_ns, now + 1);
	/* The cooling time later k1 cools; k0 (holder 0 above its share) not. */
	hotkeys_tick(&t, &lim, now + 1 + HOTKEYS_COOL_NS + 1, true);
	assert_false(t.k[i0].cooling);
	/* Never granted: nobody holds it, it is dropped at once. */
	assert_int_equal(hotkeys_find(&t, &k[1]), -1);
	/* Quiet: holder 0's demands are gone. */
	hotkeys_holder_quiet(&t, 0, now + 2);
	assert_int_equal(t.k[i0].led.h[0].demand, 0);
	assert_int_equal(t.k[i0].n_above, 0);
	/* A cooling key listed above the share again heats up. */
	t.k[i0].cooling = true;
	report(&t, &lim, 1, &k[0], 700, 100, now + 3);
	assert_false(t.k[i0].cooling);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* ---- composition -------------------------------------------------------- */

/*
 * Two holders with 500 each of R = B = 1000. The first grant to each is a
 * whole set; later ones carry changes on top of what the holder
 * acknowledged. A lists K at 1000: K's ledger is a copy of the limit's
 * (500 + 500), so A's first grant cannot raise K past 500; B's grant cuts
 * K to 0; once B acknowledged it, A gets all of K. A change not yet
 * acknowledged is named again; an unchanged key is not named at all. When
 * nobody wants K it cools: each entry goes back to the share once the share
 * fits, and once every holder acknowledged that, K leaves the table.
 */
static void test_compose(void **state)
{
	struct ll_key_id K = key_v4(0x0a000001);
	uint64_t now = NSEC_PER_SEC;
	const struct wire_key_grant *e;
	struct ledger_grant ga, gb, g;
	struct hotkeys t;
	struct ledger lim;
	int idx;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	lim.h[0].active = lim.h[1].active = true;
	lim.h[0].demand = lim.h[1].demand = 500;
	/* No hot key: the first grants are whole (empty) sets. */
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(out.n, 0);
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE); /* until one is acknowledged */
	gb = grant(&t, &lim, 1, 500, 500, now);
	ack(&t, &lim, 0, ga.seq, now);
	ack(&t, &lim, 1, gb.seq, now);
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.mode, WIRE_KEYS_CHANGES);
	assert_int_equal(out.base, lim.h[0].acked_seq);
	ack(&t, &lim, 0, ga.seq, now);
	/* A lists K above its share: K is hot, its ledger the limit's. */
	assert_int_equal(report(&t, &lim, 0, &K, 1000, 500, now), 1);
	idx = hotkeys_find(&t, &K);
	assert_true(idx >= 0);
	for (size_t h = 0; h < NHOLD; h++) {
		assert_int_equal(ledger_committed_rate(&t.k[idx].led, h, now),
				 ledger_committed_rate(&lim, h, now));
		assert_int_equal(t.k[idx].led.h[h].next_seq, lim.h[h].next_seq);
	}
	/* A's grant: K wants 1000, but B still holds 500 of it. */
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.n, 1);
	assert_int_equal(keys[0].op, WIRE_KEY_SET);
	assert_int_equal(keys[0].rate, 500);
	/* B's grant cuts K to 0. */
	gb = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(out.n, 1);
	assert_memory_equal(&keys[0].key, &K, sizeof(K));
	assert_int_equal(keys[0].rate, 0);
	assert_int_equal(keys[0].burst, 0);
	/* A's next, before B applied the cut: still 500, named again (A has
	 * not acknowledged the grant that named it).
	 */
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.n, 1);
	assert_int_equal(keys[0].rate, 500);
	ack(&t, &lim, 1, gb.seq, now);
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.n, 1);
	assert_int_equal(keys[0].rate, 1000);
	assert_int_equal(keys[0].burst, 1000);
	ack(&t, &lim, 0, ga.seq, now);
	/* Nothing changed and all acknowledged: nothing named. */
	g = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.n, 0);
	ack(&t, &lim, 0, g.seq, now);
	g = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(out.n, 0);
	ack(&t, &lim, 1, g.seq, now);
	/* B lists K at 400: max-min gives A 600, B 400; B's raise waits for
	 * A's cut to be applied.
	 */
	report(&t, &lim, 1, &K, 400, 500, now);
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(named(&K)->rate, 600);
	gb = grant(&t, &lim, 1, 500, 500, now);
	e = named(&K);
	assert_true(!e || e->rate == 0); /* no room yet */
	ack(&t, &lim, 0, ga.seq, now);
	gb = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(named(&K)->rate, 400);
	ack(&t, &lim, 1, gb.seq, now);
	assert_int_equal(ledger_sum_rate(&t.k[idx].led, now), 1000);
	/* A new connection: the whole set again, K in it. */
	hotkeys_holder_connect(&t, 1);
	gb = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(named(&K)->rate, 400);
	ack(&t, &lim, 1, gb.seq, now);
	/* Nobody wants K: it cools the cooling time later (short here, so
	 * that the leases live on).
	 */
	t.cool_ns = 10;
	report(&t, &lim, 0, &K, 0, 500, now);
	report(&t, &lim, 1, &K, 0, 500, now);
	now += 11;
	hotkeys_tick(&t, &lim, now, true);
	assert_true(t.k[idx].cooling);
	/* B back to the share (500): no room while A's 600 lives; A's share
	 * (500) is a decrease: removed.
	 */
	gb = grant(&t, &lim, 1, 500, 500, now);
	assert_null(named(&K));
	ga = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(named(&K)->op, WIRE_KEY_REMOVE);
	hotkeys_tick(&t, &lim, now, true);
	assert_int_equal(t.n, 1); /* A has not applied it */
	ack(&t, &lim, 0, ga.seq, now);
	ack(&t, &lim, 1, gb.seq, now);
	gb = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(named(&K)->op, WIRE_KEY_REMOVE);
	hotkeys_tick(&t, &lim, now, true);
	assert_int_equal(t.n, 1); /* B has not applied it */
	ack(&t, &lim, 1, gb.seq, now);
	hotkeys_tick(&t, &lim, now, true);
	assert_int_equal(t.n, 0);
	assert_int_equal(t.dropped, 1);
	g = grant(&t, &lim, 1, 500, 500, now);
	assert_int_equal(out.n, 0);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* A grant is not sent (-EAGAIN) when a key it must record cannot be (it
 * stays counted in the ledgers that did record it); 0 when the limit's own
 * ring is full (nothing issued).
 */
static void test_grant_not_sendable(void **state)
{
	struct ll_key_id K = key_v4(1);
	struct ledger_grant g, a;
	uint64_t now = 1;
	struct hotkeys t;
	struct ledger lim;
	int idx;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	report(&t, &lim, 0, &K, 900, 0, now);
	idx = hotkeys_find(&t, &K);
	/* The key ledger has seen a higher seq: the limit's next is refused. */
	assert_true(ledger_issue_seq(&t.k[idx].led, 0, 5, 0, 0, now, LIVE, &a));
	assert_int_equal(hotkeys_grant(&t, &lim, 0, 100, 100, now, LIVE, &g, &out), -EAGAIN);
	assert_int_equal(g.seq, 1);
	assert_int_equal(ledger_committed_rate(&lim, 0, now), 100); /* counted */
	assert_int_equal(hotkeys_check(&t, now), 0);
	/* The limit's ring full: nothing issued at all. */
	for (int k = 0; k < LEDGER_MAX_PENDING; k++)
		assert_true(ledger_issue(&lim, 1, 1, 1, now, LIVE, &g));
	assert_int_equal(hotkeys_grant(&t, &lim, 1, 1, 1, now, LIVE, &g, &out), 0);
	/* A holder past the table's room cannot be composed for. */
	assert_int_equal(hotkeys_grant(&t, &lim, NHOLD, 1, 1, now, LIVE, &g, &out), -EAGAIN);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* A holder whose every grant of the limit is dead holds nothing that can
 * be spent: its key records go (ticks), and its next grant is a whole set.
 * A reclaimed slot is emptied everywhere; the numbering goes on above every
 * slot's.
 */
static void test_dead_and_reset(void **state)
{
	struct ll_key_id K = key_v4(1);
	uint64_t now = 1;
	struct ledger_grant g;
	struct hotkeys t;
	struct ledger lim;
	int idx;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	ack(&t, &lim, 1, grant(&t, &lim, 1, 100, 100, now).seq, now);
	report(&t, &lim, 0, &K, 900, 0, now);
	idx = hotkeys_find(&t, &K);
	g = grant(&t, &lim, 1, 100, 100, now);
	assert_int_equal(out.mode, WIRE_KEYS_CHANGES);
	assert_int_equal(out.n, 1); /* holder 1 does not want K: a cut, an entry */
	ack(&t, &lim, 1, g.seq, now);
	assert_false(hotkeys_holder_idle(&t, 1, now + LIVE + 1)); /* the entry lives on */
	now += LIVE + 1;
	assert_true(ledger_holder_idle(&lim, 1, now));
	hotkeys_tick(&t, &lim, now, true);
	assert_true(hotkeys_holder_idle(&t, 1, now));
	assert_int_equal(ledger_committed_rate(&t.k[idx].led, 1, now), 0);
	g = grant(&t, &lim, 1, 100, 100, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(out.n, 1);
	now += LIVE + 1;
	hotkeys_tick(&t, &lim, now, true);
	ledger_holder_reset(&lim, 1);
	hotkeys_holder_reset(&t, 1, now);
	assert_int_equal(t.k[idx].led.h[1].n, 0);
	g = grant(&t, &lim, 1, 100, 100, now);
	assert_true(g.seq > 3);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* More hot keys than one grant can name: the whole set goes in steps of
 * WIRE_MAX_KEY_GRANTS, and while some keys are left holding no entry, the
 * share granted is no more than each of them has room for (here 0: A holds
 * all of them), so the grant can go out; once all are named, the share is
 * back.
 */
static void test_set_in_steps(void **state)
{
	const uint32_t nk = WIRE_MAX_KEY_GRANTS + WIRE_MAX_KEY_GRANTS / 2;
	uint64_t now = 1;
	struct ledger_grant g;
	struct hotkeys t;
	struct ledger lim;

	(void)state;
	ledger_init(&lim, 1000000, 1000000);
	hotkeys_init(&t, "l", NHOLD, nk, SEED);
	lim.h[0].active = lim.h[1].active = true;
	for (uint32_t i = 0; i < nk; i++) {
		struct ll_key_id k = key_v4(i);

		assert_int_equal(report(&t, &lim, 0, &k, 1000000, 0, now), 1);
	}
	/* A: the first WIRE_MAX_KEY_GRANTS keys at all of the contract, the
	 * rest at its share for now (nobody else holds any).
	 */
	g = grant(&t, &lim, 0, 500000, 500000, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(out.n, WIRE_MAX_KEY_GRANTS);
	assert_int_equal(g.rate, 500000);
	ack(&t, &lim, 0, g.seq, now);
	g = grant(&t, &lim, 0, 500000, 500000, now);
	assert_int_equal(out.mode, WIRE_KEYS_CHANGES);
	assert_int_equal(out.n, nk - WIRE_MAX_KEY_GRANTS);
	ack(&t, &lim, 0, g.seq, now);
	/* B: its share would not fit the keys it cannot be told of yet. */
	g = grant(&t, &lim, 1, 500000, 500000, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(out.n, WIRE_MAX_KEY_GRANTS);
	assert_int_equal(g.rate, 0);
	assert_int_equal(g.burst, 0);
	ack(&t, &lim, 1, g.seq, now);
	g = grant(&t, &lim, 1, 500000, 500000, now);
	assert_int_equal(out.mode, WIRE_KEYS_CHANGES);
	assert_int_equal(out.n, nk - WIRE_MAX_KEY_GRANTS);
	assert_int_equal(g.rate, 500000);
	for (uint32_t i = 0; i < out.n; i++)
		assert_int_equal(keys[i].rate, 0); /* cuts */
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* Overrides of a global limit: a pinned key has a contract of its own,
 * which every grant respects (Σ over holders ≤ its capacity, not the
 * limit's); with no demand anywhere it is spread over the holders; it never
 * cools; a reload's capacity does not touch it; unpinned, it takes the
 * limit's capacity again and may cool.
 */
static void test_pinned(void **state)
{
	struct ll_key_id K = key_v4(7), U = key_v4(8);
	uint64_t now = NSEC_PER_SEC;
	struct ledger_grant g;
	struct hotkeys t;
	struct ledger lim;
	int idx, iu;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	lim.h[0].active = lim.h[1].active = true;
	hotkeys_pins_begin(&t);
	assert_int_equal(hotkeys_pin(&t, &lim, &K, 200, 100, now), 1);
	assert_int_equal(hotkeys_pin(&t, &lim, &U, 5000, 5000, now), 1);
	hotkeys_pins_end(&t, 1000, 1000, now);
	idx = hotkeys_find(&t, &K);
	iu = hotkeys_find(&t, &U);
	assert_true(t.k[idx].pinned && t.k[iu].pinned);
	/* No demand: K's 200 spread over the holders (4 slots: 50 each). */
	g = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(named(&K)->rate, 50);
	ack(&t, &lim, 0, g.seq, now);
	/* Holder 0 wants it all: it gets K's contract, never the limit's. */
	report(&t, &lim, 0, &K, 1000, 500, now);
	for (int round = 0; round < 6; round++)
		for (size_t h = 0; h < NHOLD; h++) {
			g = grant(&t, &lim, h, 250, 250, now);
			ack(&t, &lim, h, g.seq, now);
		}
	assert_int_equal(t.k[idx].h[0].s_rate, 200);
	assert_true(ledger_sum_rate(&t.k[idx].led, now) <= 200);
	assert_true(ledger_sum_burst(&t.k[idx].led, now) <= 100);
	/* Above the limit's contract for the unlimited one. */
	report(&t, &lim, 1, &U, 3000, 500, now);
	for (int round = 0; round < 6; round++)
		for (size_t h = 0; h < NHOLD; h++) {
			g = grant(&t, &lim, h, 250, 250, now);
			ack(&t, &lim, h, g.seq, now);
		}
	assert_int_equal(t.k[iu].h[1].s_rate, 3500); /* its 3000 and a quarter of the 2000 left */
	/* Nobody above its share for long: a pinned key stays. */
	report(&t, &lim, 0, &K, 0, 500, now);
	now += HOTKEYS_COOL_NS + 1;
	hotkeys_tick(&t, &lim, now, true);
	assert_false(t.k[idx].cooling);
	/* A lowered limit leaves K's own capacity alone. */
	hotkeys_set_capacity(&t, 600, 600, now);
	assert_int_equal(t.k[idx].led.rate, 200);
	/* No longer an override: the limit's capacity, and it may cool. */
	hotkeys_pins_begin(&t);
	hotkeys_pins_end(&t, 600, 600, now);
	assert_false(t.k[idx].pinned);
	assert_int_equal(t.k[idx].led.rate, 600);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* Cuts (adoption, in a quiet period): the share proven, and for every hot
 * key a record of what the holder may spend once it applies the cut. A key
 * with room for the share spends it (not named); an override is named at
 * the holder's part of its own contract. Every key ledger stays within
 * capacity, no cut ends the need for a whole set, and the first grant after
 * the quiet period is one.
 */
static void test_cut(void **state)
{
	struct ll_key_id K = key_v4(7), H = key_v4(9);
	uint64_t now = NSEC_PER_SEC;
	struct ledger_grant g[2];
	struct hotkeys t;
	struct ledger lim;
	int ik, ih;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	lim.h[0].active = lim.h[1].active = true;
	hotkeys_pins_begin(&t);
	assert_int_equal(hotkeys_pin(&t, &lim, &K, 200, 100, now), 1);
	hotkeys_pins_end(&t, 1000, 1000, now);
	/* Both shares adopted (held and acknowledged, as adopt() enters them). */
	for (size_t h = 0; h < 2; h++) {
		assert_true(ledger_issue(&lim, h, 500, 500, now, LIVE, &g[h]));
		ledger_ack(&lim, h, g[h].seq, now);
	}
	/* Holder 0 lists H in the quiet period: hot, its ledger the limit's. */
	assert_int_equal(report(&t, &lim, 0, &H, 1000, 500, now), 1);
	ik = hotkeys_find(&t, &K);
	ih = hotkeys_find(&t, &H);
	for (size_t h = 0; h < 2; h++) {
		assert_int_equal(hotkeys_grant_cut(&t, &lim, h, 500, 500, now, LIVE, &g[h], &out),
				 1);
		assert_int_equal(out.mode, WIRE_KEYS_CUT);
		assert_int_equal(g[h].rate, 500);
		assert_null(named(&H)); /* room for the share: it spends the share */
		assert_non_null(named(&K));
		assert_int_equal(named(&K)->op, WIRE_KEY_SET);
		assert_int_equal(named(&K)->rate, 50); /* 200 over 4 slots */
		assert_int_equal(named(&K)->burst, 25);
		assert_int_equal(ledger_committed_rate(&t.k[ih].led, h, now), 500);
		assert_int_equal(ledger_check(&lim, now), 0);
		assert_int_equal(hotkeys_check(&t, now), 0);
	}
	assert_true(ledger_sum_rate(&t.k[ik].led, now) <= 200);
	assert_true(ledger_sum_rate(&t.k[ih].led, now) <= 1000);
	for (size_t h = 0; h < 2; h++)
		ack(&t, &lim, h, g[h].seq, now);
	/* The quiet period over: a whole set, with H's targets. */
	g[0] = grant(&t, &lim, 0, 500, 500, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_non_null(named(&K));
	assert_int_equal(hotkeys_check(&t, now), 0);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* Adoption of per-key entries: in the quiet period a holder whose share
 * was adopted proves the entry it holds for a hot key (the tag is checked
 * by the caller); its cuts then name that entry (not its share, not the
 * weighted part), within the key's room, through every cut of the quiet
 * period, recorded as held even where the key's ledger (begun as the
 * limit's) has no room on paper: the key drains. Once per holder and key in
 * a term: a second try is not taken, a new connection or a new term forgets
 * it, an entry above the key's contract is cut to it, and the whole set
 * after the quiet period ends it (and the drain, once the sum is within).
 */
/* A limit of 1000/s, burst 1000, and 3 holders at (share, share) each,
 * acknowledged: where the adoption tests start.
 */
static void adopt_setup(struct hotkeys *t, struct ledger *lim, uint64_t share, uint64_t now,
			struct ledger_grant *g)
{
	ledger_init(lim, 1000, 1000);
	hotkeys_init(t, "l", NHOLD, 16, SEED);
	for (size_t h = 0; h < 3; h++) {
		lim->h[h].active = true;
		assert_true(ledger_issue(lim, h, share, share, now, LIVE, &g[h]));
		ledger_ack(lim, h, g[h].seq, now);
	}
}

/* Over on paper after an adoption, a whole set must not renew a guess:
 * holder 0 proved 700/s of H (contract 1000); holders 1 and 2 are counted
 * at their share (300) though together they may hold no more than 300 on
 * H (700 + theirs was within 1000). Holder 2's whole set after the quiet
 * period may name at most what holders 0 and 1 leave (0 here): renewing
 * its guess of 300 as it stood let the model test's holders spend 1013/s
 * on one key of 900.
 */
static void test_adopt_over_paper_no_raise(void **state)
{
	struct ll_key_id H = key_v4(9);
	uint64_t now = NSEC_PER_SEC;
	struct ledger_grant g[3];
	struct hotkeys t;
	struct ledger lim;
	int ih;

	(void)state;
	adopt_setup(&t, &lim, 300, now, g);
	assert_int_equal(report(&t, &lim, 0, &H, 1000, 300, now), 1);
	assert_int_equal(report(&t, &lim, 2, &H, 1000, 300, now), 0);
	ih = hotkeys_find(&t, &H);
	assert_int_equal(hotkeys_adopt(&t, 0, &H, 700, 70), 1);
	assert_int_equal(hotkeys_grant_cut(&t, &lim, 0, 300, 300, now, LIVE, &g[0], &out), 1);
	assert_int_equal(named(&H)->rate, 700);
	assert_true(t.k[ih].guessed);
	ack(&t, &lim, 0, g[0].seq, now);
	now += 10 * NSEC_PER_MSEC;
	g[2] = grant(&t, &lim, 2, 300, 300, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_non_null(named(&H)); /* not left at its share: that would be 300 */
	assert_int_equal(named(&H)->rate, 0);
	/* Holder 0's record is what it holds: its whole set goes to its
	 * target (500, the max-min of two demands of 1000), not to the 400
	 * the others' records leave.
	 */
	g[0] = grant(&t, &lim, 0, 300, 300, now);
	assert_int_equal(named(&H)->rate, 500);
	hotkeys_free(&t);
	ledger_free(&lim);
}

static void test_adopt(void **state)
{
	struct ll_key_id H = key_v4(9), X = key_v4(10);
	uint64_t now = NSEC_PER_SEC;
	struct ledger_grant g[3];
	struct hotkeys t;
	struct ledger lim;
	int ih;

	(void)state;
	adopt_setup(&t, &lim, 200, now, g);
	assert_int_equal(report(&t, &lim, 0, &H, 1000, 200, now), 1);
	ih = hotkeys_find(&t, &H);
	/* Only keys in the table; holder 0 held 700/s of H, holder 1 5000/s
	 * (above the key's contract: cut to it, and counted).
	 */
	assert_int_equal(hotkeys_adopt(&t, 0, &X, 700, 70), 0);
	assert_int_equal(hotkeys_adopt(&t, 0, &H, 700, 70), 1);
	assert_int_equal(hotkeys_adopt(&t, 0, &H, 900, 90), 0); /* once */
	assert_int_equal(hotkeys_adopt(&t, 1, &H, 5000, 5000), 1);
	assert_int_equal(t.adopted, 2);
	assert_int_equal(t.adopt_clamped, 1);
	for (int round = 0; round < 2; round++) {
		/* Each keeps what it proved, in every cut: holder 0 700/s,
		 * holder 1 the contract. The key's ledger began as the limit's
		 * (holders 1 and 2 at their share, 200): over its capacity on
		 * paper, so it drains (no violation). Holder 2, nothing
		 * adopted, keeps its share (what the ledger counts it at).
		 */
		assert_int_equal(hotkeys_grant_cut(&t, &lim, 0, 200, 200, now, LIVE, &g[0], &out),
				 1);
		assert_non_null(named(&H));
		assert_int_equal(named(&H)->rate, 700);
		assert_int_equal(named(&H)->burst, 70);
		assert_int_equal(hotkeys_grant_cut(&t, &lim, 1, 200, 200, now, LIVE, &g[1], &out),
				 1);
		assert_non_null(named(&H));
		assert_int_equal(named(&H)->rate, 1000);
		assert_int_equal(hotkeys_grant_cut(&t, &lim, 2, 200, 200, now, LIVE, &g[2], &out),
				 1);
		assert_null(named(&H)); /* it spends its share, as it may already */
		assert_true(t.k[ih].draining);
		assert_int_equal(hotkeys_check(&t, now), 0);
		for (size_t h = 0; h < 3; h++)
			ack(&t, &lim, h, g[h].seq, now);
		now += 10 * NSEC_PER_MSEC;
	}
	assert_int_equal(t.adopt_clamped, 1); /* the contract */
	/* A new connection forgets what holder 1 adopted, and may prove it again. */
	hotkeys_holder_connect(&t, 1);
	assert_int_equal(t.k[ih].h[1].flags & (HK_ADOPTED | HK_ADOPT_TRIED), 0);
	assert_int_equal(hotkeys_adopt(&t, 1, &H, 100, 10), 1);
	/* A new term forgets everything adopted. */
	hotkeys_term_begin(&t);
	assert_int_equal(t.k[ih].h[0].flags & (HK_ADOPTED | HK_ADOPT_TRIED), 0);
	assert_int_equal(t.k[ih].h[1].flags & (HK_ADOPTED | HK_ADOPT_TRIED), 0);
	/* The whole set after the quiet period ends the adoption. */
	assert_int_equal(hotkeys_adopt(&t, 0, &H, 700, 70), 1);
	g[0] = grant(&t, &lim, 0, 200, 200, now);
	assert_int_equal(out.mode, WIRE_KEYS_WHOLE);
	assert_int_equal(t.k[ih].h[0].flags & HK_ADOPTED, 0);
	/* Whole sets to all three, acknowledged: the key is back within its
	 * capacity and the drain is over.
	 */
	for (size_t h = 1; h < 3; h++)
		g[h] = grant(&t, &lim, h, 200, 200, now);
	for (size_t h = 0; h < 3; h++)
		ack(&t, &lim, h, g[h].seq, now);
	assert_int_equal(hotkeys_check(&t, now), 0);
	assert_true(ledger_sum_rate(&t.k[ih].led, now) <= 1000);
	assert_false(t.k[ih].draining);
	hotkeys_free(&t);
	ledger_free(&lim);
}

/* A reload keeps the table (a deep copy), and a lowered capacity drains:
 * decreases only, no violation while the live grants come down, and the
 * drain ends once they fit. A key over capacity outside a drain is a
 * violation.
 */
static void test_copy_and_capacity(void **state)
{
	struct ll_key_id K = key_v4(1);
	uint64_t now = 1;
	struct ledger_grant g;
	struct hotkeys t, c;
	struct ledger lim, lim2;
	int idx;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	report(&t, &lim, 0, &K, 1000, 0, now);
	g = grant(&t, &lim, 0, 0, 0, now);
	assert_int_equal(named(&K)->rate, 1000);
	ack(&t, &lim, 0, g.seq, now);
	t.refused = 3;
	t.key_grants = 5;
	assert_int_equal(hotkeys_copy(&c, &t), 0);
	assert_int_equal(ledger_copy(&lim2, &lim), 0);
	hotkeys_free(&t);
	ledger_free(&lim);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.refused, 3);
	assert_int_equal(c.key_grants, 5);
	idx = hotkeys_find(&c, &K);
	assert_true(idx >= 0);
	assert_int_equal(ledger_committed_rate(&c.k[idx].led, 0, now), 1000);
	/* The contract lowered to 600. */
	lim2.rate = lim2.burst = 600;
	hotkeys_set_capacity(&c, 600, 600, now);
	assert_true(c.k[idx].draining);
	assert_int_equal(hotkeys_check(&c, now), 0);
	g = grant(&c, &lim2, 0, 0, 0, now);
	assert_int_equal(named(&K)->rate, 600); /* a decrease to the new capacity */
	assert_int_equal(hotkeys_check(&c, now), 0);
	ack(&c, &lim2, 0, g.seq, now);
	assert_int_equal(hotkeys_check(&c, now), 0);
	assert_false(c.k[idx].draining); /* within again */
	/* Over outside a drain: counted. */
	c.k[idx].led.rate = 500;
	assert_int_equal(hotkeys_check(&c, now), 1);
	hotkeys_free(&c);
	ledger_free(&lim2);
}

/* Stranded: committed per-key rate above what its holder says it uses. */
static void test_stranded(void **state)
{
	struct ll_key_id K = key_v4(1);
	uint64_t now = 1;
	struct ledger_grant g;
	struct hotkeys t;
	struct ledger lim;

	(void)state;
	ledger_init(&lim, 1000, 1000);
	hotkeys_init(&t, "l", NHOLD, 16, SEED);
	assert_int_equal(hotkeys_stranded(&t, now), 0);
	report(&t, &lim, 0, &K, 1000, 0, now);
	g = grant(&t, &lim, 0, 0, 0, now);
	ack(&t, &lim, 0, g.seq, now);
	assert_int_equal(hotkeys_stranded(&t, now), 0);
	report(&t, &lim, 0, &K, 300, 0, now);
	assert_int_equal(hotkeys_stranded(&t, now), 700);
	hotkeys_free(&t);
	ledger_free(&lim);
}

static void test_key_str(void **state)
{
	struct ll_key_id k = key_v4(0x0a000001), f = {.family = 6, .proto = 6};
	char buf[160];

	(void)state;
	hotkeys_key_str(&k, buf, sizeof(buf));
	assert_string_equal(buf, "10.0.0.1");
	f.addr[0] = htonl(0x20010db8);
	f.addr[3] = htonl(1);
	f.addr2[0] = htonl(0x20010db8);
	f.addr2[3] = htonl(2);
	f.sport = htons(1234);
	f.dport = htons(443);
	hotkeys_key_str(&f, buf, sizeof(buf));
	assert_string_equal(buf, "[2001:db8::1]:1234 -> [2001:db8::2]:443 proto 6");
	k = (struct ll_key_id){.proto = 17, .dport = htons(53)};
	hotkeys_key_str(&k, buf, sizeof(buf));
	assert_string_equal(buf, "proto 17 port 53");
}

/* ---- the randomised property test -------------------------------------- */

#define P_HOLDERS 5
#define P_KEYS	  10 /* keys the holders may want */
#define P_MAX	  6  /* hot keys the table takes: the others are refused */
#define P_SENT	  32 /* grants remembered per holder (live ones: at most 8) */
#define P_QUEUE	  64
#define P_HIST	  8
#define P_STATES  128 /* resolved sets remembered per holder, by seq */

/* A per-key set: for each key, an entry (has) or the share. */
struct pset {
	bool has[P_KEYS];
	uint64_t krate[P_KEYS], kburst[P_KEYS];
};

/* A grant: the share, the wire's changes (or whole set), and the set the
 * holder holds once it applied it (resolved by the model from the set of
 * the grant it builds on).
 */
struct psent {
	uint64_t seq, deadline, rate, burst, base;
	bool full;
	uint32_t n;
	int key[P_KEYS];
	uint8_t op[P_KEYS];
	uint64_t krate[P_KEYS], kburst[P_KEYS];
	struct pset set;
};

struct pholder {
	bool connected;
	uint64_t want[P_KEYS]; /* demand it lists for each key (0: none) */
	/* The coordinator's side, as an independent record: grants sent, acked. */
	struct psent sent[P_SENT];
	size_t nsent;
	uint64_t acked;
	struct pset states[P_STATES]; /* resolved set of each grant sent, by seq */
	uint64_t state_seq[P_STATES];
	uint64_t told[P_KEYS]; /* the demand the coordinator has of it */
	/* The gateway's side: the grant it applied, the entries it holds, until
	 * when it spends, whether this connection gave it a whole set.
	 */
	struct psent applied;
	struct pset hold;
	bool full_seen;
	uint64_t until;
	uint64_t hist[P_HIST]; /* seqs it applied: a late report acks an older one */
};

struct pmsg {
	size_t h;
	struct psent g;
};

struct psim {
	uint64_t seed, now, cap_rate, cap_burst, hi_rate, hi_burst;
	uint64_t live_lo, live_hi; /* a grant's life: drawn from [lo, hi] */
	bool drain;
	struct ledger lim;
	struct hotkeys t;
	struct ll_key_id key[P_KEYS];
	struct pholder h[P_HOLDERS];
	struct pmsg q[P_QUEUE];
	size_t nq;
	/* Evidence the run exercised what it is meant to. */
	uint64_t above, cuts, not_sent, reloads, drains_done, resets, full_key, sent;
	uint64_t removes, deltas, fulls, refused_delta;
	uint64_t events;
};

/* What grant g lets its holder spend on key u: its resolved set's entry,
 * or g's share.
 */
static uint64_t value(const struct psent *g, int u, bool burst)
{
	if (g->set.has[u])
		return burst ? g->set.kburst[u] : g->set.krate[u];
	return burst ? g->burst : g->rate;
}

/* What the gateway spends on key u now: the entry it holds, or the share of
 * the grant it applied.
 */
static uint64_t spends(const struct pholder *h, int u, bool burst)
{
	if (h->hold.has[u])
		return burst ? h->hold.kburst[u] : h->hold.krate[u];
	return burst ? h->applied.burst : h->applied.rate;
}

/* Drop what the holder can no longer spend: acked past, or dead. */
static void p_prune(struct psim *s, struct pholder *h)
{
	size_t kept = 0;

	for (size_t i = 0; i < h->nsent; i++)
		if (h->sent[i].seq >= h->acked && s->now <= h->sent[i].deadline)
			h->sent[kept++] = h->sent[i];
	h->nsent = kept;
}

/* The most holder h may spend on key u (u = -1: a key that never was hot). */
static uint64_t p_max(const struct pholder *h, int u, bool burst)
{
	uint64_t m = 0;

	for (size_t i = 0; i < h->nsent; i++) {
		uint64_t v = u < 0 ? (burst ? h->sent[i].burst : h->sent[i].rate)
				   : value(&h->sent[i], u, burst);

		if (v > m)
			m = v;
	}
	return m;
}

static void p_check(struct psim *s)
{
	bool fits = true;

	for (size_t h = 0; h < P_HOLDERS; h++)
		p_prune(s, &s->h[h]);
	for (int u = -1; u < P_KEYS; u++) {
		int idx = u < 0 ? -1 : hotkeys_find(&s->t, &s->key[u]);
		const struct ledger *acct = idx >= 0 ? &s->t.k[idx].led : &s->lim;
		u128 sr = 0, sb = 0;

		for (size_t h = 0; h < P_HOLDERS; h++) {
			const struct pholder *ph = &s->h[h];
			uint64_t mr = p_max(ph, u, false), mb = p_max(ph, u, true);

			/* The coordinator accounts for all the holder may spend. */
			if (ledger_committed_rate(acct, h, s->now) < mr ||
			    ledger_committed_burst(acct, h, s->now) < mb)
				fail_msg(
				    "event %llu key %d (%s): holder %zu may spend %llu/%llu, "
				    "accounted %llu/%llu",
				    (unsigned long long)s->events, u, idx >= 0 ? "hot" : "not hot",
				    h, (unsigned long long)mr, (unsigned long long)mb,
				    (unsigned long long)ledger_committed_rate(acct, h, s->now),
				    (unsigned long long)ledger_committed_burst(acct, h, s->now));
			/* The gateway spends no more than a live grant lets it. */
			if (ph->applied.seq && s->now <= ph->until && u >= 0 &&
			    (spends(ph, u, false) > mr || spends(ph, u, true) > mb))
				fail_msg(
				    "event %llu: holder %zu spends on key %d past its live grants",
				    (unsigned long long)s->events, h, u);
			sr += mr;
			sb += mb;
			if (u >= 0 && idx >= 0 && mr * 10 >= s->cap_rate * 9 &&
			    mr > p_max(ph, -1, false))
				s->full_key++;
		}
		if (sr > (s->drain ? s->hi_rate : s->cap_rate) ||
		    sb > (s->drain ? s->hi_burst : s->cap_burst))
			fail_msg("event %llu key %d: holders may spend %llu/%llu > %llu/%llu%s",
				 (unsigned long long)s->events, u, (unsigned long long)sr,
				 (unsigned long long)sb,
				 (unsigned long long)(s->drain ? s->hi_rate : s->cap_rate),
				 (unsigned long long)(s->drain ? s->hi_burst : s->cap_burst),
				 s->drain ? " (draining)" : "");
		fits &= sr <= s->cap_rate && sb <= s->cap_burst;
	}
	/* The coordinator's own checks agree; a drain ends when everything fits. */
	if (!s->drain) {
		assert_int_equal(ledger_check(&s->lim, s->now), 0);
		assert_int_equal(hotkeys_check(&s->t, s->now), 0);
	} else if (fits && !ledger_over(&s->lim, s->now)) {
		bool all = true;

		for (uint32_t i = 0; i < s->t.n; i++)
			all &= !ledger_over(&s->t.k[i].led, s->now);
		if (all) {
			s->drain = false;
			s->drains_done++;
		}
	}
	assert_true(s->t.n <= P_MAX);
	for (uint32_t i = 0; i < s->t.top; i++)
		if (s->t.k[i].live)
			assert_int_equal(hotkeys_find(&s->t, &s->t.k[i].key), (int)i);
}

/* The coordinator answers holder h (a report, or anything that makes it
 * grant) with one grant toward (tr, tb).
 */
static void p_grant(struct psim *s, size_t h, uint64_t tr, uint64_t tb)
{
	static struct wire_key_grant wk[WIRE_MAX_KEY_GRANTS];
	struct hotkeys_out o = {.keys = wk};
	struct pholder *ph = &s->h[h];
	struct ledger_grant g;
	struct psent ps = {0};
	int r = hotkeys_grant(&s->t, &s->lim, h, tr, tb, s->now,
			      rnd_in(&s->seed, s->live_lo, s->live_hi), &g, &o);

	if (r == -EAGAIN)
		s->not_sent++;
	if (r != 1)
		return;
	ps = (struct psent){.seq = g.seq,
			    .deadline = g.deadline_ns,
			    .rate = g.rate,
			    .burst = g.burst,
			    .base = o.base,
			    .full = o.mode == WIRE_KEYS_WHOLE};
	/* The set it resolves to: the base grant's set (as the model recorded
	 * it when it composed that one), changed by this one.
	 */
	if (o.mode != WIRE_KEYS_WHOLE) {
		size_t b = o.base % P_STATES;

		if (o.base) {
			assert_int_equal(ph->state_seq[b], o.base);
			ps.set = ph->states[b];
		} else {
			/* Built on no acknowledged grant: nothing was held either way. */
			memset(&ps.set, 0, sizeof(ps.set));
		}
		s->deltas++;
	} else {
		s->fulls++;
	}
	for (uint32_t i = 0; i < o.n; i++) {
		int u = -1;

		for (int k = 0; k < P_KEYS; k++)
			if (!memcmp(&wk[i].key, &s->key[k], sizeof(s->key[k])))
				u = k;
		assert_true(u >= 0);
		for (uint32_t j = 0; j < ps.n; j++)
			assert_true(ps.key[j] != u); /* named once */
		ps.key[ps.n] = u;
		ps.op[ps.n] = wk[i].op;
		ps.krate[ps.n] = wk[i].rate;
		ps.kburst[ps.n] = wk[i].burst;
		ps.n++;
		if (wk[i].op == WIRE_KEY_REMOVE) {
			assert_int_equal(o.mode, WIRE_KEYS_CHANGES);
			ps.set.has[u] = false;
			s->removes++;
			continue;
		}
		ps.set.has[u] = true;
		ps.set.krate[u] = wk[i].rate;
		ps.set.kburst[u] = wk[i].burst;
		if (wk[i].rate > g.rate)
			s->above++;
		else
			s->cuts++;
	}
	ph->states[g.seq % P_STATES] = ps.set;
	ph->state_seq[g.seq % P_STATES] = g.seq;
	p_prune(s, ph);
	assert_true(ph->nsent < P_SENT);
	ph->sent[ph->nsent++] = ps;
	if (s->nq < P_QUEUE)
		s->q[s->nq++] = (struct pmsg){h, ps};
	s->sent++;
}

/* The gateway applies grant m if it is newer than the one it applied and,
 * not being a whole set, builds on what it applied since its connection's
 * whole set (link.c). Then it holds exactly the set the coordinator
 * composed.
 */
static void p_apply(struct psim *s, struct pholder *to, const struct psent *m)
{
	if (m->seq <= to->applied.seq)
		return;
	if (!m->full && (!to->full_seen || to->applied.seq < m->base)) {
		s->refused_delta++;
		return;
	}
	if (m->full) {
		memset(&to->hold, 0, sizeof(to->hold));
		to->full_seen = true;
	}
	for (uint32_t i = 0; i < m->n; i++) {
		int u = m->key[i];

		to->hold.has[u] = m->op[i] != WIRE_KEY_REMOVE;
		to->hold.krate[u] = m->krate[i];
		to->hold.kburst[u] = m->kburst[i];
	}
	for (int u = 0; u < P_KEYS; u++) {
		if (to->hold.has[u] != m->set.has[u])
			fail_msg("event %llu: seq %llu (full %d base %llu, applied before %llu) key "
				 "%d: holds %d, composed %d",
				 (unsigned long long)s->events, (unsigned long long)m->seq, m->full,
				 (unsigned long long)m->base, (unsigned long long)to->applied.seq,
				 u, to->hold.has[u], m->set.has[u]);
		if (to->hold.has[u]) {
			assert_int_equal(to->hold.krate[u], m->set.krate[u]);
			assert_int_equal(to->hold.kburst[u], m->set.kburst[u]);
		}
	}
	to->applied = *m;
	to->until = m->deadline - rnd_in(&s->seed, 0, s->live_lo / 10);
	memmove(to->hist + 1, to->hist, (P_HIST - 1) * sizeof(to->hist[0]));
	to->hist[0] = m->seq;
}

static void p_report(struct psim *s, size_t h)
{
	uint64_t rate[LEDGER_MAX_HOLDERS], burst[LEDGER_MAX_HOLDERS], share, seq;
	struct pholder *ph = &s->h[h];

	/* The ack: the grant applied, now and then an older one (a late report). */
	seq = chance(&s->seed, 10) ? ph->hist[rnd(&s->seed) % P_HIST] : ph->applied.seq;
	ledger_ack(&s->lim, h, seq, s->now);
	hotkeys_ack(&s->t, h, seq, s->now);
	if (seq > ph->acked && seq < s->lim.h[h].next_seq)
		ph->acked = seq;
	s->lim.h[h].demand = chance(&s->seed, 10) ? 0 : rnd_in(&s->seed, 0, s->cap_rate);
	ledger_targets(&s->lim, rate, burst);
	share = ledger_committed_rate(&s->lim, h, s->now);
	if (rate[h] < share)
		share = rate[h];
	/* Demands that moved since told, now and then one told again or late. */
	for (int u = 0; u < P_KEYS; u++)
		if ((ph->want[u] != ph->told[u] && !chance(&s->seed, 5)) ||
		    (ph->want[u] && chance(&s->seed, 5))) {
			hotkeys_report_key(&s->t, &s->lim, h, &s->key[u], ph->want[u], share,
					   s->now);
			ph->told[u] = ph->want[u];
		}
	if (chance(&s->seed, 3)) {
		int u = (int)(rnd(&s->seed) % P_KEYS);

		ph->told[u] = rnd(&s->seed) % 50;
		hotkeys_report_key(&s->t, &s->lim, h, &s->key[u], ph->told[u], share, s->now);
	}
	if (chance(&s->seed, 5))
		p_grant(s, h, rnd_in(&s->seed, 0, s->cap_rate), rnd_in(&s->seed, 0, s->cap_burst));
	else
		p_grant(s, h, rate[h], burst[h]);
}

static void p_reload(struct psim *s)
{
	struct ledger lim;
	struct hotkeys t;

	assert_int_equal(ledger_copy(&lim, &s->lim), 0);
	assert_int_equal(hotkeys_copy(&t, &s->t), 0);
	ledger_free(&s->lim);
	hotkeys_free(&s->t);
	s->lim = lim;
	s->t = t;
	if (!s->drain) {
		s->hi_rate = s->cap_rate;
		s->hi_burst = s->cap_burst;
	}
	/* Lowered most of the time, raised back now and then. */
	if (chance(&s->seed, 70)) {
		s->cap_rate = rnd_in(&s->seed, s->cap_rate / 2, s->cap_rate);
		s->cap_burst = rnd_in(&s->seed, s->cap_burst / 2, s->cap_burst);
	} else {
		s->cap_rate = rnd_in(&s->seed, s->cap_rate, 1000);
		s->cap_burst = rnd_in(&s->seed, s->cap_burst, 2000);
	}
	if (s->cap_rate > s->hi_rate)
		s->hi_rate = s->cap_rate;
	if (s->cap_burst > s->hi_burst)
		s->hi_burst = s->cap_burst;
	s->lim.rate = s->cap_rate;
	s->lim.burst = s->cap_burst;
	hotkeys_set_capacity(&s->t, s->cap_rate, s->cap_burst, s->now);
	s->drain = true; /* until everything is seen to fit */
	s->reloads++;
}

static void p_tick(struct psim *s, bool force)
{
	uint64_t bad = hotkeys_tick(&s->t, &s->lim, s->now, force);

	if (!s->drain)
		assert_int_equal(bad, 0);
}

static void p_event(struct psim *s)
{
	uint64_t r = rnd(&s->seed) % 1000;
	size_t h = rnd(&s->seed) % P_HOLDERS;
	struct pholder *ph = &s->h[h];

	if (r < 250) {
		if (ph->connected)
			p_report(s, h);
	} else if (r < 480 && s->nq) {
		/* A grant arrives: late, out of order, now and then twice or never. */
		size_t k = rnd(&s->seed) % s->nq;
		struct pmsg m = s->q[k];
		struct pholder *to = &s->h[m.h];

		if (!chance(&s->seed, 10))
			s->q[k] = s->q[--s->nq];
		if (chance(&s->seed, 5))
			return;
		/* Its lease ends before the coordinator's deadline. */
		p_apply(s, to, &m.g);
	} else if (r < 520) {
		/* Demand moves: a key wanted at R (denied), at some rate, or not at all. */
		int u = (int)(rnd(&s->seed) % P_KEYS);
		uint64_t c = rnd(&s->seed) % 100;

		ph->want[u] = c < 70 ? 0 : c < 85 ? s->cap_rate : rnd_in(&s->seed, 1, s->cap_rate);
	} else if (r < 880) {
		s->now += rnd_in(&s->seed, 0, 40 * NSEC_PER_MSEC);
		p_tick(s, chance(&s->seed, 50));
	} else if (r < 920) {
		s->now += rnd_in(&s->seed, 0, 600 * NSEC_PER_MSEC);
		p_tick(s, true);
	} else if (r < 930) {
		s->now += HOTKEYS_COOL_NS + rnd_in(&s->seed, 0, NSEC_PER_SEC);
		p_tick(s, true);
	} else if (r < 950) {
		/* Disconnects, or comes back. */
		ph->connected = !ph->connected;
		s->lim.h[h].active = ph->connected;
		if (!ph->connected) {
			s->lim.h[h].demand = 0;
			hotkeys_holder_quiet(&s->t, h, s->now);
			memset(ph->told, 0, sizeof(ph->told));
		} else {
			/* A new connection: the gateway needs a whole set again. */
			hotkeys_holder_connect(&s->t, h);
			ph->full_seen = false;
		}
	} else if (r < 970) {
		/* A gone holder's slot is reclaimed once it is idle everywhere. */
		if (!ph->connected && ledger_holder_idle(&s->lim, h, s->now) &&
		    hotkeys_holder_idle(&s->t, h, s->now)) {
			ledger_holder_reset(&s->lim, h);
			hotkeys_holder_reset(&s->t, h, s->now);
			s->resets++;
		}
	} else if (r < 975) {
		p_reload(s);
	} else {
		ledger_gc(&s->lim, s->now);
	}
}

static void p_run(uint64_t seed, uint64_t live_lo, uint64_t live_hi, uint64_t events,
		  struct psim *s)
{
	memset(s, 0, sizeof(*s));
	s->seed = seed;
	s->live_lo = live_lo;
	s->live_hi = live_hi;
	s->now = NSEC_PER_SEC;
	s->cap_rate = s->hi_rate = 1000;
	s->cap_burst = s->hi_burst = 2000;
	assert_int_equal(ledger_init(&s->lim, s->cap_rate, s->cap_burst), 0);
	assert_int_equal(hotkeys_init(&s->t, "p", P_HOLDERS, P_MAX, seed), 0);
	for (int u = 0; u < P_KEYS; u++)
		s->key[u] = key_v4(0x0a000000u + (uint32_t)u);
	for (size_t h = 0; h < P_HOLDERS; h++) {
		s->h[h].connected = true;
		s->lim.h[h].active = true;
		s->lim.h[h].weight = (uint32_t)rnd_in(&s->seed, 0, 3);
	}
	for (s->events = 0; s->events < events; s->events++) {
		p_event(s);
		p_check(s);
	}
	/* Not vacuous: per-key grants above the share and cuts were sent, keys
	 * were made hot, refused, cooled and dropped, reloads drained, slots
	 * were reclaimed, and some holder had nearly all of some key.
	 */
	if (getenv("LL_TEST_VERBOSE"))
		print_message(
		    "seed %llu: %llu grants sent, %llu entries above the share, %llu cuts, "
		    "%llu not sent; keys made %llu dropped %llu refused %llu; %llu reloads, "
		    "%llu drains done, %llu resets, %llu near-full; %llu whole sets, %llu "
		    "changes, %llu removes, %llu changes refused\n",
		    (unsigned long long)seed, (unsigned long long)s->sent,
		    (unsigned long long)s->above, (unsigned long long)s->cuts,
		    (unsigned long long)s->not_sent, (unsigned long long)s->t.made,
		    (unsigned long long)s->t.dropped, (unsigned long long)s->t.refused,
		    (unsigned long long)s->reloads, (unsigned long long)s->drains_done,
		    (unsigned long long)s->resets, (unsigned long long)s->full_key,
		    (unsigned long long)s->fulls, (unsigned long long)s->deltas,
		    (unsigned long long)s->removes, (unsigned long long)s->refused_delta);
	assert_true(s->sent > events / 10);
	assert_true(s->above > 100);
	assert_true(s->cuts > 1000);
	assert_true(s->t.made > 20);
	assert_true(s->t.dropped > 10);
	assert_true(s->t.refused > 10);
	assert_true(s->reloads > 10);
	assert_true(s->drains_done > 5);
	assert_true(s->resets > 5);
	assert_true(s->full_key > 10);
	assert_true(s->fulls > 100);
	assert_true(s->deltas > 1000);
	assert_true(s->removes > 10);
	ledger_free(&s->lim);
	hotkeys_free(&s->t);
}

static void test_random(void **state)
{
	static struct psim s;

	(void)state;
	/* Leases much shorter than the cooling time, longer, and mixed. */
	p_run(1, LIVE, LIVE, 30000, &s);
	p_run(2, 5 * NSEC_PER_SEC, 5 * NSEC_PER_SEC, 30000, &s);
	p_run(3, 100 * NSEC_PER_MSEC, 8 * NSEC_PER_SEC, 30000, &s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),	 cmocka_unit_test(test_standing_demand),
	    cmocka_unit_test(test_compose),	 cmocka_unit_test(test_grant_not_sendable),
	    cmocka_unit_test(test_dead_and_reset), cmocka_unit_test(test_copy_and_capacity),
	    cmocka_unit_test(test_set_in_steps),	 cmocka_unit_test(test_pinned), cmocka_unit_test(test_cut),
	    cmocka_unit_test(test_adopt),
	    cmocka_unit_test(test_adopt_over_paper_no_raise),
	    cmocka_unit_test(test_stranded),	 cmocka_unit_test(test_key_str),
	    cmocka_unit_test(test_random),
	};

	log_set_level(getenv("LL_TEST_VERBOSE") ? LOG_DEBUG : LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
