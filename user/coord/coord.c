// SPDX-License-Identifier: MIT
/*
 * The coordinator: owns the policy and its version, leases shares of every
 * global limit to agents, and keeps, after every change and at all times,
 * sum of live rate shares <= R - reserve and sum of live burst shares <=
 * B - reserve (ledger.h), where reserve is the fallback shares of all
 * gateways. A restarted coordinator takes a new durable epoch before its
 * first grant and issues nothing until every grant of earlier epochs has
 * died (the quiet period).
 *
 * This file is the daemon: start (configuration, policy, state, sockets,
 * the user it runs as), the main loop and its periodic work, SIGHUP, exit.
 * The rest is in limits.c, connections.c, grants.c and metering.c
 * (coord_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "coord/coord.h"
#include "coord/coord_int.h"
#include "coord/handshakes.h"
#include "coord/hotkeys.h"
#include "lib/http.h"
#include "lib/lease_clock.h"
#include "lib/log.h"
#include "coord/coord_metrics.h"
#include "lib/net.h"
#include "lib/signals.h"
#include "coord/state.h"
#include "coord/store.h"
#include "lib/tls.h"
#include "coord/usage_writer.h"
#include "lib/util.h"

#define COORD_TICK_MS	  20
#define COORD_EPOLL_BATCH 256

/* The holders' connections first, then those without a HELLO, then new
 * ones from the door: a holder's report waits for no stranger, and for no
 * batch of new connections in the same turn. (Strangers' TLS handshakes
 * are the door's: handshakes.h.)
 */
static void handle_events(struct coord *co, const struct epoll_event *ev, int n)
{
	bool door = false, done[COORD_EPOLL_BATCH] = {false};

	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 == EP_ELECTION) {
			on_election(co); /* who leads, before anything is granted */
			done[i] = true;
		}
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 == EP_USAGE) {
			usage_done(co); /* acks and grants the ledger's commits allow, first */
			done[i] = true;
		}
	for (int i = 0; i < n; i++) {
		uint64_t d = ev[i].data.u64;
		struct cconn *cc = d == EP_DOOR || d == EP_USAGE || d == EP_ELECTION
				       ? NULL
				       : co->conns[d - EP_CONN0];

		if (done[i]) {
			continue;
		} else if (d == EP_DOOR) {
			door = done[i] = true;
		} else if (cc && cc->holder >= 0) {
			conn_event(co, (int)(d - EP_CONN0), ev[i].events);
			done[i] = true;
		}
	}
	for (int i = 0; i < n; i++)
		if (!done[i])
			conn_event(co, (int)(ev[i].data.u64 - EP_CONN0), ev[i].events);
	if (door)
		conns_admit(co);
}

/* Periodic work: connections late with their HELLO are dropped, silent
 * holders stop asking, targets follow demand, the invariant is checked.
 * (Not static: tests/fuzz/fuzz_coord_session.c runs it between turns.)
 */
void coord_tick(struct coord *co)
{
	uint64_t now = clock_now_ns(), silence = lease_deadline(0, co->cfg.ttl_ns);

	conns_hello_deadline(co, now);

	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++) {
		struct cholder *h = &co->h[hi];

		if (h->used && h->asking && now - h->last_report_ns > silence) {
			pr_info("holder '%s' silent for %.3f s: its share goes to the others\n",
				h->name, ns_to_s(now - h->last_report_ns));
			holder_asking(co, (int)hi, false);
		}
	}

	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct climit *c = &co->lim[l];

		if (c->dirty && now >= c->next_recompute_ns)
			targets_recompute(c, now);
		/* Every key visited now and then; violations seen while granting. */
		co->violations += hotkeys_tick(&c->hot, &c->led, now, false);
		check_invariant(co, c, now);
	}
}

static void reload(struct coord *co)
{
	/* New certificates for new connections; the ones up keep theirs. */
	if (co->tls.ctx) {
		char err[CFG_ERR_LEN];

		if (handshakes_reload_tls(co->hs, &co->cfg.tls, err, sizeof(err)))
			pr_warn("%s; the certificate in use stays\n", err);
		else
			pr_info("tls: certificate '%s' reloaded\n", co->cfg.tls.cert);
	}
	pr_info("reloading policy '%s'\n", co->cfg.policy_path);
	if (policy_load(co, false)) {
		co->reloads_refused++;
		pr_warn("reload refused; policy version %llu stays\n",
			(unsigned long long)co->pol->version);
		return;
	}
	co->reloads++;
	usage_ledger_ensure(co); /* a newly metered limit; failing, its reports get no grant */
	for (int ci = 0; ci < (int)co->max_conns; ci++) {
		if (co->conns[ci] && co->conns[ci]->holder >= 0)
			send_policy(co, ci);
		conn_watch(co, ci);
	}
}

/* Become `user` once every socket is bound and the state is open: the
 * coordinator needs no privilege to lease. The state directory and its
 * files pass to that user first (compaction creates files there). Returns
 * 0, or 1 with a log line; never half-done (setgid before setuid, both
 * checked, and root cannot be regained).
 */
static int run_as(struct coord *co, const char *user)
{
	static const char *const files[] = {
	    ".",	 "epoch.log",	  "usage.log",	   "initialised",
	    "ledger.db", "ledger.db-wal", "ledger.db-shm",
	};
	struct passwd *pw = getpwnam(user);

	if (!pw) {
		pr_warn("user '%s' (coord.yaml user:) does not exist\n", user);
		return 1;
	}
	/* Never through a symlink: one planted in the state directory would
	 * hand its target (any file root owns) to the user.
	 */
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		struct stat st;

		if (fstatat(co->store.dir_fd, files[i], &st, AT_SYMLINK_NOFOLLOW)) {
			if (errno == ENOENT)
				continue;
		} else if (S_ISLNK(st.st_mode)) {
			pr_warn("state-dir '%s': %s is a symlink: refusing to give it to '%s'\n",
				co->cfg.state_dir, files[i], user);
			return 2;
		}
		if (fchownat(co->store.dir_fd, files[i], pw->pw_uid, pw->pw_gid,
			     AT_SYMLINK_NOFOLLOW) &&
		    errno != ENOENT) {
			pr_warn("cannot give state-dir '%s' to '%s': %s\n", co->cfg.state_dir, user,
				strerror(errno));
			return 1;
		}
	}
	if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid) ||
	    (pw->pw_uid != 0 && setuid(0) == 0)) {
		pr_warn("cannot run as '%s': %s\n", user, strerror(errno));
		return 1;
	}
	pr_info("running as '%s' (uid %u)\n", user, (unsigned)pw->pw_uid);
	return 0;
}

static int coord_start(struct coord *co)
{
	struct cfg_policy *scratch = calloc(1, sizeof(*scratch));
	char addr[CFG_ADDR_LEN + 8];
	struct cfg_err e;
	int err;

	if (!scratch)
		return 1;
	err = cfg_coord_load(co->path, &co->cfg, scratch, &e);
	free(scratch);
	if (err) {
		pr_warn("%s\n", e.msg);
		return 2;
	}
	co->h = calloc(co->cfg.gateways, sizeof(*co->h));
	co->gone = calloc(co->cfg.gateways, sizeof(*co->gone));
	co->max_conns = co->cfg.gateways + COORD_SPARE_CONNS;
	co->conns = calloc(co->max_conns, sizeof(*co->conns));
	co->ep = epoll_create1(EPOLL_CLOEXEC);
	if (!co->h || !co->gone || !co->conns || co->ep < 0 || slots_init(&co->slots, co->conns, co->max_conns))
		return 1;
	for (uint32_t i = 0; i < co->cfg.gateways; i++)
		co->h[i].conn = -1;
	if (policy_load(co, true))
		return 2;
	if (co->cfg.tls.set) {
		char msg[CFG_ERR_LEN];

		if (tls_ctx_load(&co->tls, &co->cfg.tls, true, msg, sizeof(msg))) {
			pr_warn("%s\n", msg);
			return 2;
		}
	}
	err = coord_store_open(&co->store, co->cfg.state_dir);
	if (err) {
		pr_warn("cannot use state-dir '%s': %s\n", co->cfg.state_dir, strerror(-err));
		return 1;
	}
	if (co->cfg.grant_key_path[0] && coord_store_grant_key(&co->store, co->cfg.grant_key_path))
		return 2;
	/* Grants of earlier epochs may be live until their deadline: wait them
	 * out (replicas: from the start of each term, leadership.c).
	 */
	co->quiet_until = clock_now_ns() + lease_deadline(0, co->cfg.ttl_ns);
	if (!co->cfg.has_replicas)
		pr_info("epoch %llu (durable); quiet for %.3f s before capacity moves\n",
			(unsigned long long)co->store.epoch,
			ns_to_s(lease_deadline(0, co->cfg.ttl_ns)));
	if (leadership_start(co))
		return 1;
	co->listen_fd = net_listen(co->cfg.listen);
	if (co->listen_fd < 0) {
		pr_warn("cannot listen on '%s': %s\n", co->cfg.listen, strerror(-co->listen_fd));
		return 1;
	}
	if (co->cfg.has_metrics) {
		int err =
		    http_start(&co->metrics, co->cfg.metrics, coord_metrics_write, co, &co->lock);

		if (err) {
			pr_warn("cannot listen for metrics on '%s': %s\n", co->cfg.metrics,
				strerror(-err));
			return 1;
		}
		/* On port 0, which one the kernel chose (tests bind so). */
		net_bound_name(co->cfg.metrics, co->metrics.fd, addr, sizeof(addr));
		if (strcmp(addr, co->cfg.metrics))
			pr_info("metrics listening on %s\n", addr);
	}
	if (co->cfg.user[0] && (err = run_as(co, co->cfg.user)))
		return err;
	/* As the user it runs as: the ledger's files are its own. */
	if (usage_ledger_ensure(co))
		return 1;
	/* The door last: from here on connections are taken. */
	err = handshakes_start(&co->hs, co->listen_fd, &co->tls, co->max_conns,
			       co->cfg.pending_per_address, co->cfg.pending_per_prefix);
	if (err) {
		pr_warn("cannot start the handshake thread: %s\n", strerror(-err));
		return 1;
	}
	if (epoll_ctl(co->ep, EPOLL_CTL_ADD, handshakes_fd(co->hs),
		      &(struct epoll_event){.events = EPOLLIN, .data.u64 = EP_DOOR}))
		return 1;
	/* Its last word at start, and on port 0 the port it got. */
	net_bound_name(co->cfg.listen, co->listen_fd, addr, sizeof(addr));
	pr_info("coordinator listening on %s%s\n", addr,
		co->tls.ctx	   ? " (mutual TLS)"
		: co->cfg.insecure ? " (insecure: no TLS)"
				   : "");
	return 0;
}

int coord_run(const char *config_path)
{
	struct coord *co = calloc(1, sizeof(*co));
	int rc;

	if (!co)
		return 1;
	co->path = config_path;
	co->listen_fd = co->ep = co->metrics.fd = -1;
	pthread_mutex_init(&co->lock, NULL);
	co->store.dir_fd = co->store.epoch_fd = co->store.usage_fd = -1;
	co->msg = malloc(sizeof(*co->msg));
	co->out = malloc(sizeof(*co->out));
	signals_install_daemon();
	rc = co->msg && co->out ? coord_start(co) : 1;
	while (!rc && !sig_stop) {
		struct epoll_event ev[COORD_EPOLL_BATCH];
		int n = epoll_wait(co->ep, ev, COORD_EPOLL_BATCH, COORD_TICK_MS);

		/* The state lock: the metrics thread reads struct coord under it. */
		pthread_mutex_lock(&co->lock);
		if (sig_reload) {
			sig_reload = 0;
			reload(co);
		}
		handle_events(co, ev, n);
		coord_tick(co);
		pthread_mutex_unlock(&co->lock);
	}
	http_stop(&co->metrics);
	handshakes_stop(co->hs); /* nothing new while the rest goes */
	leadership_stop(co); /* resign first: another replica leads at once */
	for (int ci = 0; co->conns && ci < (int)co->max_conns; ci++)
		conn_drop(co, ci, "coordinator exiting");
	if (co->listen_fd >= 0)
		close(co->listen_fd);
	if (co->ep >= 0)
		close(co->ep);
	limits_free(co->lim, co->n_limits);
	free(co->h);
	free(co->gone);
	free(co->hl);
	free(co->conns);
	slots_free(&co->slots);
	coord_store_close(&co->store);
	/* After the connections: what the writer still commits gets no ack. */
	uwriter_stop(co->uw);
	free(co->pol);
	free(co->yaml);
	tls_ctx_free(&co->tls);
	free(co->msg);
	free(co->out);
	free(co);
	return rc;
}
