// SPDX-License-Identifier: MIT
/*
 * Coordinator replicas on a real etcd (reference §6.4): three etcd members
 * on loopback, started once for this binary, and two `leaseline coord`
 * processes with replicas: (coord-a, coord-b) sharing a grant key. A
 * follower answers HELLO with REDIRECT naming the leader; when the leader
 * is killed -9 the follower leads under a higher epoch and adopts at once
 * the shares a holder re-presents (no dip: renewed in its quiet period,
 * never more than proven); a leader stopped past its etcd lease grants
 * nothing once it runs again, and redirects its holders to the new leader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "integ/replica_fx.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <json-c/json.h>

#include "lib/lease_clock.h"
#include "lib/net.h"
#include "lib/wire.h"

#define N_LIMITS 2
#define RATE	 800

/* A report re-presenting held[] (none if held[0].epoch is 0). */
static int report(struct fx *fx, struct conn *c, uint64_t seq, const struct coord_held *held)
{
	WIRE_MSG_CLEAR(fx->m, report.n);
	fx->m->type = WIRE_REPORT;
	snprintf(fx->m->report.holder, sizeof(fx->m->report.holder), "gw-1");
	fx->m->report.incarnation = 7;
	fx->m->report.max_epoch_seen = held[0].epoch;
	fx->m->report.seq = seq;
	fx->m->report.n = N_LIMITS;
	for (int l = 0; l < N_LIMITS; l++) {
		struct wire_report_entry *e = &fx->m->report.e[l];

		memset(e, 0, sizeof(*e));
		snprintf(e->limit, sizeof(e->limit), "%c", 'a' + l);
		e->demand = 10000;
		if (!held[l].epoch)
			continue;
		coord_entry_held(e, &held[l], NSEC_PER_SEC);
	}
	return c->fd >= 0 ? conn_send(c, fx->m) : -EPIPE;
}

/* Grants answering report seq within wait_ms into got[]: how many; -1 if
 * the connection was closed or redirected.
 */
static int grants(struct fx *fx, struct conn *c, uint64_t seq, struct coord_held *got, int wait_ms)
{
	int n = 0, r;

	while (n < N_LIMITS && (r = recv_msg(c, fx->m, wait_ms)) == 1) {
		const struct wire_grant *g = &fx->m->grant;
		int l;

		if (fx->m->type == WIRE_REDIRECT)
			return -1;
		assert_int_equal(fx->m->type, WIRE_GRANT);
		if (g->report_seq != seq)
			continue;
		l = g->limit[0] - 'a';
		assert_in_range(l, 0, N_LIMITS - 1);
		got[l] = coord_held_of(g);
		n++;
	}
	return r < 0 && !n ? -1 : n;
}

/* Report to the leader on c until it grants the whole contract (bounded). */
static uint64_t granted_all(struct fx *fx, struct conn *c, uint64_t seq, struct coord_held *h)
{
	uint64_t end = clock_now_ns() + 4 * (uint64_t)TTL_MS * NSEC_PER_MSEC;

	for (;; seq++) {
		bool all = true;

		assert_int_equal(report(fx, c, seq, h), 0);
		grants(fx, c, seq, h, 300);
		for (int l = 0; l < N_LIMITS; l++)
			all &= h[l].rate == RATE;
		if (all)
			return seq + 1;
		assert_true(clock_now_ns() < end);
		usleep(100 * 1000);
	}
}

static int group_setup(void **state)
{
	return replica_group_setup(state, false);
}

static int group_teardown(void **state)
{
	return replica_group_teardown(state);
}

static int setup(void **state)
{
	return replica_setup(state,
			     "version: 1\nlimits:\n"
			     "  - {name: a, key: none, scope: global, rate: 800, burst: 80}\n"
			     "  - {name: b, key: none, scope: global, rate: 800, burst: 80}\n"
			     "rules:\n  - {name: all, limits: [a, b]}\n",
			     false);
}

static int teardown(void **state)
{
	return replica_teardown(state);
}

static void test_follower_redirects_failover_adopts(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0], *b = &fx->r[1];
	struct coord_held h[N_LIMITS] = {0}, got[N_LIMITS] = {0};
	uint64_t seq = 1, e_a, e_b, t_kill, t_lead;
	struct conn c;
	int st, n;

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	replica_spawn(fx, b);
	assert_true(log_within(b, "following 'coord-a'", LEAD_MS));
	e_a = led_epoch(a);
	assert_true(e_a > 0);

	/* The follower names the leader and closes. */
	dial(b, &c);
	send_hello(fx, &c, "gw-1", 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_REDIRECT);
	assert_string_equal(fx->m->redirect.leader, "coord-a");
	{
		char want[32];

		snprintf(want, sizeof(want), "127.0.0.1:%d", a->port);
		assert_string_equal(fx->m->redirect.address, want);
	}
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), -ECONNRESET);
	conn_close(&c);

	/* The leader grants gw-1 the whole contract. */
	dial(a, &c);
	send_hello(fx, &c, "gw-1", 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_POLICY);
	assert_true(fx->m->policy.epoch == e_a);
	seq = granted_all(fx, &c, seq, h);
	conn_close(&c);

	/* kill -9 of the leader: coord-b leads at a higher epoch once the
	 * leader's etcd lease is gone.
	 */
	t_kill = clock_now_ns();
	kill(a->pid, SIGKILL);
	waitpid(a->pid, &st, 0);
	a->pid = 0;
	assert_true(log_within(b, "leading at epoch", LEAD_MS));
	t_lead = clock_now_ns();
	e_b = led_epoch(b);
	assert_true(e_b > e_a);
	print_message("new leader %.2f s after the kill -9 (etcd ttl %s), epoch %llu -> %llu\n",
		      ns_to_s(t_lead - t_kill), ETCD_TTL, (unsigned long long)e_a,
		      (unsigned long long)e_b);

	/* gw-1 re-presents what coord-a granted: adopted at once (the new
	 * term's quiet period has 3 s to run), exactly that, never more.
	 */
	dial(b, &c);
	send_hello(fx, &c, "gw-1", e_a);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	assert_int_equal(fx->m->type, WIRE_POLICY);
	assert_int_equal(report(fx, &c, seq, h), 0);
	n = grants(fx, &c, seq, got, 1000);
	assert_int_equal(n, N_LIMITS);
	assert_true(clock_now_ns() - t_lead < (uint64_t)TTL_MS * NSEC_PER_MSEC);
	for (int l = 0; l < N_LIMITS; l++) {
		assert_true(got[l].epoch == e_b);
		assert_int_equal(got[l].rate, RATE);
		assert_true(got[l].burst <= h[l].burst);
	}
	assert_true(log_within(b, "holder 'gw-1' limit 'a': adopted 800/s", 100));
	conn_close(&c);
}

/* A leader stopped (SIGSTOP) past its etcd lease: another leads; the old
 * one, running again, grants nothing (its deadline passed while it was
 * stopped) and redirects its holder to the new leader.
 */
static void test_stopped_leader_grants_nothing_after(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0], *b = &fx->r[1];
	struct coord_held h[N_LIMITS] = {0}, got[N_LIMITS] = {0};
	uint64_t seq = 1, e_a;
	struct conn c;
	int n;

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	replica_spawn(fx, b);
	assert_true(log_within(b, "following 'coord-a'", LEAD_MS));
	e_a = led_epoch(a);
	dial(a, &c);
	send_hello(fx, &c, "gw-1", 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	seq = granted_all(fx, &c, seq, h);

	kill(a->pid, SIGSTOP);
	assert_true(log_within(b, "leading at epoch", LEAD_MS));
	assert_true(led_epoch(b) > e_a);
	/* The report goes out while coord-a is stopped: it reads it first
	 * thing when it runs again, with its deadline long past.
	 */
	assert_int_equal(report(fx, &c, seq, h), 0);
	kill(a->pid, SIGCONT);
	n = grants(fx, &c, seq, got, 2000);
	assert_true(n <= 0); /* nothing, or redirected */
	assert_true(log_within(a, "no longer leading", LEAD_MS));
	conn_close(&c);
}

/* etcd loses quorum (2 of 3 members stopped): the leader stops granting
 * by its deadline, on its own clock, before etcd could have let anyone
 * else lead (it never grants after t_send + ttl(1 - rho) - delta); once
 * quorum is back and its lease survived, it resumes at the same epoch.
 *
 * The bound is ttl + 2 election timeouts from the stop, not ttl: when the
 * member left running is etcd's own leader, it goes on answering
 * keepalives until raft's CheckQuorum demotes it (one to two election
 * timeouts; etcd 3.4.23 renews on a leader without checking it still
 * leads, etcd-io/etcd#15247), so the last good keepalive may come after
 * the stop. No one else can lead meanwhile: there is no quorum, and a new
 * etcd leader extends every lease by an election timeout on promotion.
 */
#define ETCD_ELECTION_MS 1000 /* tests/etcd_cluster.h's --election-timeout */
static void test_quorum_lost_stops_then_resumes(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0];
	struct coord_held h[N_LIMITS] = {0};
	uint64_t seq = 1, e_a, t_stop, t_last = 0, t_silent = 0, end, bound;
	struct conn c;

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	e_a = led_epoch(a);
	dial(a, &c);
	send_hello(fx, &c, "gw-1", 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	seq = granted_all(fx, &c, seq, h);
	/* The worst case: the member left running (the leader's first
	 * endpoint) is etcd's own leader, and renews until it notices.
	 */
	assert_int_equal(etcd_move_leader(&fx->etcd, 0), 0);
	t_stop = clock_now_ns();
	assert_int_equal(etcd_member_signal(&fx->etcd, 1, SIGSTOP), 0);
	assert_int_equal(etcd_member_signal(&fx->etcd, 2, SIGSTOP), 0);
	/* Report every 200 ms, for up to 10 s and until a second after the
	 * leader says it stopped: grants stop within the bound.
	 */
	bound = t_stop + 5 * NSEC_PER_SEC + 2 * ETCD_ELECTION_MS * NSEC_PER_MSEC;
	end = t_stop + 10 * NSEC_PER_SEC;
	while (clock_now_ns() < end) {
		struct coord_held got[N_LIMITS] = {0};

		if (!t_silent && coord_log_has(a->dir, "etcd silent past the deadline"))
			t_silent = clock_now_ns();
		if (t_silent && clock_now_ns() > t_silent + NSEC_PER_SEC)
			break;
		/* Stepping down, the leader closes the link (REDIRECT). */
		if (report(fx, &c, seq, h))
			break;
		if (grants(fx, &c, seq, got, 300) == N_LIMITS) {
			t_last = clock_now_ns();
			memcpy(h, got, sizeof(h));
		}
		seq++;
		usleep(200 * 1000);
	}
	assert_true(t_last > 0);
	assert_true(t_last < bound);
	assert_true(log_within(a, "etcd silent past the deadline", 100));
	print_message("quorum lost: last grant %.2f s after the stop (etcd ttl %s, bound %.1f s)\n",
		      ns_to_s(t_last - t_stop), ETCD_TTL, ns_to_s(bound - t_stop));
	assert_int_equal(etcd_member_signal(&fx->etcd, 1, SIGCONT), 0);
	assert_int_equal(etcd_member_signal(&fx->etcd, 2, SIGCONT), 0);
	assert_true(etcd_cluster_healthy(&fx->etcd, 15000));
	/* Back: leading again, at the same epoch or a new term. */
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	end = clock_now_ns() + LEAD_MS * NSEC_PER_MSEC;
	for (;;) {
		struct coord_held got[N_LIMITS] = {0};
		int n;

		if (c.fd < 0 || coord_log_has(a->dir, "no longer leading")) {
			conn_close(&c);
			dial(a, &c);
			send_hello(fx, &c, "gw-1", e_a);
			if (recv_msg(&c, fx->m, WAIT_MS) != 1 || fx->m->type != WIRE_POLICY)
				conn_close(&c);
		}
		if (c.fd >= 0 && !report(fx, &c, seq, h)) {
			n = grants(fx, &c, seq, got, 300);
			seq++;
			if (n == N_LIMITS) {
				print_message("granted again at epoch %llu (was %llu): %s\n",
					      (unsigned long long)got[0].epoch,
					      (unsigned long long)e_a,
					      got[0].epoch == e_a ? "resumed" : "a new term");
				assert_true(got[0].epoch >= e_a);
				break;
			}
			if (n < 0)
				conn_close(&c);
		} else {
			conn_close(&c);
		}
		assert_true(clock_now_ns() < end);
		usleep(200 * 1000);
	}
	conn_close(&c);
}

/* The etcd member a leader talks to first is killed: it fails over to
 * another endpoint within its deadline and never stops leading; its
 * holder is granted throughout. (Last: the cluster keeps 2 of 3.)
 */
static void test_etcd_member_killed_no_step_down(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0];
	struct coord_held h[N_LIMITS] = {0};
	uint64_t seq = 1, end;
	struct conn c;
	int rounds = 0;

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	dial(a, &c);
	send_hello(fx, &c, "gw-1", 0);
	assert_int_equal(recv_msg(&c, fx->m, WAIT_MS), 1);
	seq = granted_all(fx, &c, seq, h);
	assert_int_equal(etcd_member_signal(&fx->etcd, 0, SIGKILL), 0);
	/* Two etcd lease ttls: every keepalive of them goes elsewhere. */
	end = clock_now_ns() + 10 * NSEC_PER_SEC;
	while (clock_now_ns() < end) {
		struct coord_held got[N_LIMITS] = {0};

		assert_int_equal(report(fx, &c, seq, h), 0);
		assert_int_equal(grants(fx, &c, seq, got, 1000), N_LIMITS);
		memcpy(h, got, sizeof(h));
		seq++;
		rounds++;
		usleep(200 * 1000);
	}
	assert_true(rounds >= 10);
	assert_false(coord_log_has(a->dir, "not leading"));
	assert_false(coord_log_has(a->dir, "no longer leading"));
	conn_close(&c);
}

/* `leaseline coord-status -c DIR/FILE -j`: its exit code, the document in *doc. */
static int coord_status_of(const char *dir, const char *file, struct json_object **doc)
{
	char cmd[256], buf[16384];
	size_t n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "%s coord-status -j -c %s/%s 2>/dev/null", bin(), dir, file);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(buf, 1, sizeof(buf) - 1, p);
	buf[n] = '\0';
	st = pclose(p);
	*doc = json_tokener_parse(buf);
	if (!*doc)
		fail_msg("coord-status printed no JSON: '%s'", buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static struct json_object *at(struct json_object *o, const char *a, const char *b)
{
	struct json_object *x = NULL, *y = NULL;

	if (!json_object_object_get_ex(o, a, &x))
		fail_msg("coord-status: no '%s'", a);
	if (!b)
		return x;
	if (!json_object_object_get_ex(x, b, &y))
		fail_msg("coord-status: no '%s.%s'", a, b);
	return y;
}

/* The operator's look: etcd's leader key and each replica's own view
 * agree (the leader says it leads at etcd's epoch, the follower that it
 * does not and grants under none); one etcd member stopped shows as down and the
 * fleet is still healthy; a replica whose etcd does not answer exits 1
 * with the reason.
 */
static void test_coord_status_names_the_leader(void **state)
{
	struct fx *fx = *state;
	struct replica *a = &fx->r[0], *b = &fx->r[1];
	struct json_object *d, *m;
	uint64_t epoch;
	int raft_leader = -1, stopped;
	char bad[1024];

	replica_spawn(fx, a);
	assert_true(log_within(a, "leading at epoch", LEAD_MS));
	replica_spawn(fx, b);
	assert_true(log_within(b, "following 'coord-a'", LEAD_MS));
	epoch = led_epoch(a);

	assert_int_equal(coord_status_of(b->dir, "coord.yaml", &d), 0);
	assert_true(json_object_get_boolean(at(d, "healthy", NULL)));
	assert_string_equal(json_object_get_string(at(at(d, "etcd", "leader"), "node", NULL)),
			    "coord-a");
	assert_int_equal(json_object_get_int64(at(at(d, "etcd", "leader"), "epoch", NULL)), epoch);
	assert_int_equal(json_object_get_int64(at(d, "etcd", "epoch_counter")), epoch);
	assert_int_equal(json_object_get_int(at(d, "replica", "leader")), 0);
	assert_int_equal(json_object_get_int64(at(d, "replica", "epoch")),
			 0); /* grants under none */
	m = at(d, "etcd", "members");
	assert_int_equal(json_object_array_length(m), 3);
	for (int i = 0, leaders = 0; i < 3; i++) {
		struct json_object *x = json_object_array_get_idx(m, i);

		assert_int_equal(json_object_get_boolean(at(x, "up", NULL)), fx->etcd.pid[i] > 0);
		if (json_object_get_boolean(at(x, "raft_leader", NULL))) {
			leaders++;
			raft_leader = i;
		}
		if (i == 2)
			assert_int_equal(leaders, 1); /* etcd's own leader, exactly one */
	}
	json_object_put(d);

	assert_int_equal(coord_status_of(a->dir, "coord.yaml", &d), 0);
	assert_int_equal(json_object_get_int(at(d, "replica", "leader")), 1);
	assert_int_equal(json_object_get_int64(at(d, "replica", "epoch")), epoch);
	assert_true(json_object_get_double(at(d, "replica", "deadline_margin_s")) > 0);
	json_object_put(d);

	/* A follower member stopped (stopping etcd's raft leader would leave
	 * the cluster leaderless for an election timeout, and coord-status
	 * rightly unhealthy meanwhile: that is the failover tests' case). */
	stopped = (raft_leader + 1) % 3;
	assert_int_equal(etcd_member_signal(&fx->etcd, stopped, SIGSTOP), 0);
	assert_int_equal(coord_status_of(b->dir, "coord.yaml", &d), 0);
	m = at(d, "etcd", "members");
	assert_false(
	    json_object_get_boolean(at(json_object_array_get_idx(m, stopped), "up", NULL)));
	assert_true(
	    json_object_get_boolean(at(json_object_array_get_idx(m, raft_leader), "up", NULL)));
	json_object_put(d);
	assert_int_equal(etcd_member_signal(&fx->etcd, stopped, SIGCONT), 0);

	/* An etcd that does not answer (a closed port): exit 1, and why. */
	snprintf(bad, sizeof(bad),
		 "listen: 127.0.0.1:1\npolicy: policy.yaml\nstate-dir: state\n"
		 "grant-key: grant.key\nreplicas:\n  etcd: [http://127.0.0.1:1]\n"
		 "  prefix: %s\n  node: coord-z\n  advertise: 127.0.0.1:1\n",
		 fx->prefix);
	write_file(b->dir, "bad.yaml", bad);
	assert_int_equal(coord_status_of(b->dir, "bad.yaml", &d), 1);
	assert_false(json_object_get_boolean(at(d, "healthy", NULL)));
	assert_string_equal(json_object_get_string(at(d, "problem", NULL)),
			    "no etcd member answers");
	json_object_put(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_follower_redirects_failover_adopts, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_stopped_leader_grants_nothing_after, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_quorum_lost_stops_then_resumes, setup, teardown),
	    /* Before a member is killed for good (the next test). */
	    cmocka_unit_test_setup_teardown(test_coord_status_names_the_leader, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_etcd_member_killed_no_step_down, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
