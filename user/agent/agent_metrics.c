// SPDX-License-Identifier: MIT
/*
 * The agent's exposition (see metrics.h). Reads the maps only; never writes
 * one, so a scrape cannot change what the datapath enforces.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <bpf/bpf.h>

#include "lib/monotonic.h"
#include "agent/dp.h"
#include "agent/agent_metrics.h"
#include "lib/prom.h"
#include "agent/stats.h"
#include "tb_math.h"
#include "lib/util.h"

static const char *verdicts[] = {"allowed", "denied", "shadow_denied", "fallback", "bypass"};
#define N_VERDICTS ARRAY_SIZE(verdicts)

/* This gateway's share of each global limit and how long it has left:
 * three families, each with its samples together.
 */
static void write_leases(FILE *f, struct dp *dp, const struct ll_policy *pol)
{
	static const struct {
		const char *name, *help;
	} fam[] = {
	    {"leaseline_lease_rate", "This gateway's leased rate share (tokens/s; per key for a "
				     "per-key limit)."},
	    {"leaseline_lease_burst", "This gateway's leased burst share (tokens)."},
	    {"leaseline_lease_remaining_seconds", "Time until the lease dies in the kernel."},
	    {"leaseline_lease_key_grants", "Per-key grants this gateway holds for a per-key "
					   "limit (keys with a share other than the default)."},
	};
	uint64_t now = clock_now_ns();

	for (size_t i = 0; i < ARRAY_SIZE(fam); i++) {
		prom_family(f, fam[i].name, "gauge", fam[i].help);
		for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
			const struct ll_limit_cfg *c = &pol->limits[id];
			struct ll_lease l;

			if (!c->in_use || c->scope != LL_SCOPE_GLOBAL ||
			    (i == 3 && c->key_mode == LL_KEY_NONE) ||
			    bpf_map_lookup_elem_flags(dp->leases_fd, &id, &l, BPF_F_LOCK))
				continue;
			fprintf(f, "%s{limit=\"%s\"}", fam[i].name, c->name);
			prom_value(f, i == 0		  ? (double)l.rate
				      : i == 1		  ? (double)(l.burst_s / TB_SCALE)
				      : i == 3		  ? (double)l.n_key_grants
				      : l.expiry_ns > now ? ns_to_s(l.expiry_ns - now)
							  : 0.0);
		}
	}
}

/* The coordinator link's counters (ll_state; zero for a standalone agent). */
static void write_link(FILE *f, const struct ll_state *st)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} fam[] = {
	    {"leaseline_grants_applied_total", "counter", "Grants from the coordinator applied.",
	     offsetof(struct ll_state, grants_applied)},
	    {"leaseline_grants_stale_total", "counter",
	     "Grants not applied: refused by fencing, for another holder or incarnation, or for "
	     "a limit or policy version this agent does not run.",
	     offsetof(struct ll_state, grants_stale)},
	    {"leaseline_grants_clamped_total", "counter",
	     "Grants that asked more than the contract or the ttl cap, applied clamped.",
	     offsetof(struct ll_state, grants_clamped)},
	    {"leaseline_grants_bad_keys_total", "counter",
	     "Grants refused because a per-key grant named a malformed or repeated key.",
	     offsetof(struct ll_state, grants_bad_keys)},
	    {"leaseline_hot_keys", "gauge",
	     "Hot keys (per-key limits) listed in the last report to the coordinator.",
	     offsetof(struct ll_state, hot_keys_listed)},
	    {"leaseline_hot_keys_dropped_total", "counter",
	     "Hot keys not tracked or not reported for want of room (they stay at the default "
	     "share).",
	     offsetof(struct ll_state, hot_keys_dropped)},
	    {"leaseline_coordinator_link_up", "gauge",
	     "1 while this agent is connected to its coordinator (0 for a standalone agent).",
	     offsetof(struct ll_state, link_up)},
	    {"leaseline_coordinator_connects_total", "counter",
	     "Connections made to the coordinator since this agent started.",
	     offsetof(struct ll_state, link_connects)},
	    {"leaseline_policy_applies_total", "counter",
	     "Policies applied (at start, by reloads, from the coordinator), ever.",
	     offsetof(struct ll_state, applies)},
	};

	for (size_t i = 0; i < ARRAY_SIZE(fam); i++) {
		prom_family(f, fam[i].name, fam[i].type, fam[i].help);
		fprintf(f, "%s %llu\n", fam[i].name,
			(unsigned long long)*(const uint64_t *)((const char *)st + fam[i].off));
	}
}

/* What happened to keys without a bucket of their own, per limit (the
 * per-CPU counters of key events, bpf/key.h), then how full each bucket
 * map is against its pressure mark (ll_fill).
 */
static void write_keys(FILE *f, struct dp *dp, const struct ll_policy *pol)
{
	static const struct {
		const char *name, *help;
	} fam[] = {
	    {"leaseline_keys_created_total", "Keys given a full bucket of their own (the key "
					     "table not under pressure)."},
	    {"leaseline_prefix_packets_total",
	     "Packets of keys without a bucket charged to their prefix's fallback bucket (the "
	     "key table under pressure)."},
	    {"leaseline_prefix_buckets_total", "Prefix fallback buckets created."},
	    {"leaseline_keys_graduated_total",
	     "Keys given a bucket of their own after their prefix's fallback bucket admitted "
	     "them (with what it had left, never a fresh burst)."},
	    {"leaseline_overflow_packets_total",
	     "Packets charged to the limit's overflow bucket (no room in the key table nor "
	     "for a prefix fallback bucket)."},
	};
	static const struct {
		const char *name, *help;
	} tab[] = {
	    {"leaseline_table_buckets", "Buckets in a key table, as the datapath counts them "
					"(corrected by each reap pass)."},
	    {"leaseline_table_pressure_buckets",
	     "Buckets from which on a key table is under pressure: new keys go through their "
	     "prefix's fallback bucket."},
	    {"leaseline_table_capacity_buckets", "Entries of a key table."},
	};
	static const char *const maps[LL_FILL_MAPS] = {"ll_buckets", "ll_flow_buckets"};

	for (size_t i = 0; i < ARRAY_SIZE(fam); i++) {
		prom_family(f, fam[i].name, "counter", fam[i].help);
		for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
			struct ll_limit_stats s;

			if (!pol->limits[id].in_use || pol->limits[id].key_mode == LL_KEY_NONE ||
			    stats_limit(dp->limit_stats_fd, id, &s))
				continue;
			fprintf(f, "%s{limit=\"%s\"}", fam[i].name, pol->limits[id].name);
			prom_value(f, (double)(i == 0	? s.new_keys
					       : i == 1 ? s.prefix_pkts
					       : i == 2 ? s.prefix_buckets
					       : i == 3 ? s.graduated
							: s.overflow_pkts));
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(tab); i++) {
		prom_family(f, tab[i].name, "gauge", tab[i].help);
		for (unsigned int m = 0; dp->fill && m < LL_FILL_MAPS; m++) {
			const struct ll_fill *fl = &dp->fill[m];

			fprintf(f, "%s{map=\"%s\"}", tab[i].name, maps[m]);
			prom_value(f, (double)__atomic_load_n(i == 0   ? &fl->live
							      : i == 1 ? &fl->mark
								       : &fl->cap,
							      __ATOMIC_RELAXED));
		}
	}
}

/* Per rule (by position; the last, "(default)", counts packets no rule
 * matched): packets and bytes matched and dropped. Bounded by LL_MAX_RULES.
 */
static void write_rules(FILE *f, struct dp *dp, const struct ll_policy *pol)
{
	static const struct {
		const char *name, *help;
	} fam[] = {
	    {"leaseline_rule_packets_total",
	     "Packets by rule (by position in the running policy; (default): matched by no rule) "
	     "and result: matched, or dropped (by a limit or by default: drop)."},
	    {"leaseline_rule_bytes_total", "Bytes by rule and result, as the packets."},
	};

	for (size_t i = 0; i < ARRAY_SIZE(fam); i++) {
		prom_family(f, fam[i].name, "counter", fam[i].help);
		for (uint32_t r = 0; r <= pol->n_rules && r <= LL_MAX_RULES; r++) {
			uint32_t idx = r == pol->n_rules ? LL_MAX_RULES : r;
			const char *name = idx == LL_MAX_RULES ? "(default)" : pol->rules[r].name;
			struct ll_rule_stats rs = {};

			stats_rule(dp->rule_stats_fd, idx, &rs);
			fprintf(f, "%s{rule=\"%s\",result=\"matched\"} %llu\n", fam[i].name, name,
				(unsigned long long)(i ? rs.matched_bytes : rs.matched_pkts));
			fprintf(f, "%s{rule=\"%s\",result=\"dropped\"} %llu\n", fam[i].name, name,
				(unsigned long long)(i ? rs.dropped_bytes : rs.dropped_pkts));
		}
	}
}

/* A CLOCK_MONOTONIC instant of this boot as Unix time (0 stays 0). */
static double mono_to_unix(uint64_t ns)
{
	struct timespec rt;

	if (!ns)
		return 0;
	clock_gettime(CLOCK_REALTIME, &rt);
	return (double)ts_to_ns(&rt) / NSEC_PER_SEC - ns_to_s(clock_now_ns() - ns);
}

/* Reloads as Prometheus reports its own: when the running policy was
 * applied, when one was last refused, and whether the last policy the agent
 * was given (a reload, or the coordinator's) is the one enforcing.
 */
static void write_reloads(FILE *f, const struct ll_state *st)
{
	prom_family(f, "leaseline_policy_applied_timestamp_seconds", "gauge",
		    "Unix time the running policy was applied (start, reload, or the "
		    "coordinator's); 0: none yet.");
	fprintf(f, "leaseline_policy_applied_timestamp_seconds %.3f\n",
		mono_to_unix(st->applied_ns));
	prom_family(f, "leaseline_policy_refused_timestamp_seconds", "gauge",
		    "Unix time of the last policy refused; 0: none since the pins were created.");
	fprintf(f, "leaseline_policy_refused_timestamp_seconds %.3f\n",
		mono_to_unix(st->refused_ns));
	prom_family(f, "leaseline_policy_last_reload_successful", "gauge",
		    "1 if the last policy the agent was given is the one enforcing, 0 if it was "
		    "refused (the one before keeps enforcing).");
	fprintf(f, "leaseline_policy_last_reload_successful %d\n",
		st->refused_ns > st->applied_ns ? 0 : 1);
}

/* Per-key metering (ll_meter_info): what a full ll_meter could not count
 * under a key of its own. Never silent (reference §6.3, "Per key").
 */
static void write_meter(FILE *f, struct dp *dp)
{
	struct ll_meter_info mi = {};

	if (dp_meter_info_read(dp, &mi))
		return;
	prom_family(
	    f, "leaseline_meter_overflow_packets_total", "counter",
	    "Packets of metered limits counted under their limit's (overflow) key: ll_meter "
	    "had no room for their key.");
	fprintf(f, "leaseline_meter_overflow_packets_total %llu\n", (unsigned long long)mi.full);
	prom_family(f, "leaseline_meter_lost_packets_total", "counter",
		    "Packets of metered limits not metered at all: ll_meter full and no overflow "
		    "entry for their limit.");
	fprintf(f, "leaseline_meter_lost_packets_total %llu\n", (unsigned long long)mi.lost_pkts);
}

int metrics_write(FILE *f, void *arg)
{
	struct dp *dp = arg;
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	uint64_t parse[LL_PARSE_MAX] = {};
	struct ll_state st = {};
	int err = pol ? 0 : -ENOMEM;

	if (!err)
		err = dp_state_read(dp->state_fd, &st);
	if (!err)
		err = dp_policy_read(dp->policy_fd, dp->state_fd, pol);
	if (err)
		goto out;
	fprintf(f, "# HELP leaseline_packets_total Packets by limit and verdict.\n"
		   "# TYPE leaseline_packets_total counter\n");
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			fprintf(f, "# HELP leaseline_bytes_total Bytes by limit and verdict.\n"
				   "# TYPE leaseline_bytes_total counter\n");
		for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
			struct ll_limit_stats s;
			uint64_t v[N_VERDICTS];

			if (!pol->limits[id].in_use || stats_limit(dp->limit_stats_fd, id, &s))
				continue;
			v[0] = pass ? s.allowed_bytes : s.allowed_pkts;
			v[1] = pass ? s.denied_bytes : s.denied_pkts;
			v[2] = pass ? s.shadow_denied_bytes : s.shadow_denied_pkts;
			v[3] = pass ? s.fallback_bytes : s.fallback_pkts;
			v[4] = pass ? s.bypass_bytes : s.bypass_pkts;
			for (size_t i = 0; i < N_VERDICTS; i++)
				fprintf(f, "leaseline_%s_total{limit=\"%s\",verdict=\"%s\"} %llu\n",
					pass ? "bytes" : "packets", pol->limits[id].name,
					verdicts[i], (unsigned long long)v[i]);
		}
	}
	write_leases(f, dp, pol);
	write_keys(f, dp, pol);
	fprintf(f, "# HELP leaseline_parse_total Frames by parse outcome.\n"
		   "# TYPE leaseline_parse_total counter\n");
	stats_parse(dp->parse_stats_fd, parse);
	for (uint32_t r = 0; r < LL_PARSE_MAX; r++)
		fprintf(f, "leaseline_parse_total{reason=\"%s\"} %llu\n",
			stats_parse_reason_name(r), (unsigned long long)parse[r]);
	fprintf(f,
		"# HELP leaseline_policy_version Version of the enforcing policy.\n"
		"# TYPE leaseline_policy_version gauge\nleaseline_policy_version %llu\n",
		(unsigned long long)st.version);
	fprintf(f,
		"# HELP leaseline_attached_interfaces Interfaces the XDP program is attached to "
		"(0: enforcing nothing).\n"
		"# TYPE leaseline_attached_interfaces gauge\nleaseline_attached_interfaces %u\n",
		st.n_ifaces);
	fprintf(f,
		"# HELP leaseline_policy_refusals_total Policies refused (reloads and the "
		"coordinator's); the running one keeps enforcing.\n"
		"# TYPE leaseline_policy_refusals_total counter\n"
		"leaseline_policy_refusals_total %llu\n",
		(unsigned long long)st.refusals);
	fprintf(f,
		"# HELP leaseline_policy_refused_version Version of the last refused policy "
		"(0: none, or not known).\n"
		"# TYPE leaseline_policy_refused_version gauge\n"
		"leaseline_policy_refused_version %llu\n",
		(unsigned long long)st.refused_version);
	write_reloads(f, &st);
	write_rules(f, dp, pol);
	write_link(f, &st);
	write_meter(f, dp);
	prom_build_info(f);
out:
	free(pol);
	return err;
}
