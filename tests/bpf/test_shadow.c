// SPDX-License-Identifier: MIT
/*
 * Shadow first, then enforce (issue #11), on the real kernel: a shadow limit
 * charges the same bucket enforce would, so
 *  - flipping it to enforce by a policy reload carries the bucket over: a
 *    key that spent its burst in shadow gets no fresh burst, whether the
 *    reload changes only the mode or rate and burst too;
 *  - what it counts as shadow-denied (in all, and over ll_shadow_win's
 *    recent window, which `status` reports) is what an enforcing twin
 *    drops for the same offered traffic;
 *  - reaping (only full buckets go), key-table pressure (a new key charged
 *    to its prefix's fallback bucket), an agent restart that keeps the
 *    pins, and keys gone stale change neither the counts nor the tokens:
 *    no fresh burst anywhere.
 * Counts that a refill could move while a test runs get that slack from the
 * clock (hx_slack), never a fixed guess.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>

#include "bpf/harness.h"
#include "agent/stats.h"

#define SA "198.18.0.1"
#define SB "198.18.0.2"
#define SC "198.18.1.1"
#define D4 "198.19.0.1"

static struct ll_bucket bucket_of(struct fx *fx, const char *limit, const char *src)
{
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;

	assert_true(hx_limit(fx, limit, &cfg) >= 0);
	k = hx_key_addr(cfg.uid, 4, src, 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	return b;
}

/* The limit's shadow denials over ll_shadow_win's last 10 slots (what
 * `status` calls its recent window).
 */
static struct stats_window window_of(struct fx *fx, const char *limit)
{
	struct ll_limit_cfg cfg;
	struct stats_window w;
	int id = hx_limit(fx, limit, &cfg), fd = bpf_map__fd(fx->dp.skel->maps.ll_shadow_win);

	assert_true(id >= 0);
	assert_int_equal(stats_shadow_window(fd, (uint32_t)id, cfg.uid, clock_now_ns(),
					     stats_window_slots(10.0), &w),
			 0);
	return w;
}

#define ONE_LIMIT(ver, mode, rate, burst)                                                          \
	"version: " #ver "\n"                                                                      \
	"limits:\n"                                                                                \
	"  - {name: l, key: src-ip, rate: " #rate ", burst: " #burst ", mode: " mode "}\n"         \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [l]}\n"

/* Shadow lets all of 20 through, and its bucket pays for about 5 (the
 * burst): its figures say 15 would have been dropped. After the flip, a
 * key that spent its burst is refused at once (its tokens carried over),
 * while a key never seen gets its burst: the test could see a fresh one.
 */
static void flip_case(struct fx *fx, const char *enforce_yaml, uint64_t burst_after)
{
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_limit_cfg before, after;
	struct ll_limit_stats st, st2;
	struct ll_bucket b0, b1;
	struct pkt a, c;
	int n;

	assert_int_equal(hx_apply(fx, ONE_LIMIT(1, "shadow", 1, 5)), 0);
	assert_true(hx_limit(fx, "l", &before) >= 0);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	hx_udp4(&c, SC, D4, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &a, 20, NULL), 20); /* shadow drops nothing */
	slack = hx_slack(1, t0);
	st = hx_stats_of(fx, "l");
	b0 = bucket_of(fx, "l", SA);
	assert_in_range(st.allowed_pkts, 5, 5 + slack);
	assert_int_equal(st.shadow_denied_pkts, 20 - st.allowed_pkts);
	assert_int_equal(b0.spent, st.allowed_pkts);
	assert_int_equal(window_of(fx, "l").pkts, st.shadow_denied_pkts);

	assert_int_equal(hx_apply(fx, enforce_yaml), 0);
	assert_true(hx_limit(fx, "l", &after) >= 0);
	assert_int_equal(after.mode, LL_MODE_ENFORCE);
	assert_int_equal(after.uid, before.uid); /* the same buckets */
	b1 = bucket_of(fx, "l", SA);
	assert_int_equal(b1.tokens, b0.tokens); /* the reload itself deposits nothing */
	assert_int_equal(b1.last_ns, b0.last_ns);

	n = hx_send(fx, &a, 10, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(n, 0, slack); /* a fresh burst would let 5 (or 10) through */
	st2 = hx_stats_of(fx, "l");
	assert_int_equal(st2.denied_pkts, 10 - n);
	assert_int_equal(st2.shadow_denied_pkts, st.shadow_denied_pkts);
	/* A key that was never charged: its full burst, so the test can tell. */
	assert_int_equal(hx_send(fx, &c, (int)burst_after, NULL), (int)burst_after);
	print_message("    shadow admitted %llu of 20 (would drop %llu); after the flip %d of 10 "
		      "passed (refill slack %llu), a new key %llu of %llu\n",
		      (unsigned long long)st.allowed_pkts,
		      (unsigned long long)st.shadow_denied_pkts, n, (unsigned long long)slack,
		      (unsigned long long)burst_after, (unsigned long long)burst_after);
}

/* The mode alone changes: same generation, the bucket as it was. */
static void test_flip_mode_only(void **state)
{
	struct fx *fx = FX(state);

	flip_case(fx, ONE_LIMIT(2, "enforce", 1, 5), 5);
}

/* Mode and burst together (a new generation): the migration settles the old
 * tokens and raises the ceiling, it deposits nothing.
 */
static void test_flip_with_new_burst(void **state)
{
	struct fx *fx = FX(state);

	flip_case(fx, ONE_LIMIT(2, "enforce", 1, 10), 10);
}

/* ---- shadow figures against enforce ------------------------------------------------------- */

#define TWINS                                                                                      \
	"version: 1\n"                                                                             \
	"limits:\n"                                                                                \
	"  - {name: s, key: src-ip, rate: 50, burst: 10, mode: shadow}\n"                          \
	"  - {name: e, key: src-ip, rate: 50, burst: 10}\n"                                        \
	"rules:\n"                                                                                 \
	"  - {name: rs, match: {src: 198.18.0.1/32}, limits: [s]}\n"                               \
	"  - {name: re, match: {src: 198.18.0.2/32}, limits: [e]}\n"

#define TWIN_PKTS   300
#define TWIN_GAP_NS 5000000ull /* 200 packets/s offered to each: 4x the rate */
#define TWIN_RATE   50

static void sleep_until(uint64_t t)
{
	uint64_t now = clock_now_ns();

	if (now < t) {
		struct timespec ts = {.tv_sec = (time_t)((t - now) / NSEC_PER_SEC),
				      .tv_nsec = (long)((t - now) % NSEC_PER_SEC)};

		nanosleep(&ts, NULL);
	}
}

/* Twin limits, one shadow, one enforced, same rate and burst, each offered
 * the same paced stream from its own key: packet i to both, back to back.
 * The shadow twin's would-drop (its counter, and ll_shadow_win's window)
 * must equal what the enforcing twin drops, within tolerance: the enforcing
 * twin's packet i comes up to skew_max after the shadow twin's, so its
 * bucket may have refilled up to rate * skew_max more tokens at any
 * packet, plus one whole token where that crosses a token boundary:
 * |diff| <= 1 + ceil(rate * skew_max). In packets and in bytes (equal
 * frames).
 */
static void test_shadow_matches_enforce(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats ss, se;
	struct stats_window ws, we;
	uint64_t t0, skew_max = 0, tol;
	struct pkt a, b;
	int pa = 0, pb = 0;

	assert_int_equal(hx_apply(fx, TWINS), 0);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	hx_udp4(&b, SB, D4, 1000, 53, 0);
	t0 = clock_now_ns();
	for (int i = 0; i < TWIN_PKTS; i++) {
		uint64_t ta, tb;

		sleep_until(t0 + (uint64_t)i * TWIN_GAP_NS);
		ta = clock_now_ns();
		pa += hx_run(fx, &a, 1) == XDP_PASS;
		pb += hx_run(fx, &b, 1) == XDP_PASS;
		tb = clock_now_ns();
		if (tb - ta > skew_max)
			skew_max = tb - ta;
	}
	ss = hx_stats_of(fx, "s");
	se = hx_stats_of(fx, "e");
	ws = window_of(fx, "s");
	we = window_of(fx, "e");
	tol = 1 + (TWIN_RATE * skew_max + NSEC_PER_SEC - 1) / NSEC_PER_SEC;
	print_message("    %d packets each over %.2f s: shadow would drop %llu (window %llu over "
		      "%.2f s), enforce dropped %llu; skew max %llu ns, tolerance %llu\n",
		      TWIN_PKTS, (double)(clock_now_ns() - t0) / 1e9,
		      (unsigned long long)ss.shadow_denied_pkts, (unsigned long long)ws.pkts,
		      ws.seconds, (unsigned long long)se.denied_pkts, (unsigned long long)skew_max,
		      (unsigned long long)tol);
	assert_int_equal(pa, TWIN_PKTS); /* shadow drops nothing */
	assert_int_equal(pb, TWIN_PKTS - (int)se.denied_pkts);
	assert_int_equal(ss.denied_pkts, 0);
	assert_int_equal(se.shadow_denied_pkts, 0);
	/* Offered 4x the rate: most would be dropped; not a vacuous match. */
	assert_true(se.denied_pkts > TWIN_PKTS / 2);
	assert_true(ss.shadow_denied_pkts + tol >= se.denied_pkts &&
		    se.denied_pkts + tol >= ss.shadow_denied_pkts);
	assert_true(ss.shadow_denied_bytes + tol * a.len >= se.denied_bytes &&
		    se.denied_bytes + tol * a.len >= ss.shadow_denied_bytes);
	/* The run is shorter than the window: the window holds every denial. */
	assert_true(clock_now_ns() - t0 < 9 * NSEC_PER_SEC);
	assert_int_equal(ws.pkts, ss.shadow_denied_pkts);
	assert_int_equal(ws.bytes, ss.shadow_denied_bytes);
	assert_true(ws.seconds > 9.6 && ws.seconds < 10.8);
	assert_int_equal(we.pkts, 0); /* enforced denials are not in the shadow window */
	/* Per key: the shadow bucket admitted what the limit allowed. */
	assert_int_equal(bucket_of(fx, "s", SA).spent, ss.allowed_pkts);
}

/* A window slot of another time or another limit uid counts nothing. */
static void test_window_forgets(void **state)
{
	struct fx *fx = FX(state);
	int fd = bpf_map__fd(fx->dp.skel->maps.ll_shadow_win);
	struct ll_limit_cfg cfg;
	struct stats_window w;
	uint64_t now;
	struct pkt a;
	int id;

	assert_int_equal(hx_apply(fx, ONE_LIMIT(1, "shadow", 1, 2)), 0);
	id = hx_limit(fx, "l", &cfg);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &a, 10, NULL), 10);
	now = clock_now_ns();
	assert_int_equal(stats_shadow_window(fd, (uint32_t)id, cfg.uid, now, 10, &w), 0);
	assert_true(w.pkts >= 7);
	/* 16 slots later none of those slots is within the last 10. */
	assert_int_equal(
	    stats_shadow_window(fd, (uint32_t)id, cfg.uid, now + (16ull << LL_WIN_SHIFT), 10, &w),
	    0);
	assert_int_equal(w.pkts, 0);
	/* Another uid on the same id (a reused limit id): nothing of this one. */
	assert_int_equal(stats_shadow_window(fd, (uint32_t)id, cfg.uid + 1000, now, 10, &w), 0);
	assert_int_equal(w.pkts, 0);
	/* The limit removed and a new one of another name: it starts at 0,
	 * on whichever id it gets (a new uid either way).
	 */
	assert_int_equal(
	    hx_apply(fx, "version: 2\n"
			 "limits: [{name: m, key: src-ip, rate: 1, burst: 2, mode: shadow}]\n"
			 "rules: [{name: all, limits: [m]}]\n"),
	    0);
	assert_true(hx_limit(fx, "m", NULL) >= 0);
	assert_int_equal(window_of(fx, "m").pkts, 0);
	assert_int_equal(hx_send(fx, &a, 5, NULL), 5);
	assert_int_equal(window_of(fx, "m").pkts, hx_stats_of(fx, "m").shadow_denied_pkts);
}

/* ---- reaping, stale keys ------------------------------------------------------------------ */

#define SMALL_KEYS 4
/* Past half of ll_buckets (max-keys + one overflow bucket per possible limit). */
#define FILL_KEYS ((SMALL_KEYS + LL_MAX_LIMITS) / 2 + 8)
_Static_assert(FILL_KEYS + 2 < 256, "one key per /24 of 198.18.0.0/16");

static int setup_small(void **state)
{
	return hx_setup_keys(state, SMALL_KEYS);
}

/* rate 1, burst 100: 11 s after its last packet a drained key holds ~11
 * tokens (not full: the reaper must keep it), a key that spent 1 is full
 * again (the reaper may delete it: it would come back full all the same).
 * A small map, so that the reaper reaps idle keys at all. The drained key
 * keeps its tokens and shadow counts go on from where they were.
 */
static void test_reap_keeps_shadow_debt(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), slack, now;
	struct ll_limit_stats st, st2;
	struct ll_limit_cfg cfg;
	struct ll_bucket ba, bc, ba2;
	struct ll_key ka, kc;
	struct pkt a, c, k;
	char src[32];
	int reaped, nb;

	assert_int_equal(hx_apply(fx, ONE_LIMIT(1, "shadow", 1, 100)), 0);
	assert_true(hx_limit(fx, "l", &cfg) >= 0);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	hx_udp4(&c, SC, D4, 1000, 53, 0);
	assert_true(hx_run(fx, &a, 150) >= 0); /* a: drained, ~50 would-drops */
	assert_int_equal(hx_run(fx, &c, 1), XDP_PASS);
	/* Fill the map past half its entries (max-keys + one overflow bucket
	 * per limit), where the reaper deletes idle keys: each of these spends
	 * 1 token of 100 and is full again a second later.
	 */
	for (int i = 0; i < FILL_KEYS; i++) {
		snprintf(src, sizeof(src), "198.18.%d.9", 2 + i);
		hx_udp4(&k, src, D4, 1000, 53, 0);
		assert_int_equal(hx_run(fx, &k, 1), XDP_PASS);
	}
	nb = hx_count_buckets(fx, cfg.uid);
	assert_true(nb * 2 > SMALL_KEYS + LL_MAX_LIMITS);
	ka = hx_key_addr(cfg.uid, 4, SA, 32);
	kc = hx_key_addr(cfg.uid, 4, SC, 32);
	assert_int_equal(hx_bucket(fx, &ka, &ba), 0);
	st = hx_stats_of(fx, "l");
	slack = hx_slack(1, t0);
	assert_in_range(ba.spent, 100, 100 + slack);
	assert_true(st.shadow_denied_pkts >= 150 - 100 - slack);

	now = ba.last_ns + 11 * NSEC_PER_SEC;
	if (hx_bucket(fx, &kc, &bc) == 0 && bc.last_ns + 11 * NSEC_PER_SEC > now)
		now = bc.last_ns + 11 * NSEC_PER_SEC;
	reaped = dp_buckets_reap(&fx->dp, now);
	assert_true(reaped > 0); /* the reaper did reap here: the full keys */
	/* a is not full then: kept, untouched. */
	assert_int_equal(hx_bucket(fx, &ka, &ba2), 0);
	assert_int_equal(ba2.tokens, ba.tokens);
	assert_int_equal(ba2.last_ns, ba.last_ns);
	assert_int_equal(ba2.spent, ba.spent);
	st2 = hx_stats_of(fx, "l");
	assert_memory_equal(&st2, &st, sizeof(st)); /* reaping moves no counter */
	assert_int_equal(window_of(fx, "l").pkts, st.shadow_denied_pkts);

	/* a comes back now: still in debt, its packets are would-drops. */
	assert_int_equal(hx_send(fx, &a, 20, NULL), 20);
	slack = hx_slack(1, t0);
	st2 = hx_stats_of(fx, "l");
	assert_in_range(st2.allowed_pkts - st.allowed_pkts, 0, slack);
	assert_int_equal(st2.shadow_denied_pkts - st.shadow_denied_pkts,
			 20 - (st2.allowed_pkts - st.allowed_pkts));
	print_message(
	    "    %d buckets, reaped %d at +11 s; the drained key kept %.2f tokens and "
	    "%llu would-drops, then %llu of 20 more admitted (slack %llu)\n",
	    nb, reaped, (double)ba2.tokens / TB_SCALE, (unsigned long long)st.shadow_denied_pkts,
	    (unsigned long long)(st2.allowed_pkts - st.allowed_pkts), (unsigned long long)slack);
}

/* A key gone stale (no packet for longer than the fill time) comes back
 * with exactly one burst, never more, in shadow as in enforce: its would-
 * drops start after burst packets. Its bucket is aged, not waited for.
 */
static void test_stale_key_one_burst(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0, slack;
	struct ll_limit_stats st, st2;
	struct ll_limit_cfg cfg;
	struct ll_bucket b;
	struct ll_key k;
	struct pkt a;

	assert_int_equal(hx_apply(fx, ONE_LIMIT(1, "shadow", 1, 5)), 0);
	assert_true(hx_limit(fx, "l", &cfg) >= 0);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &a, 8, NULL), 8);
	k = hx_key_addr(cfg.uid, 4, SA, 32);
	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	/* Stale: its last packet a minute ago (12 fill times), tokens as they
	 * were then. (Not a day: CLOCK_MONOTONIC may not be a day old.)
	 */
	assert_true(b.last_ns > 60 * NSEC_PER_SEC);
	b.last_ns -= 60 * NSEC_PER_SEC;
	b.deny_hint = 0;
	assert_int_equal(bpf_map_update_elem(fx->dp.buckets_fd, &k, &b, BPF_F_LOCK), 0);
	st = hx_stats_of(fx, "l");
	t0 = clock_now_ns();
	assert_int_equal(hx_send(fx, &a, 12, NULL), 12);
	slack = hx_slack(1, t0);
	st2 = hx_stats_of(fx, "l");
	assert_in_range(st2.allowed_pkts - st.allowed_pkts, 5, 5 + slack); /* one burst */
	assert_int_equal(st2.shadow_denied_pkts - st.shadow_denied_pkts,
			 12 - (st2.allowed_pkts - st.allowed_pkts));

	/* Flipped now: the stale key's new debt carries over too. */
	assert_int_equal(hx_apply(fx, ONE_LIMIT(2, "enforce", 1, 5)), 0);
	assert_in_range(hx_send(fx, &a, 5, NULL), 0, hx_slack(1, t0));
}

/* Key-table pressure (eviction's other side: no room for a bucket of its
 * own): a new key is charged to its /24's fallback bucket and graduates
 * with what that bucket had left. In shadow, key a takes the prefix's
 * burst with it, key b of the same /24 finds the prefix empty: its packets
 * are would-drops, not a fresh burst; a spends the 4 it took along. After
 * the flip both are refused at once.
 */
static void test_pressure_no_fresh_burst(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_limit_stats s0, s1, s2, s3;
	struct pkt a, b;
	int n;

	assert_int_equal(hx_apply(fx, ONE_LIMIT(1, "shadow", 1, 5)), 0);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	hx_udp4(&a, "198.18.3.1", D4, 1000, 53, 0);
	hx_udp4(&b, "198.18.3.2", D4, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &a, 1, NULL), 1);
	s0 = hx_stats_of(fx, "l");
	assert_int_equal(s0.allowed_pkts, 1);
	assert_int_equal(s0.prefix_pkts, 1);
	assert_int_equal(s0.graduated, 1);
	assert_int_equal(hx_send(fx, &b, 5, NULL), 5); /* shadow: all pass */
	s1 = hx_stats_of(fx, "l");
	slack = hx_slack(1, t0);
	assert_in_range(s1.allowed_pkts - s0.allowed_pkts, 0, slack); /* no fresh burst */
	assert_int_equal(s1.shadow_denied_pkts, 5 - (s1.allowed_pkts - s0.allowed_pkts));
	assert_int_equal(hx_send(fx, &a, 10, NULL), 10);
	s2 = hx_stats_of(fx, "l");
	slack = hx_slack(1, t0);
	assert_in_range(s2.allowed_pkts - s1.allowed_pkts, 4, 4 + slack); /* what it took along */
	assert_int_equal(s2.allowed_pkts + s2.shadow_denied_pkts, 16);
	assert_int_equal(window_of(fx, "l").pkts, s2.shadow_denied_pkts);

	assert_int_equal(hx_apply(fx, ONE_LIMIT(2, "enforce", 1, 5)), 0);
	n = hx_send(fx, &a, 5, NULL) + hx_send(fx, &b, 5, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(n, 0, slack);
	s3 = hx_stats_of(fx, "l");
	assert_int_equal(s3.denied_pkts, 10 - n);
	print_message("    under pressure: b %llu of 5 admitted (prefix spent), a %llu of 10 "
		      "(took 4 along), %llu would-drops; after the flip %d of 10 (slack %llu)\n",
		      (unsigned long long)(s1.allowed_pkts - s0.allowed_pkts),
		      (unsigned long long)(s2.allowed_pkts - s1.allowed_pkts),
		      (unsigned long long)s2.shadow_denied_pkts, n, (unsigned long long)slack);
}

/* ---- an agent restart that keeps the pins ------------------------------------------------- */

static char pin_dir[64];

static int setup_pinned(void **state)
{
	int rc = hx_setup(state); /* the privilege probe and the private bpffs */

	if (rc || !*state)
		return rc;
	snprintf(pin_dir, sizeof(pin_dir), "/sys/fs/bpf/ll-shadow-%d", (int)getpid());
	return mkdir(pin_dir, 0700) && errno != EEXIST ? -1 : 0;
}

static int teardown_pinned(void **state)
{
	char p[64 + 256 + 2];
	struct dirent *e;
	DIR *d = opendir(pin_dir);

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%s/%s", pin_dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(pin_dir);
	return hx_teardown(state);
}

static void open_pinned(struct fx *pfx)
{
	struct dp_opts o = {.pin_dir = pin_dir, .max_keys = HX_MAX_KEYS};

	memset(pfx, 0, sizeof(*pfx));
	assert_int_equal(hx_dp_open_quiet(&pfx->dp, &o), 0);
	pfx->ncpus = pfx->dp.ncpus;
}

/* Shadow counts, the window and the key's debt survive the agent going
 * away and a new one opening the same pins and applying the same policy
 * file; the flip made by the new agent carries the bucket over.
 */
static void test_restart_keeps_shadow_state(void **state)
{
	uint64_t t0 = clock_now_ns(), slack;
	struct ll_limit_stats st, st2;
	struct stats_window w, w2;
	struct ll_bucket b, b2;
	struct fx pfx;
	struct pkt a;
	int rc, n;

	FX(state);
	open_pinned(&pfx);
	assert_int_equal(hx_apply(&pfx, ONE_LIMIT(1, "shadow", 1, 5)), 0);
	hx_udp4(&a, SA, D4, 1000, 53, 0);
	assert_int_equal(hx_send(&pfx, &a, 20, NULL), 20);
	st = hx_stats_of(&pfx, "l");
	w = window_of(&pfx, "l");
	b = bucket_of(&pfx, "l", SA);
	assert_int_equal(w.pkts, st.shadow_denied_pkts);
	dp_close(&pfx.dp);

	open_pinned(&pfx);
	rc = hx_apply(&pfx, ONE_LIMIT(1, "shadow", 1, 5)); /* the same file again */
	assert_true(rc == 0 || rc == -ESTALE);
	st2 = hx_stats_of(&pfx, "l");
	w2 = window_of(&pfx, "l");
	b2 = bucket_of(&pfx, "l", SA);
	assert_memory_equal(&st2, &st, sizeof(st));
	assert_int_equal(w2.pkts, w.pkts);
	assert_int_equal(b2.tokens, b.tokens);
	assert_int_equal(b2.last_ns, b.last_ns);
	assert_int_equal(b2.spent, b.spent);

	assert_int_equal(hx_apply(&pfx, ONE_LIMIT(2, "enforce", 1, 5)), 0);
	n = hx_send(&pfx, &a, 10, NULL);
	slack = hx_slack(1, t0);
	assert_in_range(n, 0, slack);
	assert_int_equal(hx_stats_of(&pfx, "l").denied_pkts, 10 - n);
	print_message("    restarted: %llu would-drops kept (window %llu); after the flip %d of "
		      "10 passed (slack %llu)\n",
		      (unsigned long long)st2.shadow_denied_pkts, (unsigned long long)w2.pkts, n,
		      (unsigned long long)slack);
	dp_close(&pfx.dp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_flip_mode_only, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_flip_with_new_burst, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_shadow_matches_enforce, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_window_forgets, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_reap_keeps_shadow_debt, setup_small, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_stale_key_one_burst, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_pressure_no_fresh_burst, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_restart_keeps_shadow_state, setup_pinned,
					    teardown_pinned),
	};

	return cmocka_run_group_tests_name("shadow", tests, NULL, NULL);
}
