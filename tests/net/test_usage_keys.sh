#!/bin/bash
# SPDX-License-Identifier: MIT
# Per-key usage end to end (reference §6.3, "Per key"): a real coordinator and
# a real coordinated agent in the gateway namespace, a metered per-key global
# limit (key: src-ip, on-loss: fail-open), 4 clients over the limit. Along
# the way: the agent killed with SIGKILL and restarted (pins kept: its totals
# go on), the coordinator killed with SIGKILL and kept down past the lease
# (the gateway fails open: bypass), restarted; then the agent's pins removed
# (a reboot: a new counters identity from 0). At the end the ledger per key
# (`leaseline usage --keys -j`) must equal, exactly, what the kernel counted
# in ll_meter_k (read with bpftool), plus what the removed pins had counted.
# While the coordinator is down, `leaseline usage --reconcile --pin-dir` on
# the gateway must list exactly kernel - ledger per key as late reports;
# once the agent has reported, nothing.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v bpftool >/dev/null || ll_skip "bpftool is needed to read ll_meter"

RATE=50
BURST=20
PPS=80
PORT=$((20000 + $$ % 20000))

ll_topo
ll_sources 4
ll_bpffs
mkdir -p "$TMPD/state"
cat >"$TMPD/policy.yaml" <<EOF
version: 1
default: pass
limits:
  - {name: per-client, key: src-ip, scope: global, rate: $RATE, burst: $BURST, meter: true,
     on-loss: fail-open}
rules:
  - name: test-udp
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client]
EOF
cat >"$TMPD/coord.yaml" <<EOF
listen: 127.0.0.1:$PORT
policy: policy.yaml
state-dir: state
lease: {ttl: 1s, refresh: 200ms}
gateways: 4
EOF
cat >"$TMPD/agent.yaml" <<EOF
node: gw-1
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $PIN
coordinator: {address: 127.0.0.1:$PORT}
max-keys: 4096
EOF

COORD_PID=
coord_start() {
	local before n i
	before=$(grep -c "coordinator listening" "$TMPD/coord.log" 2>/dev/null)
	nsenter --net=/run/netns/"$LL_NS_G" "$LL" coord -c "$TMPD/coord.yaml" -v >>"$TMPD/coord.log" 2>&1 &
	COORD_PID=$!
	LL_PIDS+=("$COORD_PID")
	for ((i = 0; i < LL_WAIT_TRIES; i++)); do
		n=$(grep -c "coordinator listening" "$TMPD/coord.log" 2>/dev/null || true)
		[ "${n:-0}" -gt "${before:-0}" ] && return 0
		kill -0 "$COORD_PID" 2>/dev/null || break
		sleep "$LL_POLL_S"
	done
	tail -20 "$TMPD/coord.log" | sed 's/^/   coord: /'
	ll_fail "the coordinator did not start"
}

# The kernel's per-key totals of ll_meter_k (src-ip keys; flow keys are in
# ll_meter) summed over CPUs, as JSON
# {"198.18.0.10": [8 numbers: pkts then bytes by class], ...}.
meter_dump() {
	bpftool -j map dump pinned "$PIN/ll_meter_k" | tee "$TMPD/meter-raw.json" | python3 -c '
import ipaddress, json, sys
# Raw bytes (bpftool leaves the unions unnamed): the key is an ll_key
# (family at byte 5, the v4-mapped address at 8..23), the value 8
# little-endian u64 (pkts by class, then bytes by class).
out = {}
for e in json.load(sys.stdin):
    k = bytes(int(b, 16) for b in e["key"])
    if k[5] != 4:
        continue
    ip = str(ipaddress.IPv4Address(k[20:24]))
    tot = [0] * 8
    for v in e["values"]:
        b = bytes(int(x, 16) for x in v["value"])
        tot = [t + int.from_bytes(b[8 * i:8 * i + 8], "little") for i, t in enumerate(tot)]
    out[ip] = tot
json.dump(out, sys.stdout)'
}

# The ledger per key, same shape.
ledger_dump() {
	"$LL" usage -c "$TMPD/coord.yaml" --keys -j --period month | python3 -c '
import json, sys
out = {}
for r in json.load(sys.stdin)["rows"]:
    t = out.setdefault(r["key"], [0] * 8)
    for i, c in enumerate(("admitted", "denied", "fallback", "bypass")):
        t[i] += r["packets"][c]
        t[4 + i] += r["bytes"][c]
json.dump(out, sys.stdout)'
}

coord_start
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log" -v
ll_recv_start "$TMPD/recv.json" 120
# The coordinator's quiet period, then a grant: traffic starts on a live lease.
ll_wait_until 10 ll_lease_live per-client || ll_fail "no live lease within 10 s of the start"

echo "phase 1: traffic, the agent killed -9 and restarted with its pins"
ll_send_bg "$TMPD/sent1.json" 4 "$LL_SRC_FIRST-$LL_SRC_LAST:$PPS"
ll_sleep 2 # time passes: the kill lands 2 s into the 4 s of traffic
{ kill -KILL "$AGENT_PID"; ll_agent_wait_exit 30; } 2>/dev/null || ll_fail "the agent did not die"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log" -v
ll_wait_pid "$LL_SEND_PID" 20 || ll_fail "the sender failed"

echo "phase 2: the coordinator killed -9 and away past the lease (fail-open: bypass)"
kill -KILL "$COORD_PID" 2>/dev/null
wait "$COORD_PID" 2>/dev/null
ll_send "$TMPD/sent2.json" 3 "$LL_SRC_FIRST-$LL_SRC_LAST:$PPS"

# The agent is cut off: its live counters are ahead of the ledger. On the
# gateway, --reconcile --pin-dir must list exactly that difference per key,
# as late reports (the fail-open bypass among them), and exit 1.
reconcile_live() {
	"$LL" usage --ledger "$TMPD/state/ledger.db" -c "$TMPD/coord.yaml" --reconcile \
		--pin-dir "$PIN" --holder gw-1 -j >"$TMPD/reconcile.json" 2>"$TMPD/reconcile.err"
}
meter_dump >"$TMPD/kernel.json"
ledger_dump >"$TMPD/ledger.json"
reconcile_live
rc=$?
python3 - "$TMPD/kernel.json" "$TMPD/ledger.json" "$TMPD/reconcile.json" "$rc" <<'EOF'
import json, sys
k = json.load(open(sys.argv[1]))
l = json.load(open(sys.argv[2]))
r = json.load(open(sys.argv[3]))
rc = int(sys.argv[4])
C = ("admitted", "denied", "fallback", "bypass")
want = {}
for ip, t in k.items():
    d = [a - b for a, b in zip(t, l.get(ip, [0] * 8))]
    if any(d):
        want[ip] = d
got = {}
for e in r["differences"]:
    late = e["late"]
    got[e["key"]] = [late["packets"][c] for c in C] + [late["bytes"][c] for c in C]
    if not e["cause"].startswith("late reports"):
        print("FAIL: cause %r" % e["cause"])
        sys.exit(1)
print("  cut off: kernel - ledger per key:", want)
print("  reconcile --pin-dir lists:       ", got)
ok = bool(want) and want == got and rc == 1 and not r["equal_to_ledger"] and r["ahead"] == 0
ok = ok and all(d[3] > 0 for d in want.values())  # the fail-open bypass is among them
sys.exit(0 if ok else 1)
EOF
[ $? -eq 0 ] || {
	cat "$TMPD/reconcile.err"
	ll_fail "reconcile --pin-dir did not list exactly the late reports"
}

coord_start
# The agent reconnects and, after the quiet period, holds a lease again
# (its reports flowing: settle below waits for the ledger to have them).
ll_wait_until 15 ll_lease_live per-client ||
	ll_fail "the agent holds no live lease within 15 s of the coordinator's restart"

# Settle: the ledger catches up with the kernel (bounded).
settle() {
	local i
	for ((i = 0; i < 40; i++)); do
		meter_dump >"$TMPD/kernel.json"
		ledger_dump >"$TMPD/ledger.json" 2>/dev/null
		python3 - "$TMPD/kernel.json" "$TMPD/ledger.json" "${1:-}" <<'EOF' && return 0
import json, sys
k = json.load(open(sys.argv[1]))
l = json.load(open(sys.argv[2]))
if len(sys.argv) > 3 and sys.argv[3]:
    for ip, t in json.load(open(sys.argv[3])).items():
        k[ip] = [a + b for a, b in zip(k.get(ip, [0] * 8), t)]
sys.exit(0 if k == l and k else 1)
EOF
		ll_sleep 0.5
	done
	return 1
}
settle || {
	echo "kernel: $(cat "$TMPD/kernel.json")"
	echo "ledger: $(cat "$TMPD/ledger.json")"
	ll_fail "the ledger per key is not what the kernel counted"
}
reconcile_live || {
	cat "$TMPD/reconcile.json" "$TMPD/reconcile.err"
	ll_fail "reconcile --pin-dir: the agent reported, yet the ledger is not its counters"
}
echo "  reconciled after the reports: $(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["series"], "series,", r["equal"], "equal to the ledger")' "$TMPD/reconcile.json")"
cp "$TMPD/kernel.json" "$TMPD/before-reboot.json"
python3 - "$TMPD/kernel.json" <<'EOF'
import json, sys
k = json.load(open(sys.argv[1]))
for ip, t in sorted(k.items()):
    print("  %-14s admitted %5d denied %5d bypass %5d packets (%d bytes admitted)" %
          (ip, t[0], t[1], t[3], t[4]))
if not all(t[1] > 0 and t[3] > 0 for t in k.values()):
    print("FAIL: every key should have been denied (over its share) and bypassed (fail-open)")
    sys.exit(1)
EOF
[ $? -eq 0 ] || ll_fail "the scenario did not exercise denial and bypass"

echo "phase 3: the agent's pins removed (a reboot): a new identity from 0"
ll_stop_pid "$AGENT_PID"
AGENT_PID=
rm -rf "$PIN"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log" -v
ll_wait_until 10 ll_lease_live per-client || ll_fail "no live lease within 10 s of the reboot"
ll_send "$TMPD/sent3.json" 2 "$LL_SRC_FIRST-$LL_SRC_LAST:$PPS"
settle "$TMPD/before-reboot.json" || {
	echo "kernel: $(cat "$TMPD/kernel.json") + before: $(cat "$TMPD/before-reboot.json")"
	echo "ledger: $(cat "$TMPD/ledger.json")"
	ll_fail "after the reboot, the ledger is not the old totals plus the new"
}
reconcile_live || {
	cat "$TMPD/reconcile.json" "$TMPD/reconcile.err"
	ll_fail "reconcile --pin-dir after the reboot (a new identity): not equal"
}
"$LL" usage -c "$TMPD/coord.yaml" --keys --period day
"$LL" usage --ledger "$TMPD/state/ledger.db" --reconcile --pin-dir "$PIN" --holder gw-1
echo "ok: ledger per key = kernel counters across an agent kill -9, a coordinator kill -9" \
	"with fail-open bypass, and a reboot"
