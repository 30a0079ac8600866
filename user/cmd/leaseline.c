// SPDX-License-Identifier: MIT
/*
 * leaseline's command table: each command declares its options and a
 * handler; exit codes follow reference §2 (0 ok, 1 runtime failure, 2 usage or
 * configuration error).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>

#include "agent/agent.h"
#include "agent/attach.h"
#include "lib/monotonic.h"
#include "lib/config.h"
#include "coord/coord.h"
#include "agent/dp.h"
#include "lib/log.h"
#include "lib/out.h"
#include "cmd/check.h"
#include "cmd/status.h"
#include "cmd/top.h"
#include "cmd/usage_cmd.h"
#include "lib/units.h"
#include "lib/version.h"
#include "lib/walk.h"
#include "lib/util.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

struct cmd {
	const char *name;
	const char *usage;
	const char *help;
	int (*run)(int argc, char **argv);
	/* A command with -j: its options, so that main() knows before parsing
	 * them for real whether a usage error too must be JSON.
	 */
	const char *shortopts;
	const struct option *longopts;
};

static const struct cmd *find_cmd(const char *name);

/* -j (reference §3): stdout carries JSON only, a failure included: one
 * object {"error", "exit"[, "file", "line", "col"]} once nothing else was
 * printed there (json_done). Warnings are kept meanwhile (log_capture).
 */
static bool json_mode, json_done;

static void json_error(const char *msg, int code, const struct cfg_err *where)
{
	struct out o;

	out_init(&o, stdout, true);
	out_obj_begin(&o, NULL);
	out_str(&o, "error", msg);
	out_u64(&o, "exit", (uint64_t)code);
	if (where && where->file[0]) {
		out_str(&o, "file", where->file);
		if (where->line) {
			out_u64(&o, "line", where->line);
			out_u64(&o, "col", where->col);
		}
	}
	out_obj_end(&o);
	out_finish(&o);
	json_done = true;
}

/* One line: "leaseline CMD: MESSAGE; see 'leaseline CMD --help'" (under -j
 * the JSON error, without the pointer to --help).
 */
/* A command's usage, of one line or more: each line after the first
 * indented by `rest` as the first is by `first`.
 */
static void print_usage(const char *first, const char *rest, const char *usage)
{
	const char *p = usage;

	for (const char *pre = first; *p; pre = rest) {
		const char *nl = strchr(p, '\n');
		int n = nl ? (int)(nl - p) : (int)strlen(p);

		printf("%s%.*s\n", pre, n, p);
		p += n + (nl != NULL);
	}
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "leaseline %s: ", cmd);

	snprintf(msg + n, sizeof(msg) - (size_t)n, fmt, arg);
	if (json_mode)
		json_error(msg, EXIT_USAGE, NULL);
	else
		fprintf(stderr, "%s; see 'leaseline %s --help'\n", msg, cmd);
	return EXIT_USAGE;
}

/* The command closest to a mistyped name, or NULL: at most one edit per
 * three characters, or the start of exactly one command's name.
 */
static const char *closest_cmd(const char *name);

static int unknown_cmd(const char *who, const char *name)
{
	const char *best = closest_cmd(name);

	fprintf(stderr, "%s: unknown command '%s'", who, name);
	if (best)
		fprintf(stderr, "; did you mean '%s'?", best);
	fprintf(stderr, " (see 'leaseline help')\n");
	return EXIT_USAGE;
}

static int print_help(const char *name)
{
	const struct cmd *c = find_cmd(name);

	print_usage("usage: ", "       ", c->usage);
	printf("\n%s\n", c->help);
	return 0;
}

/* The option getopt stopped at, as typed: "--name" (without "=value") for
 * a long option, else "-c". opterr is 0, so this is the only message.
 */
static void bad_opt_name(char **argv, char *buf, size_t len)
{
	const char *a = optind > 0 ? argv[optind - 1] : "";

	if (!strncmp(a, "--", 2))
		snprintf(buf, len, "%.*s", (int)strcspn(a, "="), a);
	else if (optopt)
		snprintf(buf, len, "-%c", optopt);
	else
		snprintf(buf, len, "%s", a);
}

/* Options common to all commands; returns -1 to continue, else an exit code.
 * Option strings start with ':', so a missing argument comes back as ':'.
 */
static int common_opt(const char *cmd, int opt, char **argv)
{
	char name[64];

	switch (opt) {
	case 'v':
		log_set_level(log_get_level() < LOG_DEBUG ? log_get_level() + 1 : LOG_DEBUG);
		return -1;
	case 'h':
		return print_help(cmd);
	case ':':
		bad_opt_name(argv, name, sizeof(name));
		return usage_error(cmd, "option '%s' needs an argument", name);
	default:
		bad_opt_name(argv, name, sizeof(name));
		return usage_error(cmd, "unknown option '%s'", name);
	}
}

static int cmd_agent(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"config", required_argument, NULL, 'c'},	{"verbose", no_argument, NULL, 'v'},
	    {"detach-on-exit", no_argument, NULL, 'D'}, {"force", no_argument, NULL, 'f'},
	    {"help", no_argument, NULL, 'h'},		{},
	};
	struct agent_opts o = {};
	int opt, rc;

	while ((opt = getopt_long(argc, argv, ":c:vfh", lo, NULL)) != -1) {
		if (opt == 'c')
			o.config_path = optarg;
		else if (opt == 'D')
			o.detach_on_exit = true;
		else if (opt == 'f')
			o.force = true;
		else if ((rc = common_opt("agent", opt, argv)) >= 0)
			return rc;
	}
	if (!o.config_path)
		return usage_error("agent", "%s", "missing -c FILE");
	return agent_run(&o);
}

static const struct option config_lo[] = {
    {"config", required_argument, NULL, 'c'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {},
};
#define CONFIG_SO ":c:vh"
static const struct option check_lo[] = {
    {"config", required_argument, NULL, 'c'},
    {"json", no_argument, NULL, 'j'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {},
};
#define CHECK_SO ":c:jvh"

/* Options of commands that take -c FILE (a bare FILE too, if allowed), and
 * -j where json is not NULL. Returns -1 with *path set to go on, else an
 * exit code.
 */
static int config_only_opts(const char *cmd, int argc, char **argv, bool bare, const char **path,
			    bool *json)
{
	int opt, rc;

	*path = NULL;
	while ((opt = getopt_long(argc, argv, json ? CHECK_SO : CONFIG_SO,
				  json ? check_lo : config_lo, NULL)) != -1) {
		if (opt == 'c')
			*path = optarg;
		else if (opt == 'j' && json)
			*json = true;
		else if ((rc = common_opt(cmd, opt, argv)) >= 0)
			return rc;
	}
	if (!*path && bare && optind < argc)
		*path = argv[optind];
	if (!*path)
		return usage_error(cmd, "%s", "missing -c FILE");
	return -1;
}

static int cmd_coord(int argc, char **argv)
{
	const char *path;
	int rc = config_only_opts("coord", argc, argv, false, &path, NULL);

	return rc >= 0 ? rc : coord_run(path);
}

static int cmd_coord_status(int argc, char **argv)
{
	const char *path;
	bool json = false, printed;
	int rc = config_only_opts("coord-status", argc, argv, true, &path, &json);

	if (rc >= 0)
		return rc;
	rc = coord_status(path, json, &printed);
	if (json && printed)
		json_done = true;
	return rc;
}

static int cmd_check(int argc, char **argv)
{
	const char *path;
	bool json = false;
	int rc = config_only_opts("check", argc, argv, true, &path, &json);
	struct cfg_err e;

	if (rc >= 0)
		return rc;
	rc = check_file(path, json, &e);
	if (rc && json)
		json_error(e.msg, rc, &e);
	else if (rc)
		fprintf(stderr, "%s\n", e.msg);
	if (json && !rc)
		json_done = true;
	return rc;
}

static const struct option status_lo[] = {
    {"pin-dir", required_argument, NULL, 'p'},
    {"json", no_argument, NULL, 'j'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {},
};
#define STATUS_SO ":p:jvh"

/* A command that failed without saying why (a map read that failed) says
 * it here: every failure has a message, in text and in JSON.
 */
static int failed(const char *cmd, unsigned int warned, int err, int code)
{
	if (log_warn_count() == warned)
		pr_warn("leaseline %s: %s\n", cmd, strerror(err < 0 ? -err : EIO));
	return code;
}

static int cmd_status(int argc, char **argv)
{
	const char *pin_dir = CFG_DEFAULT_PIN_DIR;
	unsigned int warned = log_warn_count();
	bool json = false;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, STATUS_SO, status_lo, NULL)) != -1) {
		if (opt == 'p')
			pin_dir = optarg;
		else if (opt == 'j')
			json = true;
		else if ((rc = common_opt("status", opt, argv)) >= 0)
			return rc;
	}
	if (optind < argc)
		return usage_error("status", "unexpected argument '%s'", argv[optind]);
	rc = status_print(pin_dir, json);
	return rc ? failed("status", warned, rc, EXIT_RUNTIME) : 0;
}

/* -w: seconds ("2", "0.5") or a duration ("500ms"), within the bounds of top.h. */
static int parse_interval(const char *s, uint64_t *ns)
{
	char *end;
	double secs;

	if (!units_parse_duration(s, ns))
		goto check;
	errno = 0;
	secs = strtod(s, &end);
	if (errno || end == s || *end || !(secs >= 0) || secs > 1e6)
		return -EINVAL;
	*ns = (uint64_t)(secs * 1e9 + 0.5);
check:
	return *ns >= TOP_MIN_INTERVAL_NS && *ns <= TOP_MAX_INTERVAL_NS ? 0 : -ERANGE;
}

static const struct option top_lo[] = {
    {"pin-dir", required_argument, NULL, 'p'},
    {"limit", required_argument, NULL, 'l'},
    {"rows", required_argument, NULL, 'n'},
    {"json", no_argument, NULL, 'j'},
    {"watch", required_argument, NULL, 'w'},
    {"count", required_argument, NULL, 'C'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {},
};
#define TOP_SO ":p:l:n:jw:vh"

static int cmd_top(int argc, char **argv)
{
	struct top_opts o = {.pin_dir = CFG_DEFAULT_PIN_DIR, .rows = TOP_DEFAULT_ROWS};
	unsigned int warned = log_warn_count();
	uint64_t v;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, TOP_SO, top_lo, NULL)) != -1) {
		if (opt == 'p') {
			o.pin_dir = optarg;
		} else if (opt == 'l') {
			o.limit = optarg;
		} else if (opt == 'n') {
			if (units_parse_uint(optarg, &v) || v < 1 || v > TOP_MAX_ROWS)
				return usage_error("top", "-n '%s': expected rows, 1 to 100000",
						   optarg);
			o.rows = (uint32_t)v;
		} else if (opt == 'j') {
			o.json = true;
		} else if (opt == 'w') {
			if (parse_interval(optarg, &o.interval_ns))
				return usage_error("top",
						   "-w '%s': expected seconds from 0.1 to 3600 "
						   "(2, 0.5, 500ms)",
						   optarg);
		} else if (opt == 'C') {
			if (units_parse_uint(optarg, &v) || v < 1 || v > UINT32_MAX)
				return usage_error("top", "--count '%s': expected a count from 1",
						   optarg);
			o.count = (uint32_t)v;
		} else if ((rc = common_opt("top", opt, argv)) >= 0) {
			return rc;
		}
	}
	if (optind < argc)
		return usage_error("top", "unexpected argument '%s'", argv[optind]);
	if (o.count && !o.interval_ns)
		return usage_error("top", "%s", "--count needs -w SECONDS");
	rc = top_run(&o);
	if (rc == TOP_NO_SUCH_LIMIT)
		return EXIT_USAGE; /* said, with the limits there are */
	return rc ? failed("top", warned, rc, EXIT_RUNTIME) : 0;
}

static const struct option usage_lo[] = {
    {"config", required_argument, NULL, 'c'},
    {"period", required_argument, NULL, 'P'},
    {"limit", required_argument, NULL, 'l'},
    {"holder", required_argument, NULL, 'H'},
    {"from", required_argument, NULL, 'F'},
    {"to", required_argument, NULL, 'T'},
    {"json", no_argument, NULL, 'j'},
    {"csv", no_argument, NULL, 'C'},
    {"reconcile", no_argument, NULL, 'R'},
    {"keys", no_argument, NULL, 'K'},
    {"key", required_argument, NULL, 'k'},
    {"ledger", required_argument, NULL, 'L'},
    {"pin-dir", required_argument, NULL, 'p'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {},
};
#define USAGE_SO ":c:jvh"

static int cmd_usage(int argc, char **argv)
{
	struct usage_opts o = {.period = ULEDGER_HOUR};
	int opt, rc;

	while ((opt = getopt_long(argc, argv, USAGE_SO, usage_lo, NULL)) != -1) {
		if (opt == 'c') {
			o.config = optarg;
		} else if (opt == 'P') {
			if (!strcmp(optarg, "hour"))
				o.period = ULEDGER_HOUR;
			else if (!strcmp(optarg, "day"))
				o.period = ULEDGER_DAY;
			else if (!strcmp(optarg, "month"))
				o.period = ULEDGER_MONTH;
			else
				return usage_error("usage",
						   "--period '%s': expected hour, day or month",
						   optarg);
		} else if (opt == 'l') {
			o.limit = optarg;
		} else if (opt == 'H') {
			o.holder = optarg;
		} else if (opt == 'F' || opt == 'T') {
			if (usage_parse_time(optarg, opt == 'F' ? &o.from : &o.to))
				return usage_error("usage",
						   "'%s': expected a UTC time (2026-11-01, "
						   "2026-11-01T10, 2026-11-01T10:20:30Z) or @SECONDS",
						   optarg);
		} else if (opt == 'j' || opt == 'C') {
			enum usage_format f = opt == 'j' ? USAGE_JSON : USAGE_CSV;

			if (o.format != USAGE_TEXT && o.format != f)
				return usage_error("usage", "%s", "-j and --csv: choose one");
			o.format = f;
		} else if (opt == 'R') {
			o.reconcile = true;
		} else if (opt == 'K') {
			o.keys = true;
		} else if (opt == 'k') {
			o.key = optarg;
		} else if (opt == 'L') {
			o.ledger = optarg;
		} else if (opt == 'p') {
			o.pin_dir = optarg;
		} else if ((rc = common_opt("usage", opt, argv)) >= 0) {
			return rc;
		}
	}
	if (optind < argc)
		return usage_error("usage", "unexpected argument '%s'", argv[optind]);
	if (!o.config && !o.ledger)
		return usage_error("usage", "%s", "missing -c FILE (or --ledger FILE)");
	if (o.from && o.to && o.from >= o.to)
		return usage_error("usage", "%s", "--from is not before --to");
	if (o.pin_dir && (!o.reconcile || !o.holder))
		return usage_error("usage", "%s",
				   "--pin-dir goes with --reconcile and --holder NAME (the gateway's "
				   "node name in the ledger)");
	/* --reconcile -j exits 1 with differences: its document is the answer,
	 * not an {"error"} after it.
	 */
	o.json_printed = &json_done;
	return usage_run(&o);
}

static int cmd_reset_fence(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"pin-dir", required_argument, NULL, 'p'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	const char *pin_dir = CFG_DEFAULT_PIN_DIR;
	uint64_t epoch = 0, version = 0;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, ":p:vh", lo, NULL)) != -1) {
		if (opt == 'p')
			pin_dir = optarg;
		else if ((rc = common_opt("reset-fence", opt, argv)) >= 0)
			return rc;
	}
	rc = dp_pinned_reset_fence(pin_dir, &epoch, &version);
	if (rc) {
		fprintf(stderr, "leaseline reset-fence: %s\n", strerror(-rc));
		return EXIT_RUNTIME;
	}
	printf("fence reset under '%s': coordinator epoch %llu and applied grants forgotten; "
	       "running policy version %llu now counts as 1 and keeps enforcing until the "
	       "coordinator's policy replaces it\n",
	       pin_dir, (unsigned long long)epoch, (unsigned long long)version);
	return 0;
}

/* Whether this kernel runs leaseline: the helper probe, then a real load
 * (default sizes, nothing pinned or attached), timed.
 */
static int cmd_kernel(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	struct dp_opts o = {0};
	struct dp dp;
	int opt, rc;
	enum log_level lv = log_get_level();

	while ((opt = getopt_long(argc, argv, ":vh", lo, NULL)) != -1)
		if ((rc = common_opt("kernel", opt, argv)) >= 0)
			return rc;
	/* dp_open's own report is printed here, on stdout, instead. */
	if (lv == LOG_INFO)
		log_set_level(LOG_WARN);
	rc = dp_open(&dp, &o);
	log_set_level(lv);
	if (rc) {
		fprintf(stderr, "leaseline kernel: leaseline cannot run on this kernel\n");
		return EXIT_RUNTIME;
	}
	printf("%s: the XDP program loads in %llu ms, %u instructions verified\n",
	       dp.kernel, (unsigned long long)dp.load_ms, dp.verified_insns);
	dp_close(&dp);
	return 0;
}

static int cmd_detach(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"force", no_argument, NULL, 'f'},
	    {"pin-dir", required_argument, NULL, 'p'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	const char *pin_dir = CFG_DEFAULT_PIN_DIR;
	bool force = false;
	int opt, rc, ifindex, err;

	while ((opt = getopt_long(argc, argv, ":fp:vh", lo, NULL)) != -1) {
		if (opt == 'f')
			force = true;
		else if (opt == 'p')
			pin_dir = optarg;
		else if ((rc = common_opt("detach", opt, argv)) >= 0)
			return rc;
	}
	if (optind >= argc)
		return usage_error("detach", "%s", "missing IFACE");
	ifindex = (int)if_nametoindex(argv[optind]);
	if (!ifindex)
		return usage_error("detach", "no interface '%s'", argv[optind]);
	struct attach_info ai;
	bool in_dispatcher = !attach_query(ifindex, &ai) && ai.dispatcher;

	err = attach_detach(ifindex, force, pin_dir);
	if (err == -ENOENT) {
		fprintf(stderr, "leaseline detach: no XDP program on '%s'\n", argv[optind]);
		return EXIT_RUNTIME;
	}
	if (err == -EBUSY) {
		if (in_dispatcher && ai.our_id)
			fprintf(stderr,
				"leaseline detach: the leaseline program (id %u) in the libxdp "
				"dispatcher on '%s' is another pin directory's than %s (--pin-dir "
				"names the agent's; --force removes that program only)\n",
				ai.our_id, argv[optind], pin_dir);
		else if (in_dispatcher)
			fprintf(
			    stderr,
			    "leaseline detach: the libxdp dispatcher on '%s' holds no leaseline "
			    "program (it holds %s); --force removes the dispatcher and every "
			    "program in it\n",
			    argv[optind], ai.others[0] ? ai.others : "nothing");
		else
			fprintf(stderr,
				"leaseline detach: the XDP program on '%s' is not leaseline's; "
				"use --force to remove it anyway\n",
				argv[optind]);
		return EXIT_RUNTIME;
	}
	if (err) {
		fprintf(stderr, "leaseline detach: cannot detach from '%s': %s\n", argv[optind],
			strerror(-err));
		return EXIT_RUNTIME;
	}
	if (in_dispatcher && ai.our_id)
		printf("detached leaseline's program (id %u) from the dispatcher on '%s'%s%s\n",
		       ai.our_id, argv[optind], ai.others[0] ? "; still there: " : "", ai.others);
	else
		printf("detached from '%s'\n", argv[optind]);
	return 0;
}

static int cmd_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("leaseline %s\n", LL_VERSION);
	return 0;
}

static int cmd_help(int argc, char **argv);

static const struct cmd cmds[] = {
    {"agent", "leaseline agent -c agent.yaml [-v] [--detach-on-exit] [--force]",
     "Gateway daemon, in the foreground: load and attach the XDP program, pin its maps,\n"
     "apply the policy; SIGHUP re-reads the configuration (a bad file is refused and the\n"
     "running policy keeps enforcing). The program stays attached on exit unless\n"
     "--detach-on-exit. --force replaces another tool's XDP program, or takes the\n"
     "interface over from another pin directory's bpf_link.",
     cmd_agent, NULL, NULL},
    {"coord", "leaseline coord -c coord.yaml [-v]",
     "Coordinator daemon, in the foreground: leases shares of every global limit to the\n"
     "agents that connect, so that together they never exceed the contract. SIGHUP\n"
     "re-reads the policy (a newer version is pushed to every agent).",
     cmd_coord, NULL, NULL},
    {"coord-status", "leaseline coord-status -c coord.yaml [-j]",
     "A coordinator replica as an operator asks after it, changing nothing: with\n"
     "replicas:, each etcd member (up, version, raft leader), who holds the leader key\n"
     "and under which epoch, the epoch counter; then the replica's own metrics (leader,\n"
     "epoch, etcd up, deadline margin, quiet seconds, holders, redirects, step-downs).\n"
     "Exit 0 when the replica answers and etcd names a leader, 1 otherwise (why is\n"
     "printed), 2 for a bad file. -j prints one JSON document.",
     cmd_coord_status, CHECK_SO, check_lo},
    {"check", "leaseline check -c FILE [-j]",
     "Validate an agent, coordinator or policy file; no side effects.\n"
     "Errors are printed as FILE:LINE:COL: message and exit 2. -j prints one JSON\n"
     "object, the error too: {\"error\", \"exit\", \"file\", \"line\", \"col\"}.",
     cmd_check, CHECK_SO, check_lo},
    {"status", "leaseline status [--pin-dir DIR] [-j]",
     "Attached interfaces, policy version, limits, counters, from the pinned maps.\n"
     "-j prints one JSON document (a failure: {\"error\", \"exit\"}).",
     cmd_status, STATUS_SO, status_lo},
    {"top", "leaseline top [--pin-dir DIR] [-n ROWS] [--limit NAME] [-j] [-w SECONDS [--count N]]",
     "Per limit, the keys denied the most and the keys allowed the most (packets, or\n"
     "bytes for a bytes limit), from the pinned maps: addresses (with /prefix when the\n"
     "limit aggregates), ports (udp/53), flows (tcp 198.18.0.1:1234 -> 198.18.0.2:80).\n"
     "A denied key shows why it is refused and when a retry can pass ('retry in 18.3 ms').\n"
     "-n rows per list (default 10); --limit one limit only; -j one JSON document.\n"
     "-w SECONDS refreshes every SECONDS (0.1 to 3600), redrawing on a terminal, with\n"
     "rates over each interval, until ^C or --count frames (-j: one document a line;\n"
     "a failure: {\"error\", \"exit\"}).",
     cmd_top, TOP_SO, top_lo},
    {"usage",
     "leaseline usage -c coord.yaml [--period hour|day|month] [--limit NAME] [--holder NAME]\n"
     "                [--from TIME] [--to TIME] [-j | --csv] [--reconcile] [--keys | --key KEY]\n"
     "leaseline usage --ledger FILE --reconcile --pin-dir DIR --holder NAME [-c coord.yaml]\n"
     "                [--limit NAME] [--key KEY] [-j | --csv]",
     "The coordinator's usage ledger (limits with meter: true): admitted, denied,\n"
     "fallback and bypass per limit, holder and UTC period, in the limit's unit.\n"
     "TIME: 2026-11-01, 2026-11-01T10, 2026-11-01T10:20:30Z (UTC) or @SECONDS; the\n"
     "periods overlapping [--from, --to). -j one JSON document, --csv CSV.\n"
     "--reconcile: per limit and period, summed over holders, what passed against\n"
     "B + R*T, each excess listed with its likely cause (bypass, fallback, late\n"
     "reports); exit 1 if any.\n"
     "--keys: per key of limits with a key (admitted, denied, fallback, bypass in the\n"
     "limit's unit; -j and --csv give packets and bytes); --key KEY one key only;\n"
     "with --reconcile, per key and period against the key's own contract.\n"
     "--reconcile --pin-dir DIR --holder NAME (on the gateway): each series of the\n"
     "per-key counters pinned under DIR (ll_meter, summed over CPUs) against what the\n"
     "ledger accounted for it under the pins' counters identity; each difference\n"
     "listed with its cause (late reports, with their fallback and bypass); exit 1\n"
     "if any. --ledger FILE: the ledger file (a copy, or the coordinator's).",
     cmd_usage, USAGE_SO, usage_lo},
    {"kernel", "leaseline kernel",
     "Whether this kernel can run leaseline: probes the BPF helpers the XDP program\n"
     "calls, then loads it (nothing pinned, nothing attached) and prints the kernel,\n"
     "the load's time and the verifier's instruction count. A kernel it cannot run on\n"
     "gets one line naming what is missing and what to upgrade to, and exit 1.",
     cmd_kernel, NULL, NULL},
    {"detach", "leaseline detach [--pin-dir DIR] IFACE [--force]",
     "Remove leaseline's XDP program from IFACE: its bpf_link is detached and the link's\n"
     "pin under DIR (default /sys/fs/bpf/leaseline) removed. --force removes another\n"
     "tool's program (or another pin directory's link) too.",
     cmd_detach, NULL, NULL},
    {"reset-fence", "leaseline reset-fence [--pin-dir DIR]",
     "Forget the coordinator epoch and applied grants pinned under DIR (default\n"
     "/sys/fs/bpf/leaseline), and let the next policy from the coordinator replace the\n"
     "running one whatever its version: for a fence a fake coordinator poisoned. The\n"
     "running policy keeps enforcing; leases die at their expiry.",
     cmd_reset_fence, NULL, NULL},
    {"version", "leaseline version | -V | --version", "Print the version.", cmd_version, NULL,
     NULL},
    {"help", "leaseline help [COMMAND]", "Show help for leaseline or a command.", cmd_help, NULL,
     NULL},
};

#define N_CMDS ARRAY_SIZE(cmds)

static const struct cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

static const char *closest_cmd(const char *name)
{
	const char *best = NULL, *prefixed = NULL;
	size_t best_d = SIZE_MAX, n_prefixed = 0;

	for (size_t i = 0; i < N_CMDS; i++) {
		size_t d = walk_edit_distance(name, cmds[i].name);

		if (d < best_d) {
			best_d = d;
			best = cmds[i].name;
		}
		if (*name && !strncmp(cmds[i].name, name, strlen(name))) {
			prefixed = cmds[i].name;
			n_prefixed++;
		}
	}
	if (best && 3 * best_d <= strlen(name) + 1)
		return best;
	return n_prefixed == 1 ? prefixed : NULL;
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 2)
		return usage_error("help", "unexpected argument '%s'", argv[2]);
	if (argc > 1 && find_cmd(argv[1]))
		return print_help(argv[1]);
	if (argc > 1)
		return unknown_cmd("leaseline help", argv[1]);
	printf("usage: leaseline COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < N_CMDS; i++)
		print_usage("  ", "  ", cmds[i].usage);
	printf("\n'leaseline COMMAND --help' shows one command's help.\n");
	return 0;
}

/* Whether argv asks for -j, read with the command's own options (silently:
 * the real parse reports what is wrong), so that even a usage error is JSON.
 */
static bool wants_json(const struct cmd *c, int argc, char **argv)
{
	bool json = false;
	int opt;

	if (!c->longopts)
		return false;
	optind = 0; /* glibc: start afresh */
	while ((opt = getopt_long(argc, argv, c->shortopts, c->longopts, NULL)) != -1)
		json |= opt == 'j';
	optind = 0;
	return json;
}

int main(int argc, char **argv)
{
	const struct cmd *c;
	const char *kept;
	int rc;

	log_hook_libbpf();
	opterr = 0; /* common_opt says what is wrong, once */
	if (argc < 2) {
		cmd_help(0, NULL);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cmd_help(0, NULL);
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))
		return cmd_version(0, NULL);
	c = find_cmd(argv[1]);
	if (!c)
		return unknown_cmd("leaseline", argv[1]);
	json_mode = wants_json(c, argc - 1, argv + 1);
	if (!json_mode)
		return c->run(argc - 1, argv + 1);
	log_capture(true);
	rc = c->run(argc - 1, argv + 1);
	kept = log_captured();
	log_capture(false);
	if (rc && !json_done)
		json_error(*kept ? kept : "failed", rc, NULL);
	else if (*kept) /* warnings of a command that did its job */
		fprintf(stderr, "%s\n", kept);
	return rc;
}
