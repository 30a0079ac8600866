#!/bin/bash
# SPDX-License-Identifier: MIT
# The pin directory belongs to one agent (reference §3), with real agents and
# real pins on a veth:
#   lock      a second agent on the same pin-dir refuses, naming the first one's
#             pid and start time, and changes nothing (policy, program); so does
#             reset-fence while the agent runs
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

RATE=1
BURST=100
NSRC=4
FAILS=0
CHECKS=0
ok() {
	CHECKS=$((CHECKS + 1))
	printf '  ok    %s\n' "$*"
}
bad() {
	CHECKS=$((CHECKS + 1))
	FAILS=$((FAILS + 1))
	printf '  FAIL  %s\n' "$*"
}
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
ll_topo
ll_sources "$NSRC"
ll_bpffs
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_policy "$TMPD/policy2.yaml" 2 1000 1000
sed 's|^policy: .*|policy: policy2.yaml|' "$TMPD/agent.yaml" >"$TMPD/agent-second.yaml"

ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent1.log"
PROG=$(ll_xdp_prog $LL_G_IF)
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
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
echo "$CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ] || ll_fail "$FAILS of $CHECKS pin checks failed"
echo "ok: one agent per pin dir"
