// SPDX-License-Identifier: MIT
/*
 * Mutual TLS contexts (see tls.h). OpenSSL does the protocol, the chain
 * verification and the name checks; this file only sets it up the one way
 * leaseline uses it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "lib/tls.h"

/* The first queued OpenSSL error as text (the queue is then cleared). */
static const char *ssl_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (!e)
		snprintf(buf, len, "unknown error");
	else
		ERR_error_string_n(e, buf, len);
	ERR_clear_error();
	return buf;
}

int tls_ctx_load(struct tls_ctx *t, const struct cfg_tls *c, bool server, char *err, size_t len)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	char why[256];
	const char *file = "";

	if (!ctx) {
		snprintf(err, len, "cannot create a TLS context: %s", ssl_reason(why, sizeof(why)));
		return -ENOMEM;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	/* Frames are written from a buffer that moves as it drains. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	if (SSL_CTX_use_certificate_chain_file(ctx, (file = c->cert)) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, (file = c->key), SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1 ||
	    SSL_CTX_load_verify_locations(ctx, (file = c->ca), NULL) != 1) {
		snprintf(err, len, "tls: '%s': %s", file, ssl_reason(why, sizeof(why)));
		SSL_CTX_free(ctx);
		return -EINVAL;
	}
	if (server)
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_free(t->ctx);
	t->ctx = ctx;
	t->server = server;
	return 0;
}

void tls_ctx_free(struct tls_ctx *t)
{
	SSL_CTX_free(t->ctx);
	t->ctx = NULL;
}

void tls_host_of(const char *hostport, char *out, size_t size)
{
	const char *end;

	if (hostport[0] == '[' && (end = strchr(hostport, ']'))) {
		snprintf(out, size, "%.*s", (int)(end - hostport - 1), hostport + 1);
		return;
	}
	end = strrchr(hostport, ':');
	snprintf(out, size, "%.*s", end ? (int)(end - hostport) : (int)strlen(hostport), hostport);
}
