#!/bin/bash
# SPDX-License-Identifier: MIT
# Shadow mode on a real veth: the same limit as test_enforce.sh but with
# mode: shadow. Nothing may be dropped (every client's socket count equals what
# it sent) while status counts the packets the limit would have denied, and
# allowed + shadow_denied equals what was sent.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE=50
BURST=20
SEND_PPS=200
DURATION=4
NSRC=32
SKEW=0.2 # seconds of rate, as in test_enforce.sh

ll_topo
ll_sources "$NSRC"
ll_bpffs
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST" shadow
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"

ll_recv_start "$TMPD/recv.json" 60
ll_send "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" ||
	ll_fail "the sender failed"
ll_recv_stop
ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"
XDP_DROPS=$(in_g ethtool -S $LL_G_IF 2>/dev/null |
	awk -F: '/rx_queue_[0-9]+_xdp_drops/ {n += $2; f = 1} END {if (f) print n}')

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "${XDP_DROPS:-}" <<'EOF'
import json, sys

tmpd, rate, burst, skew, xdp_drops = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/status.json"))
bad = []

total_sent = total_recv = 0
for src, s in sent.items():
    got = recv.get(src, {"count": 0})["count"]
    total_sent += s["sent"]
    total_recv += got
    if s["errors"]:
        bad.append("%s: %d send errors" % (src, s["errors"]))
    if got != s["sent"]:
        bad.append("%s: received %d != sent %d (shadow must never drop)" % (src, got, s["sent"]))
t = max(s["last"] - s["first"] for s in sent.values())

l = [l for l in st["limits"] if l["name"] == "per-client"][0]
p = l["packets"]
# What enforce mode would have admitted: at most B + R*T per client.
would = len(sent) * (burst + rate * (t + skew) + 1)
print("sources %d: sent %d, received %d over %.2f s" % (len(sent), total_sent, total_recv, t))
print("status: mode %s allowed %d shadow_denied %d denied %d; enforce would admit <= %.0f; "
      "ethtool xdp_drops %s" % (l["mode"], p["allowed"], p["shadow_denied"], p["denied"], would,
                                xdp_drops or "n/a"))
if l["mode"] != "shadow":
    bad.append("status shows mode %r, expected shadow" % l["mode"])
if p["shadow_denied"] <= 0:
    bad.append("shadow_denied is 0: the limit decided nothing")
if p["denied"]:
    bad.append("denied %d in shadow mode" % p["denied"])
if p["allowed"] + p["shadow_denied"] != total_sent:
    bad.append("allowed %d + shadow_denied %d != sent %d"
               % (p["allowed"], p["shadow_denied"], total_sent))
if p["allowed"] > would:
    bad.append("allowed %d > B+R*T bound %.0f: shadow decisions are not the limit's"
               % (p["allowed"], would))
if xdp_drops and int(xdp_drops):
    bad.append("ethtool shows %s XDP drops" % xdp_drops)
rule = [r for r in st["rules"] if r["name"] == "test-udp"]
if not rule or rule[0]["dropped_packets"]:
    bad.append("rule 'test-udp' dropped packets: %r" % rule)

for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %d problem(s) with shadow mode" % len(bad))
    sys.exit(1)
print("ok: shadow dropped nothing (%d/%d received), counted %d shadow denials"
      % (total_recv, total_sent, p["shadow_denied"]))
EOF
