/* SPDX-License-Identifier: MIT */
/*
 * What the datapath tests share: a fresh, unpinned datapath per test, a
 * policy applied from YAML text, frames run through bpf_prog_test_run_opts,
 * and the maps read back summed over CPUs. Include after <cmocka.h>.
 * Tests that need root or BPF skip, they do not fail, when the datapath
 * cannot be loaded for lack of privilege. The code is in harness.c (and
 * pkt.c), compiled once into the test archive every BPF test links;
 * one-line helpers stay here.
 */
#ifndef LEASELINE_TESTS_HARNESS_H
#define LEASELINE_TESTS_HARNESS_H

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "agent/dp.h"
#include "leaseline.skel.h"
#include "lib/log.h"
#include "agent/policy.h"
#include "tb_math.h"
#include "bpf/pkt.h"

/* Buckets per test: room for every key a test makes, small enough to load fast. */
#define HX_MAX_KEYS 4096
/* Metadata the kernel lets a test put before the frame (xdp_metalen_invalid). */
#define HX_MAX_META 32
/* Policy text built with printf. */
#define HX_YAML_LEN 4096

struct fx {
	struct dp dp;
	unsigned int ncpus;
};

/* An unpinned datapath: unpin whatever the load pinned all the same, so the
 * next test's load does not re-adopt this one's state.
 */
void hx_unpin_all(struct dp *dp);

/* dp_open with stderr (libbpf's messages, the verifier log, dp's own
 * warning) held back: replayed if the load fails for any reason but
 * privilege, so a verifier log is never swallowed, and dropped otherwise.
 */
int hx_dp_open_quiet(struct dp *dp, const struct dp_opts *o);

/* A fresh datapath whose ll_buckets holds max_keys buckets. */
int hx_setup_keys(void **state, uint32_t max_keys);

static inline int hx_setup(void **state)
{
	return hx_setup_keys(state, HX_MAX_KEYS);
}

int hx_teardown(void **state);

/* The fixture, or skip the test when the datapath could not be loaded. */
#define FX(state)                                                                                  \
	({                                                                                         \
		struct fx *fx_ = *(state);                                                         \
		if (!fx_)                                                                          \
			skip();                                                                    \
		fx_;                                                                               \
	})

/* Parse a YAML policy (reference §4) and make it live; coordinated: global
 * limits allowed (as the coordinator's policy), else as a standalone
 * agent's file. Returns 0 or a negative errno.
 */
int hx_apply_as(struct fx *fx, const char *yaml, bool coordinated);

static inline int hx_apply(struct fx *fx, const char *yaml)
{
	return hx_apply_as(fx, yaml, false);
}

int __attribute__((format(printf, 2, 3)))
hx_applyf(struct fx *fx, const char *fmt, ...);

/* The same with global limits allowed (a coordinator's policy). */
int __attribute__((format(printf, 2, 3)))
hx_applyf_global(struct fx *fx, const char *fmt, ...);

/* Run frame p `repeat` times; returns the verdict of the last run or a
 * negative errno. A frame shorter than an Ethernet header goes in after
 * metadata so that data_size_in is >= ETH_HLEN and the program would see
 * exactly p->len bytes; kernels that check the frame itself (6.18 does)
 * refuse it with -EINVAL all the same.
 */
int hx_run_fd(int prog_fd, const uint8_t *frame, size_t len, uint32_t repeat);

static inline int hx_run(struct fx *fx, const struct pkt *p, uint32_t repeat)
{
	return hx_run_fd(fx->dp.prog_fd, p->buf, p->len, repeat);
}

/* Send p n times, one run each; returns how many passed (-1 on a run error).
 * verdicts, if given, receives each verdict.
 */
int hx_send(struct fx *fx, const struct pkt *p, int n, int *verdicts);

/* Per-CPU array entry summed over CPUs, read as u64 counters (size <= 128). */
int hx_percpu_sum(int fd, uint32_t key, unsigned int ncpus, size_t size, void *out);

struct ll_limit_stats hx_limit_stats(struct fx *fx, int id);

struct ll_rule_stats hx_rule_stats(struct fx *fx, uint32_t idx);

void hx_parse_stats(struct fx *fx, uint64_t out[LL_PARSE_MAX]);

/* The live policy's view of limit `name`; returns its id. */
int hx_limit(struct fx *fx, const char *name, struct ll_limit_cfg *cfg);

int hx_limit_id(struct fx *fx, const char *name);

static inline struct ll_limit_stats hx_stats_of(struct fx *fx, const char *name)
{
	return hx_limit_stats(fx, hx_limit_id(fx, name));
}

/* Bucket keys as the datapath builds them (see bpf/bucket.h key_build). */
void hx_v4_mapped(uint32_t a[4], const char *ip, uint8_t plen);

struct ll_key hx_key_addr(uint32_t uid, int family, const char *ip, uint8_t plen);

/* How the harness reads and writes a bucket: under its lock, except in the
 * LL_RES_LOCK experiment, whose maps refuse BPF_F_LOCK (bpf_prog_test_run
 * is synchronous, so the harness's own unlocked copy is never torn).
 */
#ifdef LL_RES_LOCK
#define HX_BUCKET_LOCK 0
#else
#define HX_BUCKET_LOCK BPF_F_LOCK
#endif

/* 0 and the bucket (read under its lock), or -ENOENT. */
int hx_bucket(struct fx *fx, const struct ll_key *k, struct ll_bucket *b);

/* The same for a flow key, in ll_flow_buckets. */
int hx_flow_bucket(struct fx *fx, const struct ll_flow_key *k, struct ll_bucket *b);

/* Buckets of limit uid in one bucket map (overflow bucket excluded). */
int hx_count_in(int fd, uint32_t uid);

/* Buckets of limit uid in either map (overflow bucket excluded). */
static inline int hx_count_buckets(struct fx *fx, uint32_t uid)
{
	return hx_count_in(fx->dp.buckets_fd, uid) + hx_count_in(fx->dp.flow_buckets_fd, uid);
}

/* Put bucket map `which` (enum ll_fill_map) under pressure from `mark`
 * buckets on (1: at once, the limit's overflow bucket counting; 0: never).
 */
static inline void hx_pressure(struct fx *fx, unsigned int which, uint64_t mark)
{
	__atomic_store_n(&fx->dp.fill[which].mark, mark, __ATOMIC_RELAXED);
}

/* What ll_fill says of bucket map `which` now. */
static inline struct ll_fill hx_fill(struct fx *fx, unsigned int which)
{
	struct ll_fill f;

	memcpy(&f, &fx->dp.fill[which], sizeof(f));
	return f;
}

/* A fallback bucket in ll_prefix_buckets (key as prefix_key_build makes it). */
int hx_prefix_bucket(struct fx *fx, const struct ll_key *k, struct ll_bucket *b);

/* Key none: the shared pool and what every CPU's slice holds for generation gen. */
struct hx_pool {
	struct ll_pool pool;
	uint64_t slices;    /* Σ slice tokens of generation gen */
	uint64_t slice_max; /* the largest one */
};

struct hx_pool hx_pool(struct fx *fx, int id, uint32_t gen);

/* Sub-tokens a bucket of `rate` can gain in dt ns: the most any refill adds. */
static inline uint64_t hx_refill_max(uint64_t rate, uint64_t from_ns, uint64_t to_ns)
{
	return to_ns > from_ns ? rate * (to_ns - from_ns) : 0;
}

/* Whole tokens that may have refilled since t0: the slack on an exact count. */
static inline uint64_t hx_slack(uint64_t rate, uint64_t t0_ns)
{
	return hx_refill_max(rate, t0_ns, clock_now_ns()) / TB_SCALE;
}

/* The datapath's clock (bpf_ktime_get_coarse_ns, bpf/clock.h): what
 * CLOCK_MONOTONIC_COARSE reads in userspace, the same timekeeper's value.
 */
static inline uint64_t hx_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait (a tick at most, bounded) until the datapath's clock has passed what
 * CLOCK_MONOTONIC reads now: state the test wrote at clock_now_ns() (a grant's
 * reload instant, a bucket's last_ns) is then in the packet's past, as it is
 * for a real packet a tick later. The lag itself is bpf/clock.h's (up to
 * LL_COARSE_SLACK_NS); test_lease.c (expiry_on_lagging_clock) and
 * test_datapath.c (test_reap_full_by_lagging_clock) test that it admits
 * nothing.
 */
void hx_clock_catch_up(void);

/* Run the rest of a test on the CPU it is on (per-CPU state: the rule
 * pre-pass flag, slices, gates), and let it go again.
 */
void hx_pin_cpu(void);

void hx_unpin_cpu(void);

/* Frames the limit tests send. */
void hx_udp4(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport,
	     size_t payload);

void hx_tcp4(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport);

void hx_udp6(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport);

void hx_tcp6(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport);

#endif /* LEASELINE_TESTS_HARNESS_H */
