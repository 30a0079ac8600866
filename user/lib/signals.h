/* SPDX-License-Identifier: MIT */
/* The daemons' signals (agent, coordinator): SIGHUP asks for a reload,
 * SIGINT and SIGTERM for a clean stop. The handler only sets a flag; the
 * main loop acts on it.
 */
#ifndef LEASELINE_LIB_SIGNALS_H
#define LEASELINE_LIB_SIGNALS_H

#include <signal.h>

extern volatile sig_atomic_t sig_reload, sig_stop;

/* Install the handlers. Call before anything slow: a signal during start-up
 * must not kill the daemon.
 */
void signals_install(void);

/* The same, for a daemon: SIGPIPE is ignored too, so a write to a peer
 * that has gone is an error (EPIPE) for its connection, not the daemon's
 * end. A command that prints keeps SIGPIPE: `leaseline top | head` ends.
 */
void signals_install_daemon(void);

#endif
