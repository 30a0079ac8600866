// SPDX-License-Identifier: MIT
/*
 * Loading the datapath: the kernel's helpers checked, the maps sized, the
 * pins under pin_dir re-adopted (and, in multiprog mode, the unpinned maps
 * of the program already running), the program loaded and ll_fill mapped.
 * What dp then writes is in dp_policy.c, dp_lease.c, dp_meter.c and
 * dp_reap.c; the commands' side of the pins in dp_pinned.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/utsname.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "agent/dp_priv.h"
#include "agent/set_map.h"
#include "leaseline.skel.h"
#include "lib/log.h"
#include "agent/pins.h"

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
	dp->rcu_fd = dp_rcu_barrier_create();
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
