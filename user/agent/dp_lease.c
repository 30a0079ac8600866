// SPDX-License-Identifier: MIT
/*
 * Leases in the datapath's maps: reading the lease, the fence and the
 * per-key grants lease_decide.c decides from, and writing what it decided, in the
 * order that keeps packets safe (dp_lease_write).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "tb_math.h"

int dp_fence_read(struct dp *dp, struct ll_fence *f)
{
	__u32 k = 0;

	return bpf_map_lookup_elem(dp->fence_fd, &k, f) ? -errno : 0;
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
