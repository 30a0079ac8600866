#!/bin/bash
# SPDX-License-Identifier: MIT
# The operator's surface (reference §2-§3) on a real veth:
#   command line -V/--version/version; help on an unknown command fails; a
#                missing option argument is one message; a missing file
#                (top-level or the policy an agent file names) exits 2
#   -j           every command with -j says a failure as one JSON object on
#                stdout ({"error", "exit"[, "file", "line", "col"]}), nothing on stderr
#   check        good files exit 0; bad files exit 2 with FILE:LINE:COL: message
#   agent        checks capabilities, interfaces, what is attached and its TLS files
#                before it changes anything (exit 2, no pin); refuses another tool's
#                XDP program without --force, replaces it with;
#                default exit leaves the program attached; --detach-on-exit removes it;
#                mounts bpffs at a pin-dir that is not on one
#   detach       removes ours, refuses a foreign program without --force
#   status       text and -j (valid JSON), bpftool shows named bucket fields
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

PASS_OBJ=$LL_BUILD/pass.bpf.o
# expect_json_error WANT DESCRIPTION PYTHON_CHECK CMD...: CMD exits WANT with
# exactly one JSON object on stdout, {"error": ..., "exit": WANT, ...}, and
# nothing on stderr; PYTHON_CHECK (an expression on d, or "True") holds.
expect_json_error() {
	local want=$1 what=$2 check=$3 rc
	shift 3
	"$@" >"$TMPD/out" 2>"$TMPD/err"
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		bad "$what: exit $rc, expected $want: $(head -c 300 "$TMPD/out" "$TMPD/err" | tr '\n' ' ')"
	elif [ -s "$TMPD/err" ]; then
		bad "$what: stderr is not empty: $(head -3 "$TMPD/err" | tr '\n' ' ')"
	elif python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
d = json.loads(lines[0])
assert isinstance(d.get("error"), str) and d["error"], d
assert d.get("exit") == int(sys.argv[2]), d
assert eval(sys.argv[3]), d
' "$TMPD/out" "$want" "$check" 2>"$TMPD/py"; then
		ok "$what (exit $rc): $(head -c 160 "$TMPD/out")"
	else
		bad "$what: $(tail -1 "$TMPD/py"): $(head -c 300 "$TMPD/out")"
	fi
	return 0
}

echo "command line:"
ll_expect_rc 0 "-V" "$LL" -V
ll_out_has "-V prints the version" "^leaseline [0-9]+\.[0-9]+\.[0-9]+"
V=$(cat "$TMPD/out")
ll_expect_rc 0 "--version" "$LL" --version
[ "$(cat "$TMPD/out")" = "$V" ] && ok "--version says the same ($V)" || bad "--version: $(cat "$TMPD/out") vs $V"
ll_expect_rc 0 "version" "$LL" version
[ "$(cat "$TMPD/out")" = "$V" ] && ok "version says the same" || bad "version: $(cat "$TMPD/out") vs $V"
ll_expect_rc 0 "help" "$LL" help
# Every line of the command list is indented, continuations too (issue 28).
[ -z "$(sed -n '/^commands:/,/^$/p' "$TMPD/out" | sed '1d;$d' | grep -v '^  ')" ] &&
	ok "  ... every line of its command list indented" ||
	bad "  ... unindented: $(sed -n '/^commands:/,/^$/p' "$TMPD/out" | grep -v '^  \|^commands:\|^$' | head -2)"
ll_expect_rc 2 "help on an unknown command" "$LL" help bogus
ll_out_has "  ... names it" "unknown command 'bogus'"
ll_expect_rc 2 "help on a mistyped command" "$LL" help stauts
ll_out_has "  ... suggests the command meant" "did you mean 'status'"
ll_expect_rc 0 "help on a command" "$LL" help top
ll_expect_rc 2 "an unknown command" "$LL" chekc
ll_out_has "  ... suggests the command meant" "unknown command 'chekc'; did you mean 'check'"
for a in "check -c" "agent -c" "coord --config" "status --pin-dir"; do
	# shellcheck disable=SC2086
	ll_expect_rc 2 "'$a' without its argument" "$LL" $a
	[ "$(wc -l <"$TMPD/out")" -eq 1 ] && ok "  ... one message: $(cat "$TMPD/out")" ||
		bad "  ... $(wc -l <"$TMPD/out") lines: $(tr '\n' '|' <"$TMPD/out")"
	ll_out_has "  ... naming the option" "option '-(c|-config|-pin-dir)' needs an argument"
done
ll_expect_rc 2 "an unknown option" "$LL" status --bogus
[ "$(wc -l <"$TMPD/out")" -eq 1 ] && ok "  ... one message: $(cat "$TMPD/out")" ||
	bad "  ... $(wc -l <"$TMPD/out") lines: $(tr '\n' '|' <"$TMPD/out")"

ll_topo
ll_sources 4
ll_bpffs
POL=$TMPD/policy.yaml
ll_policy "$POL" 1 50 20
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml

echo "check:"
ll_expect_rc 0 "check accepts a good policy" "$LL" check -c "$POL"
ll_expect_rc 0 "check accepts a good agent file" "$LL" check -c "$TMPD/agent.yaml"
printf 'version: 1\nlimits: [\n  {name: a, rate: 5\n' >"$TMPD/syntax.yaml"
ll_expect_rc 2 "check refuses a YAML syntax error" "$LL" check -c "$TMPD/syntax.yaml"
ll_out_has "syntax error reported as FILE:LINE:COL" "^$TMPD/syntax\.yaml:[0-9]+:[0-9]+: "
sed 's/    burst: 20/    burst: 20\n    brust: 5/' "$POL" >"$TMPD/unknown.yaml"
ll_expect_rc 2 "check refuses an unknown key" "$LL" check -c "$TMPD/unknown.yaml"
L=$(grep -n brust "$TMPD/unknown.yaml" | cut -d: -f1)
ll_out_has "unknown key reported at its line and column ($L:5)" "^$TMPD/unknown\.yaml:$L:5: .*'brust'"
# Global limits: a lone policy with them is a coordinator's (a note, exit 0),
# per-key ones included; what a coordinator would refuse, check refuses in the
# same words.
printf 'version: 1\nlimits:\n  - {name: g, key: none, scope: global, rate: 100, burst: 10}\nrules:\n  - {name: all, limits: [g]}\n' >"$TMPD/global.yaml"
ll_expect_rc 0 "check accepts a lone policy with a global limit" "$LL" check -c "$TMPD/global.yaml"
ll_out_has "with a note that it is for a coordinator" "^note: 1 global limit: this policy is for a coordinator"
# What check cannot see, it says (issue 28): a limit no rule names, and a
# coordinated agent's policy (the coordinator's, not version 0 of nothing).
printf 'version: 1\nlimits:\n  - {name: a, rate: 5, burst: 5}\n  - {name: b, rate: 5, burst: 5}\nrules:\n  - {name: r, limits: [a]}\n' >"$TMPD/unused.yaml"
ll_expect_rc 0 "check accepts a policy with a limit no rule names" "$LL" check -c "$TMPD/unused.yaml"
ll_out_has "  ... with a note naming it" "^note: limit 'b' is named by no rule: it limits nothing"
sed 's|^policy: .*|coordinator: {address: 127.0.0.1:7450}|' "$TMPD/agent.yaml" >"$TMPD/agent-coord.yaml"
ll_expect_rc 0 "check accepts a coordinated agent file" "$LL" check -c "$TMPD/agent-coord.yaml"
ll_out_has "  ... saying its policy comes from the coordinator" "ok \(agent; its policy comes from the coordinator at 127.0.0.1:7450\)"
sed 's/key: none/key: src-ip/' "$TMPD/global.yaml" >"$TMPD/perkey.yaml"
printf 'policy: perkey.yaml\nstate-dir: %s/state\n' "$TMPD" >"$TMPD/coord-perkey.yaml"
ll_expect_rc 0 "check accepts a per-key global limit in a lone policy" "$LL" check -c "$TMPD/perkey.yaml"
ll_expect_rc 0 "check accepts it in a coordinator file" "$LL" check -c "$TMPD/coord-perkey.yaml"
sed 's/burst: 10}/burst: 10, on-loss: fallback, fallback: {rate: 20, burst: 2}}/' "$TMPD/global.yaml" >"$TMPD/reserve.yaml"
printf 'policy: reserve.yaml\nstate-dir: %s/state\ngateways: 8\n' "$TMPD" >"$TMPD/coord-reserve.yaml"
RESERVE_MSG="reserve\.yaml:3:5: limit 'g': fallback shares of 8 gateways \(160/s, 16\) leave nothing"
ll_expect_rc 2 "check refuses fallback shares that leave nothing to lease" "$LL" check -c "$TMPD/coord-reserve.yaml"
ll_out_has "  ... naming the limit" "$RESERVE_MSG"
ll_expect_rc 2 "the coordinator refuses them at load" "$LL" coord -c "$TMPD/coord-reserve.yaml"
ll_out_has "  ... in the same words" "$RESERVE_MSG"
sed 's/    rate: 50/    rate: fast/' "$POL" >"$TMPD/value.yaml"
ll_expect_rc 2 "check refuses a bad rate" "$LL" check -c "$TMPD/value.yaml"
L=$(grep -n 'rate: fast' "$TMPD/value.yaml" | cut -d: -f1)
ll_out_has "bad value reported at its line and column ($L:11)" "^$TMPD/value\.yaml:$L:11: .*rate"
# The matches of issue #13: good forms check, each bad value exits 2 at its place.
m_pol() { printf 'version: 1\nlimits:\n  - {name: a, rate: 10, burst: 20}\nrules:\n  - name: r\n    match: %s\n    limits: [a]\n' "$1" >"$2"; }
m_pol "{proto: tcp, dst-port: [80, 443, 8000-8100], tcp-flags: syn}" "$TMPD/m-ok1.yaml"
ll_expect_rc 0 "check accepts tcp-flags: syn with a dst-port list" "$LL" check -c "$TMPD/m-ok1.yaml"
m_pol "{proto: icmpv6, icmp-type: [echo-request, 1-4]}" "$TMPD/m-ok2.yaml"
ll_expect_rc 0 "check accepts an icmp-type list" "$LL" check -c "$TMPD/m-ok2.yaml"
m_pol "{proto: tcp, tcp-flags: sin}" "$TMPD/m-flag.yaml"
ll_expect_rc 2 "check refuses a misspelt TCP flag" "$LL" check -c "$TMPD/m-flag.yaml"
ll_out_has "  ... at 6:36, suggesting syn" "m-flag\.yaml:6:36: .*unknown TCP flag 'sin'; did you mean 'syn'"
m_pol "{proto: icmp, icmp-type: neighbor-solicitation}" "$TMPD/m-icmp.yaml"
ll_expect_rc 2 "check refuses an ICMPv6 type name under icmp" "$LL" check -c "$TMPD/m-icmp.yaml"
ll_out_has "  ... at 6:37" "m-icmp\.yaml:6:37: .*is an ICMPv6 type, but proto is icmp"
m_pol "{proto: udp, dst-port: [1, 2, 3, 4, 5, 6, 7, 8, 9]}" "$TMPD/m-ports.yaml"
ll_expect_rc 2 "check refuses a ninth port range" "$LL" check -c "$TMPD/m-ports.yaml"
ll_out_has "  ... at the ninth, naming the bound" "m-ports\.yaml:6:60: .*LL_MAX_DPORT_RANGES"
# A missing file is a configuration error (reference §2: exit 2), for every
# command that reads one; the message must name it.
ll_expect_rc 2 "agent on a missing file" "$LL" agent -c "$TMPD/nope.yaml"
ll_expect_rc 2 "coord on a missing file" "$LL" coord -c "$TMPD/nope.yaml"
ll_expect_rc 2 "check on a missing file" "$LL" check -c "$TMPD/nope.yaml"
ll_out_has "the message names the missing file" "nope\.yaml"
sed 's|^policy: .*|policy: no-policy.yaml|' "$TMPD/agent.yaml" >"$TMPD/agent-nopol.yaml"
ll_expect_rc 2 "check on an agent file whose policy is missing" "$LL" check -c "$TMPD/agent-nopol.yaml"
ll_out_has "  ... at the policy: line, naming the policy" "agent-nopol\.yaml:[0-9]+:[0-9]+: cannot open '.*no-policy\.yaml'"
ll_expect_rc 2 "agent whose policy is missing" in_g "$LL" agent -c "$TMPD/agent-nopol.yaml"
ll_out_has "  ... naming the policy" "no-policy\.yaml"
printf 'policy: no-policy.yaml\nstate-dir: %s/state\n' "$TMPD" >"$TMPD/coord-nopol.yaml"
ll_expect_rc 2 "coord whose policy is missing" "$LL" coord -c "$TMPD/coord-nopol.yaml"
ll_out_has "  ... naming the policy" "no-policy\.yaml"

echo "-j errors:"
L=$(grep -n 'rate: fast' "$TMPD/value.yaml" | cut -d: -f1)
expect_json_error 2 "check -j on a bad value" \
	"d['file'] == '$TMPD/value.yaml' and d['line'] == $L and d['col'] == 11 and 'rate' in d['error']" \
	"$LL" check -j -c "$TMPD/value.yaml"
expect_json_error 2 "check -j on a missing file" "d['file'] == '$TMPD/nope.yaml' and 'line' not in d" \
	"$LL" check -c "$TMPD/nope.yaml" --json
expect_json_error 2 "check -j on a missing policy" \
	"d['file'] == '$TMPD/agent-nopol.yaml' and d['line'] > 0 and 'no-policy.yaml' in d['error']" \
	"$LL" check -j "$TMPD/agent-nopol.yaml"
expect_json_error 2 "check -j with an unknown option" "'--bogus' in d['error']" "$LL" check --bogus -j "$POL"
expect_json_error 2 "check -j without -c's argument" "'needs an argument' in d['error']" "$LL" check -j -c
"$LL" check -j -c "$POL" >"$TMPD/out" 2>&1 &&
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["kind"] == "policy" and d["limits"] == 1, d' "$TMPD/out" &&
	ok "check -j on a good file: $(cat "$TMPD/out")" || bad "check -j on a good file: $(cat "$TMPD/out")"
expect_json_error 1 "status -j without pins" "'ll_state' in d['error']" "$LL" status -j --pin-dir "$TMPD/bpffs"
expect_json_error 2 "status -j with an unknown option" "'-x' in d['error']" "$LL" status -x -j
expect_json_error 1 "top -j without pins" "'ll_state' in d['error']" "$LL" top --pin-dir "$TMPD/bpffs" -j
expect_json_error 2 "top -j with a bad -n" "'-n' in d['error']" "$LL" top -j -n 0
ll_expect_rc 2 "agent with a bad config exits 2" in_g "$LL" agent -c "$TMPD/value.yaml"

echo "metrics port taken:"
# A listener of ours holds the port in the gateway namespace; the agent must
# say so and stop before it pins, applies or attaches anything.
in_g python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 9475))
s.listen()
open(sys.argv[1], "w").close()
time.sleep(60)
' "$TMPD/busy.ready" &
BUSY_PID=$!
LL_PIDS+=("$BUSY_PID")
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	[ -e "$TMPD/busy.ready" ] && break
	sleep "$LL_POLL_S"
done
[ -e "$TMPD/busy.ready" ] || ll_fail "the port holder did not bind"
sed -e "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/busy|" "$TMPD/agent.yaml" >"$TMPD/agent-busy.yaml"
echo "metrics: 127.0.0.1:9475" >>"$TMPD/agent-busy.yaml"
ll_expect_rc 1 "agent whose metrics port is taken" in_g timeout 20 "$LL" agent -c "$TMPD/agent-busy.yaml"
ll_out_has "  ... says so" "cannot listen for metrics on '127\.0\.0\.1:9475': Address already in use"
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "  ... attached nothing" || bad "  ... attached to $LL_G_IF"
[ -z "$(ls -A "$TMPD/bpffs/busy" 2>/dev/null)" ] && ok "  ... pinned nothing" ||
	bad "  ... pinned: $(ls "$TMPD/bpffs/busy" | tr '\n' ' ')"
ll_stop_pid "$BUSY_PID"

echo "checked before anything changes (exit 2, nothing pinned):"
sed -e "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/pre|" -e "s|name: $LL_G_IF|name: llnosuch0|" \
	"$TMPD/agent.yaml" >"$TMPD/agent-noif.yaml"
ll_expect_rc 2 "agent on an interface that does not exist" in_g "$LL" agent -c "$TMPD/agent-noif.yaml"
ll_out_has "  ... names it" "interface 'llnosuch0': No such device; nothing loaded, pinned or attached"
[ ! -e "$TMPD/bpffs/pre" ] && ok "  ... made no pin directory" || bad "  ... made $TMPD/bpffs/pre"
cat >"$TMPD/agent-tls.yaml" <<EOF
node: gw-1
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $TMPD/bpffs/pre
coordinator: {address: 127.0.0.1:7450}
tls: {cert: $TMPD/none.crt, key: $TMPD/none.key, ca: $TMPD/none-ca.crt}
EOF
ll_expect_rc 2 "check: TLS files that do not exist" "$LL" check -c "$TMPD/agent-tls.yaml"
ll_out_has "  ... names the file" "agent-tls.yaml: tls: '$TMPD/none.crt'"
ll_expect_rc 2 "agent with TLS files that do not exist" in_g "$LL" agent -c "$TMPD/agent-tls.yaml"
ll_out_has "  ... says why" "tls: '$TMPD/none.crt'.*nothing loaded, pinned or attached"
[ ! -e "$TMPD/bpffs/pre" ] && ok "  ... made no pin directory" || bad "  ... made $TMPD/bpffs/pre"
# Not root: the configuration is readable, the capabilities are not there.
mkdir -p "$TMPD/pub" && chmod 755 "$TMPD" "$TMPD/pub"
sed -e "s|^pin-dir: .*|pin-dir: $TMPD/pub/pins|" "$TMPD/agent-noif.yaml" >"$TMPD/pub/agent.yaml"
sed -i "s|name: llnosuch0|name: $LL_G_IF|" "$TMPD/pub/agent.yaml"
POL=$(sed -n 's/^policy: //p' "$TMPD/pub/agent.yaml")
case $POL in /*) ;; *) POL=$TMPD/$POL ;; esac
cp "$POL" "$TMPD/pub/policy.yaml" && sed -i "s|^policy: .*|policy: $TMPD/pub/policy.yaml|" "$TMPD/pub/agent.yaml"
chmod 644 "$TMPD/pub/"*.yaml
ll_expect_rc 2 "agent run as nobody" in_g setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$LL" agent -c "$TMPD/pub/agent.yaml"
ll_out_has "  ... says what it needs" "the agent needs root, or CAP_BPF"
[ ! -e "$TMPD/pub/pins" ] && ok "  ... made no pin directory" || bad "  ... made $TMPD/pub/pins"

echo "foreign XDP program:"
if ! ip -n "$LL_NS_G" link set dev $LL_G_IF xdpdrv obj "$PASS_OBJ" sec xdp 2>"$TMPD/ip.err"; then
	cat "$TMPD/ip.err"
	ll_skip "iproute2 cannot load '$PASS_OBJ' (built without libbpf?)"
fi
FOREIGN=$(ll_xdp_prog $LL_G_IF)
[ -n "$FOREIGN" ] || ll_fail "no program on $LL_G_IF after 'ip link set ... xdp obj'"
sed -e "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/foreign|" "$TMPD/agent.yaml" >"$TMPD/agent-foreign.yaml"
ll_expect_rc 2 "agent refuses to replace a foreign program" \
	in_g "$LL" agent -c "$TMPD/agent-foreign.yaml"
ll_out_has "refusal names --force" "use --force"
[ "$(ll_xdp_prog $LL_G_IF)" = "$FOREIGN" ] && ok "foreign program left in place" ||
	bad "foreign program replaced without --force"
[ -z "$(ls -A "$TMPD/bpffs/foreign" 2>/dev/null)" ] && ok "  ... pinned nothing" ||
	bad "  ... pinned: $(ls "$TMPD/bpffs/foreign" | tr '\n' ' ')"
ll_expect_rc 1 "detach refuses a foreign program" in_g "$LL" detach $LL_G_IF
ll_expect_rc 0 "detach --force removes it" in_g "$LL" detach --force $LL_G_IF
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "$LL_G_IF has no XDP program" || bad "$LL_G_IF still has a program"
ll_expect_rc 1 "detach with nothing attached" in_g "$LL" detach $LL_G_IF
ll_out_has "says there is no program" "no XDP program"
ip -n "$LL_NS_G" link set dev $LL_G_IF xdpdrv obj "$PASS_OBJ" sec xdp
FOREIGN=$(ll_xdp_prog $LL_G_IF)

echo "agent --force, status, default exit:"
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent1.log" --force
P1=$(ll_xdp_prog $LL_G_IF)
[ -n "$P1" ] && [ "$P1" != "$FOREIGN" ] && ok "--force replaced program $FOREIGN by $P1" ||
	bad "--force did not replace the foreign program ($FOREIGN -> '$P1')"
ll_send "$TMPD/sent.json" 1 "$LL_SRC_FIRST-$LL_SRC_LAST:50" 2>/dev/null ||
	bad "the sender failed"
# Privileges: after load and attach the agent keeps CAP_BPF, CAP_PERFMON,
# CAP_SYS_ADMIN and CAP_NET_ADMIN (0xc000201000), in every set, bounding set
# included, and it still enforces (the sender's packets were limited above).
CAPS=$(awk '/^Cap(Eff|Prm|Bnd|Inh):/ {printf "%s=%s ", $1, $2}' /proc/"$AGENT_PID"/status)
case "$CAPS" in
"CapInh:=0000000000000000 CapPrm:=000000c000201000 CapEff:=000000c000201000 CapBnd:=000000c000201000 ")
	ok "the running agent keeps only CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_NET_ADMIN" ;;
*) bad "capabilities of the running agent: $CAPS" ;;
esac
ll_expect_rc 0 "status (text)" ll_status
ll_out_has "status text names the interface, mode and limit" "name: $LL_G_IF"
ll_out_has "status text shows the policy version" "policy_version: 1"
ll_expect_rc 0 "status -j" ll_status -j
if python3 -m json.tool "$TMPD/out" >/dev/null 2>&1; then ok "status -j is valid JSON"; else
	bad "status -j is not valid JSON: $(head -c 200 "$TMPD/out")"; fi
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
i = d["interfaces"][0]; l = d["limits"][0]
assert i["name"] == sys.argv[2] and i["attached"] and i["mode"] == "native", i
assert l["name"] == "per-client" and l["rate"] == 50 and l["burst"] == 20, l
# new_keys: buckets created; full buckets may have been reaped and re-created.
assert l["new_keys"] >= 4 and l["keys"] <= 4 and l["packets"]["allowed"] > 0, l
' "$TMPD/out" "$LL_G_IF" && ok "status -j: $LL_G_IF attached native, per-client 50/20, 4 clients seen" ||
	bad "status -j content"
ll_expect_rc 1 "status on a pin-dir without maps fails" "$LL" status --pin-dir "$TMPD/bpffs"
expect_json_error 2 "top -j --limit NAME not in the policy" "\"no limit 'nope'\" in d['error'] and 'per-client' in d['error']" \
	in_g "$LL" top --pin-dir "$PIN" -j --limit nope
if command -v bpftool >/dev/null; then
	ll_expect_rc 0 "bpftool map dump pinned ll_buckets" bpftool map dump pinned "$PIN/ll_buckets"
	ll_out_has "bpftool shows named bucket fields" '"tokens": [0-9]+'
	ll_out_has "bpftool shows named key fields" '"limit_uid": [0-9]+'
	echo "    $(grep -m1 -o '"tokens": [0-9]*' "$TMPD/out"), $(grep -m1 -o '"last_ns": [0-9]*' "$TMPD/out")"
else
	echo "  (bpftool not installed: map dump not checked)"
fi
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
[ "$LL_AGENT_RC" -eq 0 ] && ok "agent exits 0 on SIGTERM" || bad "agent exit $LL_AGENT_RC on SIGTERM"
[ "$(ll_xdp_prog $LL_G_IF)" = "$P1" ] && ok "default exit leaves program $P1 attached" ||
	bad "default exit changed the program ($P1 -> '$(ll_xdp_prog $LL_G_IF)')"
ll_expect_rc 0 "status still works with no agent" ll_status -j
ll_expect_rc 0 "leaseline detach $LL_G_IF" in_g "$LL" detach $LL_G_IF
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "detach removed it" || bad "program still on $LL_G_IF after detach"

echo "agent --detach-on-exit, bpffs mounted by the agent, max-flow-keys 0 with a flow limit:"
mkdir -p "$TMPD/plain"
sed "s|key: src-ip|key: flow|" "$POL" >"$TMPD/flow.yaml"
sed -e "s|^pin-dir: .*|pin-dir: $TMPD/plain/pins|" -e "s|^policy: .*|policy: flow.yaml|" \
	"$TMPD/agent.yaml" >"$TMPD/agent2.yaml"
echo "max-flow-keys: 0" >>"$TMPD/agent2.yaml"
PIN_SAVED=$PIN
PIN=$TMPD/plain/pins
ll_agent_start "$TMPD/agent2.yaml" "$TMPD/agent2.log" --detach-on-exit
awk -v d="$PIN" '$2 == d && $3 == "bpf" {f = 1} END {exit !f}' /proc/self/mounts &&
	ok "agent mounted bpffs at its pin-dir" || bad "no bpffs mounted at $PIN"
[ -n "$(ll_xdp_prog $LL_G_IF)" ] && ok "attached" || bad "not attached"
ll_expect_rc 0 "status with the agent's own bpffs" ll_status
kill -TERM "$AGENT_PID"
ll_agent_wait_exit 50 || ll_fail "the agent did not exit on SIGTERM"
[ "$LL_AGENT_RC" -eq 0 ] && ok "agent exits 0" || bad "agent exit $LL_AGENT_RC"
[ -z "$(ll_xdp_prog $LL_G_IF)" ] && ok "--detach-on-exit detached on SIGTERM" ||
	bad "program still attached after --detach-on-exit"
grep -q "detached from '$LL_G_IF'" "$TMPD/agent2.log" && ok "agent logged the detach" ||
	bad "no detach log line"
grep -q "limit 'per-client' is key: flow but max-flow-keys is 0" "$TMPD/agent2.log" &&
	ok "agent warned that the flow limit has no flow buckets" || bad "no max-flow-keys warning"
PIN=$PIN_SAVED

# Inside `ip netns exec` /sys is a fresh sysfs, with no bpffs at
# /sys/fs/bpf: the agent mounts one there (in that mount namespace, gone
# with it) instead of failing to make its pin-dir (issue 28).
echo "agent inside ip netns exec, pin-dir under /sys/fs/bpf:"
ip -n "$LL_NS_G" link add vnx$$ type veth peer name vny$$ && ip -n "$LL_NS_G" link set vnx$$ up &&
	ip -n "$LL_NS_G" link set vny$$ up || ll_fail "cannot make a veth in $LL_NS_G"
sed -e "s|^pin-dir: .*|pin-dir: /sys/fs/bpf/ll-cli-$$|" -e "s|name: $LL_G_IF|name: vnx$$|" \
	"$TMPD/agent.yaml" >"$TMPD/agent-netns.yaml"
# shellcheck disable=SC2016 # expanded by the inner shell
timeout 30 ip netns exec "$LL_NS_G" bash -c '
	"$1" agent -c "$2" --detach-on-exit >"$3" 2>&1 &
	a=$!
	for ((i = 0; i < 100; i++)); do
		"$1" status --pin-dir "$4" >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$1" status --pin-dir "$4" >"$5" 2>&1
	rc=$?
	kill -TERM "$a"
	wait "$a"
	exit "$rc"' _ "$LL" "$TMPD/agent-netns.yaml" "$TMPD/agent-netns.log" "/sys/fs/bpf/ll-cli-$$" \
	"$TMPD/status-netns.txt"
rc=$?
[ "$rc" -eq 0 ] && ok "the agent ran and status answered inside ip netns exec" ||
	bad "inside ip netns exec: rc $rc: $(tail -3 "$TMPD/agent-netns.log" | tr '\n' '|')"
grep -q "mounted bpffs at '/sys/fs/bpf'" "$TMPD/agent-netns.log" &&
	ok "  ... mounting bpffs at /sys/fs/bpf" || bad "  ... no bpffs mounted: $(head -3 "$TMPD/agent-netns.log" | tr '\n' '|')"
[ ! -e "/sys/fs/bpf/ll-cli-$$" ] && ok "  ... its pins gone with the command's mount namespace" ||
	bad "  ... /sys/fs/bpf/ll-cli-$$ outlived ip netns exec"

echo "$CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ] || ll_fail "$FAILS of $CHECKS CLI checks failed"
echo "ok: check, agent attach/--force/--detach-on-exit, detach, status text/-j, bpftool dump"
