/* SPDX-License-Identifier: MIT */
/*
 * Packet builder for datapath tests: a frame is a list of layers (Ethernet,
 * VLAN tags, IPv4 with options, IPv6 with extension headers, TCP, UDP, ICMP,
 * ICMPv6, payload), each appended after the last and linked through the
 * previous layer's ethertype / protocol / next-header field. pkt_build()
 * then sets every length field (IPv4 total length and checksum, IPv6 payload
 * length, UDP length) from the final frame; "post" layers then break the
 * frame on purpose (bad IHL, short total length, trimmed tail). The layer
 * records say where each header starts and ends, so a test can work out
 * which truncation reason a prefix of the frame must give. The code is in
 * pkt.c, compiled once into the test archive.
 */
#ifndef LEASELINE_TESTS_PKT_H
#define LEASELINE_TESTS_PKT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/if_ether.h>

#include "ll_types.h"

/* A jumbo-free Ethernet frame plus a few VLAN tags and spare room. */
#define PKT_MAX 2048
/* Enough for 2 VLAN tags, IP, LL_MAX_EXT_HDRS + 2 extension headers, L4, payload. */
#define PKT_MAX_LAYERS 24

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define PKT_ETH_LEN   14
#define PKT_VLAN_LEN  4
#define PKT_IPV4_LEN  20
#define PKT_IPV6_LEN  40
#define PKT_TCP_LEN   20
#define PKT_UDP_LEN   8
#define PKT_ICMP_LEN  8	 /* type, code, checksum, rest of header */
#define PKT_ARP_LEN   28 /* Ethernet/IPv4 ARP body */
#define PKT_FRAG6_LEN 8
#define IPV4_MF	      0x2000
#define IPV6_MF	      0x0001

enum pkt_kind {
	PL_END = 0,
	PL_ETH,	 /* dst/src MAC; ethertype set by the next layer */
	PL_VLAN, /* a: TPID (ETH_P_8021Q or ETH_P_8021AD), b: VLAN id */
	PL_ARP,
	PL_ETHERTYPE, /* a: raw ethertype for the previous field, b: body length */
	PL_IPV4, /* src, dst; a: option bytes (multiple of 4); b: frag offset in 8-byte units; c: MF
		  */
	PL_IPV6, /* src, dst */
	PL_EXT6, /* a: IPPROTO_HOPOPTS / ROUTING / DSTOPTS / AH, b: header length in bytes */
	PL_FRAG6, /* b: frag offset in 8-byte units; c: MF */
	PL_TCP,	  /* a: source port, b: destination port */
	PL_UDP,	  /* a: source port, b: destination port */
	PL_ICMP,
	PL_ICMP6,
	PL_PROTO, /* a: raw IP protocol / next header for the previous field, b: body length */
	PL_DATA,  /* a: payload bytes */
	/* Post layers: applied after the lengths are set, to break them. */
	PL_POST,
	PL_SET_IHL = PL_POST, /* a: IHL of the first IPv4 header */
	PL_SET_TOTLEN,	      /* a: IPv4 total length */
	PL_SET_PLEN,	      /* a: IPv6 payload length */
	PL_SET_VERSION,	      /* a: IP version nibble */
	PL_TRIM,	      /* a: bytes cut off the end, length fields left as they were */
};

struct pkt_layer {
	uint8_t kind;
	uint32_t a, b, c;
	const char *src, *dst;
};

/* Layer constructors for tables: { ETH(), VLAN(ETH_P_8021Q, 10), IP4(..), UDP(..) } */
#define ETH()                                                                                      \
	{                                                                                          \
		.kind = PL_ETH                                                                     \
	}
#define VLAN(tpid, vid)                                                                            \
	{                                                                                          \
		.kind = PL_VLAN, .a = (tpid), .b = (vid)                                           \
	}
#define ARP()                                                                                      \
	{                                                                                          \
		.kind = PL_ARP                                                                     \
	}
#define ETHERTYPE(t, n)                                                                            \
	{                                                                                          \
		.kind = PL_ETHERTYPE, .a = (t), .b = (n)                                           \
	}
#define IP4(s, d)                                                                                  \
	{                                                                                          \
		.kind = PL_IPV4, .src = (s), .dst = (d)                                            \
	}
#define IP4OPT(s, d, n)                                                                            \
	{                                                                                          \
		.kind = PL_IPV4, .src = (s), .dst = (d), .a = (n)                                  \
	}
#define IP4FRAG(s, d, o, m)                                                                        \
	{                                                                                          \
		.kind = PL_IPV4, .src = (s), .dst = (d), .b = (o), .c = (m)                        \
	}
#define IP6(s, d)                                                                                  \
	{                                                                                          \
		.kind = PL_IPV6, .src = (s), .dst = (d)                                            \
	}
#define HBH(n)                                                                                     \
	{                                                                                          \
		.kind = PL_EXT6, .a = IPPROTO_HOPOPTS, .b = (n)                                    \
	}
#define RTH(n)                                                                                     \
	{                                                                                          \
		.kind = PL_EXT6, .a = IPPROTO_ROUTING, .b = (n)                                    \
	}
#define DOH(n)                                                                                     \
	{                                                                                          \
		.kind = PL_EXT6, .a = IPPROTO_DSTOPTS, .b = (n)                                    \
	}
#define AH(n)                                                                                      \
	{                                                                                          \
		.kind = PL_EXT6, .a = IPPROTO_AH, .b = (n)                                         \
	}
#define FRAG6(o, m)                                                                                \
	{                                                                                          \
		.kind = PL_FRAG6, .b = (o), .c = (m)                                               \
	}
#define TCP(s, d)                                                                                  \
	{                                                                                          \
		.kind = PL_TCP, .a = (s), .b = (d)                                                 \
	}
#define UDP(s, d)                                                                                  \
	{                                                                                          \
		.kind = PL_UDP, .a = (s), .b = (d)                                                 \
	}
#define ICMP()                                                                                     \
	{                                                                                          \
		.kind = PL_ICMP                                                                    \
	}
#define ICMP6()                                                                                    \
	{                                                                                          \
		.kind = PL_ICMP6                                                                   \
	}
#define PROTO(p, n)                                                                                \
	{                                                                                          \
		.kind = PL_PROTO, .a = (p), .b = (n)                                               \
	}
#define DATA(n)                                                                                    \
	{                                                                                          \
		.kind = PL_DATA, .a = (n)                                                          \
	}
#define SET_IHL(n)                                                                                 \
	{                                                                                          \
		.kind = PL_SET_IHL, .a = (n)                                                       \
	}
#define SET_TOTLEN(n)                                                                              \
	{                                                                                          \
		.kind = PL_SET_TOTLEN, .a = (n)                                                    \
	}
#define SET_PLEN(n)                                                                                \
	{                                                                                          \
		.kind = PL_SET_PLEN, .a = (n)                                                      \
	}
#define SET_VERSION(n)                                                                             \
	{                                                                                          \
		.kind = PL_SET_VERSION, .a = (n)                                                   \
	}
#define TRIM(n)                                                                                    \
	{                                                                                          \
		.kind = PL_TRIM, .a = (n)                                                          \
	}

/* Where one header sits in the frame. */
struct pkt_rec {
	uint8_t kind;
	uint16_t start, end;
	bool nonfirst_frag; /* PL_IPV4 / PL_FRAG6 with a non-zero offset */
	uint8_t proto;	    /* PL_PROTO: the protocol number it was linked as */
};

struct pkt {
	uint8_t buf[PKT_MAX];
	size_t len;
	int nrec;
	struct pkt_rec rec[PKT_MAX_LAYERS];
	/* The field the next layer names itself in: an ethertype or a protocol byte. */
	int link_off;
	int link_size; /* 2: ethertype, 1: IP protocol / next header, 0: none */
	int ip_off;    /* offset of the (first) IPv4/IPv6 header, -1 if none */
	int ip_ver;
	bool broken;   /* a post layer changed a length on purpose */
	bool overflow; /* a layer did not fit: the test is wrong */
};

static inline void pkt_put16(struct pkt *p, size_t off, uint16_t v)
{
	p->buf[off] = v >> 8;
	p->buf[off + 1] = v & 0xff;
}

static inline uint16_t pkt_get16(const struct pkt *p, size_t off)
{
	return (uint16_t)(p->buf[off] << 8 | p->buf[off + 1]);
}

/* Build a frame from a PL_END-terminated layer list. Returns 0, or -1 if
 * the list does not fit (a bug in the test, not in the datapath).
 */
int pkt_build(struct pkt *p, const struct pkt_layer *l);

/* A copy of p cut to its first len bytes. consistent: length fields say len
 * (the sender built a short packet); otherwise they still claim the whole
 * frame (the packet was cut on the way).
 */
void pkt_prefix(struct pkt *out, const struct pkt *p, size_t len, bool consistent);

/* The parse reason a well-formed frame p, cut to len bytes, must give
 * (reference §5: a frame too short for the headers it claims takes a defined,
 * counted path). consistent as in pkt_prefix().
 */
int pkt_expect_reason(const struct pkt *p, size_t len, bool consistent);

#endif /* LEASELINE_TESTS_PKT_H */
