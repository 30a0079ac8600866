/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's door: a thread of its own accepts every connection
 * and, with TLS, runs its handshake there, off the main loop. Only a
 * connection whose handshake is done (a certificate our CA signed, with
 * clientAuth) is handed to the main loop, which then waits for its HELLO:
 * a stranger's key exchange, signature or stalled handshake never costs a
 * holder's report a moment of the loop, nor takes a slot of its table.
 *
 * Handshakes in progress sit in a table of their own (gateways + 64
 * slots), placed as the loop places connections (slots.h): at most
 * pending-per-address of one address and pending-per-prefix of one /24
 * (/48), and with the table full, the fullest prefix gives way. A
 * handshake not done within the HELLO deadline of its accept is dropped.
 * Without TLS a connection is handed over at accept. Finished ones queue
 * for the loop (eventfd readable); the door stops accepting while the
 * queue is as long as its table, so the kernel's backlog holds the rest.
 */
#ifndef LEASELINE_COORD_HANDSHAKES_H
#define LEASELINE_COORD_HANDSHAKES_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cfg_types.h"
#include "lib/tls.h"

struct cconn;
struct handshakes;

/* What the door refused or dropped (read from any thread). */
struct hs_counts {
	uint64_t crowded;      /* refused: pending-per-address from one address */
	uint64_t prefix;       /* refused: pending-per-prefix from one /24 (/48) */
	uint64_t evicted;      /* dropped to make room, the table being full */
	uint64_t full;	       /* refused: the table full, none could give way */
	uint64_t tls_failures; /* handshakes the peer got wrong (no or an untrusted certificate) */
	uint64_t timeouts;     /* handshakes not done within the HELLO deadline */
};

/* Start the door on listen_fd (non-blocking). tls: the context to run
 * handshakes with (kept by the caller; swapped only through
 * handshakes_reload_tls), NULL for plain TCP. 0 or -errno.
 */
int handshakes_start(struct handshakes **out, int listen_fd, struct tls_ctx *tls, size_t slots,
		     uint32_t per_address, uint32_t per_prefix);
/* Readable while finished connections wait for handshakes_take. */
int handshakes_fd(const struct handshakes *hs);
/* Up to max finished connections, oldest first: the caller's now (each
 * with holder -1, its peer and accepted_ns set, spoke if it did).
 */
size_t handshakes_take(struct handshakes *hs, struct cconn **out, size_t max);
/* tls_ctx_load into the door's context, between two handshakes' starts. */
int handshakes_reload_tls(struct handshakes *hs, const struct cfg_tls *c, char *err, size_t len);
void handshakes_counts(const struct handshakes *hs, struct hs_counts *out);
/* Stop the thread and close what it holds, the queue included. */
void handshakes_stop(struct handshakes *hs);

#endif /* LEASELINE_COORD_HANDSHAKES_H */
