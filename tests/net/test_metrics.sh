#!/bin/bash
# SPDX-License-Identifier: MIT
# Both metrics endpoints as Prometheus takes them: a coordinator with a
# global aggregate and a per-key global limit, and a coordinated agent that
# holds leases of both, scraped while they run; `promtool check metrics`
# must pass on each (every family with HELP and TYPE, samples grouped,
# counters named _total), and the families operators graph must be there.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v curl >/dev/null || ll_skip "needs 'curl'"
command -v promtool >/dev/null || ll_skip "needs 'promtool' (scripts/install-deps.sh)"

COORD_PORT=7452
fails=0
ok() { echo "  ok    $*"; }
bad() {
	echo "  FAIL  $*"
	fails=$((fails + 1))
}

ll_topo
ll_bpffs
mkdir -p "$TMPD/state"
cat >"$TMPD/policy.yaml" <<EOF2
version: 1
limits:
  - {name: total, key: none, scope: global, rate: 1000, burst: 100}
  - {name: per-client, key: src-ip, scope: global, rate: 100, burst: 10}
rules:
  - {name: udp, match: {proto: udp, dst-port: $LL_PORT}, limits: [per-client, total]}
EOF2
cat >"$TMPD/coord.yaml" <<EOF2
listen: 127.0.0.1:$COORD_PORT
policy: policy.yaml
state-dir: state
lease: {ttl: 1s, refresh: 200ms}
metrics: 127.0.0.1:9476
EOF2
cat >"$TMPD/agent.yaml" <<EOF2
node: gw-metrics-$$
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $PIN
coordinator: {address: 127.0.0.1:$COORD_PORT}
metrics: 127.0.0.1:9475
max-keys: 4096
EOF2
nsenter --net=/run/netns/"$LL_NS_G" "$LL" coord -c "$TMPD/coord.yaml" >"$TMPD/coord.log" 2>&1 &
LL_PIDS+=("$!")
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"
# Until both leases are live (the coordinator's quiet period comes first).
for ((i = 0; i < LL_WAIT_TRIES * 3; i++)); do
	in_g curl -s --max-time 2 http://127.0.0.1:9475/metrics >"$TMPD/agent.txt"
	[ "$(grep -c '^leaseline_lease_remaining_seconds{.*} [1-9]\|^leaseline_lease_remaining_seconds{.*} 0\.[0-9]*[1-9]' "$TMPD/agent.txt")" -ge 2 ] && break
	ll_sleep "$LL_POLL_S"
done
in_g curl -s --max-time 2 http://127.0.0.1:9476/metrics >"$TMPD/coord.txt"

for ep in agent coord; do
	if promtool check metrics <"$TMPD/$ep.txt" >"$TMPD/$ep.promtool" 2>&1; then
		ok "promtool check metrics passes on the $ep's endpoint ($(grep -c '^# TYPE' "$TMPD/$ep.txt") families)"
	else
		bad "promtool on the $ep's endpoint: $(head -5 "$TMPD/$ep.promtool" | tr '\n' ';')"
	fi
done
for fam in leaseline_packets_total leaseline_lease_rate leaseline_lease_remaining_seconds \
	leaseline_policy_version leaseline_attached_interfaces leaseline_prefix_packets_total \
	leaseline_keys_graduated_total leaseline_table_buckets leaseline_table_pressure_buckets \
	leaseline_rule_packets_total leaseline_policy_last_reload_successful \
	leaseline_policy_applied_timestamp_seconds leaseline_build_info; do
	grep -q "^$fam" "$TMPD/agent.txt" && ok "agent exports $fam" || bad "agent lacks $fam"
done
for fam in leaseline_coord_live_rate leaseline_coord_lease_rate leaseline_coord_epoch \
	leaseline_coord_invariant_violations_total leaseline_coord_overshoot_bound \
	leaseline_coord_spenders leaseline_coord_lease_waste_total leaseline_coord_allocator_failures_total \
	leaseline_coord_holder_up leaseline_coord_reloads_total leaseline_build_info; do
	grep -q "^$fam" "$TMPD/coord.txt" && ok "coordinator exports $fam" || bad "coordinator lacks $fam"
done
grep -q '^leaseline_coord_lease_rate{limit="per-client",holder="gw-metrics-' "$TMPD/coord.txt" &&
	ok "the per-key limit's share is leased to the agent" || bad "no lease of per-client in: $(grep lease_rate "$TMPD/coord.txt" | tr '\n' ' ')"

[ "$fails" -eq 0 ] || ll_fail "$fails check(s) failed"
echo "ok: both endpoints pass promtool"
