#!/bin/bash
# SPDX-License-Identifier: MIT
# `leaseline top` on a real veth (reference §3): three clients flood past their
# src-ip limit (rate 2/s, burst 5) while five stay under it. Read while the
# flood runs, `top -j` must list exactly the three as the limit's denied keys,
# by address, each with a retry wait no longer than one token's time (1/rate,
# plus the hint's rounding step); the five appear among the allowed keys and
# never among the denied. Also: -n cuts both lists, --limit shows one limit (a
# /24 prefix key, a flow key), an unknown --limit exits 2, the refreshing view
# prints rates over its interval, stops after --count frames, stops on SIGINT
# at once and does not spin while it waits.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE=2       # tokens/s per client
BURST=5      # tokens
FLOOD_PPS=100 # per flooding client: 50x the rate
SLOW_PPS=1   # per quiet client: 4 packets in the run, under the burst
DURATION=4   # seconds of traffic
NSRC=8       # .10-.12 flood, .13-.17 stay under
FAILS=0
ok() { printf '  ok    %s\n' "$*"; }
bad() {
	FAILS=$((FAILS + 1))
	printf '  FAIL  %s\n' "$*"
}

ll_topo
ll_sources "$NSRC"
ll_bpffs
cat >"$TMPD/policy.yaml" <<EOF
version: 1
default: pass
limits:
  - {name: per-client, key: src-ip, unit: packets, rate: $RATE, burst: $BURST}
  - {name: per-net, key: src-ip, prefix-v4: 24, unit: packets, rate: 100000, burst: 100000}
  - {name: per-flow, key: flow, unit: packets, rate: 100000, burst: 100000}
rules:
  - name: test-udp
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client, per-net, per-flow]
EOF
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"

FLOOD="198.18.0.10-198.18.0.12"
QUIET="198.18.0.13-198.18.0.17"
ll_send_bg "$TMPD/sent.json" "$DURATION" "$FLOOD:$FLOOD_PPS" "$QUIET:$SLOW_PPS"
ll_sleep 2.5 # past every flooding client's burst, and 2 quiet packets each
top_j() { in_g "$LL" top --pin-dir "$PIN" -j "$@"; }
top_j >"$TMPD/top.json" 2>"$TMPD/top.err" || bad "top -j failed: $(cat "$TMPD/top.err")"
# More samples of the retry hint while the flood runs: a hint reads "now" for
# the ~10 ms between a token's arrival and the next flood packet, or longer
# when a loaded machine stalls the sender; one wait in any sample will do.
for i in 1 2 3 4; do
	ll_sleep 0.1
	top_j --limit per-client >"$TMPD/top-w$i.json" 2>&1 || bad "top -j (sample $i) failed"
done
top_j -n 2 >"$TMPD/top-n2.json" 2>&1 || bad "top -j -n 2 failed"
top_j --limit per-net >"$TMPD/top-net.json" 2>&1 || bad "top --limit per-net failed"
top_j --limit per-flow -n 3 >"$TMPD/top-flow.json" 2>&1 || bad "top --limit per-flow failed"
in_g "$LL" top --pin-dir "$PIN" >"$TMPD/top.txt" 2>&1 || bad "top (text) failed"
ll_wait_pid "$LL_SEND_PID" 20 || bad "the sender failed"
ll_status -j >"$TMPD/status.json" || bad "status -j failed"

python3 - "$TMPD" "$RATE" <<'EOF' || FAILS=$((FAILS + 1))
import json, sys
d, rate = sys.argv[1], float(sys.argv[2])
flood = {"198.18.0.%d" % i for i in (10, 11, 12)}
quiet = {"198.18.0.%d" % i for i in range(13, 18)}
bad = []
def limit(doc, name):
    ls = [l for l in doc["limits"] if l["name"] == name]
    return ls[0] if len(ls) == 1 else None

top = json.load(open(d + "/top.json"))
pc = limit(top, "per-client")
if pc is None:
    sys.exit("FAIL top -j has no limit 'per-client'")
print("  per-client: %d keys, denied %d, top_denied %s" % (pc["keys"], pc["denied"],
      [(r["key"], r["denied"], r["retry"]) for r in pc["top_denied"]]))
denied = {r["key"] for r in pc["top_denied"]}
allowed = {r["key"] for r in pc["top_allowed"]}
if denied != flood:
    bad.append("top denied keys %s, expected exactly %s" % (sorted(denied), sorted(flood)))
if not quiet <= allowed:
    bad.append("quiet clients missing from the allowed keys: %s" % sorted(quiet - allowed))
if quiet & denied:
    bad.append("quiet clients among the denied: %s" % sorted(quiet & denied))
waits = []
samples = [pc["top_denied"]]
for i in (1, 2, 3, 4):
    w = limit(json.load(open(d + "/top-w%d.json" % i)), "per-client")
    samples.append(w["top_denied"] if w else [])
for r in pc["top_denied"]:
    if r.get("family") != 4 or r.get("address") != r["key"] or r.get("prefix") != 32:
        bad.append("denied row %s: family/address/prefix %s/%s/%s" % (
            r["key"], r.get("family"), r.get("address"), r.get("prefix")))
    if r["denied"] <= 0 or r["limit"] != "per-client" or "per-client" not in r.get("why", ""):
        bad.append("denied row %s: %s" % (r["key"], r))
# A flooding key's hint points at its next token: at most 1/rate away, plus
# the hint's 2^16 ns rounding step. "now" only right after an admission.
for r in (r for rows in samples for r in rows):
    if r["retry"] != "now":
        if not r["retry"].startswith("in ") or not 0 < r["retry_ms"] <= 1000 / rate + 0.07:
            bad.append("denied row %s: retry '%s' (%s ms), expected within %g ms" % (
                r["key"], r["retry"], r.get("retry_ms"), 1000 / rate))
        waits.append(r["retry_ms"])
    elif r["retry_ms"] != 0:
        bad.append("denied row %s: retry now but retry_ms %s" % (r["key"], r["retry_ms"]))
if not waits:
    bad.append("no flooding key showed a retry wait (all 'now')")
if sum(r["denied"] for r in pc["top_denied"]) > pc["denied"]:
    bad.append("per-key denied sum above the limit's total %d" % pc["denied"])
if top["denied_counter"] not in ("sampled", "every"):
    bad.append("denied_counter '%s'" % top["denied_counter"])
for r in pc["top_allowed"]:
    if r["allowed"] <= 0:
        bad.append("allowed row %s with allowed %d" % (r["key"], r["allowed"]))
    if r["key"] in flood and r["allowed"] > 5 + rate * 4 + 1:
        bad.append("flooding key %s allowed %d: more than burst + rate * t" % (r["key"], r["allowed"]))

n2 = limit(json.load(open(d + "/top-n2.json")), "per-client")
if n2 is None or len(n2["top_denied"]) != 2 or len(n2["top_allowed"]) != 2:
    bad.append("-n 2: rows %s" % (n2 and (len(n2["top_denied"]), len(n2["top_allowed"]))))
elif not {r["key"] for r in n2["top_denied"]} <= flood:
    bad.append("-n 2: denied rows %s not among the flooding clients" % n2["top_denied"])

net = json.load(open(d + "/top-net.json"))
if [l["name"] for l in net["limits"]] != ["per-net"]:
    bad.append("--limit per-net shows limits %s" % [l["name"] for l in net["limits"]])
else:
    rows = net["limits"][0]["top_allowed"]
    if [(r["key"], r.get("prefix")) for r in rows] != [("198.18.0.0/24", 24)]:
        bad.append("per-net allowed rows %s, expected the one key 198.18.0.0/24" % rows)
    if net["limits"][0]["top_denied"]:
        bad.append("per-net denied rows %s" % net["limits"][0]["top_denied"])

flow = json.load(open(d + "/top-flow.json"))
fl = flow["limits"][0] if len(flow["limits"]) == 1 else {"top_allowed": []}
import re
keys = [r["key"] for r in fl["top_allowed"]]
pat = re.compile(r"^udp 198\.18\.0\.(1[0-7]):(\d+) -> 198\.18\.0\.2:7000$")
if len(keys) != 3 or not all(pat.match(k) for k in keys):
    bad.append("per-flow rows %s, expected 3 like 'udp 198.18.0.1x:PORT -> 198.18.0.2:7000'" % keys)
else:
    # Admitted most: the flooding clients, whose packets per-client let through.
    print("  per-flow top allowed: %s" % keys)

st = json.load(open(d + "/status.json"))
spc = [l for l in st["limits"] if l["name"] == "per-client"][0]
if spc["packets"]["denied"] < pc["denied"]:
    bad.append("status denied %d below top's earlier total %d" % (spc["packets"]["denied"], pc["denied"]))
for b in bad:
    print("  FAIL  " + b)
if not bad:
    print("  ok    top -j: exactly the flooding clients denied, with addresses and retry waits;"
          " quiet ones allowed only; -n, --limit (prefix and flow keys) as expected")
sys.exit(1 if bad else 0)
EOF

if grep -q "^limit per-client: src-ip" "$TMPD/top.txt" && grep -q "198.18.0.10" "$TMPD/top.txt" &&
	grep -q "RETRY" "$TMPD/top.txt"; then
	ok "top (text): limit header, client rows, retry column"
else
	bad "top (text): $(head -5 "$TMPD/top.txt" | tr '\n' '|')"
fi

in_g "$LL" top --pin-dir "$PIN" --limit nosuch >"$TMPD/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "no limit 'nosuch'" "$TMPD/out"; then
	ok "an unknown --limit exits 2 and names the limits"
else
	bad "--limit nosuch: exit $rc: $(cat "$TMPD/out")"
fi

# The refreshing view: --count frames, one JSON document a line, rates from the second.
# The flooding keys refilled their burst (5) while idle: let the flood spend
# it before the first frame, or a slow sender start puts 5 tokens into a
# measured 0.5 s interval (8/s seen in CI) where the bound is the rate.
ll_send_bg "$TMPD/sent2.json" 5 "$FLOOD:$FLOOD_PPS"
ll_sleep 1.5
in_g timeout 20 "$LL" top --pin-dir "$PIN" -j --limit per-client -w 0.5 --count 3 >"$TMPD/watch.json" 2>&1
rc=$?
ll_wait_pid "$LL_SEND_PID" 20 || bad "the second sender failed"
python3 - "$TMPD/watch.json" "$rc" <<'EOF' || FAILS=$((FAILS + 1))
import json, sys
lines = open(sys.argv[1]).read().splitlines()
docs = [json.loads(l) for l in lines]
bad = []
if sys.argv[2] != "0" or len(docs) != 3:
    bad.append("exit %s, %d documents (expected 0, 3)" % (sys.argv[2], len(docs)))
elif "interval_seconds" in docs[0] or not all(0.45 < d.get("interval_seconds", 0) < 5 for d in docs[1:]):
    bad.append("interval_seconds %s" % [d.get("interval_seconds") for d in docs])
else:
    l = docs[2]["limits"][0]
    rates = [r["allowed_per_second"] for r in l["top_allowed"] if r["key"].endswith((".10", ".11", ".12"))]
    if "denied_per_second" not in l or not rates or max(rates) > 2 * 2 + 1:
        bad.append("rates: limit %s, flooding keys' allowed/s %s" % (l.get("denied_per_second"), rates))
for b in bad:
    print("  FAIL  -w --count: " + b)
if not bad:
    print("  ok    -w 0.5 --count 3: three documents, rates over each interval")
sys.exit(1 if bad else 0)
EOF

# SIGINT stops the refreshing view at once; while it waits it sleeps. (nsenter
# execs top, so the pid is top's.)
nsenter --net=/run/netns/"$LL_NS_G" "$LL" top --pin-dir "$PIN" -w 0.3 >"$TMPD/watch.txt" 2>&1 &
TOP_PID=$!
LL_PIDS+=("$TOP_PID")
ll_sleep 1.5
FRAMES=$(grep -c "^leaseline top:" "$TMPD/watch.txt")
kill -INT "$TOP_PID"
t0=$(ll_now)
ll_wait_pid "$TOP_PID" 5
rc=$?
t1=$(ll_now)
if [ "$rc" -eq 0 ] && python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 1 else 1)"; then
	ok "SIGINT ends -w at once (exit 0, $(python3 -c "print('%.2f' % ($t1 - $t0))") s)"
else
	bad "SIGINT: exit $rc after $(python3 -c "print('%.2f' % ($t1 - $t0))") s"
fi
if [ "$FRAMES" -ge 3 ] && [ "$FRAMES" -le 8 ]; then
	ok "-w 0.3 drew $FRAMES frames in 1.5 s (no spinning)"
else
	bad "-w 0.3 drew $FRAMES frames in 1.5 s"
fi

[ "$FAILS" -eq 0 ] || ll_fail "$FAILS check(s) failed"
echo "PASS"
