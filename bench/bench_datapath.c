// SPDX-License-Identifier: MIT
/*
 * Datapath benchmark: nanoseconds per packet of the leaseline XDP program and
 * of the XDP_PASS baseline with the same parser, through bpf_prog_test_run_opts
 * in one process. Prints figures and ratios, asserts nothing; exits 0, or 1
 * when it cannot run at all (not root, BPF object does not load).
 * LL_BENCH_QUICK=1 runs a shorter version, LL_BENCH_SINGLE=1 the one-key table
 * only, LL_BENCH_CLOCK=precise charges against bpf_ktime_get_ns (bpf/clock.h),
 * LL_BENCH_REF_CLOCK=coarse times the reference limiter with the coarse clock, as
 * leaseline (reflim.bpf.c, ref_coarse). docs/benchmarks.md explains the method.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <sys/utsname.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "csum.h"
#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "agent/link.h"
#include "lib/log.h"
#include "pass.skel.h"
#include "reflim.skel.h"
#include "lockcost.skel.h"
#include "xdpcount.skel.h"
#include "agent/policy.h"
#include "tb_math.h"
#include "lib/units.h"

/* Issue requirement: at least 5 * 10^6 packets per measurement, best of 5. */
#define REPEAT_FULL  5000000u
#define REPEAT_QUICK 1000000u
#define RUNS_FULL    5
#define RUNS_QUICK   3
/* Many-key rows: one-packet test_run calls per run. */
#define CALLS_FULL  100000u
#define CALLS_QUICK 40000u
/* ll_buckets size for every scenario: room for the 1M-key run at load 0.5. */
#define BENCH_MAX_KEYS	(2u << 20)
#define MANY_KEYS_MAX	(1u << 20)
#define FRAME_LEN	64
#define FRAME_SADDR_OFF (ETH_HLEN + 12)	    /* iphdr.saddr */
#define FRAME_DPORT_OFF (ETH_HLEN + 20 + 2) /* udphdr.dest */
#define DNS_PORT	53
/* 10.0.0.0/8 gives room for 2^20 distinct /32 sources. The frames only ever
 * reach bpf_prog_test_run: no packet is sent anywhere.
 */
#define KEY_NET	     0x0a000000u
#define SINGLE_SADDR 0xc6120001u /* 198.18.0.1 */
#define DADDR	     0xc6130001u /* 198.19.0.1 */
/* Refill path: every packet finds tokens. Drop path: the bucket never has one. */
#define RATE_HUGE  10000000000ull
#define BURST_HUGE 1000000000ull
/* Many-key drop path in bytes: a drained 64-byte bucket at 1 B/s stays empty
 * for 64 s, so a key sampled again seconds later is still dropped (at 1
 * packet/s every key not hit in the last second would be admitted again).
 */
#define DROP_BYTES_BURST FRAME_LEN

/* Tiny programs built in place from raw instructions (raw_prog_load). */
enum raw_prog {
	RAW_EMPTY,   /* r0 = XDP_PASS: the test_run harness floor */
	RAW_CLOCK,   /* bpf_ktime_get_ns(), then pass */
	RAW_COARSE,  /* bpf_ktime_get_coarse_ns(), then pass */
	RAW_JIFFIES, /* bpf_jiffies64(), then pass */
	RAW_CALLS,   /* four BPF-to-BPF calls of an empty subprogram */
	RAW_HELPERS, /* four calls of a cheap helper, bpf_get_prandom_u32 */
	RAW_MAX,
};

struct bench {
	struct dp dp;
	struct pass_bpf *pass;
	struct reflim_bpf *ref;	  /* the reference limiter of issue #14 */
	struct lockcost_bpf *lc;  /* lock pricing (NULL: no bpf_res_spin_lock here) */
	struct xdpcount_bpf *cnt; /* counting XDP_DROP */
	int pass_fd, raw_fd[RAW_MAX];
	uint32_t repeat, runs, calls;
	uint64_t version;
	unsigned int scen;
	unsigned int ncpus;
};

/* One measurement, best of runs: ns per packet as the kernel's test_run
 * timer reports it (opts.duration), and the share of packets the limiter
 * dropped (-1 when not applicable).
 */
struct meas {
	double ns;
	double drop_pct;
};

/* 64-byte Ethernet/IPv4/UDP frame to DADDR:53 from saddr (host order). */
static void frame_build(uint8_t *f, uint32_t saddr)
{
	struct ethhdr *eth = (struct ethhdr *)f;
	struct iphdr *ip = (struct iphdr *)(eth + 1);
	struct udphdr *udp = (struct udphdr *)(ip + 1);

	memset(f, 0, FRAME_LEN);
	memcpy(eth->h_dest, "\x02\x00\x00\x00\x00\x02", ETH_ALEN);
	memcpy(eth->h_source, "\x02\x00\x00\x00\x00\x01", ETH_ALEN);
	eth->h_proto = htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(FRAME_LEN - ETH_HLEN);
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = htonl(saddr);
	ip->daddr = htonl(DADDR);
	ip->check = (uint16_t)~csum_partial16(ip, sizeof(*ip));
	udp->source = htons(40000);
	udp->dest = htons(DNS_PORT);
	udp->len = htons(FRAME_LEN - ETH_HLEN - sizeof(*ip));
}

/* The limiter does not verify checksums; rotating sources skip the update. */
static void frame_set_saddr(uint8_t *f, uint32_t saddr)
{
	uint32_t be = htonl(saddr);

	memcpy(f + FRAME_SADDR_OFF, &be, sizeof(be));
}

/* One bpf_prog_test_run: *dur is the kernel's mean ns per packet, integer,
 * timed around the program loop only (not the syscall, not the XDP
 * dispatcher update that test_run does around a repeated run).
 */
static int test_run(int fd, uint8_t *frame, uint32_t repeat, uint32_t *dur)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame, .data_size_in = FRAME_LEN,
		    .repeat = repeat);

	if (bpf_prog_test_run_opts(fd, &o))
		return -errno;
	*dur = o.duration;
	return 0;
}

/* Packets that matched the benchmark rule, and of those dropped, all CPUs. */
static void rule_counts(struct bench *b, uint64_t *matched, uint64_t *dropped)
{
	struct ll_rule_stats rs[b->ncpus];
	__u32 k = 0;

	*matched = *dropped = 0;
	if (bpf_map_lookup_elem(b->dp.rule_stats_fd, &k, rs))
		return;
	for (unsigned int c = 0; c < b->ncpus; c++) {
		*matched += rs[c].matched_pkts;
		*dropped += rs[c].dropped_pkts;
	}
}

static double drop_pct(struct bench *b, uint64_t m0, uint64_t d0)
{
	uint64_t m1, d1;

	rule_counts(b, &m1, &d1);
	return m1 > m0 ? 100.0 * (double)(d1 - d0) / (double)(m1 - m0) : -1;
}

/* Same frame, b->repeat packets in one call, best of b->runs. */
static int measure(struct bench *b, int fd, uint8_t *frame, int limiter, struct meas *m)
{
	uint64_t m0 = 0, d0 = 0;

	m->ns = 1e30;
	m->drop_pct = -1;
	rule_counts(b, &m0, &d0);
	for (uint32_t r = 0; r < b->runs; r++) {
		uint32_t dur = 0;
		int err = test_run(fd, frame, b->repeat, &dur);

		if (err)
			return err;
		if (dur < m->ns)
			m->ns = dur;
	}
	if (limiter)
		m->drop_pct = drop_pct(b, m0, d0);
	return 0;
}

/* Many keys: one packet per test_run call, and each call's frame carries the
 * next source drawn uniformly (xorshift, fixed seed) from KEY_NET+1..n_keys,
 * so the key changes every packet; n_keys 0: a source never seen before, so
 * every packet creates a bucket. The kernel times each call's single run
 * (integer ns); mean over b->calls calls, best of b->runs. Nothing subtracted.
 */
static int measure_keys(struct bench *b, int fd, uint32_t n_keys, int limiter, struct meas *m)
{
	uint64_t m0 = 0, d0 = 0, x = 88172645463325252ull;
	uint8_t frame[FRAME_LEN];
	uint32_t fresh = 0;

	frame_build(frame, KEY_NET + 1);
	m->ns = 1e30;
	m->drop_pct = -1;
	rule_counts(b, &m0, &d0);
	for (uint32_t r = 0; r < b->runs; r++) {
		uint64_t sum = 0;

		for (uint32_t i = 0; i < b->calls; i++) {
			uint32_t dur = 0;
			int err;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			frame_set_saddr(frame,
					KEY_NET + 1 + (n_keys ? (uint32_t)(x % n_keys) : fresh++));
			err = test_run(fd, frame, 1, &dur);
			if (err)
				return err;
			sum += dur;
		}
		if ((double)sum / b->calls < m->ns)
			m->ns = (double)sum / b->calls;
	}
	if (limiter)
		m->drop_pct = drop_pct(b, m0, d0);
	return 0;
}

struct thr {
	int cpu, fd, err;
	uint32_t repeat;
	uint8_t frame[FRAME_LEN];
	pthread_barrier_t *bar;
	uint32_t dur;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(t->cpu, &set);
	t->err = -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	pthread_barrier_wait(t->bar);
	if (!t->err)
		t->err = test_run(t->fd, t->frame, t->repeat, &t->dur);
	return NULL;
}

/* n_thr threads pinned to CPUs 0..n_thr-1 run the same frame at once, each
 * b->repeat packets. Per-packet cost: the threads' kernel durations averaged;
 * best of b->runs.
 */
static int measure_threads(struct bench *b, int fd, const uint8_t *frame, int n_thr, struct meas *m)
{
	uint64_t m0 = 0, d0 = 0;

	m->ns = 1e30;
	rule_counts(b, &m0, &d0);
	for (uint32_t r = 0; r < b->runs; r++) {
		struct thr t[2];
		pthread_t tid[2];
		pthread_barrier_t bar;
		double ns = 0;
		int err = 0;

		pthread_barrier_init(&bar, NULL, n_thr);
		for (int i = 0; i < n_thr; i++) {
			t[i] = (struct thr){.cpu = i, .fd = fd, .repeat = b->repeat, .bar = &bar};
			memcpy(t[i].frame, frame, FRAME_LEN);
			pthread_create(&tid[i], NULL, thr_main, &t[i]);
		}
		for (int i = 0; i < n_thr; i++) {
			pthread_join(tid[i], NULL);
			if (t[i].err)
				err = t[i].err;
			ns += (double)t[i].dur / n_thr;
		}
		pthread_barrier_destroy(&bar);
		if (err)
			return err;
		if (ns < m->ns)
			m->ns = ns;
	}
	m->drop_pct = drop_pct(b, m0, d0);
	return 0;
}

/* ---- policies ---- */

struct lim_spec {
	uint8_t key_mode;
	uint8_t prefix_v4;
	uint8_t unit;
	uint8_t scope;
	uint64_t rate, burst;
	const char *overrides; /* a file of per-key overrides, or NULL */
};

/* clang-format off */
#define REFILL(km, plen) \
	{.key_mode = (km), .prefix_v4 = (plen), .rate = RATE_HUGE, .burst = BURST_HUGE}
#define DROP(km, plen)   {.key_mode = (km), .prefix_v4 = (plen), .rate = 1, .burst = 1}
#define DROP_BYTES(km) \
	{.key_mode = (km), .prefix_v4 = 32, .unit = LL_UNIT_BYTES, .rate = 1, .burst = DROP_BYTES_BURST}
/* clang-format on */

/* One rule (UDP to port 53, any address) charging the n limits, made live
 * through policy_apply. Fresh limit names each time, so every scenario
 * starts from new buckets and pools. *first receives the first limit as
 * compiled (uid, gen, mask), to key pre-created buckets.
 */
static int policy_set(struct bench *b, int n, const struct lim_spec *ls, struct ll_limit_cfg *first)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct cfg_rule *r;
	char err[256] = "";
	int ret = -ENOMEM, id;

	if (!cp || !pol)
		goto out;
	b->scen++;
	cp->version = ++b->version;
	cp->default_action = LL_ACT_PASS;
	cp->n_limits = n;
	for (int i = 0; i < n; i++) {
		struct cfg_limit *l = &cp->limits[i];

		snprintf(l->name, sizeof(l->name), "bench%u-%d", b->scen, i);
		l->key_mode = ls[i].key_mode;
		l->prefix_v4 = ls[i].prefix_v4 ? ls[i].prefix_v4 : 32;
		l->prefix_v6 = 128;
		l->unit = ls[i].unit;
		l->rate = ls[i].rate;
		l->burst = ls[i].burst;
		l->scope = ls[i].scope;
		if (ls[i].overrides)
			snprintf(l->overrides, sizeof(l->overrides), "%s", ls[i].overrides);
	}
	cp->n_rules = 1;
	r = &cp->rules[0];
	snprintf(r->name, sizeof(r->name), "dns");
	r->proto = IPPROTO_UDP;
	r->has_dport = true;
	r->n_dport = 1;
	r->dport[0].lo = r->dport[0].hi = DNS_PORT;
	r->n_limits = n;
	for (int i = 0; i < n; i++)
		r->limit[i] = i;
	ret = policy_apply(&b->dp, cp, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench: cannot apply the policy: %s\n", err);
		goto out;
	}
	ret = dp_policy_read(b->dp.policy_fd, b->dp.state_fd, pol);
	if (ret)
		goto out;
	id = policy_limit_id(pol, cp->limits[0].name);
	if (id < 0) {
		ret = -ENOENT;
		goto out;
	}
	if (first)
		*first = pol->limits[id];
out:
	free(cp);
	free(pol);
	return ret;
}

/* Remove every bucket (earlier scenarios' keys would load the table). */
static int buckets_clear(struct bench *b)
{
	enum { BATCH = 8192 };
	struct ll_key *keys = calloc(BATCH, sizeof(*keys)), first;

	if (!keys)
		return -ENOMEM;
	/* Deleting while walking restarts the walk: collect a batch, delete it. */
	while (!bpf_map_get_next_key(b->dp.buckets_fd, NULL, &first)) {
		int n = 0;

		keys[n++] = first;
		while (n < BATCH && !bpf_map_get_next_key(b->dp.buckets_fd, &keys[n - 1], &keys[n]))
			n++;
		for (int i = 0; i < n; i++)
			bpf_map_delete_elem(b->dp.buckets_fd, &keys[i]);
	}
	free(keys);
	return 0;
}

/* Pre-create n buckets of the src-ip limit cfg for sources KEY_NET+1..n,
 * keyed exactly as key_build (bpf/bucket.h) keys an IPv4 source: family 4,
 * v4-mapped address masked by the prefix. full: tokens = burst, else empty.
 */
static int buckets_fill(struct bench *b, const struct ll_limit_cfg *cfg, uint32_t n, int full)
{
	enum { BATCH = 65536 };
	struct ll_key *keys = calloc(BATCH, sizeof(*keys));
	struct ll_bucket *vals = calloc(BATCH, sizeof(*vals));
	uint64_t now = clock_now_ns();
	int ret = 0;

	if (!keys || !vals) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t base = 0; base < n; base += BATCH) {
		uint32_t cnt = n - base < BATCH ? n - base : BATCH;
		LIBBPF_OPTS(bpf_map_batch_opts, o);

		for (uint32_t i = 0; i < cnt; i++) {
			struct ll_key *k = &keys[i];

			memset(k, 0, sizeof(*k));
			k->limit_uid = cfg->uid;
			k->family = 4;
			k->addr[2] = htonl(0x0000ffff);
			k->addr[3] = htonl(KEY_NET + 1 + base + i) & cfg->mask_v4;
			vals[i] = (struct ll_bucket){
			    .gen = cfg->gen, .tokens = full ? cfg->burst_s : 0, .last_ns = now};
		}
		if (bpf_map_update_batch(b->dp.buckets_fd, keys, vals, &cnt, &o)) {
			ret = -errno;
			goto out;
		}
	}
out:
	free(keys);
	free(vals);
	return ret;
}

/* The raw programs, no object file: the harness floor, and what a clock
 * read, a BPF-to-BPF call and a helper call cost on this machine.
 */
/* clang-format off */
#define INSN_CALL(fn) {.code = BPF_JMP | BPF_CALL, .imm = (fn)}
/* imm: offset of the callee from the next instruction */
#define INSN_PSEUDO_CALL(off) {.code = BPF_JMP | BPF_CALL, .src_reg = BPF_PSEUDO_CALL, .imm = (off)}
#define INSN_RET(v) \
	{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = (v)}, \
	{.code = BPF_JMP | BPF_EXIT}
/* clang-format on */

static int raw_prog_load(enum raw_prog which)
{
	static const struct bpf_insn empty[] = {INSN_RET(XDP_PASS)};
	static const struct bpf_insn clock[] = {INSN_CALL(BPF_FUNC_ktime_get_ns),
						INSN_RET(XDP_PASS)};
	static const struct bpf_insn coarse[] = {INSN_CALL(BPF_FUNC_ktime_get_coarse_ns),
						 INSN_RET(XDP_PASS)};
	static const struct bpf_insn jiffies[] = {INSN_CALL(BPF_FUNC_jiffies64),
						  INSN_RET(XDP_PASS)};
	static const struct bpf_insn calls[] = {
	    INSN_PSEUDO_CALL(5), INSN_PSEUDO_CALL(4), INSN_PSEUDO_CALL(3),
	    INSN_PSEUDO_CALL(2), INSN_RET(XDP_PASS),  INSN_RET(0), /* the subprogram */
	};
	static const struct bpf_insn helpers[] = {
	    INSN_CALL(BPF_FUNC_get_prandom_u32),
	    INSN_CALL(BPF_FUNC_get_prandom_u32),
	    INSN_CALL(BPF_FUNC_get_prandom_u32),
	    INSN_CALL(BPF_FUNC_get_prandom_u32),
	    INSN_RET(XDP_PASS),
	};
	static const struct {
		const char *name;
		const struct bpf_insn *insns;
		size_t n;
	} progs[RAW_MAX] = {
	    [RAW_EMPTY] = {"ll_bench_empty", empty, sizeof(empty) / sizeof(empty[0])},
	    [RAW_CLOCK] = {"ll_bench_clock", clock, sizeof(clock) / sizeof(clock[0])},
	    [RAW_COARSE] = {"ll_bench_coarse", coarse, sizeof(coarse) / sizeof(coarse[0])},
	    [RAW_JIFFIES] = {"ll_bench_jiffies", jiffies, sizeof(jiffies) / sizeof(jiffies[0])},
	    [RAW_CALLS] = {"ll_bench_calls", calls, sizeof(calls) / sizeof(calls[0])},
	    [RAW_HELPERS] = {"ll_bench_helpers", helpers, sizeof(helpers) / sizeof(helpers[0])},
	};
	int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, progs[which].name, "Dual MIT/GPL",
			       progs[which].insns, progs[which].n, NULL);

	return fd < 0 ? -errno : fd;
}

/* ---- memory ---- */

static long long fdinfo_memlock(int fd)
{
	char path[64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "memlock: %lld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* memlock of a BPF_F_NO_PREALLOC hash of the same sizes holding `live` keys. */
static long long noprealloc_memlock(const struct bpf_map_info *info, uint32_t live)
{
	LIBBPF_OPTS(bpf_map_create_opts, co, .map_flags = BPF_F_NO_PREALLOC);
	LIBBPF_OPTS(bpf_map_batch_opts, bo);
	struct ll_key *keys = calloc(live, sizeof(*keys));
	struct ll_bucket *vals = calloc(live, sizeof(*vals));
	long long ml = -1;
	__u32 cnt = live;
	int fd = -1;

	if (!keys || !vals || info->key_size != sizeof(*keys) || info->value_size != sizeof(*vals))
		goto out;
	fd = bpf_map_create(BPF_MAP_TYPE_HASH, "ll_np_probe", info->key_size, info->value_size,
			    info->max_entries, &co);
	if (fd < 0)
		goto out;
	for (uint32_t i = 0; i < live; i++) {
		keys[i].family = 4;
		keys[i].addr[3] = htonl(KEY_NET + 1 + i);
	}
	if (!bpf_map_update_batch(fd, keys, vals, &cnt, &bo))
		ml = fdinfo_memlock(fd);
out:
	if (fd >= 0)
		close(fd);
	free(keys);
	free(vals);
	return ml;
}

static void print_memory(struct bench *b, uint32_t live)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info), kv;
	long long ml = fdinfo_memlock(b->dp.buckets_fd), np;

	if (bpf_obj_get_info_by_fd(b->dp.buckets_fd, &info, &len)) {
		printf("  cannot read ll_buckets' info: %s\n", strerror(errno));
		return;
	}
	kv = info.key_size + info.value_size;
	printf("\nMemory of ll_buckets with %u live keys (hash, map_flags 0x%x: %s)\n", live,
	       info.map_flags,
	       info.map_flags & BPF_F_NO_PREALLOC ? "allocated per key" : "preallocated");
	printf("  key %u B + value %u B = %u B per key; max_entries %u\n", info.key_size,
	       info.value_size, kv, info.max_entries);
	if (ml <= 0) {
		printf("  memlock not reported by /proc/self/fdinfo\n");
		return;
	}
	printf("  memlock (fdinfo, what bpftool map show prints) %lld B = %.1f MiB\n", ml,
	       ml / 1048576.0);
	printf("  per slot, memlock / max_entries:  %6.1f B = %.2f x key+value\n",
	       (double)ml / info.max_entries, (double)ml / info.max_entries / kv);
	printf("  per live key, memlock / %u:   %6.1f B = %.2f x key+value\n", live,
	       (double)ml / live, (double)ml / live / kv);
	np = noprealloc_memlock(&info, live);
	if (np > 0)
		printf("  same sizes, BPF_F_NO_PREALLOC, %u keys: %6.1f B per live key = %.2f x "
		       "key+value\n",
		       live, (double)np / live, (double)np / live / kv);
}

/* ---- output ---- */

static double floor_ns; /* harness floor of the current table */
static double base_ns;	/* XDP_PASS of the current table */
/* One packet per call: XDP_PASS's own cost (a few ns) drowns in the
 * harness's per-call noise, so no ratio of net costs is printed.
 */
static int show_net_ratio;

static void table_head(const char *title)
{
	printf("\n%s\n", title);
	printf("  %-52s %7s %6s %6s %6s %8s\n", "case", "ns/pkt", "net", "xPASS", "net x",
	       "dropped");
}

/* net = ns/pkt - harness floor; "net x" = net / net of XDP_PASS. */
static void row(const char *what, const struct meas *m)
{
	double net = m->ns - floor_ns, base_net = base_ns - floor_ns;

	printf("  %-52s %7.1f %6.1f", what, m->ns, net);
	if (base_ns > 0)
		printf(" %6.2f", m->ns / base_ns);
	else
		printf(" %6s", "-");
	if (show_net_ratio && base_net > 0)
		printf(" %6.1f", net / base_net);
	else
		printf(" %6s", "-");
	if (m->drop_pct >= 0)
		printf(" %7.1f%%", m->drop_pct);
	printf("\n");
	fflush(stdout);
}

static void print_header(struct bench *b, int quick)
{
	struct utsname u;
	char model[256] = "?", cs[64] = "?", line[512], date[64], load[64] = "?";
	time_t now = time(NULL);
	FILE *f;
	int stats = -1;

	uname(&u);
	f = fopen("/proc/cpuinfo", "r");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "model name : %255[^\n]", model) == 1)
				break;
		fclose(f);
	}
	f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	if (f) {
		if (fscanf(f, "%63s", cs) != 1)
			snprintf(cs, sizeof(cs), "?");
		fclose(f);
	}
	f = fopen("/proc/sys/kernel/bpf_stats_enabled", "r");
	if (f) {
		if (fscanf(f, "%d", &stats) != 1)
			stats = -1;
		fclose(f);
	}
	f = fopen("/proc/loadavg", "r");
	if (f) {
		if (!fgets(load, sizeof(load), f))
			snprintf(load, sizeof(load), "?");
		load[strcspn(load, "\n")] = 0;
		fclose(f);
	}
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", localtime(&now));
	printf("leaseline datapath benchmark, %s\n", date);
	printf("  kernel %s %s, %ld online CPUs (%s), clocksource %s, loadavg %s\n", u.release,
	       u.machine, sysconf(_SC_NPROCESSORS_ONLN), model, cs, load);
	printf("  %s: %u packets per measurement, best of %u runs; many-key rows %u calls per "
	       "run\n",
	       quick ? "quick (LL_BENCH_QUICK=1)" : "full", b->repeat, b->runs, b->calls);
	printf("  ns/pkt: bpf_prog_test_run_opts duration (kernel-timed loop, integer ns);\n"
	       "  net: minus the harness floor; xPASS, net x: over the XDP_PASS row\n");
	printf("  frame: 64 B Ethernet/IPv4/UDP to port 53; ll_buckets max_entries %u\n",
	       BENCH_MAX_KEYS);
	if (stats > 0)
		printf("  warning: kernel.bpf_stats_enabled=1 adds two clock reads to every run; "
		       "figures are inflated\n");
}

/* ---- the scenarios ---- */

static const struct {
	const char *what;
	int n;
	struct lim_spec l[LL_MAX_RULE_LIMITS];
} single_cases[] = {
    {"limiter src-ip, 1 limit, drop path", 1, {DROP(LL_KEY_SRC_IP, 32)}},
    {"limiter src-ip, 1 limit, refill path", 1, {REFILL(LL_KEY_SRC_IP, 32)}},
    {"limiter none (aggregate), 1 limit, drop path", 1, {DROP(LL_KEY_NONE, 32)}},
    {"limiter none (aggregate), 1 limit, refill path", 1, {REFILL(LL_KEY_NONE, 32)}},
    {"limiter 4 src-ip (/32 /24 /16 /8), refill path",
     4,
     {REFILL(LL_KEY_SRC_IP, 32), REFILL(LL_KEY_SRC_IP, 24), REFILL(LL_KEY_SRC_IP, 16),
      REFILL(LL_KEY_SRC_IP, 8)}},
    {"limiter 4 src-ip, drop path (1st denies)",
     4,
     {DROP(LL_KEY_SRC_IP, 32), REFILL(LL_KEY_SRC_IP, 24), REFILL(LL_KEY_SRC_IP, 16),
      REFILL(LL_KEY_SRC_IP, 8)}},
    {"limiter 4 src-ip, drop path (4th denies)",
     4,
     {REFILL(LL_KEY_SRC_IP, 32), REFILL(LL_KEY_SRC_IP, 24), REFILL(LL_KEY_SRC_IP, 16),
      DROP(LL_KEY_SRC_IP, 8)}},
    {"limiter 4 mixed (src, dst, port, none), refill path",
     4,
     {REFILL(LL_KEY_SRC_IP, 32), REFILL(LL_KEY_DST_IP, 32), REFILL(LL_KEY_DST_PORT, 32),
      REFILL(LL_KEY_NONE, 32)}},
    {"limiter 4 mixed, drop path (none denies)",
     4,
     {REFILL(LL_KEY_SRC_IP, 32), REFILL(LL_KEY_DST_IP, 32), REFILL(LL_KEY_DST_PORT, 32),
      DROP(LL_KEY_NONE, 32)}},
};

static const char *const raw_what[RAW_MAX] = {
    [RAW_CLOCK] = "machine: bpf_ktime_get_ns() once",
    [RAW_COARSE] = "machine: bpf_ktime_get_coarse_ns() once",
    [RAW_JIFFIES] = "machine: bpf_jiffies64() once",
    [RAW_CALLS] = "machine: 4 BPF-to-BPF calls of an empty function",
    [RAW_HELPERS] = "machine: 4 helper calls (bpf_get_prandom_u32)",
};

/* A scratch file's name of this process: two benches at once (two
 * worktrees) must not delete each other's files.
 */
static void bench_tmp(char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "/tmp/leaseline-bench-%s.%d.txt", what, (int)getpid());
}

/* A file of OVR_BENCH_N /32 overrides (10.x.y.z) plus one for the bench's
 * key (198.18.0.1) with (rate, burst). 0 or a negative errno.
 */
#define OVR_BENCH_N 100000
static int ovr_file(const char *path, uint64_t rate, uint64_t burst)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	for (uint32_t i = 0; i < OVR_BENCH_N; i++)
		fprintf(f, "10.%u.%u.%u/32 rate %u burst %u\n", (i >> 16) & 0xff, (i >> 8) & 0xff,
			i & 0xff, 100 + i % 1000, 200 + i % 1000);
	fprintf(f, "198.18.0.1/32 rate %llu burst %llu\n", (unsigned long long)rate,
		(unsigned long long)burst);
	return fclose(f) ? -errno : 0;
}

/* The same 1-limit rows with 100k per-key overrides, the bench's key one of
 * them: an existing key's packets must cost what they cost without (its
 * override was copied into its bucket once). Also how long the policy took
 * to apply (100k trie entries written).
 */
static int bench_overrides(struct bench *b, uint8_t *frame)
{
	char fr[64], fd[64];
	struct lim_spec r[] = {REFILL(LL_KEY_SRC_IP, 32)}, d[] = {DROP(LL_KEY_SRC_IP, 32)};
	struct meas m;
	uint64_t t0, t1;
	int err;

	bench_tmp(fr, sizeof(fr), "ovr-refill");
	bench_tmp(fd, sizeof(fd), "ovr-drop");
	if ((err = ovr_file(fr, RATE_HUGE, BURST_HUGE)) || (err = ovr_file(fd, 1, 1)))
		return err;
	r[0].overrides = fr;
	d[0].overrides = fd;
	t0 = clock_now_ns();
	err = policy_set(b, 1, d, NULL);
	t1 = clock_now_ns();
	if (!err)
		err = measure(b, b->dp.prog_fd, frame, 1, &m);
	if (!err) {
		row("limiter src-ip, 1 limit, 100k overrides, drop path", &m);
		err = policy_set(b, 1, r, NULL);
	}
	if (!err)
		err = measure(b, b->dp.prog_fd, frame, 1, &m);
	if (!err)
		row("limiter src-ip, 1 limit, 100k overrides, refill path", &m);
	printf("  (a policy with %d overrides applied in %.1f ms: file read, checked, trie "
	       "written)\n",
	       OVR_BENCH_N + 1, (double)(t1 - t0) / 1e6);
	/* Back to no overrides, so later scenarios pay nothing for them. */
	if (!err)
		err = policy_set(b, 1, d, NULL);
	unlink(fr);
	unlink(fd);
	return err;
}


static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define OVR_AB_REPS 7
/* LL_BENCH_ONLY=overrides: what an existing key pays for 100k overrides,
 * interleaved: each repetition measures the drop and refill paths with and
 * without the override file, in an order that rotates, so drift on a noisy
 * machine falls on both sides. Prints medians and the median (min-max) of
 * the per-repetition ratios.
 */
static int bench_overrides_ab(struct bench *b, uint8_t *frame)
{
	char fr[64], fd[64];
	struct lim_spec cases[4][1] = {{DROP(LL_KEY_SRC_IP, 32)},
				       {DROP(LL_KEY_SRC_IP, 32)},
				       {REFILL(LL_KEY_SRC_IP, 32)},
				       {REFILL(LL_KEY_SRC_IP, 32)}};
	static const char *const what[4] = {"drop", "drop, 100k overrides", "refill",
					    "refill, 100k overrides"};
	double ns[4][OVR_AB_REPS], ratio[2][OVR_AB_REPS];
	struct meas m;
	int err;

	bench_tmp(fr, sizeof(fr), "ovr-refill");
	bench_tmp(fd, sizeof(fd), "ovr-drop");
	if ((err = ovr_file(fr, RATE_HUGE, BURST_HUGE)) || (err = ovr_file(fd, 1, 1)))
		return err;
	cases[1][0].overrides = fd;
	cases[3][0].overrides = fr;
	printf("\nPer-key overrides, interleaved: an existing key with and without 100k overrides\n");
	for (int r = 0; r < OVR_AB_REPS && !err; r++)
		for (int j = 0; j < 4 && !err; j++) {
			int c = (j + r) % 4;

			if (!(err = policy_set(b, 1, cases[c], NULL)) &&
			    !(err = measure(b, b->dp.prog_fd, frame, 1, &m)))
				ns[c][r] = m.ns;
		}
	if (!err) {
		for (int r = 0; r < OVR_AB_REPS; r++) {
			ratio[0][r] = ns[1][r] / ns[0][r];
			ratio[1][r] = ns[3][r] / ns[2][r];
		}
		for (int c = 0; c < 4; c++) {
			qsort(ns[c], OVR_AB_REPS, sizeof(double), cmp_double);
			printf("  %-28s median %6.1f ns/pkt (%.1f-%.1f)\n", what[c],
			       ns[c][OVR_AB_REPS / 2], ns[c][0], ns[c][OVR_AB_REPS - 1]);
		}
		for (int k = 0; k < 2; k++) {
			qsort(ratio[k], OVR_AB_REPS, sizeof(double), cmp_double);
			printf("  overrides / none, %s path: median %.3f (%.3f-%.3f) over %d "
			       "interleaved repetitions\n",
			       k ? "refill" : "drop", ratio[k][OVR_AB_REPS / 2], ratio[k][0],
			       ratio[k][OVR_AB_REPS - 1], OVR_AB_REPS);
		}
	}
	unlink(fr);
	unlink(fd);
	return err;
}

/* A set file of SET_BENCH_N prefixes: IPv4 /32s in 10.0.0.0/8 and IPv6
 * /64s, plus 198.18.0.0/16 (the bench's source) when with_src.
 */
#define SET_BENCH_N 100000
static int set_file(const char *path, int with_src)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	for (uint32_t i = 0; i < SET_BENCH_N / 2; i++)
		fprintf(f, "10.%u.%u.%u\n", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
	for (uint32_t i = 0; i < SET_BENCH_N / 2; i++)
		fprintf(f, "2001:db8:%x:%x::/64\n", i >> 16, i & 0xffff);
	if (with_src)
		fprintf(f, "198.18.0.0/16\n");
	return fclose(f) ? -errno : 0;
}

/* One rule, src (a prefix) or src-set (set_path), with action act, made
 * live; *ms how long the apply took.
 */
static int set_policy(struct bench *b, const char *src, const char *set_path, uint8_t act,
		      double *ms)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_rule *r;
	char err[256] = "";
	uint64_t t0;
	int ret = -ENOMEM;

	if (!cp)
		return ret;
	cp->version = ++b->version;
	cp->default_action = LL_ACT_PASS;
	cp->n_rules = 1;
	r = &cp->rules[0];
	snprintf(r->name, sizeof(r->name), "set");
	r->action = act;
	if (src) {
		r->has_src = true;
		ret = units_parse_prefix(src, &r->src_family, r->src_addr, &r->src_plen);
		if (ret)
			goto out;
	} else {
		cp->n_sets = 1;
		snprintf(cp->sets[0].path, sizeof(cp->sets[0].path), "%s", set_path);
		r->src_set = 1;
	}
	t0 = clock_now_ns();
	ret = policy_apply(&b->dp, cp, err, sizeof(err));
	if (ms)
		*ms = (double)(clock_now_ns() - t0) / 1e6;
	if (ret)
		fprintf(stderr, "bench: cannot apply the policy: %s\n", err);
out:
	free(cp);
	return ret;
}

/* Per-packet cost of a rule with a src-set of 100k prefixes against the
 * same rule with a plain src prefix, matched (action drop and pass) and
 * passed over (the source in neither: default pass), in this run; and how
 * long a policy with the set takes to apply (the file read and checked,
 * 100k trie entries written), again unchanged (nothing written), and
 * changed (written anew beside the old, which is then deleted).
 */
static int bench_sets(struct bench *b, uint8_t *frame)
{
	char fin[64], fout[64];
	struct meas plain_drop, set_drop, plain_pass, set_pass, plain_miss, set_miss;
	double ms_new = 0, ms_same = 0, ms_changed = 0, ms;
	long long mem_empty = fdinfo_memlock(b->dp.sets_fd), mem_set = -1;
	int err;

	bench_tmp(fin, sizeof(fin), "set-in");
	bench_tmp(fout, sizeof(fout), "set-out");
	if ((err = set_file(fin, 1)) || (err = set_file(fout, 0)))
		return err;
	table_head("Prefix sets: a rule with src-set (100k prefixes) vs a plain src prefix");
	if (!(err = set_policy(b, "198.18.0.0/16", NULL, LL_RULE_DROP, NULL)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &plain_drop)))
		row("rule src 198.18.0.0/16, action drop (matches)", &plain_drop);
	if (!err && !(err = set_policy(b, NULL, fin, LL_RULE_DROP, &ms_new)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &set_drop)))
		row("rule src-set (100k, source in it), action drop", &set_drop);
	mem_set = fdinfo_memlock(b->dp.sets_fd);
	if (!err && !(err = set_policy(b, NULL, fin, LL_RULE_DROP, &ms_same)))
		err = set_policy(b, NULL, fout, LL_RULE_DROP, &ms_changed);
	if (!err && !(err = set_policy(b, "198.18.0.0/16", NULL, LL_RULE_PASS, NULL)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &plain_pass)))
		row("rule src 198.18.0.0/16, action pass (matches)", &plain_pass);
	if (!err && !(err = set_policy(b, NULL, fin, LL_RULE_PASS, &ms)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &set_pass)))
		row("rule src-set (100k, source in it), action pass", &set_pass);
	if (!err && !(err = set_policy(b, "10.0.0.0/8", NULL, LL_RULE_DROP, NULL)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &plain_miss)))
		row("rule src 10.0.0.0/8 passed over (default pass)", &plain_miss);
	if (!err && !(err = set_policy(b, NULL, fout, LL_RULE_DROP, &ms)) &&
	    !(err = measure(b, b->dp.prog_fd, frame, 1, &set_miss)))
		row("rule src-set (100k, source not in it) passed over", &set_miss);
	if (!err) {
		printf("  set / plain, ns per packet: drop %.2f, pass %.2f, passed over %.2f\n",
		       set_drop.ns / plain_drop.ns, set_pass.ns / plain_pass.ns,
		       set_miss.ns / plain_miss.ns);
		printf("  a policy with a %d-prefix set applied in %.1f ms (file read, checked, "
		       "trie written); unchanged %.1f ms (read, nothing written); changed %.1f ms "
		       "(written beside the old, old deleted)\n",
		       SET_BENCH_N + 1, ms_new, ms_same, ms_changed);
		if (mem_empty >= 0 && mem_set >= 0)
			printf("  ll_sets memlock: %lld bytes empty, %lld with the %d prefixes (%.0f "
			       "bytes a prefix)\n",
			       mem_empty, mem_set, SET_BENCH_N + 1,
			       (double)(mem_set - mem_empty) / (SET_BENCH_N + 1));
	}
	unlink(fin);
	unlink(fout);
	return err;
}

/* The single-key figures the closing ratios compare. */
struct single {
	struct meas drop1, refill1, refill4, refill4m; /* leaseline */
	struct meas pass, cdrop, ref_drop, ref_refill; /* baselines */
	/* the reference with 4 one-word budgets a packet (ref_limits), on
	 * its hash map and on its own table: what 4 ÷ 1 a limiter whose
	 * bucket is one CAS'd word pays
	 */
	struct meas ref_refill4, reft_refill, reft_refill4;
};

/* The reference limiter with one interval (1 / rate) and tau ((burst - 1) x
 * interval), its table emptied: the first packet creates the key's entry.
 */
static void ref_set(struct bench *b, uint64_t interval_ns, uint64_t tau_ns)
{
	uint64_t k, next;
	int fd = bpf_map__fd(b->ref->maps.rl_keys);

	b->ref->data->ref_interval_ns = interval_ns;
	b->ref->data->ref_tau_ns = tau_ns;
	while (!bpf_map_get_next_key(fd, NULL, &next)) {
		k = next;
		if (bpf_map_delete_elem(fd, &k))
			break;
	}
	/* rl_table: every way free */
	fd = bpf_map__fd(b->ref->maps.rl_table);
	for (uint32_t i = 0; i < bpf_map__max_entries(b->ref->maps.rl_table); i++) {
		uint8_t zero[64] = {0};

		bpf_map_update_elem(fd, &i, zero, BPF_ANY);
	}
}

/* One key, one thread. The figures the ratios need go to *s. */
static int bench_single(struct bench *b, struct single *s)
{
	struct meas *drop1 = &s->drop1, *pass = &s->pass;
	uint8_t frame[FRAME_LEN], other[FRAME_LEN];
	struct lim_spec nomatch[] = {DROP(LL_KEY_SRC_IP, 32)};
	struct meas empty = {0, -1}, m;
	int err;

	frame_build(frame, SINGLE_SADDR);
	frame_build(other, SINGLE_SADDR);
	other[FRAME_DPORT_OFF + 1] = DNS_PORT + 1; /* port 54: no rule matches */

	floor_ns = base_ns = 0;
	if (b->raw_fd[RAW_EMPTY] >= 0 && measure(b, b->raw_fd[RAW_EMPTY], frame, 0, &empty) == 0)
		floor_ns = empty.ns;
	if ((err = measure(b, b->pass_fd, frame, 0, pass)))
		return err;
	base_ns = pass->ns;
	show_net_ratio = 1;
	table_head("One key, one thread: ns per packet");
	if (floor_ns > 0)
		row("harness floor: empty XDP program (r0 = XDP_PASS)", &empty);
	for (int i = RAW_CLOCK; i < RAW_MAX; i++)
		if (b->raw_fd[i] >= 0 && measure(b, b->raw_fd[i], frame, 0, &m) == 0)
			row(raw_what[i], &m);
	row("XDP_PASS baseline (same parser, pass.bpf.c)", pass);
	if (b->cnt) {
		if ((err =
			 measure(b, bpf_program__fd(b->cnt->progs.xdpcount), frame, 0, &s->cdrop)))
			return err;
		row("counting XDP_DROP (xdpcount.bpf.c)", &s->cdrop);
	}
	if (b->lc) {
		/* The bucket lock's price (lockcost.bpf.c): each beside the bare update. */
		const struct {
			struct bpf_program *p;
			const char *what;
		} lk[] = {
		    {b->lc->progs.lc_bare, "machine: 1 array value updated, no lock"},
		    {b->lc->progs.lc_spin, "machine: 1 value under bpf_spin_lock"},
		    {b->lc->progs.lc_res, "machine: 1 value under bpf_res_spin_lock"},
		    {b->lc->progs.lc_bare4, "machine: 4 values updated, no lock"},
		    {b->lc->progs.lc_spin4, "machine: 4 values, each under bpf_spin_lock"},
		    {b->lc->progs.lc_res4, "machine: 4 values, each under bpf_res_spin_lock"},
		    {b->lc->progs.lc_res4held, "machine: 4 values, 4 res locks held at once"},
		};

		for (size_t i = 0; i < sizeof(lk) / sizeof(lk[0]); i++)
			if (measure(b, bpf_program__fd(lk[i].p), frame, 0, &m) == 0)
				row(lk[i].what, &m);
	} else {
		printf("  (lock pricing skipped: lockcost.bpf.c did not load; bpf_res_spin_lock needs "
		       "kernel 6.15+)\n");
	}
	if (b->ref) {
		int fd = bpf_program__fd(b->ref->progs.reflim);

		ref_set(b, 1000000000ull, 0); /* 1 packet/s, burst 1: drops */
		if ((err = measure(b, fd, frame, 0, &s->ref_drop)))
			return err;
		row("reference limiter (reflim.bpf.c), drop path", &s->ref_drop);
		ref_set(b, 1, 1000000000ull); /* 10^9 packets/s: admits */
		if ((err = measure(b, fd, frame, 0, &s->ref_refill)))
			return err;
		row("reference limiter (reflim.bpf.c), refill path", &s->ref_refill);
		/* The same on its own table in an array (issue #14's lever). */
		b->ref->data->ref_table = 1;
		ref_set(b, 1000000000ull, 0);
		if ((err = measure(b, fd, frame, 0, &m)))
			return err;
		row("reference limiter, own 4-way array table, drop path", &m);
		ref_set(b, 1, 1000000000ull);
		if ((err = measure(b, fd, frame, 0, &s->reft_refill)))
			return err;
		row("reference limiter, own 4-way array table, refill path", &s->reft_refill);
		b->ref->data->ref_limits = 4;
		ref_set(b, 1, 1000000000ull);
		if ((err = measure(b, fd, frame, 0, &s->reft_refill4)))
			return err;
		row("reference, 4 src-ip budgets (/32-/8), own table, refill", &s->reft_refill4);
		b->ref->data->ref_table = 0;
		ref_set(b, 1, 1000000000ull);
		if ((err = measure(b, fd, frame, 0, &s->ref_refill4)))
			return err;
		row("reference, 4 src-ip budgets (/32-/8), refill path", &s->ref_refill4);
		b->ref->data->ref_limits = 1;
	}
	/* LL_BENCH_ONLY=sets|overrides: those rows alone. */
	if (getenv("LL_BENCH_ONLY")) {
		const char *only = getenv("LL_BENCH_ONLY");
		int e = !strcmp(only, "sets")	     ? bench_sets(b, frame)
			: !strcmp(only, "overrides") ? bench_overrides_ab(b, frame)
						     : -EINVAL;

		return e ? e : -ECANCELED;
	}

	if ((err = policy_set(b, 1, nomatch, NULL)) ||
	    (err = measure(b, b->dp.prog_fd, other, 1, &m)))
		return err;
	row("limiter, no rule matches (default: pass)", &m);
	for (size_t i = 0; i < sizeof(single_cases) / sizeof(single_cases[0]); i++) {
		if ((err = policy_set(b, single_cases[i].n, single_cases[i].l, NULL)) ||
		    (err = measure(b, b->dp.prog_fd, frame, 1, &m)))
			return err;
		row(single_cases[i].what, &m);
		if (i == 0)
			*drop1 = m;
		else if (i == 1)
			s->refill1 = m;
		else if (i == 4)
			s->refill4 = m;
		else if (i == 7)
			s->refill4m = m;
	}
	err = bench_overrides(b, frame);
	return err ? err : bench_sets(b, frame);
}

/* Id of the limit called name in the running policy, or a negative errno. */
static int limit_id_of(struct bench *b, const char *name)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	int id = pol ? dp_policy_read(b->dp.policy_fd, b->dp.state_fd, pol) : -ENOMEM;

	if (!id)
		id = policy_limit_id(pol, name);
	free(pol);
	return id == -1 ? -ENOENT : id;
}

/* A per-key global limit spending its leased share (reference §6.1): the
 * same refill-path rows as a local per-key limit, the share as large as the
 * local limit's, every bucket at the lease's generation. The difference is
 * the lease: its lookup, its expiry against the packet's clock, this CPU's
 * copy of its view. Returns 0 or a negative errno.
 */
static int bench_global_keys(struct bench *b)
{
	static const uint32_t nkeys[] = {1, 65536, MANY_KEYS_MAX};
	struct lim_spec local[] = {REFILL(LL_KEY_SRC_IP, 32)};
	struct lim_spec global[] = {REFILL(LL_KEY_SRC_IP, 32)};
	struct meas ml, mg;
	struct ll_limit_cfg cfg;
	int err;

	global[0].scope = LL_SCOPE_GLOBAL;
	printf("\nPer-key global limit under its leased share vs the same local limit, refill\n"
	       "path, N pre-created buckets (target: global / local <= 1.1)\n");
	printf("  %-44s %9s %9s %8s\n", "keys", "local ns", "global ns", "ratio");
	for (size_t i = 0; i < sizeof(nkeys) / sizeof(nkeys[0]); i++) {
		struct lease_grant g = {
		    .epoch = 1, .seq = 1, .rate = RATE_HUGE, .burst = BURST_HUGE};
		struct ll_lease ls;
		char what[64];
		int id;

		if ((err = buckets_clear(b)) || (err = policy_set(b, 1, local, &cfg)) ||
		    (err = buckets_fill(b, &cfg, nkeys[i], 1)) ||
		    (err = measure_keys(b, b->dp.prog_fd, nkeys[i], 1, &ml)))
			return err;
		if ((err = buckets_clear(b)) || (err = policy_set(b, 1, global, &cfg)))
			return err;
		if ((id = limit_id_of(b, cfg.name)) < 0)
			return id;
		g.expiry_ns = clock_now_ns() + 3600 * NSEC_PER_SEC;
		if ((err = link_lease_apply(&b->dp, (uint32_t)id, &g, clock_now_ns())) ||
		    (err = dp_lease_read(&b->dp, (uint32_t)id, &ls)))
			return err;
		cfg.gen = ls.gen; /* buckets as the lease's share makes them */
		cfg.burst_s = ls.burst_s;
		if ((err = buckets_fill(b, &cfg, nkeys[i], 1)) ||
		    (err = measure_keys(b, b->dp.prog_fd, nkeys[i], 1, &mg)))
			return err;
		snprintf(what, sizeof(what), "%u key%s", nkeys[i], nkeys[i] > 1 ? "s" : "");
		printf("  %-44s %9.1f %9.1f %8.2f\n", what, ml.ns, mg.ns, mg.ns / ml.ns);
		fflush(stdout);
	}
	return buckets_clear(b);
}

static int bench_many(struct bench *b)
{
	static const uint32_t nkeys[] = {1, 1000, 65536, MANY_KEYS_MAX};
	struct lim_spec refill[] = {REFILL(LL_KEY_SRC_IP, 32)};
	struct meas empty = {0, -1}, pass, m;
	struct ll_limit_cfg cfg;
	int err;

	floor_ns = base_ns = 0;
	if (b->raw_fd[RAW_EMPTY] >= 0 &&
	    measure_keys(b, b->raw_fd[RAW_EMPTY], MANY_KEYS_MAX, 0, &empty) == 0)
		floor_ns = empty.ns;
	if ((err = measure_keys(b, b->pass_fd, MANY_KEYS_MAX, 0, &pass)))
		return err;
	base_ns = pass.ns;
	show_net_ratio = 0;
	table_head(
	    "Many keys, src-ip /32, one thread, one packet per test_run call: the source is\n"
	    "new (a bucket is created), or drawn uniformly from N pre-created buckets; the\n"
	    "key changes every packet");
	if (floor_ns > 0)
		row("harness floor: empty XDP program, 1 packet per call", &empty);
	row("XDP_PASS baseline, 1 packet per call", &pass);
	/* Spoofed sources: a bucket insert per packet, into an empty table. */
	if ((err = buckets_clear(b)) || (err = policy_set(b, 1, refill, NULL)) ||
	    (err = measure_keys(b, b->dp.prog_fd, 0, 1, &m)))
		return err;
	row("limiter refill path, a new key every packet", &m);
	for (int full = 0; full < 2; full++) {
		for (size_t i = 0; i < sizeof(nkeys) / sizeof(nkeys[0]); i++) {
			struct lim_spec l[] = {full ? refill[0]
						    : (struct lim_spec)DROP_BYTES(LL_KEY_SRC_IP)};
			char what[96];

			if ((err = buckets_clear(b)) || (err = policy_set(b, 1, l, &cfg)) ||
			    (err = buckets_fill(b, &cfg, nkeys[i], full)) ||
			    (err = measure_keys(b, b->dp.prog_fd, nkeys[i], 1, &m)))
				return err;
			snprintf(what, sizeof(what), "limiter %s, %u key%s",
				 full ? "refill path" : "drop path (bytes)", nkeys[i],
				 nkeys[i] > 1 ? "s" : "");
			row(what, &m);
			if (full && nkeys[i] == MANY_KEYS_MAX)
				print_memory(b, nkeys[i]);
		}
	}
	return bench_global_keys(b);
}

struct two {
	struct meas one, two;
};

static void two_row(const char *what, const struct two *t)
{
	printf("  %-44s %7.1f %7.1f %6.2f %8.1f %8.1f", what, t->one.ns, t->two.ns,
	       t->two.ns / t->one.ns, 1e3 / t->one.ns, 2e3 / t->two.ns);
	if (t->two.drop_pct >= 0)
		printf(" %7.1f%%", t->two.drop_pct);
	printf("\n");
	fflush(stdout);
}

static int bench_two(struct bench *b, struct two *pass, struct two *agg, struct two *key,
		     struct two *drop)
{
	struct lim_spec agg_l[] = {REFILL(LL_KEY_NONE, 32)};
	struct lim_spec key_l[] = {REFILL(LL_KEY_SRC_IP, 32)};
	struct lim_spec drop_l[] = {DROP(LL_KEY_SRC_IP, 32)};
	uint8_t frame[FRAME_LEN];
	int err;

	frame_build(frame, SINGLE_SADDR);
	printf("\nOne CPU vs two, one frame: ns per packet per thread (threads pinned to CPU0\n"
	       "and CPU1, started together, %u packets each; Mpps: all CPUs)\n",
	       b->repeat);
	printf("  %-44s %7s %7s %6s %8s %8s %8s\n", "case", "1 CPU", "2 CPUs", "2/1", "Mpps 1",
	       "Mpps 2", "dropped");
	if ((err = measure_threads(b, b->pass_fd, frame, 1, &pass->one)) ||
	    (err = measure_threads(b, b->pass_fd, frame, 2, &pass->two)))
		return err;
	pass->two.drop_pct = -1;
	two_row("XDP_PASS baseline (nothing shared)", pass);
	if ((err = policy_set(b, 1, agg_l, NULL)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 1, &agg->one)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 2, &agg->two)))
		return err;
	two_row("limiter none (aggregate, per-CPU slices)", agg);
	if ((err = policy_set(b, 1, key_l, NULL)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 1, &key->one)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 2, &key->two)))
		return err;
	two_row("limiter src-ip, same key (one locked bucket)", key);
	/* A flood from one key that cannot pay: the deny hint refuses it without
	 * the lock, so both CPUs only read the bucket's cache line. Anything the
	 * drop path writes to the bucket makes that line bounce between them.
	 */
	if ((err = policy_set(b, 1, drop_l, NULL)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 1, &drop->one)) ||
	    (err = measure_threads(b, b->dp.prog_fd, frame, 2, &drop->two)))
		return err;
	two_row("limiter src-ip, same key, drop path (hint)", drop);
	return 0;
}

int main(void)
{
	static struct bench b;
	const char *clk = getenv("LL_BENCH_CLOCK");
	struct dp_opts o = {.pin_dir = NULL,
			    .max_keys = BENCH_MAX_KEYS,
			    .precise_clock = clk && !strcmp(clk, "precise")};
	const char *q = getenv("LL_BENCH_QUICK");
	int quick = q && *q && strcmp(q, "0");
	struct single sg = {0};
	struct two two_pass = {0}, two_agg = {0}, two_key = {0}, two_drop = {0};
	int err, have_two = 0;
	time_t t0 = time(NULL);

	log_set_level(LOG_WARN);
	log_hook_libbpf();
	b.repeat = quick ? REPEAT_QUICK : REPEAT_FULL;
	b.runs = quick ? RUNS_QUICK : RUNS_FULL;
	b.calls = quick ? CALLS_QUICK : CALLS_FULL;
	b.pass_fd = -1;
	for (int i = 0; i < RAW_MAX; i++)
		b.raw_fd[i] = -1;
	print_header(&b, quick);
	printf("  leaseline's clock: %s (LL_BENCH_CLOCK=precise|coarse)\n",
	       o.precise_clock ? "bpf_ktime_get_ns" : "bpf_ktime_get_coarse_ns");

	err = dp_open(&b.dp, &o);
	if (err) {
		fprintf(stderr, "bench: cannot open the datapath: %s (root needed)\n",
			strerror(-err));
		return 1;
	}
	b.ncpus = b.dp.ncpus;
	b.pass = pass_bpf__open_and_load();
	if (!b.pass) {
		err = -errno;
		fprintf(stderr, "bench: cannot load the XDP_PASS baseline: %s\n", strerror(-err));
		goto out;
	}
	b.pass_fd = bpf_program__fd(b.pass->progs.leaseline_pass);
	b.cnt = xdpcount_bpf__open_and_load();
	b.lc = lockcost_bpf__open_and_load();
	b.ref = reflim_bpf__open();
	if (b.ref) {
		const char *rc = getenv("LL_BENCH_REF_CLOCK");

		b.ref->data->ref_coarse = rc && !strcmp(rc, "coarse");
		printf("  the reference limiter's clock: %s (LL_BENCH_REF_CLOCK=precise|coarse)\n",
		       b.ref->data->ref_coarse ? "bpf_ktime_get_coarse_ns" : "bpf_ktime_get_ns");
	}
	if (b.ref &&
	    (bpf_map__set_max_entries(b.ref->maps.rl_keys, 1024) || reflim_bpf__load(b.ref))) {
		reflim_bpf__destroy(b.ref);
		b.ref = NULL;
	}
	if (!b.cnt || !b.ref)
		fprintf(stderr, "bench: cannot load the counting drop or the reference limiter "
				"(rows skipped)\n");
	for (int i = 0; i < RAW_MAX; i++) {
		b.raw_fd[i] = raw_prog_load(i);
		if (b.raw_fd[i] < 0)
			fprintf(stderr, "bench: cannot load raw program %d: %s (row skipped)\n", i,
				strerror(-b.raw_fd[i]));
	}

	/* LL_BENCH_SINGLE=1: the one-key table and the ratios only (a few
	 * seconds: for runs repeated and interleaved by hand).
	 */
	const char *single = getenv("LL_BENCH_SINGLE");
	int only_single = single && *single && strcmp(single, "0");

	err = bench_single(&b, &sg);
	if (err == -ECANCELED) { /* LL_BENCH_ONLY: done */
		err = 0;
		goto out;
	}
	if (err || (!only_single && (err = bench_many(&b))))
		goto fail;
	if (only_single) {
		printf("\nMany keys, two CPUs: skipped (LL_BENCH_SINGLE)\n");
	} else if (b.ncpus >= 2 && sysconf(_SC_NPROCESSORS_ONLN) >= 2) {
		if ((err = bench_two(&b, &two_pass, &two_agg, &two_key, &two_drop)))
			goto fail;
		have_two = 1;
	} else {
		printf("\nOne CPU vs two: skipped, fewer than two CPUs online\n");
	}

	printf("\nRatios (targets from the issue; printed, not asserted)\n");
	printf("  limiter / XDP_PASS, 1 key, 1 limit, drop path:  %5.2f  target <= 2.5  %s\n",
	       sg.drop1.ns / sg.pass.ns, sg.drop1.ns / sg.pass.ns <= 2.5 ? "met" : "MISSED");
	if (sg.ref_drop.ns > 0 && sg.cdrop.ns > 0) {
		/* issue #14: what a user compares leaseline with */
		printf(
		    "  limiter / reference, 1 key, 1 limit, drop path: %5.2f  target <= 1.0  %s\n",
		    sg.drop1.ns / sg.ref_drop.ns, sg.drop1.ns <= sg.ref_drop.ns ? "met" : "MISSED");
		printf(
		    "  limiter / reference, 1 key, 1 limit, refill:    %5.2f  target <= 1.0  %s\n",
		    sg.refill1.ns / sg.ref_refill.ns,
		    sg.refill1.ns <= sg.ref_refill.ns ? "met" : "MISSED");
		printf(
		    "  limiter / counting XDP_DROP, drop path:         %5.2f  (reference %.2f)\n",
		    sg.drop1.ns / sg.cdrop.ns, sg.ref_drop.ns / sg.cdrop.ns);
		printf(
		    "  limiter / XDP_PASS, refill path:                %5.2f  (reference %.2f)\n",
		    sg.refill1.ns / sg.pass.ns, sg.ref_refill.ns / sg.pass.ns);
	}
	printf("  4 src-ip limits / 1 limit, refill path:         %5.2f  target <= 2.0  %s\n",
	       sg.refill4.ns / sg.refill1.ns,
	       sg.refill4.ns <= 2 * sg.refill1.ns ? "met" : "MISSED");
	printf("  4 mixed limits / 1 limit, refill path:          %5.2f  target <= 2.0  %s\n",
	       sg.refill4m.ns / sg.refill1.ns,
	       sg.refill4m.ns <= 2 * sg.refill1.ns ? "met" : "MISSED");
	if (sg.ref_refill4.ns > 0 && sg.reft_refill4.ns > 0)
		printf(
		    "  reference, 4 budgets / 1, refill path:          %5.2f  (own table: %.2f)\n",
		    sg.ref_refill4.ns / sg.ref_refill.ns, sg.reft_refill4.ns / sg.reft_refill.ns);
	if (have_two) {
		double r = two_agg.two.ns / two_agg.one.ns;

		printf(
		    "  2 CPUs / 1 CPU per packet, aggregate, refill:   %5.2f  target <= 1.2  %s\n",
		    r, r <= 1.2 ? "met" : "MISSED");
		printf("  2 CPUs / 1 CPU, src-ip one key (contrast):      %5.2f\n",
		       two_key.two.ns / two_key.one.ns);
		printf("  2 CPUs / 1 CPU, src-ip one key, drop path:      %5.2f\n",
		       two_drop.two.ns / two_drop.one.ns);
		printf("  2 CPUs / 1 CPU, XDP_PASS (control):             %5.2f\n",
		       two_pass.two.ns / two_pass.one.ns);
	}
	printf("\n(ran %ld s)\n", (long)(time(NULL) - t0));
	err = 0;
	goto out;
fail:
	fprintf(stderr, "bench: %s\n", strerror(-err));
out:
	for (int i = 0; i < RAW_MAX; i++)
		if (b.raw_fd[i] >= 0)
			close(b.raw_fd[i]);
	pass_bpf__destroy(b.pass);
	reflim_bpf__destroy(b.ref);
	xdpcount_bpf__destroy(b.cnt);
	lockcost_bpf__destroy(b.lc);
	dp_close(&b.dp);
	return err ? 1 : 0;
}
