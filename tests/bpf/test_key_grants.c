// SPDX-License-Identifier: MIT
/*
 * Per-key grants of global per-key limits, hot-key events and the buckets'
 * spent counter, on the real kernel (docs/design.md, "Per-key grants for hot
 * keys"). Grants are written here the way the agent writes them: entries of
 * ll_key_grants first, then the lease with kg_ver moved on and n_key_grants
 * set. A granted key spends its grant while the lease lives, the share
 * otherwise; installing, changing or removing a grant never deposits tokens;
 * the fallback ignores grants; a key denied under the lock of a live global
 * limit is reported in ll_hot at most once per gate interval; spent counts
 * what a bucket admitted and gives back what a rollback refunds.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <time.h>
#include <cmocka.h>

#include "bpf/harness.h"
#include "agent/lease_decide.h"
#include "agent/link.h"

#define FAR_FUTURE (clock_now_ns() + 3600 * NSEC_PER_SEC)
#define SRC_A	   "198.18.0.10"
#define SRC_B	   "198.18.0.11"
#define SRC_C	   "198.18.0.12"
#define SRC_D	   "198.18.0.13"
#define SRC_E	   "198.18.0.14"
#define DST	   "198.18.1.1"


/* One per-key global limit g (contract 1000/s, burst 1000 per key). */
static int apply_g(struct fx *fx, const char *key, const char *extra)
{
	return hx_applyf_global(fx,
		     "version: 1\nlimits:\n"
		     "  - {name: g, key: %s, scope: global, rate: 1000, burst: 1000%s}\n"
		     "rules:\n  - {name: all, limits: [g]}\n",
		     key, extra);
}

/* Lease this gateway a share (rate, burst) of limit `name`'s contract. */
static int share(struct fx *fx, const char *name, uint64_t seq, uint64_t rate, uint64_t burst,
		 uint64_t expiry_ns)
{
	struct lease_grant g = {
	    .epoch = 1, .seq = seq, .rate = rate, .burst = burst, .expiry_ns = expiry_ns};

	int err = link_lease_apply(&fx->dp, (uint32_t)hx_limit_id(fx, name), &g, clock_now_ns());

	hx_clock_catch_up(); /* the share refills from the grant's instant */
	return err;
}

/* A generation no policy or lease of these tests reaches: per-key grant
 * generations share ll_state.next_uid's space and must be unique.
 */
static uint32_t gen_base(struct fx *fx)
{
	struct ll_state st;

	assert_int_equal(dp_state_read(fx->dp.state_fd, &st), 0);
	return st.next_uid + 100000;
}

/* ll_key_grants' key of a src-ip key: limit uid + ll_key_id. */
static struct ll_flow_key gkey(uint32_t uid, const char *src)
{
	struct ll_key k = hx_key_addr(uid, 4, src, 32);
	struct ll_flow_key fk;

	memset(&fk, 0, sizeof(fk));
	fk.limit_uid = k.limit_uid;
	fk.proto = k.proto;
	fk.family = k.family;
	fk.dport = k.dport;
	memcpy(fk.addr, k.addr, sizeof(fk.addr));
	return fk;
}

/* Write (or with burst < 0, delete) the per-key grant of key fk. */
static void grant_put(struct fx *fx, const struct ll_flow_key *fk, uint64_t rate, uint64_t burst,
		      uint32_t gen)
{
	struct ll_key_grant g = {.rate = rate,
				 .burst_s = burst * TB_SCALE,
				 .fill_ns = tb_fill_ns(rate, burst * TB_SCALE),
				 .gen = gen};

	assert_int_equal(
	    bpf_map_update_elem(bpf_map__fd(fx->dp.skel->maps.ll_key_grants), fk, &g, BPF_ANY), 0);
}

static void grant_del(struct fx *fx, const struct ll_flow_key *fk)
{
	assert_int_equal(bpf_map_delete_elem(bpf_map__fd(fx->dp.skel->maps.ll_key_grants), fk), 0);
}

/* The lease of limit `name` with its set of per-key grants moved on: n of them. */
static struct ll_lease lease_kg(struct fx *fx, const char *name, uint16_t n)
{
	uint32_t id = (uint32_t)hx_limit_id(fx, name);
	struct ll_lease l;

	assert_int_equal(dp_lease_read(&fx->dp, id, &l), 0);
	l.n_key_grants = n;
	l.kg_ver++;
	assert_int_equal(bpf_map_update_elem(fx->dp.leases_fd, &id, &l, BPF_F_LOCK), 0);
	hx_clock_catch_up(); /* a grant refills from the bucket's last packet on */
	return l;
}

static struct ll_lease lease_of(struct fx *fx, const char *name)
{
	struct ll_lease l;

	assert_int_equal(dp_lease_read(&fx->dp, (uint32_t)hx_limit_id(fx, name), &l), 0);
	return l;
}

/* n UDP packets from src (len: payload bytes); how many passed. */
static int send_src(struct fx *fx, const char *src, size_t len, int n)
{
	struct pkt p;

	hx_udp4(&p, src, DST, 1000, 53, len);
	return hx_send(fx, &p, n, NULL);
}

static struct ll_bucket bucket_of(struct fx *fx, uint32_t uid, const char *src)
{
	struct ll_key k = hx_key_addr(uid, 4, src, 32);
	struct ll_bucket b;

	assert_int_equal(hx_bucket(fx, &k, &b), 0);
	return b;
}

/* ---- hot events ---- */

#define MAX_EVENTS 4096

struct hot_log {
	int n;
	struct ll_hot_event ev[MAX_EVENTS];
};

static int hot_cb(void *ctx, void *data, size_t size)
{
	struct hot_log *log = ctx;

	assert_int_equal(size, sizeof(struct ll_hot_event));
	if (log->n < MAX_EVENTS)
		memcpy(&log->ev[log->n], data, sizeof(struct ll_hot_event));
	log->n++;
	return 0;
}

/* Everything in ll_hot since the last drain (log reset first). */
static void hot_drain(struct fx *fx, struct hot_log *log)
{
	struct ring_buffer *rb =
	    ring_buffer__new(bpf_map__fd(fx->dp.skel->maps.ll_hot), hot_cb, log, NULL);

	assert_non_null(rb);
	log->n = 0;
	assert_true(ring_buffer__consume(rb) >= 0);
	ring_buffer__free(rb);
}

/* Events of log whose key is fk's (limit uid and ll_key_id bytes). */
static int hot_count(const struct hot_log *log, const struct ll_flow_key *fk)
{
	int n = 0;

	for (int i = 0; i < log->n && i < MAX_EVENTS; i++)
		n += log->ev[i].limit_uid == fk->limit_uid &&
		     !memcmp(&log->ev[i].key, (const uint8_t *)fk + sizeof(fk->limit_uid),
			     sizeof(log->ev[i].key));
	return n;
}

/* Run the rest of the test on the CPU it is on: the hot-event gate is per CPU. */
static void pin_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	assert_true(cpu >= 0);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

static void unpin_cpu(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		CPU_SET(c, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- tests ---- */

/* Two keys under one share (burst 100): the one with a per-key grant of
 * burst 10 admits exactly 10 of 50 (its bucket starts at the grant's
 * burst), the other 100 of 150. A raised grant deposits nothing (only what
 * refilled since), a lowered one clamps (from the share or from a grant).
 */
static void test_grant_vs_share(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns(), t1;
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka, kc, kd, ke;
	struct ll_bucket b;
	struct ll_lease l;
	uint32_t gen;

	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	gen = gen_base(fx);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	grant_put(fx, &ka, 1, 10, gen + 1);
	l = lease_kg(fx, "g", 1);

	assert_in_range(send_src(fx, SRC_A, 0, 50), 10, 10 + hx_slack(1, t0));
	assert_in_range(send_src(fx, SRC_B, 0, 150), 100, 100 + hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_equal(b.o_gen, gen + 1);
	assert_int_equal(b.gen, gen + 1);
	assert_int_equal(b.o_burst_s, 10 * TB_SCALE);
	assert_int_equal(b.o_rate, 1);
	assert_int_equal(b.kg_seen, l.kg_ver);
	b = bucket_of(fx, cfg.uid, SRC_B);
	assert_int_equal(b.o_gen, 0);
	assert_int_equal(b.gen, l.gen);
	assert_int_equal(b.kg_seen, l.kg_ver);

	/* Raise A's grant to burst 500: nothing deposited, only refill since. */
	grant_put(fx, &ka, 1, 500, gen + 2);
	l = lease_kg(fx, "g", 1);
	assert_in_range(send_src(fx, SRC_A, 0, 20), 0, hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_equal(b.o_gen, gen + 2);
	assert_int_equal(b.o_burst_s, 500 * TB_SCALE);
	assert_in_range(b.tokens, 0, hx_refill_max(1, t0, b.last_ns));

	/* The time up to a change is refilled at the old grant's rate (0 here),
	 * only the time since at the new one's (1000/s).
	 */
	ke = gkey(cfg.uid, SRC_E);
	grant_put(fx, &ke, 0, 5, gen + 6);
	lease_kg(fx, "g", 2);
	assert_int_equal(send_src(fx, SRC_E, 0, 6), 5);
	usleep(50000);
	t1 = clock_now_ns();
	grant_put(fx, &ke, 1000, 500, gen + 7);
	lease_kg(fx, "g", 2);
	assert_in_range(send_src(fx, SRC_E, 0, 40), 0, hx_slack(1000, t1));

	/* Lower from the share: C holds 99 of the share's 100, its new grant of
	 * burst 5 clamps it to 5.
	 */
	assert_int_equal(send_src(fx, SRC_C, 0, 1), 1);
	kc = gkey(cfg.uid, SRC_C);
	grant_put(fx, &kc, 1, 5, gen + 3);
	lease_kg(fx, "g", 3);
	assert_in_range(send_src(fx, SRC_C, 0, 30), 5, 5 + hx_slack(1, t0));

	/* Lower from a grant: D starts at its grant's 50, spends 1, its grant
	 * cut to 20 clamps the 49 to 20.
	 */
	kd = gkey(cfg.uid, SRC_D);
	grant_put(fx, &kd, 1, 50, gen + 4);
	lease_kg(fx, "g", 4);
	assert_int_equal(send_src(fx, SRC_D, 0, 1), 1);
	b = bucket_of(fx, cfg.uid, SRC_D);
	assert_int_equal(b.tokens / TB_SCALE, 49);
	grant_put(fx, &kd, 1, 20, gen + 5);
	lease_kg(fx, "g", 4);
	assert_in_range(send_src(fx, SRC_D, 0, 40), 20, 20 + hx_slack(1, t0));
	/* The other keys' grants were untouched by these changes. */
	b = bucket_of(fx, cfg.uid, SRC_C);
	assert_int_equal(b.o_gen, gen + 3);
	assert_in_range(hx_stats_of(fx, "g").allowed_pkts, 10 + 100 + 5 + 1 + 5 + 1 + 20,
			10 + 100 + 5 + 1 + 5 + 1 + 20 + 5 * hx_slack(1, t0) + hx_slack(1000, t1));
}

/* A grant deleted from the set (kg_ver moved on, n_key_grants 0): the key
 * goes back to the share with what it held, not a fresh burst of the share.
 */
static void test_grant_removed(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka;
	struct ll_bucket b;
	struct ll_lease l;

	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	grant_put(fx, &ka, 1, 10, gen_base(fx));
	lease_kg(fx, "g", 1);
	assert_int_equal(send_src(fx, SRC_A, 0, 3), 3);

	grant_del(fx, &ka);
	l = lease_kg(fx, "g", 0);
	/* 7 left of the grant's 10: the share's burst of 100 is no deposit. */
	assert_in_range(send_src(fx, SRC_A, 0, 30), 7, 7 + hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_equal(b.o_gen, 0);
	assert_int_equal(b.o_rate + b.o_burst_s + b.o_fill_ns, 0);
	assert_int_equal(b.gen, l.gen);
	assert_int_equal(b.kg_seen, l.kg_ver);
}

/* A grant lives with the lease: past its expiry fail-closed denies the
 * granted key like any other; with fallback a granted key spends the
 * fallback share (clamped to its burst), not its grant, and so does a key
 * first seen while the lease is dead. Once the lease lives again, that key
 * copies its grant on its first packet.
 */
static void test_grant_expires_with_lease(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka, kb, kd;
	struct ll_limit_stats st;
	struct ll_bucket b;
	uint32_t gen;

	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	gen = gen_base(fx);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	grant_put(fx, &ka, 1, 50, gen + 1);
	lease_kg(fx, "g", 1);
	assert_int_equal(send_src(fx, SRC_A, 0, 3), 3);
	assert_int_equal(share(fx, "g", 2, 1, 100, clock_now_ns() - 1), 0);
	assert_int_equal(send_src(fx, SRC_A, 0, 5), 0); /* 47 tokens in the grant: dead */
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.allowed_pkts, 3);
	assert_int_equal(st.denied_pkts, 5);

	/* The same with on-loss fallback (rate 1, burst 3). */
	assert_int_equal(hx_applyf_global(fx,
			       "version: 2\nlimits:\n"
			       "  - {name: g, key: src-ip, scope: global, rate: 1000, burst: 1000, "
			       "on-loss: fallback, fallback: {rate: 1, burst: 3}}\n"
			       "rules:\n  - {name: all, limits: [g]}\n"),
			 0);
	assert_int_equal(share(fx, "g", 3, 1, 100, FAR_FUTURE), 0);
	kb = gkey(cfg.uid, SRC_B);
	grant_put(fx, &kb, 1, 50, gen + 2);
	lease_kg(fx, "g", 2);
	assert_int_equal(send_src(fx, SRC_B, 0, 2), 2); /* 48 left in B's grant */
	assert_int_equal(share(fx, "g", 4, 1, 100, clock_now_ns() - 1), 0);
	t0 = clock_now_ns();
	assert_in_range(send_src(fx, SRC_B, 0, 10), 3, 3 + hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_B);
	assert_int_equal(b.gen, lease_of(fx, "g").fb_gen);
	assert_int_equal(b.o_gen, gen + 2); /* kept for when the lease lives again */
	/* A key first seen while the lease is dead: the fallback share. */
	assert_in_range(send_src(fx, SRC_C, 0, 10), 3, 3 + hx_slack(1, t0));
	/* The same for a key with a grant: no grant is looked up while dead. */
	kd = gkey(cfg.uid, SRC_D);
	grant_put(fx, &kd, 1, 50, gen + 3);
	lease_kg(fx, "g", 3);
	assert_in_range(send_src(fx, SRC_D, 0, 10), 3, 3 + hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_D);
	assert_int_equal(b.o_gen, 0);
	assert_int_equal(b.gen, lease_of(fx, "g").fb_gen);

	/* Alive again: D copies its grant on its first packet, spent as it is
	 * (nothing left of the fallback's 3, nothing deposited).
	 */
	assert_int_equal(share(fx, "g", 5, 1, 100, FAR_FUTURE), 0);
	assert_in_range(send_src(fx, SRC_D, 0, 5), 0, hx_slack(1, t0));
	b = bucket_of(fx, cfg.uid, SRC_D);
	assert_int_equal(b.o_gen, gen + 3);
	assert_int_equal(b.gen, gen + 3);
	assert_int_equal(b.kg_seen, lease_of(fx, "g").kg_ver);
	st = hx_stats_of(fx, "g");
	assert_in_range(st.fallback_pkts, 9, 9 + 3 * hx_slack(1, t0));
}

/* A key with a grant that has no bucket yet starts full at the grant's
 * burst, not the share's.
 */
static void test_new_bucket_starts_at_grant(void **state)
{
	struct fx *fx = FX(state);
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka;
	struct ll_bucket b;
	uint32_t gen;

	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	gen = gen_base(fx);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	grant_put(fx, &ka, 1, 3, gen);
	lease_kg(fx, "g", 1);
	assert_in_range(send_src(fx, SRC_A, 0, 10), 3, 3 + hx_slack(1, t0));
	assert_int_equal(hx_stats_of(fx, "g").new_keys, 1);
	b = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_equal(b.o_gen, gen);
	assert_int_equal(b.gen, gen);
	/* A grant above the share: a new bucket holds all of it, and a raise
	 * keeps what the bucket holds above the share (it settles under the
	 * grant it was spent with, not the share).
	 */
	ka = gkey(cfg.uid, SRC_C);
	grant_put(fx, &ka, 1, 150, gen + 2);
	lease_kg(fx, "g", 2);
	assert_in_range(send_src(fx, SRC_C, 0, 20), 20, 20);
	grant_put(fx, &ka, 1, 200, gen + 3);
	lease_kg(fx, "g", 2);
	assert_in_range(send_src(fx, SRC_C, 0, 200), 130, 130 + hx_slack(1, t0));
	/* A grant of 0 (the key is wanted elsewhere): nothing at all. */
	ka = gkey(cfg.uid, SRC_B);
	grant_put(fx, &ka, 0, 0, gen + 1);
	lease_kg(fx, "g", 3);
	assert_int_equal(send_src(fx, SRC_B, 0, 10), 0);
}

/* The lock-free deny hint works for a granted key (else every packet of a
 * hot key would take the lock): a denial under the lock records it, and
 * the packets after it leave the bucket untouched (a locked denial would
 * move last_ns). A key cut to 0 is refused lock-free too. A grant change
 * voids the hint at once: a grant that refills in nanoseconds admits.
 */
static void test_hint_with_grant(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka, kb;
	struct ll_bucket b1, b2;
	struct timespec ms = {0, 2000000};
	uint32_t gen;

	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	gen = gen_base(fx);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	kb = gkey(cfg.uid, SRC_B);
	grant_put(fx, &ka, 1, 2, gen + 1);
	grant_put(fx, &kb, 0, 0, gen + 2);
	lease_kg(fx, "g", 2);

	assert_int_equal(send_src(fx, SRC_A, 0, 3), 2);
	assert_int_equal(send_src(fx, SRC_B, 0, 1), 0);
	b1 = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_not_equal(b1.deny_hint, 0);
	nanosleep(&ms, NULL);
	assert_int_equal(send_src(fx, SRC_A, 0, 5), 0);
	b2 = bucket_of(fx, cfg.uid, SRC_A);
	assert_int_equal(b2.last_ns, b1.last_ns);
	assert_int_equal(b2.tokens, b1.tokens);

	b1 = bucket_of(fx, cfg.uid, SRC_B);
	assert_int_not_equal(b1.deny_hint, 0);
	nanosleep(&ms, NULL);
	assert_int_equal(send_src(fx, SRC_B, 0, 5), 0);
	b2 = bucket_of(fx, cfg.uid, SRC_B);
	assert_int_equal(b2.last_ns, b1.last_ns);

	/* A's grant now refills in a nanosecond or two: the hint of the old
	 * grant must not refuse for the second it had to go.
	 */
	grant_put(fx, &ka, 1000000000, 5, gen + 3);
	lease_kg(fx, "g", 2);
	/* The first packet copies the grant; it refills from that packet's
	 * clock on, which moves by ticks (bpf/clock.h).
	 */
	int n = send_src(fx, SRC_A, 0, 1);

	hx_clock_catch_up();
	assert_true(n + send_src(fx, SRC_A, 0, 4) >= 3);
}

/* A key of a live global limit denied under the lock lands in ll_hot with
 * its limit id, uid and key; a burst of 1000 denials gives one event (the
 * deny hint and the gate); another key gets its own; an admitted packet
 * none. Granted keys too.
 */
static void test_hot_events(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka, kb, kd;
	uint64_t t0, t1;
	struct pkt p;
	int id;

	assert_non_null(log);
	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	id = hx_limit(fx, "g", &cfg);
	assert_int_equal(share(fx, "g", 1, 1, 5, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	kb = gkey(cfg.uid, SRC_B);
	kd = gkey(cfg.uid, SRC_D);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);

	/* The event is stamped by the coarse clock: at least what it read
	 * before the packet, never more than the precise clock after it.
	 */
	t0 = hx_coarse_ns();
	hx_udp4(&p, SRC_A, DST, 1000, 53, 0);
	assert_int_equal(hx_run(fx, &p, 1000), XDP_DROP);
	t1 = clock_now_ns();
	hot_drain(fx, log);
	assert_int_equal(hot_count(log, &ka), log->n);
	assert_in_range(log->n, 1, 3);
	assert_int_equal(log->ev[0].limit_id, id);
	assert_int_equal(log->ev[0].limit_uid, cfg.uid);
	assert_in_range(log->ev[0].ns, t0, t1);
	assert_int_equal(log->ev[0].key.family, 4);
	/* Past the gate's interval, packets the deny hint refuses (the bucket
	 * pays again only a second after the denial) raise none.
	 */
	usleep(150000);
	assert_int_equal(hx_run(fx, &p, 100), XDP_DROP);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);

	assert_int_equal(send_src(fx, SRC_B, 0, 10), 5);
	hot_drain(fx, log);
	assert_in_range(hot_count(log, &kb), 1, 3);
	assert_int_equal(hot_count(log, &kb), log->n);

	/* Admitted: no event. */
	assert_int_equal(send_src(fx, SRC_C, 0, 1), 1);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);

	/* A key denied under its per-key grant. */
	grant_put(fx, &kd, 1, 2, gen_base(fx));
	lease_kg(fx, "g", 1);
	assert_int_equal(send_src(fx, SRC_D, 0, 4), 2);
	hot_drain(fx, log);
	assert_int_equal(hot_count(log, &kd), 1);
	assert_int_equal(log->n, 1);

	/* Dead lease (fail-closed): the denials are on-loss's, not a hot key's. */
	assert_int_equal(share(fx, "g", 2, 1, 5, clock_now_ns() - 1), 0);
	assert_int_equal(send_src(fx, SRC_C, 0, 20), 0);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);
	free(log);
}

/* The gate: 1000 denials that each take the lock (bytes mode, every frame
 * shorter than the one before, so no deny hint covers the next) give at
 * most one event per 100 ms on this CPU, not 1000.
 */
static void test_hot_gate(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka;
	struct ll_limit_stats st;
	uint64_t t0, ms;
	int passed = 0;

	assert_non_null(log);
	assert_int_equal(apply_g(fx, "src-ip", ", unit: bytes, on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	pin_cpu();
	t0 = clock_now_ns();
	for (int i = 0; i < 1000; i++)
		passed += send_src(fx, SRC_A, 1100 - (size_t)i, 1);
	ms = (clock_now_ns() - t0) / 1000000;
	unpin_cpu();
	assert_int_equal(passed, 0);
	st = hx_stats_of(fx, "g");
	assert_int_equal(st.denied_pkts, 1000);
	hot_drain(fx, log);
	assert_int_equal(hot_count(log, &ka), log->n);
	assert_in_range(log->n, 1, 1 + ms / 100);
	free(log);
}

/* A shadow limit drops nothing, but a key it would deny is as hot: its
 * denial under the lock is reported all the same.
 */
static void test_hot_shadow(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	struct ll_limit_cfg cfg;
	struct ll_flow_key ka;

	assert_non_null(log);
	assert_int_equal(apply_g(fx, "src-ip", ", mode: shadow, on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	assert_int_equal(share(fx, "g", 1, 1, 2, FAR_FUTURE), 0);
	ka = gkey(cfg.uid, SRC_A);
	assert_int_equal(send_src(fx, SRC_A, 0, 10), 10);
	assert_int_equal(hx_stats_of(fx, "g").shadow_denied_pkts, 8);
	hot_drain(fx, log);
	assert_in_range(hot_count(log, &ka), 1, 3);
	assert_int_equal(hot_count(log, &ka), log->n);
	free(log);
}

/* Local per-key limits and the fallback share raise no hot events. */
static void test_hot_local_none(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));

	assert_non_null(log);
	assert_int_equal(hx_applyf_global(fx, "version: 1\nlimits:\n"
				   "  - {name: l, key: src-ip, rate: 1, burst: 2}\n"
				   "rules:\n  - {name: all, limits: [l]}\n"),
			 0);
	assert_int_equal(send_src(fx, SRC_A, 0, 10), 2);
	assert_int_equal(send_src(fx, SRC_B, 200, 10), 2);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);

	assert_int_equal(hx_applyf_global(fx,
			       "version: 2\nlimits:\n"
			       "  - {name: g, key: src-ip, scope: global, rate: 1000, burst: 1000, "
			       "on-loss: fallback, fallback: {rate: 1, burst: 2}}\n"
			       "rules:\n  - {name: all, limits: [g]}\n"),
			 0);
	assert_int_equal(send_src(fx, SRC_A, 0, 10), 2);
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);
	free(log);
}

/* One rule: a per-key global limit (the key has a grant), a global key-none
 * aggregate and a local per-key limit. When the local limit denies, the
 * granted bucket gets its tokens and its spent back exactly.
 */
static void test_mixed_rule_refunds_grant(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	struct ll_limit_cfg cpk;
	struct ll_flow_key ka;
	struct ll_bucket b;
	uint32_t gen;

	assert_non_null(log);
	assert_int_equal(
	    hx_applyf_global(fx, "version: 1\nlimits:\n"
		      "  - {name: pk, key: src-ip, scope: global, rate: 1000, burst: 100}\n"
		      "  - {name: agg, key: none, scope: global, rate: 1000, burst: 100}\n"
		      "  - {name: loc, key: src-ip, rate: 1, burst: 3}\n"
		      "rules:\n  - {name: all, limits: [pk, agg, loc]}\n"),
	    0);
	hx_limit(fx, "pk", &cpk);
	gen = gen_base(fx);
	/* Rate 0 everywhere that is counted: exact token counts. */
	assert_int_equal(share(fx, "pk", 1, 0, 10, FAR_FUTURE), 0);
	assert_int_equal(share(fx, "agg", 1, 1000000000, 100, FAR_FUTURE), 0);
	ka = gkey(cpk.uid, SRC_A);
	grant_put(fx, &ka, 0, 20, gen);
	lease_kg(fx, "pk", 1);

	assert_int_equal(send_src(fx, SRC_A, 0, 6), 3);
	assert_int_equal(hx_stats_of(fx, "loc").denied_pkts, 3);
	assert_int_equal(hx_stats_of(fx, "pk").allowed_pkts, 3);
	b = bucket_of(fx, cpk.uid, SRC_A);
	assert_int_equal(b.o_gen, gen);
	assert_int_equal(b.tokens, (20 - 3) * TB_SCALE);
	assert_int_equal(b.spent, 3);
	/* A refund is no denial of pk's: no hot event. */
	hot_drain(fx, log);
	assert_int_equal(log->n, 0);
	free(log);
}

/* key: flow with a per-key grant: the granted flow spends its grant, a flow
 * differing only in its source port the share; its hot event carries the
 * whole 5-tuple.
 */
static void test_flow_key_grant(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_flow_key fk;
	struct ll_bucket b;
	struct pkt p, q;
	uint32_t gen;

	assert_non_null(log);
	assert_int_equal(apply_g(fx, "flow", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	gen = gen_base(fx);
	assert_int_equal(share(fx, "g", 1, 1, 100, FAR_FUTURE), 0);
	memset(&fk, 0, sizeof(fk));
	fk.limit_uid = cfg.uid;
	fk.family = 4;
	fk.proto = IPPROTO_UDP;
	fk.sport = htons(1000);
	fk.dport = htons(53);
	hx_v4_mapped(fk.addr, SRC_A, 32);
	hx_v4_mapped(fk.addr2, DST, 32);
	grant_put(fx, &fk, 1, 4, gen);
	lease_kg(fx, "g", 1);
	hot_drain(fx, log);

	hx_udp4(&p, SRC_A, DST, 1000, 53, 0);
	hx_udp4(&q, SRC_A, DST, 1001, 53, 0);
	assert_in_range(hx_send(fx, &p, 10, NULL), 4, 4 + hx_slack(1, t0));
	assert_int_equal(hx_send(fx, &q, 10, NULL), 10);
	assert_int_equal(hx_flow_bucket(fx, &fk, &b), 0);
	assert_int_equal(b.o_gen, gen);
	assert_int_equal(b.o_burst_s, 4 * TB_SCALE);
	hot_drain(fx, log);
	assert_in_range(hot_count(log, &fk), 1, 3);
	assert_int_equal(hot_count(log, &fk), log->n);
	assert_int_equal(log->ev[0].key.sport, htons(1000));
	free(log);
}

/* Key-table pressure: a new key with a grant is charged to its prefix's
 * fallback bucket, which is no key: it takes no key's grant (the share's
 * burst, not the grant's) and a denial there raises no hot event. The key
 * that graduates takes its grant on its next packet without a deposit.
 */
static void test_fallback_takes_no_grant(void **state)
{
	struct fx *fx = FX(state);
	struct hot_log *log = calloc(1, sizeof(*log));
	uint64_t t0 = clock_now_ns();
	struct ll_limit_cfg cfg;
	struct ll_flow_key kx, ky;
	struct ll_key kp;
	struct ll_bucket b;
	uint32_t gen;

	assert_non_null(log);
	assert_int_equal(apply_g(fx, "src-ip", ", on-loss: fail-closed"), 0);
	hx_limit(fx, "g", &cfg);
	assert_int_equal(share(fx, "g", 1, 1, 2, FAR_FUTURE), 0);
	kx = gkey(cfg.uid, "198.18.9.9");
	ky = gkey(cfg.uid, "198.18.9.10");
	gen = gen_base(fx);
	grant_put(fx, &kx, 1, 50, gen);
	lease_kg(fx, "g", 1);
	hx_pressure(fx, LL_FILL_KEYS, 1);
	hot_drain(fx, log);
	/* The prefix's share burst (2): one packet, the other token leaves with
	 * the key, whose bucket then takes the grant (burst 50) clamped: 2 in all.
	 */
	assert_in_range(send_src(fx, "198.18.9.9", 0, 10), 2, 2 + hx_slack(1, t0));
	assert_int_equal(hx_stats_of(fx, "g").prefix_pkts, 1);
	assert_int_equal(hx_stats_of(fx, "g").graduated, 1);
	{
		struct ll_key k = hx_key_addr(cfg.uid, 4, "198.18.9.9", 32);

		assert_int_equal(hx_bucket(fx, &k, &b), 0);
		assert_int_equal(b.o_gen, gen);
		assert_int_equal(b.o_burst_s, 50 * TB_SCALE);
	}
	kp = hx_key_addr(cfg.uid, 4, "198.18.9.0", 24);
	assert_int_equal(hx_prefix_bucket(fx, &kp, &b), 0);
	assert_int_equal(b.o_gen, 0);
	assert_in_range(b.tokens, 0, hx_refill_max(1, t0, b.last_ns));
	/* A neighbour finds the prefix drained: denied there, and not hot. */
	hot_drain(fx, log);
	assert_in_range(send_src(fx, "198.18.9.10", 0, 5), 0, hx_slack(1, t0));
	hot_drain(fx, log);
	assert_int_equal(hot_count(log, &ky), 0);
	assert_int_equal(hx_stats_of(fx, "g").prefix_pkts, 6);
	free(log);
}

/* spent: packets admitted in packets mode, bytes in bytes mode, local and
 * global; a rollback (a later limit of the rule denies) gives it back.
 */
static void test_spent(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg cb, cp, cg;
	struct ll_bucket b;
	struct pkt p;

	assert_int_equal(hx_applyf_global(fx,
			       "version: 1\nlimits:\n"
			       "  - {name: gb, key: src-ip, scope: global, unit: bytes, "
			       "rate: 100000, burst: 100000}\n"
			       "  - {name: lb, key: src-ip, unit: bytes, rate: 1, burst: 100000}\n"
			       "  - {name: lp, key: src-ip, rate: 1, burst: 4}\n"
			       "rules:\n  - {name: all, limits: [gb, lb, lp]}\n"),
			 0);
	hx_limit(fx, "gb", &cg);
	hx_limit(fx, "lb", &cb);
	hx_limit(fx, "lp", &cp);
	assert_int_equal(share(fx, "gb", 1, 1, 50000, FAR_FUTURE), 0);
	hx_udp4(&p, SRC_A, DST, 1000, 53, 100);
	/* 4 admitted, then lp denies and gb and lb give their debits back. */
	assert_int_equal(hx_send(fx, &p, 6, NULL), 4);
	assert_int_equal(hx_stats_of(fx, "lp").denied_pkts, 2);
	b = bucket_of(fx, cg.uid, SRC_A);
	assert_int_equal(b.spent, 4 * p.len);
	b = bucket_of(fx, cb.uid, SRC_A);
	assert_int_equal(b.spent, 4 * p.len);
	b = bucket_of(fx, cp.uid, SRC_A);
	assert_int_equal(b.spent, 4);
	/* Without the refunds: 5 * len in gb and lb. */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_grant_vs_share, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_grant_removed, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_grant_expires_with_lease, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_new_bucket_starts_at_grant, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_hint_with_grant, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_hot_events, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_hot_gate, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_hot_shadow, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_hot_local_none, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_mixed_rule_refunds_grant, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_flow_key_grant, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_fallback_takes_no_grant, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_spent, hx_setup, hx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
