// SPDX-License-Identifier: MIT
/*
 * Status from pinned maps only: works while an agent runs, after it exited,
 * or from another namespace that shares the bpffs. Never writes a map.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <net/if.h>

#include <bpf/bpf.h>

#include "agent/attach.h"
#include "lib/monotonic.h"
#include "lib/config.h"
#include "agent/dp.h"
#include "lib/fs.h"
#include "lib/log.h"
#include "lib/out.h"
#include "cmd/pinned.h"
#include "agent/stats.h"
#include "cmd/status.h"
#include "tb_math.h"

/* The recent window `status` reports what enforce would have dropped over. */
#define STATUS_WINDOW_SECONDS 10.0

/* Add the keys of one bucket map (ll_buckets or ll_flow_buckets, whose keys
 * begin alike) to their limits' counts, walking the map once.
 */
static void count_keys(int fd, const struct ll_policy *pol, uint64_t keys[LL_MAX_LIMITS])
{
	struct ll_flow_key k, next; /* room for either kind */
	struct ll_key_head h;
	bool more = !bpf_map_get_next_key(fd, NULL, &next);

	while (more) {
		k = next;
		more = !bpf_map_get_next_key(fd, &k, &next);
		memcpy(&h, &k, sizeof(h));
		if (h.family == LL_OVERFLOW_FAMILY)
			continue;
		for (int i = 0; i < LL_MAX_LIMITS; i++)
			if (pol->limits[i].in_use && pol->limits[i].uid == h.limit_uid)
				keys[i]++;
	}
}

static void print_ifaces(struct out *o, const struct ll_state *st, const char *pin_dir)
{
	/* ifindexes mean something only in the agent's network namespace. */
	bool here = !st->netns_ino || st->netns_ino == fs_netns_ino();

	if (!here)
		out_str(o, "interfaces_note",
			"attached in another network namespace; run status there to see them");
	out_arr_begin(o, "interfaces");
	for (uint32_t i = 0; i < st->n_ifaces && i < LL_MAX_IFACES; i++) {
		char name[IF_NAMESIZE] = "?";
		struct attach_info ai;

		if (here)
			if_indextoname(st->ifindex[i], name);
		out_obj_begin(o, NULL);
		out_str(o, "name", name);
		out_u64(o, "ifindex", st->ifindex[i]);
		/* attached: this pin directory's program runs there (not only
		 * one named leaseline).
		 */
		int ours = here ? attach_owned((int)st->ifindex[i], pin_dir, &ai) : -1;

		if (ours >= 0) {
			out_str(o, "mode", attach_mode_name(ai.mode));
			out_u64(o, "prog_id", ai.prog_id);
			out_bool(o, "attached", ours);
		}
		out_obj_end(o);
	}
	out_arr_end(o);
}

/* A global limit: this gateway's share, how long it lives, what on-loss did. */
static void print_lease(struct out *o, const struct pinned *p, uint32_t id,
			const struct ll_limit_stats *s)
{
	static const char *const on_loss[] = {"fail-closed", "fallback", "fail-open"};
	uint64_t now = clock_now_ns();
	struct ll_lease l;

	if (bpf_map_lookup_elem_flags(p->leases, &id, &l, BPF_F_LOCK))
		return;
	out_obj_begin(o, "lease");
	out_u64(o, "rate", l.rate);
	out_u64(o, "burst", l.burst_s / TB_SCALE);
	out_bool(o, "live", now < l.expiry_ns);
	out_f64(o, "remaining_seconds", now < l.expiry_ns ? ns_to_s(l.expiry_ns - now) : 0);
	out_u64(o, "epoch", l.epoch);
	out_u64(o, "seq", l.seq);
	out_u64(o, "key_grants", l.n_key_grants);
	out_str(o, "on_loss", l.on_loss < 3 ? on_loss[l.on_loss] : "?");
	out_u64(o, "fallback_rate", l.fb_rate);
	out_u64(o, "fallback_burst", l.fb_burst_s / TB_SCALE);
	out_u64(o, "fallback_packets", s->fallback_pkts);
	out_u64(o, "bypass_packets", s->bypass_pkts);
	out_obj_end(o);
}

/* What enforce would have dropped: a shadow limit's denials over the last
 * ~10 s (ll_shadow_win) and since the limit was first applied (its
 * counters: they survive agent restarts that keep the pins). Shown for a
 * shadow limit, and for an enforced one whose window still holds shadow
 * denials (flipped within the window).
 */
static void print_would_drop(struct out *o, const struct pinned *p, uint32_t id,
			     const struct ll_limit_cfg *l, const struct ll_limit_stats *s)
{
	struct stats_window w;
	uint64_t offered = s->allowed_pkts + s->shadow_denied_pkts;
	bool have = p->shadow_win >= 0 &&
		    !stats_shadow_window(p->shadow_win, id, l->uid, clock_now_ns(),
					 stats_window_slots(STATUS_WINDOW_SECONDS), &w);

	if (l->mode != LL_MODE_SHADOW && (!have || !w.pkts))
		return;
	out_obj_begin(o, "would_drop");
	if (have) {
		out_f64(o, "window_seconds", w.seconds);
		out_u64(o, "window_packets", w.pkts);
		out_u64(o, "window_bytes", w.bytes);
		out_f64(o, "window_packets_per_second",
			w.seconds > 0 ? (double)w.pkts / w.seconds : 0);
		out_f64(o, "window_bytes_per_second",
			w.seconds > 0 ? (double)w.bytes / w.seconds : 0);
	}
	out_u64(o, "total_packets", s->shadow_denied_pkts);
	out_u64(o, "total_bytes", s->shadow_denied_bytes);
	/* Of the packets this limit decided (allowed or shadow-denied), ever. */
	out_f64(o, "total_fraction", offered ? (double)s->shadow_denied_pkts / (double)offered : 0);
	out_obj_end(o);
}

static void print_limit(struct out *o, const struct pinned *p, uint32_t id,
			const struct ll_limit_cfg *l, uint64_t nkeys)
{
	struct ll_limit_stats s = {};

	stats_limit(p->limit_stats, id, &s);
	out_obj_begin(o, NULL);
	out_str(o, "name", l->name);
	out_u64(o, "id", id);
	out_str(o, "key", cfg_key_mode_name(l->key_mode));
	if (l->key_mode == LL_KEY_SRC_IP || l->key_mode == LL_KEY_DST_IP) {
		out_u64(o, "prefix_v4", l->prefix_v4);
		out_u64(o, "prefix_v6", l->prefix_v6);
	}
	out_str(o, "unit", cfg_unit_name(l->unit));
	out_u64(o, "rate", l->rate);
	out_u64(o, "burst", l->burst_s / TB_SCALE);
	out_str(o, "mode", cfg_mode_name(l->mode));
	out_str(o, "scope", l->scope == LL_SCOPE_GLOBAL ? "global" : "local");
	out_u64(o, "keys", nkeys);
	out_obj_begin(o, "packets");
	out_u64(o, "allowed", s.allowed_pkts);
	out_u64(o, "denied", s.denied_pkts);
	out_u64(o, "shadow_denied", s.shadow_denied_pkts);
	out_obj_end(o);
	out_obj_begin(o, "bytes");
	out_u64(o, "allowed", s.allowed_bytes);
	out_u64(o, "denied", s.denied_bytes);
	out_u64(o, "shadow_denied", s.shadow_denied_bytes);
	out_obj_end(o);
	out_u64(o, "new_keys", s.new_keys);
	out_u64(o, "prefix_packets", s.prefix_pkts);
	out_u64(o, "prefix_buckets", s.prefix_buckets);
	out_u64(o, "graduated", s.graduated);
	out_u64(o, "overflow", s.overflow_pkts);
	print_would_drop(o, p, id, l, &s);
	if (l->scope == LL_SCOPE_GLOBAL)
		print_lease(o, p, id, &s);
	out_obj_end(o);
}

static void print_rules(struct out *o, const struct pinned *p, const struct ll_policy *pol)
{
	out_arr_begin(o, "rules");
	for (uint32_t i = 0; i <= pol->n_rules && i <= LL_MAX_RULES; i++) {
		uint32_t idx = i == pol->n_rules ? LL_MAX_RULES : i;
		struct ll_rule_stats rs = {};

		stats_rule(p->rule_stats, idx, &rs);
		out_obj_begin(o, NULL);
		out_str(o, "name", idx == LL_MAX_RULES ? "(default)" : pol->rules[i].name);
		/* An allow or deny rule says so; a limit rule as before. */
		if (idx != LL_MAX_RULES && pol->rules[i].action != LL_RULE_LIMIT)
			out_str(o, "action",
				pol->rules[i].action == LL_RULE_PASS ? "pass" : "drop");
		out_u64(o, "matched_packets", rs.matched_pkts);
		out_u64(o, "dropped_packets", rs.dropped_pkts);
		out_obj_end(o);
	}
	out_arr_end(o);
}

/* How full each key table is against its pressure mark (ll_fill), when the
 * pins have it (an agent older than the pressure mark pinned none).
 */
static void print_tables(struct out *o, const char *pin_dir)
{
	static const char *const maps[LL_FILL_MAPS] = {"ll_buckets", "ll_flow_buckets"};
	char path[4096 + 32];
	int fd;

	snprintf(path, sizeof(path), "%s/ll_fill", pin_dir);
	fd = fs_pin_get(path);
	if (fd < 0)
		return;
	out_obj_begin(o, "tables");
	for (uint32_t m = 0; m < LL_FILL_MAPS; m++) {
		struct ll_fill fl;

		if (bpf_map_lookup_elem(fd, &m, &fl))
			continue;
		out_obj_begin(o, maps[m]);
		out_u64(o, "buckets", fl.live);
		out_u64(o, "pressure_at", fl.mark);
		out_u64(o, "capacity", fl.cap);
		out_bool(o, "under_pressure", fl.mark && fl.live >= fl.mark);
		out_obj_end(o);
	}
	out_obj_end(o);
	close(fd);
}

static void print_parse(struct out *o, const struct pinned *p)
{
	uint64_t ps[LL_PARSE_MAX] = {};

	stats_parse(p->parse_stats, ps);
	out_obj_begin(o, "parse");
	for (uint32_t r = 0; r < LL_PARSE_MAX; r++)
		out_u64(o, stats_parse_reason_name(r), ps[r]);
	out_obj_end(o);
}

/* The last policy the agent refused, if any: outstanding until a policy is
 * applied after it (the running one keeps enforcing meanwhile, or nothing
 * does if none was ever applied).
 */
static void print_refusal(struct out *o, const struct ll_state *st)
{
	if (!st->refused_ns)
		return;
	out_obj_begin(o, "refused");
	out_u64(o, "count", st->refusals);
	out_u64(o, "version", st->refused_version);
	out_f64(o, "age_seconds", ns_to_s(clock_now_ns() - st->refused_ns));
	out_str(o, "outstanding", st->refused_ns > st->applied_ns ? "yes" : "no");
	out_str(o, "reason", st->refused_why);
	out_obj_end(o);
}

/* The coordinator link's counters, when the agent has taken grants. */
static void print_link(struct out *o, const struct ll_state *st)
{
	if (!st->grants_applied && !st->grants_stale && !st->hot_keys_dropped)
		return;
	out_obj_begin(o, "coordinator");
	out_u64(o, "grants_applied", st->grants_applied);
	out_u64(o, "grants_stale", st->grants_stale);
	out_u64(o, "grants_clamped", st->grants_clamped);
	out_u64(o, "grants_bad_keys", st->grants_bad_keys);
	out_u64(o, "hot_keys", st->hot_keys_listed);
	out_u64(o, "hot_keys_dropped", st->hot_keys_dropped);
	out_obj_end(o);
}

int status_print(const char *pin_dir, bool json)
{
	struct pinned p = PINNED_NONE;
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	uint64_t keys[LL_MAX_LIMITS];
	struct ll_state st;
	struct out o;
	int err = -ENOMEM;

	if (!pol)
		goto out;
	err = pinned_open(pin_dir,
			  PINNED_STATE | PINNED_POLICY | PINNED_BUCKETS | PINNED_FLOW_BUCKETS |
			      PINNED_LIMIT_STATS | PINNED_RULE_STATS | PINNED_PARSE_STATS |
			      PINNED_LEASES | PINNED_FENCE | PINNED_SHADOW_WIN,
			  &p);
	if (!err)
		err = dp_state_read(p.state, &st);
	if (!err)
		err = dp_policy_read(p.policy, p.state, pol);
	if (err)
		goto out;
	memset(keys, 0, sizeof(keys));
	count_keys(p.buckets, pol, keys);
	count_keys(p.flow_buckets, pol, keys);

	out_init(&o, stdout, json);
	out_obj_begin(&o, NULL);
	out_str(&o, "pin_dir", pin_dir);
	out_u64(&o, "policy_version", st.version);
	if (st.applied_ns)
		out_f64(&o, "policy_age_seconds", ns_to_s(clock_now_ns() - st.applied_ns));
	out_str(&o, "default", pol->default_action == LL_ACT_DROP ? "drop" : "pass");
	print_refusal(&o, &st);
	print_link(&o, &st);
	print_ifaces(&o, &st, pin_dir);
	out_arr_begin(&o, "limits");
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++)
		if (pol->limits[id].in_use)
			print_limit(&o, &p, id, &pol->limits[id], keys[id]);
	out_arr_end(&o);
	print_rules(&o, &p, pol);
	print_tables(&o, pin_dir);
	print_parse(&o, &p);
	out_obj_end(&o);
	out_finish(&o);
out:
	pinned_close(&p);
	free(pol);
	return err;
}
