// SPDX-License-Identifier: MIT
/*
 * The daemons' signals (user/lib/signals.c, signals_install_daemon): SIGHUP
 * and SIGTERM set their flags and nothing else; a write to a socket whose peer has gone is an
 * error (EPIPE) the caller handles, never a SIGPIPE that kills the daemon
 * without a log line (systemd counts death by SIGPIPE as a clean exit, so
 * Restart=on-failure would never bring the agent back). Each case runs in
 * a child, so a death by signal is seen as one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/signals.h"

/* Run fn in a child after signals_install_daemon(); its wait status. */
static int in_child(int (*fn)(void))
{
	int st = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL); /* as a daemon starts, whatever the test runner set */
		signals_install_daemon();
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

/* write() and send() without MSG_NOSIGNAL, as SSL_write does through its
 * socket BIO: 0 when both fail with EPIPE.
 */
static int write_to_gone_peer(void)
{
	int sv[2];
	char b = 'x';

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 10;
	close(sv[1]);
	if (write(sv[0], &b, 1) != -1 || errno != EPIPE)
		return 11;
	if (send(sv[0], &b, 1, 0) != -1 || errno != EPIPE)
		return 12;
	return 0;
}

static void test_sigpipe_is_an_error_not_a_death(void **state)
{
	(void)state;
	int st = in_child(write_to_gone_peer);

	if (WIFSIGNALED(st))
		fail_msg("the daemon died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static int hup_then_term(void)
{
	if (sig_reload || sig_stop)
		return 20;
	raise(SIGHUP);
	if (!sig_reload || sig_stop)
		return 21;
	raise(SIGTERM);
	if (!sig_stop)
		return 22;
	sig_stop = 0;
	raise(SIGINT);
	return sig_stop ? 0 : 23;
}

static void test_hup_and_term_set_flags(void **state)
{
	(void)state;
	int st = in_child(hup_then_term);

	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigpipe_is_an_error_not_a_death),
		cmocka_unit_test(test_hup_and_term_set_flags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
