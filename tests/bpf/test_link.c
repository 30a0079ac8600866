// SPDX-License-Identifier: MIT
/*
 * The agent's coordinator link against a fake coordinator (this test, on a
 * loopback socket), with the real datapath maps: whatever a stranger on the
 * coordinator's address sends, the agent clamps it. A grant of rate 2^64-1,
 * a burst that would wrap the scaled math and a ttl of centuries is applied
 * as at most the contract and a ttl of LEASE_TTL_MAX_NS; an epoch of
 * 2^64-1, or a jump far past the epoch seen, never reaches the pinned fence;
 * a policy version of 2^64-1 is refused and recorded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <netinet/in.h>

#include "bpf/harness.h"
#include "lib/conn.h"
#include "agent/lease_decide.h"
#include "agent/link.h"

#define POLICY_FMT                                                                                 \
	"version: %llu\n"                                                                          \
	"limits:\n"                                                                                \
	"  - {name: g, key: none, scope: global, rate: 1000, burst: 100}\n"                        \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [g]}\n"

/* A per-key global limit: every source address has the contract. */
#define PER_KEY_POLICY_FMT                                                                         \
	"version: %llu\n"                                                                          \
	"limits:\n"                                                                                \
	"  - {name: g, key: src-ip, scope: global, rate: 1000, burst: 100}\n"                      \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [g]}\n"

struct fake {
	struct fx *fx;
	bool per_key; /* the policies sent are PER_KEY_POLICY_FMT */
	struct link link;
	struct cfg_agent ac;
	int lfd;
	struct conn c; /* the coordinator's side of the agent's connection */
	struct wire_msg *m;
	uint64_t hello_incarnation;
	uint32_t reports;	       /* reports received */
	struct wire_report *last;      /* the last one */
	void (*renew)(struct fake *f); /* answers each report, if set */
};

/* Run the agent's link until pred() holds or 2 s pass. */
static int pump(struct fake *f, int (*pred)(struct fake *))
{
	uint64_t end = clock_now_ns() + 2 * NSEC_PER_SEC;

	while (clock_now_ns() < end) {
		struct pollfd p = {.fd = -1};
		int r;

		p.fd = link_pollfd(&f->link, &p.events);
		poll(&p, 1, 5);
		link_step(&f->link, &f->fx->dp, p.fd >= 0 ? p.revents : 0, clock_now_ns());
		if (f->c.fd < 0) {
			int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

			if (fd >= 0)
				conn_init(&f->c, fd);
		}
		if (f->c.fd >= 0) {
			int rr = conn_read(&f->c);

			while ((r = conn_next(&f->c, f->m)) > 0)
				if (f->m->type == WIRE_HELLO) {
					f->hello_incarnation = f->m->hello.incarnation;
				} else if (f->m->type == WIRE_REPORT) {
					f->reports++;
					memcpy(f->last, &f->m->report, sizeof(*f->last));
					if (f->renew)
						f->renew(f);
				}
			if (rr)
				conn_close(&f->c); /* the agent redials: take the next one */
		}
		if (pred(f))
			return 1;
	}
	return 0;
}

static int got_hello(struct fake *f)
{
	return f->hello_incarnation != 0;
}

static int policy_running(struct fake *f)
{
	struct ll_state st = {};

	dp_state_read(f->fx->dp.state_fd, &st);
	return st.version != 0;
}

static void send_policy(struct fake *f, uint64_t epoch, unsigned long long version)
{
	struct wire_msg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->type = WIRE_POLICY;
	m->policy.epoch = epoch;
	m->policy.version = version;
	m->policy.len = (uint32_t)snprintf(m->policy.yaml, sizeof(m->policy.yaml),
					   f->per_key ? PER_KEY_POLICY_FMT : POLICY_FMT, version);
	assert_int_equal(conn_send(&f->c, m), 0);
	free(m);
}

/* Grants carry a whole per-key set unless delta_base is set: then changes
 * on top of grant delta_base.
 */
static uint64_t delta_base;
static bool delta_on;
static bool cut_on; /* grants are cuts (WIRE_KEYS_CUT) */

static void send_grant_keys(struct fake *f, uint64_t epoch, uint64_t seq, uint64_t rate,
			    uint64_t burst, uint64_t ttl_ns, uint64_t version,
			    const struct wire_key_grant *keys, uint32_t n_keys)
{
	struct wire_msg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->type = WIRE_GRANT;
	snprintf(m->grant.limit, sizeof(m->grant.limit), "g");
	snprintf(m->grant.holder, sizeof(m->grant.holder), "%s", f->ac.node);
	m->grant.incarnation = f->hello_incarnation;
	m->grant.epoch = epoch;
	m->grant.seq = seq;
	m->grant.report_seq = 0; /* answers the hello */
	m->grant.policy_version = version;
	m->grant.rate = rate;
	m->grant.burst = burst;
	m->grant.ttl_ns = ttl_ns;
	m->grant.refresh_ns = 100 * NSEC_PER_MSEC;
	m->grant.keys_full = cut_on ? WIRE_KEYS_CUT : delta_on ? WIRE_KEYS_CHANGES : WIRE_KEYS_WHOLE;
	m->grant.keys_base = delta_base;
	m->grant.n_keys = n_keys;
	if (n_keys)
		memcpy(m->grant.keys, keys, n_keys * sizeof(*keys));
	assert_int_equal(conn_send(&f->c, m), 0);
	free(m);
}

static void send_grant(struct fake *f, uint64_t epoch, uint64_t seq, uint64_t rate, uint64_t burst,
		       uint64_t ttl_ns, uint64_t version)
{
	send_grant_keys(f, epoch, seq, rate, burst, ttl_ns, version, NULL, 0);
}

static uint64_t applied_seq;

static int grant_applied(struct fake *f)
{
	struct ll_fence fe;

	return !dp_fence_read(&f->fx->dp, &fe) && fe.applied_seq[0] + fe.applied_seq[1] > 0 &&
	       fe.applied_seq[0] + fe.applied_seq[1] != applied_seq;
}

static int link_dropped(struct fake *f)
{
	return f->link.c.fd < 0;
}

static int setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);

	if (!f || hx_setup(state))
		return -1;
	f->fx = *state;
	f->m = malloc(sizeof(*f->m));
	f->last = calloc(1, sizeof(*f->last));
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!f->m || f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(f->lfd, 4) || getsockname(f->lfd, (struct sockaddr *)&sa, &len))
		return -1;
	snprintf(f->ac.coordinator, sizeof(f->ac.coordinator), "127.0.0.1:%d", ntohs(sa.sin_port));
	snprintf(f->ac.node, sizeof(f->ac.node), "gw-fake-test");
	f->c.fd = -1;
	if (link_init(&f->link, &f->ac))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fake *f = *state;
	void *fx = f->fx;

	link_free(&f->link);
	conn_close(&f->c);
	close(f->lfd);
	free(f->m);
	free(f->last);
	free(f);
	return hx_teardown(&fx);
}

static void connect_and_policy(struct fake *f, uint64_t epoch)
{
	assert_true(pump(f, got_hello));
	send_policy(f, epoch, 1);
	assert_true(pump(f, policy_running));
}

static void test_grant_clamped_to_contract(void **state)
{
	struct fake *f = *state;
	struct ll_lease l;

	connect_and_policy(f, 5);
	send_grant(f, 5, 1, UINT64_MAX, UINT64_MAX, UINT64_MAX, 1);
	assert_true(pump(f, grant_applied));
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.rate, 1000);		     /* the contract */
	assert_int_equal(l.burst_s, 100 * TB_SCALE); /* no wrap in the scaled math */
	assert_true(l.expiry_ns <= clock_now_ns() + LEASE_TTL_MAX_NS);
	assert_int_equal(f->link.grants_clamped, 1);
}

static int state_link_down(struct fake *f)
{
	struct ll_state st = {};

	return !dp_state_read(f->fx->dp.state_fd, &st) && st.link_up == 0 && st.link_connects >= 1;
}

static void test_epoch_out_of_bounds_never_pinned(void **state)
{
	struct fake *f = *state;
	struct ll_fence fe;

	connect_and_policy(f, 5);
	/* A grant may not move the epoch past the bound either. */
	send_grant(f, 5 + LEASE_EPOCH_STEP_MAX + 1, 1, 10, 10, NSEC_PER_SEC, 1);
	send_grant(f, UINT64_MAX, 1, 10, 10, NSEC_PER_SEC, 1);
	send_grant(f, 5, 1, 10, 10, NSEC_PER_SEC, 1); /* a fine one after them */
	assert_true(pump(f, grant_applied));
	assert_int_equal(dp_fence_read(&f->fx->dp, &fe), 0);
	assert_int_equal(fe.max_epoch_seen, 5);
	assert_int_equal(f->link.grants_stale, 2);
	/* A policy frame with such an epoch drops the link; the fence holds;
	 * ll_state says the link is down.
	 */
	send_policy(f, UINT64_MAX, 2);
	assert_true(pump(f, link_dropped));
	assert_true(pump(f, state_link_down));
	assert_int_equal(dp_fence_read(&f->fx->dp, &fe), 0);
	assert_int_equal(fe.max_epoch_seen, 5);
}

static int refused(struct fake *f)
{
	struct ll_state st = {};

	dp_state_read(f->fx->dp.state_fd, &st);
	return st.refused_ns != 0;
}

static void test_policy_version_out_of_bounds_refused(void **state)
{
	struct fake *f = *state;
	struct ll_state st = {};

	connect_and_policy(f, 5);
	send_policy(f, 5, ~0ull);
	assert_true(pump(f, refused));
	assert_int_equal(dp_state_read(f->fx->dp.state_fd, &st), 0);
	assert_int_equal(st.version, 1); /* still enforcing version 1 */
	assert_non_null(strstr(st.refused_why, "out of bounds"));
	/* A version 2^40 + 2 above the running 1 as well: nothing sticks. */
	send_policy(f, 5, (1ull << 40) + 2);
	assert_true(pump(f, refused));
	assert_int_equal(dp_state_read(f->fx->dp.state_fd, &st), 0);
	assert_int_equal(st.version, 1);
}

static uint64_t want_seq;

static int seq_applied(struct fake *f)
{
	struct ll_fence fe;

	return !dp_fence_read(&f->fx->dp, &fe) && fe.applied_seq[0] == want_seq;
}

/* The key of source 198.18.0.x under a src-ip /32 limit. */
static struct wire_key_grant key_grant(uint8_t x, uint64_t rate, uint64_t burst)
{
	struct wire_key_grant k = {.rate = rate, .burst = burst};

	k.key.family = 4;
	k.key.addr[2] = htonl(0xffff);
	k.key.addr[3] = htonl(0xc6120000u | x);
	return k;
}

/* The per-key grants held for limit id 0, by key byte x: rate and generation. */
static size_t held(struct fake *f, uint64_t rate[256], uint32_t gen[256])
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct lease_key *k = NULL;
	size_t n = 0;

	assert_non_null(pol);
	assert_int_equal(dp_policy_read(f->fx->dp.policy_fd, f->fx->dp.state_fd, pol), 0);
	assert_int_equal(dp_key_grants_read(&f->fx->dp, pol->limits[0].uid, &k, &n), 0);
	memset(rate, 0, 256 * sizeof(*rate));
	memset(gen, 0, 256 * sizeof(*gen));
	for (size_t i = 0; i < n; i++) {
		uint8_t x = ntohl(k[i].key.addr[3]) & 0xff;

		rate[x] = k[i].v.rate;
		gen[x] = k[i].v.gen;
		assert_int_equal(k[i].v.burst_s, k[i].burst * TB_SCALE);
	}
	free(k);
	free(pol);
	return n;
}

/* Each grant's per-key set replaces the one held, whole: unchanged entries
 * keep their generation and kg_ver stays (the buckets need not look again),
 * changed and new ones are rewritten, missing ones deleted; a set with a
 * malformed key is refused with the grant, and the held set stays.
 */
static void test_key_grants_whole_set(void **state)
{
	struct fake *f = *state;
	struct wire_key_grant k[3];
	uint64_t rate[256];
	uint32_t gen[256], gen2;
	struct ll_lease l;

	f->per_key = true;
	delta_on = false;
	connect_and_policy(f, 5);
	k[0] = key_grant(1, 10, 5);
	k[1] = key_grant(2, 20, 10);
	want_seq = 1;
	send_grant_keys(f, 5, 1, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(held(f, rate, gen), 2);
	assert_int_equal(rate[1], 10);
	assert_int_equal(rate[2], 20);
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.n_key_grants, 2);
	assert_int_equal(l.kg_ver, 1);
	gen2 = gen[2];

	want_seq = 2; /* the same set: nothing moves */
	send_grant_keys(f, 5, 2, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.kg_ver, 1);
	assert_int_equal(held(f, rate, gen), 2);
	assert_int_equal(gen[2], gen2);

	k[0] = key_grant(2, 30, 10); /* changed */
	k[1] = key_grant(3, 0, 0);   /* new: a cut to nothing */
	want_seq = 3;
	send_grant_keys(f, 5, 3, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(held(f, rate, gen), 2);
	assert_int_equal(rate[1], 0); /* deleted */
	assert_int_equal(gen[1], 0);
	assert_int_equal(rate[2], 30);
	assert_true(gen[2] != gen2 && gen[3] != 0 && gen[3] != gen[2]);
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.kg_ver, 2);

	k[2] = key_grant(4, 1, 1);
	k[2].key.family = 5; /* malformed: the whole grant is refused */
	want_seq = 4;
	send_grant_keys(f, 5, 4, 100, 10, NSEC_PER_SEC, 1, k, 3);
	k[2] = key_grant(2, 1, 1); /* a key named twice: refused too */
	send_grant_keys(f, 5, 5, 100, 10, NSEC_PER_SEC, 1, k, 3);
	want_seq = 6; /* an empty set after them: everything deleted */
	send_grant_keys(f, 5, 6, 100, 10, NSEC_PER_SEC, 1, NULL, 0);
	assert_true(pump(f, seq_applied));
	assert_int_equal(f->link.grants_bad_keys, 2);
	assert_int_equal(held(f, rate, gen), 0);
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.kg_ver, 3);
	assert_int_equal(l.n_key_grants, 0);
}

/* Grants that carry changes: applied only on top of a whole set this
 * connection applied and a base the fence has reached; a change sets or
 * removes the keys it names and leaves the others (and their generations)
 * alone; the lease counts the entries held.
 */
static void test_key_grants_changes(void **state)
{
	struct fake *f = *state;
	struct wire_key_grant k[3];
	uint64_t rate[256];
	uint32_t gen[256], gen1;
	struct ll_lease l;

	f->per_key = true;
	connect_and_policy(f, 5);
	/* Changes before any whole set: refused. */
	delta_on = true;
	delta_base = 0;
	k[0] = key_grant(1, 10, 5);
	send_grant_keys(f, 5, 1, 100, 10, NSEC_PER_SEC, 1, k, 1);
	/* The whole set {1, 2}. */
	delta_on = false;
	k[1] = key_grant(2, 20, 10);
	want_seq = 2;
	send_grant_keys(f, 5, 2, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(f->link.grants_stale, 1);
	assert_int_equal(held(f, rate, gen), 2);
	gen1 = gen[1];
	/* On top of 2: 2 changes, 3 is new, 1 untouched. */
	delta_on = true;
	delta_base = 2;
	k[0] = key_grant(2, 25, 10);
	k[1] = key_grant(3, 30, 10);
	want_seq = 3;
	send_grant_keys(f, 5, 3, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(held(f, rate, gen), 3);
	assert_int_equal(rate[1], 10);
	assert_int_equal(gen[1], gen1);
	assert_int_equal(rate[2], 25);
	assert_int_equal(rate[3], 30);
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.n_key_grants, 3);
	/* A base the agent has not reached: refused, nothing moves. */
	delta_base = 9;
	k[0] = key_grant(1, 0, 0);
	send_grant_keys(f, 5, 4, 100, 10, NSEC_PER_SEC, 1, k, 1);
	/* A remove of 1, a remove of a key not held, and nothing else. */
	delta_base = 3;
	k[0] = key_grant(1, 0, 0);
	k[0].op = WIRE_KEY_REMOVE;
	k[1] = key_grant(9, 0, 0);
	k[1].op = WIRE_KEY_REMOVE;
	want_seq = 5;
	send_grant_keys(f, 5, 5, 100, 10, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(f->link.grants_stale, 2);
	assert_int_equal(held(f, rate, gen), 2);
	assert_int_equal(gen[1], 0);
	assert_int_equal(rate[2], 25);
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.n_key_grants, 2);
	/* A whole set may not remove (a remove means nothing there): refused. */
	delta_on = false;
	send_grant_keys(f, 5, 6, 100, 10, NSEC_PER_SEC, 1, k, 1);
	want_seq = 7;
	send_grant_keys(f, 5, 7, 100, 10, NSEC_PER_SEC, 1, NULL, 0);
	assert_true(pump(f, seq_applied));
	assert_int_equal(f->link.grants_bad_keys, 1);
	assert_int_equal(held(f, rate, gen), 0);
	delta_on = false;
	delta_base = 0;
}

/* A cut (adoption by a coordinator that does not know the set): in a new
 * epoch, on top of a whole set of the last one, every key keeps the least
 * of its entry, its entry named and the new share; a named key not held
 * gets at most the share; an entry left as it was keeps its generation (no
 * bucket restarts). Changes on top of a cut are refused until a whole set
 * comes, and a cut may not remove a key.
 */
static void test_key_grants_cut(void **state)
{
	struct fake *f = *state;
	struct wire_key_grant k[3];
	uint64_t rate[256];
	uint32_t gen[256], gen1;
	struct ll_lease l;

	f->per_key = true;
	delta_on = cut_on = false;
	connect_and_policy(f, 5);
	k[0] = key_grant(1, 10, 5);
	k[1] = key_grant(2, 20, 10);
	k[2] = key_grant(3, 200, 50);
	want_seq = 1;
	send_grant_keys(f, 5, 1, 100, 10, NSEC_PER_SEC, 1, k, 3);
	assert_true(pump(f, seq_applied));
	assert_int_equal(held(f, rate, gen), 3);
	gen1 = gen[1];
	/* Epoch 6 cuts: share 50/8, names 2 at 5/5 and 4 (not held) at 300/30. */
	cut_on = true;
	k[0] = key_grant(2, 5, 5);
	k[1] = key_grant(4, 300, 30);
	want_seq = 2; /* seqs apart from epoch 5's: seq_applied looks at seqs */
	send_grant_keys(f, 6, 2, 50, 8, NSEC_PER_SEC, 1, k, 2);
	assert_true(pump(f, seq_applied));
	assert_int_equal(held(f, rate, gen), 4);
	assert_int_equal(rate[1], 10); /* below the share: as it was */
	assert_int_equal(gen[1], gen1);
	assert_int_equal(rate[2], 5);  /* its named entry, below what it held */
	assert_int_equal(rate[3], 50); /* above the share: cut to it */
	assert_int_equal(rate[4], 50); /* named above the share, not held: the share */
	assert_int_equal(dp_lease_read(&f->fx->dp, 0, &l), 0);
	assert_int_equal(l.n_key_grants, 4);
	assert_int_equal(l.rate, 50);
	assert_int_equal(l.epoch, 6);
	/* Changes on top of the cut: refused, nothing moves. */
	cut_on = false;
	delta_on = true;
	delta_base = 2;
	k[0] = key_grant(1, 900, 90);
	send_grant_keys(f, 6, 3, 50, 8, NSEC_PER_SEC, 1, k, 1);
	/* A cut that removes a key: refused as malformed. */
	delta_on = false;
	cut_on = true;
	k[0].op = WIRE_KEY_REMOVE;
	send_grant_keys(f, 6, 4, 50, 8, NSEC_PER_SEC, 1, k, 1);
	/* A whole set after it: applied, as usual. */
	cut_on = false;
	k[0] = key_grant(1, 900, 90);
	want_seq = 5;
	send_grant_keys(f, 6, 5, 50, 8, NSEC_PER_SEC, 1, k, 1);
	assert_true(pump(f, seq_applied));
	assert_int_equal(f->link.grants_stale, 2); /* the change, and the malformed cut */
	assert_int_equal(f->link.grants_bad_keys, 1);
	assert_int_equal(held(f, rate, gen), 1);
	assert_int_equal(rate[1], 900);
	delta_base = 0;
}

/* The hot key the last report lists for 198.18.0.x, or NULL. */
static const struct wire_hot *reported_hot(struct fake *f, uint8_t x)
{
	struct wire_key_grant k = key_grant(x, 0, 0);

	for (uint32_t i = 0; i < f->last->n_hot; i++)
		if (!memcmp(&f->last->hot[i].key, &k.key, sizeof(k.key)))
			return &f->last->hot[i];
	return NULL;
}

static uint32_t reports_seen;

static int next_report(struct fake *f)
{
	return f->reports > reports_seen;
}

/* What the fake coordinator answers each report with (the agent redials
 * when reports go unanswered): a renewal carrying hot_keys.
 */
static uint64_t hot_seq;
static struct wire_key_grant hot_keys[1];
static uint32_t hot_n;

static void send_grant_keys(struct fake *f, uint64_t epoch, uint64_t seq, uint64_t rate,
			    uint64_t burst, uint64_t ttl_ns, uint64_t version,
			    const struct wire_key_grant *keys, uint32_t n_keys);

static void hot_renew(struct fake *f)
{
	send_grant_keys(f, 5, ++hot_seq, 100, 5, 10 * NSEC_PER_SEC, 1, hot_keys, hot_n);
}

/* Wait for reports until one lists (want) or does not list (!want) 198.18.0.x. */
static const struct wire_hot *await_hot(struct fake *f, uint8_t x, bool want)
{
	for (int i = 0; i < 30; i++) {
		const struct wire_hot *h;

		reports_seen = f->reports;
		if (!pump(f, next_report))
			fail_msg("no report after %u (link %s, fd %d)", f->reports,
				 f->link.up ? "up" : "down", f->link.c.fd);

		h = reported_hot(f, x);
		if (!!h == want)
			return h;
	}
	fail_msg("no report %s 198.18.0.%u in 30 reports (%llu hot events, %zu tracked, %u listed)",
		 want ? "listing" : "without", x, (unsigned long long)f->link.hot.events,
		 f->link.hot.n, f->last->n_hot);
	return NULL;
}

/* The datapath's denials reach the coordinator: a key denied under its
 * share is reported hot with the contract as its demand; once it holds a
 * per-key grant it is reported while it spends, with what it spends, and
 * no longer once it spends nothing (it wants none).
 */
static void test_hot_keys_reported(void **state)
{
	struct fake *f = *state;
	struct wire_key_grant k = key_grant(7, 500, 50);
	const struct wire_hot *h;
	struct pkt p;

	f->per_key = true;
	connect_and_policy(f, 5);
	want_seq = hot_seq = 1;
	hot_n = 0;
	f->renew = hot_renew;
	send_grant(f, 5, 1, 100, 5, 10 * NSEC_PER_SEC, 1);
	assert_true(pump(f, seq_applied));
	hx_udp4(&p, "198.18.0.7", "198.18.1.1", 1000, 53, 16);
	assert_int_equal(hx_run(f->fx, &p, 50), XDP_DROP); /* 5 of 50 pass, then denials */
	h = await_hot(f, 7, true);
	assert_int_equal(h->demand, 1000); /* denied: as much as it can get */
	{
		struct ll_state st = {};

		/* status and metrics see what the link did, from the pins. */
		assert_int_equal(dp_state_read(f->fx->dp.state_fd, &st), 0);
		assert_int_equal(st.hot_keys_listed, 1);
		assert_true(st.grants_applied >= 1);
		assert_int_equal(st.grants_applied, f->link.grants_applied);
		assert_int_equal(st.link_up, 1);
		assert_int_equal(st.link_connects, f->link.connects);
		assert_true(st.link_connects >= 1);
	}
	assert_string_equal(f->last->e[h->entry].limit, "g");
	assert_null(reported_hot(f, 8)); /* a key never denied is not hot */

	/* Granted more, and spending it: listed with what it spends. */
	hot_keys[0] = k;
	hot_n = 1;
	want_seq = ++hot_seq;
	send_grant_keys(f, 5, hot_seq, 100, 5, 10 * NSEC_PER_SEC, 1, hot_keys, hot_n);
	assert_true(pump(f, seq_applied));
	/* A few packets per report, within the grant: once the denials are
	 * older than the window, the demand told is what it spends.
	 */
	h = NULL;
	for (int i = 0; i < 40 && !(h && h->demand > 0 && h->demand < 1000); i++) {
		hx_run(f->fx, &p, 2);
		reports_seen = f->reports;
		assert_true(pump(f, next_report));
		h = reported_hot(f, 7);
	}
	assert_non_null(h);
	assert_true(h->demand > 0 && h->demand < 1000);
	/* Spending nothing (and the denials older than two refreshes): told once
	 * that it wants none, then not listed (a demand stands until told).
	 */
	for (int i = 0; i < 30; i++) {
		h = await_hot(f, 7, true);
		if (!h->demand)
			break;
	}
	assert_int_equal(h->demand, 0);
	await_hot(f, 7, false);
}

static int listener(char *addr, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(addr, len, "127.0.0.1:%d", ntohs(sa.sin_port));
	return fd;
}

/* Step the link until a connection arrives on lfd (2 s at most); its fd or -1. */
static int accept_within(struct fake *f, int lfd)
{
	uint64_t end = clock_now_ns() + 2 * NSEC_PER_SEC;

	while (clock_now_ns() < end) {
		struct pollfd p = {.fd = -1};
		int fd;

		p.fd = link_pollfd(&f->link, &p.events);
		poll(&p, 1, 5);
		link_step(&f->link, &f->fx->dp, p.fd >= 0 ? p.revents : 0, clock_now_ns());
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			return fd;
	}
	return -1;
}

static void send_redirect(struct conn *c, const char *leader, const char *address)
{
	struct wire_msg m = {.type = WIRE_REDIRECT};

	m.redirect.epoch = 5;
	snprintf(m.redirect.leader, sizeof(m.redirect.leader), "%s", leader);
	snprintf(m.redirect.address, sizeof(m.redirect.address), "%s", address);
	assert_int_equal(conn_send(c, &m), 0);
	assert_int_equal(conn_flush(c), 0);
}

/* Replicas (coordinator: {addresses}): a REDIRECT naming a listed replica
 * is followed at once; one naming an address the file does not list is
 * never dialled (the agent tries the next listed one); a replica that
 * drops the link hands over to the next at once.
 */
static void test_redirect_follows_listed_replicas_only(void **state)
{
	struct fake *f = *state;
	char b_addr[CFG_ADDR_LEN], c_addr[CFG_ADDR_LEN];
	int b = listener(b_addr, sizeof(b_addr)), cfd = listener(c_addr, sizeof(c_addr)), fd;
	struct conn cb = {.fd = -1}, cc = {.fd = -1};

	link_free(&f->link);
	memcpy(f->ac.coordinators[0], f->ac.coordinator, sizeof(f->ac.coordinator));
	snprintf(f->ac.coordinators[1], sizeof(f->ac.coordinators[1]), "%s", b_addr);
	snprintf(f->ac.coordinators[2], sizeof(f->ac.coordinators[2]), "%s", c_addr);
	f->ac.n_coordinators = 3;
	assert_int_equal(link_init(&f->link, &f->ac), 0);

	/* A, the first listed, is not the leader: it names C. */
	assert_true(pump(f, got_hello));
	send_redirect(&f->c, "coord-c", c_addr);
	fd = accept_within(f, cfd);
	assert_true(fd >= 0);
	conn_init(&cc, fd);
	assert_int_equal(f->link.redirects, 1);
	assert_string_equal(f->link.addr, c_addr);
	conn_close(&f->c);

	/* C names a leader at an address no file lists: not dialled; the
	 * next listed replica after C (A) is.
	 */
	send_redirect(&cc, "evil", "203.0.113.9:7450");
	f->hello_incarnation = 0;
	assert_true(pump(f, got_hello)); /* on A's listener */
	assert_string_equal(f->link.addr, f->ac.coordinators[0]);
	assert_int_equal(f->link.redirects, 2);

	/* A serves; then drops the link: B, the next, is dialled at once. */
	connect_and_policy(f, 3);
	conn_close(&f->c);
	fd = accept_within(f, b);
	assert_true(fd >= 0);
	conn_init(&cb, fd);
	assert_string_equal(f->link.addr, b_addr);
	conn_close(&cb);
	conn_close(&cc);
	close(b);
	close(cfd);
}

/* A replica whose kernel completes the TCP handshake but whose process
 * never answers (SIGSTOP, a hung loop; the redirect of a follower that
 * has not yet seen the leader go) is left after LINK_HELLO_TIMEOUT: the
 * next listed replica is dialled, not waited on forever.
 */
static void test_silent_replica_left_for_the_next(void **state)
{
	struct fake *f = *state;
	char a_addr[CFG_ADDR_LEN];
	int a = listener(a_addr, sizeof(a_addr)); /* never accepted, never answers */
	int k;

	link_free(&f->link);
	snprintf(f->ac.coordinators[0], sizeof(f->ac.coordinators[0]), "%s", a_addr);
	memcpy(f->ac.coordinators[1], f->ac.coordinator, sizeof(f->ac.coordinator));
	f->ac.n_coordinators = 2;
	assert_int_equal(link_init(&f->link, &f->ac), 0);
	for (k = 0; k < 3 && !got_hello(f); k++)
		pump(f, got_hello); /* 2 s each */
	assert_true(got_hello(f));
	assert_string_equal(f->link.addr, f->ac.coordinators[1]);
	assert_true(f->link.connects >= 2); /* A's connect came first */
	connect_and_policy(f, 3);
	close(a);
}

static int dialled_thrice_more(struct fake *f)
{
	return f->link.connects >= 1 && f->link.c.fd < 0 && f->link.backoff_ns > 0 &&
	       ++f->reports > 3 * 20; /* pump steps every ~5 ms: ~0.3 s of redials */
}

/* The coordinator dies while the agent holds a live lease: it redials at
 * the shortest back-off until the lease dies (a restarted coordinator can
 * adopt the share only if the link is back in time), then backs off as
 * before.
 */
static void test_redial_fast_while_a_lease_lives(void **state)
{
	struct fake *f = *state;

	connect_and_policy(f, 5);
	send_grant(f, 5, 1, 500, 50, 600 * NSEC_PER_MSEC, 1);
	assert_true(pump(f, grant_applied));
	/* The coordinator's port closes: every dial is refused. */
	close(f->lfd);
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	conn_close(&f->c);
	f->reports = 0;
	assert_true(pump(f, dialled_thrice_more));
	assert_true(f->link.backoff_ns == 100 * NSEC_PER_MSEC);
	/* The lease (600 ms) has died by now plus 1 s: the back-off grows. */
	usleep(700 * 1000);
	f->reports = 0;
	assert_true(pump(f, dialled_thrice_more));
	f->reports = 0;
	assert_true(pump(f, dialled_thrice_more));
	assert_true(f->link.backoff_ns > 100 * NSEC_PER_MSEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_grant_clamped_to_contract, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_epoch_out_of_bounds_never_pinned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_policy_version_out_of_bounds_refused, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_key_grants_whole_set, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_grants_changes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_grants_cut, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hot_keys_reported, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_redirect_follows_listed_replicas_only, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_redial_fast_while_a_lease_lives, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_silent_replica_left_for_the_next, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
