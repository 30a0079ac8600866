// SPDX-License-Identifier: MIT
/*
 * Keys and deny-hint waits as text (see keyfmt.h). Addresses go through
 * inet_ntop, so IPv6 is compressed as RFC 5952 writes it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

#include "lib/monotonic.h"
#include "lib/keyfmt.h"

const char *keyfmt_proto(uint8_t proto, char *buf, size_t len)
{
	switch (proto) {
	case IPPROTO_TCP:
		return "tcp";
	case IPPROTO_UDP:
		return "udp";
	case IPPROTO_ICMP:
		return "icmp";
	case IPPROTO_ICMPV6:
		return "icmpv6";
	case IPPROTO_SCTP:
		return "sctp";
	case IPPROTO_UDPLITE:
		return "udplite";
	default:
		snprintf(buf, len, "%u", proto);
		return buf;
	}
}

/* Protocols whose keys carry ports: the ones bpf/parse.h reads ports of. */
static bool has_ports(uint8_t proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP;
}

int keyfmt_addr(uint8_t family, const __u32 addr[4], uint8_t plen, char *buf, size_t len)
{
	char s[INET6_ADDRSTRLEN] = "?";
	uint8_t full = family == 4 ? 32 : 128;

	if (family == 4)
		inet_ntop(AF_INET, &addr[3], s, sizeof(s)); /* IPv4 as ::ffff:a.b.c.d */
	else
		inet_ntop(AF_INET6, addr, s, sizeof(s));
	if (plen && plen < full)
		return snprintf(buf, len, "%s/%u", s, plen);
	return snprintf(buf, len, "%s", s);
}

/* An address with its port, IPv6 in brackets: "198.18.0.1:80", "[2001:db8::1]:80". */
static void addr_port(uint8_t family, const __u32 addr[4], uint16_t port, bool ports, char *buf,
		      size_t len)
{
	char a[INET6_ADDRSTRLEN + 8];

	keyfmt_addr(family, addr, 0, a, sizeof(a));
	if (!ports)
		snprintf(buf, len, "%s", a);
	else if (family == 4)
		snprintf(buf, len, "%s:%u", a, ntohs(port));
	else
		snprintf(buf, len, "[%s]:%u", a, ntohs(port));
}

int keyfmt_key(const struct ll_key_id *k, uint8_t key_mode, uint8_t prefix_v4, uint8_t prefix_v6,
	       char *buf, size_t len)
{
	char p[8], src[INET6_ADDRSTRLEN + 16], dst[INET6_ADDRSTRLEN + 16];
	const char *proto = keyfmt_proto(k->proto, p, sizeof(p));
	bool ports;

	if (k->family == LL_OVERFLOW_FAMILY)
		return snprintf(buf, len, "(overflow)");
	switch (key_mode) {
	case LL_KEY_SRC_IP:
	case LL_KEY_DST_IP:
		return keyfmt_addr(k->family, k->addr, k->family == 4 ? prefix_v4 : prefix_v6, buf,
				   len);
	case LL_KEY_DST_PORT:
		if (!k->dport && !has_ports(k->proto))
			return snprintf(buf, len, "%s", proto);
		return snprintf(buf, len, "%s/%u", proto, ntohs(k->dport));
	case LL_KEY_FLOW:
		/* Ports when the protocol has them, or when either is set. */
		ports = has_ports(k->proto) || k->sport || k->dport;
		addr_port(k->family, k->addr, k->sport, ports, src, sizeof(src));
		addr_port(k->family, k->addr2, k->dport, ports, dst, sizeof(dst));
		return snprintf(buf, len, "%s %s -> %s", proto, src, dst);
	default:
		return snprintf(buf, len, "(all)");
	}
}

struct keyfmt_retry keyfmt_retry(uint64_t hint, bool valid, uint64_t now)
{
	const uint64_t step = LL_HINT_CLASS_MASK + 1, instant = hint & ~LL_HINT_CLASS_MASK;
	struct keyfmt_retry r = {.state = KEYFMT_RETRY_NOW};

	if (!valid || !hint)
		return r;
	r.class = (uint32_t)(hint & LL_HINT_CLASS_MASK);
	if (instant == ~LL_HINT_CLASS_MASK) {
		r.state = KEYFMT_RETRY_NEVER;
		return r;
	}
	/* The datapath rounded its instant down: the wait ends a step later. */
	if (instant + step > now) {
		r.state = KEYFMT_RETRY_WAIT;
		r.wait_ns = instant + step - now;
	}
	return r;
}

int keyfmt_retry_str(const struct keyfmt_retry *r, char *buf, size_t len)
{
	char cls[48] = "";
	double ms = (double)r->wait_ns / NSEC_PER_MSEC;

	if (r->class && r->state != KEYFMT_RETRY_NOW)
		snprintf(cls, sizeof(cls), " for frames of %u bytes or more", r->class);
	switch (r->state) {
	case KEYFMT_RETRY_NEVER:
		return snprintf(buf, len, "never (rate 0 here)%s", cls);
	case KEYFMT_RETRY_WAIT:
		if (ms < 0.1)
			return snprintf(buf, len, "in <0.1 ms%s", cls);
		if (ms < 1000)
			return snprintf(buf, len, "in %.1f ms%s", ms, cls);
		return snprintf(buf, len, "in %.2f s%s", ms / 1000, cls);
	default:
		return snprintf(buf, len, "now");
	}
}
