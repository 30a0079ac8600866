// SPDX-License-Identifier: MIT
/*
 * The metrics endpoints' HTTP server (user/lib/http.c) on a real loopback
 * socket: GET /metrics gets the writer's text under the daemon's lock,
 * anything else 404, a client that sends nothing is cut off and does not
 * hold the next one, and http_stop ends the thread and closes the port.
 * Every client read has a timeout, so a broken server fails a test rather
 * than hanging it.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <cmocka.h>

#include "lib/http.h"
#include "lib/util.h"

struct fx {
	struct http_server s;
	pthread_mutex_t lock;
	int calls;     /* writer calls */
	int lock_held; /* the writer found the lock held each time */
	char addr[32];
};

static int writer(FILE *f, void *arg)
{
	struct fx *x = arg;

	x->calls++;
	if (pthread_mutex_trylock(&x->lock) == EBUSY)
		x->lock_held++;
	else
		pthread_mutex_unlock(&x->lock);
	fprintf(f, "leaseline_test_total %d\n", x->calls);
	return 0;
}

/* A server on an ephemeral loopback port, idle clients cut after idle_s (0: the default). */
static int setup_idle(void **state, unsigned int idle_s)
{
	static struct fx x;
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	memset(&x, 0, sizeof(x));
	pthread_mutex_init(&x.lock, NULL);
	if (http_listen(&x.s, "127.0.0.1:0"))
		return -1;
	x.s.idle_s = idle_s;
	if (http_serve(&x.s, writer, &x, &x.lock))
		return -1;
	if (getsockname(x.s.fd, (struct sockaddr *)&sa, &len))
		return -1;
	snprintf(x.addr, sizeof(x.addr), "%u", ntohs(sa.sin_port));
	*state = &x;
	return 0;
}

static int setup(void **state)
{
	return setup_idle(state, 0);
}

/* Idle clients kept 60 s: long past any scrape. */
static int setup_patient(void **state)
{
	return setup_idle(state, 60);
}

static int teardown(void **state)
{
	struct fx *x = *state;

	http_stop(&x->s);
	pthread_mutex_destroy(&x->lock);
	return 0;
}

/* A blocking loopback client with 5 s timeouts, or -1. */
static int client(const struct fx *x)
{
	struct timeval tv = {.tv_sec = 5};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(x->addr))};
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (c < 0)
		return -1;
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa))) {
		close(c);
		return -1;
	}
	return c;
}

/* Send req on a new connection, read the whole answer into buf. */
static ssize_t ask(const struct fx *x, const char *req, char *buf, size_t size)
{
	int c = client(x);
	size_t got = 0;
	ssize_t n;

	if (c < 0)
		return -1;
	if (send(c, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
		close(c);
		return -1;
	}
	while (got + 1 < size && (n = recv(c, buf + got, size - 1 - got, 0)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(c);
	return (ssize_t)got;
}

static void test_metrics_served_under_lock(void **state)
{
	struct fx *x = *state;
	char buf[1024];

	assert_true(ask(x, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
	assert_int_equal(strncmp(buf, "HTTP/1.", 7), 0);
	assert_non_null(strstr(buf, " 200 OK\r\n"));
	assert_non_null(strstr(buf, "Content-Type: text/plain; version=0.0.4\r\n"));
	assert_non_null(strstr(buf, "Content-Length: 23\r\n"));
	assert_non_null(strstr(buf, "\r\n\r\nleaseline_test_total 1\n"));
	assert_int_equal(x->calls, 1);
	assert_int_equal(x->lock_held, 1);
}

static void test_other_paths_404(void **state)
{
	struct fx *x = *state;
	char buf[1024];

	assert_true(ask(x, "GET /debug HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, " 404 Not Found\r\n"));
	assert_true(ask(x, "POST /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "404"));
	assert_int_equal(x->calls, 0); /* the writer never ran */
}

/* A scraper that connects and says nothing is dropped after the server's
 * timeout; the next one is answered behind it.
 */
static void test_silent_client_does_not_hold_the_next(void **state)
{
	struct fx *x = *state;
	int silent = client(x);
	char buf[1024], one;

	assert_true(silent >= 0);
	assert_true(ask(x, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "200 OK"));
	/* the server closed the silent connection without an answer */
	assert_int_equal(recv(silent, &one, 1, 0), 0);
	close(silent);
}

/* Fifty clients that connect and say nothing do not delay a scrape: it is
 * answered while every one of them is still open, waiting out its own
 * timeout (a server that served one connection at a time answered it only
 * once each had been cut off: 50 times its timeout).
 */
static void test_idle_clients_do_not_delay_a_scrape(void **state)
{
	struct fx *x = *state;
	int idle[50];
	char buf[1024], one;

	for (size_t i = 0; i < ARRAY_SIZE(idle); i++) {
		idle[i] = client(x);
		assert_true(idle[i] >= 0);
	}
	assert_true(ask(x, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "200 OK"));
	assert_non_null(strstr(buf, "leaseline_test_total 1\n"));
	for (size_t i = 0; i < ARRAY_SIZE(idle); i++) {
		assert_int_equal(recv(idle[i], &one, 1, MSG_DONTWAIT), -1);
		assert_int_equal(errno, EAGAIN);
		close(idle[i]);
	}
}

/* A request longer than the server reads is answered from what it read,
 * never by reading past its buffer (run under ASan in make san).
 */
static void test_long_request_bounded(void **state)
{
	struct fx *x = *state;
	static char req[8192];
	char buf[1024];

	memset(req, 'a', sizeof(req) - 1);
	memcpy(req, "GET /metrics ", 13);
	req[sizeof(req) - 1] = '\0';
	assert_true(ask(x, req, buf, sizeof(buf)) >= 0);
	assert_true(x->calls <= 1);
}

static void test_stop_closes_the_port(void **state)
{
	struct fx *x = *state;
	struct fx copy = *x;

	http_stop(&x->s);
	assert_int_equal(x->s.fd, -1);
	assert_null(x->s.d);
	assert_int_equal(client(&copy), -1); /* nothing listens any more */
	http_stop(&x->s);		     /* twice is safe */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_metrics_served_under_lock, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_paths_404, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_silent_client_does_not_hold_the_next, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_idle_clients_do_not_delay_a_scrape, setup_patient,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_long_request_bounded, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_closes_the_port, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
