/* SPDX-License-Identifier: MIT */
/*
 * A non-blocking TCP connection carrying wire frames: buffered output that
 * never blocks the caller's loop, input decoded frame by frame with the
 * strict decoder. Shared by the coordinator and the agent.
 */
#ifndef LEASELINE_LIB_CONN_H
#define LEASELINE_LIB_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "lib/net.h"
#include "lib/tls.h"
#include "lib/wire.h"

/* Output a slow peer may leave unsent before it is cut off. */
#define CONN_MAX_OUT (4 * (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD))

/* Buffers grow with what is in flight and shrink back when drained, so an
 * idle connection costs a few hundred bytes, not a maximal frame.
 */
struct ssl_st;

struct conn {
	int fd;
	struct ssl_st *ssl; /* mutual TLS (conn_tls_start); NULL: plain TCP */
	bool want_write;    /* TLS needs the socket writable to go on */
	uint8_t *in;
	size_t in_len, in_cap;
	uint8_t *out;
	size_t out_len, out_cap;
	/* The wire version frames go out in (0: this build's, WIRE_VERSION): a
	 * coordinator answers an older agent in the version of its HELLO.
	 */
	uint16_t peer_version;
	/* Why TLS failed, last (conn_tls_why): which side refused and why. */
	char why[160];
};

void conn_init(struct conn *c, int fd);
/* Run TLS on c with context t (before any frame): as a client when
 * peer_host is set (the server's certificate must name that host or IP),
 * else as a server (the peer is named later, conn_peer_named). The
 * handshake goes on inside conn_read/conn_flush. 0 or -ENOMEM.
 */
int conn_tls_start(struct conn *c, const struct tls_ctx *t, const char *peer_host);
/* Go on with c's TLS handshake: 1 done (or no TLS), 0 it needs the socket
 * again (want_write says which way), -EPROTO refused (the peer's
 * certificate or handshake), -ECONNRESET or another -errno.
 */
int conn_handshake(struct conn *c);
/* Why c's TLS handshake or record failed (after -EPROTO): "refused here:
 * the peer's certificate: IP address mismatch" (X509_verify_cert_error_string
 * of our verification), "refused by the peer: unknown ca" (the alert it
 * sent), or OpenSSL's reason; "" if none.
 */
const char *conn_tls_why(const struct conn *c);
/* Whether c's TLS handshake is done (false without TLS). */
bool conn_tls_established(const struct conn *c);
/* Whether c has output queued or TLS needs the socket writable. */
bool conn_wants_write(const struct conn *c);
/* With TLS: whether the peer's verified certificate names `name` among
 * its DNS names, exactly (compared as DNS compares, without regard to
 * case), never by a wildcard or its subject's CN. Without TLS: true
 * (nobody is named).
 */
bool conn_peer_named(const struct conn *c, const char *name);
/* With TLS: the SHA-256 of the peer's certificate into out, and true.
 * Without TLS (or no certificate): out zeroed, false.
 */
bool conn_peer_digest(const struct conn *c, unsigned char out[32]);
void conn_close(struct conn *c);
/* Encode and queue m, then flush what the socket takes. 0 or negative errno. */
int conn_send(struct conn *c, const struct wire_msg *m);
/* Write queued output; 0 when all sent or the socket is full, else -errno. */
int conn_flush(struct conn *c);
/* Read what is available; 0, -ECONNRESET at EOF, or -errno. */
int conn_read(struct conn *c);
/* Next complete frame: 1 and *m filled, 0 if none yet, -EPROTO. */
int conn_next(struct conn *c, struct wire_msg *m);

#endif /* LEASELINE_LIB_CONN_H */
