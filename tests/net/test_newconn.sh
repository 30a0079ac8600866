#!/bin/bash
# SPDX-License-Identifier: MIT
# New connections per client (issue #13, tcp-flags: syn) on a real veth: a TCP
# server in the gateway namespace; a rule {proto: tcp, dst-port: P,
# tcp-flags: syn} charges a src-ip limit of RATE new connections/s (burst
# BURST). From the client namespace:
#   bulk     one connection from client A, made before anything else, sending
#            as fast as it can for the whole run (established: ACK set, never
#            matches the rule)
#   flood    client A opens connections at FLOOD/s (5x the limit), each given
#            0.25 s to complete and then closed, so one SYN per attempt
#   polite   client B opens connections at POLITE/s (under the limit)
# Checks: A's connections made stay within BURST + RATE*T (and reach it minus
# slack); every failed attempt is a SYN the gateway dropped (status: the rule's
# drops = the limit's denials = A's failures); all of B's connections are made;
# the bulk connection's throughput during the flood is at least half what it
# was before it, and no packet but a SYN is dropped.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

PORT=7100
RATE=20      # new connections/s per client
BURST=20
FLOOD=100    # A's attempts/s: 5x the limit
POLITE=10    # B's attempts/s
LEAD=2       # seconds of bulk traffic alone before the flood (the baseline)
DURATION=4   # seconds of flood
SKEW=0.2     # seconds of rate, as in test_enforce.sh
A=198.18.0.10
B=198.18.0.11
TCPC=$LL_NET_DIR/tcpconn.py

ll_topo
ll_sources 2
ll_bpffs
cat >"$TMPD/policy.yaml" <<EOF
# written by $(basename "$0")
version: 1
default: pass
limits:
  - {name: new-conn, key: src-ip, rate: $RATE, burst: $BURST}
rules:
  - name: tcp-syn
    match: {proto: tcp, dst-port: $PORT, tcp-flags: syn}
    limits: [new-conn]
EOF
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"
[ -n "$(ll_xdp_prog $LL_G_IF)" ] || ll_fail "no XDP program on $LL_G_IF after the agent started"

nsenter --net=/run/netns/"$LL_NS_G" python3 "$TCPC" server --bind "$LL_G_ADDR" --port $PORT --max-time 60 \
	--out "$TMPD/server.json" --ready "$TMPD/server.ready" 2>>"$TMPD/server.log" &
SERVER_PID=$!
LL_PIDS+=("$SERVER_PID")
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	[ -e "$TMPD/server.ready" ] && break
	kill -0 "$SERVER_PID" 2>/dev/null || ll_fail "the server exited: $(cat "$TMPD/server.log")"
	sleep "$LL_POLL_S"
done
[ -e "$TMPD/server.ready" ] || ll_fail "the server did not listen within $((LL_WAIT_TRIES / 10)) s"

nsenter --net=/run/netns/"$LL_NS_C" python3 "$TCPC" bulk --dst "$LL_G_ADDR" --port $PORT --src $A \
	--duration $((LEAD + DURATION + 1)) --out "$TMPD/bulk.json" 2>>"$TMPD/bulk.log" &
BULK_PID=$!
LL_PIDS+=("$BULK_PID")
ll_sleep $LEAD
nsenter --net=/run/netns/"$LL_NS_C" python3 "$TCPC" connect --dst "$LL_G_ADDR" --port $PORT --src $A --rate $FLOOD \
	--duration $DURATION --out "$TMPD/flood.json" 2>>"$TMPD/flood.log" &
FLOOD_PID=$!
LL_PIDS+=("$FLOOD_PID")
nsenter --net=/run/netns/"$LL_NS_C" python3 "$TCPC" connect --dst "$LL_G_ADDR" --port $PORT --src $B --rate $POLITE \
	--duration $DURATION --out "$TMPD/polite.json" 2>>"$TMPD/polite.log" &
POLITE_PID=$!
LL_PIDS+=("$POLITE_PID")
ll_wait_pid $FLOOD_PID $((DURATION + 20)) || ll_fail "the flood client failed: $(cat "$TMPD/flood.log")"
ll_wait_pid $POLITE_PID $((DURATION + 20)) || ll_fail "the polite client failed: $(cat "$TMPD/polite.log")"
ll_wait_pid $BULK_PID $((LEAD + DURATION + 20)) || ll_fail "the bulk client failed: $(cat "$TMPD/bulk.log")"
sleep 0.5
ll_stop_pid "$SERVER_PID"
[ -s "$TMPD/server.json" ] || ll_fail "the server wrote nothing: $(cat "$TMPD/server.log")"
ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "$A" "$B" <<'EOF'
import json, sys

tmpd, rate, burst, skew, a, b = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5], sys.argv[6]
ld = lambda n: json.load(open("%s/%s.json" % (tmpd, n)))
flood, polite, bulk, server, st = ld("flood"), ld("polite"), ld("bulk"), ld("server"), ld("status")
bad = []

# New connections of A: the token-bucket bound over the flood's span.
t = flood["last"] - flood["first"]
upper = burst + rate * (t + skew) + 1
lower = burst + rate * (t - skew) - 1
print("client A: %d attempts in %.2f s, %d made, %d failed; bound B+R*T = %d + %g*%.2f = %.0f"
      " (accepted %.0f..%.0f)" % (flood["attempts"], t, flood["made"], flood["failed"], burst,
                                  rate, t, burst + rate * t, lower, upper))
if flood["made"] > upper:
    bad.append("A made %d connections > bound %.1f" % (flood["made"], upper))
if flood["made"] < lower:
    bad.append("A made %d connections < %.1f: limiting too hard" % (flood["made"], lower))
print("client B: %d attempts, %d made, %d failed" % (polite["attempts"], polite["made"],
                                                     polite["failed"]))
if polite["failed"] or polite["made"] != polite["attempts"]:
    bad.append("B (under the limit) lost %d connections" % polite["failed"])

# Established: bytes/s before the flood and during it, from the bulk sender's samples.
def rate_between(t0, t1):
    s = [x for x in bulk["samples"] if t0 <= x[0] <= t1]
    if len(s) < 2:
        return 0.0
    return (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0])
base = rate_between(bulk["samples"][0][0] + 0.3, flood["first"])
during = rate_between(flood["first"], flood["last"])
srv = server["sources"]
got = srv.get(a, {}).get("bytes", 0)
print("established (client A, one connection): %.0f MB/s before the flood, %.0f MB/s during"
      " it (%.0f%%); sent %d bytes, server received %d"
      % (base / 1e6, during / 1e6, 100 * during / base if base else 0, bulk["sent"], got))
if not base or during < 0.5 * base:
    bad.append("established throughput fell to %.0f%% during the flood" %
               (100 * during / base if base else 0))
if got != bulk["sent"]:
    bad.append("server received %d bytes of the %d the bulk client sent" % (got, bulk["sent"]))
acc_a = srv.get(a, {}).get("accepted", 0)
acc_b = srv.get(b, {}).get("accepted", 0)
# A's accepted connections: the bulk one and those the flood made.
if acc_a != flood["made"] + 1 or acc_b != polite["made"]:
    bad.append("server accepted A %d B %d, expected %d and %d"
               % (acc_a, acc_b, flood["made"] + 1, polite["made"]))

lim = [l for l in st["limits"] if l["name"] == "new-conn"]
rule = [r for r in st["rules"] if r["name"] == "tcp-syn"]
if len(lim) != 1 or len(rule) != 1:
    bad.append("status lacks limit 'new-conn' or rule 'tcp-syn'")
else:
    p, r = lim[0]["packets"], rule[0]
    syns = flood["attempts"] + polite["attempts"] + 1  # + the bulk connection's SYN
    print("status: rule tcp-syn matched %d dropped %d; limit allowed %d denied %d;"
          " SYNs sent %d" % (r["matched_packets"], r["dropped_packets"], p["allowed"],
                             p["denied"], syns))
    # An attempt is counted by the client, a SYN by the gateway: on a loaded
    # box one attempt in a few hundred fails in the client's own stack before
    # its SYN leaves (seen once in CI: 441 attempts, 440 SYNs matched, 301
    # failures, 300 drops), so up to SLACK attempts may have no SYN and fail
    # without a drop. The gateway's own counters must agree exactly.
    SLACK = 2
    if not syns - SLACK <= r["matched_packets"] <= syns:
        bad.append("rule matched %d packets, expected the %d SYNs (less at most %d)"
                   % (r["matched_packets"], syns, SLACK))
    if r["dropped_packets"] != p["denied"] or \
            not flood["failed"] - SLACK <= p["denied"] <= flood["failed"] or \
            flood["failed"] - p["denied"] > syns - r["matched_packets"]:
        bad.append("dropped %d / denied %d, expected A's %d failures (less the attempts "
                   "without a SYN)" % (r["dropped_packets"], p["denied"], flood["failed"]))
    other = [x for x in st["rules"] if x["name"] != "tcp-syn" and x["dropped_packets"]]
    if other:
        bad.append("packets other than SYNs dropped: %r" % other)

for x in bad[:10]:
    print("  " + x)
if bad:
    print("FAIL: %d problem(s) with new-connection limiting" % len(bad))
    sys.exit(1)
print("ok: new connections limited to %d/s per client (A made %d of %d, B all %d), established"
      " throughput kept (%.0f%%)" % (rate, flood["made"], flood["attempts"], polite["made"],
                                     100 * during / base))
EOF
