#!/bin/bash
# SPDX-License-Identifier: MIT
# Who owns an interface's XDP attachment (security.md, "attach ownership";
# reference §3 "Pin paths"), with real agents on a veth:
#   link      a direct-mode agent attaches through a bpf_link pinned at
#             PIN/link_IFINDEX
#   owner     a second agent with another pin-dir on the same interface is
#             refused (exit 2) naming the owner (link id, pin dir), and the
#             first one's program and link stay
#   restart   the link stays while no agent runs; the next agent on the same
#             pin-dir updates that link (same link id, new program id)
#   force     --force takes a foreign link over and says so
#   detach    `leaseline detach --pin-dir` leaves no link and no link pin
#   modes     native -> generic: old out, new in, the gap logged
#   audit     a pin-dir that is a symlink, or group/other-writable, or under a
#             directory others can write (not sticky), is refused (exit 2)
#             naming it, before anything is loaded; a pin in it that is a
#             symlink is refused, not followed
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v bpftool >/dev/null || ll_skip "needs 'bpftool'"

# xdp_link: id of the XDP bpf_link that runs LL_G_IF's program, or "" (bpftool
# 7.1 shows no ifindex for an XDP link: the program, attached once, says which).
xdp_link() {
	bpftool -j link show 2>/dev/null | python3 -c '
import json, sys
for l in json.load(sys.stdin):
    if l.get("type") == "xdp" and str(l.get("prog_id")) == sys.argv[1]:
        print(l["id"])
        break' "$(ll_xdp_prog $LL_G_IF)"
}
# pinned_link PATH: id of the link pinned at PATH, or "".
pinned_link() {
	bpftool -j link show pinned "$1" 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' 2>/dev/null
}
stop_agent() {
	kill -TERM "$AGENT_PID"
	ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
}

ll_topo
ll_bpffs
IFX=$(ip -n "$LL_NS_G" -o link show "$LL_G_IF" | cut -d: -f1)
[ -n "$IFX" ] || ll_fail "no ifindex for $LL_G_IF"
ll_policy "$TMPD/policy.yaml" 1 100 100
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
PIN2=$TMPD/bpffs/other
sed "s|^pin-dir: .*|pin-dir: $PIN2|" "$TMPD/agent.yaml" >"$TMPD/agent2.yaml"

echo "attached through a pinned bpf_link:"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent1.log"
A_PID=$AGENT_PID
PROG1=$(ll_xdp_prog $LL_G_IF)
LINK1=$(xdp_link)
[ -n "$PROG1" ] && [ -n "$LINK1" ] && ok "program $PROG1 on $LL_G_IF through bpf_link $LINK1" ||
	bad "no XDP bpf_link on $LL_G_IF (program '$PROG1')"
[ -n "$LINK1" ] && [ "$(pinned_link "$PIN/link_$IFX")" = "$LINK1" ] &&
	ok "  ... pinned at $PIN/link_$IFX" || bad "  ... $PIN/link_$IFX is not link '$LINK1': $(ls "$PIN" | tr '\n' ' ')"

echo "a second agent with another pin-dir:"
ll_expect_rc 2 "refused" in_g timeout 10 "$LL" agent -c "$TMPD/agent2.yaml"
ll_out_has "  ... names the owner's link" "bpf_link id ${LINK1:-NONE}"
ll_out_has "  ... names the owner's pin-dir" "$PIN"
[ "$(ll_xdp_prog $LL_G_IF)" = "$PROG1" ] && ok "  ... the first one's program $PROG1 still attached" ||
	bad "  ... program $PROG1 replaced by '$(ll_xdp_prog $LL_G_IF)'"
[ -n "$LINK1" ] && [ "$(xdp_link)" = "$LINK1" ] && ok "  ... through its link $LINK1" ||
	bad "  ... link now '$(xdp_link)'"
kill -0 "$A_PID" 2>/dev/null && ok "  ... the first agent still runs" || bad "  ... the first agent exited"
[ -z "$(ls "$PIN2" 2>/dev/null | grep '^link')" ] && ok "  ... pinned no link" ||
	bad "  ... pinned: $(ls "$PIN2" | tr '\n' ' ')"
AGENT_PID=$A_PID

echo "restart with the same pin-dir:"
stop_agent
[ "$(ll_xdp_prog $LL_G_IF)" = "$PROG1" ] && [ -n "$LINK1" ] && [ "$(xdp_link)" = "$LINK1" ] &&
	ok "no agent running: program $PROG1 stays attached through link $LINK1" ||
	bad "no agent running: program '$(ll_xdp_prog $LL_G_IF)', link '$(xdp_link)'"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent1b.log"
PROG2=$(ll_xdp_prog $LL_G_IF)
[ -n "$PROG2" ] && [ "$PROG2" != "$PROG1" ] && ok "new program $PROG2 (was $PROG1)" ||
	bad "program '$PROG2' after the restart (was $PROG1)"
[ -n "$LINK1" ] && [ "$(xdp_link)" = "$LINK1" ] && ok "  ... the same link $LINK1, updated" ||
	bad "  ... link '$(xdp_link)', was '$LINK1'"
grep -q "updated bpf_link $LINK1" "$TMPD/agent1b.log" && ok "  ... logged the update" ||
	bad "  ... no update logged: $(grep attached "$TMPD/agent1b.log" | tail -1)"
A_PID=$AGENT_PID

# The first agent still runs: it notices that its program is gone, says
# so, and exits 2 (nothing left to enforce), within a few seconds.
echo "--force takes a foreign link over:"
ll_agent_start "$TMPD/agent2.yaml" "$TMPD/agent2.log" --force
B_PID=$AGENT_PID
AGENT_PID=$A_PID
if ll_agent_wait_exit 50; then
	[ "$LL_AGENT_RC" = 2 ] && ok "  ... the agent it took from exits 2" ||
		bad "  ... the agent it took from exited $LL_AGENT_RC"
else
	bad "  ... the agent it took from still runs, 5 s after"
	kill -TERM "$A_PID"
	AGENT_PID=$A_PID ll_agent_wait_exit 50
fi
grep -q "interface '$LL_G_IF' (ifindex $IFX): this agent's program is no longer attached" "$TMPD/agent1b.log" &&
	ok "  ... and said its program is no longer attached there" ||
	bad "  ... said nothing: $(tail -2 "$TMPD/agent1b.log" | tr '\n' ' ')"
AGENT_PID=$B_PID
PROG3=$(ll_xdp_prog $LL_G_IF)
LINK3=$(xdp_link)
[ -n "$LINK3" ] && [ "$LINK3" != "$LINK1" ] && [ "$PROG3" != "$PROG2" ] &&
	ok "program $PROG3 through link $LINK3 (was $PROG2, link $LINK1)" ||
	bad "after --force: program '$PROG3', link '$LINK3'"
[ -n "$LINK3" ] && [ "$(pinned_link "$PIN2/link_$IFX")" = "$LINK3" ] && ok "  ... pinned at $PIN2/link_$IFX" ||
	bad "  ... $PIN2/link_$IFX: '$(pinned_link "$PIN2/link_$IFX")'"
grep -q "took over '$LL_G_IF' from bpf_link id $LINK1, pinned under '$PIN'" "$TMPD/agent2.log" && ok "  ... logged the takeover" ||
	bad "  ... no takeover logged: $(grep -iE 'took|attached' "$TMPD/agent2.log" | tail -2 | tr '\n' ' ')"
stop_agent
# The first pin-dir's agent now finds the interface taken: refused.
ll_expect_rc 2 "the first pin-dir's agent, its link taken over, is refused" \
	in_g timeout 10 "$LL" agent -c "$TMPD/agent.yaml"
ll_out_has "  ... names the new owner" "bpf_link id ${LINK3:-NONE}.*$PIN2"

# The link taken over is detached, not freed: its pin under PIN holds it, and no
# interface, until that pin-dir's agent starts again (attach_links_sweep).
echo "detach:"
ll_expect_rc 0 "leaseline detach --pin-dir $PIN2" in_g "$LL" detach --pin-dir "$PIN2" "$LL_G_IF"
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "  ... no program on $LL_G_IF" || bad "  ... program $(ll_xdp_prog $LL_G_IF) left"
[ -z "$(bpftool -j link show 2>/dev/null | python3 -c '
import json, sys
print(" ".join(str(l["id"]) for l in json.load(sys.stdin) if l.get("type") == "xdp" and l.get("prog_id") == int(sys.argv[1])))' "${PROG3:-0}")" ] &&
	ok "  ... its link ($LINK3) is gone" || bad "  ... an XDP link is left: $(bpftool link show | grep -A1 xdp | tr '\n' ' ')"
[ ! -e "$PIN2/link_$IFX" ] && ok "  ... no link pin left" || bad "  ... $PIN2/link_$IFX left"

# native -> generic: the kernel holds one mode at a time, so the old link
# goes before the new one comes; the agent says for how long nothing ran.
echo "native, then generic:"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent-native.log"
stop_agent
sed "s|mode: native|mode: generic|" "$TMPD/agent.yaml" >"$TMPD/agent-generic.yaml"
ll_agent_start "$TMPD/agent-generic.yaml" "$TMPD/agent-generic.log"
ip -n "$LL_NS_G" -d link show "$LL_G_IF" | grep -q "xdpgeneric" && ok "  ... generic on $LL_G_IF" ||
	bad "  ... not generic: $(ip -n "$LL_NS_G" -d link show "$LL_G_IF" | grep -o 'xdp[a-z]*' | head -1)"
GAP=$(sed -n "s/.*'$LL_G_IF' ran no XDP program for \([0-9]*\) us.*/\1/p" "$TMPD/agent-generic.log")
[ -n "$GAP" ] && ok "  ... logged the moment with no program: $GAP us" ||
	bad "  ... no gap logged: $(grep -i attach "$TMPD/agent-generic.log" | tail -2 | tr '\n' ' ')"
stop_agent
ll_expect_rc 0 "  ... detached" in_g "$LL" detach --pin-dir "$PIN" "$LL_G_IF"

echo "pin-dir audit:"
mkdir -p "$TMPD/bpffs/real" && ln -s "$TMPD/bpffs/real" "$TMPD/bpffs/sym"
sed "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/sym|" "$TMPD/agent.yaml" >"$TMPD/agent-sym.yaml"
ll_expect_rc 2 "a pin-dir that is a symlink" in_g timeout 10 "$LL" agent -c "$TMPD/agent-sym.yaml"
ll_out_has "  ... names it" "pin directory '$TMPD/bpffs/sym' is a symlink"
[ -z "$(ls -A "$TMPD/bpffs/real")" ] && ok "  ... pinned nothing through it" || bad "  ... pinned: $(ls "$TMPD/bpffs/real" | tr '\n' ' ')"
mkdir -p "$TMPD/bpffs/open" && chmod 0777 "$TMPD/bpffs/open"
sed "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/open|" "$TMPD/agent.yaml" >"$TMPD/agent-open.yaml"
ll_expect_rc 2 "a pin-dir of mode 0777" in_g timeout 10 "$LL" agent -c "$TMPD/agent-open.yaml"
ll_out_has "  ... names it" "pin directory '$TMPD/bpffs/open' is mode 777"
[ -z "$(ls -A "$TMPD/bpffs/open")" ] && ok "  ... pinned nothing there" || bad "  ... pinned: $(ls "$TMPD/bpffs/open" | tr '\n' ' ')"
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "  ... attached nothing" || bad "  ... attached $(ll_xdp_prog $LL_G_IF)"
# A pin-dir (0700, root's) under a directory others can write (0777, not
# sticky): they could rename it away and put their own there.
mkdir -p "$TMPD/bpffs/wide/pins" && chmod 0777 "$TMPD/bpffs/wide" && chmod 0700 "$TMPD/bpffs/wide/pins"
sed "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/wide/pins|" "$TMPD/agent.yaml" >"$TMPD/agent-wide.yaml"
ll_expect_rc 2 "a pin-dir under a 0777 directory" in_g timeout 10 "$LL" agent -c "$TMPD/agent-wide.yaml"
ll_out_has "  ... names the parent" "'$TMPD/bpffs/wide' above it is mode 777"
[ -z "$(ls -A "$TMPD/bpffs/wide/pins")" ] && ok "  ... pinned nothing there" || bad "  ... pinned: $(ls "$TMPD/bpffs/wide/pins" | tr '\n' ' ')"
# A pin inside the directory that is a symlink (to a real ll_fence) is not followed.
mv "$PIN2/ll_fence" "$TMPD/bpffs/fence-real" && ln -s "$TMPD/bpffs/fence-real" "$PIN2/ll_fence" ||
	ll_fail "cannot make a symlinked ll_fence"
ll_expect_rc 2 "a pin that is a symlink" in_g timeout 10 "$LL" agent -c "$TMPD/agent2.yaml"
ll_out_has "  ... names it" "pins under '$PIN2': ll_fence is a symlink"
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "  ... attached nothing" || bad "  ... attached $(ll_xdp_prog $LL_G_IF)"

ll_checks_done "attach ownership"
echo "ok: one owner per interface (a pinned bpf_link); restart updates it; --force takes over; pin-dir audited"
