// SPDX-License-Identifier: MIT
/*
 * Who a certificate lets a peer be (user/lib/tls.c, conn.c): the real
 * OpenSSL handshake between the two sides' contexts, over a socketpair,
 * with certificates the stock openssl command makes (tests/tls/mkcerts.sh).
 * A holder's certificate names it by a DNS name (any case, as DNS) and
 * carries clientAuth only; the coordinator's carries serverAuth only. So a
 * gateway's certificate cannot serve as the coordinator, the coordinator's
 * cannot pass as a holder, a wildcard names no holder and the CN is never
 * read; a certificate with both roles, or none, is refused either way.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "lib/conn.h"
#include "lib/tls.h"

static char pki[64];

static int make_pki(void **state)
{
	char cmd[PATH_MAX + 128], tmpl[] = "/tmp/ll-tls-roles.XXXXXX";
	const char *root = getenv("LL_ROOT");

	(void)state;
	if (!mkdtemp(tmpl))
		return -1;
	snprintf(pki, sizeof(pki), "%s", tmpl);
	snprintf(cmd, sizeof(cmd), "bash %s/tests/tls/mkcerts.sh %s 127.0.0.1 gw-1 >/dev/null 2>&1",
		 root ? root : ".", pki);
	return system(cmd) == 0 ? 0 : -1;
}

static int rm_pki(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", pki);
	return system(cmd) == 0 ? 0 : -1;
}

static void load(struct tls_ctx *t, const char *name, bool server)
{
	struct cfg_tls c = {.set = true};
	char err[512] = "";

	snprintf(c.cert, sizeof(c.cert), "%s/%s.crt", pki, name);
	snprintf(c.key, sizeof(c.key), "%s/%s.key", pki, name);
	snprintf(c.ca, sizeof(c.ca), "%s/ca.crt", pki);
	if (tls_ctx_load(t, &c, server, err, sizeof(err)))
		fail_msg("%s: %s", name, err);
}

struct pair {
	struct tls_ctx st, ct;
	struct conn s, c; /* the coordinator's side, the agent's */
	long s_verify, c_verify;
};

/* The handshake of an agent holding certificate `holder` with a
 * coordinator holding `coord`, dialled as 127.0.0.1: 1 when both ends
 * finished it, 0 when one refused.
 */
static int handshake(struct pair *p, const char *coord, const char *holder)
{
	int sv[2], sd = 0, cd = 0;

	memset(p, 0, sizeof(*p));
	load(&p->st, coord, true);
	load(&p->ct, holder, false);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	conn_init(&p->s, sv[0]);
	conn_init(&p->c, sv[1]);
	assert_int_equal(conn_tls_start(&p->s, &p->st, NULL), 0);
	assert_int_equal(conn_tls_start(&p->c, &p->ct, "127.0.0.1"), 0);
	for (int i = 0; i < 50 && !(sd > 0 && cd > 0); i++) {
		if (sd <= 0)
			sd = SSL_do_handshake(p->s.ssl);
		if (cd <= 0)
			cd = SSL_do_handshake(p->c.ssl);
		if ((sd <= 0 && SSL_get_error(p->s.ssl, sd) != SSL_ERROR_WANT_READ &&
		     SSL_get_error(p->s.ssl, sd) != SSL_ERROR_WANT_WRITE) ||
		    (cd <= 0 && SSL_get_error(p->c.ssl, cd) != SSL_ERROR_WANT_READ &&
		     SSL_get_error(p->c.ssl, cd) != SSL_ERROR_WANT_WRITE))
			break;
	}
	/* TLS 1.3: the client finishes before the server has checked its
	 * certificate; one read on each side lets a refusal arrive.
	 */
	if (sd > 0 && cd > 0) {
		char b;

		SSL_read(p->s.ssl, &b, 1);
		if (SSL_read(p->c.ssl, &b, 1) <= 0 &&
		    SSL_get_error(p->c.ssl, -1) == SSL_ERROR_SSL)
			cd = -1;
	}
	p->s_verify = SSL_get_verify_result(p->s.ssl);
	p->c_verify = SSL_get_verify_result(p->c.ssl);
	ERR_clear_error();
	return sd > 0 && cd > 0;
}

static void done(struct pair *p)
{
	conn_close(&p->s);
	conn_close(&p->c);
	tls_ctx_free(&p->st);
	tls_ctx_free(&p->ct);
}

static void test_holder_named_by_its_dns_name(void **state)
{
	struct pair p;

	(void)state;
	assert_true(handshake(&p, "coord", "gw-1"));
	assert_true(conn_peer_named(&p.s, "gw-1"));
	assert_true(conn_peer_named(&p.s, "GW-1")); /* DNS has no case: one identity */
	assert_false(conn_peer_named(&p.s, "gw-2"));
	assert_false(conn_peer_named(&p.s, "gw-1.")); /* not another spelling of a holder */
	done(&p);
}

static void test_wildcard_names_no_holder(void **state)
{
	struct pair p;

	(void)state;
	assert_true(handshake(&p, "coord", "wild"));
	assert_false(conn_peer_named(&p.s, "a.gw.example"));
	assert_false(conn_peer_named(&p.s, "*.gw.example"));
	done(&p);
}

static void test_cn_names_no_holder(void **state)
{
	struct pair p;

	(void)state;
	assert_true(handshake(&p, "coord", "cnonly"));
	assert_false(conn_peer_named(&p.s, "gw-cn"));
	done(&p);
}

static void test_coordinator_cert_is_no_holder(void **state)
{
	struct pair p;

	(void)state;
	assert_false(handshake(&p, "coord", "coord"));
	assert_int_equal(p.s_verify, X509_V_ERR_INVALID_PURPOSE);
	done(&p);
}

static void test_gateway_cert_is_no_coordinator(void **state)
{
	struct pair p;

	(void)state;
	/* gwip names the coordinator's address, as a gateway's might. */
	assert_false(handshake(&p, "gwip", "gw-1"));
	assert_int_equal(p.c_verify, X509_V_ERR_INVALID_PURPOSE);
	done(&p);
}

static void test_both_roles_or_none_refused(void **state)
{
	struct pair p;

	(void)state;
	assert_false(handshake(&p, "coord", "both"));
	assert_int_equal(p.s_verify, X509_V_ERR_INVALID_PURPOSE);
	done(&p);
	assert_false(handshake(&p, "coord", "noeku"));
	assert_int_equal(p.s_verify, X509_V_ERR_INVALID_PURPOSE);
	done(&p);
	assert_false(handshake(&p, "both", "gw-1"));
	assert_int_equal(p.c_verify, X509_V_ERR_INVALID_PURPOSE);
	done(&p);
}

/* The two sides through conn.c as the daemons run them (conn_handshake,
 * then a read each, where a TLS 1.3 refusal of the client's certificate
 * arrives): the agent holds `holder` and trusts `agent_ca`, dials
 * `dialled`. Each side's last error into *s_err, *c_err.
 */
static void run_conns(struct pair *p, const char *holder, const char *agent_ca,
		      const char *dialled, int *s_err, int *c_err)
{
	struct cfg_tls c = {.set = true};
	char err[512] = "";
	int sv[2], sd = 0, cd = 0;

	memset(p, 0, sizeof(*p));
	load(&p->st, "coord", true);
	snprintf(c.cert, sizeof(c.cert), "%s/%s.crt", pki, holder);
	snprintf(c.key, sizeof(c.key), "%s/%s.key", pki, holder);
	snprintf(c.ca, sizeof(c.ca), "%s/%s.crt", pki, agent_ca);
	if (tls_ctx_load(&p->ct, &c, false, err, sizeof(err)))
		fail_msg("%s: %s", holder, err);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	conn_init(&p->s, sv[0]);
	conn_init(&p->c, sv[1]);
	assert_int_equal(conn_tls_start(&p->s, &p->st, NULL), 0);
	assert_int_equal(conn_tls_start(&p->c, &p->ct, dialled), 0);
	for (int i = 0; i < 50 && (sd == 0 || cd == 0); i++) {
		if (sd == 0)
			sd = conn_handshake(&p->s);
		if (cd == 0)
			cd = conn_handshake(&p->c);
	}
	*s_err = sd < 0 ? sd : conn_read(&p->s);
	*c_err = cd < 0 ? cd : conn_read(&p->c);
	if (*s_err >= 0 && sd > 0) /* the client's refusal may come after its finish */
		*s_err = conn_read(&p->s);
}

/* Each side says which one refused and why (issue 28: the agent said only
 * "TLS handshake failed", the coordinator blamed the agent).
 */
static void test_failures_say_who_and_why(void **state)
{
	struct pair p;
	int s, c;

	(void)state;
	/* The agent trusts another CA than the coordinator's. */
	run_conns(&p, "gw-1", "rogue-ca", "127.0.0.1", &s, &c);
	assert_int_equal(c, -EPROTO);
	/* (the coordinator sends its chain: its CA is in it, and not ours) */
	assert_string_equal(conn_tls_why(&p.c), "refused here: the peer's certificate: "
						"self-signed certificate in certificate chain");
	assert_int_equal(s, -EPROTO);
	assert_non_null(strstr(conn_tls_why(&p.s), "refused by the peer: "));
	done(&p);
	/* The coordinator's certificate names another address. */
	run_conns(&p, "gw-1", "ca", "127.0.0.2", &s, &c);
	assert_int_equal(c, -EPROTO);
	assert_string_equal(conn_tls_why(&p.c),
			    "refused here: the peer's certificate: IP address mismatch");
	assert_non_null(strstr(conn_tls_why(&p.s), "refused by the peer: "));
	done(&p);
	/* A holder's certificate from another CA. */
	run_conns(&p, "rogue", "ca", "127.0.0.1", &s, &c);
	assert_int_equal(s, -EPROTO);
	assert_string_equal(conn_tls_why(&p.s),
			    "refused here: the peer's certificate: unable to get local issuer "
			    "certificate");
	assert_int_equal(c, -EPROTO);
	assert_non_null(strstr(conn_tls_why(&p.c), "refused by the peer: "));
	done(&p);
}

/* A peer that closes (a coordinator that stops) is a close, not a refusal:
 * with close_notify (conn_close sends it) and without.
 */
static void test_close_is_no_refusal(void **state)
{
	struct pair p;
	int s, c;

	(void)state;
	run_conns(&p, "gw-1", "ca", "127.0.0.1", &s, &c);
	assert_int_equal(s, 0);
	assert_int_equal(c, 0);
	conn_close(&p.s);
	assert_int_equal(conn_read(&p.c), -ECONNRESET);
	done(&p);
	run_conns(&p, "gw-1", "ca", "127.0.0.1", &s, &c);
	SSL_free(p.s.ssl); /* gone without a word */
	p.s.ssl = NULL;
	close(p.s.fd);
	p.s.fd = -1;
	assert_int_equal(conn_read(&p.c), -ECONNRESET);
	assert_string_equal(conn_tls_why(&p.c), "closed by the peer");
	done(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_holder_named_by_its_dns_name),
		cmocka_unit_test(test_wildcard_names_no_holder),
		cmocka_unit_test(test_cn_names_no_holder),
		cmocka_unit_test(test_coordinator_cert_is_no_holder),
		cmocka_unit_test(test_gateway_cert_is_no_coordinator),
		cmocka_unit_test(test_both_roles_or_none_refused),
		cmocka_unit_test(test_failures_say_who_and_why),
		cmocka_unit_test(test_close_is_no_refusal),
	};

	signal(SIGPIPE, SIG_IGN); /* a close_notify to a side already closed */

	return cmocka_run_group_tests(tests, make_pki, rm_pki);
}
