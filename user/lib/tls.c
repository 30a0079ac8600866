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
#include <openssl/x509v3.h>

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

/* The peer's certificate must carry its role, and only that role, in its
 * extendedKeyUsage: a holder's clientAuth (checked by the coordinator, the
 * server), a coordinator's serverAuth (checked by the agent, the client).
 * One CA signs both, so without this a gateway's certificate naming an
 * address could serve as the coordinator, and the coordinator's as a
 * holder. A certificate without the extension is good for any purpose to
 * OpenSSL; here it is good for none.
 */
static int verify_role(int ok, X509_STORE_CTX *xs)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
	X509 *x = X509_STORE_CTX_get_current_cert(xs);
	uint32_t want, other, xku;

	if (!ok || !ssl || !x || X509_STORE_CTX_get_error_depth(xs) != 0)
		return ok;
	want = SSL_is_server(ssl) ? XKU_SSL_CLIENT : XKU_SSL_SERVER;
	other = SSL_is_server(ssl) ? XKU_SSL_SERVER : XKU_SSL_CLIENT;
	xku = (X509_get_extension_flags(x) & EXFLAG_XKUSAGE) ? X509_get_extended_key_usage(x) : 0;
	if (!(xku & want) || (xku & other)) {
		X509_STORE_CTX_set_error(xs, X509_V_ERR_INVALID_PURPOSE);
		return 0;
	}
	return 1;
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
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_role);
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
