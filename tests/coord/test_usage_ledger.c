// SPDX-License-Identifier: MIT
/*
 * The usage ledger (user/coord/usage_ledger.c) on each of its engines: a
 * real SQLite file, then a real PostgreSQL server (tests/pg_server.h, one
 * for the binary, a new database per test); every test runs on both. Fed
 * reports as a fake agent would send them: duplicated, reordered, delayed,
 * across agent restarts (counters kept or lost), across hour, day and month
 * boundaries, and in random orders against a reference model. Every test
 * ends with the ledger's totals equal, exactly, to what the fake agent
 * counted. The latency it exports counts every commit; the figures (arrival
 * to commit, throughput, bytes per row) are bench/coord/bench_usage_ledger.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "lib/monotonic.h"
#include "cmd/usage_cmd.h"
#include "coord/usage_db.h"
#include "coord/usage_ledger.h"
#include "lib/wire.h"
#include "pg_server.h"

/* The engine the group runs on: SQLite, then PostgreSQL (pg). */
static struct pg_server pg;
static bool use_pg;
static int n_db;

/* 2026-11-30T23:00:00Z: an hour before a day and a month end. */
#define T0 1796079600LL

struct fx {
	char dir[64];
	char path[256]; /* the file, or the test's database */
	struct uledger *lg;
};

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/var/tmp/ll-uledger-XXXXXX");
	if (!mkdtemp(fx->dir))
		return -1;
	snprintf(fx->path, sizeof(fx->path), "%s/ledger.db", fx->dir);
	if (use_pg) {
		char name[16];

		snprintf(name, sizeof(name), "t%d", ++n_db);
		if (pg_server_create_db(&pg, name, fx->path, sizeof(fx->path)))
			return -1;
	}
	if (uledger_open(&fx->lg, fx->path))
		return -1;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	char cmd[128];

	uledger_close(fx->lg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	if (system(cmd))
		return -1;
	free(fx);
	return 0;
}

static struct uledger_totals tot(uint64_t a, uint64_t d, uint64_t f, uint64_t b)
{
	return (struct uledger_totals){.admitted = a, .denied = d, .fallback = f, .bypass = b};
}

/* One report of one limit. */
static void rep(struct fx *fx, const char *holder, uint64_t inc, uint64_t seq, int64_t now,
		const char *limit, struct uledger_totals t)
{
	struct uledger_entry e = {.limit = limit, .t = t};

	assert_int_equal(uledger_record(fx->lg, holder, inc, seq, now, clock_now_ns(), &e, 1), 0);
}

static int add_row(const struct uledger_row *r, void *arg)
{
	struct uledger_totals *t = arg;

	t->admitted += r->t.admitted;
	t->denied += r->t.denied;
	t->fallback += r->t.fallback;
	t->bypass += r->t.bypass;
	return 0;
}

/* Everything the ledger holds for (limit, holder), over all periods. */
static struct uledger_totals ledger_sum(struct fx *fx, const char *limit, const char *holder,
					enum uledger_period p)
{
	struct uledger_query q = {.period = p, .limit = limit, .holder = holder, .by_holder = 1};
	struct uledger_totals t = {0};

	assert_int_equal(uledger_query(fx->path, &q, add_row, &t), 0);
	return t;
}

static void assert_totals(struct uledger_totals got, struct uledger_totals want)
{
	assert_int_equal(got.admitted, want.admitted);
	assert_int_equal(got.denied, want.denied);
	assert_int_equal(got.fallback, want.fallback);
	assert_int_equal(got.bypass, want.bypass);
}

/* A retransmitted or replayed report (same seq, or an old one again) adds
 * nothing; the totals are the last report's.
 */
static void test_duplicate_and_replayed(void **state)
{
	struct fx *fx = *state;

	for (uint64_t s = 1; s <= 5; s++)
		rep(fx, "gw-1", 7, s, T0 + (int64_t)s, "a", tot(100 * s, 10 * s, 0, 0));
	rep(fx, "gw-1", 7, 5, T0 + 6, "a", tot(500, 50, 0, 0)); /* retransmitted */
	rep(fx, "gw-1", 7, 3, T0 + 7, "a", tot(300, 30, 0, 0)); /* replayed */
	rep(fx, "gw-1", 7, 1, T0 + 8, "a", tot(100, 10, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(500, 50, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->stale, 3);
}

/* Seq 3 before 2: 2 is old news (its totals are inside 3's). */
static void test_reordered(void **state)
{
	struct fx *fx = *state;

	rep(fx, "gw-1", 7, 1, T0, "a", tot(10, 1, 0, 0));
	rep(fx, "gw-1", 7, 3, T0 + 1, "a", tot(30, 3, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 2, "a", tot(20, 2, 0, 0));
	rep(fx, "gw-1", 7, 4, T0 + 3, "a", tot(40, 4, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(40, 4, 0, 0));
}

/* A report held up for minutes (sent, stuck, delivered after newer ones):
 * the clock moves 7 minutes, the old seq comes, nothing is added, and what
 * the newer reports counted stays where it was recorded.
 */
static void test_delayed_minutes(void **state)
{
	struct fx *fx = *state;

	rep(fx, "gw-1", 7, 1, T0 + 10, "a", tot(1000, 0, 0, 0));
	rep(fx, "gw-1", 7, 3, T0 + 20, "a", tot(3000, 0, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 20 + 7 * 60, "a", tot(2000, 0, 0, 0));
	rep(fx, "gw-1", 7, 4, T0 + 20 + 7 * 60 + 1, "a", tot(4000, 0, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(4000, 0, 0, 0));
}

/* Agent restarts. Incarnation 8 kept its pinned counters (totals go on
 * from 7's); 9 lost them (a reboot: totals from 0). A late report of a
 * closed incarnation counts nothing. Datapath total: 7 counted 100, 8
 * counted 50 more (150 - 100), 9 counted 30.
 */
static void test_agent_restart(void **state)
{
	struct fx *fx = *state;

	rep(fx, "gw-1", 7, 1, T0, "a", tot(60, 6, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 1, "a", tot(100, 10, 0, 0));
	rep(fx, "gw-1", 8, 1, T0 + 2, "a", tot(120, 12, 0, 0)); /* pins kept */
	rep(fx, "gw-1", 8, 2, T0 + 3, "a", tot(150, 15, 0, 0));
	rep(fx, "gw-1", 7, 3, T0 + 4, "a", tot(110, 11, 0, 0)); /* closed: stale */
	rep(fx, "gw-1", 9, 1, T0 + 5, "a", tot(20, 2, 0, 0));	/* pins lost */
	rep(fx, "gw-1", 9, 2, T0 + 6, "a", tot(30, 3, 0, 0));
	rep(fx, "gw-1", 8, 3, T0 + 7, "a", tot(160, 16, 0, 0)); /* closed: stale */
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(180, 18, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->continued, 1);
	assert_int_equal(uledger_counters(fx->lg)->restarted, 1);
	assert_int_equal(uledger_counters(fx->lg)->stale, 2);
}

/* Totals that go backwards under a newer seq (the agent zeroed a limit's
 * counters when its slot went to another limit): counted, from 0.
 */
/* The counters identity (HELLO) settles what totals cannot: a reboot whose
 * new counters passed every old total before its first report is a restart
 * from 0 (all of it counts), and a restart that kept its pins with the same
 * identity continues.
 */
static void test_reboot_identity(void **state)
{
	struct fx *fx = *state;
	struct uledger_entry e = {.limit = "a"};

	e.t = tot(100, 10, 0, 0);
	assert_int_equal(
	    uledger_record_ident(fx->lg, "gw-1", 7, 0xaa, 1, T0, clock_now_ns(), &e, 1), 0);
	e.t = tot(130, 12, 0, 0); /* pins kept: same identity, a new incarnation */
	assert_int_equal(
	    uledger_record_ident(fx->lg, "gw-1", 8, 0xaa, 1, T0 + 1, clock_now_ns(), &e, 1), 0);
	e.t = tot(500, 50, 0, 0); /* rebooted, and busy before its first report */
	assert_int_equal(
	    uledger_record_ident(fx->lg, "gw-1", 9, 0xbb, 1, T0 + 2, clock_now_ns(), &e, 1), 0);
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(630, 62, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->continued, 1);
	assert_int_equal(uledger_counters(fx->lg)->restarted, 1);
}

static void test_backwards_counted(void **state)
{
	struct fx *fx = *state;

	rep(fx, "gw-1", 7, 1, T0, "a", tot(100, 0, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 1, "a", tot(5, 0, 0, 0));
	rep(fx, "gw-1", 7, 3, T0 + 2, "a", tot(25, 0, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(125, 0, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->backwards, 1);
}

/* Metering turned on over a running agent (its incarnation, its start in
 * ns, is before the metering began): what it admitted before is not usage
 * of the metered limit; its first report is the baseline. An agent started
 * after counts from 0.
 */
static void test_metering_starts(void **state)
{
	struct fx *fx = *state;
	const char *const metered[] = {"a"};
	uint64_t old_inc = (uint64_t)(T0 - 86400) * 1000000000ull;
	uint64_t new_inc = (uint64_t)(T0 + 10) * 1000000000ull;

	assert_int_equal(uledger_set_metered(fx->lg, metered, 1, T0), 0);
	rep(fx, "gw-1", old_inc, 40, T0 + 20, "a", tot(5000, 70, 0, 9));
	rep(fx, "gw-1", old_inc, 41, T0 + 21, "a", tot(5100, 71, 0, 9));
	rep(fx, "gw-2", new_inc, 1, T0 + 20, "a", tot(30, 0, 0, 0));
	rep(fx, "gw-2", new_inc, 2, T0 + 21, "a", tot(50, 0, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(100, 1, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-2", ULEDGER_HOUR), tot(50, 0, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->first, 1);
	/* Again at a later start: the first start stands. */
	assert_int_equal(uledger_set_metered(fx->lg, metered, 1, T0 + 3600), 0);
	rep(fx, "gw-2", new_inc, 3, T0 + 3700, "a", tot(60, 0, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-2", ULEDGER_HOUR), tot(60, 0, 0, 0));
}

/* A limit no longer metered drops its marks and start (its usage stays);
 * metered again, a running agent starts from its next report, not from
 * what passed meanwhile.
 */
static void test_metered_again(void **state)
{
	struct fx *fx = *state;
	const char *const a[] = {"a"}, *const b[] = {"b"};
	uint64_t inc = (uint64_t)(T0 - 60) * 1000000000ull;

	rep(fx, "gw-1", inc, 1, T0, "a", tot(100, 0, 0, 0)); /* no start recorded: from 0 */
	assert_int_equal(uledger_set_metered(fx->lg, a, 1, T0), 0);
	rep(fx, "gw-1", inc, 2, T0 + 10, "a", tot(120, 0, 0, 0));
	assert_int_equal(uledger_set_metered(fx->lg, b, 1, T0 + 20), 0); /* a: not metered */
	assert_int_equal(uledger_set_metered(fx->lg, a, 1, T0 + 60), 0); /* metered again */
	rep(fx, "gw-1", inc, 9, T0 + 61, "a", tot(300, 0, 0, 0));
	rep(fx, "gw-1", inc, 10, T0 + 62, "a", tot(350, 0, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(170, 0, 0, 0));
}

struct collect {
	struct uledger_row r[16];
	int n;
};

static int collect_row(const struct uledger_row *r, void *arg)
{
	struct collect *c = arg;

	if (c->n < 16)
		c->r[c->n] = *r;
	c->n++;
	return 0;
}

/* Hour, day and month boundaries (the ledger's clock injected): usage
 * goes to the period its report arrived in; day and month sum the hours.
 */
static void test_period_rollover(void **state)
{
	struct fx *fx = *state;
	struct uledger_query q = {.period = ULEDGER_HOUR, .limit = "a", .by_holder = 1};
	struct collect c = {0};

	rep(fx, "gw-1", 7, 1, T0 + 3599, "a", tot(10, 0, 0, 0));     /* 2026-11-30T23 */
	rep(fx, "gw-1", 7, 2, T0 + 3600, "a", tot(25, 0, 0, 0));     /* 2026-12-01T00 */
	rep(fx, "gw-1", 7, 3, T0 + 3600 + 1, "a", tot(26, 0, 0, 0)); /* same hour */
	rep(fx, "gw-1", 7, 4, T0 + 2 * 3600, "a", tot(40, 1, 0, 0)); /* 2026-12-01T01 */
	assert_int_equal(uledger_query(fx->path, &q, collect_row, &c), 0);
	assert_int_equal(c.n, 3);
	assert_int_equal(c.r[0].start, T0);
	assert_int_equal(c.r[0].t.admitted, 10);
	assert_int_equal(c.r[1].start, T0 + 3600);
	assert_int_equal(c.r[1].t.admitted, 16);
	assert_int_equal(c.r[2].t.admitted, 14);
	assert_int_equal(c.r[2].t.denied, 1);
	memset(&c, 0, sizeof(c));
	q.period = ULEDGER_MONTH;
	assert_int_equal(uledger_query(fx->path, &q, collect_row, &c), 0);
	assert_int_equal(c.n, 2); /* November, December */
	assert_int_equal(c.r[0].t.admitted, 10);
	assert_int_equal(c.r[1].t.admitted, 30);
	assert_int_equal(c.r[1].start, T0 + 3600);
	assert_int_equal(c.r[1].end, uledger_period_next(ULEDGER_MONTH, T0 + 3600));
	assert_int_equal(c.r[1].end - c.r[1].start, 31 * 86400);
	memset(&c, 0, sizeof(c));
	q.period = ULEDGER_DAY;
	q.from = T0 + 3600; /* December only */
	assert_int_equal(uledger_query(fx->path, &q, collect_row, &c), 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.r[0].t.admitted, 30);
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_DAY), tot(40, 1, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_MONTH), tot(40, 1, 0, 0));
}

/* A gateway whose lease expired and that fails open: its bypass totals
 * appear as bypass, apart from admitted.
 */
static void test_bypass_recorded(void **state)
{
	struct fx *fx = *state;
	struct uledger_entry e[2] = {{.limit = "a", .t = tot(50, 5, 0, 0)},
				     {.limit = "b", .t = tot(7, 0, 3, 0)}};

	assert_int_equal(uledger_record(fx->lg, "gw-1", 7, 1, T0, clock_now_ns(), e, 2), 0);
	e[0].t = tot(50, 5, 0, 400); /* lease dead: fail-open */
	e[1].t = tot(7, 0, 90, 0);   /* lease dead: fallback share */
	assert_int_equal(uledger_record(fx->lg, "gw-1", 7, 2, T0 + 5, clock_now_ns(), e, 2), 0);
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(50, 5, 0, 400));
	assert_totals(ledger_sum(fx, "b", "gw-1", ULEDGER_HOUR), tot(7, 0, 90, 0));
}

/* ---- the property test ---- */

#define P_INCS	  5
#define P_SEQS	  12
#define P_HOLDERS 3

struct p_report {
	int holder, inc; /* inc index in the holder's life */
	uint64_t seq;
	struct uledger_totals t;
};

/* The reference model: the ledger's rules, written plainly. */
struct p_mark {
	bool seen, closed;
	uint64_t seq;
	struct uledger_totals t;
};

struct p_model {
	struct p_mark m[P_HOLDERS][P_INCS];
	int cur[P_HOLDERS]; /* -1 none */
	struct uledger_totals sum[P_HOLDERS];
};

static bool ge(const struct uledger_totals *a, const struct uledger_totals *b)
{
	return a->admitted >= b->admitted && a->denied >= b->denied && a->fallback >= b->fallback &&
	       a->bypass >= b->bypass;
}

static void model_apply(struct p_model *md, const struct p_report *r)
{
	struct p_mark *mk = &md->m[r->holder][r->inc];
	struct uledger_totals base = {0};

	if (mk->seen) {
		if (mk->closed || r->seq <= mk->seq)
			return;
		if (ge(&r->t, &mk->t))
			base = mk->t;
	} else {
		int c = md->cur[r->holder];

		if (c >= 0) {
			if (ge(&r->t, &md->m[r->holder][c].t))
				base = md->m[r->holder][c].t;
			md->m[r->holder][c].closed = true;
		}
		md->cur[r->holder] = r->inc;
		mk->seen = true;
	}
	mk->seq = r->seq;
	mk->t = r->t;
	md->sum[r->holder].admitted += r->t.admitted - base.admitted;
	md->sum[r->holder].denied += r->t.denied - base.denied;
	md->sum[r->holder].fallback += r->t.fallback - base.fallback;
	md->sum[r->holder].bypass += r->t.bypass - base.bypass;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random lives: each holder runs P_INCS incarnations of P_SEQS reports with
 * rising totals; an incarnation keeps its predecessor's counters (pins
 * kept) or starts below them (pins lost). The datapath's true total is
 * what each incarnation added. Delivery: each incarnation's first report
 * first (it follows the hello on a new connection), then its reports
 * shuffled and duplicated, its last report before the next incarnation
 * begins, and stale copies of older incarnations sprinkled later. Checks:
 * ledger = model always; ledger = datapath under that delivery.
 */
static void test_property_random_orders(void **state)
{
	struct fx *fx = *state;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	static struct p_report ev[P_HOLDERS * P_INCS * P_SEQS * 3];

	for (int round = 0; round < 20; round++) {
		struct uledger_totals truth[P_HOLDERS] = {{0}};
		struct p_report lives[P_HOLDERS][P_INCS][P_SEQS];
		struct p_model md;
		size_t n = 0;
		char limit[16];

		memset(&md, 0, sizeof(md));
		for (int h = 0; h < P_HOLDERS; h++)
			md.cur[h] = -1;
		snprintf(limit, sizeof(limit), "p%d", round);
		for (int h = 0; h < P_HOLDERS; h++) {
			struct uledger_totals t = {0};

			for (int i = 0; i < P_INCS; i++) {
				bool kept = i > 0 && rnd(&seed) % 2;

				if (i > 0 && !kept)
					t = tot(rnd(&seed) % 3, 0, 0, 0); /* below: began again */
				for (int s = 0; s < P_SEQS; s++) {
					struct uledger_totals d =
					    tot(rnd(&seed) % 1000, rnd(&seed) % 100,
						rnd(&seed) % 4 ? 0 : rnd(&seed) % 50,
						rnd(&seed) % 5 ? 0 : rnd(&seed) % 50);

					if (s == 0 && i > 0 && !kept) {
						/* the first report of a reboot: below the last */
						d = tot(0, 0, 0, 0);
					}
					t.admitted += d.admitted;
					t.denied += d.denied;
					t.fallback += d.fallback;
					t.bypass += d.bypass;
					lives[h][i][s] =
					    (struct p_report){h, i, (uint64_t)s + 1, t};
				}
				/* What the datapath counted in this incarnation. */
				{
					struct uledger_totals from = {0};

					if (kept)
						from = lives[h][i - 1][P_SEQS - 1].t;
					truth[h].admitted += t.admitted - from.admitted;
					truth[h].denied += t.denied - from.denied;
					truth[h].fallback += t.fallback - from.fallback;
					truth[h].bypass += t.bypass - from.bypass;
				}
			}
		}
		/* Delivery, holders interleaved incarnation by incarnation. */
		for (int i = 0; i < P_INCS; i++)
			for (int h = 0; h < P_HOLDERS; h++) {
				size_t first = n;
				int last = P_SEQS - 1;

				ev[n++] = lives[h][i][0];
				for (int s = 1; s < last; s++) {
					ev[n++] = lives[h][i][s];
					if (rnd(&seed) % 4 == 0) /* duplicate */
						ev[n++] =
						    lives[h][i][rnd(&seed) % (uint64_t)(s + 1)];
				}
				for (size_t k = n - 1; k > first + 1; k--) { /* shuffle */
					size_t j = first + 1 + rnd(&seed) % (k - first);
					struct p_report tmp = ev[k];

					ev[k] = ev[j];
					ev[j] = tmp;
				}
				ev[n++] = lives[h][i][last];
				if (i > 0 && rnd(&seed) % 2) /* a stale copy of an older life */
					ev[n++] =
					    lives[h][rnd(&seed) % (uint64_t)i][rnd(&seed) % P_SEQS];
			}
		for (size_t k = 0; k < n; k++) {
			char holder[16];

			snprintf(holder, sizeof(holder), "gw-%d", ev[k].holder);
			rep(fx, holder, 1000 + (uint64_t)ev[k].inc, ev[k].seq,
			    T0 + (int64_t)(k * 37), limit, ev[k].t);
			model_apply(&md, &ev[k]);
		}
		for (int h = 0; h < P_HOLDERS; h++) {
			char holder[16];
			struct uledger_totals got;

			snprintf(holder, sizeof(holder), "gw-%d", h);
			got = ledger_sum(fx, limit, holder, ULEDGER_DAY);
			assert_totals(got, md.sum[h]);
			assert_totals(got, truth[h]);
		}
	}
}

/* Shuffled delivery with no ordering promise at all: the ledger still
 * equals the model (it never counts a report twice, whatever the order).
 */
static void test_property_any_order_matches_model(void **state)
{
	struct fx *fx = *state;
	uint64_t seed = 0x1234567887654321ull;

	for (int round = 0; round < 20; round++) {
		struct p_report ev[P_INCS * P_SEQS * 2];
		struct uledger_totals t = {0};
		struct p_model md;
		size_t n = 0;
		char limit[16];

		memset(&md, 0, sizeof(md));
		md.cur[0] = -1;
		snprintf(limit, sizeof(limit), "q%d", round);
		for (int i = 0; i < P_INCS; i++) {
			if (i && rnd(&seed) % 2)
				t = tot(0, 0, 0, 0);
			for (int s = 0; s < P_SEQS; s++) {
				t.admitted += rnd(&seed) % 100;
				t.bypass += rnd(&seed) % 3;
				ev[n++] = (struct p_report){0, i, (uint64_t)s + 1, t};
				if (rnd(&seed) % 3 == 0) {
					ev[n] = ev[n - 1];
					n++;
				}
			}
		}
		for (size_t k = n - 1; k > 0; k--) {
			size_t j = rnd(&seed) % (k + 1);
			struct p_report tmp = ev[k];

			ev[k] = ev[j];
			ev[j] = tmp;
		}
		for (size_t k = 0; k < n; k++) {
			rep(fx, "gw-0", 500 + (uint64_t)ev[k].inc, ev[k].seq, T0 + (int64_t)k,
			    limit, ev[k].t);
			model_apply(&md, &ev[k]);
		}
		assert_totals(ledger_sum(fx, limit, "gw-0", ULEDGER_HOUR), md.sum[0]);
	}
}

/* ---- leaseline usage --reconcile ---- */

/* usage_run's stdout and exit code. */
static int usage_out(struct usage_opts *o, char *out, size_t cap)
{
	char path[] = "/tmp/ll-usage-out-XXXXXX";
	int fd = mkstemp(path), saved = dup(1), rc;
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	fflush(stdout);
	dup2(fd, 1);
	rc = usage_run(o);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	n = pread(fd, out, cap - 1, 0);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	return rc;
}

/* Contract R 1/s, B 10: an hour's bound is 3610. An hour over it whose
 * hour before had the room (usage of one arriving in the next): late
 * reports. Fallback beyond the bound: fallback. Within: not listed.
 */
static void test_reconcile_causes(void **state)
{
	struct fx *fx = *state;
	char cfg[160], out[4096];
	struct usage_opts o = {.period = ULEDGER_HOUR, .reconcile = true, .format = USAGE_TEXT};
	FILE *f;

	snprintf(cfg, sizeof(cfg), "%s/policy.yaml", fx->dir);
	f = fopen(cfg, "w");
	assert_non_null(f);
	fputs("version: 1\nlimits:\n"
	      "  - {name: a, scope: global, rate: 1, burst: 10, meter: true}\n"
	      "  - {name: b, scope: global, rate: 2, burst: 10, meter: true, on-loss: fallback,"
	      " fallback: {rate: 1, burst: 1}}\n"
	      "rules:\n  - {name: all, limits: [a, b]}\n",
	      f);
	fclose(f);
	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", fx->dir);
	f = fopen(cfg, "w");
	assert_non_null(f);
	fputs("policy: policy.yaml\nstate-dir: .\ngateways: 1\n", f);
	if (use_pg)
		fprintf(f, "ledger: %s\n", fx->path);
	fclose(f);
	rep(fx, "gw-1", 7, 1, T0 + 10, "a", tot(1000, 0, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 3600 + 10, "a", tot(1000 + 5000, 0, 0, 0)); /* 1390 over */
	rep(fx, "gw-1", 7, 3, T0 + 7200 + 10, "a", tot(6000 + 100, 0, 0, 0));
	rep(fx, "gw-1", 7, 1, T0 + 10, "b", tot(100, 0, 0, 0));
	rep(fx, "gw-1", 7, 2, T0 + 20, "b", tot(100, 0, 8000, 0)); /* fallback: over 7210 */
	o.config = cfg;
	assert_int_equal(usage_out(&o, out, sizeof(out)), 1);
	printf("%s", out);
	assert_non_null(strstr(out, "2026-12-01T00Z a"));
	assert_non_null(strstr(out, "by 1390: late reports (the period before had the room)"));
	assert_non_null(strstr(out, "2026-11-30T23Z b"));
	assert_non_null(strstr(out, "fallback 8000"));
	assert_null(strstr(out, "2026-11-30T23Z a"));
	assert_null(strstr(out, "2026-12-01T01Z"));
	/* Within the contract: exit 0, said. */
	o.limit = "a";
	o.from = T0 + 7200;
	assert_int_equal(usage_out(&o, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "within B + R*T"));
	/* CSV of the rows. */
	o.reconcile = false;
	o.format = USAGE_CSV;
	o.from = 0;
	assert_int_equal(usage_out(&o, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "2026-12-01T00:00:00Z,2026-12-01T01:00:00Z,a,gw-1,packets,5000,"
				    "0,0,0\n"));
}

/* The latency the coordinator exports (uledger_latency): every committed
 * report of 4 metered limits is one sample, and p99 >= p50 > 0. The figure
 * itself, printed, is bench/coord/bench_usage_ledger.c's.
 */
static void test_commit_latency_counted(void **state)
{
	struct fx *fx = *state;
	uint64_t p50, p99;
	size_t n;

	for (uint64_t s = 1; s <= 400; s++) {
		struct uledger_entry e[4] = {
		    {.limit = "a"}, {.limit = "b"}, {.limit = "c"}, {.limit = "d"}};

		for (int i = 0; i < 4; i++)
			e[i].t = tot(s * 1000, s * 10, 0, 0);
		assert_int_equal(uledger_record(fx->lg, s % 8 ? "gw-1" : "gw-2", 7, s,
						T0 + (int64_t)s, clock_now_ns(), e, 4),
				 0);
	}
	uledger_latency(fx->lg, &p50, &p99, &n);
	assert_int_equal(n, 400);
	assert_true(p50 > 0 && p99 >= p50);
}

/* ---- per-key usage (uledger_keys_*) ---- */

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define KIDENT 0xfeedfacecafebeefull

/* Totals of one key: admitted a, denied d, fallback f, bypass b packets,
 * bytes 100 times each.
 */
static struct uledger_key_entry kent(uint32_t key, const char *text, uint64_t a, uint64_t d,
				     uint64_t f, uint64_t b)
{
	struct uledger_key_entry e;

	memset(&e, 0, sizeof(e));
	e.key.family = 4;
	e.key.addr[2] = 0xffff0000u;
	e.key.addr[3] = key;
	e.key_text = text;
	e.pkts[LL_METER_ADMITTED] = a;
	e.pkts[LL_METER_DENIED] = d;
	e.pkts[LL_METER_FALLBACK] = f;
	e.pkts[LL_METER_BYPASS] = b;
	for (int c = 0; c < LL_METER_CLASSES; c++)
		e.bytes[c] = e.pkts[c] * 100;
	return e;
}

struct ksum {
	uint64_t pkts[LL_METER_CLASSES], bytes[LL_METER_CLASSES];
	size_t rows;
};

static int add_krow(const struct uledger_key_row *r, void *arg)
{
	struct ksum *k = arg;

	for (int c = 0; c < LL_METER_CLASSES; c++) {
		k->pkts[c] += r->pkts[c];
		k->bytes[c] += r->bytes[c];
	}
	k->rows++;
	return 0;
}

static struct ksum ksum_of(struct fx *fx, const char *limit, const char *key, const char *holder,
			   enum uledger_period p)
{
	struct uledger_query q = {.period = p, .limit = limit, .holder = holder, .by_holder = 1};
	struct ksum k = {0};

	assert_int_equal(uledger_query_keys(fx->path, &q, key, add_krow, &k), 0);
	return k;
}

/* Ledger = the entry's totals, every class, packets and bytes. */
static void assert_ksum(struct ksum k, const struct uledger_key_entry *want)
{
	for (int c = 0; c < LL_METER_CLASSES; c++) {
		assert_int_equal(k.pkts[c], want->pkts[c]);
		assert_int_equal(k.bytes[c], want->bytes[c]);
	}
}

static void krec(struct fx *fx, const char *holder, uint64_t ident, int64_t now,
		 const struct uledger_key_entry *e, size_t n)
{
	assert_int_equal(
	    uledger_record_keys(fx->lg, holder, ident, 7, "per-src", now, clock_now_ns(), e, n), 0);
}

/* Duplicated, replayed, reordered, delayed by minutes: each key's ledger
 * totals are its newest totals, exactly.
 */
static void test_keys_replayed_reordered_delayed(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry b[5][2];

	for (int i = 0; i < 5; i++) {
		b[i][0] = kent(1, "198.18.0.1", 10 * (i + 1), i, 0, 0);
		b[i][1] = kent(2, "198.18.0.2", 3 * (i + 1), 0, 0, 2 * i);
	}
	krec(fx, "gw-1", KIDENT, T0, b[0], 2);
	krec(fx, "gw-1", KIDENT, T0 + 1, b[0], 2); /* retransmitted */
	krec(fx, "gw-1", KIDENT, T0 + 2, b[2], 2);
	krec(fx, "gw-1", KIDENT, T0 + 3, b[1], 2); /* reordered: older after newer */
	krec(fx, "gw-1", KIDENT, T0 + 4, b[3], 2);
	krec(fx, "gw-1", KIDENT, T0 + 5, b[0], 2); /* replayed */
	krec(fx, "gw-1", KIDENT, T0 + 6, b[4], 2);
	krec(fx, "gw-1", KIDENT, T0 + 600, b[2], 2); /* delayed ten minutes */
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR), &b[4][0]);
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.2", "gw-1", ULEDGER_HOUR), &b[4][1]);
	assert_true(uledger_counters(fx->lg)->key_stale >= 8);
}

/* Restart that kept the pins (same identity): totals go on, nothing twice.
 * Pins lost (a new identity): a new series from 0; what reached the ledger
 * before stays, and the new series adds all it counted.
 */
static void test_keys_restart_and_reboot(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 50, 5, 0, 0), want;

	krec(fx, "gw-1", KIDENT, T0, &e, 1);
	/* agent kill -9, restarted with its pins: it resends everything once */
	krec(fx, "gw-1", KIDENT, T0 + 10, &e, 1);
	e = kent(1, "198.18.0.1", 70, 6, 0, 0);
	krec(fx, "gw-1", KIDENT, T0 + 20, &e, 1);
	/* reboot: the pins are gone, counters from 0 under a new identity */
	e = kent(1, "198.18.0.1", 30, 1, 0, 0);
	krec(fx, "gw-1", KIDENT + 1, T0 + 30, &e, 1);
	krec(fx, "gw-1", KIDENT + 1, T0 + 31, &e, 1);
	want = kent(1, "198.18.0.1", 100, 7, 0, 0);
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR), &want);
	/* and a late batch of the old identity is still judged by its own mark */
	e = kent(1, "198.18.0.1", 60, 6, 0, 0);
	krec(fx, "gw-1", KIDENT, T0 + 40, &e, 1);
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR), &want);
}

/* A key whose kernel entry the agent retired (idle, all acknowledged) and
 * that came back has a new entry (a later born): a series of its own from
 * 0, not a continuation below the old mark.
 */
static void test_keys_retired_key_returns(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 100, 4, 0, 0), want;

	e.born = 1000;
	krec(fx, "gw-1", KIDENT, T0, &e, 1);
	e = kent(1, "198.18.0.1", 5, 1, 0, 0); /* back, counted from 0 */
	e.born = 2000;
	krec(fx, "gw-1", KIDENT, T0 + 700, &e, 1);
	krec(fx, "gw-1", KIDENT, T0 + 701, &e, 1);
	want = kent(1, "198.18.0.1", 105, 5, 0, 0);
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR), &want);
}

/* Usage goes to the hour its batch arrived in; days and months sum hours. */
static void test_keys_period_rollover(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry a = kent(1, "198.18.0.1", 40, 0, 0, 0),
				 b = kent(1, "198.18.0.1", 100, 0, 0, 9);
	struct ksum k;

	krec(fx, "gw-1", KIDENT, T0 + 3599, &a, 1); /* 2026-11-30T23 */
	krec(fx, "gw-1", KIDENT, T0 + 3600, &b, 1); /* 2026-12-01T00: a new day and month */
	k = ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR);
	assert_int_equal(k.rows, 2);
	assert_ksum(k, &b);
	k = ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_MONTH);
	assert_int_equal(k.rows, 2);
	assert_ksum(k, &b);
	{
		struct uledger_query q = {
		    .period = ULEDGER_DAY, .limit = "per-src", .from = T0 + 3600, .by_holder = 1};
		struct ksum d = {0};

		assert_int_equal(uledger_query_keys(fx->path, &q, NULL, add_krow, &d), 0);
		assert_int_equal(d.rows, 1);
		assert_int_equal(d.pkts[LL_METER_ADMITTED], 60);
		assert_int_equal(d.pkts[LL_METER_BYPASS], 9);
	}
}

/* Fail-open after the lease expired: bypassed packets are bypass, per key. */
static void test_keys_bypass_after_expiry(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 20, 3, 0, 0);

	krec(fx, "gw-1", KIDENT, T0, &e, 1);
	e = kent(1, "198.18.0.1", 20, 3, 0, 500);
	krec(fx, "gw-1", KIDENT, T0 + 5, &e, 1);
	assert_ksum(ksum_of(fx, "per-src", "198.18.0.1", NULL, ULEDGER_DAY), &e);
}

/* kill -9 inside a batch's transaction: nothing of it is in the ledger;
 * the same batch again counts once.
 */
static void test_keys_crash_mid_batch(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e[64];
	int status;
	pid_t pid;

	for (uint32_t i = 0; i < 64; i++)
		e[i] = kent(i + 1, "k", 5, 0, 0, 0);
	for (uint32_t i = 0; i < 64; i++) {
		static char txt[64][16];

		snprintf(txt[i], sizeof(txt[i]), "198.18.1.%u", i + 1);
		e[i].key_text = txt[i];
	}
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct uledger *lg;

		if (uledger_open(&lg, fx->path) || uledger_keys_begin(lg) ||
		    uledger_keys_add(lg, "gw-1", KIDENT, 7, "per-src", T0, e, 64))
			_exit(3);
		raise(SIGKILL); /* before the commit */
		_exit(4);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(ksum_of(fx, "per-src", NULL, "gw-1", ULEDGER_HOUR).rows, 0);
	krec(fx, "gw-1", KIDENT, T0, e, 64);
	krec(fx, "gw-1", KIDENT, T0, e, 64);
	{
		struct ksum k = ksum_of(fx, "per-src", NULL, "gw-1", ULEDGER_HOUR);

		assert_int_equal(k.rows, 64);
		assert_int_equal(k.pkts[LL_METER_ADMITTED], 64 * 5);
	}
}

/* A full disk (the file may not grow): the batch fails whole, the agent
 * sends it again later, and it counts once.
 */
static void test_keys_disk_full(void **state)
{
	struct fx *fx = *state;
	static struct uledger_key_entry e[2000];
	static char txt[2000][20];
	struct rlimit old, lim;
	struct stat st;
	int err;

	if (use_pg)
		skip(); /* a file's limit: PostgreSQL's disk is the server's */

	for (uint32_t i = 0; i < 2000; i++) {
		e[i] = kent(i + 1, NULL, i + 1, 0, 0, 0);
		snprintf(txt[i], sizeof(txt[i]), "198.18.%u.%u", 10 + i / 250, i % 250);
		e[i].key_text = txt[i];
	}
	krec(fx, "gw-1", KIDENT, T0, e, 1); /* the WAL exists */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_IGN);
	snprintf(fx->path + strlen(fx->path), 5, "-wal");
	assert_int_equal(stat(fx->path, &st), 0);
	fx->path[strlen(fx->path) - 4] = '\0';
	lim = old;
	lim.rlim_cur = (rlim_t)st.st_size + 8192;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	err = uledger_record_keys(fx->lg, "gw-1", KIDENT, 7, "per-src", T0 + 1, clock_now_ns(), e,
				  2000);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_true(err < 0);
	assert_int_equal(uledger_counters(fx->lg)->key_failures, 1);
	assert_int_equal(ksum_of(fx, "per-src", NULL, "gw-1", ULEDGER_HOUR).rows, 1);
	/* room again: the agent's retry counts once, and a duplicate nothing */
	krec(fx, "gw-1", KIDENT, T0 + 2, e, 2000);
	krec(fx, "gw-1", KIDENT, T0 + 3, e, 2000);
	{
		struct ksum k = ksum_of(fx, "per-src", NULL, "gw-1", ULEDGER_HOUR);

		assert_int_equal(k.rows, 2000);
		assert_int_equal(k.pkts[LL_METER_ADMITTED], 2000ull * 2001 / 2);
	}
}

/* Retention (reference §6.3): run every step of a prune until it is done. */
static void prune_all(struct fx *fx, int64_t now, uint64_t retention, unsigned max_rows)
{
	int n, steps = 0;

	do {
		n = uledger_prune(fx->lg, now, retention, max_rows);
		assert_true(n >= 0);
		assert_true(++steps < 10000); /* bounded: it finishes */
	} while (n > 0);
}

static int64_t count_rows(struct fx *fx, const char *sql)
{
	struct udb *db;
	struct udb_stmt *s;
	char err[256];
	int64_t v = -1;

	assert_int_equal(udb_open(&db, fx->path, true, err, sizeof(err)), 0);
	assert_int_equal(udb_prepare(db, sql, &s), 0);
	if (udb_step(s) == UDB_ROW)
		v = udb_col_i64(s, 0);
	udb_finalize(s);
	udb_close(db);
	return v;
}

/* Usage rows older than the retention go, in small steps; the marks of a
 * counters identity silent that long go too, and a late replay of that
 * identity (a restored snapshot, a batch stuck somewhere for a year) is
 * refused rather than counted from 0 a second time. A live identity's
 * series keep their marks: their replays still add nothing.
 */
static void test_keys_retention_replay(void **state)
{
	struct fx *fx = *state;
	const uint64_t ret = 30 * 86400; /* 30d */
	struct uledger_key_entry old[40], live = kent(200, "198.18.0.200", 9, 0, 0, 0), want;
	char text[40][32];
	int64_t later = T0 + (int64_t)ret + 2 * 86400;
	struct ksum k;

	for (int i = 0; i < 40; i++) {
		snprintf(text[i], sizeof(text[i]), "198.18.1.%d", i);
		old[i] = kent((uint32_t)(1000 + i), text[i], 10, 1, 0, 3);
	}
	krec(fx, "gw-1", KIDENT, T0, old, 40); /* an identity that then went silent */
	krec(fx, "gw-1", KIDENT + 1, T0, &live, 1);
	live = kent(200, "198.18.0.200", 15, 0, 0, 0);
	krec(fx, "gw-1", KIDENT + 1, later - 3600, &live, 1); /* still reporting */
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks"), 41);

	/* Small steps: 7 rows at most each. */
	prune_all(fx, later, ret, 7);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks"), 1);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_usage WHERE hour < "
					"1796079600 + 86400"),
			 0);
	assert_int_equal(uledger_ident_pruned(fx->lg, "gw-1", KIDENT), 1);
	assert_int_equal(uledger_ident_pruned(fx->lg, "gw-1", KIDENT + 1), 0);

	/* The old identity's batch replayed: refused, nothing counted. */
	assert_int_equal(uledger_record_keys(fx->lg, "gw-1", KIDENT, 7, "per-src", later,
					     clock_now_ns(), old, 40),
			 -ESTALE);
	assert_int_equal(uledger_counters(fx->lg)->pruned_refused, 1);
	k = ksum_of(fx, "per-src", "198.18.1.0", "gw-1", ULEDGER_HOUR);
	assert_int_equal(k.rows, 0);
	/* The live one's replay adds nothing, its news count. */
	krec(fx, "gw-1", KIDENT + 1, later, &live, 1);
	live = kent(200, "198.18.0.200", 20, 0, 0, 0);
	krec(fx, "gw-1", KIDENT + 1, later + 1, &live, 1);
	k = ksum_of(fx, "per-src", "198.18.0.200", "gw-1", ULEDGER_HOUR);
	want = kent(200, "198.18.0.200", 20 - 9, 0, 0, 0); /* T0's hour pruned: 9 gone */
	assert_ksum(k, &want);
	/* A reopened ledger (a coordinator restart) still refuses it. */
	uledger_close(fx->lg);
	assert_int_equal(uledger_open(&fx->lg, fx->path), 0);
	assert_int_equal(uledger_record_keys(fx->lg, "gw-1", KIDENT, 7, "per-src", later + 2,
					     clock_now_ns(), old, 40),
			 -ESTALE);
	assert_int_equal(ksum_of(fx, "per-src", "198.18.1.0", "gw-1", ULEDGER_HOUR).rows, 0);
}

/* Per limit: a closed incarnation's mark pruned; a late report of it is
 * stale (not a new incarnation diffed against the current one), and usage
 * rows past the retention go.
 */
static void test_retention_closed_incarnation(void **state)
{
	struct fx *fx = *state;
	const uint64_t ret = 30 * 86400;
	int64_t later = T0 + (int64_t)ret + 2 * 86400;
	uint64_t inc7 = (uint64_t)(T0 - 100) * 1000000000ull, inc8 = inc7 + 50 * 1000000000ull;

	rep(fx, "gw-1", inc7, 1, T0, "a", tot(100, 10, 0, 0));
	rep(fx, "gw-1", inc8, 1, T0 + 1, "a", tot(20, 2, 0, 0)); /* pins lost: from 0 */
	rep(fx, "gw-1", inc8, 2, later - 60, "a", tot(50, 5, 0, 0));
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM marks"), 2);
	prune_all(fx, later, ret, 3);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM marks"), 1);
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(30, 3, 0, 0));
	/* The closed incarnation replayed with higher totals: nothing counts. */
	rep(fx, "gw-1", inc7, 2, later, "a", tot(130, 13, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(30, 3, 0, 0));
	assert_int_equal(uledger_counters(fx->lg)->pruned_refused, 1);
	/* The current incarnation goes on. */
	rep(fx, "gw-1", inc8, 3, later + 1, "a", tot(60, 6, 0, 0));
	assert_totals(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR), tot(40, 4, 0, 0));
}

/* Random series (holders x identities x keys) with rising totals,
 * delivered in random order with duplicates, some batches never arriving
 * but each series' newest always arriving at last; batched into
 * transactions at random. Ledger = reference model (field-wise max per
 * series) = what the datapath counted.
 */
static void test_keys_property_model(void **state)
{
	struct fx *fx = *state;
	enum { H = 3, I = 2, K = 6, S = 10 };
	static struct uledger_key_entry life[H][I][K][S];
	static int order[H * I * K * S * 2];
	uint64_t seed = 0x1234567;
	static char txt[K][16];

	for (int k = 0; k < K; k++)
		snprintf(txt[k], sizeof(txt[k]), "198.18.2.%d", k);
	for (int round = 0; round < 8; round++) {
		uint64_t truth[K][2 * LL_METER_CLASSES] = {{0}};
		size_t n = 0;
		char limit[16];

		snprintf(limit, sizeof(limit), "lim%d", round);
		for (int h = 0; h < H; h++)
			for (int i = 0; i < I; i++)
				for (int k = 0; k < K; k++) {
					uint64_t t[LL_METER_CLASSES] = {0};

					for (int s = 0; s < S; s++) {
						struct uledger_key_entry *e = &life[h][i][k][s];

						for (int c = 0; c < LL_METER_CLASSES; c++)
							t[c] +=
							    rnd(&seed) % 3 ? rnd(&seed) % 50 : 0;
						*e = kent((uint32_t)k, txt[k], t[0], t[1], t[2],
							  t[3]);
						for (int c = 0; c < LL_METER_CLASSES; c++)
							e->bytes[c] = t[c] * 64;
					}
					for (int c = 0; c < LL_METER_CLASSES; c++) {
						truth[k][c] += life[h][i][k][S - 1].pkts[c];
						truth[k][LL_METER_CLASSES + c] +=
						    life[h][i][k][S - 1].bytes[c];
					}
				}
		/* events: each (h, i, k, s) once or twice or never (never the last) */
		for (int h = 0; h < H; h++)
			for (int i = 0; i < I; i++)
				for (int k = 0; k < K; k++)
					for (int s = 0; s < S; s++) {
						int code = ((h * I + i) * K + k) * S + s;
						int copies = s == S - 1 ? 1 + (int)(rnd(&seed) % 2)
									: (int)(rnd(&seed) % 3);

						for (int c = 0; c < copies; c++)
							order[n++] = code;
					}
		for (size_t j = n; j > 1; j--) {
			size_t r = rnd(&seed) % j;
			int tmp = order[j - 1];

			order[j - 1] = order[r];
			order[r] = tmp;
		}
		for (size_t j = 0; j < n;) {
			size_t batch = 1 + rnd(&seed) % 5;

			assert_int_equal(uledger_keys_begin(fx->lg), 0);
			for (; batch && j < n; batch--, j++) {
				int code = order[j], s = code % S, k = (code / S) % K,
				    i = (code / S / K) % I, h = code / S / K / I;
				char holder[16];

				snprintf(holder, sizeof(holder), "gw-%d", h);
				assert_int_equal(
				    uledger_keys_add(fx->lg, holder, KIDENT + (uint64_t)i, 7, limit,
						     T0 + (int64_t)j, &life[h][i][k][s], 1),
				    0);
			}
			assert_int_equal(uledger_keys_commit(fx->lg, clock_now_ns()), 0);
		}
		for (int k = 0; k < K; k++) {
			struct ksum got = ksum_of(fx, limit, txt[k], NULL, ULEDGER_MONTH);

			for (int c = 0; c < LL_METER_CLASSES; c++) {
				assert_int_equal(got.pkts[c], truth[k][c]);
				assert_int_equal(got.bytes[c], truth[k][LL_METER_CLASSES + c]);
			}
		}
	}
}

/* ---- bounds (usage_ledger.h; reference §6.3, Bounds) ---- */

static void rep_c(struct fx *fx, const char *holder, uint64_t inc, uint64_t seq, int64_t now,
		  struct uledger_totals t, uint64_t rate, uint64_t burst)
{
	struct uledger_entry e = {.limit = "a", .t = t, .c = {.rate = rate, .burst = burst}};

	assert_int_equal(uledger_record(fx->lg, holder, inc, seq, now, clock_now_ns(), &e, 1), 0);
}

/* Four holders at 2^62 each: the fleet's sum is past INT64_MAX, where
 * SQLite's SUM fails the whole query ("integer overflow"). usum saturates:
 * the query answers, and the sum reads as more than anything.
 */
static void test_sums_saturate(void **state)
{
	struct fx *fx = *state;
	struct uledger_query q = {.period = ULEDGER_HOUR, .limit = "a"};
	struct uledger_totals t = {0};
	char holder[8];

	for (int i = 0; i < 4; i++) {
		snprintf(holder, sizeof(holder), "gw-%d", i);
		rep_c(fx, holder, 7, 1, T0 + 10, tot(ULEDGER_TOTAL_MAX, 0, 0, 0), 1ull << 50,
		      ULEDGER_TOTAL_MAX);
	}
	assert_int_equal(uledger_query(fx->path, &q, add_row, &t), 0);
	assert_int_equal(t.admitted, INT64_MAX);
	/* one holder's own sum is exact */
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, ULEDGER_TOTAL_MAX);
}

/* A holder's admitted figure is bounded by what its contract could have
 * passed (R 10, B 100: a bucket of 100 + 10 x 3600 filled at 10/s), across
 * its incarnations; denied by the line rate; a total above 2^62 is not
 * counted at all. What is cut is counted, and the mark moves past it.
 */
static void test_report_bounded_by_contract(void **state)
{
	struct fx *fx = *state;
	const struct uledger_counters *c = uledger_counters(fx->lg);
	const uint64_t cap = 100 + 10 * 3600;

	rep_c(fx, "gw-1", 7, 1, T0 + 10, tot(1000000, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap);
	assert_int_equal(c->clamped, 1);
	assert_int_equal(c->clamped_pkts, 1000000 - cap);
	/* 60 s later, 500 more: the bucket refilled 600, all counted */
	rep_c(fx, "gw-1", 7, 2, T0 + 70, tot(1000500, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 500);
	assert_int_equal(c->clamped, 1);
	/* a restart (a new incarnation, from 0) 10 s later: 100 left + 100 */
	rep_c(fx, "gw-1", 8, 1, T0 + 80, tot(1000000, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 500 + 200);
	assert_int_equal(c->clamped, 2);
	/* the cut part is never counted later: the mark moved past it */
	rep_c(fx, "gw-1", 8, 2, T0 + 3000, tot(1000000, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 500 + 200);
	/* denied: 2^62 in 20 s is past the line rate */
	rep_c(fx, "gw-1", 8, 3, T0 + 3020, tot(1000000, ULEDGER_TOTAL_MAX, 0, 0), 10, 100);
	assert_true(ledger_sum(fx, "a", "gw-1", ULEDGER_DAY).denied <=
		    ULEDGER_LINE_PPS * (ULEDGER_BACKLOG_S + ULEDGER_SLACK_S));
	assert_int_equal(c->clamped, 3);
	/* another holder has its own bound */
	rep_c(fx, "gw-2", 9, 1, T0 + 10, tot(cap, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-2", ULEDGER_HOUR).admitted, cap);
	/* above 2^62: refused whole */
	rep_c(fx, "gw-3", 9, 1, T0 + 10, tot(ULEDGER_TOTAL_MAX + 1, 0, 0, 0), 0, 0);
	assert_int_equal(ledger_sum(fx, "a", "gw-3", ULEDGER_HOUR).admitted, 0);
	assert_int_equal(c->clamped, 4);
	/* rate 0 (no contract of its own): the line rate */
	rep_c(fx, "gw-4", 9, 1, T0 + 10, tot(ULEDGER_TOTAL_MAX, 0, 0, 0), 0, 0);
	assert_int_equal(ledger_sum(fx, "a", "gw-4", ULEDGER_HOUR).admitted,
			 ULEDGER_LINE_PPS * (ULEDGER_BACKLOG_S + ULEDGER_SLACK_S));
}

static void rep_l(struct fx *fx, const char *holder, uint64_t seq, int64_t now, uint64_t adm,
		  uint64_t rate, uint64_t burst)
{
	struct uledger_entry e = {
	    .limit = "a",
	    .t = tot(adm, 0, 0, 0),
	    .c = {.rate = rate, .burst = burst, .lease = true, .backlog_s = 61}};

	assert_int_equal(uledger_record(fx->lg, holder, 7, seq, now, clock_now_ns(), &e, 1), 0);
}

/* Bounded by the holder's own lease (rate 10, burst 100, backlog 61 s):
 * a new row holds 100 + 10 x 61; an entry gets what was left plus what
 * flowed in since the last, whatever the contract; rate 0 refills nothing
 * (the bucket was spent); a row the contract bounded before is cut down
 * to the lease's cap.
 */
static void test_report_bounded_by_lease(void **state)
{
	struct fx *fx = *state;
	const struct uledger_counters *c = uledger_counters(fx->lg);
	const uint64_t cap = 100 + 10 * 61;

	rep_l(fx, "gw-1", 1, T0 + 10, 1000000, 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap);
	assert_int_equal(c->lease_clamped, 1);
	/* 300 s later, 4000 more: 3000 flowed in (the cap of 710 does not
	 * hold back what an entry covering 300 s may carry) */
	rep_l(fx, "gw-1", 2, T0 + 310, 1004000, 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 3000);
	assert_int_equal(c->lease_clamped, 2);
	/* within: all counted, 10 s of 10/s */
	rep_l(fx, "gw-1", 3, T0 + 320, 1004100, 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 3100);
	assert_int_equal(c->lease_clamped, 2);
	/* a lease of 0 (burst 5): nothing flows in, however long it has been,
	 * and the bucket was spent */
	rep_l(fx, "gw-1", 4, T0 + 1000, 1005100, 0, 5);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap + 3100);
	assert_int_equal(c->lease_clamped, 3);
	/* gw-2 bounded by its contract first (36,100 held), then by a lease:
	 * the row is cut to the lease's cap, not spent down from the contract's */
	rep_c(fx, "gw-2", 9, 1, T0 + 10, tot(100, 0, 0, 0), 10, 100);
	{
		struct uledger_entry e = {
		    .limit = "a",
		    .t = tot(100 + 100000, 0, 0, 0),
		    .c = {.rate = 10, .burst = 100, .lease = true, .backlog_s = 61}};

		assert_int_equal(
		    uledger_record(fx->lg, "gw-2", 9, 2, T0 + 11, clock_now_ns(), &e, 1), 0);
	}
	assert_int_equal(ledger_sum(fx, "a", "gw-2", ULEDGER_HOUR).admitted, 100 + cap + 10);
	assert_int_equal(c->lease_clamped, 4);
}

static void rep_pre(struct fx *fx, const char *holder, uint64_t seq, int64_t now, uint64_t adm,
		    uint32_t ago_s)
{
	struct uledger_entry e = {
	    .limit = "a",
	    .t = tot(adm, 0, 0, 0),
	    .c = {.rate = 0,
		  .burst = 0,
		  .lease = true,
		  .backlog_s = 61,
		  .pre = true,
		  .pre_ago_s = ago_s,
		  .pre_rate = 10,
		  .pre_burst = 100}};

	assert_int_equal(uledger_record(fx->lg, holder, 7, seq, now, clock_now_ns(), &e, 1), 0);
}

/* The first report after a holder took a slot (issue 25, D): its grants
 * of an earlier slot died 20 s after its last report, it came back 1000 s
 * later with a lease of 0 so far. The contract (10/s) bounds those 20 s,
 * nothing the 1000 s after (it used to be the contract over all 1020 s:
 * a holder that gives its slot up could claim R for every second of the
 * gap). A fresh row was full at that time and got nothing since.
 */
static void test_report_after_slot_take(void **state)
{
	struct fx *fx = *state;
	const uint64_t cap_c = 100 + 10 * 3600;

	rep_c(fx, "gw-1", 7, 1, T0 + 10, tot(50, 0, 0, 0), 10, 100);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, 50);
	/* what the bucket held (cap_c - 50) + 20 s of 10/s: more is cut
	 * (the contract over all 1020 s would add 10,200) */
	rep_pre(fx, "gw-1", 2, T0 + 1030, 50 + 10000000, 1000);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, cap_c + 200);
	/* A second holder, its row new: the contract's cap, and no inflow
	 * since its grants died. */
	rep_pre(fx, "gw-2", 1, T0 + 1030, 10000000, 1000);
	assert_int_equal(ledger_sum(fx, "a", "gw-2", ULEDGER_HOUR).admitted, cap_c);
	assert_int_equal(uledger_counters(fx->lg)->lease_clamped, 2);
}

/* One key, four counters identities (series), each counting from 0: the
 * key's bound is the holder's across all of them, so a holder that makes
 * up identities cannot count its contract four times.
 */
static void test_keys_forged_series_bounded(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 30000, 0, 0, 0);
	const uint64_t cap = 100 + 10 * 3600;

	e.c = (struct uledger_contract){.rate = 10, .burst = 100};
	for (int i = 0; i < 4; i++)
		krec(fx, "gw-1", KIDENT + (uint64_t)i, T0 + 10 + i, &e, 1);
	/* 30000, then what was left (6100) plus 10/s between them */
	assert_int_equal(
	    ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR).pkts[LL_METER_ADMITTED],
	    cap + 10 * 3);
	assert_int_equal(uledger_counters(fx->lg)->clamped, 3);
}

/* A class's bytes are bounded by its packets: (packets + 64) x 2^18. */
static void test_keys_bytes_bounded(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 10, 0, 0, 0);
	struct ksum k;

	e.bytes[LL_METER_ADMITTED] = 1ull << 40;
	e.bytes[LL_METER_DENIED] = 1ull << 40; /* and no denied packet */
	krec(fx, "gw-1", KIDENT, T0 + 10, &e, 1);
	k = ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR);
	assert_int_equal(k.pkts[LL_METER_ADMITTED], 10);
	assert_int_equal(k.bytes[LL_METER_ADMITTED], (10 + 64) * ULEDGER_FRAME_MAX);
	assert_int_equal(k.bytes[LL_METER_DENIED], 64 * ULEDGER_FRAME_MAX);
	assert_int_equal(uledger_counters(fx->lg)->clamped, 1);
}

/* A holder's series quota: new keys past it are refused and counted; the
 * ones it has still count; another holder has its own; a series pruned
 * gives its room back.
 */
static void test_keys_series_quota(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e[5];
	char text[5][32];

	uledger_set_series_quota(fx->lg, 3);
	for (int i = 0; i < 5; i++) {
		snprintf(text[i], sizeof(text[i]), "198.18.0.%d", i + 1);
		e[i] = kent((uint32_t)(i + 1), text[i], 10, 0, 0, 0);
	}
	krec(fx, "gw-1", KIDENT, T0 + 10, e, 5);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks WHERE holder = 'gw-1'"), 3);
	assert_int_equal(uledger_counters(fx->lg)->quota, 2);
	assert_int_equal(ksum_of(fx, "per-src", "198.18.0.5", "gw-1", ULEDGER_HOUR).rows, 0);
	/* under another identity: new series too, refused */
	krec(fx, "gw-1", KIDENT + 1, T0 + 11, e, 1);
	assert_int_equal(uledger_counters(fx->lg)->quota, 3);
	/* the three it has still count */
	for (int i = 0; i < 5; i++)
		e[i].pkts[LL_METER_ADMITTED] = 20;
	krec(fx, "gw-1", KIDENT, T0 + 12, e, 3);
	assert_int_equal(
	    ksum_of(fx, "per-src", "198.18.0.3", "gw-1", ULEDGER_HOUR).pkts[LL_METER_ADMITTED], 20);
	/* and the count survives a reopen */
	uledger_close(fx->lg);
	assert_int_equal(uledger_open(&fx->lg, fx->path), 0);
	uledger_set_series_quota(fx->lg, 3);
	krec(fx, "gw-1", KIDENT, T0 + 13, e + 3, 2);
	assert_int_equal(uledger_counters(fx->lg)->quota, 2);
	krec(fx, "gw-2", KIDENT, T0 + 13, e, 3); /* gw-2's own */
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks WHERE holder = 'gw-2'"), 3);
	/* gw-1's identity silent past the retention: its series go, room back */
	prune_all(fx, T0 + 40 * 86400, 30 * 86400, 100);
	assert_int_equal(count_rows(fx, "SELECT n FROM holder_series WHERE holder = 'gw-1'"), 0);
	krec(fx, "gw-1", KIDENT + 2, T0 + 40 * 86400, e + 2, 3);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks WHERE holder = 'gw-1'"), 3);
}

/* Times no clock gives, from a holder's figures or a broken clock: no
 * overflow (the sanitizer build runs this), rows in a period, and a
 * retention longer than the clock's past prunes nothing.
 */
static void test_extreme_times(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 10, 0, 0, 0);
	const int64_t times[] = {INT64_MAX, INT64_MIN, -1, 0};

	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
		rep(fx, "gw-1", 7, i + 1, times[i], "a", tot(10 * (i + 1), 0, 0, 0));
		krec(fx, "gw-1", KIDENT, times[i], &e, 1);
		e.pkts[LL_METER_ADMITTED] += 10;
		for (int p = ULEDGER_HOUR; p <= ULEDGER_MONTH; p++) {
			int64_t s = uledger_period_start((enum uledger_period)p, times[i]);

			assert_true(uledger_period_next((enum uledger_period)p, s) > s);
		}
	}
	assert_int_equal(count_rows(fx, "SELECT CAST(SUM(admitted) AS BIGINT) FROM usage"), 40);
	assert_int_equal(count_rows(fx, "SELECT CAST(SUM(ap) AS BIGINT) FROM key_usage"), 40);
	(void)ledger_sum(fx, "a", "gw-1", ULEDGER_MONTH); /* answers */
	assert_int_equal(uledger_prune(fx->lg, 100, 400 * 86400ull, 100), 0);
	assert_int_equal(uledger_prune(fx->lg, INT64_MIN, 86400, 100), 0);
	assert_int_equal(uledger_prune(fx->lg, T0, UINT64_MAX, 100), 0);
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM usage"), 4);
}

/* A batch that repeats a series (the same key and born twice) and a key
 * (two series of one key share its bound): each entry sees what the one
 * before it left, exactly as when each is a batch of its own. Contract 1/s
 * burst 1: the bound holds 1 + 3600.
 */
static void test_keys_batch_repeats(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e[3];

	e[0] = kent(1, "198.18.0.1", 3000, 0, 0, 0); /* series A */
	e[1] = kent(1, "198.18.0.1", 3500, 0, 0, 0); /* A again, later totals */
	e[2] = kent(1, "198.18.0.1", 3000, 0, 0, 0); /* series B of the same key */
	e[2].born = 99;
	for (int i = 0; i < 3; i++)
		e[i].c = (struct uledger_contract){.rate = 1, .burst = 1};
	krec(fx, "gw-1", KIDENT, T0, e, 3);
	for (int i = 0; i < 3; i++)
		krec(fx, "gw-2", KIDENT, T0, &e[i], 1);
	for (int h = 1; h <= 2; h++) {
		char holder[8];
		struct ksum k;

		snprintf(holder, sizeof(holder), "gw-%d", h);
		k = ksum_of(fx, "per-src", "198.18.0.1", holder, ULEDGER_HOUR);
		assert_int_equal(k.rows, 1);
		assert_int_equal(k.pkts[LL_METER_ADMITTED], 1 + 3600); /* 3000 + 500 + 101 */
	}
	assert_int_equal(count_rows(fx, "SELECT COUNT(*) FROM key_marks WHERE holder = 'gw-1'"), 2);
	assert_int_equal(count_rows(fx, "SELECT level FROM spend WHERE holder = 'gw-1'"), 0);
	/* Everything again: nothing new, and the marks hold the maximum. */
	krec(fx, "gw-1", KIDENT, T0 + 1, e, 3);
	assert_int_equal(
	    ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR).pkts[LL_METER_ADMITTED],
	    1 + 3600);
}

/* Two writers on one shared ledger (an old leader's last batch, the new
 * leader's first, both of the same agent's totals): the second reads the
 * mark before the first commits, then waits on its row. It must fail
 * (-EBUSY, nothing written: its agent sends again), never add the same
 * packets a second time. Under READ COMMITTED it would. PostgreSQL's: an
 * SQLite file has one writer at a time.
 */
static void test_two_writers_count_once(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e[4];
	int status, p[2];
	pid_t pid;
	char ok;

	if (!use_pg)
		skip();
	static const char *const text[] = {"198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4"};

	for (uint32_t i = 0; i < 4; i++)
		e[i] = kent(i + 1, text[i], 50, 0, 0, 0);
	assert_int_equal(uledger_keys_begin(fx->lg), 0);
	assert_int_equal(uledger_keys_add(fx->lg, "gw-1", KIDENT, 7, "per-src", T0, e, 4), 0);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct uledger *lg;
		int err;

		close(p[0]);
		if (uledger_open(&lg, fx->path))
			_exit(3);
		if (write(p[1], "r", 1) != 1)
			_exit(4);
		err = uledger_record_keys(lg, "gw-1", KIDENT, 7, "per-src", T0, clock_now_ns(), e, 4);
		uledger_close(lg);
		_exit(err == -EBUSY ? 0 : err == 0 ? 5 : 6);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &ok, 1), 1);
	close(p[0]);
	usleep(300 * 1000); /* the child read the mark and waits on its row */
	assert_int_equal(uledger_keys_commit(fx->lg, clock_now_ns()), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The agent's resend: nothing new. */
	krec(fx, "gw-1", KIDENT, T0 + 1, e, 4);
	{
		struct ksum k = ksum_of(fx, "per-src", NULL, "gw-1", ULEDGER_HOUR);

		assert_int_equal(k.rows, 4);
		assert_int_equal(k.pkts[LL_METER_ADMITTED], 4 * 50);
	}
}

/* The shared database restarts under a running writer: what it was
 * writing fails whole (nothing of it written, the counters as they were),
 * so does what comes while it is down, and once it is back the writer
 * connects again by itself (its statements prepared anew) and the agent's
 * resent totals count exactly once. PostgreSQL's.
 */
static void test_server_restart_loses_nothing(void **state)
{
	struct fx *fx = *state;
	struct uledger_key_entry e = kent(1, "198.18.0.1", 10, 0, 0, 0);
	int err, tries = 0;

	if (!use_pg)
		skip();
	rep(fx, "gw-1", 7, 1, T0 + 10, "a", tot(100, 0, 0, 0));
	krec(fx, "gw-1", KIDENT, T0 + 10, &e, 1);
	assert_int_equal(pg_server_down(&pg), 0);
	{
		struct uledger_entry r = {.limit = "a", .t = tot(150, 0, 0, 0)};
		uint64_t reports = uledger_counters(fx->lg)->reports;

		assert_true(uledger_record(fx->lg, "gw-1", 7, 2, T0 + 20, clock_now_ns(), &r, 1) <
			    0);
		assert_int_equal(uledger_counters(fx->lg)->reports, reports);
		e.pkts[LL_METER_ADMITTED] = 25;
		assert_true(uledger_record_keys(fx->lg, "gw-1", KIDENT, 7, "per-src", T0 + 20,
						clock_now_ns(), &e, 1) < 0);
	}
	assert_int_equal(pg_server_up(&pg), 0);
	/* The agent sends its totals again until they are taken (bounded). */
	do {
		struct uledger_entry r = {.limit = "a", .t = tot(150, 0, 0, 0)};

		err = uledger_record(fx->lg, "gw-1", 7, 3, T0 + 30, clock_now_ns(), &r, 1);
	} while (err && ++tries < 5);
	assert_int_equal(err, 0);
	assert_true(tries <= 1); /* at most the one that found the connection gone */
	krec(fx, "gw-1", KIDENT, T0 + 30, &e, 1);
	assert_int_equal(ledger_sum(fx, "a", "gw-1", ULEDGER_HOUR).admitted, 150);
	assert_int_equal(
	    ksum_of(fx, "per-src", "198.18.0.1", "gw-1", ULEDGER_HOUR).pkts[LL_METER_ADMITTED], 25);
	print_message("after the restart: %d report(s) refused before the writer connected "
		      "again\n",
		      tries);
}

/* What the coordinator and `leaseline usage` log of a ledger: never its
 * password.
 */
static void test_where_hides_password(void **state)
{
	static const char *const cases[][2] = {
	    {"/var/lib/leaseline/ledger.db", "/var/lib/leaseline/ledger.db"},
	    {"postgresql://ll:s3cret@db.example:5432/ledger", "postgresql://ll@db.example:5432/ledger"},
	    {"postgres://ll:p@ss:w@rd@db/x?sslmode=require",
	     "postgres://ll@db/x?sslmode=require"},
	    {"postgresql://db/x?user=ll&password=s3cret&sslmode=verify-full",
	     "postgresql://db/x?user=ll&password=&sslmode=verify-full"},
	    {"postgresql://db/x?password=s3cret", "postgresql://db/x?password="},
	    {"postgresql://ll@db/x", "postgresql://ll@db/x"},
	};
	char buf[256];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(uledger_where(cases[i][0], buf, sizeof(buf)), cases[i][1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_duplicate_and_replayed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reordered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_delayed_minutes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_agent_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reboot_identity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_backwards_counted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_metering_starts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_metered_again, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_period_rollover, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bypass_recorded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reconcile_causes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_property_random_orders, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_property_any_order_matches_model, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_replayed_reordered_delayed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_restart_and_reboot, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_retired_key_returns, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_period_rollover, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_bypass_after_expiry, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_crash_mid_batch, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_disk_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_property_model, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_retention_replay, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retention_closed_incarnation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_commit_latency_counted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sums_saturate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_bounded_by_contract, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_bounded_by_lease, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_report_after_slot_take, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_forged_series_bounded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_bytes_bounded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_series_quota, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_extreme_times, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_batch_repeats, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_two_writers_count_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_server_restart_loses_nothing, setup, teardown),
	    cmocka_unit_test(test_where_hides_password),
	};

	int failed = cmocka_run_group_tests_name("usage ledger on SQLite", tests, NULL, NULL);

	if (pg_server_start(&pg))
		return 1;
	use_pg = true;
	failed += cmocka_run_group_tests_name("usage ledger on PostgreSQL", tests, NULL, NULL);
	pg_server_stop(&pg);
	return failed;
}
