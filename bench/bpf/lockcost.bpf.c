// SPDX-License-Identifier: MIT
/*
 * The price of a bucket lock (issue #14): one array-map value per program
 * run, updated bare, under bpf_spin_lock, or under bpf_res_spin_lock (the
 * resilient lock, a kfunc of kernel 6.15+), once and for four values in a
 * row (a 4-limit rule's four buckets); and four resilient locks held at
 * once (what an all-or-nothing charge under every lock would take). The
 * bench prints each beside the harness floor: the lock pair is the
 * difference to the bare update.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct bpf_res_spin_lock {
	__u32 val;
};
extern int bpf_res_spin_lock(struct bpf_res_spin_lock *lock) __ksym;
extern void bpf_res_spin_unlock(struct bpf_res_spin_lock *lock) __ksym;

struct lc_sval {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 x;
};

struct lc_rval {
	struct bpf_res_spin_lock lock;
	__u32 pad;
	__u64 x;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct lc_sval);
} lc_s SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct lc_rval);
} lc_r SEC(".maps");

#define BARE(kk)                                                                                   \
	do {                                                                                       \
		__u32 k = (kk);                                                                    \
		struct lc_sval *v = bpf_map_lookup_elem(&lc_s, &k);                                \
		if (!v)                                                                            \
			return XDP_PASS;                                                           \
		v->x++;                                                                            \
	} while (0)
#define SPIN(kk)                                                                                   \
	do {                                                                                       \
		__u32 k = (kk);                                                                    \
		struct lc_sval *v = bpf_map_lookup_elem(&lc_s, &k);                                \
		if (!v)                                                                            \
			return XDP_PASS;                                                           \
		bpf_spin_lock(&v->lock);                                                           \
		v->x++;                                                                            \
		bpf_spin_unlock(&v->lock);                                                         \
	} while (0)
#define RES(kk)                                                                                    \
	do {                                                                                       \
		__u32 k = (kk);                                                                    \
		struct lc_rval *v = bpf_map_lookup_elem(&lc_r, &k);                                \
		if (!v)                                                                            \
			return XDP_PASS;                                                           \
		if (bpf_res_spin_lock(&v->lock))                                                   \
			return XDP_DROP;                                                           \
		v->x++;                                                                            \
		bpf_res_spin_unlock(&v->lock);                                                     \
	} while (0)

SEC("xdp")
int lc_bare(struct xdp_md *ctx)
{
	(void)ctx;
	BARE(0);
	return XDP_PASS;
}

SEC("xdp")
int lc_spin(struct xdp_md *ctx)
{
	(void)ctx;
	SPIN(0);
	return XDP_PASS;
}

SEC("xdp")
int lc_res(struct xdp_md *ctx)
{
	(void)ctx;
	RES(0);
	return XDP_PASS;
}

SEC("xdp")
int lc_bare4(struct xdp_md *ctx)
{
	(void)ctx;
	BARE(0);
	BARE(1);
	BARE(2);
	BARE(3);
	return XDP_PASS;
}

SEC("xdp")
int lc_spin4(struct xdp_md *ctx)
{
	(void)ctx;
	SPIN(0);
	SPIN(1);
	SPIN(2);
	SPIN(3);
	return XDP_PASS;
}

SEC("xdp")
int lc_res4(struct xdp_md *ctx)
{
	(void)ctx;
	RES(0);
	RES(1);
	RES(2);
	RES(3);
	return XDP_PASS;
}

/* Four resilient locks held at once, taken in one order, released in the
 * reverse: the charge of a 4-limit rule could then decide all four
 * buckets under their locks and need no refund.
 */
SEC("xdp")
int lc_res4held(struct xdp_md *ctx)
{
	__u32 k0 = 0, k1 = 1, k2 = 2, k3 = 3;
	struct lc_rval *a = bpf_map_lookup_elem(&lc_r, &k0), *b = bpf_map_lookup_elem(&lc_r, &k1),
		       *c = bpf_map_lookup_elem(&lc_r, &k2), *d = bpf_map_lookup_elem(&lc_r, &k3);

	(void)ctx;
	if (!a || !b || !c || !d)
		return XDP_PASS;
	if (bpf_res_spin_lock(&a->lock))
		return XDP_DROP;
	if (bpf_res_spin_lock(&b->lock))
		goto out_a;
	if (bpf_res_spin_lock(&c->lock))
		goto out_b;
	if (bpf_res_spin_lock(&d->lock))
		goto out_c;
	a->x++;
	b->x++;
	c->x++;
	d->x++;
	bpf_res_spin_unlock(&d->lock);
	bpf_res_spin_unlock(&c->lock);
	bpf_res_spin_unlock(&b->lock);
	bpf_res_spin_unlock(&a->lock);
	return XDP_PASS;
out_c:
	bpf_res_spin_unlock(&c->lock);
out_b:
	bpf_res_spin_unlock(&b->lock);
out_a:
	bpf_res_spin_unlock(&a->lock);
	return XDP_DROP;
}
