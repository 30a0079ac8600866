// SPDX-License-Identifier: MIT
/*
 * The daemons' signal flags (see signals.h). Invariant: the handler only
 * sets a sig_atomic_t flag (async-signal-safe); everything else happens in
 * the main loop, which sees the flag within one tick.
 */
#include "lib/signals.h"

volatile sig_atomic_t sig_reload, sig_stop;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		sig_reload = 1;
	else
		sig_stop = 1;
}

void signals_install(void)
{
	struct sigaction sa = {.sa_handler = on_signal};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

void signals_install_daemon(void)
{
	/* A peer that has gone makes a write fail with EPIPE, which the
	 * connection handles; SSL_write writes without MSG_NOSIGNAL, and the
	 * default action would end the daemon with no line logged.
	 */
	struct sigaction sa = {.sa_handler = SIG_IGN};

	signals_install();
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);
}
