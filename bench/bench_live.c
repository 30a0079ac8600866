// SPDX-License-Identifier: MIT
/*
 * Live benchmark driver: one run of the "line-rate evidence" figures of
 * docs/benchmarks-live.md. It generates 64-byte UDP frames with our own XDP
 * generator (bench/bpf/trafgen.bpf.c, bpf_prog_test_run_opts + BPF_F_TEST_XDP_LIVE_FRAMES,
 * XDP_TX out of the generator veth), attaches the program under test to the
 * DUT veth in the other namespace, and measures the DUT's threaded NAPI
 * kthread: CPU time per packet the DUT's XDP program saw, and packets/s.
 * Prints one "key=value" line per run and asserts nothing.
 *
 * It only runs when LL_BENCH_LIVE is set (scripts/bench-live.sh builds the
 * namespaces and sets it); under `make bench` it says so and exits 0.
 * The namespaces, veths and netfilter rules belong to the script; this
 * program only enters the namespaces it is given.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <linux/if_ether.h>
#include <linux/if_link.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "csum.h"
#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "agent/link.h"
#include "lib/log.h"
#include "pass.skel.h"
#include "agent/policy.h"
#include "trafgen.skel.h"
#include "keyfloor.skel.h"
#include "xdpcount.skel.h"
#include "reflim.skel.h"

/* 64 B in memory: Ethernet 14 + IPv4 20 + UDP 8 + 22 B payload (as bench_datapath). */
#define FRAME_LEN 64
/* Frames per bpf_prog_test_run_opts call: far more than a run sends. Each call
 * with repeat > 1 adds the program to the XDP dispatcher and removes it again,
 * two synchronize_rcu() of several ms with no frame sent, so the generator
 * makes one call and is stopped by a signal (test_run returns -EINTR).
 */
#define GEN_REPEAT (1u << 31)
/* How often the driver looks at the DUT during the warm-up. */
#define POLL_NS 50000000L
/* Sources 198.19.0.0 + k for k < 65536: the upper half of 198.18.0.0/15 (reference §8),
 * away from the veth addresses 198.18.0.x. More keys vary the UDP source port.
 */
#define SRC_BASE   0xc6130000u
#define MAX_SRC	   65536u
#define SPORT_BASE 1024
/* ll_buckets size for the throughput runs: 1M keys at load factor 0.5. */
#define DEF_MAX_KEYS (2u << 20)
/* Limits the 4-limit policy adds and that never deny: 10^10 tokens/s. */
#define HUGE_RATE    10000000000ull
#define HUGE_BURST   1000000000ull
#define WARMUP_MAX_S 8.0
/* Frames in flight at most: below the veth ring's 256, so the ring never
 * refuses a frame, and above NAPI's 64-frame budget, so the DUT never waits.
 */
#define DEF_WINDOW 192
/* test_run's live mode sizes its page pool by the batch; at 256 (the kernel's
 * maximum, TEST_XDP_MAX_BATCH) the pool's ring can hold every frame in flight
 * (the window) when the DUT returns them, so none has to go back to the page
 * allocator.
 */
#define DEF_BATCH 256

enum dut_prog {
	DUT_DROP,    /* xdpcount: count, XDP_DROP (the floor) */
	DUT_PASS,    /* pass.bpf.c: parse, count, XDP_PASS (netfilter baselines) */
	DUT_LL1,     /* leaseline, one per-key limit */
	DUT_LL4,     /* leaseline, four limits, the binding per-key one last */
	DUT_LL4F,    /* leaseline, four limits, the binding per-key one first */
	DUT_KEEP,    /* whatever is attached (the agent's): count from --pin-dir */
	DUT_KFHDR,   /* keyfloor: read the headers, XDP_DROP */
	DUT_KFLOOR,  /* keyfloor: one clock read + one 8-byte-key lookup, XDP_DROP */
	DUT_KFLOORC, /* keyfloor with the coarse clock */
	DUT_LLSYN,   /* leaseline, one per-key limit on TCP SYNs (tcp-flags: syn), default drop */
	DUT_REF,     /* reflim: the reference limiter of issue #14 (hash map, precise clock, CAS) */
	DUT_REFT,    /* reflim on its own 4-way table in an array (rl_table), the hash map behind */
	DUT_NPROGS
};

static const char *const prog_names[] = {
    [DUT_DROP] = "drop",   [DUT_PASS] = "pass",	    [DUT_LL1] = "ll1",
    [DUT_LL4] = "ll4",	   [DUT_LL4F] = "ll4f",	    [DUT_KEEP] = "keep",
    [DUT_KFHDR] = "kfhdr", [DUT_KFLOOR] = "kfloor", [DUT_KFLOORC] = "kfloorc",
    [DUT_LLSYN] = "llsyn", [DUT_REF] = "ref",	    [DUT_REFT] = "reft",
};

struct opts {
	const char *gen_ns, *gen_if, *dut_ns, *dut_if, *pin_dir, *label, *dump;
	uint32_t dst, keys, max_keys;
	uint16_t dport;
	enum dut_prog prog;
	uint64_t rate, burst;
	double warmup_s, duration_s;
	uint32_t window; /* frames in flight at most (trafgen's tg_window); 0: none */
	uint32_t batch;	 /* frames per test_run batch, 1..256 */
	int gen_cpu, dut_cpu, prog_stats, flow;
	int global;	  /* the client limit is a per-key global one, spending a leased share */
	uint8_t unit;	  /* of the client limit: enum ll_unit */
	uint32_t src_mul; /* trafgen's tg_src_mul: 1 keeps the sweep's order */
	int gen_write_always; /* trafgen's tg_write_always (--gen-write always|changed) */
	int tcp_flags;	      /* -1: UDP frames; else TCP frames with this flags byte */
	int precise_clock;    /* leaseline charges against bpf_ktime_get_ns (bpf/clock.h) */
	int coarse_clock;     /* the reference reads bpf_ktime_get_coarse_ns (ref_coarse) */
};

struct dut {
	struct dp dp;
	struct pass_bpf *pass;
	struct xdpcount_bpf *cnt;
	struct keyfloor_bpf *kf;
	struct reflim_bpf *ref;
	int prog_fd, count_fd, limit_stats_fd, client_id; /* client_id < 0: sum every limit */
	uint32_t client_uid; /* ll_key.limit_uid of the client limit's buckets */
	unsigned int ncpus;
};

struct lstats {
	uint64_t allowed, denied, new_keys, overflow;
};

/* One sample of everything a run compares. */
struct sample {
	double t; /* CLOCK_MONOTONIC, s */
	uint64_t dut_pkts, napi_ns, gen_ns, pushed, prog_ns, prog_cnt;
	uint64_t cpu_busy, cpu_all; /* the DUT CPU's /proc/stat ticks: not idle, all */
	struct lstats ls;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int ns_enter(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;

	if (fd < 0) {
		fprintf(stderr, "bench_live: cannot open '%s': %s\n", path, strerror(errno));
		return -errno;
	}
	if (setns(fd, CLONE_NEWNET)) {
		err = -errno;
		fprintf(stderr, "bench_live: cannot enter '%s': %s\n", path, strerror(errno));
	}
	close(fd);
	return err;
}

/* ifindex and MAC of ifname in the current network namespace. */
static int if_info(const char *ifname, int *ifindex, uint8_t mac[ETH_ALEN])
{
	struct ifreq ifr = {};
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), err = 0;

	if (s < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(s, SIOCGIFHWADDR, &ifr))
		err = -errno;
	else
		memcpy(mac, ifr.ifr_hwaddr.sa_data, ETH_ALEN);
	close(s);
	*ifindex = if_nametoindex(ifname);
	if (!err && !*ifindex)
		err = -errno;
	if (err)
		fprintf(stderr, "bench_live: no interface '%s': %s\n", ifname, strerror(-err));
	return err;
}

static int pin_cpu(pid_t tid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(tid, sizeof(set), &set) ? -errno : 0;
}

/* The DUT's NAPI kthread, "napi/<dut>-<id>" (comm may be cut to 15 bytes).
 * Exactly one must exist: veth has one rx queue here.
 */
static pid_t napi_find(const char *dut_if)
{
	char want[16], path[300], comm[64];
	struct dirent *de;
	pid_t found = 0;
	int n = 0;
	DIR *d;

	snprintf(want, sizeof(want), "napi/%s-", dut_if);
	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		FILE *f;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, want, strlen(want))) {
			found = atoi(de->d_name);
			n++;
		}
		fclose(f);
	}
	closedir(d);
	if (n != 1) {
		fprintf(stderr, "bench_live: %d threads named '%s*' (threaded NAPI on?)\n", n,
			want);
		return -ENOENT;
	}
	return found;
}

/* Time on CPU, ns, of a task: the first field of /proc/<tid>/schedstat,
 * exact where utime+stime count 10 ms ticks.
 */
static uint64_t task_ns(pid_t tid)
{
	unsigned long long v = 0;
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/* Ticks of one CPU from /proc/stat: everything but idle and iowait, and all.
 * What the DUT CPU spent on other tasks (other tenants of a shared machine)
 * is cpu busy minus the NAPI kthread's share.
 */
static void cpu_ticks(int cpu, uint64_t *busy, uint64_t *all)
{
	unsigned long long v[10] = {};
	char want[16], line[512];
	FILE *f = fopen("/proc/stat", "r");

	*busy = *all = 0;
	if (!f)
		return;
	snprintf(want, sizeof(want), "cpu%d ", cpu);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, want, strlen(want)))
			continue;
		if (sscanf(line + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
			   &v[9]) >= 8) {
			for (int i = 0; i < 8; i++) /* guest time is already in user */
				*all += v[i];
			*busy = *all - v[3] - v[4];
		}
		break;
	}
	fclose(f);
}

static uint64_t percpu_sum(int fd, uint32_t key, unsigned int ncpus)
{
	uint64_t v[ncpus], s = 0;

	if (fd < 0 || bpf_map_lookup_elem(fd, &key, v))
		return 0;
	for (unsigned int c = 0; c < ncpus; c++)
		s += v[c];
	return s;
}

static void limit_stats_read(const struct dut *d, struct lstats *out)
{
	struct ll_limit_stats v[d->ncpus];

	memset(out, 0, sizeof(*out));
	if (d->limit_stats_fd < 0)
		return;
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		if (d->client_id >= 0 && id != (uint32_t)d->client_id)
			continue;
		if (bpf_map_lookup_elem(d->limit_stats_fd, &id, v))
			continue;
		for (unsigned int c = 0; c < d->ncpus; c++) {
			out->allowed += v[c].allowed_pkts;
			out->denied += v[c].denied_pkts;
			out->new_keys += v[c].new_keys;
			out->overflow += v[c].overflow_pkts;
		}
	}
}

static void prog_run_stats(int fd, uint64_t *ns, uint64_t *cnt)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	*ns = *cnt = 0;
	if (fd >= 0 && !bpf_obj_get_info_by_fd(fd, &info, &len)) {
		*ns = info.run_time_ns;
		*cnt = info.run_cnt;
	}
}

/* ---- the program under test ---- */

static void lim_set(struct cfg_limit *l, const char *name, uint8_t key_mode, uint8_t plen,
		    uint64_t rate, uint64_t burst)
{
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->key_mode = key_mode;
	l->prefix_v4 = plen;
	l->prefix_v6 = 128;
	l->unit = LL_UNIT_PACKETS;
	l->rate = rate;
	l->burst = burst;
}

/* One rule, UDP to dport, charging "client" (the limit under test: src-ip,
 * or flow past 64k keys) and, for ll4/ll4f, three that never deny: a /16
 * "tenant", a dst-port "route" and a key-none "global" aggregate. ll4 puts
 * client last, so each denied packet pays four debits and three refunds.
 */
static int dut_policy(struct dut *d, const struct opts *o)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	uint8_t ckey = o->flow ? LL_KEY_FLOW : LL_KEY_SRC_IP;
	struct cfg_rule *r;
	char err[256] = "";
	int ret = -ENOMEM, n = 1;

	if (!cp || !pol)
		goto out;
	cp->version = 1;
	/* llsyn: a packet the rule does not match (not a SYN) is dropped by
	 * the default, so the figure is XDP's and not the stack's.
	 */
	cp->default_action = o->prog == DUT_LLSYN ? LL_ACT_DROP : LL_ACT_PASS;
	lim_set(&cp->limits[0], "client", ckey, 32, o->rate, o->burst);
	cp->limits[0].unit = o->unit;
	cp->limits[0].scope = o->global ? LL_SCOPE_GLOBAL : LL_SCOPE_LOCAL;
	if (o->prog != DUT_LL1 && o->prog != DUT_LLSYN) {
		lim_set(&cp->limits[1], "tenant", LL_KEY_SRC_IP, 16, HUGE_RATE, HUGE_BURST);
		lim_set(&cp->limits[2], "route", LL_KEY_DST_PORT, 32, HUGE_RATE, HUGE_BURST);
		lim_set(&cp->limits[3], "global", LL_KEY_NONE, 32, HUGE_RATE, HUGE_BURST);
		n = 4;
	}
	cp->n_limits = n;
	cp->n_rules = 1;
	r = &cp->rules[0];
	snprintf(r->name, sizeof(r->name), "udp-%u", o->dport);
	r->proto = IPPROTO_UDP;
	r->has_dport = true;
	r->n_dport = 1;
	r->dport[0].lo = r->dport[0].hi = o->dport;
	if (o->prog == DUT_LLSYN) {
		snprintf(r->name, sizeof(r->name), "tcp-syn-%u", o->dport);
		r->proto = IPPROTO_TCP;
		r->has_tcp_flags = true;
		r->tcp_mask = 0x02 | 0x10; /* tcp-flags: syn (SYN set, ACK clear) */
		r->tcp_value = 0x02;
	}
	r->n_limits = n;
	for (int i = 0; i < n; i++)
		r->limit[i] = o->prog == DUT_LL4 ? (i + 1) % n : i; /* ll4: 1,2,3,0 */
	ret = policy_apply(&d->dp, cp, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "bench_live: cannot apply the policy: %s\n", err);
		goto out;
	}
	ret = dp_policy_read(d->dp.policy_fd, d->dp.state_fd, pol);
	if (!ret)
		d->client_id = policy_limit_id(pol, "client");
	if (!ret && d->client_id < 0)
		ret = -ENOENT;
	if (!ret)
		d->client_uid = pol->limits[d->client_id].uid;
	if (!ret && o->global) {
		/* The whole contract leased to this gateway for the run: every key
		 * spends (rate, burst) as the local limit would, through the lease.
		 */
		struct lease_grant g = {.epoch = 1, .seq = 1, .rate = o->rate, .burst = o->burst};

		g.expiry_ns = clock_now_ns() + 3600 * NSEC_PER_SEC;
		ret = link_lease_apply(&d->dp, (uint32_t)d->client_id, &g, clock_now_ns());
		if (ret)
			fprintf(stderr, "bench_live: cannot lease the client limit: %s\n",
				strerror(-ret));
	}
out:
	free(cp);
	free(pol);
	return ret;
}

static int dut_load(struct dut *d, const struct opts *o)
{
	char path[PATH_MAX];
	int err;

	d->count_fd = d->limit_stats_fd = d->prog_fd = -1;
	d->client_id = -1;
	d->ncpus = libbpf_num_possible_cpus();
	switch (o->prog) {
	case DUT_DROP:
		d->cnt = xdpcount_bpf__open_and_load();
		if (!d->cnt)
			return -errno;
		d->prog_fd = bpf_program__fd(d->cnt->progs.xdpcount);
		d->count_fd = bpf_map__fd(d->cnt->maps.xc_pkts);
		return 0;
	case DUT_KFHDR:
	case DUT_KFLOOR:
	case DUT_KFLOORC:
		d->kf = keyfloor_bpf__open();
		if (!d->kf)
			return -errno;
		d->kf->rodata->kf_lookup = o->prog != DUT_KFHDR;
		d->kf->rodata->kf_coarse = o->prog == DUT_KFLOORC;
		bpf_map__set_max_entries(d->kf->maps.kf_keys, o->max_keys);
		err = keyfloor_bpf__load(d->kf);
		if (err)
			return err;
		d->prog_fd = bpf_program__fd(d->kf->progs.keyfloor);
		d->count_fd = bpf_map__fd(d->kf->maps.kf_pkts);
		return 0;
	case DUT_REF:
	case DUT_REFT: {
		/* The same per-key limit as ll1 (packets), keyed like it. */
		uint32_t bits = 10;

		while (bits < 24 && (1u << bits) * 4 < o->max_keys)
			bits++;
		d->ref = reflim_bpf__open();
		if (!d->ref)
			return -errno;
		d->ref->data->ref_interval_ns = o->rate ? 1000000000ull / o->rate : ~0ull >> 2;
		d->ref->data->ref_tau_ns =
		    (o->burst ? o->burst - 1 : 0) * d->ref->data->ref_interval_ns;
		d->ref->data->ref_ports = o->flow;
		d->ref->data->ref_table = o->prog == DUT_REFT;
		d->ref->data->ref_coarse = o->coarse_clock;
		d->ref->data->ref_set_bits = bits;
		bpf_map__set_max_entries(d->ref->maps.rl_keys, o->max_keys);
		bpf_map__set_max_entries(d->ref->maps.rl_table, 1u << bits);
		err = reflim_bpf__load(d->ref);
		if (err)
			return err;
		d->prog_fd = bpf_program__fd(d->ref->progs.reflim);
		d->count_fd = bpf_map__fd(d->ref->maps.rl_pkts);
		return 0;
	}
	case DUT_PASS:
		d->pass = pass_bpf__open_and_load();
		if (!d->pass)
			return -errno;
		d->prog_fd = bpf_program__fd(d->pass->progs.leaseline_pass);
		d->count_fd = bpf_map__fd(d->pass->maps.pass_parse_stats);
		return 0;
	case DUT_KEEP:
		/* The agent's maps; its program is the one attached. */
		snprintf(path, sizeof(path), "%s/ll_parse_stats", o->pin_dir);
		d->count_fd = bpf_obj_get(path);
		snprintf(path, sizeof(path), "%s/ll_limit_stats", o->pin_dir);
		d->limit_stats_fd = bpf_obj_get(path);
		if (d->count_fd < 0 || d->limit_stats_fd < 0) {
			fprintf(stderr, "bench_live: no pinned maps under '%s'\n", o->pin_dir);
			return -ENOENT;
		}
		return 0;
	default: {
		struct dp_opts dop = {
		    .pin_dir = NULL, .max_keys = o->max_keys, .precise_clock = o->precise_clock};

		err = dp_open(&d->dp, &dop);
		if (err)
			return err;
		d->prog_fd = d->dp.prog_fd;
		d->count_fd = d->dp.parse_stats_fd;
		d->limit_stats_fd = d->dp.limit_stats_fd;
		return dut_policy(d, o);
	}
	}
}

/* ---- the generator ---- */

static void frame_build(uint8_t *f, const uint8_t *src_mac, const uint8_t *dst_mac, uint32_t dst,
			uint16_t dport, int tcp_flags, uint32_t *csum_base)
{
	struct ethhdr *eth = (struct ethhdr *)f;
	struct iphdr *ip = (struct iphdr *)(eth + 1);
	struct udphdr *udp = (struct udphdr *)(ip + 1);

	memset(f, 0, FRAME_LEN);
	memcpy(eth->h_dest, dst_mac, ETH_ALEN);
	memcpy(eth->h_source, src_mac, ETH_ALEN);
	eth->h_proto = htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(FRAME_LEN - ETH_HLEN);
	ip->ttl = 64;
	ip->protocol = tcp_flags >= 0 ? IPPROTO_TCP : IPPROTO_UDP;
	ip->saddr = 0; /* and check = 0: the generator adds the source per frame */
	ip->daddr = htonl(dst);
	*csum_base = csum_partial16(ip, sizeof(*ip));
	ip->saddr = htonl(SRC_BASE);
	ip->check = (uint16_t)~csum_partial16(ip, sizeof(*ip));
	udp->source = htons(SPORT_BASE);
	udp->dest = htons(dport);
	udp->len = htons(FRAME_LEN - ETH_HLEN - sizeof(*ip));
	udp->check = 0; /* none: allowed for IPv4 */
	if (tcp_flags >= 0) {
		/* TCP: the ports where UDP's are (the generator writes the source
		 * port at the same offset), no checksum: XDP runs before any check.
		 */
		struct tcphdr *th = (struct tcphdr *)(ip + 1);

		memset(th, 0, sizeof(*th));
		th->source = htons(SPORT_BASE);
		th->dest = htons(dport);
		th->doff = sizeof(*th) / 4;
		((uint8_t *)th)[13] = (uint8_t)tcp_flags;
		th->window = htons(65535);
	}
}

struct gen {
	struct trafgen_bpf *skel;
	int fd, cpu, err;
	uint8_t frame[FRAME_LEN];
	struct xdp_md ctx;
	pthread_t thr;
	volatile pid_t tid; /* for its CPU time; 0 until the thread runs */
	volatile int done;
	unsigned int ncpus;
	uint32_t batch; /* test_run's batch_size: also the size of its page pool's ring */
};

/* Load the generator with its tg_dut map being the DUT program's counter map,
 * so the window can see what the DUT has done.
 */
static int gen_load(struct gen *g, const struct dut *d)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int err;

	g->skel = trafgen_bpf__open();
	if (!g->skel)
		return -errno;
	if (bpf_obj_get_info_by_fd(d->count_fd, &info, &len))
		return -errno;
	if ((err = bpf_map__set_max_entries(g->skel->maps.tg_dut, info.max_entries)) ||
	    (err = bpf_map__reuse_fd(g->skel->maps.tg_dut, d->count_fd)))
		return err;
	return trafgen_bpf__load(g->skel);
}

static void on_wake(int sig)
{
	(void)sig; /* only to interrupt the generator's test_run */
}

/* The generator thread: pinned to its CPU, in the generator namespace (a new
 * thread starts in its creator's), one test_run until told to stop.
 */
static void *gen_main(void *arg)
{
	struct gen *g = arg;
	LIBBPF_OPTS(bpf_test_run_opts, t, .data_in = g->frame, .data_size_in = FRAME_LEN,
		    .ctx_in = &g->ctx, .ctx_size_in = sizeof(g->ctx), .repeat = GEN_REPEAT,
		    .flags = BPF_F_TEST_XDP_LIVE_FRAMES, .batch_size = g->batch);

	g->tid = (pid_t)syscall(SYS_gettid);
	g->err = pin_cpu(0, g->cpu);
	while (!g->err && !stop && !g->done) {
		if (bpf_prog_test_run_opts(g->fd, &t) && errno != EINTR) {
			g->err = -errno;
			fprintf(stderr, "bench_live: generator test_run: %s\n", strerror(errno));
		}
	}
	return NULL;
}

static int gen_start(struct gen *g)
{
	struct sigaction sa = {.sa_handler = on_wake}; /* no SA_RESTART */

	sigaction(SIGUSR1, &sa, NULL);
	return -pthread_create(&g->thr, NULL, gen_main, g);
}

/* Stop and join; the test_run in progress returns at its next batch. */
static void gen_stop(struct gen *g)
{
	g->done = 1;
	for (int i = 0; i < 1000; i++) { /* bounded: 1000 x 10 ms */
		if (pthread_tryjoin_np(g->thr, NULL) == 0)
			return;
		pthread_kill(g->thr, SIGUSR1);
		usleep(10000);
	}
	fprintf(stderr, "bench_live: the generator thread does not stop\n");
	exit(1);
}

/* Frames the generator has built (and sent out of the veth, or lost at a full
 * ring): its per-CPU rotation counter.
 */
static uint64_t gen_pushed(const struct gen *g)
{
	return percpu_sum(bpf_map__fd(g->skel->maps.tg_pos), 0, g->ncpus);
}

/* ---- the run ---- */

static void sample(struct sample *s, const struct dut *d, const struct gen *g, pid_t napi,
		   const struct opts *o)
{
	s->t = now_s();
	cpu_ticks(o->dut_cpu, &s->cpu_busy, &s->cpu_all);
	s->dut_pkts = percpu_sum(d->count_fd, 0, d->ncpus); /* LL_PARSE_OK / xc_pkts */
	s->napi_ns = task_ns(napi);
	s->gen_ns = g->tid ? task_ns(g->tid) : 0;
	s->pushed = gen_pushed(g);
	limit_stats_read(d, &s->ls);
	s->prog_ns = s->prog_cnt = 0;
	if (o->prog_stats)
		prog_run_stats(d->prog_fd, &s->prog_ns, &s->prog_cnt);
}

/* Every bucket of the client limit: "source sport last_ns tokens" (tokens in
 * sub-tokens, last_ns CLOCK_MONOTONIC of the key's last packet). For the
 * accuracy figures: a key's window ends at its last packet, not at the
 * generator's end (the DUT may have been off CPU for the last milliseconds).
 */
static int buckets_dump(const struct dut *d, const char *path)
{
	int fds[2] = {d->dp.buckets_fd, d->dp.flow_buckets_fd};
	struct ll_flow_key next, fk; /* room for either key kind */
	struct ll_bucket b;
	char a[INET_ADDRSTRLEN];
	FILE *f;
	int n = 0;

	if (d->client_id < 0)
		return -EINVAL;
	f = fopen(path, "w");
	if (!f)
		return -errno;
	for (int m = 0; m < 2; m++) {
		void *prev = NULL;

		while (!bpf_map_get_next_key(fds[m], prev, &next)) {
			struct ll_key k;

			fk = next;
			prev = &fk;
			memcpy(&k, &fk, sizeof(k));
			if (k.limit_uid != d->client_uid || k.family != 4 ||
			    bpf_map_lookup_elem(fds[m], &fk, &b))
				continue;
			inet_ntop(AF_INET, m ? &fk.addr[3] : &k.addr[3], a, sizeof(a));
			fprintf(f, "%s %u %llu %llu\n", a, m ? ntohs(fk.sport) : 0,
				(unsigned long long)b.last_ns, (unsigned long long)b.tokens);
			n++;
		}
	}
	fclose(f);
	return n;
}

/* The state of the DUT's CPU as user space sees it, right after a run: the
 * cost of a CLOCK_MONOTONIC read (vDSO: a TSC read), of one dependent load
 * from a 32 MiB buffer, and of a round of 64-bit multiplies. This shared VM
 * moves between states that double the cost of some DUT configurations for
 * tens of seconds at a time; these figures on every line are there to show
 * which state a run met.
 */
#define PROBE_WORDS (4u << 20) /* 32 MiB of size_t */
#define PROBE_STEPS 400000
#define PROBE_READS 400000
#define PROBE_ALU   20000000

/* The nominal clock of CPU cpu in MHz as /proc/cpuinfo gives it (a VM's
 * vCPUs report the host's), or -1: for cycles per packet.
 */
static double cpu_mhz(int cpu)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	int cur = -1;
	double mhz = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "processor : %d", &cur) == 1)
			continue;
		if (cur == cpu && sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			break;
	}
	fclose(f);
	return mhz;
}

static void machine_probe(int cpu, double *clock_ns, double *mem_ns, double *alu_ns)
{
	size_t *next = malloc(PROBE_WORDS * sizeof(*next)), i, j, t, at = 0;
	cpu_set_t old;
	struct timespec ts;
	volatile uint64_t sink = 0;
	double t0;

	*clock_ns = *mem_ns = *alu_ns = -1;
	if (!next || sched_getaffinity(0, sizeof(old), &old) || pin_cpu(0, cpu)) {
		free(next);
		return;
	}
	/* One cycle through every word, in random order (Sattolo). */
	for (i = 0; i < PROBE_WORDS; i++)
		next[i] = i;
	srand(1);
	for (i = PROBE_WORDS - 1; i > 0; i--) {
		j = ((size_t)rand() << 16 ^ (size_t)rand()) % i;
		t = next[i];
		next[i] = next[j];
		next[j] = t;
	}
	t0 = now_s();
	for (i = 0; i < PROBE_READS; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += ts.tv_nsec;
	}
	*clock_ns = (now_s() - t0) * 1e9 / PROBE_READS;
	t0 = now_s();
	for (i = 0; i < PROBE_STEPS; i++)
		at = next[at];
	*mem_ns = (now_s() - t0) * 1e9 / PROBE_STEPS;
	sink += at;
	/* Arithmetic in four independent lanes over an L1-resident 4 KiB:
	 * what a hash of a key costs, and what a busy SMT sibling slows down.
	 */
	{
		uint64_t a = 1, b = 2, c = 3, e = 4;

		t0 = now_s();
		for (i = 0; i < PROBE_ALU; i++) {
			uint64_t w = next[i & 511];

			a = (a ^ w) * 0x9e3779b97f4a7c15ull;
			b = (b + w) * 0xc2b2ae3d27d4eb4full;
			c = (c ^ (w >> 7)) * 0x165667b19e3779f9ull;
			e = (e + (w << 3)) * 0x27d4eb2f165667c5ull;
		}
		*alu_ns = (now_s() - t0) * 1e9 / PROBE_ALU;
		sink += a ^ b ^ c ^ e;
	}
	sched_setaffinity(0, sizeof(old), &old);
	free(next);
}

/* One line of figures for the measurement between samples a and b. */
static void report(const struct opts *o, const char *phase, const struct dut *d,
		   const struct gen *g, pid_t napi, const struct sample *s0, const struct sample *a,
		   const struct sample *b, double clock_ns, double mem_ns, double alu_ns)
{
	double dt = b->t - a->t, pkts = (double)(b->dut_pkts - a->dut_pkts);
	double napi_ns = (double)(b->napi_ns - a->napi_ns), busy = napi_ns / (dt * 1e9);
	double pushed = (double)(b->pushed - a->pushed);
	double cpu_all = (double)(b->cpu_all - a->cpu_all);
	double cpu_busy = cpu_all > 0 ? (b->cpu_busy - a->cpu_busy) / cpu_all : 0;
	uint64_t denied = b->ls.denied - a->ls.denied, allowed = b->ls.allowed - a->ls.allowed;
	struct lstats tot;

	limit_stats_read(d, &tot);
	printf(
	    "run label=%s phase=%s prog=%s%s keys=%u key=%s unit=%s rate=%llu burst=%llu "
	    "window=%u batch=%u secs=%.3f dut_pkts=%.0f dut_pps=%.0f napi_ns_per_pkt=%.1f "
	    "napi_busy=%.3f cpu_other=%.3f pushed_pps=%.0f gen_ns_per_frame=%.1f "
	    "ring_loss=%.4f allowed=%llu denied=%llu admit_frac=%.4f prog_ns_per_pkt=%.1f "
	    "total_secs=%.3f total_allowed=%llu total_new_keys=%llu total_overflow=%llu "
	    "warmup_secs=%.3f napi_tid=%d t0_ns=%.0f t_first_ns=%llu t_end_ns=%.0f "
	    "gen_held=%llu gen_resyncs=%llu host_clock_ns=%.1f host_mem_ns=%.1f host_alu_ns=%.2f "
	    "tcp_flags=%d gen_write=%s cpu_mhz=%.0f\n",
	    o->label, phase, prog_names[o->prog],
	    o->global	       ? "g"
	    : o->precise_clock ? "p"
	    : o->coarse_clock  ? "c"
			       : "",
	    o->keys, o->flow ? "flow" : "src-ip", o->unit == LL_UNIT_BYTES ? "bytes" : "packets",
	    (unsigned long long)o->rate, (unsigned long long)o->burst, o->window, o->batch, dt,
	    pkts, pkts / dt, pkts > 0 ? napi_ns / pkts : 0, busy,
	    cpu_busy > busy ? cpu_busy - busy : 0, pushed / dt,
	    pushed > 0 ? (double)(b->gen_ns - a->gen_ns) / pushed : 0,
	    pushed > 0 ? 1 - pkts / pushed : 0, (unsigned long long)allowed,
	    (unsigned long long)denied,
	    allowed + denied ? (double)allowed / (allowed + denied) : -1,
	    b->prog_cnt > a->prog_cnt
		? (double)(b->prog_ns - a->prog_ns) / (b->prog_cnt - a->prog_cnt)
		: -1,
	    b->t - s0->t, (unsigned long long)tot.allowed, (unsigned long long)tot.new_keys,
	    (unsigned long long)tot.overflow, a->t - s0->t, (int)napi, s0->t * 1e9,
	    (unsigned long long)g->skel->bss->tg_first_ns, b->t * 1e9,
	    (unsigned long long)g->skel->bss->tg_held, (unsigned long long)g->skel->bss->tg_resyncs,
	    clock_ns, mem_ns, alu_ns, o->tcp_flags, o->gen_write_always ? "always" : "changed",
	    cpu_mhz(o->dut_cpu));
	fflush(stdout);
}

/* Generate for secs (bounded by stop), then sample into *s. */
static void run_for(double secs, struct sample *s, const struct dut *d, const struct gen *g,
		    pid_t napi, const struct opts *o)
{
	double t_end = now_s() + secs;

	while (!stop && !g->err && now_s() < t_end)
		nanosleep(&(struct timespec){.tv_nsec = POLL_NS}, NULL);
	sample(s, d, g, napi, o);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench_live run --gen-ns PATH --gen-if IF --dut-ns PATH --dut-if IF --dst "
		"A.B.C.D\n"
		"         --prog drop|pass|ll1|ll4|ll4f|llsyn|keep|kfhdr|kfloor|kfloorc|ref|reft "
		"[--pin-dir DIR] "
		"--keys N [--rate R]\n"
		"         [--burst B] [--dport P] [--warmup S] [--duration S] [--max-keys N]\n"
		"         [--unit packets|bytes] [--precise-clock] [--coarse-clock] [--window N] "
		"[--batch N] "
		"[--gen-cpu C] [--dut-cpu C]\n"
		"         [--prog-stats] [--global] [--src-mul ODD] [--tcp-flags BYTE]\n"
		"         [--gen-write always|changed]\n"
		"         [--dump-buckets FILE] [--label TEXT]\n"
		"Runs only with LL_BENCH_LIVE set; scripts/bench-live.sh is the way to run it.\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"gen-ns", 1, 0, 'a'},
	    {"gen-if", 1, 0, 'b'},
	    {"dut-ns", 1, 0, 'c'},
	    {"dut-if", 1, 0, 'd'},
	    {"dst", 1, 0, 'e'},
	    {"prog", 1, 0, 'f'},
	    {"pin-dir", 1, 0, 'g'},
	    {"keys", 1, 0, 'h'},
	    {"rate", 1, 0, 'i'},
	    {"burst", 1, 0, 'j'},
	    {"dport", 1, 0, 'k'},
	    {"warmup", 1, 0, 'l'},
	    {"duration", 1, 0, 'm'},
	    {"max-keys", 1, 0, 'n'},
	    {"gen-cpu", 1, 0, 'o'},
	    {"dut-cpu", 1, 0, 'p'},
	    {"prog-stats", 0, 0, 'q'},
	    {"label", 1, 0, 'r'},
	    {"unit", 1, 0, 's'},
	    {"dump-buckets", 1, 0, 't'},
	    {"window", 1, 0, 'u'},
	    {"batch", 1, 0, 'v'},
	    {"global", 0, 0, 'w'},
	    {"src-mul", 1, 0, 'x'},
	    {"tcp-flags", 1, 0, 'y'},
	    {"precise-clock", 0, 0, 'z'},
	    {"gen-write", 1, 0, 'A'},
	    {"coarse-clock", 0, 0, 'B'},
	    {0, 0, 0, 0},
	};
	struct in_addr a;
	int c;

	*o = (struct opts){.keys = 1,
			   .rate = 1,
			   .burst = 1,
			   .dport = 7000,
			   .warmup_s = 0.5,
			   .duration_s = 3,
			   .max_keys = DEF_MAX_KEYS,
			   .gen_cpu = 0,
			   .dut_cpu = 1,
			   .prog = DUT_DROP,
			   .label = "-",
			   .window = DEF_WINDOW,
			   .batch = DEF_BATCH,
			   .src_mul = 1,
			   .gen_write_always = 1,
			   .tcp_flags = -1};
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'a':
			o->gen_ns = optarg;
			break;
		case 'b':
			o->gen_if = optarg;
			break;
		case 'c':
			o->dut_ns = optarg;
			break;
		case 'd':
			o->dut_if = optarg;
			break;
		case 'e':
			if (inet_pton(AF_INET, optarg, &a) != 1)
				return -EINVAL;
			o->dst = ntohl(a.s_addr);
			break;
		case 'f':
			o->prog = DUT_NPROGS;
			for (int i = 0; i < DUT_NPROGS; i++)
				if (!strcmp(optarg, prog_names[i]))
					o->prog = i;
			if (o->prog == DUT_NPROGS)
				return -EINVAL;
			break;
		case 'g':
			o->pin_dir = optarg;
			break;
		case 'h':
			o->keys = strtoul(optarg, NULL, 0);
			break;
		case 'i':
			o->rate = strtoull(optarg, NULL, 0);
			break;
		case 'j':
			o->burst = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			o->dport = strtoul(optarg, NULL, 0);
			break;
		case 'l':
			o->warmup_s = atof(optarg);
			break;
		case 'm':
			o->duration_s = atof(optarg);
			break;
		case 'n':
			o->max_keys = strtoul(optarg, NULL, 0);
			break;
		case 'o':
			o->gen_cpu = atoi(optarg);
			break;
		case 'p':
			o->dut_cpu = atoi(optarg);
			break;
		case 'q':
			o->prog_stats = 1;
			break;
		case 'r':
			o->label = optarg;
			break;
		case 's':
			if (strcmp(optarg, "packets") && strcmp(optarg, "bytes"))
				return -EINVAL;
			o->unit = !strcmp(optarg, "bytes") ? LL_UNIT_BYTES : LL_UNIT_PACKETS;
			break;
		case 't':
			o->dump = optarg;
			break;
		case 'u':
			o->window = strtoul(optarg, NULL, 0);
			break;
		case 'v':
			o->batch = strtoul(optarg, NULL, 0);
			break;
		case 'w':
			o->global = 1;
			break;
		case 'z':
			o->precise_clock = 1;
			break;
		case 'B':
			o->coarse_clock = 1;
			break;
		case 'x':
			o->src_mul = strtoul(optarg, NULL, 0);
			break;
		case 'A':
			if (strcmp(optarg, "always") && strcmp(optarg, "changed"))
				return -EINVAL;
			o->gen_write_always = !strcmp(optarg, "always");
			break;
		case 'y':
			o->tcp_flags = (int)strtol(optarg, NULL, 0);
			if (o->tcp_flags < 0 || o->tcp_flags > 0xff)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	if (!o->gen_ns || !o->gen_if || !o->dut_ns || !o->dut_if || !o->dst || !o->keys ||
	    o->keys > (MAX_SRC << 6) || o->duration_s <= 0 || o->duration_s > 60 ||
	    o->warmup_s < 0 || (o->prog == DUT_KEEP && !o->pin_dir) || !o->batch ||
	    o->batch > 256 || !(o->src_mul & 1))
		return -EINVAL;
	o->flow = o->keys > MAX_SRC;
	return 0;
}

int main(int argc, char **argv)
{
	struct sample s0, s1, s2;
	double clock_ns, mem_ns, alu_ns;
	uint8_t gen_mac[ETH_ALEN], dut_mac[ETH_ALEN];
	int gen_ifindex, dut_ifindex, stats_fd = -1, err, attached = 0, gen_running = 0;
	uint32_t csum_base, n_src;
	struct dut d = {};
	struct gen g = {};
	struct opts o;
	double warm_pkts;
	const char *live = getenv("LL_BENCH_LIVE");
	pid_t napi;

	if (!live || !*live) {
		printf("bench_live: skipped: needs two namespaces and a veth pair; "
		       "run scripts/bench-live.sh (docs/benchmarks-live.md)\n");
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "run")) {
		usage(stderr);
		return 2;
	}
	if (parse_opts(argc - 1, argv + 1, &o)) {
		usage(stderr);
		return 2;
	}
	log_set_level(LOG_WARN);
	log_hook_libbpf();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if ((err = pin_cpu(0, o.gen_cpu))) {
		fprintf(stderr, "bench_live: cannot pin to CPU %d: %s\n", o.gen_cpu,
			strerror(-err));
		return 1;
	}
	if ((err = ns_enter(o.dut_ns)) || (err = if_info(o.dut_if, &dut_ifindex, dut_mac)) ||
	    (err = ns_enter(o.gen_ns)) || (err = if_info(o.gen_if, &gen_ifindex, gen_mac)))
		return 1;

	if ((err = dut_load(&d, &o))) {
		fprintf(stderr, "bench_live: cannot load the DUT program '%s': %s\n",
			prog_names[o.prog], strerror(-err));
		goto out;
	}
	if (o.prog != DUT_KEEP) {
		/* Replaces whatever program is there (ours, from the previous run):
		 * the veth keeps its NAPI, so the kthread stays the same.
		 */
		if ((err = ns_enter(o.dut_ns)))
			goto out;
		err = bpf_xdp_attach(dut_ifindex, d.prog_fd, XDP_FLAGS_DRV_MODE, NULL);
		if (err) {
			fprintf(stderr, "bench_live: cannot attach to '%s': %s\n", o.dut_if,
				strerror(-err));
			goto out;
		}
		attached = 1;
		if ((err = ns_enter(o.gen_ns)))
			goto out;
	}
	napi = napi_find(o.dut_if);
	if (napi < 0) {
		err = napi;
		goto out;
	}
	if ((err = pin_cpu(napi, o.dut_cpu))) {
		fprintf(stderr, "bench_live: cannot pin %d to CPU %d: %s\n", (int)napi, o.dut_cpu,
			strerror(-err));
		goto out;
	}
	if (o.prog_stats) {
		stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME); /* off again when it closes */
		if (stats_fd < 0)
			fprintf(stderr, "bench_live: cannot enable BPF run-time stats: %s\n",
				strerror(errno));
	}

	if ((err = gen_load(&g, &d))) {
		fprintf(stderr, "bench_live: cannot load the generator: %s\n", strerror(-err));
		goto out;
	}
	g.fd = bpf_program__fd(g.skel->progs.trafgen);
	frame_build(g.frame, gen_mac, dut_mac, o.dst, o.dport, o.tcp_flags, &csum_base);
	n_src = o.keys < MAX_SRC ? o.keys : MAX_SRC;
	g.skel->data->tg_n_keys = o.keys;
	g.skel->data->tg_n_src = n_src;
	g.skel->data->tg_src_mul = o.src_mul;
	g.skel->data->tg_sport_base = SPORT_BASE;
	g.skel->bss->tg_src_base = SRC_BASE;
	g.skel->bss->tg_csum_base = csum_base;
	g.skel->bss->tg_window = o.window;
	g.skel->data->tg_write_always = o.gen_write_always;
	g.skel->data->tg_dut_cpu = o.dut_cpu;
	g.skel->bss->tg_dut_key = 0; /* LL_PARSE_OK in ll_parse_stats and pass_parse_stats */
	g.ctx = (struct xdp_md){.data_end = FRAME_LEN, .ingress_ifindex = gen_ifindex};

	/* Warm-up: every key seen about once before the measurement (so a 1M-key
	 * run measures steady state, not bucket creation), at least warmup_s.
	 */
	g.cpu = o.gen_cpu;
	g.batch = o.batch;
	g.ncpus = d.ncpus;
	sample(&s0, &d, &g, napi, &o);
	if ((err = gen_start(&g))) {
		fprintf(stderr, "bench_live: cannot start the generator: %s\n", strerror(-err));
		goto out;
	}
	gen_running = 1;
	warm_pkts = o.keys * 1.2;
	while (!stop && !g.err) {
		double t = now_s() - s0.t;

		if (t >= o.warmup_s &&
		    (percpu_sum(d.count_fd, 0, d.ncpus) - s0.dut_pkts >= warm_pkts ||
		     t >= WARMUP_MAX_S))
			break;
		nanosleep(&(struct timespec){.tv_nsec = POLL_NS}, NULL);
	}
	sample(&s1, &d, &g, napi, &o);
	run_for(o.duration_s, &s2, &d, &g, napi, &o);
	gen_stop(&g);
	gen_running = 0;
	if ((err = g.err))
		goto out;
	/* Let the ring drain so the totals below include every frame sent. */
	usleep(100000);
	if (stop) {
		err = -EINTR;
		goto out;
	}
	machine_probe(o.dut_cpu, &clock_ns, &mem_ns, &alu_ns);
	report(&o, o.window ? "win" : "open", &d, &g, napi, &s0, &s1, &s2, clock_ns, mem_ns,
	       alu_ns);
	err = 0;
	if (o.dump && d.dp.skel) {
		int n = buckets_dump(&d, o.dump);

		if (n < 0)
			fprintf(stderr, "bench_live: cannot dump the buckets to '%s': %s\n", o.dump,
				strerror(-n));
	}
out:
	/* The program under test stays attached (the next run replaces it; the
	 * script's namespace deletion removes it), so a caller can still read
	 * the DUT's state. On failure, leave nothing half-set: detach ours.
	 */
	if (err && attached && !ns_enter(o.dut_ns))
		bpf_xdp_detach(dut_ifindex, XDP_FLAGS_DRV_MODE, NULL);
	if (gen_running)
		gen_stop(&g);
	if (stats_fd >= 0)
		close(stats_fd);
	trafgen_bpf__destroy(g.skel);
	xdpcount_bpf__destroy(d.cnt);
	keyfloor_bpf__destroy(d.kf);
	reflim_bpf__destroy(d.ref);
	pass_bpf__destroy(d.pass);
	if (d.dp.skel)
		dp_close(&d.dp);
	if (d.count_fd >= 0 && o.prog == DUT_KEEP)
		close(d.count_fd);
	if (d.limit_stats_fd >= 0 && o.prog == DUT_KEEP)
		close(d.limit_stats_fd);
	return err ? 1 : 0;
}
