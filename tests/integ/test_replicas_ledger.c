// SPDX-License-Identifier: MIT
/*
 * Metered limits under replicas (reference §6.3, §6.4): coord-a and
 * coord-b on a real etcd share one usage ledger in a real PostgreSQL. An
 * agent streams its totals (REPORT, a per-limit total) and per-key totals
 * (METER batches) to the leader, which is killed -9 in the middle of the
 * stream; the agent follows the redirect to the new leader and goes on.
 * The ledger then holds exactly what the agent counted: nothing lost with
 * the old leader's last transaction, nothing counted twice by the new one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "integ/replica_fx.h"

#include <arpa/inet.h>
#include <sys/wait.h>

#include "coord/usage_db.h"
#include "coord/usage_ledger.h"

#define NK    4 /* keys of limit k: 198.18.0.1 .. 198.18.0.4 */
#define IDENT 0x5eedfacecafef00dull

static const char policy[] =
    "version: 1\nlimits:\n"
    "  - {name: a, key: none, scope: global, rate: 800, burst: 80, meter: true}\n"
    "  - {name: k, key: src-ip, scope: global, rate: 100, burst: 10, meter: true}\n"
    "rules:\n  - {name: all, limits: [a, k]}\n";

/* What the fake agent counted: totals, absolute, as its datapath's. */
struct agent {
	struct conn c;
	bool up;
	uint64_t inc; /* started (ns of the realtime clock): after the metering did */
	uint64_t seq, mseq;
	uint64_t a;			     /* limit a: admitted */
	uint64_t pkts[NK][LL_METER_CLASSES]; /* limit k, per key */
	uint64_t bytes[NK][LL_METER_CLASSES];
};

static int group_setup(void **state)
{
	return replica_group_setup(state, true);
}

static int group_teardown(void **state)
{
	return replica_group_teardown(state);
}

static int setup(void **state)
{
	return replica_setup(state, policy, true);
}

static int teardown(void **state)
{
	return replica_teardown(state);
}

/* HELLO to r: true once r leads (it sent its POLICY), false if it
 * redirected or closed.
 */
static bool agent_hello(struct fx *fx, struct agent *ag, const struct replica *r, uint64_t seen)
{
	if (ag->up)
		conn_close(&ag->c);
	ag->up = false;
	dial(r, &ag->c);
	WIRE_MSG_CLEAR(fx->m, hello);
	fx->m->type = WIRE_HELLO;
	snprintf(fx->m->hello.holder, sizeof(fx->m->hello.holder), "gw-1");
	fx->m->hello.incarnation = ag->inc;
	fx->m->hello.max_epoch_seen = seen;
	fx->m->hello.counters_ident = IDENT;
	if (conn_send(&ag->c, fx->m) || recv_msg(&ag->c, fx->m, WAIT_MS) != 1 ||
	    fx->m->type != WIRE_POLICY) {
		conn_close(&ag->c);
		return false;
	}
	ag->up = true;
	return true;
}

/* The agent counts a little more, then sends its totals: a REPORT and a
 * METER batch. Nothing is waited for (a stream); what the leader sends
 * back is read and dropped.
 */
static void agent_stream(struct fx *fx, struct agent *ag, uint64_t *rnd, bool count)
{
	struct wire_meter *mt = &fx->m->meter;
	struct wire_report_entry *e = &fx->m->report.e[0];

	if (count) {
		*rnd = *rnd * 6364136223846793005ull + 1442695040888963407ull;
		ag->a += 1 + (*rnd >> 33) % 40;
		for (int i = 0; i < NK; i++) {
			uint64_t n = 1 + ((*rnd >> (20 + i)) % 4);

			ag->pkts[i][LL_METER_ADMITTED] += n;
			ag->bytes[i][LL_METER_ADMITTED] += n * 100;
			ag->pkts[i][LL_METER_DENIED] += (*rnd >> (40 + i)) % 2;
			ag->bytes[i][LL_METER_DENIED] += ((*rnd >> (40 + i)) % 2) * 100;
		}
	}
	if (!ag->up)
		return;
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "gw-1");
	fx->m->report.incarnation = ag->inc;
	fx->m->report.seq = ++ag->seq;
	fx->m->report.n = 1;
	memset(e, 0, sizeof(*e));
	snprintf(e->limit, sizeof(e->limit), "a");
	e->admitted = ag->a;
	e->demand = 100;
	if (conn_send(&ag->c, fx->m))
		goto lost;
	WIRE_MSG_CLEAR(fx->m, meter.n);
	fx->m->type = WIRE_METER;
	snprintf(mt->holder, sizeof(mt->holder), "gw-1");
	mt->incarnation = ag->inc;
	mt->ident = IDENT;
	mt->seq = ++ag->mseq;
	snprintf(mt->limit, sizeof(mt->limit), "k");
	mt->limit_uid = 3;
	mt->n = NK;
	for (int i = 0; i < NK; i++) {
		memset(&mt->e[i], 0, sizeof(mt->e[i]));
		mt->e[i].key.family = 4;
		mt->e[i].key.addr[2] = htonl(0xffff);
		mt->e[i].key.addr[3] = htonl(0xc6120001u + (uint32_t)i);
		memcpy(mt->e[i].pkts, ag->pkts[i], sizeof(mt->e[i].pkts));
		memcpy(mt->e[i].bytes, ag->bytes[i], sizeof(mt->e[i].bytes));
	}
	if (conn_send(&ag->c, fx->m))
		goto lost;
	if (conn_read(&ag->c) && errno != EAGAIN)
		goto lost;
	while (conn_next(&ag->c, fx->m) > 0)
		;
	return;
lost:
	conn_close(&ag->c);
	ag->up = false;
}

static int add_row(const struct uledger_row *r, void *arg)
{
	*(uint64_t *)arg += r->t.admitted;
	return 0;
}

struct ksum {
	uint64_t pkts[LL_METER_CLASSES], bytes[LL_METER_CLASSES];
	int rows;
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

/* Whether the shared ledger holds exactly what the agent counted. */
static bool ledger_is(struct fx *fx, const struct agent *ag, bool say)
{
	struct uledger_query q = {
	    .period = ULEDGER_MONTH, .limit = "a", .holder = "gw-1", .by_holder = 1};
	struct ksum k = {0}, want = {0};
	uint64_t a = 0;

	if (uledger_query(fx->ledger, &q, add_row, &a))
		return false;
	q.limit = "k";
	if (uledger_query_keys(fx->ledger, &q, NULL, add_krow, &k))
		return false;
	for (int i = 0; i < NK; i++)
		for (int c = 0; c < LL_METER_CLASSES; c++) {
			want.pkts[c] += ag->pkts[i][c];
			want.bytes[c] += ag->bytes[i][c];
		}
	if (say)
		print_message("ledger: a admitted %llu (agent %llu); k admitted %llu pkts (agent "
			      "%llu), denied %llu (agent %llu), %d key rows\n",
			      (unsigned long long)a, (unsigned long long)ag->a,
			      (unsigned long long)k.pkts[LL_METER_ADMITTED],
			      (unsigned long long)want.pkts[LL_METER_ADMITTED],
			      (unsigned long long)k.pkts[LL_METER_DENIED],
			      (unsigned long long)want.pkts[LL_METER_DENIED], k.rows);
	return a == ag->a && !memcmp(k.pkts, want.pkts, sizeof(k.pkts)) &&
	       !memcmp(k.bytes, want.bytes, sizeof(k.bytes));
}

/* Whether another connection of leaseline's (coord-a's writer: coord-b
 * writes nothing yet) is inside a transaction now.
 */
static bool writer_in_txn(struct udb *db)
{
	struct udb_stmt *s;
	bool in = false;

	if (udb_prepare(db,
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = "
			"'leaseline' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()",
			&s))
		return false;
	in = udb_step(s) == UDB_ROW && udb_col_i64(s, 0) > 0;
	udb_finalize(s);
	return in;
}

static void test_leader_killed_mid_stream_ledger_exact(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0], *b = &fx->r[1];
	struct agent ag = {0};
	uint64_t rnd = 11, end, t_kill, e_a;
	int st, streamed = 0, retries = 0, looked = 0;
	bool in_txn = false;
	struct udb *watch;
	char err[256];

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	replica_spawn(fx, b);
	assert_true(log_within(b, "following 'coord-a'", LEAD_MS));
	e_a = led_epoch(a);
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ag.inc = (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec + NSEC_PER_SEC;
	}
	assert_true(agent_hello(fx, &ag, a, 0));

	/* 1.5 s of stream to coord-a, then kill -9 right after a send: its
	 * writer has batches queued and, likely, a transaction open.
	 */
	end = clock_now_ns() + 1500 * NSEC_PER_MSEC;
	while (clock_now_ns() < end) {
		agent_stream(fx, &ag, &rnd, true);
		streamed++;
		usleep(50 * 1000);
	}
	/* Then on, as soon as coord-a's writer is seen inside a transaction
	 * (bounded: else right after a send).
	 */
	assert_int_equal(udb_open(&watch, fx->ledger, true, err, sizeof(err)), 0);
	while (!in_txn && looked++ < 200) {
		if (looked % 20 == 1)
			agent_stream(fx, &ag, &rnd, true);
		in_txn = writer_in_txn(watch);
	}
	udb_close(watch);
	t_kill = clock_now_ns();
	kill(a->pid, SIGKILL);
	waitpid(a->pid, &st, 0);
	a->pid = 0;

	/* The agent goes on counting while it finds the new leader. */
	end = clock_now_ns() + LEAD_MS * NSEC_PER_MSEC;
	while (!agent_hello(fx, &ag, b, e_a)) {
		agent_stream(fx, &ag, &rnd, true);
		retries++;
		assert_true(clock_now_ns() < end);
		usleep(200 * 1000);
	}
	print_message("%d stream rounds to coord-a, killed %s; coord-b led %.2f s after the "
		      "kill -9 (%d hellos redirected or refused)\n",
		      streamed, in_txn ? "inside a ledger transaction" : "between transactions",
		      ns_to_s(clock_now_ns() - t_kill), retries);
	end = clock_now_ns() + 1000 * NSEC_PER_MSEC;
	while (clock_now_ns() < end) {
		agent_stream(fx, &ag, &rnd, true);
		usleep(50 * 1000);
	}
	/* The same totals again until the ledger has them (bounded). */
	end = clock_now_ns() + 3 * WAIT_MS * NSEC_PER_MSEC;
	while (!ledger_is(fx, &ag, false) && clock_now_ns() < end) {
		usleep(150 * 1000);
		if (!ag.up)
			agent_hello(fx, &ag, b, e_a);
		agent_stream(fx, &ag, &rnd, false);
	}
	assert_true(ledger_is(fx, &ag, true));
	assert_true(log_within(b, "usage ledger 'postgresql://leaseline@127.0.0.1:", 100));
	conn_close(&ag.c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_leader_killed_mid_stream_ledger_exact, setup,
					    teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
