// SPDX-License-Identifier: MIT
/*
 * The election thread against a fake etcd (a thread of this test on a
 * loopback port) that answers garbage: JSON that does not parse, bodies
 * past the bound, members of the wrong type, a lease of a negative or
 * non-numeric TTL, a leader value with bytes a REDIRECT could not carry.
 * Every answer is counted as bad, nothing crashes, and the replica never
 * believes it leads. (The real etcd: tests/integ/test_replicas.c.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "coord/election.h"
#include "lib/monotonic.h"

static const char *const answers[] = {
    "not json at all", "{\"ID\": [1, 2], \"TTL\": {}}", "{\"ID\": \"1\", \"TTL\": \"-5\"}",
    "{\"ID\": \"1\", \"TTL\": \"5s\"}", "{\"result\": \"nope\"}", "[1, 2, 3]",
    "{\"error\": \"etcdserver: request timed out\", \"code\": 14}",
    /* A plausible lease, then a leader key whose value names a node with an
     * escape byte: not a leader anyone can be sent to.
     */
    "{\"ID\": \"7\", \"TTL\": \"5\"}",
    "{\"kvs\": [{\"key\": \"eA==\", \"create_revision\": \"3\", \"mod_revision\": \"3\", "
    "\"lease\": \"9\", \"value\": "
    "\"eyJub2RlIjoiG1syShtbSCIsImFkdmVydGlzZSI6IngiLCJlcG9jaCI6MX0=\"}]}",
    /* succeeded without a header revision */
    "{\"succeeded\": true}", NULL, /* the body past the bound (built at start) */
};

static char *huge;
static int srv_fd = -1, port;
static volatile int stop_srv;
static unsigned served;

static void *serve(void *arg)
{
	(void)arg;
	while (!stop_srv) {
		char req[4096], hdr[128];
		const char *body;
		int c = accept(srv_fd, NULL, NULL);

		if (c < 0)
			continue;
		if (read(c, req, sizeof(req)) <= 0) {
			close(c);
			continue;
		}
		body = answers[served % (sizeof(answers) / sizeof(answers[0]))];
		body = body ? body : huge;
		served++;
		snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
			 "%zu\r\nConnection: close\r\n\r\n",
			 strlen(body));
		if (write(c, hdr, strlen(hdr)) < 0 || write(c, body, strlen(body)) < 0)
			(void)0; /* the client gave up: so be it */
		close(c);
	}
	return NULL;
}

static void test_garbage_answers_counted_never_leader(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	struct election_cfg cfg = {.n_endpoints = 1, .ttl_s = 5, .timeout_ms = 500};
	struct election_view v = {0};
	struct election *e = NULL;
	struct timeval tv = {.tv_usec = 200000};
	pthread_t t;
	uint64_t end;
	bool ever_leader = false;

	(void)state;
	huge = malloc(200 * 1024);
	assert_non_null(huge);
	memset(huge, '{', 200 * 1024 - 1);
	huge[200 * 1024 - 1] = '\0';
	srv_fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(srv_fd >= 0);
	setsockopt(srv_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(bind(srv_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(srv_fd, 16), 0);
	assert_int_equal(getsockname(srv_fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&t, NULL, serve, NULL), 0);

	snprintf(cfg.endpoints[0], sizeof(cfg.endpoints[0]), "http://127.0.0.1:%d", port);
	snprintf(cfg.prefix, sizeof(cfg.prefix), "/leaseline/fake");
	snprintf(cfg.node, sizeof(cfg.node), "coord-a");
	snprintf(cfg.advertise, sizeof(cfg.advertise), "127.0.0.1:7450");
	assert_int_equal(election_start(&e, &cfg), 0);
	end = clock_now_ns() + 4 * NSEC_PER_SEC;
	while (clock_now_ns() < end && served < 40) {
		election_view(e, &v);
		ever_leader |= v.leader;
		usleep(20 * 1000);
	}
	election_view(e, &v);
	ever_leader |= v.leader;
	print_message("fake etcd: %u answers, %llu refused as malformed, %llu failed\n", served,
		      (unsigned long long)v.bad_answers, (unsigned long long)v.etcd_errors);
	assert_false(ever_leader);
	assert_true(served >= 11); /* every kind of answer was given at least once */
	assert_true(v.bad_answers >= 5);
	assert_string_equal(v.leader_node, "");
	election_stop(e);
	stop_srv = 1;
	pthread_join(t, NULL);
	close(srv_fd);
	free(huge);
}

/* Bounds: no endpoint, a ttl under 5 s, a relative prefix. */
static void test_config_refused(void **state)
{
	struct election_cfg cfg = {.n_endpoints = 1, .ttl_s = 4};
	struct election *e = NULL;

	(void)state;
	snprintf(cfg.endpoints[0], sizeof(cfg.endpoints[0]), "http://127.0.0.1:1");
	snprintf(cfg.prefix, sizeof(cfg.prefix), "/x");
	snprintf(cfg.node, sizeof(cfg.node), "a");
	snprintf(cfg.advertise, sizeof(cfg.advertise), "127.0.0.1:1");
	assert_int_equal(election_start(&e, &cfg), -EINVAL);
	cfg.ttl_s = 5;
	cfg.n_endpoints = 0;
	assert_int_equal(election_start(&e, &cfg), -EINVAL);
	cfg.n_endpoints = 1;
	snprintf(cfg.prefix, sizeof(cfg.prefix), "x");
	assert_int_equal(election_start(&e, &cfg), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_garbage_answers_counted_never_leader),
	    cmocka_unit_test(test_config_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
