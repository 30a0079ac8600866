// SPDX-License-Identifier: MIT
/*
 * The agent's lease and fencing decisions as pure functions (lease.h,
 * lease_clock.h), without root or a kernel: the lease clock puts the
 * agent's expiry before the coordinator's deadline, stale grants are
 * refused and change nothing, a renewal keeps its generation, a changed or
 * revived share gets a new one (a revived one an empty pool), and no
 * generation number is ever handed out twice. tests/bpf/test_lease.c
 * checks what the kernel does with the results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <arpa/inet.h>

#include "lib/monotonic.h"
#include "agent/lease_decide.h"
#include "tb_math.h"
#include "unit/rnd.h"

#define ID    5
#define NCPUS 4

static struct lease_grant grant_of(uint64_t epoch, uint64_t seq, uint64_t rate, uint64_t burst,
				   uint64_t expiry)
{
	return (struct lease_grant){
	    .epoch = epoch, .seq = seq, .rate = rate, .burst = burst, .expiry_ns = expiry};
}

static void test_lease_clock_bounds(void **state)
{
	(void)state;
	/* The agent's expiry is always before the coordinator's deadline. */
	for (uint64_t ttl = NSEC_PER_MSEC; ttl <= 60 * NSEC_PER_SEC; ttl *= 3) {
		assert_true(lease_expiry(1000, ttl) < lease_deadline(1000, ttl));
		assert_true(lease_expiry(1000, ttl) <= 1000 + ttl);
		assert_true(lease_deadline(1000, ttl) > 1000 + ttl);
		/* ... by both clocks' drift and both slacks (unless dead on arrival). */
		if (lease_expiry(1000, ttl) > 1000)
			assert_true(lease_deadline(1000, ttl) - lease_expiry(1000, ttl) >=
				    2 * (ttl / 1000000 * LEASE_RHO_PPM) + 2 * LEASE_DELTA_NS);
	}
	/* A ttl shorter than delta gives a lease that is dead on arrival. */
	assert_int_equal(lease_expiry(1000, LEASE_DELTA_NS / 2), 1000);
}

static void test_fence_refuses_stale(void **state)
{
	struct ll_fence f = {.max_epoch_seen = 3};

	(void)state;
	f.applied_epoch[ID] = 3;
	f.applied_seq[ID] = 5;
	assert_int_equal(lease_fence_check(&f, ID, 3, 5), -ESTALE); /* replay */
	assert_int_equal(lease_fence_check(&f, ID, 3, 4), -ESTALE); /* reordered */
	assert_int_equal(lease_fence_check(&f, ID, 2, 9), -ESTALE); /* older epoch */
	assert_int_equal(lease_fence_check(&f, LL_MAX_LIMITS, 3, 6), -ESTALE);
	assert_int_equal(lease_fence_check(&f, ID, 3, 6), 0);
	assert_int_equal(lease_fence_check(&f, ID, 4, 1), 0);	  /* a new epoch restarts seq */
	assert_int_equal(lease_fence_check(&f, ID + 1, 3, 1), 0); /* per limit */
}

static void test_fence_see_epoch(void **state)
{
	struct ll_fence f = {.max_epoch_seen = 7, .incarnation = 11};
	struct ll_fence before = f;

	(void)state;
	assert_int_equal(lease_fence_see_epoch(&f, 6, 12), -ESTALE);
	assert_memory_equal(&f, &before, sizeof(f)); /* refused: untouched */
	assert_int_equal(lease_fence_see_epoch(&f, 7, 0), 0);
	assert_int_equal(f.incarnation, 11); /* 0 keeps the incarnation */
	assert_int_equal(lease_fence_see_epoch(&f, 9, 12), 0);
	assert_int_equal(f.max_epoch_seen, 9);
	assert_int_equal(f.incarnation, 12);
	/* Grants of the epoch before are stale from now on. */
	assert_int_equal(lease_fence_check(&f, ID, 8, 100), -ESTALE);
}

static void test_decide_refused_grant_changes_nothing(void **state)
{
	struct ll_lease old = {.gen = 4, .expiry_ns = 1000, .rate = 10, .burst_s = 10 * TB_SCALE};
	struct ll_fence f = {.max_epoch_seen = 2};
	struct lease_grant g = grant_of(1, 1, 99, 99, 5000);
	struct lease_update u, sentinel;

	(void)state;
	memset(&u, 0xa5, sizeof(u));
	sentinel = u;
	assert_int_equal(lease_grant_decide(&old, &f, 9, ID, &g, 10, NCPUS, &u), -ESTALE);
	assert_memory_equal(&u, &sentinel, sizeof(u));
}

static void test_decide_renewal_keeps_generation(void **state)
{
	struct ll_lease old = {.gen = 4,
			       .expiry_ns = 1000,
			       .rate = 10,
			       .burst_s = 20 * TB_SCALE,
			       .epoch = 2,
			       .seq = 1};
	struct ll_fence f = {.max_epoch_seen = 2};
	struct lease_grant g = grant_of(2, 2, 10, 20, 5000);
	struct lease_update u;

	(void)state;
	f.applied_epoch[ID] = 2;
	f.applied_seq[ID] = 1;
	assert_int_equal(lease_grant_decide(&old, &f, 9, ID, &g, 500, NCPUS, &u), 0);
	assert_int_equal(u.lease.gen, 4);
	assert_int_equal(u.next_gen, 9);
	assert_false(u.reset_pool);
	assert_int_equal(u.lease.expiry_ns, 5000);
	assert_int_equal(u.lease.seq, 2);
	assert_int_equal(u.fence.applied_epoch[ID], 2);
	assert_int_equal(u.fence.applied_seq[ID], 2);
}

static void test_decide_changed_share_new_generation(void **state)
{
	struct ll_lease old = {.gen = 4,
			       .expiry_ns = 1000,
			       .rate = 10,
			       .burst_s = 20 * TB_SCALE,
			       .fill_ns = 2 * NSEC_PER_SEC};
	struct ll_fence f = {.max_epoch_seen = 2};
	struct lease_grant g = grant_of(3, 1, 30, 40, 5000);
	struct lease_update u;

	(void)state;
	assert_int_equal(lease_grant_decide(&old, &f, 9, ID, &g, 500, NCPUS, &u), 0);
	assert_int_equal(u.lease.gen, 9);
	assert_int_equal(u.next_gen, 10);
	assert_false(u.reset_pool); /* live: the pool settles, raising deposits nothing */
	assert_int_equal(u.lease.prev_gen, 4);
	assert_int_equal(u.lease.prev_rate, 10);
	assert_int_equal(u.lease.prev_burst_s, 20 * TB_SCALE);
	assert_int_equal(u.lease.reload_ns, 500);
	assert_int_equal(u.lease.rate, 30);
	assert_int_equal(u.lease.burst_s, 40 * TB_SCALE);
	assert_int_equal(u.lease.fill_ns, tb_fill_ns(30, 40 * TB_SCALE));
	assert_int_equal(u.lease.chunk_s, tb_chunk_s(30, 40, NCPUS));
	assert_int_equal(u.fence.max_epoch_seen, 3);
}

static void test_decide_revived_starts_empty(void **state)
{
	struct ll_lease old = {.gen = 4, .expiry_ns = 1000, .rate = 10, .burst_s = 20 * TB_SCALE};
	struct ll_fence f = {0};
	struct lease_grant g = grant_of(1, 1, 10, 20, 9000);
	struct lease_update u;

	(void)state;
	/* Same share, but the lease died at 1000: not a renewal. */
	assert_int_equal(lease_grant_decide(&old, &f, 0, ID, &g, 1000, NCPUS, &u), 0);
	assert_true(u.reset_pool);
	assert_int_equal(u.lease.gen, 1); /* a zero counter starts at 1 */
	assert_int_equal(u.next_gen, 2);
	assert_int_equal(u.lease.reload_ns, 1000); /* no refill for the time it was dead */
}

static void test_decide_revived_after_fallback(void **state)
{
	struct ll_lease old = {.gen = 4,
			       .fb_gen = 6,
			       .on_loss = LL_ON_LOSS_FALLBACK,
			       .expiry_ns = 1000,
			       .rate = 10,
			       .burst_s = 20 * TB_SCALE,
			       .fb_rate = 2,
			       .fb_burst_s = 3 * TB_SCALE,
			       .fb_fill_ns = 1500 * NSEC_PER_MSEC};
	struct ll_fence f = {0};
	struct lease_grant g = grant_of(1, 1, 10, 20, 9000);
	struct lease_update u;

	(void)state;
	assert_int_equal(lease_grant_decide(&old, &f, 7, ID, &g, 4000, NCPUS, &u), 0);
	/* The pool has been spending the fallback share: that is what settles. */
	assert_int_equal(u.lease.gen, 7);
	assert_int_equal(u.lease.prev_gen, 6);
	assert_int_equal(u.lease.prev_rate, 2);
	assert_int_equal(u.lease.prev_burst_s, 3 * TB_SCALE);
	assert_int_equal(u.lease.reload_ns, 4000);
	/* The next death must not find this fallback period's slices valid. */
	assert_int_equal(u.lease.fb_gen, 8);
	assert_int_equal(u.next_gen, 9);
	assert_true(u.reset_pool);
}

/* Random grants, renewals, deaths and stale replays: every generation a
 * decision hands out is above every number handed out before, the counter
 * never goes back, and a refused grant never changes what is applied.
 */
static void test_generations_never_reused(void **state)
{
	uint64_t seed = 0x1ea5e11e, epoch = 1, seq = 0, now = 1000;
	struct ll_lease cur = {.gen = 1, .on_loss = LL_ON_LOSS_FALLBACK, .fb_gen = 2};
	struct ll_fence f = {0};
	uint32_t next_gen = 3, highest = 2;

	(void)state;
	for (int i = 0; i < 20000; i++) {
		struct lease_grant g;
		struct lease_update u;
		bool stale;
		int rc;

		now += rnd_in(&seed, 0, 3 * NSEC_PER_SEC);
		if (rnd(&seed) % 64 == 0) {
			epoch++;
			seq = 0;
		}
		stale = rnd(&seed) % 8 == 0 && seq > 0;
		g = grant_of(epoch, stale ? seq - rnd_in(&seed, 0, seq - 1) : seq + 1,
			     rnd_in(&seed, 1, 3), rnd_in(&seed, 1, 3),
			     now + rnd_in(&seed, 0, 2 * NSEC_PER_SEC));
		rc = lease_grant_decide(&cur, &f, next_gen, ID, &g, now, NCPUS, &u);
		if (stale) {
			assert_int_equal(rc, -ESTALE);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_true(u.next_gen >= next_gen);
		if (u.lease.gen != cur.gen)
			assert_true(u.lease.gen > highest && u.lease.gen < u.next_gen);
		if (u.lease.fb_gen != cur.fb_gen)
			assert_true(u.lease.fb_gen > highest && u.lease.fb_gen < u.next_gen);
		if (u.next_gen > next_gen)
			highest = u.next_gen - 1;
		next_gen = u.next_gen;
		cur = u.lease;
		f = u.fence;
		seq = g.seq;
	}
}

/* What a coordinator may move, and how far (a fake one must not poison the
 * pinned fence for good).
 */
static void test_epoch_bounds(void **state)
{
	struct ll_fence f = {0};
	struct ll_lease old = {.gen = 1};
	struct lease_grant g = grant_of(LEASE_EPOCH_MAX, 1, 1, 1, 5000);
	struct lease_update u;

	(void)state;
	assert_int_equal(lease_epoch_ok(&f, LEASE_EPOCH_MAX - 1), 0); /* first contact */
	assert_int_equal(lease_epoch_ok(&f, LEASE_EPOCH_MAX), -ERANGE);
	assert_int_equal(lease_epoch_ok(&f, UINT64_MAX), -ERANGE);
	f.max_epoch_seen = 7;
	assert_int_equal(lease_epoch_ok(&f, 7 + LEASE_EPOCH_STEP_MAX), 0);
	assert_int_equal(lease_epoch_ok(&f, 8 + LEASE_EPOCH_STEP_MAX), -ERANGE);
	assert_int_equal(lease_fence_see_epoch(&f, 8 + LEASE_EPOCH_STEP_MAX, 0), -ERANGE);
	assert_int_equal(f.max_epoch_seen, 7);
	assert_int_equal(lease_grant_decide(&old, &f, 2, ID, &g, 10, NCPUS, &u), -ERANGE);
	g.epoch = 8;
	assert_int_equal(lease_grant_decide(&old, &f, 2, ID, &g, 10, NCPUS, &u), 0);
	assert_int_equal(u.fence.max_epoch_seen, 8);
}

static void test_grant_clamp(void **state)
{
	struct ll_limit_cfg cfg = {.rate = 1000, .burst_s = 100 * TB_SCALE};
	struct lease_grant g = grant_of(1, 1, UINT64_MAX, UINT64_MAX, 0);
	uint64_t ttl = UINT64_MAX;

	(void)state;
	assert_int_equal(lease_grant_clamp(&g, &ttl, &cfg), 3);
	assert_int_equal(g.rate, 1000);
	assert_int_equal(g.burst, 100);
	assert_int_equal(ttl, LEASE_TTL_MAX_NS);
	g = grant_of(1, 1, 999, 100, 0);
	ttl = NSEC_PER_SEC;
	assert_int_equal(lease_grant_clamp(&g, &ttl, &cfg), 0);
	assert_int_equal(g.rate, 999);
	/* The token math's own maxima bound even a huge contract. */
	cfg.rate = UINT64_MAX;
	cfg.burst_s = UINT64_MAX;
	g = grant_of(1, 1, UINT64_MAX, UINT64_MAX, 0);
	assert_int_equal(lease_grant_clamp(&g, &ttl, &cfg), 2);
	assert_true(g.rate == TB_MAX_RATE && g.burst <= TB_MAX_BURST);
}

/* A src-ip /24 limit's key for 198.18.x.0. */
static struct ll_key_id v4_key(uint8_t x)
{
	struct ll_key_id k = {.family = 4};

	k.addr[2] = htonl(0xffff);
	k.addr[3] = htonl(0xc6120000u | (uint32_t)x << 8);
	return k;
}

static struct ll_limit_cfg src24(void)
{
	struct ll_limit_cfg c = {.rate = 1000, .burst_s = 100 * TB_SCALE, .key_mode = LL_KEY_SRC_IP,
				 .scope = LL_SCOPE_GLOBAL, .in_use = 1};

	c.mask_v4 = htonl(0xffffff00u);
	memset(c.mask_v6, 0xff, sizeof(c.mask_v6));
	return c;
}

/* A coordinator's key must be a key of the limit's mode: anything else is
 * refused (it would match no bucket, or a key it does not mean).
 */
static void test_key_check(void **state)
{
	struct ll_limit_cfg c = src24();
	struct ll_key_id k = v4_key(7);

	(void)state;
	assert_int_equal(lease_key_check(&c, &k), 0);
	k.addr[3] |= htonl(1); /* not masked to the /24 */
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	k = v4_key(7);
	k.dport = htons(53); /* a field src-ip does not use */
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	k = v4_key(7);
	k.family = 5;
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	k = v4_key(7);
	k.pad0 = 1;
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	k = v4_key(7);
	k.addr[2] = 0; /* not v4-mapped */
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	c.key_mode = LL_KEY_DST_PORT;
	k = (struct ll_key_id){.proto = 17, .dport = htons(53)};
	assert_int_equal(lease_key_check(&c, &k), 0);
	k.family = 4;
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
	c.key_mode = LL_KEY_NONE;
	k = (struct ll_key_id){0};
	assert_int_equal(lease_key_check(&c, &k), -EINVAL);
}

/* Clamped to the contract; a repeated key refuses the set. */
static void test_keys_clamp(void **state)
{
	struct ll_limit_cfg c = src24();
	struct lease_key k[3] = {{.key = v4_key(1), .rate = UINT64_MAX, .burst = 5},
				 {.key = v4_key(2), .rate = 10, .burst = UINT64_MAX},
				 {.key = v4_key(3), .rate = 10, .burst = 10}};

	(void)state;
	assert_int_equal(lease_keys_clamp(&c, k, 3), 2);
	for (int i = 0; i < 3; i++)
		assert_true(k[i].rate <= 1000 && k[i].burst <= 100);
	k[2].key = v4_key(1);
	assert_int_equal(lease_keys_clamp(&c, k, 3), -EINVAL);
}

/* Moving from a held set to a new one: unchanged entries keep their
 * generation, changed and new ones take fresh numbers, keys left out are
 * deleted, and an identical set changes nothing (kg_ver stays).
 */
static void test_keys_plan(void **state)
{
	struct lease_key old[3], want[3], put[3];
	struct ll_key_id del[3];
	struct lease_key_plan p = {.put = put, .del = del};
	uint32_t gen = 100;

	(void)state;
	for (int i = 0; i < 3; i++) {
		old[i] = (struct lease_key){.key = v4_key((uint8_t)i), .rate = 10, .burst = 10};
		old[i].v = (struct ll_key_grant){
		    .rate = 10, .burst_s = 10 * TB_SCALE, .gen = 50 + (uint32_t)i};
	}
	/* keep key 0, change key 1, drop key 2, add key 9 */
	want[0] = (struct lease_key){.key = v4_key(9), .rate = 7, .burst = 7};
	want[1] = (struct lease_key){.key = v4_key(1), .rate = 20, .burst = 10};
	want[2] = (struct lease_key){.key = v4_key(0), .rate = 10, .burst = 10};
	lease_keys_plan(old, 3, want, 3, &gen, &p);
	assert_true(p.changed);
	assert_int_equal(p.n_del, 1);
	{
		struct ll_key_id k2 = v4_key(2);

		assert_memory_equal(&p.del[0], &k2, sizeof(k2));
	}
	assert_int_equal(p.n_put, 2);
	assert_int_equal(gen, 102);
	for (size_t i = 0; i < p.n_put; i++) {
		assert_true(p.put[i].v.gen == 100 || p.put[i].v.gen == 101);
		assert_int_equal(p.put[i].v.fill_ns,
				 tb_fill_ns(p.put[i].v.rate, p.put[i].v.burst_s));
	}
	/* want is sorted now: key 0 kept its generation 50 */
	assert_int_equal(want[0].v.gen, 50);
	/* The same set again: nothing to write, no generation spent. */
	for (int i = 0; i < 3; i++)
		old[i] = want[i];
	lease_keys_plan(old, 3, want, 3, &gen, &p);
	assert_false(p.changed);
	assert_int_equal(p.n_put + p.n_del, 0);
	assert_int_equal(gen, 102);
	/* The empty set deletes everything. */
	lease_keys_plan(old, 3, want, 0, &gen, &p);
	assert_true(p.changed);
	assert_int_equal(p.n_del, 3);
}

/* A grant of changes applies only on top of the one the coordinator saw
 * acknowledged: same epoch, applied seq at least its base.
 */
static void test_keys_base_check(void **state)
{
	struct ll_fence f = {0};

	(void)state;
	f.applied_epoch[ID] = 5;
	f.applied_seq[ID] = 10;
	assert_int_equal(lease_keys_base_check(&f, ID, 5, 10), 0);
	assert_int_equal(lease_keys_base_check(&f, ID, 5, 0), 0);
	assert_int_equal(lease_keys_base_check(&f, ID, 5, 11), -ESTALE);
	assert_int_equal(lease_keys_base_check(&f, ID, 6, 10), -ESTALE);
	assert_int_equal(lease_keys_base_check(&f, ID, 4, 10), -ESTALE);
	assert_int_equal(lease_keys_base_check(&f, ID + 1, 5, 0), -ESTALE);
}

/* The set's size after a grant: a whole set is its entries; changes
 * replace the held keys they name; a lease counting fewer than those is
 * off, and the caller counts the map instead.
 */
static void test_keys_count(void **state)
{
	struct ll_lease old = {.n_key_grants = 10};
	size_t count = 77;

	(void)state;
	assert_true(lease_keys_count(&old, true, 3, 8, &count));
	assert_int_equal(count, 3);
	assert_true(lease_keys_count(&old, false, 3, 2, &count));
	assert_int_equal(count, 11);
	assert_true(lease_keys_count(&old, false, 0, 10, &count));
	assert_int_equal(count, 0);
	old.n_key_grants = 1;
	count = 77;
	assert_false(lease_keys_count(&old, false, 0, 2, &count));
	assert_int_equal(count, 77);
	assert_true(lease_keys_count(&old, true, 0, 2, &count));
	assert_int_equal(count, 0);
}

/* The per-key part of an update: a set beyond the bound is refused and
 * plans nothing; a changed set moves kg_ver on and spends generations from
 * the update's counter; the same set again leaves kg_ver as it was.
 */
static void test_keys_decide(void **state)
{
	struct ll_lease old = {.kg_ver = 7, .n_key_grants = 0};
	struct lease_key held[2], want[2], put[2];
	struct ll_key_id del[2];
	struct lease_key_plan p = {.put = put, .del = del};
	struct lease_update u = {.next_gen = 40};

	(void)state;
	for (int i = 0; i < 2; i++)
		want[i] = (struct lease_key){.key = v4_key((uint8_t)i), .rate = 10, .burst = 10};
	assert_int_equal(
	    lease_keys_decide(&old, held, 0, want, 2, LL_MAX_LIMIT_KEY_GRANTS + 1, &u, &p), -E2BIG);
	assert_int_equal(u.next_gen, 40);
	assert_int_equal(u.lease.kg_ver, 0);
	assert_int_equal(lease_keys_decide(&old, held, 0, want, 2, 2, &u, &p), 0);
	assert_true(p.changed);
	assert_int_equal(p.n_put, 2);
	assert_int_equal(u.next_gen, 42);
	assert_int_equal(u.lease.n_key_grants, 2);
	assert_int_equal(u.lease.kg_ver, 8);
	/* Held as planned, the same set again: no write, kg_ver stays. */
	for (int i = 0; i < 2; i++)
		held[i] = want[i];
	old.kg_ver = 8;
	u = (struct lease_update){.next_gen = 42, .lease = {.kg_ver = 8}};
	assert_int_equal(lease_keys_decide(&old, held, 2, want, 2, 2, &u, &p), 0);
	assert_false(p.changed);
	assert_int_equal(u.next_gen, 42);
	assert_int_equal(u.lease.kg_ver, 8);
	assert_int_equal(u.lease.n_key_grants, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lease_clock_bounds),
	    cmocka_unit_test(test_fence_refuses_stale),
	    cmocka_unit_test(test_fence_see_epoch),
	    cmocka_unit_test(test_decide_refused_grant_changes_nothing),
	    cmocka_unit_test(test_decide_renewal_keeps_generation),
	    cmocka_unit_test(test_decide_changed_share_new_generation),
	    cmocka_unit_test(test_decide_revived_starts_empty),
	    cmocka_unit_test(test_decide_revived_after_fallback),
	    cmocka_unit_test(test_generations_never_reused),
	    cmocka_unit_test(test_epoch_bounds),
	    cmocka_unit_test(test_grant_clamp),
	    cmocka_unit_test(test_key_check),
	    cmocka_unit_test(test_keys_clamp),
	    cmocka_unit_test(test_keys_plan),
	    cmocka_unit_test(test_keys_base_check),
	    cmocka_unit_test(test_keys_count),
	    cmocka_unit_test(test_keys_decide),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
