#!/bin/bash
# SPDX-License-Identifier: MIT
# Per-key overrides on a real veth: one src-ip limit (20/s, burst 10 per
# client) with a file of tiers: tenant A's /28 at 60/s (burst 30), tenant B's
# at 30/s (burst 15), tenant C's at 5/s (burst 3), and an exempt /28
# (unlimited). Every client sends at 100/s for T s. Each is held to its own
# contract, B + R*T (the exempt ones get all they send); then a reload
# lowers tenant A's tier and the next T s stay within the new contract with
# no fresh burst.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

SEND_PPS=100
DURATION=3
SKEW=0.2 # s of rate: a Python sender's stamps around the XDP run (see test_enforce.sh)

ll_topo
ll_sources 62 # 198.18.0.10 .. 198.18.0.71
ll_bpffs
cat >"$TMPD/tiers.txt" <<EOF
# tenant tiers (written by $(basename "$0"))
198.18.0.16/28  rate 60 burst 30   # tenant A
198.18.0.32/28  rate 30 burst 15   # tenant B
198.18.0.48/28  rate 5  burst 3    # tenant C
198.18.0.64/28  unlimited          # a partner
EOF
cat >"$TMPD/policy.yaml" <<EOF
version: 1
limits:
  - {name: per-client, key: src-ip, rate: 20, burst: 10, overrides: tiers.txt}
rules:
  - name: test-udp
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client]
EOF
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"

# One round: send, receive, check every client against its tier.
# check_round NAME TIERS... where each tier is FIRST-LAST:RATE:BURST (RATE u: unlimited)
round() {
	local name=$1
	shift
	ll_recv_start "$TMPD/recv-$name.json" 60
	ll_send "$TMPD/sent-$name.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" ||
		ll_fail "the sender failed"
	ll_recv_stop
	python3 - "$TMPD" "$name" "$SKEW" "$@" <<'EOF' || FAILED=1
import ipaddress, json, sys

tmpd, name, skew = sys.argv[1], sys.argv[2], float(sys.argv[3])
tiers = []
for t in sys.argv[4:]:
    span, rate, burst = t.split(":")
    a, b = span.split("-")
    tiers.append((int(ipaddress.ip_address(a)), int(ipaddress.ip_address(b)), rate, int(burst)))
sent = json.load(open("%s/sent-%s.json" % (tmpd, name)))["sources"]
recv = json.load(open("%s/recv-%s.json" % (tmpd, name)))["sources"]
bad, seen = [], {}
for src, s in sent.items():
    ip = int(ipaddress.ip_address(src))
    tier = [t for t in tiers if t[0] <= ip <= t[1]]
    if len(tier) != 1:
        bad.append("%s: no tier" % src)
        continue
    lo_ip, hi_ip, rate, burst = tier[0]
    got, t = recv.get(src, {"count": 0})["count"], s["last"] - s["first"]
    key = "%s-%s" % (ipaddress.ip_address(lo_ip), ipaddress.ip_address(hi_ip))
    seen.setdefault(key, []).append(got)
    if rate == "u":
        if got != s["sent"]:
            bad.append("%s (exempt): received %d of %d" % (src, got, s["sent"]))
        continue
    rate = float(rate)
    upper = burst + rate * (t + skew) + 1
    lower = max(0, burst + rate * (t - skew) - 1)
    if got > upper or got < lower:
        bad.append("%s: received %d, contract %d + %g/s * %.2f s allows %.0f..%.0f"
                   % (src, got, burst, rate, t, lower, upper))
for key, v in sorted(seen.items()):
    print("  %s %-32s clients %2d received min %d max %d" % (name, key, len(v), min(v), max(v)))
for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %s: %d client(s) outside their tier" % (name, len(bad)))
    sys.exit(1)
print("ok: %s: every client held to its own tier" % name)
EOF
}

FAILED=0
round tiers 198.18.0.10-198.18.0.15:20:10 198.18.0.16-198.18.0.31:60:30 \
	198.18.0.32-198.18.0.47:30:15 198.18.0.48-198.18.0.63:5:3 198.18.0.64-198.18.0.71:u:0

# Tenant A down to 10/s, burst 5: its clients spent their tokens, so the new
# tier applies with no fresh burst (at most the new burst, refilled).
sed -i 's|^198.18.0.16/28 .*|198.18.0.16/28  rate 10 burst 5|' "$TMPD/tiers.txt"
sed -i 's/^version: 1/version: 2/' "$TMPD/policy.yaml"
kill -HUP "$AGENT_PID"
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	grep -q "policy version 2 applied" "$TMPD/agent.log" && break
	sleep "$LL_POLL_S"
done
grep -q "policy version 2 applied" "$TMPD/agent.log" || ll_fail "the reload was not applied"
round lowered 198.18.0.10-198.18.0.15:20:10 198.18.0.16-198.18.0.31:10:5 \
	198.18.0.32-198.18.0.47:30:15 198.18.0.48-198.18.0.63:5:3 198.18.0.64-198.18.0.71:u:0

ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"
[ "$FAILED" = 0 ] || ll_fail "a client was held to the wrong contract"
echo "ok: overrides: three tiers and an exempt prefix, each held to its own contract, across a reload"
