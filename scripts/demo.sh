#!/bin/bash
# SPDX-License-Identifier: MIT
# leaseline in one minute: a client namespace with 16 simulated clients and a
# gateway namespace whose veth runs the agent's XDP program. 8 clients stay
# under their limit, 8 send 6x too much; the report shows, per client, what
# was sent, what the gateway admitted and the token-bucket bound burst + rate*t,
# then `leaseline status` and the first entries of the pinned bucket map.
# Everything (namespaces, veth, bpffs mount, temp files) goes on exit.
# Usage: scripts/demo.sh BUILD_DIR        (make demo)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/tests/net/lib.sh"
ll_init "${1:-build}"

RATE=50       # per client, packets/s
BURST=25      # per client, packets
GOOD_PPS=30   # well-behaved clients: under the rate
BAD_PPS=300   # abusive clients: 6x the rate
SECONDS_RUN=6
NGOOD=8
NBAD=8

step() { printf '\n== %s\n' "$*"; }

step "topology: netns $LL_NS_C ($((NGOOD + NBAD)) clients on veth $LL_C_IF) <-> netns $LL_NS_G (veth $LL_G_IF, XDP)"
ll_topo
ll_sources $((NGOOD + NBAD))
ll_bpffs
GOOD="198.18.0.$LL_SRC_BASE-198.18.0.$((LL_SRC_BASE + NGOOD - 1))"
BAD="198.18.0.$((LL_SRC_BASE + NGOOD))-198.18.0.$((LL_SRC_BASE + NGOOD + NBAD - 1))"
echo "   well-behaved $GOOD at $GOOD_PPS pps each; abusive $BAD at $BAD_PPS pps each"

cat >"$TMPD/policy.yaml" <<EOF
# leaseline demo policy
version: 1
default: pass
limits:
  - name: per-client
    key: src-ip
    rate: $RATE
    burst: $BURST
  - name: all-clients
    key: none
    rate: 2000
    burst: 2000
rules:
  - name: udp-service
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client, all-clients]
EOF
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
step "policy ($TMPD/policy.yaml)"
sed -n '2,$p' "$TMPD/policy.yaml" | sed 's/^/   /'
"$LL" check -c "$TMPD/agent.yaml" | sed 's/^/   /'

step "agent: leaseline agent -c agent.yaml (in $LL_NS_G)"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"
sed 's/^/   /' "$TMPD/agent.log"

step "traffic: $SECONDS_RUN s of UDP from $((NGOOD + NBAD)) clients to $LL_G_ADDR:$LL_PORT"
ll_recv_start "$TMPD/recv.json" 60
ll_send "$TMPD/sent.json" "$SECONDS_RUN" "$GOOD:$GOOD_PPS" "$BAD:$BAD_PPS" 2>&1 |
	sed 's/^/   /'
ll_recv_stop

step "per client: sent, admitted by the gateway, and the bound burst + rate*t"
python3 - "$TMPD" "$RATE" "$BURST" <<'EOF'
import json, sys

tmpd, rate, burst = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
print("   %-13s %6s %6s %9s %9s  %s" % ("client", "pps", "sent", "admitted", "limit", "verdict"))
for src, s in sent.items():
    got = recv.get(src, {"count": 0})["count"]
    t = s["last"] - s["first"]
    bound = burst + rate * t
    if got == s["sent"]:
        verdict = "all admitted (under the limit)"
    else:
        verdict = "limited: %d dropped at XDP" % (s["sent"] - got)
    print("   %-13s %6g %6d %9d %9.0f  %s" % (src, s["rate"], s["sent"], got, bound, verdict))
print("   limit = burst %d + rate %g/s x t (t = the client's sending time, ~%.1f s)"
      % (burst, rate, max(s["last"] - s["first"] for s in sent.values())))
under = [s["sent"] == recv.get(a, {"count": 0})["count"] for a, s in sent.items()
         if s["rate"] < rate]
over = [recv.get(a, {"count": 0})["count"] <= burst + rate * (s["last"] - s["first"]) + 1
        for a, s in sent.items() if s["rate"] > rate]
print("   => %d/%d well-behaved clients fully served, %d/%d abusive clients held to the limit"
      % (sum(under), len(under), sum(over), len(over)))
# The rate each client really sent at: a busy machine's sender falls behind,
# and then the table says less than it should.
slow = [(a, s["sent"] / (s["last"] - s["first"]), s["rate"]) for a, s in sent.items()
        if s["last"] > s["first"] and s["sent"] / (s["last"] - s["first"]) < 0.95 * s["rate"]]
for a, got_pps, want in slow:
    print("   note: %s sent %.0f/s of the %g/s asked (%.0f%%): this machine is too busy to"
          " offer the load" % (a, got_pps, want, 100 * got_pps / want))
EOF

step "leaseline status --pin-dir $PIN"
ll_status | sed 's/^/   /'

step "bpftool map dump pinned $PIN/ll_buckets (first 3 entries)"
if command -v bpftool >/dev/null; then
	bpftool -j map dump pinned "$PIN/ll_buckets" | python3 -c '
import json, sys, ipaddress
ents = json.load(sys.stdin)
for e in ents[:3]:
    print("   " + json.dumps(e["formatted"]))
print("   ... %d entries; addr is IPv4-mapped IPv6 in network order, tokens in 1e-9 tokens" % len(ents))
'
else
	echo "   (bpftool not installed)"
fi

step "cleanup: stopping the agent, deleting $LL_NS_C and $LL_NS_G, unmounting bpffs"
