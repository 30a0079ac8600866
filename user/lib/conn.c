// SPDX-License-Identifier: MIT
/*
 * Buffered frame I/O over non-blocking sockets (see conn.h). Invariant: a
 * peer that sends a malformed frame is never parsed past it; the caller
 * drops the connection on -EPROTO.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lib/conn.h"

#define CONN_IN_MIN    512 /* a report of a few limits, a grant, a hello */
#define CONN_FRAME_MAX (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD)

void conn_init(struct conn *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
}

int conn_tls_start(struct conn *c, const struct tls_ctx *t, const char *peer_host)
{
	struct in6_addr a6;
	struct in_addr a4;

	c->ssl = SSL_new(t->ctx);
	if (!c->ssl || !SSL_set_fd(c->ssl, c->fd))
		return -ENOMEM;
	if (!peer_host) {
		SSL_set_accept_state(c->ssl);
		return 0;
	}
	SSL_set_connect_state(c->ssl);
	/* The coordinator's certificate must name what the agent dialled. */
	if (inet_pton(AF_INET, peer_host, &a4) == 1 || inet_pton(AF_INET6, peer_host, &a6) == 1) {
		if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), peer_host))
			return -ENOMEM;
	} else if (!SSL_set1_host(c->ssl, peer_host) ||
		   !SSL_set_tlsext_host_name(c->ssl, peer_host)) {
		return -ENOMEM;
	}
	return 0;
}

bool conn_wants_write(const struct conn *c)
{
	return c->out_len || c->want_write;
}

bool conn_peer_named(const struct conn *c, const char *name)
{
	X509 *x;

	if (!c->ssl)
		return true;
	if (strchr(name, '*'))
		return false;
	x = SSL_get0_peer_certificate(c->ssl);
	/* A DNS name exactly (any case, as DNS): no wildcard stands for a
	 * holder, and the subject's CN never does (a certificate that names
	 * no holder in its DNS names names none).
	 */
	return x && SSL_get_verify_result(c->ssl) == X509_V_OK &&
	       X509_check_host(x, name, strlen(name),
			       X509_CHECK_FLAG_NO_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT,
			       NULL) == 1;
}

bool conn_peer_digest(const struct conn *c, unsigned char out[32])
{
	unsigned int n = 0;
	X509 *x;

	memset(out, 0, 32);
	if (!c->ssl || !(x = SSL_get0_peer_certificate(c->ssl)))
		return false;
	return X509_digest(x, EVP_sha256(), out, &n) == 1 && n == 32;
}

const char *conn_tls_why(const struct conn *c)
{
	return c->why;
}

bool conn_tls_established(const struct conn *c)
{
	return c->ssl && SSL_is_init_finished(c->ssl);
}

/* Why a TLS failure (SSL_ERROR_SSL) happened, into c->why; -ECONNRESET
 * when it is only the peer closing without close_notify (a coordinator
 * that exits, or a peer that gives up), else -EPROTO.
 */
static int tls_failed(struct conn *c)
{
	unsigned long e = ERR_peek_last_error();
	int reason = ERR_GET_REASON(e);
	long v = SSL_get_verify_result(c->ssl);

	if (ERR_GET_LIB(e) == ERR_LIB_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
		snprintf(c->why, sizeof(c->why), "closed by the peer");
		return -ECONNRESET;
	}
	if (v != X509_V_OK)
		snprintf(c->why, sizeof(c->why), "refused here: the peer's certificate: %s",
			 X509_verify_cert_error_string(v));
	else if (ERR_GET_LIB(e) == ERR_LIB_SSL && reason > SSL_AD_REASON_OFFSET &&
		 reason < SSL_AD_REASON_OFFSET + 256)
		snprintf(c->why, sizeof(c->why), "refused by the peer: %s",
			 SSL_alert_desc_string_long(reason - SSL_AD_REASON_OFFSET));
	else
		snprintf(c->why, sizeof(c->why), "refused here: %s",
			 e && ERR_reason_error_string(e) ? ERR_reason_error_string(e)
							 : "TLS protocol error");
	return -EPROTO;
}

/* An OpenSSL result as an errno: -EAGAIN when it needs the socket again. */
static int tls_errno(struct conn *c, int r)
{
	int e = SSL_get_error(c->ssl, r);

	if (e == SSL_ERROR_SSL) {
		int err = tls_failed(c);

		ERR_clear_error();
		return err;
	}
	ERR_clear_error();
	switch (e) {
	case SSL_ERROR_WANT_WRITE:
		c->want_write = true;
		return -EAGAIN;
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		return errno && errno != EAGAIN ? -errno : -ECONNRESET;
	default:
		return -EPROTO; /* a handshake or record the peer got wrong */
	}
}

int conn_handshake(struct conn *c)
{
	int r;

	if (!c->ssl)
		return 1;
	c->want_write = false;
	r = SSL_do_handshake(c->ssl);
	if (r == 1)
		return 1;
	r = tls_errno(c, r);
	return r == -EAGAIN ? 0 : r;
}

/* Write up to n bytes: how many, -EAGAIN when the socket is full, or -errno. */
static ssize_t io_write(struct conn *c, const void *p, size_t n)
{
	ssize_t w;
	int r;

	if (!c->ssl) {
		w = send(c->fd, p, n, MSG_NOSIGNAL);
		return w >= 0 ? w : errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	c->want_write = false;
	r = SSL_write(c->ssl, p, (int)(n > INT32_MAX ? INT32_MAX : n));
	return r > 0 ? r : tls_errno(c, r);
}

/* Read up to n bytes: how many, -EAGAIN when none are there, -ECONNRESET at EOF. */
static ssize_t io_read(struct conn *c, void *p, size_t n)
{
	ssize_t got;
	int r;

	if (!c->ssl) {
		got = recv(c->fd, p, n, 0);
		if (got == 0)
			return -ECONNRESET;
		return got > 0 ? got : errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	c->want_write = false;
	r = SSL_read(c->ssl, p, (int)(n > INT32_MAX ? INT32_MAX : n));
	return r > 0 ? r : tls_errno(c, r);
}

void conn_close(struct conn *c)
{
	/* close_notify, best effort (the socket is non-blocking): the peer
	 * reads a close, not a truncated record.
	 */
	if (c->ssl && SSL_is_init_finished(c->ssl))
		SSL_shutdown(c->ssl);
	ERR_clear_error();
	SSL_free(c->ssl);
	if (c->fd >= 0)
		close(c->fd);
	free(c->in);
	free(c->out);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

int conn_flush(struct conn *c)
{
	while (c->out_len) {
		ssize_t n = io_write(c, c->out, c->out_len);

		if (n < 0)
			return n == -EAGAIN ? 0 : (int)n;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	free(c->out);
	c->out = NULL;
	c->out_cap = 0;
	return 0;
}

static int out_append(struct conn *c, const uint8_t *p, size_t n)
{
	if (c->out_len + n > c->out_cap) {
		size_t cap = c->out_len + n;
		uint8_t *q;

		if (cap > CONN_MAX_OUT)
			return -ENOBUFS; /* the peer is not reading */
		q = realloc(c->out, cap);
		if (!q)
			return -ENOMEM;
		c->out = q;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
	return 0;
}

int conn_send(struct conn *c, const struct wire_msg *m)
{
	/* Processes using conn are single-threaded: one scratch frame will do. */
	static uint8_t frame[CONN_FRAME_MAX];
	size_t off = 0;
	int n = wire_encode_v(m, c->peer_version, frame, sizeof(frame)), err;

	if (n < 0)
		return n;
	if (!c->out_len) {
		ssize_t s = io_write(c, frame, (size_t)n);

		if (s < 0 && s != -EAGAIN)
			return (int)s;
		off = s > 0 ? (size_t)s : 0;
	}
	err = off < (size_t)n ? out_append(c, frame + off, (size_t)n - off) : 0;
	return err ? err : conn_flush(c);
}

/* Room to read into: grow up to one maximal frame when full. */
static int in_room(struct conn *c)
{
	size_t cap;
	uint8_t *p;

	if (c->in_len < c->in_cap)
		return 1;
	if (c->in_cap >= CONN_FRAME_MAX)
		return 0; /* a full frame is buffered; decode before reading more */
	cap = c->in_cap ? c->in_cap * 2 : CONN_IN_MIN;
	if (cap > CONN_FRAME_MAX)
		cap = CONN_FRAME_MAX;
	p = realloc(c->in, cap);
	if (!p)
		return -ENOMEM;
	c->in = p;
	c->in_cap = cap;
	return 1;
}

int conn_read(struct conn *c)
{
	for (;;) {
		int room = in_room(c);
		ssize_t n;

		if (room <= 0)
			return room;
		n = io_read(c, c->in + c->in_len, c->in_cap - c->in_len);
		if (n == -EAGAIN)
			/* A TLS handshake may have been waiting for this to write. */
			return c->ssl && c->out_len ? conn_flush(c) : 0;
		if (n < 0)
			return (int)n;
		c->in_len += (size_t)n;
	}
}

int conn_next(struct conn *c, struct wire_msg *m)
{
	int n = c->in_len ? wire_decode(c->in, c->in_len, m) : 0;

	if (n <= 0)
		return n;
	memmove(c->in, c->in + n, c->in_len - (size_t)n);
	c->in_len -= (size_t)n;
	if (!c->in_len && c->in_cap > CONN_IN_MIN) {
		/* Drained after a large frame: give the memory back. */
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
	return 1;
}
