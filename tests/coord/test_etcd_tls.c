// SPDX-License-Identifier: MIT
/*
 * The election thread against a real etcd (Debian's etcd-server 3.4) that
 * speaks mutual TLS to its clients (--client-cert-auth), with certificates
 * the stock openssl command makes (tests/tls/mkcerts.sh): a replica with
 * the CA and a certificate of it leads; one whose certificate another CA
 * signed, or one that trusts another CA, or one that speaks plain HTTP,
 * never does, and each failed request is counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord/election.h"
#include "etcd_cluster.h"
#include "lib/monotonic.h"

static struct etcd_cluster etcd;

static int up(void **state)
{
	char cmd[PATH_MAX + 128], tmpl[] = "/tmp/ll-etcd-tls.XXXXXX";
	const char *root = getenv("LL_ROOT");

	(void)state;
	if (!mkdtemp(tmpl))
		return -1;
	snprintf(etcd.pki, sizeof(etcd.pki), "%s", tmpl);
	snprintf(cmd, sizeof(cmd), "bash %s/tests/tls/mkcerts.sh %s 127.0.0.1 gw-1 >/dev/null 2>&1",
		 root ? root : ".", etcd.pki);
	if (system(cmd))
		return -1;
	return etcd_cluster_start(&etcd, 1);
}

static int down(void **state)
{
	char cmd[128];

	(void)state;
	etcd_cluster_stop(&etcd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", etcd.pki);
	return system(cmd) == 0 ? 0 : -1;
}

/* A replica with (ca, cert) from the pki directory (NULL: no TLS) at url
 * (NULL: etcd's): whether it leads within wait_s; *errors, its failed
 * requests.
 */
static bool leads(const char *ca, const char *cert, const char *url, const char *prefix,
		  int wait_s, uint64_t *errors)
{
	struct election_cfg cfg = {.n_endpoints = 1, .ttl_s = 5, .timeout_ms = 500};
	struct election_view v = {0};
	struct election *e = NULL;
	uint64_t end = clock_now_ns() + (uint64_t)wait_s * NSEC_PER_SEC;
	bool led = false;

	snprintf(cfg.endpoints[0], sizeof(cfg.endpoints[0]), "%s", url ? url : etcd.url[0]);
	snprintf(cfg.prefix, sizeof(cfg.prefix), "%s", prefix);
	snprintf(cfg.node, sizeof(cfg.node), "coord-a");
	snprintf(cfg.advertise, sizeof(cfg.advertise), "127.0.0.1:7450");
	if (ca) {
		snprintf(cfg.tls_ca, sizeof(cfg.tls_ca), "%s/%s.crt", etcd.pki, ca);
		snprintf(cfg.tls_cert, sizeof(cfg.tls_cert), "%s/%s.crt", etcd.pki, cert);
		snprintf(cfg.tls_key, sizeof(cfg.tls_key), "%s/%s.key", etcd.pki, cert);
	}
	assert_int_equal(election_start(&e, &cfg), 0);
	while (!led && clock_now_ns() < end) {
		election_view(e, &v);
		led = v.leader;
		usleep(50 * 1000);
	}
	election_view(e, &v);
	*errors = v.etcd_errors;
	election_stop(e);
	return led;
}

static void test_mutual_tls(void **state)
{
	char http[sizeof(etcd.url[0]) + 8];
	uint64_t errors;

	(void)state;
	bool ok = leads("ca", "gw-1", NULL, "/leaseline/tls-ok", 10, &errors);

	if (!ok)
		fail_msg("a replica with the CA and a certificate of it does not lead (%llu failed "
			 "requests; etcd logs in %s)",
			 (unsigned long long)errors, etcd.dir);
	print_message("with the CA and a certificate it signed: leads (%llu failed requests)\n",
		      (unsigned long long)errors);
	/* A certificate of another CA: etcd refuses it. */
	assert_false(leads("ca", "rogue", NULL, "/leaseline/tls-rogue", 3, &errors));
	print_message("certificate of another CA: never leads, %llu failed requests\n",
		      (unsigned long long)errors);
	assert_true(errors > 0);
	/* Trusting another CA: etcd's certificate is refused. */
	assert_false(leads("rogue-ca", "gw-1", NULL, "/leaseline/tls-trust", 3, &errors));
	print_message("trusting another CA: never leads, %llu failed requests\n",
		      (unsigned long long)errors);
	assert_true(errors > 0);
	/* Plain HTTP to the TLS port. */
	snprintf(http, sizeof(http), "http://%.40s", etcd.url[0] + strlen("https://"));
	assert_false(leads(NULL, NULL, http, "/leaseline/tls-plain", 3, &errors));
	assert_true(errors > 0);
	/* A key file that is not there: refused at start, before any request. */
	{
		struct election_cfg cfg = {.n_endpoints = 1, .ttl_s = 5};
		struct election *e = NULL;

		snprintf(cfg.endpoints[0], sizeof(cfg.endpoints[0]), "%s", etcd.url[0]);
		snprintf(cfg.prefix, sizeof(cfg.prefix), "/leaseline/tls-nofile");
		snprintf(cfg.node, sizeof(cfg.node), "coord-a");
		snprintf(cfg.advertise, sizeof(cfg.advertise), "127.0.0.1:7450");
		snprintf(cfg.tls_ca, sizeof(cfg.tls_ca), "%s/ca.crt", etcd.pki);
		snprintf(cfg.tls_cert, sizeof(cfg.tls_cert), "%s/gw-1.crt", etcd.pki);
		snprintf(cfg.tls_key, sizeof(cfg.tls_key), "%s/missing.key", etcd.pki);
		assert_int_equal(election_start(&e, &cfg), -ENOENT);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mutual_tls),
	};

	return cmocka_run_group_tests(tests, up, down);
}
