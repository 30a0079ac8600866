#!/bin/bash
# SPDX-License-Identifier: MIT
# Agent crash and restart under traffic. The burst is large next to the rate
# (200 tokens, 20/s) so a fresh bucket after the restart would be plain to see.
# 8 clients send at 100 pps for 10 s: the buckets are drained after ~2.5 s;
# at ~4 s the agent is killed with SIGKILL; the XDP program must stay attached
# and keep admitting ~20/s per client while no agent runs; at ~6.5 s the agent
# restarts with the same config and must re-adopt the pinned buckets, so over
# the whole run each client gets at most burst + rate*T (one burst, not two).
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE=20
BURST=200
SEND_PPS=100
DURATION=10
NSRC=8
SKEW=0.2     # seconds of rate (see test_enforce.sh)
TOL_PKTS=2   # rate windows: +/- 2 packets + 10% (the dead window is short)
TOL_FRAC=0.1

ll_topo
ll_sources "$NSRC"
ll_bpffs
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
LOG=$TMPD/agent.log
ll_agent_start "$TMPD/agent.yaml" "$LOG"
PROG1=$(ll_xdp_prog $LL_G_IF)
[ -n "$PROG1" ] || ll_fail "no XDP program on $LL_G_IF"

ll_recv_start "$TMPD/recv.json" 60
ll_send_bg "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS"
# Time that must pass, not an event: at 100 pps against 20/s the burst of 200
# drains in ~2.5 s; the kill comes at 4 s (checked below: drained).
ll_sleep 4

# The buckets must be drained before the kill, or a fresh burst could hide.
command -v bpftool >/dev/null &&
	bpftool -j map dump pinned "$PIN/ll_buckets" >"$TMPD/buckets-before.json" 2>/dev/null
T_KILL=$(ll_now)
# (stderr: bash's "Killed" job notice is expected here)
{ kill -KILL "$AGENT_PID"; ll_agent_wait_exit 30; } 2>/dev/null ||
	ll_fail "the agent did not die on SIGKILL"
PROG_DEAD=$(ll_xdp_prog $LL_G_IF)
[ "$PROG_DEAD" = "$PROG1" ] || ll_fail "XDP program changed or vanished when the agent died" \
	"(was $PROG1, now '${PROG_DEAD}')"
ll_status -j >"$TMPD/status-dead.json" || ll_fail "status failed while the agent was dead"
ll_sleep 2.5 # the window with no agent: the program enforces alone

T_START=$(ll_now)
ll_agent_start "$TMPD/agent.yaml" "$LOG"
T_UP=$(ll_now)
PROG2=$(ll_xdp_prog $LL_G_IF)
[ -n "$PROG2" ] || ll_fail "no XDP program on $LL_G_IF after the restart"

ll_wait_pid "$LL_SEND_PID" 20 || ll_fail "the sender failed or did not finish"
ll_recv_stop
ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"
echo "xdp prog id: $PROG1 before the kill, $PROG_DEAD while dead, $PROG2 after the restart"

python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "$TOL_PKTS" "$TOL_FRAC" \
	"$T_KILL" "$T_START" "$T_UP" <<'EOF'
import json, os, statistics, sys

a = sys.argv
tmpd = a[1]
rate, burst, skew, tol_pkts, tol_frac = float(a[2]), int(a[3]), float(a[4]), float(a[5]), \
    float(a[6])
t_kill, t_start, t_up = map(float, a[7:10])
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/status.json"))
st_dead = json.load(open(tmpd + "/status-dead.json"))
bad = []

p = tmpd + "/buckets-before.json"
if os.path.exists(p) and os.path.getsize(p):
    toks = [e["formatted"]["value"]["tokens"] / 1e9 for e in json.load(open(p))
            if e["formatted"]["key"]["family"] == 4]
    print("bucket tokens just before the kill: max %.1f of burst %d" % (max(toks), burst))
    if max(toks) > burst / 4:
        bad.append("buckets were not drained before the kill (max %.1f tokens)" % max(toks))

last = max(s["last"] for s in sent.values())
windows = [("agent dead", t_kill + 0.1, t_start, rate), ("after restart", t_up, last, rate)]
for name, lo, hi, want in windows:
    w = hi - lo
    counts = [sum(1 for t in recv.get(src, {"times": []})["times"] if lo <= t < hi)
              for src in sent]
    tol = tol_pkts + tol_frac * want * w
    print("window %-13s %.2f s: admitted per client min %d median %d max %d (expect %.1f +/- %.1f)"
          % (name, w, min(counts), statistics.median(counts), max(counts), want * w, tol))
    for src, c in zip(sent, counts):
        if abs(c - want * w) > tol:
            bad.append("%s while %s: %d admitted, expected %.1f +/- %.1f"
                       % (src, name, c, want * w, tol))

got = []
for src, s in sent.items():
    n = recv.get(src, {"count": 0})["count"]
    t = s["last"] - s["first"]
    bound = burst + rate * (t + skew) + 1
    got.append((n, bound))
    if n > bound:
        bad.append("%s: %d admitted over %.2f s > burst + rate*T = %.0f: a fresh burst?"
                   % (src, n, t, bound))
print("whole run per client: admitted min %d max %d, bound burst + rate*T <= %.0f "
      "(a second burst would reach ~%.0f)"
      % (min(g[0] for g in got), max(g[0] for g in got), max(g[1] for g in got),
         max(g[1] for g in got) + burst))

l = [l for l in st["limits"] if l["name"] == "per-client"][0]
ld = [l for l in st_dead["limits"] if l["name"] == "per-client"][0]
total_sent = sum(s["sent"] for s in sent.values())
pk = l["packets"]
print("status: allowed %d denied %d (sent %d), keys %d, new_keys %d; while dead: attached %s"
      % (pk["allowed"], pk["denied"], total_sent, l["keys"], l["new_keys"],
         [i.get("attached") for i in st_dead["interfaces"]]))
if not all(i.get("attached") for i in st_dead["interfaces"]) or not st_dead["interfaces"]:
    bad.append("status while the agent was dead does not show the program attached")
if pk["allowed"] + pk["denied"] != total_sent:
    bad.append("counters did not survive the restart: allowed+denied %d != sent %d"
               % (pk["allowed"] + pk["denied"], total_sent))
if l["new_keys"] != len(sent):
    bad.append("new_keys %d != %d clients: buckets were re-created" % (l["new_keys"], len(sent)))

for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %d problem(s) across the agent restart" % len(bad))
    sys.exit(1)
print("ok: enforcement went on while the agent was dead and the restart added no burst")
EOF
