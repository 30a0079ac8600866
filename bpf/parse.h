/* SPDX-License-Identifier: MIT */
/*
 * Packet parsing for the XDP programs: Ethernet, up to LL_MAX_VLAN_TAGS VLAN
 * tags (802.1Q/802.1ad), IPv4 with options, IPv6 with a bounded walk of
 * extension headers, TCP/UDP ports, ICMP/ICMPv6. Every bounds check failure
 * returns a distinct enum ll_parse_reason so the caller can count it; nothing
 * here reads past data_end.
 */
#ifndef LEASELINE_BPF_PARSE_H
#define LEASELINE_BPF_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ll_types.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define IPV4_FRAG_OFFSET_MASK 0x1fff
#define IPV6_FRAG_OFFSET_MASK 0xfff8
#define IPV4_MIN_IHL	      5

/*
 * A 16-bit length field in host order, as a value whose bounds the verifier
 * keeps. Debian's 6.1 and 6.12 (6.18 does not) forget a
 * register's bounds after a byte swap (BPF_END), and then refuse adding it
 * to a packet pointer ("math between pkt pointer and register with
 * unbounded min value"). The mask puts the bounds back; the empty asm keeps
 * clang from dropping it as redundant (be16 already clears the upper bits).
 */
static __always_inline __u32 load_len16(const __be16 *field)
{
	__u32 v = bpf_ntohs(*field);

	asm volatile("" : "+r"(v));
	return v & 0xffff;
}

struct vlan_tag {
	__be16 tci;
	__be16 encap_proto;
};

/* What the limiter needs of a packet. Addresses as IPv6 or v4-mapped. */
struct pkt_meta {
	__u32 src[4];
	__u32 dst[4];
	__be16 sport; /* 0 when the packet has no ports (ICMP, non-first fragment) */
	__be16 dport;
	__u8 proto;  /* final L4 protocol */
	__u8 family; /* 4 or 6 */
	__u8 has_ports;
	__u8 frag; /* a non-first fragment */
	__u32 len; /* frame length, the cost of a packet in bytes mode */
	__u8 has_l4hdr; /* the TCP or ICMP/ICMPv6 header was read (a first fragment) */
	__u8 tcp_flags; /* TCP: the flags byte (FIN 0x01 .. CWR 0x80) */
	__u8 icmp_type; /* ICMP/ICMPv6: the type */
	__u8 precise;	/* 1: now is the precise clock (bpf/clock.h) */
	__u64 now;    /* clock, read by the first limit that needs it; 0 = not yet */
	__u64 coarse; /* coarse clock, read by the first deny-hint check; 0 = not yet */
};

static __always_inline void set_v4_mapped(__u32 *a, __be32 v4)
{
	a[0] = 0;
	a[1] = 0;
	a[2] = bpf_htonl(0x0000ffff);
	a[3] = v4;
}

/* L4 ports, when the protocol has them and this is a first fragment. */
static __always_inline int parse_l4(void *l4, void *data_end, struct pkt_meta *m)
{
	if (m->proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return LL_PARSE_TRUNC_L4;
		m->sport = th->source;
		m->dport = th->dest;
		m->has_ports = 1;
		m->tcp_flags = ((__u8 *)th)[13];
		m->has_l4hdr = 1;
	} else if (m->proto == IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return LL_PARSE_TRUNC_L4;
		m->sport = uh->source;
		m->dport = uh->dest;
		m->has_ports = 1;
	} else if (m->proto == IPPROTO_ICMP || m->proto == IPPROTO_ICMPV6) {
		/* type, code and checksum: the 4 bytes every ICMP and ICMPv6
		 * message begins with; a message cut shorter is truncated.
		 */
		if (l4 + 4 > data_end)
			return LL_PARSE_TRUNC_L4;
		m->icmp_type = *(__u8 *)l4;
		m->has_l4hdr = 1;
	}
	return LL_PARSE_OK;
}

static __always_inline int parse_ipv4(void *data, void *data_end, struct pkt_meta *m)
{
	struct iphdr *ip = data;
	__u32 hlen, tot_len;

	if ((void *)(ip + 1) > data_end)
		return LL_PARSE_TRUNC_IP;
	if (ip->version != 4 || ip->ihl < IPV4_MIN_IHL)
		return LL_PARSE_BAD_IP;
	hlen = ip->ihl * 4;
	tot_len = load_len16(&ip->tot_len);
	if (tot_len < hlen)
		return LL_PARSE_BAD_IP;
	if (data + hlen > data_end)
		return LL_PARSE_TRUNC_IP;
	/* Total length beyond the frame: the datagram was cut off on the way. */
	if (data + tot_len > data_end)
		return LL_PARSE_TRUNC_IP;
	m->family = 4;
	m->proto = ip->protocol;
	set_v4_mapped(m->src, ip->saddr);
	set_v4_mapped(m->dst, ip->daddr);
	if (bpf_ntohs(ip->frag_off) & IPV4_FRAG_OFFSET_MASK) {
		m->frag = 1;
		return LL_PARSE_FRAGMENT;
	}
	return parse_l4(data + hlen, data_end, m);
}

static __always_inline int parse_ipv6(void *data, void *data_end, struct pkt_meta *m)
{
	struct ipv6hdr *ip6 = data;
	void *p = ip6 + 1;
	__u8 nexthdr;
	int i;

	if ((void *)(ip6 + 1) > data_end)
		return LL_PARSE_TRUNC_IP;
	if (ip6->version != 6)
		return LL_PARSE_BAD_IP;
	if (p + load_len16(&ip6->payload_len) > data_end)
		return LL_PARSE_TRUNC_IP;
	m->family = 6;
	__builtin_memcpy(m->src, &ip6->saddr, 16);
	__builtin_memcpy(m->dst, &ip6->daddr, 16);
	nexthdr = ip6->nexthdr;

	/* Up to LL_MAX_EXT_HDRS extension headers, then the upper layer. */
	for (i = 0; i <= LL_MAX_EXT_HDRS; i++) {
		struct ipv6_opt_hdr *oh = p;

		if (i == LL_MAX_EXT_HDRS &&
		    (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING ||
		     nexthdr == IPPROTO_DSTOPTS || nexthdr == IPPROTO_AH ||
		     nexthdr == IPPROTO_FRAGMENT))
			return LL_PARSE_EXT_LIMIT;
		switch (nexthdr) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS:
			if ((void *)(oh + 1) > data_end)
				return LL_PARSE_TRUNC_EXT;
			nexthdr = oh->nexthdr;
			p += (oh->hdrlen + 1) * 8;
			break;
		case IPPROTO_AH:
			if ((void *)(oh + 1) > data_end)
				return LL_PARSE_TRUNC_EXT;
			nexthdr = oh->nexthdr;
			p += (oh->hdrlen + 2) * 4;
			break;
		case IPPROTO_FRAGMENT: {
			struct frag_hdr {
				__u8 nexthdr;
				__u8 reserved;
				__be16 frag_off;
				__be32 identification;
			} *fh = p;

			if ((void *)(fh + 1) > data_end)
				return LL_PARSE_TRUNC_EXT;
			nexthdr = fh->nexthdr;
			p = fh + 1;
			if (bpf_ntohs(fh->frag_off) & IPV6_FRAG_OFFSET_MASK) {
				m->proto = nexthdr;
				m->frag = 1;
				return LL_PARSE_FRAGMENT;
			}
			break;
		}
		default:
			m->proto = nexthdr;
			if (p > data_end)
				return LL_PARSE_TRUNC_EXT;
			return parse_l4(p, data_end, m);
		}
	}
	return LL_PARSE_EXT_LIMIT;
}

/* Fill *m from the frame; returns an enum ll_parse_reason. LL_PARSE_OK and
 * LL_PARSE_FRAGMENT leave a usable *m; LL_PARSE_NON_IP passes; the rest drop.
 */
static __always_inline int parse_packet(struct xdp_md *ctx, struct pkt_meta *m)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *p = eth + 1;
	__be16 proto;
	int i;

	m->len = data_end - data;
	if (p > data_end)
		return LL_PARSE_TRUNC_ETH;
	proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < LL_MAX_VLAN_TAGS; i++) {
		struct vlan_tag *vt = p;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vt + 1) > data_end)
			return LL_PARSE_TRUNC_VLAN;
		proto = vt->encap_proto;
		p = vt + 1;
	}
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return LL_PARSE_VLAN_DEPTH;

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(p, data_end, m);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(p, data_end, m);
	return LL_PARSE_NON_IP;
}

#endif /* LEASELINE_BPF_PARSE_H */
