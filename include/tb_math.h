/* SPDX-License-Identifier: MIT */
/*
 * Token-bucket arithmetic shared verbatim by the XDP program and the host
 * unit tests: no BPF helpers, no libc. No division on the admit path:
 * settling, refilling, debiting and refunding only compare, add and multiply.
 * A denial divides once, to record when the bucket or pool will pay (a
 * bucket's deny hint, a pool's empty_until_ns: bpf/bucket.h, bpf/pool.h).
 * The helpers here that divide are for userspace only.
 *
 * Tokens are kept in sub-token units of 1/TB_SCALE token. With a nanosecond
 * clock and TB_SCALE = 10^9, a refill over dt ns at `rate` tokens/s is exactly
 * rate * dt sub-tokens: nothing is rounded, so over any window a bucket
 * admits at most burst + rate*t tokens and a saturating sender at least that
 * minus one packet's cost.
 *
 * Overflow: userspace validates rate <= TB_MAX_RATE and burst <= TB_MAX_BURST
 * and precomputes fill_ns = ceil(burst_s / rate). A refill with dt >= fill_ns
 * saturates without multiplying; otherwise rate*dt < burst_s + rate, and
 * burst_s + rate < 2^64 by the bounds below, so no product ever wraps.
 */
#ifndef LEASELINE_TB_MATH_H
#define LEASELINE_TB_MATH_H

#include <linux/types.h>

/* Sub-token units per token; equal to ns per second so refill is exact. */
#define TB_SCALE 1000000000ULL
/* 10^11 tokens/s: 800 Gbit/s counted in bytes, 100x the 10^9 pps target. */
#define TB_MAX_RATE 100000000000ULL
/* Largest burst whose scaled value plus TB_MAX_RATE fits in 64 bits. */
#define TB_MAX_BURST ((~0ULL - TB_MAX_RATE) / TB_SCALE)

/* Parameters of one bucket generation, all precomputed in userspace. */
struct tb_params {
	__u64 rate;    /* tokens per second; 0 means never refills */
	__u64 burst_s; /* capacity in sub-tokens (burst * TB_SCALE) */
	__u64 fill_ns; /* ns from empty to full: ceil(burst_s / rate), 0 if rate is 0 */
};

/* Tokens after refilling from `last` to `now`. A clock that appears to run
 * backwards (two CPUs racing on one bucket) adds nothing.
 */
static inline __u64 tb_refill(__u64 tokens, __u64 last, __u64 now, const struct tb_params *p)
{
	__u64 dt, add;

	if (tokens >= p->burst_s)
		return p->burst_s;
	if (now <= last || p->rate == 0)
		return tokens;
	dt = now - last;
	if (dt >= p->fill_ns)
		return p->burst_s;
	add = p->rate * dt; /* < burst_s + rate, cannot wrap (see above) */
	if (add >= p->burst_s - tokens)
		return p->burst_s;
	return tokens + add;
}

/* Clamp stored tokens to a (possibly lower) capacity. */
static inline __u64 tb_clamp(__u64 tokens, __u64 burst_s)
{
	return tokens < burst_s ? tokens : burst_s;
}

/* Debit cost_s sub-tokens if available. Returns 1 and updates *tokens on
 * success, 0 and leaves *tokens untouched otherwise.
 */
static inline int tb_take(__u64 *tokens, __u64 cost_s)
{
	if (*tokens < cost_s)
		return 0;
	*tokens -= cost_s;
	return 1;
}

/* Give back a debit taken by tb_take (all-or-nothing rollback). The result is
 * the same as if the debit had never happened: min(burst, t + r) either way.
 */
static inline __u64 tb_refund(__u64 tokens, __u64 cost_s, __u64 burst_s)
{
	if (cost_s >= burst_s || tokens >= burst_s - cost_s)
		return burst_s;
	return tokens + cost_s;
}

/* Cost of a packet in sub-tokens: 1 token per packet or 1 per byte. */
static inline __u64 tb_cost(int bytes_unit, __u64 len)
{
	return (bytes_unit ? len : 1) * TB_SCALE;
}

/* Bring a bucket to `now` under the current generation of its limit.
 *
 * A policy reload at reload_ns that changed rate or burst bumps the limit's
 * generation. A bucket still at the previous generation is refilled with the
 * old rate up to reload_ns, then clamped to the new burst: the new rate takes
 * effect from the reload, a lower burst clamps, nobody gets a fresh bucket. A
 * bucket of any other generation forfeits the refill before reload_ns (the
 * rates in between are gone): conservative, never generous. Generations are
 * unique per agent (never reused across limits), so prev_gen names exactly
 * the generation that `prev` describes.
 */
static inline __u64 tb_settle(__u64 tokens, __u64 *last, __u32 bucket_gen, __u32 gen,
			      __u32 prev_gen, const struct tb_params *cur,
			      const struct tb_params *prev, __u64 reload_ns, __u64 now)
{
	if (bucket_gen != gen) {
		if (*last < reload_ns) {
			if (bucket_gen == prev_gen)
				tokens = tb_refill(tokens, *last, reload_ns, prev);
			*last = reload_ns;
		}
		tokens = tb_clamp(tokens, cur->burst_s);
	}
	tokens = tb_refill(tokens, *last, now, cur);
	if (now > *last)
		*last = now;
	return tokens;
}

/* fill_ns for given rate and scaled burst; userspace only (divides). */
static inline __u64 tb_fill_ns(__u64 rate, __u64 burst_s)
{
	if (rate == 0)
		return 0;
	return burst_s / rate + (burst_s % rate != 0);
}

/* Slice chunk of a shared pool (userspace precomputes it; see docs/design.md,
 * "Key-none limits"): about 1 ms of rate, at most burst / (4 x CPUs) so the
 * tokens stranded in idle CPUs' slices stay below a quarter of the burst, at
 * least one token. In sub-tokens.
 */
#define TB_CHUNK_PER_S	 1000 /* a chunk is ~1 ms of rate */
#define TB_CHUNK_BURST_DIV 4  /* stranded slices hold < burst / 4 */

static inline __u64 tb_chunk_s(__u64 rate, __u64 burst, unsigned int ncpus)
{
	__u64 chunk = rate / TB_CHUNK_PER_S;
	__u64 cap = burst / (TB_CHUNK_BURST_DIV * (ncpus ? ncpus : 1));

	if (chunk > cap)
		chunk = cap;
	if (chunk == 0)
		chunk = 1;
	return chunk * TB_SCALE;
}

#endif /* LEASELINE_TB_MATH_H */
