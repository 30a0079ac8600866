#!/bin/bash
# SPDX-License-Identifier: MIT
# A gateway that cannot enforce what it is told never looks healthy:
#   1. a coordinated agent with nothing to enforce yet (the coordinator is not
#      there) stays unattached and says so on its metrics endpoint
#      (leaseline_attached_interfaces 0, policy version 0);
#      A program attached meanwhile, found when the policy comes: exit 2;
#   2. an agent running version 2 (pinned from a standalone run) whose
#      coordinator serves version 1 refuses it: the running policy keeps
#      enforcing, and the refusal (version, reason) is in `status -j` and in
#      the metrics, not only in the log;
#   3. `leaseline reset-fence` (for a fence a fake coordinator poisoned) lets
#      the restarted agent take the coordinator's version 1, migrating the
#      running policy's state (no fresh burst: the limit keeps its buckets).
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v curl >/dev/null || ll_skip "needs 'curl'"

COORD_PORT=7451
METRICS=127.0.0.1:9475
fails=0
ok() { echo "  ok    $*"; }
bad() {
	echo "  FAIL  $*"
	fails=$((fails + 1))
}
scrape() { in_g curl -s --max-time 2 "http://$METRICS/metrics"; }
# metric NAME: its value in the last scrape ($TMPD/metrics), or "".
metric() { sed -n "s/^$1 \\([0-9.]*\\)\$/\\1/p" "$TMPD/metrics"; }

ll_topo
ll_bpffs

coord_agent_cfg() {
	cat >"$1" <<EOF
node: gw-refusal-$$
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $2
coordinator: {address: 127.0.0.1:$COORD_PORT}
metrics: $METRICS
max-keys: 4096
EOF
}

echo "1. coordinated, nothing to enforce yet:"
coord_agent_cfg "$TMPD/agent-fresh.yaml" "$PIN-fresh"
nsenter --net=/run/netns/"$LL_NS_G" "$LL" agent -c "$TMPD/agent-fresh.yaml" \
	>"$TMPD/agent-fresh.log" 2>&1 &
FRESH_PID=$!
LL_PIDS+=("$FRESH_PID")
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	scrape >"$TMPD/metrics" 2>/dev/null && [ -s "$TMPD/metrics" ] && break
	ll_sleep "$LL_POLL_S"
done
if [ "$(metric leaseline_attached_interfaces)" = 0 ] &&
	[ "$(metric leaseline_policy_version)" = 0 ]; then
	ok "metrics answer while unattached: attached_interfaces 0, policy_version 0"
else
	bad "metrics while waiting: attached '$(metric leaseline_attached_interfaces)'," \
		"version '$(metric leaseline_policy_version)'"
fi
[ -z "$(ll_xdp_prog "$LL_G_IF")" ] && ok "no XDP program attached" ||
	bad "an XDP program is attached with nothing to enforce"
grep -q "waiting for the coordinator's policy" "$TMPD/agent-fresh.log" &&
	ok "the log says it is waiting" || bad "the log does not say it is waiting"

# Checked before it loaded anything, the interface gets another tool's
# program while the agent waits; then the policy comes. Refused as it would
# have been at the check: exit 2 (systemd does not restart it), the other
# program left alone.
echo "1b. another program attached while it waits, then the policy comes:"
ip -n "$LL_NS_G" link set dev $LL_G_IF xdpdrv obj "$LL_BUILD/pass.bpf.o" sec xdp 2>"$TMPD/ip.err" ||
	ll_fail "cannot attach pass.bpf.o: $(cat "$TMPD/ip.err")"
FOREIGN=$(ll_xdp_prog "$LL_G_IF")
mkdir -p "$TMPD/state"
ll_policy "$TMPD/policy-v1.yaml" 1 500 200
cat >"$TMPD/coord.yaml" <<EOF
listen: 127.0.0.1:$COORD_PORT
policy: policy-v1.yaml
state-dir: state
lease: {ttl: 1s, refresh: 200ms}
EOF
nsenter --net=/run/netns/"$LL_NS_G" "$LL" coord -c "$TMPD/coord.yaml" >"$TMPD/coord.log" 2>&1 &
COORD_PID=$!
LL_PIDS+=("$COORD_PID")
ll_wait_pid "$FRESH_PID" 10
rc=$?
[ "$rc" = 2 ] && ok "the agent exits 2" ||
	bad "the agent exited $rc (124: still running); coordinator: $(tail -3 "$TMPD/coord.log" | tr '\n' ' ')"
grep -q "interface '$LL_G_IF' already has another XDP program" "$TMPD/agent-fresh.log" &&
	ok "  ... naming what is in the way" || bad "  ... log: $(tail -2 "$TMPD/agent-fresh.log" | tr '\n' ' ')"
[ -n "$FOREIGN" ] && [ "$(ll_xdp_prog "$LL_G_IF")" = "$FOREIGN" ] && ok "  ... program $FOREIGN left in place" ||
	bad "  ... program on $LL_G_IF: '$(ll_xdp_prog "$LL_G_IF")', was '$FOREIGN'"
ip -n "$LL_NS_G" link set dev $LL_G_IF xdpdrv off
ll_stop_pid "$FRESH_PID"
ll_stop_pid "$COORD_PID"

echo "2. the coordinator serves an older version than the one running:"
ll_policy "$TMPD/policy-v2.yaml" 2 50 20
ll_agent_cfg "$TMPD/agent-v2.yaml" policy-v2.yaml
ll_agent_start "$TMPD/agent-v2.yaml" "$TMPD/agent-v2.log"
ll_stop_pid "$AGENT_PID" # leaves version 2 pinned and attached
rm -rf "$TMPD/state" && mkdir -p "$TMPD/state"
nsenter --net=/run/netns/"$LL_NS_G" "$LL" coord -c "$TMPD/coord.yaml" >"$TMPD/coord.log" 2>&1 &
LL_PIDS+=("$!")
coord_agent_cfg "$TMPD/agent-coord.yaml" "$PIN"
ll_agent_start "$TMPD/agent-coord.yaml" "$TMPD/agent-coord.log"
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	grep -q "from the coordinator refused" "$TMPD/agent-coord.log" && break
	ll_sleep "$LL_POLL_S"
done
grep -q "policy version 1 from the coordinator refused: .*older" "$TMPD/agent-coord.log" &&
	ok "the agent refuses version 1 (older than 2)" ||
	bad "no refusal of version 1 in the log: $(tail -3 "$TMPD/agent-coord.log" | tr '\n' ' ')"
ll_status -j >"$TMPD/status.json" || bad "status -j failed"
python3 - "$TMPD/status.json" <<'PY' && ok "status shows version 2 enforcing and the refusal" || fails=$((fails + 1))
import json, sys
st = json.load(open(sys.argv[1]))
rf = st.get("refused", {})
print("  status: policy_version %s, refused %s" % (st.get("policy_version"), rf))
if st.get("policy_version") != 2 or rf.get("version") != 1 or rf.get("outstanding") != "yes" \
        or "older" not in rf.get("reason", "") or rf.get("count", 0) < 1:
    print("  FAIL  status does not show version 2 running and version 1 refused")
    sys.exit(1)
PY
scrape >"$TMPD/metrics" || bad "cannot scrape the agent"
REFUSALS=$(metric leaseline_policy_refusals_total)
if [ "$(metric leaseline_policy_version)" = 2 ] &&
	[ "$(metric leaseline_policy_refused_version)" = 1 ] && [ "${REFUSALS:-0}" -ge 1 ] &&
	[ "$(metric leaseline_attached_interfaces)" = 1 ]; then
	ok "metrics: version 2, refused version 1, $REFUSALS refusal(s), attached 1"
else
	bad "metrics: version '$(metric leaseline_policy_version)', refused" \
		"'$(metric leaseline_policy_refused_version)', refusals '$REFUSALS'"
fi

echo "3. reset-fence, then the coordinator's version 1 is taken:"
ll_stop_pid "$AGENT_PID"
in_g "$LL" reset-fence --pin-dir "$PIN" >"$TMPD/reset.out" 2>&1 &&
	ok "reset-fence: $(cut -c1-90 "$TMPD/reset.out")" || bad "reset-fence failed: $(cat "$TMPD/reset.out")"
ll_agent_start "$TMPD/agent-coord.yaml" "$TMPD/agent-coord2.log"
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	grep -q "policy version 1 from the coordinator applied" "$TMPD/agent-coord2.log" && break
	ll_sleep "$LL_POLL_S"
done
ll_status -j >"$TMPD/status2.json" || bad "status -j failed"
python3 - "$TMPD/status2.json" <<'PY' && ok "status: version 1 from the coordinator enforcing, the refusal no longer outstanding" || fails=$((fails + 1))
import json, sys
st = json.load(open(sys.argv[1]))
rf = st.get("refused", {})
lim = [l for l in st["limits"] if l["name"] == "per-client"]
print("  status: policy_version %s, refused %s, per-client rate %s"
      % (st.get("policy_version"), rf, lim[0]["rate"] if lim else None))
if st.get("policy_version") != 1 or rf.get("outstanding") != "no" or not lim or lim[0]["rate"] != 500:
    print("  FAIL  expected version 1 (rate 500) enforcing after the reset")
    sys.exit(1)
PY

[ "$fails" -eq 0 ] || ll_fail "$fails check(s) failed"
echo "ok: a gateway that refuses or waits shows it in status and metrics"
