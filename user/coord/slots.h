/* SPDX-License-Identifier: MIT */
/*
 * Where a new connection goes in a bounded table of connections without a
 * HELLO (the coordinator's connection table, and the handshake thread's
 * table of TLS handshakes in progress): how many its address and its
 * prefix (/24 of IPv4, /48 of IPv6) already hold, a free slot, and when
 * there is none, which connection gives way. The one that gives way comes
 * from the prefix holding the most slots: strangers from a few prefixes
 * cannot push out a gateway dialling from another, whatever their
 * addresses, and an attacker with P prefixes holds at most P x
 * pending-per-prefix slots (reference §6.2).
 */
#ifndef LEASELINE_COORD_SLOTS_H
#define LEASELINE_COORD_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/hashmap.h"
#include "lib/monotonic.h"

/* A connection that has not said HELLO within this of its accept is
 * dropped, whether its TLS handshake is done or not.
 */
#define COORD_HELLO_DEADLINE_NS (2 * NSEC_PER_SEC)
/* With every slot taken, a new connection takes the slot of one that has
 * sent nothing, or else of one that has spent this long without a HELLO (a
 * gateway's TLS handshake and HELLO take a round trip or two).
 */
#define COORD_PENDING_GRACE_NS (500 * NSEC_PER_MSEC)

struct cconn;
struct slot_prefix;

struct slot_table {
	struct cconn **c; /* the table: NULL a free slot */
	size_t n;
	/* Scratch for the pass that finds the fullest prefix: 2^k >= 2n. */
	struct slot_prefix *pfx;
	uint32_t mask, gen;
	struct hmap_seed seed; /* prefixes come off the wire */
};

struct slot_pick {
	size_t same_address; /* without a HELLO, from the new one's address */
	size_t same_prefix;  /* without a HELLO, from its /24 (/48) */
	long free;	     /* a free slot, or -1 */
	long victim;	     /* with none free: the slot that gives way, or -1 */
};

/* The table c[0..n) (the caller's). 0 or -ENOMEM. */
int slots_init(struct slot_table *t, struct cconn **c, size_t n);
void slots_free(struct slot_table *t);
struct sockaddr_storage;

/* The peer's address as 16 bytes (IPv4 v4-mapped). */
void slots_peer_bytes(const struct sockaddr_storage *sa, uint8_t out[16]);
/* 16 bytes of address as text, for log lines. */
const char *slots_addr_str(const uint8_t a[16], char *buf, size_t len);
/* Whether a and b (16 bytes, IPv4 as v4-mapped) share a /24 (/48). */
bool slots_same_prefix(const uint8_t a[16], const uint8_t b[16]);
/* Where a connection from peer would go. Holders (a HELLO said) neither
 * count nor give way; nor does one accepted at or after batch_ns (each has
 * had a turn to be read). O(n), the fullest prefix only with the table
 * full.
 */
void slots_pick(struct slot_table *t, const uint8_t peer[16], uint64_t batch_ns, uint64_t now,
		struct slot_pick *p);

#endif /* LEASELINE_COORD_SLOTS_H */
