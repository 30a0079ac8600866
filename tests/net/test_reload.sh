#!/bin/bash
# SPDX-License-Identifier: MIT
# SIGHUP under traffic. 16 clients send at 200 pps each for 10 s through a
# src-ip limit; the admitted rate per client is measured in four windows:
#   A  version 1, rate 100/s
#   B  after SIGHUP with version 2, rate 25/s: the new rate takes effect
#   C  after SIGHUP with a syntax error: refused and logged, 25/s goes on
#   D  after SIGHUP with version 1 again (older, rate 200/s): refused, 25/s goes on
# and status must still show version 2 at the end.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE1=100
RATE2=25
RATE_OLD=200 # what the refused older version would allow
BURST=20
SEND_PPS=200
DURATION=12 # A to D: ~3 s each after the reloads, with room for a slow box
NSRC=16
# Rate tolerance per window: +/- (2 packets + 5% of the rate x window) covers a
# window edge falling between two admissions and the sender's pacing jitter;
# the rates under test differ by 4x and 8x.
TOL_PKTS=2
TOL_FRAC=0.05

ll_topo
ll_sources "$NSRC"
ll_bpffs
POL=$TMPD/policy.yaml
ll_policy "$POL" 1 "$RATE1" "$BURST"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
LOG=$TMPD/agent.log
ll_agent_start "$TMPD/agent.yaml" "$LOG"

# wait_log N PATTERN: wait (bounded, ~5 s) until the agent log has at least N
# lines matching PATTERN; sets SEEN to the instant it saw them (polled every
# 50 ms, finer than ll_wait_until: SEEN bounds the windows below).
wait_log() {
	local n=$1 pat=$2 i
	for ((i = 0; i < 100; i++)); do
		if ll_log_has "$LOG" "$pat" "$n"; then
			SEEN=$(ll_now)
			return 0
		fi
		sleep 0.05
	done
	sed 's/^/   agent: /' "$LOG" | tail -10
	ll_fail "the agent did not log '$pat' within 5 s"
}

ll_recv_start "$TMPD/recv.json" 60
ll_send_bg "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS"
# The sleeps below are the windows themselves (time that must pass under
# each version), not waits for an event: those are wait_log's.
ll_sleep 3 # window A

# B: a valid new version with a lower rate.
ll_policy "$POL" 2 "$RATE2" "$BURST"
T_HUP1=$(ll_now)
kill -HUP "$AGENT_PID"
wait_log 1 "policy version 2 applied"
T_OK1=$SEEN
ll_sleep 2.2 # window B

# C: a syntax error (unclosed flow sequence).
printf 'version: 3\ndefault: pass\nlimits: [\n  {name: per-client, key: src-ip\n' >"$POL.tmp"
mv "$POL.tmp" "$POL"
T_HUP2=$(ll_now)
kill -HUP "$AGENT_PID"
wait_log 1 "reload refused"
T_OK2=$SEEN
ll_sleep 2 # window C

# D: a well-formed but older version that would raise the rate.
ll_policy "$POL" 1 "$RATE_OLD" "$BURST"
T_HUP3=$(ll_now)
kill -HUP "$AGENT_PID"
wait_log 2 "reload refused"
T_OK3=$SEEN

ll_wait_pid "$LL_SEND_PID" 20 || ll_fail "the sender failed or did not finish"
ll_recv_stop
kill -0 "$AGENT_PID" 2>/dev/null || ll_fail "the agent died during the reloads"
ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"

echo "agent log (reloads):"
grep -E "reload|refused|applied|policy.yaml:" "$LOG" | sed 's/^/   /'

python3 - "$TMPD" "$RATE1" "$RATE2" "$BURST" "$TOL_PKTS" "$TOL_FRAC" \
	"$T_HUP1" "$T_OK1" "$T_HUP2" "$T_OK2" "$T_HUP3" "$T_OK3" "$LOG" <<'EOF'
import json, re, statistics, sys

a = sys.argv
tmpd = a[1]
rate1, rate2, burst, tol_pkts, tol_frac = float(a[2]), float(a[3]), int(a[4]), float(a[5]), \
    float(a[6])
hup1, ok1, hup2, ok2, hup3, ok3 = map(float, a[7:13])
log = open(a[13]).read()
sent = json.load(open(tmpd + "/sent.json"))
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/status.json"))
bad = []

first = min(s["first"] for s in sent["sources"].values())
last = max(s["last"] for s in sent["sources"].values())
# Windows exclude the moment of each reload (from the signal to the log line
# that says it was handled, plus 0.1 s) and the initial burst (0.5 s).
windows = [("A v1", first + 0.5, hup1, rate1), ("B v2", ok1 + 0.1, hup2, rate2),
           ("C bad syntax", ok2 + 0.1, hup3, rate2), ("D older version", ok3 + 0.1, last, rate2)]
for name, lo, hi, want in windows:
    w = hi - lo
    if w < 1.0:
        bad.append("window %s is only %.2f s long: the box is too slow for this test" % (name, w))
        continue
    counts = [sum(1 for t in recv.get(src, {"times": []})["times"] if lo <= t < hi)
              for src in sent["sources"]]
    rates = [c / w for c in counts]
    tol = tol_pkts + tol_frac * want * w
    print("window %-16s %.2f s: admitted per client min %.1f median %.1f max %.1f /s "
          "(expect %g +/- %.1f)" % (name, w, min(rates), statistics.median(rates), max(rates),
                                    want, tol / w))
    for src, c in zip(sent["sources"], counts):
        if abs(c - want * w) > tol:
            bad.append("%s in window %s: %d admitted, expected %.1f +/- %.1f"
                       % (src, name, c, want * w, tol))

# Over the whole run: burst + rate1 until the reload was handled + rate2 after.
for src, s in sent["sources"].items():
    got = recv.get(src, {"count": 0})["count"]
    bound = burst + rate1 * (ok1 - s["first"]) + rate2 * (s["last"] - hup1) + 1
    if got > bound:
        bad.append("%s: %d admitted over the run > bound %.0f" % (src, got, bound))

if not re.search(r"policy\.yaml:\d+:\d+: ", log):
    bad.append("the syntax error was not logged as FILE:LINE:COL")
if "policy version 1 refused" not in log or "older" not in log:
    bad.append("the older version was not refused with a clear log line")
if log.count("policy version 2 keeps enforcing") < 2:
    bad.append("the agent did not log that version 2 keeps enforcing after each bad reload")
# The refusals are in status too, not only in the log.
rf = st.get("refused", {})
print("status refused: %s" % rf)
if rf.get("count") != 2 or rf.get("version") != 1 or rf.get("outstanding") != "yes" \
        or "older" not in rf.get("reason", ""):
    bad.append("status does not show the two refusals (last: version 1, older): %s" % rf)
l = [l for l in st["limits"] if l["name"] == "per-client"][0]
print("status after the bad reloads: policy_version %s, rate %s, burst %s"
      % (st["policy_version"], l["rate"], l["burst"]))
if st["policy_version"] != 2 or l["rate"] != rate2:
    bad.append("status shows version %s rate %s, expected 2 and %g"
               % (st["policy_version"], l["rate"], rate2))

for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %d problem(s) with reloads" % len(bad))
    sys.exit(1)
print("ok: reload to %g/s followed within %.2f s; a syntax error and an older version were "
      "refused and %g/s kept enforcing" % (rate2, ok1 - hup1, rate2))
EOF
