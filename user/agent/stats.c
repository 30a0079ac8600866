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

#include "stats.h"

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
