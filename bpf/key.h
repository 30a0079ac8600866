/* SPDX-License-Identifier: MIT */
/*
 * The key of a packet under a per-key limit (src-ip, dst-ip, dst-port,
 * flow), as ll_buckets and ll_flow_buckets are keyed; the key of its
 * prefix's fallback bucket and of its limit's overflow bucket; and the
 * per-limit counters of what happens to a key on a bucket miss.
 */
#ifndef LEASELINE_BPF_KEY_H
#define LEASELINE_BPF_KEY_H

#include "maps.h"
#include "parse.h"

/* The second word of an ll_key or ll_flow_key: proto, family and dport as
 * they lie in memory.
 */
static __always_inline __u32 key_word1(__u8 proto, __u8 family, __u16 dport)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return proto | (__u32)family << 8 | (__u32)dport << 16;
#else
	return (__u32)proto << 24 | (__u32)family << 16 | dport;
#endif
}

_Static_assert(__builtin_offsetof(struct ll_key, proto) == 4 &&
		       __builtin_offsetof(struct ll_key, family) == 5 &&
		       __builtin_offsetof(struct ll_key, dport) == 6 &&
		       __builtin_offsetof(struct ll_key, addr) == 8 && sizeof(struct ll_key) == 24,
	       "key_build writes an ll_key as six words");
_Static_assert(__builtin_offsetof(struct ll_flow_key, proto) == 4 &&
		       __builtin_offsetof(struct ll_flow_key, family) == 5 &&
		       __builtin_offsetof(struct ll_flow_key, dport) == 6 &&
		       __builtin_offsetof(struct ll_flow_key, sport) == 8 &&
		       __builtin_offsetof(struct ll_flow_key, addr) == 12 &&
		       __builtin_offsetof(struct ll_flow_key, addr2) == 28 &&
		       sizeof(struct ll_flow_key) == 44,
	       "flow_key_build writes an ll_flow_key as eleven words");

/* Two key words as one 64-bit store: lo at the lower address. */
static __always_inline __u64 key_pair(__u32 lo, __u32 hi)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return lo | (__u64)hi << 32;
#else
	return (__u64)lo << 32 | hi;
#endif
}

/* Keys on the stack are declared LL_KEY_ALIGN: key_build and flow_key_build
 * store them 8 bytes at a time, and the verifier wants stack stores aligned.
 */
#define LL_KEY_ALIGN __attribute__((aligned(8)))

/* Address words a[0..3] of a key: src (16 bytes, IPv4 as ::ffff:a.b.c.d)
 * under the limit's prefix mask.
 */
static __always_inline void key_addr(__u32 *a, const __u32 *src, const struct ll_limit_cfg *cfg,
				     __u8 family)
{
	if (family == 4) {
		a[0] = 0;
		a[1] = 0;
		a[2] = src[2];
		a[3] = src[3] & cfg->mask_v4;
	} else {
		a[0] = src[0] & cfg->mask_v6[0];
		a[1] = src[1] & cfg->mask_v6[1];
		a[2] = src[2] & cfg->mask_v6[2];
		a[3] = src[3] & cfg->mask_v6[3];
	}
}

/* Key k (LL_KEY_ALIGN) of limit cfg for packet m, written 8 bytes at a time
 * and each byte once. The map reads the key right after: its hash by 32-bit
 * words, its compare by 64-bit ones. A word assembled from a memset and
 * narrower stores cannot be forwarded from the store buffer, so the load
 * waits for the stores to reach the cache: seen live as the hottest
 * instruction of the drop path (docs/benchmarks-live.md).
 */
static __always_inline void key_build(struct ll_key *k, const struct ll_limit_cfg *cfg,
				      const struct pkt_meta *m)
{
	__u64 *q = (__u64 *)k;
	__u32 a[4] = {}, w1 = 0;

	switch (cfg->key_mode) {
	case LL_KEY_SRC_IP:
		w1 = key_word1(0, m->family, 0);
		key_addr(a, m->src, cfg, m->family);
		break;
	case LL_KEY_DST_IP:
		w1 = key_word1(0, m->family, 0);
		key_addr(a, m->dst, cfg, m->family);
		break;
	case LL_KEY_DST_PORT:
		w1 = key_word1(m->proto, 0, m->dport);
		break;
	}
	q[0] = key_pair(cfg->uid, w1);
	q[1] = key_pair(a[0], a[1]);
	q[2] = key_pair(a[2], a[3]);
}

/* Flow key k (LL_KEY_ALIGN) of limit cfg for packet m (see key_build). */
static __always_inline void flow_key_build(struct ll_flow_key *k, const struct ll_limit_cfg *cfg,
					   const struct pkt_meta *m)
{
	__u64 *q = (__u64 *)k;
	__u32 w2;

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	w2 = m->sport; /* pad0 zero */
#else
	w2 = (__u32)m->sport << 16;
#endif
	q[0] = key_pair(cfg->uid, key_word1(m->proto, m->family, m->dport));
	q[1] = key_pair(w2, m->src[0]);
	q[2] = key_pair(m->src[1], m->src[2]);
	q[3] = key_pair(m->src[3], m->dst[0]);
	q[4] = key_pair(m->dst[1], m->dst[2]);
	((__u32 *)k)[10] = m->dst[3];
}

/* Key events of a limit, counted in ll_limit_stats. */
enum key_event {
	KEV_NEW,	/* a bucket created full */
	KEV_OVERFLOW,	/* a packet charged to the overflow bucket */
	KEV_PREFIX,	/* a packet charged to its prefix's fallback bucket */
	KEV_PREFIX_NEW, /* a fallback bucket created */
	KEV_GRADUATED,	/* a key given its own bucket after a fallback admission */
};

/* Count a key event: all happen on a bucket miss only, so the per-CPU
 * counters are looked up only then.
 */
static __always_inline void count_key_event(__u32 id, int ev)
{
	struct ll_limit_stats *st = bpf_map_lookup_elem(&ll_limit_stats, &id);

	if (!st)
		return;
	switch (ev) {
	case KEV_NEW:
		st->new_keys++;
		break;
	case KEV_OVERFLOW:
		st->overflow_pkts++;
		break;
	case KEV_PREFIX:
		st->prefix_pkts++;
		break;
	case KEV_PREFIX_NEW:
		st->prefix_buckets++;
		break;
	default:
		st->graduated++;
	}
}

/* The fallback key of packet m under limit cfg, in ll_prefix_buckets: the
 * address the limit keys on (flow: the source) cut to LL_PREFIX_V4_LEN or
 * LL_PREFIX_V6_LEN, or to the limit's own prefix where that is shorter; a
 * dst-port key's protocol and block of 256 ports. Spoofed sources cost
 * nothing to make up, their prefixes do not multiply as fast: a prefix's
 * sources share one key's worth while new.
 */
static __always_inline void prefix_key_build(struct ll_key *pk, const struct ll_limit_cfg *cfg,
					     const struct pkt_meta *m)
{
	const __u32 *a = cfg->key_mode == LL_KEY_DST_IP ? m->dst : m->src;
	int own = cfg->key_mode != LL_KEY_FLOW; /* flow keys are not prefix-masked */

	__builtin_memset(pk, 0, sizeof(*pk));
	pk->limit_uid = cfg->uid;
	if (cfg->key_mode == LL_KEY_DST_PORT) {
		pk->proto = m->proto;
		pk->dport = m->dport & bpf_htons(LL_PREFIX_PORT_MASK);
		return;
	}
	pk->family = m->family;
	if (m->family == 4) {
		__u32 mask = bpf_htonl(~0u << (32 - LL_PREFIX_V4_LEN));

		pk->addr[2] = a[2];
		pk->addr[3] = a[3] & mask & (own ? cfg->mask_v4 : ~0u);
	} else {
		_Static_assert(LL_PREFIX_V6_LEN > 32 && LL_PREFIX_V6_LEN <= 64, "two words");
		__u32 mask = bpf_htonl(~0u << (64 - LL_PREFIX_V6_LEN));

		pk->addr[0] = a[0] & (own ? cfg->mask_v6[0] : ~0u);
		pk->addr[1] = a[1] & mask & (own ? cfg->mask_v6[1] : ~0u);
	}
}

/* The key of limit uid's overflow bucket, as either key kind (44 bytes). */
static __always_inline void overflow_key(struct ll_flow_key *ok, __u32 uid)
{
	__builtin_memset(ok, 0, sizeof(*ok));
	ok->limit_uid = uid;
	ok->family = LL_OVERFLOW_FAMILY;
}

/* Key k of a bucket map (an ll_key of key_size bytes, or an ll_flow_key) as
 * an ll_flow_key: limit uid + ll_key_id, an ll_key's fields where they have
 * the same names, sport, pad0 and addr2 zero. The key of ll_key_grants.
 */
static __always_inline void key_as_flow_key(struct ll_flow_key *fk, const void *k, __u32 key_size)
{
	const struct ll_key *kk = k;

	if (key_size == sizeof(struct ll_flow_key)) {
		__builtin_memcpy(fk, k, sizeof(*fk));
		return;
	}
	__builtin_memset(fk, 0, sizeof(*fk));
	fk->limit_uid = kk->limit_uid;
	fk->proto = kk->proto;
	fk->family = kk->family;
	fk->dport = kk->dport;
	__builtin_memcpy(fk->addr, kk->addr, sizeof(fk->addr));
}

#endif /* LEASELINE_BPF_KEY_H */
