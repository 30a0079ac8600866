// SPDX-License-Identifier: MIT
/*
 * The packet builder of tests/bpf/pkt.h: layers appended and linked, lengths
 * and checksums set, post layers applied, and the parse reason a cut frame
 * must give. Compiled once into the test archive (libll-test.a).
 */
#include "bpf/pkt.h"

static void pkt_init(struct pkt *p)
{
	memset(p, 0, sizeof(*p));
	p->ip_off = -1;
}

/* Append n zeroed bytes as a header of `kind`; returns its offset or -1. */
static int pkt_push(struct pkt *p, uint8_t kind, size_t n)
{
	int off = (int)p->len;

	if (p->len + n > PKT_MAX || p->nrec >= PKT_MAX_LAYERS) {
		p->overflow = true;
		return -1;
	}
	memset(p->buf + p->len, 0, n);
	p->len += n;
	p->rec[p->nrec].kind = kind;
	p->rec[p->nrec].start = (uint16_t)off;
	p->rec[p->nrec].end = (uint16_t)p->len;
	p->rec[p->nrec].nonfirst_frag = false;
	p->rec[p->nrec].proto = 0;
	p->nrec++;
	return off;
}

/* Name this layer in the previous one's ethertype / protocol field. */
static void pkt_link(struct pkt *p, uint16_t ethertype, uint8_t proto)
{
	if (p->link_size == 2)
		pkt_put16(p, p->link_off, ethertype);
	else if (p->link_size == 1)
		p->buf[p->link_off] = proto;
}

static void pkt_set_link(struct pkt *p, int off, int size)
{
	p->link_off = off;
	p->link_size = size;
}

static int pkt_eth(struct pkt *p)
{
	static const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 0x02}, src[6] = {0x02, 0, 0, 0, 0, 0x01};
	int off = pkt_push(p, PL_ETH, PKT_ETH_LEN);

	if (off < 0)
		return -1;
	memcpy(p->buf + off, dst, 6);
	memcpy(p->buf + off + 6, src, 6);
	pkt_set_link(p, off + 12, 2);
	return off;
}

static int pkt_vlan(struct pkt *p, uint16_t tpid, uint16_t vid)
{
	int off;

	pkt_link(p, tpid, 0);
	off = pkt_push(p, PL_VLAN, PKT_VLAN_LEN);
	if (off < 0)
		return -1;
	pkt_put16(p, off, vid & 0x0fff);
	pkt_set_link(p, off + 2, 2);
	return off;
}

static int pkt_arp(struct pkt *p)
{
	int off;

	pkt_link(p, ETH_P_ARP, 0);
	off = pkt_push(p, PL_ARP, PKT_ARP_LEN);
	if (off < 0)
		return -1;
	pkt_put16(p, off, 1); /* Ethernet */
	pkt_put16(p, off + 2, ETH_P_IP);
	p->buf[off + 4] = 6;
	p->buf[off + 5] = 4;
	pkt_put16(p, off + 6, 1); /* request */
	pkt_set_link(p, 0, 0);
	return off;
}

static int pkt_addr(int family, const char *s, uint8_t *out)
{
	return inet_pton(family == 4 ? AF_INET : AF_INET6, s, out) == 1 ? 0 : -1;
}

/* opt_len bytes of options (NOPs), fragment offset in 8-byte units, MF flag. */
static int pkt_ipv4(struct pkt *p, const char *src, const char *dst, size_t opt_len,
		    uint16_t frag_units, bool mf)
{
	size_t hlen = PKT_IPV4_LEN + opt_len;
	int off;

	pkt_link(p, ETH_P_IP, IPPROTO_IPIP);
	off = pkt_push(p, PL_IPV4, hlen);
	if (off < 0)
		return -1;
	p->buf[off] = 0x40 | (uint8_t)(hlen / 4);
	pkt_put16(p, off + 6, (uint16_t)((frag_units & 0x1fff) | (mf ? IPV4_MF : 0)));
	p->buf[off + 8] = 64; /* TTL */
	if (pkt_addr(4, src, p->buf + off + 12) || pkt_addr(4, dst, p->buf + off + 16))
		p->overflow = true;
	memset(p->buf + off + PKT_IPV4_LEN, 1 /* NOP */, opt_len);
	p->rec[p->nrec - 1].nonfirst_frag = frag_units != 0;
	if (p->ip_off < 0) {
		p->ip_off = off;
		p->ip_ver = 4;
	}
	pkt_set_link(p, off + 9, 1);
	return off;
}

static int pkt_ipv6(struct pkt *p, const char *src, const char *dst)
{
	int off;

	pkt_link(p, ETH_P_IPV6, IPPROTO_IPV6);
	off = pkt_push(p, PL_IPV6, PKT_IPV6_LEN);
	if (off < 0)
		return -1;
	p->buf[off] = 0x60;
	p->buf[off + 7] = 64; /* hop limit */
	if (pkt_addr(6, src, p->buf + off + 8) || pkt_addr(6, dst, p->buf + off + 24))
		p->overflow = true;
	if (p->ip_off < 0) {
		p->ip_off = off;
		p->ip_ver = 6;
	}
	pkt_set_link(p, off + 6, 1);
	return off;
}

/* Hop-by-hop, routing or destination options of len bytes (a multiple of 8,
 * >= 8), or AH of len bytes (a multiple of 4, >= 12).
 */
static int pkt_ext6(struct pkt *p, uint8_t type, size_t len)
{
	int off;

	pkt_link(p, 0, type);
	off = pkt_push(p, PL_EXT6, len);
	if (off < 0)
		return -1;
	if (type == IPPROTO_AH) {
		p->buf[off + 1] = (uint8_t)(len / 4 - 2);
	} else {
		p->buf[off + 1] = (uint8_t)(len / 8 - 1);
		if (type == IPPROTO_HOPOPTS || type == IPPROTO_DSTOPTS) {
			/* One PadN option filling the rest of the header. */
			p->buf[off + 2] = 1;
			p->buf[off + 3] = (uint8_t)(len - 4);
		}
		/* Routing: type 0, segments left 0, all zero: valid to skip. */
	}
	pkt_set_link(p, off, 1);
	return off;
}

static int pkt_frag6(struct pkt *p, uint16_t frag_units, bool mf)
{
	int off;

	pkt_link(p, 0, IPPROTO_FRAGMENT);
	off = pkt_push(p, PL_FRAG6, PKT_FRAG6_LEN);
	if (off < 0)
		return -1;
	pkt_put16(p, off + 2, (uint16_t)((frag_units << 3) | (mf ? IPV6_MF : 0)));
	p->buf[off + 7] = 0x2a; /* identification */
	p->rec[p->nrec - 1].nonfirst_frag = frag_units != 0;
	pkt_set_link(p, off, 1);
	return off;
}

static int pkt_tcp(struct pkt *p, uint16_t sport, uint16_t dport)
{
	int off;

	pkt_link(p, 0, IPPROTO_TCP);
	off = pkt_push(p, PL_TCP, PKT_TCP_LEN);
	if (off < 0)
		return -1;
	pkt_put16(p, off, sport);
	pkt_put16(p, off + 2, dport);
	p->buf[off + 12] = (PKT_TCP_LEN / 4) << 4;
	p->buf[off + 13] = 0x02; /* SYN */
	pkt_put16(p, off + 14, 65535);
	pkt_set_link(p, 0, 0);
	return off;
}

static int pkt_udp(struct pkt *p, uint16_t sport, uint16_t dport)
{
	int off;

	pkt_link(p, 0, IPPROTO_UDP);
	off = pkt_push(p, PL_UDP, PKT_UDP_LEN);
	if (off < 0)
		return -1;
	pkt_put16(p, off, sport);
	pkt_put16(p, off + 2, dport);
	pkt_set_link(p, 0, 0);
	return off;
}

static int pkt_icmp(struct pkt *p, bool v6)
{
	int off;

	pkt_link(p, 0, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
	off = pkt_push(p, v6 ? PL_ICMP6 : PL_ICMP, PKT_ICMP_LEN);
	if (off < 0)
		return -1;
	p->buf[off] = v6 ? 128 : 8; /* echo request */
	pkt_set_link(p, 0, 0);
	return off;
}

/* A header this builder does not know: raw ethertype or protocol, n body bytes. */
static int pkt_raw(struct pkt *p, uint8_t kind, uint16_t type, size_t n)
{
	int off;

	pkt_link(p, type, (uint8_t)type);
	off = pkt_push(p, kind, n);
	if (off >= 0)
		p->rec[p->nrec - 1].proto = (uint8_t)type;
	pkt_set_link(p, 0, 0);
	return off;
}

static int pkt_data(struct pkt *p, size_t n)
{
	int off;

	if (p->link_size == 1)
		pkt_link(p, 0, IPPROTO_NONE);
	pkt_set_link(p, 0, 0);
	off = pkt_push(p, PL_DATA, n);

	if (off < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		p->buf[off + i] = (uint8_t)i;
	return off;
}

static uint16_t pkt_csum(const uint8_t *b, size_t n)
{
	uint32_t s = 0;

	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		s += (uint32_t)b[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)~s;
}

/* Set every length field from the frame as it is now (len bytes of it). A
 * field that lies beyond len is left alone: the frame is cut before it.
 */
static void pkt_fix_lengths(struct pkt *p, size_t len)
{
	for (int i = 0; i < p->nrec; i++) {
		const struct pkt_rec *r = &p->rec[i];
		size_t hlen = r->end - r->start;

		if (r->kind == PL_IPV4 && r->start + 4u <= len) {
			pkt_put16(p, r->start + 2, (uint16_t)(len - r->start));
			if (r->end <= len) {
				pkt_put16(p, r->start + 10, 0);
				pkt_put16(p, r->start + 10, pkt_csum(p->buf + r->start, hlen));
			}
		} else if (r->kind == PL_IPV6 && r->start + 6u <= len) {
			pkt_put16(p, r->start + 4, (uint16_t)(len - r->start - PKT_IPV6_LEN));
		} else if (r->kind == PL_UDP && r->start + 6u <= len) {
			pkt_put16(p, r->start + 4, (uint16_t)(len - r->start));
		}
	}
}

static struct pkt_rec *pkt_find(struct pkt *p, uint8_t kind)
{
	for (int i = 0; i < p->nrec; i++)
		if (p->rec[i].kind == kind)
			return &p->rec[i];
	return NULL;
}

int pkt_build(struct pkt *p, const struct pkt_layer *l)
{
	struct pkt_rec *r;
	int n;

	pkt_init(p);
	for (n = 0; n < PKT_MAX_LAYERS && l[n].kind != PL_END && l[n].kind < PL_POST; n++) {
		const struct pkt_layer *x = &l[n];

		switch (x->kind) {
		case PL_ETH:
			pkt_eth(p);
			break;
		case PL_VLAN:
			pkt_vlan(p, (uint16_t)x->a, (uint16_t)x->b);
			break;
		case PL_ARP:
			pkt_arp(p);
			break;
		case PL_ETHERTYPE:
		case PL_PROTO:
			pkt_raw(p, x->kind, (uint16_t)x->a, x->b);
			break;
		case PL_IPV4:
			pkt_ipv4(p, x->src, x->dst, x->a, (uint16_t)x->b, x->c);
			break;
		case PL_IPV6:
			pkt_ipv6(p, x->src, x->dst);
			break;
		case PL_EXT6:
			pkt_ext6(p, (uint8_t)x->a, x->b);
			break;
		case PL_FRAG6:
			pkt_frag6(p, (uint16_t)x->b, x->c);
			break;
		case PL_TCP:
			pkt_tcp(p, (uint16_t)x->a, (uint16_t)x->b);
			break;
		case PL_UDP:
			pkt_udp(p, (uint16_t)x->a, (uint16_t)x->b);
			break;
		case PL_ICMP:
			pkt_icmp(p, false);
			break;
		case PL_ICMP6:
			pkt_icmp(p, true);
			break;
		case PL_DATA:
			pkt_data(p, x->a);
			break;
		default:
			p->overflow = true;
		}
	}
	pkt_fix_lengths(p, p->len);
	for (; n < PKT_MAX_LAYERS && l[n].kind != PL_END; n++) {
		const struct pkt_layer *x = &l[n];

		p->broken = true;
		switch (x->kind) {
		case PL_SET_IHL:
			r = pkt_find(p, PL_IPV4);
			if (r)
				p->buf[r->start] =
				    (uint8_t)((p->buf[r->start] & 0xf0) | (x->a & 0x0f));
			break;
		case PL_SET_TOTLEN:
			r = pkt_find(p, PL_IPV4);
			if (r)
				pkt_put16(p, r->start + 2, (uint16_t)x->a);
			break;
		case PL_SET_PLEN:
			r = pkt_find(p, PL_IPV6);
			if (r)
				pkt_put16(p, r->start + 4, (uint16_t)x->a);
			break;
		case PL_SET_VERSION:
			if (p->ip_off >= 0)
				p->buf[p->ip_off] =
				    (uint8_t)((p->buf[p->ip_off] & 0x0f) | (x->a << 4));
			break;
		case PL_TRIM:
			p->len = x->a < p->len ? p->len - x->a : 0;
			break;
		default:
			p->overflow = true;
		}
	}
	return p->overflow ? -1 : 0;
}

void pkt_prefix(struct pkt *out, const struct pkt *p, size_t len, bool consistent)
{
	*out = *p;
	if (len < out->len)
		out->len = len;
	if (consistent)
		pkt_fix_lengths(out, out->len);
}

/* L4 header bytes the parser needs before it reads ports (0: none). */
static size_t pkt_l4_need(const struct pkt_rec *r)
{
	uint8_t proto = r->proto;

	switch (r->kind) {
	case PL_TCP:
		proto = IPPROTO_TCP;
		break;
	case PL_UDP:
		proto = IPPROTO_UDP;
		break;
	case PL_ICMP:
		proto = IPPROTO_ICMP;
		break;
	case PL_ICMP6:
		proto = IPPROTO_ICMPV6;
		break;
	case PL_PROTO:
		break;
	default:
		return 0;
	}
	switch (proto) {
	case IPPROTO_TCP:
		return PKT_TCP_LEN;
	case IPPROTO_UDP:
		return PKT_UDP_LEN;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return 4; /* type, code, checksum */
	default:
		return 0;
	}
}

int pkt_expect_reason(const struct pkt *p, size_t len, bool consistent)
{
	int i, vlans = 0;

	if (len < PKT_ETH_LEN)
		return LL_PARSE_TRUNC_ETH;
	for (i = 1; i < p->nrec && p->rec[i].kind == PL_VLAN; i++) {
		if (++vlans > LL_MAX_VLAN_TAGS)
			return LL_PARSE_VLAN_DEPTH;
		if (len < p->rec[i].end)
			return LL_PARSE_TRUNC_VLAN;
	}
	if (i >= p->nrec || (p->rec[i].kind != PL_IPV4 && p->rec[i].kind != PL_IPV6))
		return LL_PARSE_NON_IP;
	if (p->rec[i].kind == PL_IPV4) {
		if (len < p->rec[i].start + (size_t)PKT_IPV4_LEN)
			return LL_PARSE_TRUNC_IP;
		if (consistent && len < p->rec[i].end)
			return LL_PARSE_BAD_IP; /* total length fitted below IHL * 4 */
		if (len < p->rec[i].end)
			return LL_PARSE_TRUNC_IP;
		if (!consistent && len < p->len)
			return LL_PARSE_TRUNC_IP; /* total length beyond the frame */
		if (p->rec[i].nonfirst_frag)
			return LL_PARSE_FRAGMENT;
		i++;
	} else {
		int ext = 0;

		if (len < p->rec[i].start + (size_t)PKT_IPV6_LEN)
			return LL_PARSE_TRUNC_IP;
		if (!consistent && len < p->len)
			return LL_PARSE_TRUNC_IP; /* payload length beyond the frame */
		for (i++; i < p->nrec && (p->rec[i].kind == PL_EXT6 || p->rec[i].kind == PL_FRAG6);
		     i++) {
			size_t need = p->rec[i].kind == PL_FRAG6 ? PKT_FRAG6_LEN : 2;

			if (++ext > LL_MAX_EXT_HDRS)
				return LL_PARSE_EXT_LIMIT;
			if (len < p->rec[i].start + need)
				return LL_PARSE_TRUNC_EXT;
			if (p->rec[i].nonfirst_frag)
				return LL_PARSE_FRAGMENT;
			if (len < p->rec[i].end)
				return LL_PARSE_TRUNC_EXT; /* the next header starts past the end */
		}
	}
	if (i < p->nrec && len < p->rec[i].start + pkt_l4_need(&p->rec[i]))
		return LL_PARSE_TRUNC_L4;
	return LL_PARSE_OK;
}
