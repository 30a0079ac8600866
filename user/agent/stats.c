// SPDX-License-Identifier: MIT
/*
 * Per-CPU counter sums (see stats.h). Counters are u64 fields only, so a
 * struct is summed as an array of u64.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/stats.h"

static int percpu_sum(int fd, uint32_t key, uint64_t *out, size_t nfields)
{
	int ncpus = libbpf_num_possible_cpus();
	uint64_t *vals;

	if (ncpus < 0)
		return ncpus;
	vals = calloc((size_t)ncpus * nfields, sizeof(uint64_t));
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &key, vals)) {
		int err = -errno;

		free(vals);
		return err;
	}
	memset(out, 0, nfields * sizeof(uint64_t));
	for (int c = 0; c < ncpus; c++)
		for (size_t f = 0; f < nfields; f++)
			out[f] += vals[(size_t)c * nfields + f];
	free(vals);
	return 0;
}

int stats_limit(int fd, uint32_t id, struct ll_limit_stats *out)
{
	return percpu_sum(fd, id, (uint64_t *)out, sizeof(*out) / sizeof(uint64_t));
}

int stats_rule(int fd, uint32_t idx, struct ll_rule_stats *out)
{
	return percpu_sum(fd, idx, (uint64_t *)out, sizeof(*out) / sizeof(uint64_t));
}

int stats_parse(int fd, uint64_t out[LL_PARSE_MAX])
{
	for (uint32_t r = 0; r < LL_PARSE_MAX; r++) {
		int err = percpu_sum(fd, r, &out[r], 1);

		if (err)
			return err;
	}
	return 0;
}

int stats_shadow_window(int fd, uint32_t id, uint32_t uid, uint64_t now, uint32_t slots,
			struct stats_window *out)
{
	int ncpus = libbpf_num_possible_cpus();
	uint64_t cur = now >> LL_WIN_SHIFT, first;
	struct ll_shadow_win *w;

	memset(out, 0, sizeof(*out));
	if (ncpus < 0)
		return ncpus;
	if (slots < 1)
		slots = 1;
	if (slots > LL_WIN_SLOTS - 1)
		slots = LL_WIN_SLOTS - 1;
	first = cur + 1 >= slots ? cur + 1 - slots : 0;
	out->seconds = (double)(now - (first << LL_WIN_SHIFT)) / 1e9;
	w = calloc((size_t)ncpus, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &id, w)) {
		int err = -errno;

		free(w);
		return err;
	}
	for (int c = 0; c < ncpus; c++) {
		if (w[c].uid != uid)
			continue;
		for (uint32_t i = 0; i < LL_WIN_SLOTS; i++)
			if (w[c].tag[i] >= first && w[c].tag[i] <= cur && w[c].tag[i]) {
				out->pkts += w[c].pkts[i];
				out->bytes += w[c].bytes[i];
			}
	}
	free(w);
	return 0;
}

uint32_t stats_window_slots(double seconds)
{
	double slot = (double)(1ull << LL_WIN_SHIFT) / 1e9;
	uint32_t n = (uint32_t)(seconds / slot);

	if ((double)n * slot < seconds)
		n++;
	return n < 1 ? 1 : n > LL_WIN_SLOTS - 1 ? LL_WIN_SLOTS - 1 : n;
}

const char *stats_parse_reason_name(uint32_t reason)
{
	static const char *const names[LL_PARSE_MAX] = {
	    [LL_PARSE_OK] = "ok",
	    [LL_PARSE_NON_IP] = "non_ip",
	    [LL_PARSE_TRUNC_ETH] = "trunc_eth",
	    [LL_PARSE_TRUNC_VLAN] = "trunc_vlan",
	    [LL_PARSE_VLAN_DEPTH] = "vlan_depth",
	    [LL_PARSE_TRUNC_IP] = "trunc_ip",
	    [LL_PARSE_BAD_IP] = "bad_ip",
	    [LL_PARSE_TRUNC_EXT] = "trunc_ext",
	    [LL_PARSE_EXT_LIMIT] = "ext_limit",
	    [LL_PARSE_TRUNC_L4] = "trunc_l4",
	    [LL_PARSE_FRAGMENT] = "fragment",
	};

	return reason < LL_PARSE_MAX ? names[reason] : "unknown";
}
