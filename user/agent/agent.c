// SPDX-License-Identifier: MIT
/*
 * Agent lifecycle. Invariants: a configuration that fails to parse or
 * compile never replaces the running policy; on exit the program stays
 * attached (enforcement goes on) unless --detach-on-exit.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <bpf/bpf.h>

#include "agent/agent.h"
#include "agent/attach.h"
#include "lib/monotonic.h"
#include "lib/config.h"
#include "agent/dp.h"
#include "leaseline.skel.h" /* dp->skel->skeleton: the ELF multiprog loads again */
#include "lib/fs.h"
#include "lib/http.h"
#include "agent/link.h"
#include "lib/log.h"
#include "agent/agent_metrics.h"
#include "agent/pins.h"
#include "agent/policy.h"
#include "agent/privs.h"
#include "lib/signals.h"
#include "lib/tls.h"

#define AGENT_TICK_MS		100
#define AGENT_LINK_TICK_MS	10		    /* reports go out within 10 ms of being due */
#define AGENT_REAP_EVERY_MS	5000		    /* idle buckets are full after fill_ns anyway */
#define AGENT_UNATTACHED_SAY_NS (10 * NSEC_PER_SEC) /* repeat "not attached" this often */
#define AGENT_WATCH_EVERY_MS	1000		    /* is our program still where we put it? */

#define BPFFS_ROOT "/sys/fs/bpf"

static bool on_bpffs(const char *dir)
{
	struct statfs sf;

	return !statfs(dir, &sf) && sf.f_type == BPF_FS_MAGIC;
}

/* The pin directory holds every bucket and lease: root's alone. One the
 * agent makes is 0700; an existing one others can read is said so.
 */
static void pin_dir_mode_check(const char *dir)
{
	struct stat sb;

	if (!stat(dir, &sb) && (sb.st_mode & 077))
		pr_warn("pin directory '%s' is mode %03o: others can read the maps (chmod 0700)\n",
			dir, (unsigned)(sb.st_mode & 0777));
}

int agent_bpffs_ensure(const char *dir)
{
	int err;

	if (on_bpffs(dir)) {
		pin_dir_mode_check(dir);
		return 0;
	}
	err = fs_mkdir_p(dir, 0700);
	/* Under /sys/fs/bpf with no bpffs there (a fresh /sys: `ip netns
	 * exec` mounts one), mkdir fails in sysfs: mount it first, as tc and
	 * ip do.
	 */
	if (err && !strncmp(dir, BPFFS_ROOT "/", sizeof(BPFFS_ROOT)) && !on_bpffs(BPFFS_ROOT)) {
		if (mount("bpf", BPFFS_ROOT, "bpf", 0, "mode=0700")) {
			err = -errno;
			pr_warn("cannot mount bpffs at '" BPFFS_ROOT "': %s\n", strerror(-err));
			return err;
		}
		pr_info("mounted bpffs at '" BPFFS_ROOT "'\n");
		err = fs_mkdir_p(dir, 0700);
	}
	if (err) {
		pr_warn("cannot create pin directory '%s': %s\n", dir, strerror(-err));
		return err;
	}
	if (on_bpffs(dir))
		return 0; /* the parent is a bpffs: mkdir made the directory there, 0700 */
	if (mount("bpf", dir, "bpf", 0, "mode=0700")) {
		err = -errno;
		pr_warn("cannot mount bpffs at '%s': %s\n", dir, strerror(-err));
		return err;
	}
	pr_info("mounted bpffs at '%s'\n", dir);
	return 0;
}

static int load_config(const char *path, struct cfg_agent *ac, struct cfg_policy *pol)
{
	struct cfg_err e;
	int err = cfg_agent_load(path, ac, pol, &e);

	if (err) {
		pr_warn("%s\n", e.msg);
		return err;
	}
	return 0;
}

/* Everything that can be checked before anything changes: the
 * capabilities, every interface, what is attached there, the TLS files. A
 * failure is logged and exits 2 (systemd does not restart it: starting
 * again changes nothing) with no pin, map or directory made.
 */
static int preflight(const struct cfg_agent *ac, bool force)
{
	uint64_t missing = privs_missing();
	struct attach_req req = {
	    .attach_mode = ac->attach_mode, .force = force, .pin_dir = ac->pin_dir};
	char err[CFG_ERR_LEN];

	if (pins_dir_audit(ac->pin_dir))
		return -EPERM;
	if (missing) {
		pr_warn("the agent needs root, or CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN and "
			"CAP_NET_ADMIN (missing: 0x%llx); nothing loaded, pinned or attached\n",
			(unsigned long long)missing);
		return -EPERM;
	}
	for (uint32_t i = 0; i < ac->n_ifaces; i++) {
		const char *name = ac->ifaces[i].name;
		int ifindex = (int)if_nametoindex(name);
		struct attach_result res;
		int rc;

		if (!ifindex) {
			pr_warn("interface '%s': %s; nothing loaded, pinned or attached\n", name,
				strerror(errno));
			return -ENODEV;
		}
		rc = attach_check(ifindex, &req, &res);
		if (rc == -EBUSY) {
			pr_warn("interface '%s' already has %s; %s; nothing loaded, pinned or "
				"attached\n",
				name, res.why,
				res.dispatcher ? "use attach: {mode: multiprog} to run beside its "
						 "programs, or --force to replace it"
					       : "use --force to replace it");
			return rc;
		}
	}
	if (ac->has_coordinator && ac->tls.set) {
		struct tls_ctx t = {0};
		int rc = tls_ctx_load(&t, &ac->tls, false, err, sizeof(err));

		tls_ctx_free(&t);
		if (rc) {
			pr_warn("%s; nothing loaded, pinned or attached\n", err);
			return rc;
		}
	}
	return 0;
}

/* Apply pol; a refusal is logged and recorded for status and metrics. */
static int apply_policy(struct dp *dp, const struct cfg_policy *pol)
{
	char err[CFG_ERR_LEN];
	int ret = policy_apply(dp, pol, err, sizeof(err));

	if (ret) {
		pr_warn("policy version %llu refused: %s\n", (unsigned long long)pol->version, err);
		dp_refusal_note(dp, pol->version, err, clock_now_ns());
	} else
		pr_info("policy version %llu applied (%u limits, %u rules)\n",
			(unsigned long long)pol->version, pol->n_limits, pol->n_rules);
	return ret;
}

static int attach_all(struct dp *dp, const struct cfg_agent *ac, bool force)
{
	struct attach_req req = {.attach_mode = ac->attach_mode,
				 .priority = ac->attach_priority,
				 .force = force,
				 .pin_dir = ac->pin_dir,
				 .prog_fd = dp->prog_fd,
				 .obj = dp->skel->obj,
				 .elf = dp->skel->skeleton->data,
				 .elf_sz = dp->skel->skeleton->data_sz};
	struct ll_state st;
	__u32 k = 0;
	int err = dp_state_read(dp->state_fd, &st);

	if (err)
		return err;
	st.n_ifaces = 0;
	for (uint32_t i = 0; i < ac->n_ifaces; i++) {
		const struct cfg_iface *ifc = &ac->ifaces[i];
		int ifindex = (int)if_nametoindex(ifc->name);
		struct attach_result res;

		if (!ifindex) {
			pr_warn("interface '%s': %s\n", ifc->name, strerror(errno));
			return -ENODEV;
		}
		req.xdp_mode = ifc->mode;
		err = attach_iface(ifindex, &req, &res);
		if (err == -EBUSY) {
			pr_warn("interface '%s' already has %s; %s\n", ifc->name, res.why,
				res.dispatcher ? "use attach: {mode: multiprog} to run beside its "
						 "programs, or --force to replace it"
					       : "use --force to replace it");
			return err;
		}
		if (err == -EOPNOTSUPP && res.why[0]) {
			pr_warn("cannot attach to '%s' as one program of a dispatcher: %s; nothing "
				"of leaseline's is left attached there (attach: {mode: direct} "
				"attaches alone)\n",
				ifc->name, res.why);
			return err;
		}
		if (err) {
			pr_warn("cannot attach to '%s': %s%s%s\n", ifc->name, strerror(-err),
				res.why[0] ? ": " : "", res.why);
			return err;
		}
		if (res.took[0])
			pr_warn("took over '%s' from %s (--force)\n", ifc->name, res.took);
		if (res.gap_ns)
			pr_info("'%s' ran no XDP program for %llu us while the old one made way "
				"(the kernel holds one at a time)\n",
				ifc->name, (unsigned long long)(res.gap_ns / 1000));
		if (res.multiprog)
			pr_info("attached to '%s' (%s, multiprog: program id %u, priority %u%s)\n",
				ifc->name, attach_mode_name(res.xdp_mode), res.prog_id,
				ac->attach_priority, res.kept ? ", already there and kept" : "");
		else
			pr_info("attached to '%s' (%s): %s bpf_link %u, pinned at %s/%s%d\n",
				ifc->name, attach_mode_name(res.xdp_mode),
				res.updated ? "updated" : "new", res.link_id, ac->pin_dir,
				ATTACH_LINK_PIN, ifindex);
		st.ifindex[st.n_ifaces++] = (uint32_t)ifindex;
	}
	st.agent_pid = (uint32_t)getpid();
	st.netns_ino = fs_netns_ino();
	return bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY) ? -errno : 0;
}

/* Each interface ll_state lists still runs this pin directory's program?
 * One that does not (another agent took it with --force, someone detached
 * it, the interface went) is said once and dropped from ll_state, so that
 * status and leaseline_attached_interfaces tell the truth. The agent does
 * not take it back: that would fight whoever took it. Returns how many
 * interfaces are left.
 */
static uint32_t attach_watch(struct dp *dp, const char *pin_dir)
{
	struct ll_state st;
	uint32_t n = 0, before;
	__u32 k = 0;

	if (dp_state_read(dp->state_fd, &st))
		return 1; /* cannot tell: nothing changes */
	before = st.n_ifaces < LL_MAX_IFACES ? st.n_ifaces : LL_MAX_IFACES;
	for (uint32_t i = 0; i < before; i++) {
		char name[IF_NAMESIZE] = "?", what[160];
		struct attach_info cur;
		int ours = attach_owned((int)st.ifindex[i], pin_dir, &cur);

		if (ours > 0 || (ours < 0 && ours != -ENODEV)) {
			st.ifindex[n++] = st.ifindex[i]; /* ours, or cannot tell: kept */
			continue;
		}
		if_indextoname(st.ifindex[i], name);
		if (ours == -ENODEV)
			snprintf(what, sizeof(what), "the interface is gone");
		else if (cur.prog_id)
			snprintf(what, sizeof(what), "%s '%s' (id %u) runs there now",
				 cur.dispatcher ? "a dispatcher" : "the XDP program", cur.prog_name,
				 cur.prog_id);
		else
			snprintf(what, sizeof(what), "no XDP program runs there now");
		pr_warn("interface '%s' (ifindex %u): this agent's program is no longer attached "
			"(%s: another agent's --force, `leaseline detach` or `ip link set ... xdp "
			"off`); nothing of this agent's enforces there. It is not taken back; "
			"restart the agent (with --force to replace what is there) to attach again\n",
			name, st.ifindex[i], what);
	}
	if (n != before) {
		st.n_ifaces = n;
		if (bpf_map_update_elem(dp->state_fd, &k, &st, BPF_ANY))
			pr_warn("cannot update ll_state: %s\n", strerror(errno));
	}
	return n;
}

static void detach_all(const struct cfg_agent *ac)
{
	for (uint32_t i = 0; i < ac->n_ifaces; i++) {
		int ifindex = (int)if_nametoindex(ac->ifaces[i].name);
		int err = ifindex ? attach_detach(ifindex, false, ac->pin_dir) : -ENODEV;

		if (err)
			pr_warn("cannot detach from '%s': %s\n", ac->ifaces[i].name,
				strerror(-err));
		else
			pr_info("detached from '%s'\n", ac->ifaces[i].name);
	}
}

/* Settings that only take effect at start: say so rather than drop them. */
static void warn_restart_only(const struct cfg_agent *run, const struct cfg_agent *ac)
{
	bool ifaces = run->n_ifaces != ac->n_ifaces;

	for (uint32_t i = 0; !ifaces && i < ac->n_ifaces; i++)
		ifaces = strcmp(run->ifaces[i].name, ac->ifaces[i].name) ||
			 run->ifaces[i].mode != ac->ifaces[i].mode;
	if (ifaces)
		pr_warn("reload: 'interfaces' changed; restart the agent to apply it\n");
	if (run->attach_mode != ac->attach_mode || run->attach_priority != ac->attach_priority)
		pr_warn("reload: 'attach' changed; restart the agent to apply it\n");
	if (strcmp(run->pin_dir, ac->pin_dir))
		pr_warn("reload: 'pin-dir' changed; restart the agent to apply it\n");
	if (run->max_keys != ac->max_keys || run->max_flow_keys != ac->max_flow_keys)
		pr_warn("reload: 'max-keys' or 'max-flow-keys' changed; restart the agent to "
			"apply it\n");
	if (run->has_metrics != ac->has_metrics || strcmp(run->metrics, ac->metrics))
		pr_warn("reload: 'metrics' changed; restart the agent to apply it\n");
}

/* SIGHUP: re-read everything; on any error the running policy stays. */
static void reload(struct dp *dp, const char *path, const struct cfg_agent *run, struct link *link)
{
	struct cfg_agent *ac = calloc(1, sizeof(*ac));
	struct cfg_policy *pol = calloc(1, sizeof(*pol));

	struct cfg_err e;
	int err = ac && pol ? cfg_agent_load(path, ac, pol, &e) : -ENOMEM;

	pr_info("reloading '%s'\n", path);
	if (err) {
		pr_warn("%s\n", err == -ENOMEM ? "out of memory" : e.msg);
		dp_refusal_note(dp, 0, err == -ENOMEM ? "out of memory" : e.msg, clock_now_ns());
	} else {
		warn_restart_only(run, ac);
	}
	if (run->has_coordinator) {
		/* Certificates renew without a restart; leases are untouched. */
		if (!err && link)
			link_tls_reload(link, ac);
		pr_info("coordinated: the policy comes from the coordinator; nothing else to "
			"reload\n");
		goto out;
	}
	if (err || !pol->version || apply_policy(dp, pol)) {
		struct ll_state st = {};

		dp_state_read(dp->state_fd, &st);
		pr_warn("reload refused; policy version %llu keeps enforcing\n",
			(unsigned long long)st.version);
	}
out:
	free(ac);
	free(pol);
}

/* Wait up to one tick, serving the coordinator link (if any) meanwhile.
 * Metrics are served by their own thread (http.c).
 */
static void wait_tick(struct dp *dp, struct link *link)
{
	struct pollfd p = {.fd = -1};
	int timeout = link ? AGENT_LINK_TICK_MS : AGENT_TICK_MS;

	if (link)
		p.fd = link_pollfd(link, &p.events);
	poll(&p, 1, timeout);
	if (link)
		link_step(link, dp, p.fd >= 0 ? p.revents : 0, clock_now_ns());
}

/* A coordinated agent with no policy yet (none pinned from an earlier run)
 * does not attach until the coordinator's arrives: attached with an empty
 * policy it would pass everything, counted as nothing. Returns false if
 * told to stop first.
 */
static bool wait_first_policy(struct dp *dp, struct link *link)
{
	struct ll_state st = {};
	uint64_t next_say = 0;

	while (!sig_stop) {
		uint64_t now = clock_now_ns();

		if (!dp_state_read(dp->state_fd, &st) && st.version)
			return true;
		/* Not attached, enforcing nothing: say so now and then, not once. */
		if (now >= next_say) {
			if (st.refused_ns)
				pr_warn(
				    "not attached: policy version %llu from the coordinator was "
				    "refused (%s); waiting for one this agent can enforce\n",
				    (unsigned long long)st.refused_version, st.refused_why);
			else
				pr_info("waiting for the coordinator's policy before attaching\n");
			next_say = now + AGENT_UNATTACHED_SAY_NS;
		}
		wait_tick(dp, link);
	}
	return false;
}

/* Until told to stop (0), or until no interface runs this agent's program
 * any more (-ENOLINK: there is nothing left to enforce).
 */
static int run_loop(struct dp *dp, const char *path, const struct cfg_agent *run,
		    struct link *link)
{
	long since_reap = 0, since_watch = 0;

	while (!sig_stop) {
		if (sig_reload) {
			sig_reload = 0;
			reload(dp, path, run, link);
		}
		uint64_t t0 = clock_now_ns();
		long took;

		wait_tick(dp, link);
		took = (long)((clock_now_ns() - t0) / 1000000);
		since_reap += took;
		since_watch += took;
		if (since_reap >= AGENT_REAP_EVERY_MS) {
			int n = dp_buckets_reap(dp, clock_now_ns());

			since_reap = 0;
			if (n > 0)
				pr_debug("reaped %d idle buckets\n", n);
		}
		if (since_watch >= AGENT_WATCH_EVERY_MS && run->n_ifaces) {
			since_watch = 0;
			if (!attach_watch(dp, run->pin_dir)) {
				pr_warn("no interface runs this agent's program any more: exiting (2); "
					"its pins stay\n");
				return -ENOLINK;
			}
		}
	}
	return 0;
}

int agent_run(const struct agent_opts *opts)
{
	struct cfg_agent *ac = calloc(1, sizeof(*ac));
	struct cfg_policy *pol = calloc(1, sizeof(*pol));
	struct dp dp = {.rcu_fd = -1};
	struct link link = {.c.fd = -1};
	bool have_link = false;
	struct http_server metrics = {.fd = -1};
	int rc = 1, err, pin_lock = -1;

	if (!ac || !pol)
		goto out;
	signals_install_daemon(); /* before anything slow */
	if (load_config(opts->config_path, ac, pol) || preflight(ac, opts->force)) {
		rc = 2;
		goto out;
	}
	/* The metrics port first: an agent that cannot have it stops before it
	 * touches a pin, a policy or an interface (as root, so a port below
	 * 1024 works too).
	 */
	if (ac->has_metrics) {
		err = http_listen(&metrics, ac->metrics);
		if (err) {
			pr_warn("cannot listen for metrics on '%s': %s; nothing loaded, changed or "
				"attached\n",
				ac->metrics, strerror(-err));
			goto out;
		}
	}
	if (agent_bpffs_ensure(ac->pin_dir))
		goto out;
	/* One agent per pin directory, for as long as it runs. */
	if (pins_lock(ac->pin_dir, &pin_lock))
		goto out;
	/* Links detached meanwhile (leaseline detach, an interface gone): their
	 * pins would keep the old program, and it the maps, alive.
	 */
	attach_links_sweep(ac->pin_dir);
	struct dp_opts dopts = {.pin_dir = ac->pin_dir,
				.max_keys = ac->max_keys,
				.max_flow_keys = ac->max_flow_keys,
				.flow_keys_set = true};
	/* Restarted in multiprog mode: the program left in the dispatcher is
	 * kept when the new load is the same one (dp_opts.adopt_prog_id).
	 */
	if (ac->attach_mode == CFG_ATTACH_MULTIPROG && ac->n_ifaces) {
		struct attach_info cur;
		int ifx = (int)if_nametoindex(ac->ifaces[0].name);

		if (ifx && !attach_query(ifx, &cur) && cur.dispatcher && cur.our_id)
			dopts.adopt_prog_id = cur.our_id;
	}
	err = dp_open(&dp, &dopts);
	if (err) {
		if (err == -ELOOP)
			rc = 2; /* a pin that is a symlink: the operator's to remove */
		goto out;
	}
	pr_info("maps pinned under '%s'\n", ac->pin_dir);
	/* Loaded and pinned: from here on (threads included) only what the loop
	 * needs. Attaching needs CAP_NET_ADMIN and CAP_BPF, which stay.
	 */
	err = privs_drop();
	if (err)
		pr_warn("cannot drop capabilities: %s; running with all of them\n", strerror(-err));
	if (ac->has_coordinator) {
		if (link_init(&link, ac))
			goto out;
		have_link = true;
		pr_info("coordinated by %s as '%s'; the policy comes from there\n", ac->coordinator,
			ac->node);
	} else if (apply_policy(&dp, pol)) {
		goto out;
	}
	/* Metrics before attaching: a coordinated agent still waiting for a
	 * policy it can enforce shows that (leaseline_attached 0, the refusal).
	 */
	if (ac->has_metrics) {
		err = http_serve(&metrics, metrics_write, &dp, NULL);
		if (err) {
			pr_warn("cannot serve metrics on '%s': %s\n", ac->metrics, strerror(-err));
			goto out;
		}
		pr_info("metrics on http://%s/metrics\n", ac->metrics);
	}
	if (have_link && !wait_first_policy(&dp, &link))
		goto done; /* told to stop before there was anything to enforce */
	err = attach_all(&dp, ac, opts->force);
	if (err) {
		/* What preflight saw changed since (a program attached, an
		 * interface gone, a pin planted): as much a matter of
		 * configuration as if it had been found there, and a restart
		 * would find the same.
		 */
		if (err == -EBUSY || err == -ENODEV || err == -EEXIST || err == -ELOOP) {
			pr_warn("the interfaces changed after they were checked; nothing more "
				"attached\n");
			rc = 2;
		}
		goto out;
	}

	pr_info("agent '%s' running (pid %d)\n", ac->node, (int)getpid());
	if (run_loop(&dp, opts->config_path, ac, have_link ? &link : NULL)) {
		rc = 2; /* restarting would find the interfaces taken: refused */
		goto out;
	}
	if (opts->detach_on_exit)
		detach_all(ac);
	else
		pr_info("exiting; XDP program stays attached and enforcing\n");
done:
	rc = 0;
out:
	if (have_link)
		link_free(&link);
	http_stop(&metrics); /* before dp_close: the thread reads its maps */
	if (dp.skel)
		dp_close(&dp);
	pins_unlock(&pin_lock);
	free(ac);
	free(pol);
	return rc;
}
