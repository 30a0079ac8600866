/* SPDX-License-Identifier: MIT */
/*
 * Mutual TLS for the agent <-> coordinator channel (reference §6.2), with
 * OpenSSL 3. Both sides present a certificate and verify the other's chain
 * against their CA; TLS 1.3 only, so there is one protocol to reason about.
 * The coordinator learns who a holder is from its certificate (its CN or a
 * DNS name), the agent checks the coordinator's certificate names the host
 * (or IP address) it dialled. A context is loaded whole or not at all, so a
 * bad certificate on reload keeps the one in use.
 */
#ifndef LEASELINE_LIB_TLS_H
#define LEASELINE_LIB_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "lib/cfg_types.h"

struct ssl_ctx_st;

struct tls_ctx {
	struct ssl_ctx_st *ctx; /* NULL: TLS off */
	bool server;
};

/* Load cert, key (must match) and ca into a fresh context that requires and
 * verifies the peer's certificate; on success it replaces t's (connections
 * made with the old one keep it). 0, or -EINVAL with a one-line reason
 * naming the file in err.
 */
int tls_ctx_load(struct tls_ctx *t, const struct cfg_tls *c, bool server, char *err, size_t len);
void tls_ctx_free(struct tls_ctx *t);

/* The host part of "host:port" or "[v6]:port" into out (what the agent
 * checks the coordinator's certificate against).
 */
void tls_host_of(const char *hostport, char *out, size_t size);

#endif /* LEASELINE_LIB_TLS_H */
