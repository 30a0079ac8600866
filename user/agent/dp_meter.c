// SPDX-License-Identifier: MIT
/*
 * Per-key metering in the datapath's maps (ll_meter, ll_meter_k,
 * ll_meter_info): the counters' identity, reading every series summed over
 * CPUs, deleting one.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>

#include <bpf/bpf.h>

#include "agent/dp.h"

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
	if (fk->sport || fk->pad0 || fk->addr2[0] || fk->addr2[1] || fk->addr2[2] || fk->addr2[3])
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
		int r =
		    bpf_map_lookup_batch(fd, first ? NULL : &in_b, &out_b, bk, bv, &count, NULL);
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
				meter_key_widen(&fk,
						(const struct ll_key *)(bk + (size_t)i * key_size));
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
	int err =
	    meter_read_map(dp, dp->meter_fd, sizeof(struct ll_flow_key), &ks, &vs, &got, &cap);

	if (!err)
		err =
		    meter_read_map(dp, dp->meter_k_fd, sizeof(struct ll_key), &ks, &vs, &got, &cap);
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
