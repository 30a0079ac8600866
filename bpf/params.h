/* SPDX-License-Identifier: MIT */
/*
 * The parameters one limit is charged with: rate, burst and fill time of its
 * current and previous generation (struct tb_params, tb_math.h), and for a
 * key-none pool also the reload instant, the slice chunk and both generation
 * numbers (struct share_view). Taken here from the policy's ll_limit_cfg; a
 * global limit's pool takes them from its lease instead (lease.h). Invariant:
 * `prev` always describes generation prev_gen, so tb_settle carries a bucket
 * or pool over from exactly that generation and no other.
 */
#ifndef LEASELINE_BPF_PARAMS_H
#define LEASELINE_BPF_PARAMS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "ll_types.h"
#include "tb_math.h"

static __always_inline void cfg_params(const struct ll_limit_cfg *cfg, struct tb_params *cur,
				       struct tb_params *prev)
{
	cur->rate = cfg->rate;
	cur->burst_s = cfg->burst_s;
	cur->fill_ns = cfg->fill_ns;
	prev->rate = cfg->prev_rate;
	prev->burst_s = cfg->prev_burst_s;
	prev->fill_ns = cfg->prev_fill_ns;
}

/* The parameters a limit's state (a key's bucket, a key-none pool) is
 * charged with: from the policy for a local limit, from the lease (or its
 * fallback share) for a global one.
 */
struct share_view {
	struct tb_params cur, prev;
	__u64 reload_ns, chunk_s;
	__u32 gen, prev_gen;
};

/* One CPU's copy of a global limit's two views (ll_lease_views): the live
 * share and, once the lease is dead with on-loss fallback, the fallback
 * share. Copied under the lease's lock, then read lock-free by that CPU
 * while the lease still has the generations (and, for the fallback view,
 * the expiry) it was copied from: a lease's parameters never change under
 * one generation, so a per-key bucket of a global limit is charged without
 * taking the lease's lock on every packet. kg_ver and n_key_grants are
 * copied with them (and recopied when kg_ver moves on), so the two are
 * always a pair the agent wrote together: a kg_ver read with a stale
 * n_key_grants of 0 would let a bucket skip its key's grant for good.
 */
struct ll_lease_views {
	__u32 gen, fb_gen;  /* 0: nothing copied yet */
	__u64 expiry_ns;    /* the fallback view starts at this expiry */
	__u32 kg_ver;	    /* the lease's per-key grant set ... */
	__u32 n_key_grants; /* ... and how many it holds (0: look nothing up) */
	struct share_view live, fb;
};

static __always_inline void view_from_cfg(const struct ll_limit_cfg *cfg, struct share_view *v)
{
	cfg_params(cfg, &v->cur, &v->prev);
	v->reload_ns = cfg->reload_ns;
	v->chunk_s = cfg->chunk_s;
	v->gen = cfg->gen;
	v->prev_gen = cfg->prev_gen;
}

#endif /* LEASELINE_BPF_PARAMS_H */
