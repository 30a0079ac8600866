#!/bin/bash
# SPDX-License-Identifier: MIT
# Shadow mode on a real veth: the same limit as test_enforce.sh but with
# mode: shadow. Nothing may be dropped (every client's socket count equals what
# it sent) while status counts the packets the limit would have denied, and
# allowed + shadow_denied equals what was sent.
# Then shadow first, then enforce (issue #11; docs/operations.md):
#   figures  status -j's would_drop (the last ~10 s from ll_shadow_win, and in
#            all) holds every shadow denial of the run; top -j says the same
#            and labels each key's (sampled) count would_drop
#   restart  the agent stopped and started on the same pins: the shadow
#            counts and the window are as they were
#   flip     version 2, mode enforce, by SIGHUP; the same offered traffic
#            again: what enforce drops (and the clients miss) matches what
#            shadow said it would drop, within a tolerance from the two runs'
#            own differences (see below)
#   carry    rate 1/s (slow refill, so a fresh burst would show): keys spend
#            their burst in shadow (v3), the flip to enforce (v4) comes
#            within ~1 s; after it, each key is admitted only what refilled
#            since, not another burst
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
ll_status >"$TMPD/status.txt" || ll_fail "leaseline status failed"
in_g "$LL" top -j --pin-dir "$PIN" >"$TMPD/top.json" || ll_fail "leaseline top -j failed"
XDP_DROPS=$(in_g ethtool -S $LL_G_IF 2>/dev/null |
	awk -F: '/rx_queue_[0-9]+_xdp_drops/ {n += $2; f = 1} END {if (f) print n}')

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "${XDP_DROPS:-}" >"$TMPD/phase-a.out" <<'EOF'
import json, sys

tmpd, rate, burst, skew, xdp_drops = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/status.json"))
bad = []
n_checks = [0]
def check(c):
    n_checks[0] += 1
    return c
def tally():
    open(tmpd + "/checks", "a").write("%d %d\n" % (n_checks[0], len(bad)))

total_sent = total_recv = 0
for src, s in sent.items():
    got = recv.get(src, {"count": 0})["count"]
    total_sent += s["sent"]
    total_recv += got
    if check(s["errors"]):
        bad.append("%s: %d send errors" % (src, s["errors"]))
    if check(got != s["sent"]):
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
if check(l["mode"] != "shadow"):
    bad.append("status shows mode %r, expected shadow" % l["mode"])
if check(p["shadow_denied"] <= 0):
    bad.append("shadow_denied is 0: the limit decided nothing")
if check(p["denied"]):
    bad.append("denied %d in shadow mode" % p["denied"])
if check(p["allowed"] + p["shadow_denied"] != total_sent):
    bad.append("allowed %d + shadow_denied %d != sent %d"
               % (p["allowed"], p["shadow_denied"], total_sent))
if check(p["allowed"] > would):
    bad.append("allowed %d > B+R*T bound %.0f: shadow decisions are not the limit's"
               % (p["allowed"], would))
if check(xdp_drops and int(xdp_drops)):
    bad.append("ethtool shows %s XDP drops" % xdp_drops)
rule = [r for r in st["rules"] if r["name"] == "test-udp"]
if check(not rule or rule[0]["dropped_packets"]):
    bad.append("rule 'test-udp' dropped packets: %r" % rule)

# The figures an operator flips on: status's would_drop. The run is shorter
# than the window (its span said, 9.7 to 10.7 s), so the window holds all.
wd = l.get("would_drop")
if check(not wd):
    bad.append("status -j has no would_drop for the shadow limit")
else:
    print("status would_drop: %d pkts in the last %.2f s (%.0f/s), %d in all (%.1f%%)"
          % (wd["window_packets"], wd["window_seconds"], wd["window_packets_per_second"],
             wd["total_packets"], 100 * wd["total_fraction"]))
    if check(wd["total_packets"] != p["shadow_denied"]):
        bad.append("would_drop total %d != shadow_denied %d" % (wd["total_packets"], p["shadow_denied"]))
    if check(t + 2 < 9.6 and wd["window_packets"] != p["shadow_denied"]):
        bad.append("would_drop window %d != shadow_denied %d (the run fits the window)"
                   % (wd["window_packets"], p["shadow_denied"]))
    if check(wd["window_bytes"] != l["bytes"]["shadow_denied"]):
        bad.append("would_drop window bytes %d != shadow_denied bytes %d"
                   % (wd["window_bytes"], l["bytes"]["shadow_denied"]))
    if check(not 9.6 <= wd["window_seconds"] <= 10.8):
        bad.append("window_seconds %.2f not in [9.6, 10.8]" % wd["window_seconds"])
txt = open(tmpd + "/status.txt").read()
if check("would_drop" not in txt or "window_packets" not in txt):
    bad.append("status (text) does not show would_drop")
top = json.load(open(tmpd + "/top.json"))
tl = [x for x in top["limits"] if x["name"] == "per-client"][0]
twd = tl.get("would_drop", {})
rows = tl["top_denied"]
print("top would_drop: %s in all, %s in the window; %d key rows, the first %s"
      % (twd.get("total_packets"), twd.get("window_packets"), len(rows),
         rows[0].get("would_drop") if rows else None))
if check(twd.get("total_packets") != p["shadow_denied"]):
    bad.append("top -j would_drop.total_packets %r != %d" % (twd.get("total_packets"), p["shadow_denied"]))
if check(not rows or any("would_drop" not in r or r["would_drop"] != r["denied"] for r in rows)):
    bad.append("top -j rows of a shadow limit lack would_drop (= the sampled denied)")
# Sampled per key: never more than the limit's exact count.
if check(sum(r.get("would_drop", 0) for r in rows) > p["shadow_denied"]):
    bad.append("per-key would_drop sums past the limit's count")

for b in bad[:10]:
    print("  " + b)
tally()
if bad:
    print("FAIL: %d problem(s) with shadow mode" % len(bad))
    sys.exit(1)
print("phase A ok: shadow dropped nothing (%d/%d received), counted %d shadow denials"
      % (total_recv, total_sent, p["shadow_denied"]))
EOF
RC_A=$?
cat "$TMPD/phase-a.out"

# An agent restart that keeps the pins: the figures the flip rests on stay.
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
: >"$TMPD/agent2.log"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent2.log"
ll_status -j >"$TMPD/status-r.json" || ll_fail "leaseline status -j failed after the restart"
python3 - "$TMPD" <<'EOF'
import json, sys
lim = lambda f: [l for l in json.load(open(sys.argv[1] + f))["limits"] if l["name"] == "per-client"][0]
a, r = lim("/status.json"), lim("/status-r.json")
same = a["packets"] == r["packets"] and a["would_drop"]["total_packets"] == r["would_drop"]["total_packets"]
# The window may only lose slots that aged out while the agent restarted.
win_ok = r["would_drop"]["window_packets"] <= a["would_drop"]["window_packets"]
print("restart: counters %s, would_drop total %d -> %d, window %d -> %d"
      % ("kept" if a["packets"] == r["packets"] else "CHANGED", a["would_drop"]["total_packets"],
         r["would_drop"]["total_packets"], a["would_drop"]["window_packets"],
         r["would_drop"]["window_packets"]))
open(sys.argv[1] + "/checks", "a").write("2 %d\n" % ((not same) + (not win_ok)))
sys.exit(0 if same and win_ok else 1)
EOF
RC_R=$?

# The flip: version 2, mode enforce, same rate and burst, by SIGHUP. Then,
# with the buckets full again (> B/R after the last packet) so that both
# runs start alike, the same offered traffic.
ll_policy "$TMPD/policy.yaml" 2 "$RATE" "$BURST" enforce
kill -HUP "$AGENT_PID"
for ((i = 0; i < 50; i++)); do
	ll_status -j 2>/dev/null | grep -q '"policy_version":2' && break
	ll_sleep 0.1
done
ll_status -j | grep -q '"policy_version":2' || ll_fail "policy version 2 not applied within 5 s"
ll_sleep 1
ll_recv_start "$TMPD/recv-b.json" 60
ll_send "$TMPD/sent-b.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" ||
	ll_fail "the sender failed"
ll_recv_stop
ll_status -j >"$TMPD/status-b.json" || ll_fail "leaseline status -j failed"

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "$RC_A" "$RC_R" <<'EOF'
import json, sys

tmpd, rate, burst, skew, rc_a, rc_r = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def run(tag):
    sent = json.load(open(tmpd + "/sent%s.json" % tag))["sources"]
    recv = json.load(open(tmpd + "/recv%s.json" % tag))["sources"]
    return sent, recv, max(s["last"] - s["first"] for s in sent.values())
sa, ra, ta = run("")
sb, rb, tb = run("-b")
lim = lambda f: [l for l in json.load(open(tmpd + f))["limits"] if l["name"] == "per-client"][0]
a, b = lim("/status.json"), lim("/status-b.json")
bad = []
n_checks = [0]
def check(c):
    n_checks[0] += 1
    return c
def tally():
    open(tmpd + "/checks", "a").write("%d %d\n" % (n_checks[0], len(bad)))
would = a["packets"]["shadow_denied"]
dropped = b["packets"]["denied"]
sent_a = sum(s["sent"] for s in sa.values())
sent_b = sum(s["sent"] for s in sb.values())
recv_b = sum(rb.get(k, {"count": 0})["count"] for k in sb)
admitted_b = b["packets"]["allowed"] - a["packets"]["allowed"]
# Tolerance: the two runs are not the same packets. Each client's drops are
# its sent - (B + R*T), give or take R*SKEW at each end (when its packets
# start and stop against the refill) and a token; the runs' lengths differ
# by |ta - tb| and they sent sent_a and sent_b packets in all.
n = len(sb)
tol = n * (rate * (2 * skew + abs(ta - tb)) + 2) + abs(sent_a - sent_b)
bound = n * (burst + rate * (tb + skew) + 1)
print("flip: shadow said %d of %d would drop over %.2f s; enforce dropped %d of %d over %.2f s "
      "(tolerance %.0f); clients received %d; admitted %d (B+R*T bound %.0f)"
      % (would, sent_a, ta, dropped, sent_b, tb, tol, recv_b, admitted_b, bound))
if check(b["mode"] != "enforce"):
    bad.append("mode %r after the flip" % b["mode"])
if check(b["packets"]["shadow_denied"] != would):
    bad.append("shadow_denied moved after the flip: %d != %d" % (b["packets"]["shadow_denied"], would))
if check(abs(dropped - would) > tol):
    bad.append("enforce dropped %d, shadow said %d: off by %d > %.0f"
               % (dropped, would, abs(dropped - would), tol))
if check(recv_b != sent_b - dropped):
    bad.append("clients received %d != sent %d - dropped %d" % (recv_b, sent_b, dropped))
if check(admitted_b > bound):
    bad.append("enforce admitted %d > B+R*T bound %.0f" % (admitted_b, bound))
for x in bad[:10]:
    print("  " + x)
tally()
if bad or rc_a or rc_r:
    sys.exit(1)
print("ok: shadow dropped nothing and said %d would drop, kept across a restart; then enforce "
      "dropped %d for the same traffic (|diff| %d <= %.0f)" % (would, dropped, abs(dropped - would), tol))
EOF
RC_B=$?

# Carry-over through a real reload: rate 1/s, burst BURST. v3 (shadow, new
# rate: migrated, never deposited) lets each key spend its burst and counts
# the rest; v4 flips only the mode; then the same keys again.
wait_version() {
	local v=$1 i
	for ((i = 0; i < 50; i++)); do
		ll_status -j 2>/dev/null | grep -q "\"policy_version\":$v," && return 0
		ll_sleep 0.1
	done
	ll_fail "policy version $v not applied within 5 s"
}
ll_policy "$TMPD/policy.yaml" 3 1 "$BURST" shadow
kill -HUP "$AGENT_PID"
wait_version 3
ll_send "$TMPD/sent-c1.json" 1 "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" || ll_fail "the sender failed"
T_C1=$(ll_now)
ll_status -j >"$TMPD/status-c1.json" || ll_fail "leaseline status -j failed"
ll_policy "$TMPD/policy.yaml" 4 1 "$BURST" enforce
kill -HUP "$AGENT_PID"
wait_version 4
ll_recv_start "$TMPD/recv-c2.json" 60
ll_send "$TMPD/sent-c2.json" 1 "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" || ll_fail "the sender failed"
ll_recv_stop
T_C2=$(ll_now)
ll_status -j >"$TMPD/status-c2.json" || ll_fail "leaseline status -j failed"
python3 - "$TMPD" "$BURST" "$T_C1" "$T_C2" <<'EOF'
import json, sys
tmpd, burst, t1, t2 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
lim = lambda f: [l for l in json.load(open(tmpd + f))["limits"] if l["name"] == "per-client"][0]
c1, c2 = lim("/status-c1.json"), lim("/status-c2.json")
sent = json.load(open(tmpd + "/sent-c2.json"))["sources"]
recv = json.load(open(tmpd + "/recv-c2.json"))["sources"]
n = len(sent)
spent_c1 = c1["packets"]["allowed"]
admitted = c2["packets"]["allowed"] - spent_c1
# At 1 token/s, from the shadow status (the keys empty then, give or take
# one token in progress) to the end of the enforce run: at most
# (t2 - t1) + 1 tokens a key. A fresh burst on the flip would be BURST more.
bound = n * ((t2 - t1) + 1)
got = sum(recv.get(k, {"count": 0})["count"] for k in sent)
bad = []
checks = 0
def check(ok, msg):
    global checks
    checks += 1
    if not ok:
        bad.append(msg)
c0 = lim("/status-b.json")
print("carry: in shadow (v3, 1/s) %d would-drops as the keys spent their burst; after the flip "
      "to v4 %d of %d admitted in %.2f s (bound %.0f; a fresh burst would be %d more), clients got %d"
      % (c1["packets"]["shadow_denied"] - c0["packets"]["shadow_denied"], admitted,
         sum(s["sent"] for s in sent.values()), t2 - t1, bound, n * burst, got))
check(c1["mode"] == "shadow" and c2["mode"] == "enforce", "modes %s, %s" % (c1["mode"], c2["mode"]))
check(admitted <= bound, "admitted %d after the flip > %.0f: a fresh burst" % (admitted, bound))
check(got <= bound, "clients received %d after the flip > %.0f: a fresh burst" % (got, bound))
check(got == admitted, "clients received %d != admitted %d" % (got, admitted))
for x in bad:
    print("  " + x)
open(tmpd + "/checks", "a").write("%d %d\n" % (checks, len(bad)))
sys.exit(1 if bad else 0)
EOF
RC_C=$?
# The closing count line: every check of the four parts.
read -r N_CHECKS N_FAILED < <(awk '{c += $1; f += $2} END {print c + 0, f + 0}' "$TMPD/checks")
echo "$N_CHECKS checks, $N_FAILED failed"
[ "$RC_A" -eq 0 ] && [ "$RC_R" -eq 0 ] && [ "$RC_B" -eq 0 ] && [ "$RC_C" -eq 0 ] && [ "$N_FAILED" -eq 0 ]
