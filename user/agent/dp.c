// SPDX-License-Identifier: MIT
/*
 * Loading the datapath and changing its policy. Invariants: the slot packets
 * read is never written; a slot is rewritten only after an RCU grace period
 * since it stopped being live, so no packet still reading it sees a mix.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/utsname.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/clock.h"
#include "agent/dp.h"
#include "agent/set_map.h"
#include "agent/lease.h"
#include "leaseline.skel.h"
#include "lib/log.h"
#include "agent/pins.h"
#include "tb_math.h"

/* An array-of-maps whose every update makes the kernel wait for an RCU grace
 * period (maybe_wait_bpf_programs): afterwards no XDP run that started
 * before the call is still running.
 */
static int rcu_barrier_create(void)
{
	int inner, outer;

	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ll_rcu_inner", 4, 4, 1, NULL);
	if (inner < 0)
		return -errno;
	LIBBPF_OPTS(bpf_map_create_opts, o, .inner_map_fd = inner);
	outer = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "ll_rcu", 4, 4, 1, &o);
	if (outer < 0) {
		int e = -errno;

		close(inner);
		return e;
	}
	/* The outer map holds a reference; the fd can go. Keep one entry set. */
	{
		__u32 k = 0;
		int fd = inner;

		if (bpf_map_update_elem(outer, &k, &fd, BPF_ANY)) {
			int e = -errno;

			close(inner);
			close(outer);
			return e;
		}
	}
	close(inner);
	return outer;
}

static int rcu_barrier_wait(int rcu_fd)
{
	__u32 k = 0;
	int inner, err;

	/* Re-inserting any inner map works; create a throwaway one. */
	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ll_rcu_inner", 4, 4, 1, NULL);
	if (inner < 0)
		return -errno;
	err = bpf_map_update_elem(rcu_fd, &k, &inner, BPF_ANY) ? -errno : 0;
	close(inner);
	return err;
}

/* Map ll_fill and set each bucket map's pressure mark and capacity from
 * its size (re-adopted pins keep their counts).
 */
static int fill_init(struct dp *dp)
{
	const struct bpf_map *bm[LL_FILL_MAPS] = {dp->skel->maps.ll_buckets,
						  dp->skel->maps.ll_flow_buckets};
	void *p = mmap(NULL, LL_FILL_MAPS * sizeof(struct ll_fill), PROT_READ | PROT_WRITE,
		       MAP_SHARED, bpf_map__fd(dp->skel->maps.ll_fill), 0);

	if (p == MAP_FAILED)
		return -errno;
	dp->fill = p;
	for (unsigned int i = 0; i < LL_FILL_MAPS; i++) {
		uint64_t cap = bpf_map__max_entries(bm[i]);

		__atomic_store_n(&dp->fill[i].cap, cap, __ATOMIC_RELAXED);
		__atomic_store_n(&dp->fill[i].mark, cap * LL_PRESSURE_NUM >> LL_PRESSURE_SHIFT,
				 __ATOMIC_RELAXED);
	}
	return 0;
}

void dp_fill_add(struct dp *dp, unsigned int which, int64_t delta)
{
	if (dp->fill && which < LL_FILL_MAPS)
		__atomic_fetch_add(&dp->fill[which].live, (uint64_t)delta, __ATOMIC_RELAXED);
}

/* What the XDP program calls that not every kernel has, oldest first, with
 * the release that brought it. A kernel without one would refuse the program
 * with a verifier log; it is told instead, in one line, before the load.
 */
static const struct {
	enum bpf_func_id id;
	const char *name, *since;
} needed_helpers[] = {
    {BPF_FUNC_spin_lock, "bpf_spin_lock", "5.1"},
    {BPF_FUNC_ringbuf_output, "bpf_ringbuf_output", "5.8"},
    {BPF_FUNC_ktime_get_coarse_ns, "bpf_ktime_get_coarse_ns", "5.11"},
    {BPF_FUNC_loop, "bpf_loop", "5.17"},
};

/* The oldest release whose helpers the program needs: the floor. */
#define DP_KERNEL_FLOOR "5.17"

static void kernel_name(char *buf, size_t len)
{
	struct utsname u;

	snprintf(buf, len, "Linux %s", uname(&u) ? "?" : u.release);
}

int dp_kernel_check(char *why, size_t len)
{
	char k[sizeof(((struct dp *)0)->kernel)], missing[160] = "";
	size_t n = 0, nmiss = 0;

	kernel_name(k, sizeof(k));
	for (size_t i = 0; i < sizeof(needed_helpers) / sizeof(needed_helpers[0]); i++) {
		/* 1: there; 0: not; < 0: the probe itself failed (no BPF at all,
		 * or no privilege): the load then says what is wrong.
		 */
		if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_XDP, needed_helpers[i].id, NULL) != 0)
			continue;
		if (n < sizeof(missing))
			n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%s (Linux %s)",
					      nmiss ? ", " : "", needed_helpers[i].name,
					      needed_helpers[i].since);
		nmiss++;
	}
	if (!nmiss)
		return 0;
	snprintf(why, len,
		 "%s lacks the BPF helper%s %s: leaseline needs Linux " DP_KERNEL_FLOOR
		 " or later; upgrade the kernel (Debian 12's own, 6.1, runs it)",
		 k, nmiss > 1 ? "s" : "", missing);
	return -EOPNOTSUPP;
}

/* The verifier's work and the load's time, for the log (and the kernel
 * matrix, tests/kernels/README.md, which reads this line).
 */
static void load_report(struct dp *dp, uint64_t t0)
{
	struct bpf_prog_info pi;
	__u32 plen = sizeof(pi);

	memset(&pi, 0, sizeof(pi));
	kernel_name(dp->kernel, sizeof(dp->kernel));
	dp->load_ms = (clock_now_ns() - t0) / 1000000;
	if (!bpf_obj_get_info_by_fd(dp->prog_fd, &pi, &plen))
		dp->verified_insns = pi.verified_insns;
	pr_info("%s: the XDP program loads in %llu ms, %u instructions verified\n", dp->kernel,
		(unsigned long long)dp->load_ms, dp->verified_insns);
}

/* The maps of the program `id` that are not pinned (ll_hot, the scratch
 * and per-CPU maps, .rodata), taken over by the skeleton about to load, so
 * that it loads as the same program on the same maps (attach.c keeps a
 * multiprog program then, rather than adding a second one with a ring
 * buffer nobody reads). All or nothing: a map of another shape, or a
 * .rodata of other bytes (another clock setting), and nothing is taken.
 */
/* Map fd (of the old program's) that can stand for m: same name, shape and
 * (for a map with an initial value: .rodata) the same bytes; -1 if none.
 */
static int adopt_match(const struct bpf_map *m, const int *fds, int n)
{
	for (int i = 0; i < n; i++) {
		struct bpf_map_info mi;
		__u32 ml = sizeof(mi);
		const void *init;
		size_t sz = 0;

		memset(&mi, 0, sizeof(mi));
		if (bpf_obj_get_info_by_fd(fds[i], &mi, &ml) ||
		    strncmp(mi.name, bpf_map__name(m), BPF_OBJ_NAME_LEN - 1) ||
		    mi.type != bpf_map__type(m) || mi.key_size != bpf_map__key_size(m) ||
		    mi.value_size != bpf_map__value_size(m) ||
		    mi.max_entries != bpf_map__max_entries(m))
			continue;
		init = bpf_map__initial_value((struct bpf_map *)m, &sz);
		if (init && sz) {
			char *cur = malloc(sz);
			__u32 k = 0;
			bool same =
			    cur && !bpf_map_lookup_elem(fds[i], &k, cur) && !memcmp(cur, init, sz);

			free(cur);
			if (!same)
				continue;
		}
		return fds[i];
	}
	return -1;
}

/* The maps of the program `id` that are not pinned (ll_hot, the scratch
 * and per-CPU maps, .rodata), taken over by the skeleton about to load, so
 * that it loads as the same program on the same maps (attach.c keeps a
 * multiprog program then, rather than adding a second one beside a ring
 * buffer nobody reads). All or nothing: a map of another shape, or a
 * .rodata of other bytes (another clock setting), and nothing is taken.
 */
#define ADOPT_MAX 64
static void adopt_unpinned(struct dp *dp, uint32_t id)
{
	int fds[ADOPT_MAX], use[ADOPT_MAX], n = 0, want = 0, got = 0, j = 0, pfd;
	struct bpf_map *m, *maps[ADOPT_MAX];
	uint32_t ids[ADOPT_MAX];
	struct bpf_prog_info pi;
	__u32 len = sizeof(pi);

	pfd = bpf_prog_get_fd_by_id(id);
	if (pfd < 0)
		return;
	memset(&pi, 0, sizeof(pi));
	pi.nr_map_ids = ADOPT_MAX;
	pi.map_ids = (__u64)(unsigned long)ids;
	if (bpf_obj_get_info_by_fd(pfd, &pi, &len) || pi.nr_map_ids > ADOPT_MAX)
		pi.nr_map_ids = 0;
	close(pfd);
	for (uint32_t i = 0; i < pi.nr_map_ids; i++) {
		int fd = bpf_map_get_fd_by_id(ids[i]);

		if (fd >= 0)
			fds[n++] = fd;
	}
	bpf_object__for_each_map(m, dp->skel->obj)
	{
		if (bpf_map__pin_path(m) || want == ADOPT_MAX)
			continue;
		maps[want] = m;
		use[want] = adopt_match(m, fds, n);
		got += use[want] >= 0;
		want++;
	}
	if (n && got == want) {
		for (j = 0; j < want && !bpf_map__reuse_fd(maps[j], use[j]); j++)
			;
		pr_debug("took over %d of %d unpinned maps of program id %u\n", j, want, id);
	} else {
		pr_debug("program id %u: %d of %d unpinned maps match; none taken over\n", id, got,
			 want);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

int dp_open(struct dp *dp, const struct dp_opts *opts)
{
	char why[320];
	uint64_t t0;
	struct pins_plan plan = {};
	struct bpf_map *map;
	uint32_t prefixes;
	int err;

	memset(dp, 0, sizeof(*dp));
	dp->rcu_fd = -1;
	err = dp_kernel_check(why, sizeof(why));
	if (err) {
		pr_warn("%s\n", why);
		return err;
	}
	dp->ncpus = libbpf_num_possible_cpus();
	LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = opts->pin_dir);
	dp->skel = leaseline_bpf__open_opts(&oo);
	if (!dp->skel) {
		err = -errno;
		pr_warn("cannot open the BPF object: %s\n", strerror(-err));
		return err;
	}
	if (!opts->pin_dir)
		bpf_object__for_each_map(map, dp->skel->obj)
			bpf_map__set_pin_path(map, NULL);
	/* One overflow bucket per limit comes on top of max-keys. */
	if (opts->max_keys)
		bpf_map__set_max_entries(dp->skel->maps.ll_buckets, opts->max_keys + LL_MAX_LIMITS);
	if (opts->flow_keys_set || opts->max_keys)
		bpf_map__set_max_entries(
		    dp->skel->maps.ll_flow_buckets,
		    (opts->flow_keys_set ? opts->max_flow_keys : opts->max_keys) + LL_MAX_LIMITS);
	/* One overflow entry per limit comes on top of the keys. */
	bpf_map__set_max_entries(dp->skel->maps.ll_meter,
				 (opts->max_meter_keys ? opts->max_meter_keys : LL_MAX_METER_KEYS) +
				     LL_MAX_LIMITS);
	bpf_map__set_max_entries(dp->skel->maps.ll_meter_k,
				 (opts->max_meter_keys ? opts->max_meter_keys : LL_MAX_METER_KEYS) +
				     LL_MAX_LIMITS);
	/* Fallback buckets: one per prefix new keys come from under pressure. */
	prefixes = bpf_map__max_entries(dp->skel->maps.ll_buckets);
	if (bpf_map__max_entries(dp->skel->maps.ll_flow_buckets) > prefixes)
		prefixes = bpf_map__max_entries(dp->skel->maps.ll_flow_buckets);
	prefixes /= LL_PREFIX_DIV;
	bpf_map__set_max_entries(dp->skel->maps.ll_prefix_buckets,
				 prefixes > LL_PREFIX_MIN ? prefixes : LL_PREFIX_MIN);

	dp->skel->rodata->ll_clock_precise = opts->precise_clock;
	if (opts->adopt_prog_id && opts->pin_dir)
		adopt_unpinned(dp, opts->adopt_prog_id);

	/* Pins of another layout are refused here, before libbpf would re-create
	 * a missing one beside them; bucket maps of another size are set aside.
	 */
	if (opts->pin_dir) {
		err = pins_prepare(dp->skel->obj, opts->pin_dir, &plan);
		if (err)
			goto fail;
	}
	t0 = clock_now_ns();
	err = leaseline_bpf__load(dp->skel);
	if (err) {
		pr_warn("cannot load the BPF program: %s (the verifier log, if any, is above)\n",
			strerror(-err));
		goto fail;
	}
	if (opts->pin_dir) {
		err = pins_finish(dp->skel->obj, opts->pin_dir, &plan);
		if (err)
			goto fail;
	}
	dp->prog_fd = bpf_program__fd(dp->skel->progs.leaseline);
	load_report(dp, t0);
	dp->policy_fd = bpf_map__fd(dp->skel->maps.ll_policy);
	dp->state_fd = bpf_map__fd(dp->skel->maps.ll_state);
	dp->buckets_fd = bpf_map__fd(dp->skel->maps.ll_buckets);
	dp->flow_buckets_fd = bpf_map__fd(dp->skel->maps.ll_flow_buckets);
	dp->flow_capacity = bpf_map__max_entries(dp->skel->maps.ll_flow_buckets);
	dp->pools_fd = bpf_map__fd(dp->skel->maps.ll_pools);
	dp->slices_fd = bpf_map__fd(dp->skel->maps.ll_slices);
	dp->limit_stats_fd = bpf_map__fd(dp->skel->maps.ll_limit_stats);
	dp->rule_stats_fd = bpf_map__fd(dp->skel->maps.ll_rule_stats);
	dp->parse_stats_fd = bpf_map__fd(dp->skel->maps.ll_parse_stats);
	dp->leases_fd = bpf_map__fd(dp->skel->maps.ll_leases);
	dp->fence_fd = bpf_map__fd(dp->skel->maps.ll_fence);
	dp->key_grants_fd = bpf_map__fd(dp->skel->maps.ll_key_grants);
	dp->overrides_fd = bpf_map__fd(dp->skel->maps.ll_overrides);
	dp->sets_fd = bpf_map__fd(dp->skel->maps.ll_sets);
	dp->hot_fd = bpf_map__fd(dp->skel->maps.ll_hot);
	dp->prefix_buckets_fd = bpf_map__fd(dp->skel->maps.ll_prefix_buckets);
	dp->meter_fd = bpf_map__fd(dp->skel->maps.ll_meter);
	dp->meter_k_fd = bpf_map__fd(dp->skel->maps.ll_meter_k);
	dp->meter_info_fd = bpf_map__fd(dp->skel->maps.ll_meter_info);
	dp->meter_capacity = bpf_map__max_entries(dp->skel->maps.ll_meter);
	err = dp_meter_ident(dp);
	if (err) {
		pr_warn("cannot set up per-key metering: %s\n", strerror(-err));
		goto fail;
	}
	err = fill_init(dp);
	if (err) {
		pr_warn("cannot map ll_fill: %s\n", strerror(-err));
		goto fail;
	}
	dp->rcu_fd = rcu_barrier_create();
	if (dp->rcu_fd < 0) {
		err = dp->rcu_fd;
		pr_warn("cannot create the RCU barrier map: %s\n", strerror(-err));
		goto fail;
	}
	return 0;
fail:
	pins_plan_free(&plan);
	dp_close(dp);
	return err;
}

void dp_close(struct dp *dp)
{
	if (dp->fill)
		munmap(dp->fill, LL_FILL_MAPS * sizeof(struct ll_fill));
	dp->fill = NULL;
	if (dp->rcu_fd >= 0)
		close(dp->rcu_fd);
	dp->rcu_fd = -1;
	set_map_free(dp);
	leaseline_bpf__destroy(dp->skel);
	dp->skel = NULL;
}

int dp_meter_info_read(struct dp *dp, struct ll_meter_info *info)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(dp->meter_info_fd, &k, info) ? -errno : 0;
}

int dp_meter_ident(struct dp *dp)
{
	struct ll_meter_info info = {0};
	struct ll_flow_key k, next;
	struct timespec ts;
	__u32 z = 0;
	int err = dp_meter_info_read(dp, &info);

	if (err)
		return err;
	if (info.ident) {
		dp->meter_ident = info.ident;
		return 0;
	}
	/* New pins (or never metered): whatever ll_meter holds predates this
	 * identity, so it goes; then totals under the identity only grow.
	 */
	while (!bpf_map_get_next_key(dp->meter_fd, NULL, &next)) {
		k = next;
		if (bpf_map_delete_elem(dp->meter_fd, &k) && errno != ENOENT)
			return -errno;
	}
	{
		struct ll_key kk, knext;

		while (!bpf_map_get_next_key(dp->meter_k_fd, NULL, &knext)) {
			kk = knext;
			if (bpf_map_delete_elem(dp->meter_k_fd, &kk) && errno != ENOENT)
				return -errno;
		}
	}
	while (!info.ident)
		if (getrandom(&info.ident, sizeof(info.ident), 0) != (ssize_t)sizeof(info.ident))
			return -EIO;
	clock_gettime(CLOCK_REALTIME, &ts);
	info.created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (bpf_map_update_elem(dp->meter_info_fd, &z, &info, BPF_ANY))
		return -errno;
	dp->meter_ident = info.ident;
	return 0;
}

/* Append one entry (its per-CPU values summed) to the growing arrays. */
static int meter_push(struct ll_flow_key **ks, struct ll_meter **vs, size_t *got, size_t *cap,
		      const struct ll_flow_key *k, const struct ll_meter *pc, unsigned int ncpus)
{
	struct ll_meter sum = {0};

	for (unsigned int c = 0; c < ncpus; c++) {
		for (int i = 0; i < LL_METER_CLASSES; i++) {
			sum.pkts[i] += pc[c].pkts[i];
			sum.bytes[i] += pc[c].bytes[i];
		}
		sum.born = pc[c].born > sum.born ? pc[c].born : sum.born;
	}
	if (*got == *cap) {
		size_t nc = *cap ? 2 * *cap : 1024;
		void *a = realloc(*ks, nc * sizeof(**ks)), *b;

		if (!a)
			return -ENOMEM;
		*ks = a;
		b = realloc(*vs, nc * sizeof(**vs));
		if (!b)
			return -ENOMEM;
		*vs = b;
		*cap = nc;
	}
	(*ks)[*got] = *k;
	(*vs)[*got] = sum;
	(*got)++;
	return 0;
}

/* Entries per batch lookup: one syscall for this many keys. */
#define METER_READ_BATCH 4096

/* An ll_key (ll_meter_k's key) as the ll_flow_key every series is named by:
 * what key_as_flow_key makes in the datapath.
 */
static void meter_key_widen(struct ll_flow_key *fk, const struct ll_key *k)
{
	memset(fk, 0, sizeof(*fk));
	fk->limit_uid = k->limit_uid;
	fk->proto = k->proto;
	fk->family = k->family;
	fk->dport = k->dport;
	memcpy(fk->addr, k->addr, sizeof(fk->addr));
}

/* The ll_key of a series named by fk, if it can be one (no flow fields). */
static bool meter_key_narrow(const struct ll_flow_key *fk, struct ll_key *k)
{
	if (fk->sport || fk->pad0 || fk->addr2[0] || fk->addr2[1] || fk->addr2[2] ||
	    fk->addr2[3])
		return false;
	memset(k, 0, sizeof(*k));
	k->limit_uid = fk->limit_uid;
	k->proto = fk->proto;
	k->family = fk->family;
	k->dport = fk->dport;
	memcpy(k->addr, fk->addr, sizeof(k->addr));
	return true;
}

int dp_meter_delete(struct dp *dp, const struct ll_flow_key *fk, struct ll_meter *pc)
{
	struct ll_key k;

	if (meter_key_narrow(fk, &k) &&
	    !(pc ? bpf_map_lookup_and_delete_elem(dp->meter_k_fd, &k, pc)
		 : bpf_map_delete_elem(dp->meter_k_fd, &k)))
		return 0;
	if (!(pc ? bpf_map_lookup_and_delete_elem(dp->meter_fd, fk, pc)
		 : bpf_map_delete_elem(dp->meter_fd, fk)))
		return 0;
	return -errno;
}

/* Every entry of one meter map (keys of key_size bytes) onto the arrays. */
static int meter_read_map(struct dp *dp, int fd, size_t key_size, struct ll_flow_key **ks,
			  struct ll_meter **vs, size_t *got, size_t *cap)
{
	unsigned char *bk = malloc(METER_READ_BATCH * key_size), k[sizeof(struct ll_flow_key)],
		      next[sizeof(struct ll_flow_key)];
	struct ll_meter *bv = calloc((size_t)METER_READ_BATCH * dp->ncpus, sizeof(*bv));
	bool first = true, batched = true;
	__u32 in_b = 0, out_b = 0;
	int err = bk && bv ? 0 : -ENOMEM;
	struct ll_flow_key fk;

	/* One syscall per METER_READ_BATCH keys (a key a syscall costs the
	 * agent 100k syscalls a second at 100k keys); the whole map, without
	 * the per-key walk's misses when keys come and go meanwhile.
	 */
	while (!err && batched) {
		__u32 count = METER_READ_BATCH;
		int r = bpf_map_lookup_batch(fd, first ? NULL : &in_b, &out_b, bk, bv, &count,
					     NULL);
		int e = r ? errno : 0;

		if (r && e != ENOENT) {
			if (first && (e == EINVAL || e == ENOTSUP || e == EOPNOTSUPP)) {
				batched = false; /* an older kernel: key by key below */
				break;
			}
			err = -e;
			break;
		}
		for (__u32 i = 0; !err && i < count; i++) {
			if (key_size == sizeof(fk))
				memcpy(&fk, bk + (size_t)i * key_size, sizeof(fk));
			else
				meter_key_widen(&fk, (const struct ll_key *)(bk + (size_t)i * key_size));
			err = meter_push(ks, vs, got, cap, &fk, &bv[(size_t)i * dp->ncpus],
					 dp->ncpus);
		}
		first = false;
		in_b = out_b;
		if (e == ENOENT)
			break;
	}
	first = true;
	while (!err && !batched && !bpf_map_get_next_key(fd, first ? NULL : k, next)) {
		first = false;
		memcpy(k, next, key_size);
		if (bpf_map_lookup_elem(fd, k, bv))
			continue; /* deleted meanwhile */
		if (key_size == sizeof(fk))
			memcpy(&fk, k, sizeof(fk));
		else
			meter_key_widen(&fk, (const struct ll_key *)k);
		err = meter_push(ks, vs, got, cap, &fk, bv, dp->ncpus);
	}
	free(bk);
	free(bv);
	return err;
}

int dp_meter_read(struct dp *dp, struct ll_flow_key **keys, struct ll_meter **vals, size_t *n)
{
	struct ll_flow_key *ks = NULL;
	struct ll_meter *vs = NULL;
	size_t got = 0, cap = 0;
	int err = meter_read_map(dp, dp->meter_fd, sizeof(struct ll_flow_key), &ks, &vs, &got, &cap);

	if (!err)
		err = meter_read_map(dp, dp->meter_k_fd, sizeof(struct ll_key), &ks, &vs, &got,
				     &cap);
	*keys = NULL;
	*vals = NULL;
	*n = 0;
	if (err) {
		free(ks);
		free(vs);
		return err;
	}
	*keys = ks;
	*vals = vs;
	*n = got;
	return 0;
}

int dp_state_read(int state_fd, struct ll_state *st)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(state_fd, &k, st) ? -errno : 0;
}

int dp_policy_read(int policy_fd, int state_fd, struct ll_policy *pol)
{
	struct ll_state st;
	__u32 slot;
	int err = dp_state_read(state_fd, &st);

	if (err)
		return err;
	slot = st.active_slot & (LL_POLICY_SLOTS - 1);
	return bpf_map_lookup_elem(policy_fd, &slot, pol) ? -errno : 0;
}

/* Fresh state for limits that did not exist before: a full pool, zero
 * counters, and the shared overflow bucket keys use when neither ll_buckets
 * nor ll_prefix_buckets has room (counted in ll_fill, as a bucket).
 */
static int limits_init_each(struct dp *dp, const struct ll_policy *pol,
			    const struct ll_policy *prev, uint64_t now, void *zero_stats)
{
	for (__u32 id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_bucket b = {.gen = l->gen, .tokens = l->burst_s, .last_ns = now};
		/* A global limit's pool starts empty: a share is spent only as leased,
		 * and a gateway that lost its pins must not spend a second burst.
		 */
		struct ll_pool p = {.gen = l->gen,
				    .tokens = l->scope == LL_SCOPE_GLOBAL ? 0 : l->burst_s,
				    .last_ns = now};
		struct ll_key k = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		struct ll_flow_key fk = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		int flow = l->key_mode == LL_KEY_FLOW;

		if (!l->in_use || (prev->limits[id].in_use && prev->limits[id].uid == l->uid))
			continue;
		if (bpf_map_update_elem(dp->pools_fd, &id, &p, BPF_ANY))
			return -errno;
		/* The id may have served a removed limit: its counters are not ours. */
		if (bpf_map_update_elem(dp->limit_stats_fd, &id, zero_stats, BPF_ANY))
			return -errno;
		if (l->key_mode == LL_KEY_NONE)
			continue;
		if (!bpf_map_update_elem(flow ? dp->flow_buckets_fd : dp->buckets_fd,
					 flow ? (void *)&fk : (void *)&k, &b, BPF_NOEXIST))
			dp_fill_add(dp, flow ? LL_FILL_FLOWS : LL_FILL_KEYS, 1);
		else if (errno != EEXIST)
			return -errno;
	}
	return 0;
}

/* Each metered limit's overflow entry in ll_meter, before its first packet
 * is metered: a key that finds the map full is counted there. Entries of a
 * limit metered before keep their totals (EEXIST). A full map leaves the
 * limit without one: its keys that find no room count as lost.
 */
static int meter_overflow_init(struct dp *dp, const struct ll_policy *pol)
{
	struct ll_meter *zero = calloc(dp->ncpus, sizeof(*zero));
	struct timespec ts;
	int err = zero ? 0 : -ENOMEM;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (zero)
		zero[0].born = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;

	for (__u32 id = 0; !err && id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_flow_key fk = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		struct ll_key k = {.limit_uid = l->uid, .family = LL_OVERFLOW_FAMILY};
		bool flow = l->key_mode == LL_KEY_FLOW;

		if (!l->in_use || !(l->flags & LL_LIM_METER))
			continue;
		if (bpf_map_update_elem(flow ? dp->meter_fd : dp->meter_k_fd,
					flow ? (const void *)&fk : (const void *)&k, zero,
					BPF_NOEXIST) &&
		    errno != EEXIST) {
			if (errno != E2BIG)
				err = -errno;
			else
				pr_warn("ll_meter is full: limit '%s' has no overflow entry\n",
					l->name);
		}
	}
	free(zero);
	return err;
}

static int limits_init(struct dp *dp, const struct ll_policy *pol, const struct ll_policy *prev,
		       uint64_t now)
{
	void *zero_stats = calloc(dp->ncpus, sizeof(struct ll_limit_stats));
	int err = zero_stats ? limits_init_each(dp, pol, prev, now, zero_stats) : -ENOMEM;

	if (!err)
		err = meter_overflow_init(dp, pol);

	free(zero_stats);
	return err;
}

int dp_policy_commit(struct dp *dp, const struct ll_policy *pol, const struct ll_policy *prev,
		     const struct ll_lease *leases, struct ll_state *st, uint64_t now,
		     const char **stage)
{
	__u32 next_slot, k = 0;
	int ret;

	*stage = "cannot initialise limit state";
	ret = limits_init(dp, pol, prev, now);
	for (__u32 id = 0; !ret && id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use && pol->limits[id].scope == LL_SCOPE_GLOBAL &&
		    bpf_map_update_elem(dp->leases_fd, &id, &leases[id], BPF_F_LOCK))
			ret = -errno;
	if (ret)
		return ret;
	/* The inactive slot stopped being live at the previous flip; wait until
	 * no packet can still be reading it, then write it whole.
	 */
	*stage = "cannot write the policy";
	ret = rcu_barrier_wait(dp->rcu_fd);
	next_slot = prev->version ? (st->active_slot + 1) & (LL_POLICY_SLOTS - 1) : st->active_slot;
	if (!ret && bpf_map_update_elem(dp->policy_fd, &next_slot, pol, BPF_ANY))
		ret = -errno;
	if (ret)
		return ret;
	*stage = "cannot switch to the new policy";
	st->active_slot = next_slot;
	st->version = pol->version;
	st->applied_ns = now;
	st->applies++;
	return bpf_map_update_elem(dp->state_fd, &k, st, BPF_ANY) ? -errno : 0;
}

/* Reap idle keys only once the map is this full (numerator / 2^shift):
 * below it an idle full bucket costs nothing, and not deleting it avoids
 * the read-then-delete race (docs/design.md, Eviction). The datapath's
 * pressure mark (ll_fill) is the same fraction.
 */
#define REAP_PRESSURE_NUM   LL_PRESSURE_NUM
#define REAP_PRESSURE_SHIFT LL_PRESSURE_SHIFT
/* An idle bucket is deleted only after this long without a packet: deleting
 * a key that comes back soon only buys it a trip through the slow path.
 */
#define REAP_MIN_IDLE_NS (10 * NSEC_PER_SEC)

enum reap_class { REAP_KEEP, REAP_IDLE, REAP_GONE };

/* What a limit's buckets are charged with now: the policy's parameters, or
 * for a global limit its live lease's share; a dead lease keeps every
 * bucket (idle = false).
 */
struct reap_share {
	bool idle_ok;
	uint32_t gen;
	struct tb_params cur;
};

static void reap_shares(struct dp *dp, const struct ll_policy *pol, uint64_t now,
			struct reap_share *sh)
{
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *l = &pol->limits[id];
		struct ll_lease ls;

		sh[id] = (struct reap_share){true, l->gen, {l->rate, l->burst_s, l->fill_ns}};
		if (!l->in_use || l->scope != LL_SCOPE_GLOBAL || l->key_mode == LL_KEY_NONE)
			continue;
		if (dp_lease_read(dp, id, &ls) || now >= ls.expiry_ns)
			sh[id].idle_ok = false;
		else
			sh[id] =
			    (struct reap_share){true, ls.gen, {ls.rate, ls.burst_s, ls.fill_ns}};
	}
}

/* The policy's limits by uid, sorted: a bucket finds its limit in log2(n)
 * steps, not a walk of all LL_MAX_LIMITS slots (at 256 slots that walk was
 * most of a reap pass).
 */
struct reap_uid {
	uint32_t uid;
	uint32_t id;
};

static int reap_uid_cmp(const void *a, const void *b)
{
	const struct reap_uid *x = a, *y = b;

	return x->uid < y->uid ? -1 : x->uid > y->uid;
}

static size_t reap_uids(const struct ll_policy *pol, struct reap_uid *u)
{
	size_t n = 0;

	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use)
			u[n++] = (struct reap_uid){pol->limits[id].uid, id};
	qsort(u, n, sizeof(*u), reap_uid_cmp);
	return n;
}

/* A bucket deleted now would come back full on the next packet; delete only
 * when it is full anyway (REAP_IDLE) or its limit is gone (REAP_GONE).
 */
static enum reap_class bucket_class(const struct ll_policy *pol, const struct reap_share *sh,
				    const struct reap_uid *uids, size_t n_uids,
				    const struct ll_key_head *k, const struct ll_bucket *b,
				    uint64_t now)
{
	/* "Full" as of the earliest clock a packet may be charged with: the
	 * datapath's lags CLOCK_MONOTONIC (bpf/clock.h), and a bucket full only
	 * by this clock would come back full, a gift of up to rate x lag.
	 */
	uint64_t pnow = now > LL_COARSE_SLACK_NS ? now - LL_COARSE_SLACK_NS : 0;

	struct reap_uid want = {.uid = k->limit_uid};
	const struct reap_uid *u = bsearch(&want, uids, n_uids, sizeof(*uids), reap_uid_cmp);

	if (u) {
		uint32_t i = u->id;
		const struct ll_limit_cfg *l = &pol->limits[i];

		if (k->family == LL_OVERFLOW_FAMILY || now < b->last_ns + REAP_MIN_IDLE_NS)
			return REAP_KEEP; /* overflow stays */
		/* A key charged with its override: the contract it carries. */
		if (l->scope == LL_SCOPE_LOCAL && (l->flags & LL_LIM_OVERRIDES) && b->o_gen &&
		    b->gen == b->o_gen && b->kg_seen == l->ov_ver) {
			struct tb_params o = {b->o_rate, b->o_burst_s, b->o_fill_ns};

			return tb_refill(b->tokens, b->last_ns, pnow, &o) >= o.burst_s ? REAP_IDLE
										       : REAP_KEEP;
		}
		if (!sh[i].idle_ok || b->gen != sh[i].gen)
			return REAP_KEEP; /* let the datapath settle first */
		return tb_refill(b->tokens, b->last_ns, pnow, &sh[i].cur) >= sh[i].cur.burst_s
			   ? REAP_IDLE
			   : REAP_KEEP;
	}
	return REAP_GONE;
}

/* Keys of one bucket map, key_size bytes each. */
struct reap_list {
	unsigned char *keys;
	size_t n, cap, key_size;
};

static int reap_list_add(struct reap_list *l, const void *k)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		unsigned char *nk = realloc(l->keys, cap * l->key_size);

		if (!nk)
			return -ENOMEM;
		l->keys = nk;
		l->cap = cap;
	}
	memcpy(l->keys + l->n++ * l->key_size, k, l->key_size);
	return 0;
}

#define BUCKETS_BATCH 4096

int dp_buckets_walk(int fd, size_t key_size,
		    int (*fn)(void *ctx, const void *key, const struct ll_bucket *b), void *ctx)
{
	unsigned char *keys = calloc(BUCKETS_BATCH, key_size);
	struct ll_bucket *vals = calloc(BUCKETS_BATCH, sizeof(*vals));
	struct ll_flow_key batch_out; /* the larger key */
	void *in = NULL;
	int err = 0;

	LIBBPF_OPTS(bpf_map_batch_opts, bo, .elem_flags = BPF_F_LOCK);
	if (!keys || !vals) {
		err = -ENOMEM;
		goto out;
	}
	for (;;) {
		__u32 cnt = BUCKETS_BATCH;
		int r = bpf_map_lookup_batch(fd, in, &batch_out, keys, vals, &cnt, &bo);

		if (r && errno != ENOENT) {
			err = -errno;
			break;
		}
		for (__u32 i = 0; i < cnt && !err; i++)
			err = fn(ctx, keys + i * key_size, &vals[i]);
		if (r || err)
			break; /* ENOENT: that was the last batch */
		in = &batch_out;
	}
out:
	free(keys);
	free(vals);
	return err;
}

struct reap_scan {
	const struct ll_policy *pol;
	const struct reap_share *sh;
	const struct reap_uid *uids;
	size_t n_uids;
	uint64_t now;
	struct reap_list *idle, *gone;
	size_t total;
};

/* Classify one bucket, count it. */
static int reap_one(void *ctx, const void *k, const struct ll_bucket *b)
{
	struct reap_scan *rs = ctx;
	enum reap_class c = bucket_class(rs->pol, rs->sh, rs->uids, rs->n_uids, k, b, rs->now);

	rs->total++;
	if (c == REAP_IDLE)
		return reap_list_add(rs->idle, k);
	if (c == REAP_GONE)
		return reap_list_add(rs->gone, k);
	return 0;
}

static int reap_delete(int fd, const struct reap_list *l)
{
	int n = 0;

	for (size_t i = 0; i < l->n; i++)
		n += !bpf_map_delete_elem(fd, l->keys + i * l->key_size);
	return n;
}

/* Reap one bucket map and, when it has an ll_fill entry (fill <
 * LL_FILL_MAPS), correct that count. Returns how many buckets it deleted,
 * or -errno.
 *
 * The count: the buckets this pass saw, less those it deleted, plus those
 * the datapath added since the pass began (what the entry gained since it
 * was read at the start). Adding that difference atomically loses no
 * datapath add; a bucket created during the scan that the scan also saw is
 * counted twice until the next pass: too high, so pressure comes early,
 * never late.
 */
static int reap_map(struct dp *dp, int fd, const struct bpf_map *map, unsigned int fill,
		    const struct ll_policy *pol, const struct reap_share *sh,
		    const struct reap_uid *uids, size_t n_uids, uint64_t now)
{
	size_t ks = bpf_map__key_size(map);
	struct reap_list idle = {.key_size = ks}, gone = {.key_size = ks};
	uint64_t before = fill < LL_FILL_MAPS && dp->fill
			      ? __atomic_load_n(&dp->fill[fill].live, __ATOMIC_RELAXED)
			      : 0;
	struct reap_scan rs = {pol, sh, uids, n_uids, now, &idle, &gone, 0};
	int err = dp_buckets_walk(fd, ks, reap_one, &rs);

	if (!err) {
		err = reap_delete(fd, &gone);
		if (rs.total << REAP_PRESSURE_SHIFT > bpf_map__max_entries(map) * REAP_PRESSURE_NUM)
			err += reap_delete(fd, &idle);
		dp_fill_add(dp, fill, (int64_t)(rs.total - (size_t)err) - (int64_t)before);
	}
	free(idle.keys);
	free(gone.keys);
	return err;
}

/* Per-key grants of limits that are no longer global per-key limits of the
 * policy: nothing reads them any more.
 */
static int key_grants_reap(struct dp *dp, const struct ll_policy *pol, const struct reap_uid *uids,
			   size_t n_uids)
{
	struct ll_flow_key k, next, *prev = NULL;
	int n = 0;

	while (!bpf_map_get_next_key(dp->key_grants_fd, prev, &next)) {
		struct reap_uid want;
		const struct reap_uid *u;
		bool live;

		k = next;
		prev = &k;
		want.uid = k.limit_uid;
		u = bsearch(&want, uids, n_uids, sizeof(*uids), reap_uid_cmp);
		live = u && pol->limits[u->id].scope == LL_SCOPE_GLOBAL &&
		       pol->limits[u->id].key_mode != LL_KEY_NONE;
		if (!live && !bpf_map_delete_elem(dp->key_grants_fd, &k)) {
			n++;
			prev = NULL; /* the walk restarts: the deleted key is no cursor */
		}
	}
	return n;
}

int dp_buckets_reap(struct dp *dp, uint64_t now)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct reap_share sh[LL_MAX_LIMITS];
	struct reap_uid uids[LL_MAX_LIMITS];
	size_t nu = 0;
	int err, n = 0;

	if (!pol)
		return -ENOMEM;
	err = dp_policy_read(dp->policy_fd, dp->state_fd, pol);
	if (!err) {
		reap_shares(dp, pol, now, sh);
		nu = reap_uids(pol, uids);
		err = reap_map(dp, dp->buckets_fd, dp->skel->maps.ll_buckets, LL_FILL_KEYS, pol, sh,
			       uids, nu, now);
	}
	if (err >= 0) {
		n = err;
		err = reap_map(dp, dp->flow_buckets_fd, dp->skel->maps.ll_flow_buckets,
			       LL_FILL_FLOWS, pol, sh, uids, nu, now);
	}
	if (err >= 0) {
		n += err;
		err = reap_map(dp, dp->prefix_buckets_fd, dp->skel->maps.ll_prefix_buckets,
			       LL_FILL_MAPS, pol, sh, uids, nu, now);
	}
	if (err >= 0) {
		n += err;
		err = key_grants_reap(dp, pol, uids, nu);
	}
	free(pol);
	return err < 0 ? err : n + err;
}

int dp_fence_read(struct dp *dp, struct ll_fence *f)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(dp->fence_fd, &k, f) ? -errno : 0;
}

int dp_refusal_note(struct dp *dp, uint64_t version, const char *why, uint64_t now)
{
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	st.refusals++;
	st.refused_version = version;
	st.refused_ns = now;
	snprintf(st.refused_why, sizeof(st.refused_why), "%s", why);
	return bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY) ? -errno : 0;
}

int dp_link_stats_write(struct dp *dp, const struct ll_state *from)
{
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	st.grants_applied = from->grants_applied;
	st.grants_stale = from->grants_stale;
	st.grants_clamped = from->grants_clamped;
	st.grants_bad_keys = from->grants_bad_keys;
	st.hot_keys_listed = from->hot_keys_listed;
	st.hot_keys_dropped = from->hot_keys_dropped;
	st.link_up = from->link_up;
	st.link_connects = from->link_connects;
	return bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY) ? -errno : 0;
}

int dp_pinned_open(const char *dir, const struct dp_pin *pins, size_t n)
{
	int err = pins_readable(dir);

	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (pins[i].optional) {
			char path[4096 + 32];

			snprintf(path, sizeof(path), "%s/%s", dir, pins[i].name);
			*pins[i].fd = bpf_obj_get(path);
			if (*pins[i].fd < 0)
				*pins[i].fd = -1;
			continue;
		}
		*pins[i].fd = dp_pinned_get(dir, pins[i].name);
		if (*pins[i].fd < 0)
			return *pins[i].fd;
	}
	return 0;
}

int dp_pinned_get(const char *dir, const char *name)
{
	char path[4096 + 32];
	int fd, err;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = bpf_obj_get(path);
	if (fd >= 0)
		return fd;
	err = -errno;
	pr_warn("cannot open '%s': %s (is an agent running with pin-dir '%s'?)\n", path,
		strerror(-err), dir);
	return err;
}

int dp_pinned_reset_fence(const char *pin_dir, uint64_t *old_epoch, uint64_t *old_version)
{
	int lock_fd = -1, held = pins_lock(pin_dir, &lock_fd); /* no agent running there */
	int layout = held ? held : pins_readable(pin_dir);
	int fence_fd = layout ? layout : dp_pinned_get(pin_dir, "ll_fence"),
	    state_fd = dp_pinned_get(pin_dir, "ll_state");
	int policy_fd = dp_pinned_get(pin_dir, "ll_policy");
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct ll_fence f = {};
	struct ll_state st;
	__u32 k = 0, slot;
	int err = fence_fd < 0 ? fence_fd : state_fd < 0 ? state_fd : policy_fd;

	if (err >= 0 && !pol)
		err = -ENOMEM;
	if (err >= 0)
		err = dp_state_read(state_fd, &st);
	if (!err && bpf_map_lookup_elem(fence_fd, &k, &f))
		err = -errno;
	slot = st.active_slot & (LL_POLICY_SLOTS - 1);
	if (!err && bpf_map_lookup_elem(policy_fd, &slot, pol))
		err = -errno;
	if (!err) {
		*old_epoch = f.max_epoch_seen;
		*old_version = st.version;
		memset(&f, 0, sizeof(f));
		if (bpf_map_update_elem(fence_fd, &k, &f, BPF_ANY))
			err = -errno;
	}
	/* The active slot's rules and limits are rewritten with the very same
	 * bytes; only the version changes, which packets do not read.
	 */
	if (!err && st.version > 1) {
		pol->version = 1;
		st.version = 1;
		if (bpf_map_update_elem(policy_fd, &slot, pol, BPF_ANY) ||
		    bpf_map_update_elem(state_fd, &k, &st, BPF_ANY))
			err = -errno;
	}
	free(pol);
	for (int fd = 0, *fds[] = {&fence_fd, &state_fd, &policy_fd}; fd < 3; fd++)
		if (*fds[fd] >= 0)
			close(*fds[fd]);
	pins_unlock(&lock_fd);
	return err;
}

int dp_lease_read(struct dp *dp, uint32_t id, struct ll_lease *l)
{
	return bpf_map_lookup_elem_flags(dp->leases_fd, &id, l, BPF_F_LOCK) ? -errno : 0;
}

int dp_fence_write(struct dp *dp, const struct ll_fence *f)
{
	__u32 k = 0;

	return bpf_map_update_elem(dp->fence_fd, &k, f, BPF_ANY) ? -errno : 0;
}

/* A limit's per-key grant entry in ll_key_grants: limit uid + the key. */
static struct ll_flow_key key_grant_key(uint32_t uid, const struct ll_key_id *k)
{
	struct ll_flow_key fk = {.limit_uid = uid};

	memcpy((char *)&fk + sizeof(fk.limit_uid), k, sizeof(*k));
	return fk;
}

int dp_key_grants_read(struct dp *dp, uint32_t uid, struct lease_key **out, size_t *n)
{
	struct ll_flow_key k, next, *prev = NULL;
	struct lease_key *v = NULL;
	size_t cap = 0;
	int err = 0;

	*n = 0;
	while (!bpf_map_get_next_key(dp->key_grants_fd, prev, &next)) {
		k = next;
		prev = &k;
		if (k.limit_uid != uid)
			continue;
		if (*n == cap) {
			struct lease_key *nv = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));

			if (!nv) {
				err = -ENOMEM;
				break;
			}
			v = nv;
		}
		memset(&v[*n], 0, sizeof(v[*n]));
		memcpy(&v[*n].key, (char *)&k + sizeof(k.limit_uid), sizeof(v[*n].key));
		if (bpf_map_lookup_elem(dp->key_grants_fd, &k, &v[*n].v))
			continue; /* deleted meanwhile: not held */
		v[*n].rate = v[*n].v.rate;
		v[*n].burst = v[*n].v.burst_s / TB_SCALE;
		(*n)++;
	}
	if (err) {
		free(v);
		v = NULL;
		*n = 0;
	}
	*out = v;
	return err;
}

int dp_key_grants_get(struct dp *dp, uint32_t uid, const struct lease_key *keys, size_t n,
		      struct lease_key *out, size_t *n_out)
{
	*n_out = 0;
	for (size_t i = 0; i < n; i++) {
		struct ll_flow_key fk = key_grant_key(uid, &keys[i].key);
		struct lease_key *o = &out[*n_out];

		memset(o, 0, sizeof(*o));
		if (bpf_map_lookup_elem(dp->key_grants_fd, &fk, &o->v)) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		o->key = keys[i].key;
		o->rate = o->v.rate;
		o->burst = o->v.burst_s / TB_SCALE;
		(*n_out)++;
	}
	return 0;
}

/* Write a limit's per-key set as planned: deletions, then new or changed
 * entries. Either order is safe: until the lease moves kg_ver on, buckets
 * keep what they copied, and a new bucket reads an old or a new value,
 * both counted by the coordinator until this grant is acknowledged.
 */
static int key_grants_write(struct dp *dp, uint32_t uid, const struct lease_key_plan *kp)
{
	for (size_t i = 0; i < kp->n_del; i++) {
		struct ll_flow_key fk = key_grant_key(uid, &kp->del[i]);

		if (bpf_map_delete_elem(dp->key_grants_fd, &fk) && errno != ENOENT)
			return -errno;
	}
	for (size_t i = 0; i < kp->n_put; i++) {
		struct ll_flow_key fk = key_grant_key(uid, &kp->put[i].key);

		if (bpf_map_update_elem(dp->key_grants_fd, &fk, &kp->put[i].v, BPF_ANY))
			return -errno;
	}
	return 0;
}

int dp_lease_write(struct dp *dp, uint32_t id, uint32_t next_gen, bool reset_pool,
		   const struct ll_lease *l, const struct ll_fence *f, uint32_t uid,
		   const struct lease_key_plan *kp, uint64_t now)
{
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	/* The generation counter first: a crash after the lease write must not
	 * let a later generation reuse the number.
	 */
	if (next_gen > st.next_uid) {
		st.next_uid = next_gen;
		if (bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY))
			return -errno;
	}
	/* The per-key set before the lease that names it (kg_ver): a grant
	 * whose set cannot be written whole is not applied.
	 */
	if (kp && (err = key_grants_write(dp, uid, kp)))
		return err;
	/* The pool is emptied before the lease names the new generation, so no
	 * packet can take the old tokens under it.
	 */
	if (reset_pool) {
		struct ll_pool p = {.gen = l->gen, .last_ns = now};

		if (bpf_map_update_elem(dp->pools_fd, &id, &p, BPF_F_LOCK))
			return -errno;
	}
	if (bpf_map_update_elem(dp->leases_fd, &id, l, BPF_F_LOCK))
		return -errno;
	return dp_fence_write(dp, f);
}

