#!/bin/bash
# SPDX-License-Identifier: MIT
# The pin directory belongs to one agent and follows one layout (reference §3,
# maps.md "Pin layout"), with real agents and real pins on a veth:
#   lock      a second agent on the same pin-dir refuses, naming the first one's
#             pid and start time, and changes nothing (policy, program); so does
#             reset-fence while the agent runs
#   layout    ll_layout records layout and build; pins of another layout, an
#             incomplete set, a map of another shape, or bucket maps of another
#             size while a program still uses them are refused with the pin dir,
#             the layout found and expected and what to do; nothing is
#             re-created, every bucket stays as it was (dumped before and after)
#   move      with the program detached, a new max-keys moves every bucket into
#             maps of the new size, unchanged, and traffic after it gets no
#             fresh burst
#   adopt     pins that record no layout but match this build map for map are
#             adopted and stamped
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v bpftool >/dev/null || ll_skip "needs 'bpftool'"

RATE=1
BURST=100
# This build's pin layout (include/ll_types.h), so that a bump needs no edit here.
LAYOUT=$(sed -n 's/^#define LL_LAYOUT_VERSION *\([0-9]*\).*/\1/p' "$(dirname "$0")/../../include/ll_types.h")
# Bucket maps hold max-keys plus one overflow bucket per possible limit.
MAXLIM=$(sed -n 's/^#define LL_MAX_LIMITS *\([0-9]*\).*/\1/p' "$(dirname "$0")/../../include/ll_types.h")
B4K=$((4096 + MAXLIM))
B8K=$((8192 + MAXLIM))
[ -n "$LAYOUT" ] || ll_fail "cannot read LL_LAYOUT_VERSION from include/ll_types.h"
NSRC=4
# refused DESCRIPTION CONFIG REGEX...: an agent on CONFIG exits 1 within 20 s,
# its output matching every REGEX.
refused() {
	local what=$1 cfg=$2 rc re
	shift 2
	in_g timeout 20 "$LL" agent -c "$cfg" >"$TMPD/out" 2>&1
	rc=$?
	if [ "$rc" -eq 1 ]; then ok "$what (exit 1)"; else bad "$what: exit $rc: $(tail -3 "$TMPD/out" | tr '\n' ' ')"; fi
	for re in "$@"; do
		grep -qE -- "$re" "$TMPD/out" && ok "  ... says /$re/" ||
			bad "  ... no /$re/ in: $(tail -3 "$TMPD/out" | tr '\n' ' ')"
	done
	echo "    $(grep -vE '^(libbpf|loaded|mounted)' "$TMPD/out" | tail -1 | cut -c1-400)"
}
# dump FILE: ll_buckets as JSON.
dump() { bpftool -j map dump pinned "$PIN/ll_buckets" >"$1" 2>/dev/null; }
# same_buckets DESCRIPTION: ll_buckets holds exactly what $TMPD/before.json held.
same_buckets() {
	dump "$TMPD/now.json"
	if python3 - "$TMPD/before.json" "$TMPD/now.json" >"$TMPD/cmp" 2>&1 <<'PY'; then
import json, sys
def load(p):
    out = {}
    for e in json.load(open(p)):
        k, v = e["formatted"]["key"], e["formatted"]["value"]
        out[json.dumps(k, sort_keys=True)] = (v["tokens"], v["last_ns"], v["spent"], v["gen"])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) > 1, "no buckets before"
assert a.keys() == b.keys(), "keys differ: %d before, %d now" % (len(a), len(b))
diff = [k for k in a if a[k] != b[k]]
assert not diff, "%d buckets changed, e.g. %s: %s -> %s" % (len(diff), diff[0], a[diff[0]], b[diff[0]])
print("%d buckets, tokens/last_ns/spent/gen all as before" % len(a))
PY
		ok "$1: $(cat "$TMPD/cmp")"
	else
		bad "$1: $(tail -1 "$TMPD/cmp")"
	fi
}
layout_field() {
	bpftool -j map lookup pinned "$PIN/ll_layout" key 0 0 0 0 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["formatted"]["value"][sys.argv[1]])' "$1"
}
# set_layout VERSION: write ll_layout's version (and an empty build).
set_layout() {
	local v=$1 bytes i
	bytes="$((v & 255)) $(((v >> 8) & 255)) $(((v >> 16) & 255)) $(((v >> 24) & 255)) 0 0 0 0"
	for ((i = 0; i < 48; i++)); do bytes="$bytes 0"; done
	# shellcheck disable=SC2086
	bpftool map update pinned "$PIN/ll_layout" key 0 0 0 0 value $bytes
}
no_old_pins() {
	[ -z "$(ls "$PIN" | grep -- '-old$')" ] && ok "  ... no pin left set aside" ||
		bad "  ... pins left: $(ls "$PIN" | tr '\n' ' ')"
}

ll_topo
ll_sources "$NSRC"
ll_bpffs
V=$("$LL" -V | awk '{print $2}')
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_policy "$TMPD/policy2.yaml" 2 1000 1000
sed 's|^policy: .*|policy: policy2.yaml|' "$TMPD/agent.yaml" >"$TMPD/agent-second.yaml"
sed 's|^max-keys: .*|max-keys: 8192|' "$TMPD/agent.yaml" >"$TMPD/agent-8k.yaml"

echo "layout recorded:"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent1.log"
PROG=$(ll_xdp_prog $LL_G_IF)
[ "$(layout_field version)" = "$LAYOUT" ] && ok "ll_layout: version $LAYOUT" || bad "ll_layout version '$(layout_field version)'"
[ "$(layout_field agent_build)" = "$V" ] && ok "ll_layout: agent_build $V" ||
	bad "ll_layout agent_build '$(layout_field agent_build)', expected '$V'"
# Drain the buckets: burst 100, 150 packets per client.
ll_send "$TMPD/sent1.json" 0.5 "$LL_SRC_FIRST-$LL_SRC_LAST:300" || bad "the sender failed"

echo "one agent per pin directory:"
refused "a second agent on the same pin-dir" "$TMPD/agent-second.yaml" \
	"pin directory '$PIN' is held by another agent: pid $AGENT_PID, started [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}" \
	"leaseline agent -c $TMPD/agent.yaml"
ll_status -j >"$TMPD/st.json"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["policy_version"] == 1' "$TMPD/st.json" &&
	ok "  ... the first agent's policy (version 1) still enforces" || bad "  ... the policy changed"
[ "$(ll_xdp_prog $LL_G_IF)" = "$PROG" ] && ok "  ... its program ($PROG) still attached" ||
	bad "  ... program $PROG replaced by '$(ll_xdp_prog $LL_G_IF)'"
in_g "$LL" reset-fence --pin-dir "$PIN" >"$TMPD/out" 2>&1
[ $? -eq 1 ] && grep -q "held by another agent: pid $AGENT_PID" "$TMPD/out" &&
	ok "reset-fence refuses while the agent runs" || bad "reset-fence: $(cat "$TMPD/out")"
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
# The kernel dropped the lock with the agent: the next one takes the directory.
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent2.log"
ok "once the first agent exited, another one takes the pin-dir"
PROG=$(ll_xdp_prog $LL_G_IF)
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
dump "$TMPD/before.json"
T0=$(ll_now)
MAX_TOKENS=$(python3 -c '
import json, sys
print(max(e["formatted"]["value"]["tokens"] for e in json.load(open(sys.argv[1]))
          if e["formatted"]["key"]["family"] == 4) / 1e9)' "$TMPD/before.json")
echo "    agent stopped, program $PROG still attached; buckets: $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$TMPD/before.json"), at most $MAX_TOKENS tokens"

echo "pins of another layout:"
OTHER=$((LAYOUT + 1)) # a layout this build is not (a fixed number became this build's once)
set_layout "$OTHER"
refused "pins recording layout $OTHER" "$TMPD/agent.yaml" \
	"pins under '$PIN' are of layout $OTHER" "uses layout $LAYOUT" "rm $PIN/ll_\\*"
same_buckets "  ... buckets untouched"
[ "$(ll_xdp_prog $LL_G_IF)" = "$PROG" ] && ok "  ... program $PROG untouched" || bad "  ... program replaced"
in_g "$LL" top -j --pin-dir "$PIN" >"$TMPD/out" 2>&1
[ $? -eq 1 ] && grep -q "\"error\":\"pins under .* are of layout $OTHER" "$TMPD/out" &&
	ok "top -j refuses to read them: $(cut -c1-100 "$TMPD/out")" || bad "top -j on them: $(head -2 "$TMPD/out")"
set_layout "$LAYOUT"

STATE_ID=$(bpftool -j map show pinned "$PIN/ll_state" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
rm "$PIN/ll_state"
refused "pins without ll_state" "$TMPD/agent.yaml" \
	"pins under '$PIN' are incomplete \\(layout $LAYOUT" "ll_state missing" "will not create it fresh"
[ ! -e "$PIN/ll_state" ] && ok "  ... did not create ll_state" || bad "  ... created a fresh ll_state"
same_buckets "  ... buckets untouched"
bpftool map pin id "$STATE_ID" "$PIN/ll_state" || ll_fail "cannot pin ll_state back"

# ll_fence of another shape (an older build's, say); the real one kept aside.
bpftool map pin pinned "$PIN/ll_fence" "$TMPD/bpffs/fence-kept" 2>/dev/null ||
	bpftool map pin id "$(bpftool -j map show pinned "$PIN/ll_fence" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')" "$TMPD/bpffs/fence-kept" ||
	ll_fail "cannot keep ll_fence"
rm "$PIN/ll_fence"
bpftool map create "$PIN/ll_fence" type array key 4 value 8 entries 1 name ll_fence ||
	ll_fail "cannot create a fake ll_fence"
refused "an ll_fence of another shape, layout $LAYOUT recorded" "$TMPD/agent.yaml" \
	"pins under '$PIN' record layout $LAYOUT, this build.s \\(leaseline [^)]*\\), but do not match it" \
	"ll_fence has 4-byte keys and 8-byte values, this build's 4 and [0-9]+"
same_buckets "  ... buckets untouched"
# The same pins as an older build left them: no layout recorded at all.
bpftool map pin pinned "$PIN/ll_layout" "$TMPD/bpffs/layout-kept" || ll_fail "cannot keep ll_layout"
rm "$PIN/ll_layout"
refused "an ll_fence of another shape, no layout recorded" "$TMPD/agent.yaml" \
	"pins under '$PIN' have no layout recorded .* and are not of this build's layout $LAYOUT" \
	"ll_fence has 4-byte keys"
same_buckets "  ... buckets untouched"
[ ! -e "$PIN/ll_layout" ] && ok "  ... did not record a layout" || bad "  ... recorded a layout"
in_g "$LL" status --pin-dir "$PIN" >"$TMPD/out" 2>&1
[ $? -eq 1 ] && grep -q "are not of this build's layout $LAYOUT" "$TMPD/out" &&
	ok "status refuses to read them too" || bad "status on them: $(head -2 "$TMPD/out")"
mv "$TMPD/bpffs/layout-kept" "$PIN/ll_layout" || ll_fail "cannot put ll_layout back"
rm "$PIN/ll_fence" && mv "$TMPD/bpffs/fence-kept" "$PIN/ll_fence" || ll_fail "cannot put ll_fence back"

echo "a new max-keys:"
refused "max-keys 8192 while the program uses the buckets" "$TMPD/agent-8k.yaml" \
	"ll_buckets has $B4K entries and this agent's max-keys/max-flow-keys ask for $B8K" \
	"XDP program id $PROG, attached to $LL_G_IF" "leaseline detach IFACE"
same_buckets "  ... buckets untouched"
no_old_pins
[ "$(bpftool -j map show pinned "$PIN/ll_buckets" | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_entries"])')" = "$B4K" ] &&
	ok "  ... ll_buckets still $B4K entries" || bad "  ... ll_buckets resized"
in_g "$LL" detach "$LL_G_IF" >/dev/null || bad "detach failed"
ll_agent_start "$TMPD/agent-8k.yaml" "$TMPD/agent-8k.log"
grep -q "ll_buckets: [0-9]* buckets moved into a map of $B8K entries" "$TMPD/agent-8k.log" &&
	ok "detached, the agent moves the buckets: $(grep -o 'll_buckets: [0-9]* buckets moved.*' "$TMPD/agent-8k.log")" ||
	bad "no move logged: $(tail -5 "$TMPD/agent-8k.log" | tr '\n' ' ')"
for m in ll_buckets ll_flow_buckets; do
	[ "$(bpftool -j map show pinned "$PIN/$m" | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_entries"])')" = "$B8K" ] &&
		ok "  ... $m has $B8K entries" || bad "  ... $m not resized"
done
same_buckets "  ... every bucket as it was"
no_old_pins
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"

echo "pins that record no layout:"
rm "$PIN/ll_layout"
ll_agent_start "$TMPD/agent-8k.yaml" "$TMPD/agent-adopt.log"
grep -q "pins under '$PIN' record no layout; every map is this build's, type for type: adopted as layout $LAYOUT" "$TMPD/agent-adopt.log" &&
	ok "adopted, said so" || bad "no adoption logged: $(tail -3 "$TMPD/agent-adopt.log" | tr '\n' ' ')"
[ "$(layout_field version)" = "$LAYOUT" ] && ok "  ... ll_layout: version $LAYOUT again" || bad "  ... ll_layout version '$(layout_field version)'"
same_buckets "  ... every bucket as it was"

echo "traffic after all that: no fresh burst"
ll_recv_start "$TMPD/recv.json" 10
ll_send "$TMPD/sent2.json" 1 "$LL_SRC_FIRST-$LL_SRC_LAST:200" || bad "the sender failed"
ll_recv_stop
python3 - "$TMPD/recv.json" "$TMPD/sent2.json" "$MAX_TOKENS" "$RATE" "$BURST" "$T0" "$(ll_now)" <<'PY' >"$TMPD/py" 2>&1 &&
import json, sys
recv = json.load(open(sys.argv[1]))["sources"]
sent = json.load(open(sys.argv[2]))["sources"]
tokens, rate, burst, t0, t1 = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), \
    float(sys.argv[6]), float(sys.argv[7])
bound = tokens + rate * (t1 - t0) + 2
got = [recv.get(s, {"count": 0})["count"] for s in sent]
print("per client %s admitted of %d sent; bound left + rate*t = %.0f, a fresh bucket would give %d"
      % (got, min(s["sent"] for s in sent.values()), bound, burst))
assert max(got) <= bound and bound < burst, "more than the buckets held"
PY
	ok "$(cat "$TMPD/py")" || bad "$(tail -2 "$TMPD/py" | tr '\n' ' ')"

echo "$CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ] || ll_fail "$FAILS of $CHECKS pin checks failed"
echo "ok: one agent per pin dir; other layouts refused, buckets kept; max-keys moves them"
