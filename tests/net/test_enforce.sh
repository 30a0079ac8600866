#!/bin/bash
# SPDX-License-Identifier: MIT
# Enforcement on a real veth: the agent attaches to the gateway's veth (native XDP)
# with one src-ip limit (rate R/s, burst B); 32 clients each send UDP at 4R for
# T s. Per client, what the gateway's socket receives must stay within
# B + R*T (token-bucket bound) and reach B + R*T minus slack (limiting, not
# blocking); `leaseline status -j` must account for every packet sent.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE=50      # tokens/s per client
BURST=20     # tokens
SEND_PPS=200 # per client: 4x the rate, so every client is limited
DURATION=4   # seconds of traffic
NSRC=32
# Timing slack, seconds of rate: the sender stamps its first and last packet a
# few microseconds around the XDP run that charges it, but a Python sender can
# be descheduled between the stamp and the send; 0.2 s covers that on a loaded
# 2-CPU box and is still 10x smaller than the 2 s of rate a fresh burst or a
# missing limit would add.
SKEW=0.2

ll_topo
ll_sources "$NSRC"
ll_bpffs
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"
[ -n "$(ll_xdp_prog $LL_G_IF)" ] || ll_fail "no XDP program on $LL_G_IF after the agent started"

ll_recv_start "$TMPD/recv.json" 60
ll_send "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" ||
	ll_fail "the sender failed"
ll_recv_stop
ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"
ll_status >"$TMPD/status.txt" || ll_fail "leaseline status failed"
XDP_DROPS=$(in_g ethtool -S $LL_G_IF 2>/dev/null |
	awk -F: '/rx_queue_[0-9]+_xdp_drops/ {n += $2; f = 1} END {if (f) print n}')

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "${XDP_DROPS:-}" <<'EOF'
import json, statistics, sys

tmpd, rate, burst, skew, xdp_drops = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/status.json"))
bad = []

rows = []
for src, s in sent.items():
    got = recv.get(src, {"count": 0})["count"]
    t = s["last"] - s["first"]
    # A saturating sender is admitted the burst, then the rate; 1 packet for the
    # fractional token at either end.
    upper = burst + rate * (t + skew) + 1
    lower = burst + rate * (t - skew) - 1
    rows.append((src, s["sent"], got, t, lower, upper))
    if s["errors"]:
        bad.append("%s: %d send errors" % (src, s["errors"]))
    if got > upper:
        bad.append("%s: admitted %d > bound %.1f (burst %d + rate %g * %.2f s + slack)"
                   % (src, got, upper, burst, rate, t))
    if got < lower:
        bad.append("%s: admitted %d < %.1f: limiting too hard" % (src, got, lower))

got = [r[2] for r in rows]
ts = [r[3] for r in rows]
print("sources %d, sent %d pkts (%d-%d each) over %.2f-%.2f s"
      % (len(rows), sum(r[1] for r in rows), min(r[1] for r in rows), max(r[1] for r in rows),
         min(ts), max(ts)))
print("admitted per source: min %d median %d max %d; bound B+R*T = %d + %g*%.2f = %.0f"
      " (accepted %.0f..%.0f)"
      % (min(got), statistics.median(got), max(got), burst, rate, statistics.median(ts),
         burst + rate * statistics.median(ts), min(r[4] for r in rows), max(r[5] for r in rows)))

lim = [l for l in st["limits"] if l["name"] == "per-client"]
if len(lim) != 1:
    bad.append("status has no limit 'per-client'")
else:
    l = lim[0]
    p = l["packets"]
    total_sent = sum(r[1] for r in rows)
    total_recv = sum(got)
    print("status: allowed %d denied %d shadow_denied %d new_keys %d; received %d; "
          "parse ok %d; ethtool xdp_drops %s"
          % (p["allowed"], p["denied"], p["shadow_denied"], l["new_keys"], total_recv,
             st["parse"].get("ok", -1), xdp_drops or "n/a"))
    if p["allowed"] + p["denied"] != total_sent:
        bad.append("status allowed+denied %d != sent %d" % (p["allowed"] + p["denied"], total_sent))
    if p["allowed"] != total_recv:
        bad.append("status allowed %d != received %d" % (p["allowed"], total_recv))
    if p["shadow_denied"]:
        bad.append("shadow_denied %d in enforce mode" % p["shadow_denied"])
    # Buckets created: one per client. `keys` (live buckets) may be lower: the
    # agent reaps buckets that have refilled to full since the traffic stopped.
    if l["new_keys"] != len(rows) or l["keys"] > len(rows):
        bad.append("status shows new_keys %d keys %d, expected %d and <= %d"
                   % (l["new_keys"], l["keys"], len(rows), len(rows)))
    if st["parse"].get("ok", 0) < total_sent:
        bad.append("parse ok %d < sent %d" % (st["parse"].get("ok", 0), total_sent))
    if xdp_drops and int(xdp_drops) != p["denied"]:
        bad.append("ethtool xdp_drops %s != status denied %d" % (xdp_drops, p["denied"]))
    rule = [r for r in st["rules"] if r["name"] == "test-udp"]
    if not rule or rule[0]["matched_packets"] != total_sent or \
            rule[0]["dropped_packets"] != p["denied"]:
        bad.append("rule 'test-udp' counters %r do not match sent %d / denied %d"
                   % (rule, total_sent, p["denied"]))
    if st.get("policy_version") != 1:
        bad.append("status policy_version %r, expected 1" % st.get("policy_version"))

for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %d problem(s) with enforcement" % len(bad))
    sys.exit(1)
print("ok: %d clients limited to burst + rate*T (admitted %d..%d of ~%d sent each)"
      % (len(rows), min(got), max(got), statistics.median(r[1] for r in rows)))
EOF
