#!/bin/bash
# SPDX-License-Identifier: MIT
# Beside another XDP program (attach: {mode: multiprog}, reference §4): a tiny
# counting XDP program built here (priority 60, after leaseline's 50) is
# loaded with xdp-loader on the gateway's veth, then the agent attaches as
# one more program of the same libxdp dispatcher:
#   1. `xdp-loader status` lists both; a direct-mode agent refuses the
#      dispatcher without --force and names it;
#   2. traffic over the limit: leaseline drops it to burst + rate*T per
#      client, the counter counts exactly what leaseline passed;
#   3. the agent restarted keeps its program (same code, same maps);
#   4. `leaseline detach` removes leaseline's program only: the counter stays
#      attached and now counts everything sent, all of it received.
# A kernel that refuses freplace (BPF_PROG_TYPE_EXT) programs cannot hold a
# dispatcher: then libxdp attaches one program alone. The test checks that
# the agent says so and leaves nothing attached, and skips the rest (exit 77).
# Ends with "N passed, N failed".
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
for t in xdp-loader clang bpftool; do
	command -v "$t" >/dev/null || ll_skip "needs '$t' (scripts/install-deps.sh)"
done
[ -e /usr/include/xdp/xdp_helpers.h ] || ll_skip "needs libxdp-dev (scripts/install-deps.sh)"

RATE=50      # tokens/s per client
BURST=20     # tokens
SEND_PPS=200 # per client: 4x the rate
DURATION=2   # seconds of traffic
NSRC=4
SKEW=0.2 # seconds of rate, as in test_enforce.sh
passed=0 failed=0
ok() {
	echo "  ok    $*"
	passed=$((passed + 1))
}
bad() {
	echo "  FAIL  $*"
	failed=$((failed + 1))
}
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ] || exit 1
	exit "${1:-0}"
}

# Whatever xdp-loader or the agent attached goes before the namespaces do:
# libxdp's pins of the dispatcher (/sys/fs/bpf/xdp) are removed with it.
mp_cleanup() {
	local rc=$?
	[ -e /run/netns/"$LL_NS_G" ] && in_g xdp-loader unload --all "$LL_G_IF" >/dev/null 2>&1
	return $rc
}
trap 'mp_cleanup; ll_cleanup' EXIT

ll_topo
ll_sources "$NSRC"
ll_bpffs

# The other program: counts every frame that reaches it, passes it on.
cat >"$TMPD/count.bpf.c" <<'EOF'
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} llt_count SEC(".maps");

struct {
	__uint(priority, 60);
	__uint(XDP_PASS, 1);
} XDP_RUN_CONFIG(llt_count_prog);

SEC("xdp")
int llt_count_prog(struct xdp_md *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&llt_count, &k);

	if (n)
		__sync_fetch_and_add(n, 1);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
EOF
clang -O2 -g -target bpf -I/usr/include/"$(gcc -dumpmachine)" -c "$TMPD/count.bpf.c" \
	-o "$TMPD/count.bpf.o" 2>"$TMPD/clang.log" || ll_fail "cannot build the counter: $(cat "$TMPD/clang.log")"
mkdir -p "$TMPD/bpffs/count"

count_load() {
	in_g xdp-loader load -m native -p "$TMPD/bpffs/count" "$LL_G_IF" "$TMPD/count.bpf.o" \
		>"$TMPD/loader.log" 2>&1
}
count_read() {
	bpftool -j map lookup pinned "$TMPD/bpffs/count/llt_count" key 0 0 0 0 2>/dev/null |
		python3 -c 'import json,sys; v=json.load(sys.stdin)["value"]; print(int.from_bytes(bytes(int(x,16) for x in v),"little") if isinstance(v,list) else v)' 2>/dev/null
}
loader_status() { in_g xdp-loader status "$LL_G_IF" 2>&1; }
# agent_refused CONFIG LOG PATTERN: an agent started on CONFIG exits (bounded),
# not 0, having logged PATTERN to LOG.
agent_refused() {
	nsenter --net=/run/netns/"$LL_NS_G" "$LL" agent -c "$1" >"$2" 2>&1 &
	AGENT_PID=$!
	ll_agent_wait_exit 100 && [ "$LL_AGENT_RC" -ne 0 ] && grep -q "$3" "$2"
}

# ll_agent_cfg plus attach: MODE.
agent_cfg() {
	ll_agent_cfg "$1" policy.yaml
	echo "attach: {mode: $2}" >>"$1"
}
ll_policy "$TMPD/policy.yaml" 1 "$RATE" "$BURST"
agent_cfg "$TMPD/agent-mp.yaml" multiprog
agent_cfg "$TMPD/agent-direct.yaml" direct

echo "0. can this kernel hold a libxdp dispatcher?"
count_load || ll_fail "xdp-loader cannot load the counter: $(tail -3 "$TMPD/loader.log")"
loader_status >"$TMPD/status0.txt"
if ! grep -q xdp_dispatcher "$TMPD/status0.txt"; then
	# Why: libxdp's own account of it, loading the counter again verbosely.
	in_g xdp-loader unload --all "$LL_G_IF" >/dev/null 2>&1
	why=$(in_g xdp-loader load -vv -m native "$LL_G_IF" "$TMPD/count.bpf.o" 2>&1 |
		grep -E "BPF program load failed|Compatibility check" | sed 's/^ *//' | head -2 | tr '\n' ' ')
	echo "  the counter is attached alone, not in a dispatcher: $why"
	in_g xdp-loader unload --all "$LL_G_IF" >/dev/null 2>&1
	count_load
	# What the agent does here: beside a program that is not a dispatcher,
	# it refuses (another tool's program) and leaves it alone ...
	if agent_refused "$TMPD/agent-mp.yaml" "$TMPD/agent-busy.log" "already has another XDP program, 'llt_count_prog'"; then
		ok "multiprog beside a lone program: refused (exit $LL_AGENT_RC), '$(grep -o "already has.*" "$TMPD/agent-busy.log" | cut -c1-80)'"
	else
		bad "multiprog beside a lone program: $(tail -2 "$TMPD/agent-busy.log" | tr '\n' ' ')"
	fi
	loader_status | grep -q llt_count_prog && ok "the other program is still attached" ||
		bad "the other program is gone"
	# ... and on an empty interface it says the kernel refused the dispatcher
	# and leaves nothing attached (libxdp's fallback undone).
	in_g xdp-loader unload --all "$LL_G_IF" >/dev/null 2>&1
	if agent_refused "$TMPD/agent-mp.yaml" "$TMPD/agent-nodisp.log" "could not build a dispatcher"; then
		ok "no dispatcher possible: the agent exits $LL_AGENT_RC: $(grep -o 'could not build.*' "$TMPD/agent-nodisp.log" | cut -c1-150)"
	else
		bad "no dispatcher possible: $(tail -3 "$TMPD/agent-nodisp.log" | tr '\n' ' ')"
	fi
	[ -z "$(ll_xdp_prog "$LL_G_IF")" ] && ok "nothing left attached on $LL_G_IF" ||
		bad "an XDP program is left on $LL_G_IF: $(loader_status | tail -1)"
	echo "skip: this kernel refuses freplace programs, so libxdp cannot build a dispatcher" \
		"(${why:-no reason printed}); the multiprog scenario did not run"
	finish 77
fi
ok "the counter runs in a libxdp dispatcher"

echo "1. leaseline joins the dispatcher:"
ll_agent_start "$TMPD/agent-mp.yaml" "$TMPD/agent.log"
loader_status >"$TMPD/status1.txt"
grep -q leaseline "$TMPD/status1.txt" && grep -q llt_count_prog "$TMPD/status1.txt" &&
	ok "xdp-loader status lists both: $(grep -E 'leaseline|llt_count' "$TMPD/status1.txt" | awk '{print $1 "@" $2}' | tr '\n' ' ')" ||
	bad "xdp-loader status: $(cat "$TMPD/status1.txt")"
ll_status -j >"$TMPD/st1.json" && python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if all(i.get("attached") for i in s["interfaces"]) else 1)' "$TMPD/st1.json" &&
	ok "leaseline status: attached" || bad "leaseline status does not show it attached"
ll_stop_pid "$AGENT_PID" # the multiprog agent exits; its program stays
AGENT_PID=
if agent_refused "$TMPD/agent-direct.yaml" "$TMPD/agent-direct.log" "libxdp dispatcher"; then
	ok "a direct-mode agent refuses the dispatcher: $(grep -o 'already has.*' "$TMPD/agent-direct.log" | cut -c1-120)"
else
	bad "direct-mode agent: $(tail -2 "$TMPD/agent-direct.log" | tr '\n' ' ')"
fi
loader_status | grep -q leaseline && loader_status | grep -q llt_count_prog &&
	ok "both still attached" || bad "after the refusal: $(loader_status | tail -3)"
# A second agent with a pin directory of its own: the leaseline program in
# the dispatcher spends the first one's maps, so it is not this one's.
id_before=$(loader_status | grep -o 'leaseline  *[0-9][0-9]*' | awk '{print $2; exit}')
sed "s|^pin-dir: .*|pin-dir: $TMPD/bpffs/other|" "$TMPD/agent-mp.yaml" >"$TMPD/agent-other.yaml"
if agent_refused "$TMPD/agent-other.yaml" "$TMPD/agent-other.log" "is another pin directory's"; then
	ok "an agent of another pin directory refuses: $(grep -o 'already has.*' "$TMPD/agent-other.log" | cut -c1-150)"
else
	bad "agent of another pin directory: $(tail -2 "$TMPD/agent-other.log" | tr '\n' ' ')"
fi
id_after=$(loader_status | grep -o 'leaseline  *[0-9][0-9]*' | awk '{print $2; exit}')
[ -n "$id_before" ] && [ "$id_before" = "$id_after" ] &&
	ok "the first agent's program (id $id_after) is still the one attached" ||
	bad "the leaseline program changed: '$id_before' -> '$id_after'"

echo "2. traffic over the limit:"
ll_agent_start "$TMPD/agent-mp.yaml" "$TMPD/agent2.log"
grep -q "already there and kept" "$TMPD/agent2.log" &&
	ok "3. restarted agent kept its program: $(grep -o 'attached to.*' "$TMPD/agent2.log")" ||
	bad "restarted agent: $(grep 'attached to' "$TMPD/agent2.log")"
before=$(count_read)
ll_recv_start "$TMPD/recv.json" 60
ll_send "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" || bad "the sender failed"
ll_recv_stop
after=$(count_read)
ll_status -j >"$TMPD/st2.json" || bad "status -j failed"
python3 - "$TMPD" "$RATE" "$BURST" "$SKEW" "${before:-x}" "${after:-x}" <<'EOF' && ok "leaseline limits, the counter counts what it passed" || failed=$((failed + 1))
import json, sys
tmpd, rate, burst, skew = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
sent = json.load(open(tmpd + "/sent.json"))["sources"]
recv = json.load(open(tmpd + "/recv.json"))["sources"]
st = json.load(open(tmpd + "/st2.json"))
bad = []
for src, s in sent.items():
    got = recv.get(src, {"count": 0})["count"]
    t = s["last"] - s["first"]
    if got > burst + rate * (t + skew) + 1 or got < burst + rate * (t - skew) - 1:
        bad.append("%s: received %d of %d, bound %.0f" % (src, got, s["sent"], burst + rate * t))
total_recv = sum(r["count"] for r in recv.values())
total_sent = sum(s["sent"] for s in sent.values())
lim = [l for l in st["limits"] if l["name"] == "per-client"][0]["packets"]
if sys.argv[5] == "x" or sys.argv[6] == "x":
    bad.append("cannot read the counter")
else:
    counted = int(sys.argv[6]) - int(sys.argv[5])
    # The counter runs after leaseline: it sees what leaseline passed (and
    # the odd frame of the stack's own, e.g. IPv6 neighbour discovery).
    print("  sent %d, leaseline allowed %d denied %d, counter %d, received %d"
          % (total_sent, lim["allowed"], lim["denied"], counted, total_recv))
    if not lim["allowed"] <= counted <= lim["allowed"] + 10:
        bad.append("counter %d, leaseline allowed %d" % (counted, lim["allowed"]))
if lim["denied"] == 0:
    bad.append("leaseline denied nothing")
if lim["allowed"] != total_recv:
    bad.append("allowed %d != received %d" % (lim["allowed"], total_recv))
for b in bad:
    print("  FAIL  " + b)
sys.exit(1 if bad else 0)
EOF

echo "4. leaseline detach removes leaseline's program only:"
ll_stop_pid "$AGENT_PID"
AGENT_PID=
if in_g "$LL" detach "$LL_G_IF" --pin-dir "$TMPD/bpffs/other" >"$TMPD/detach-other.out" 2>&1; then
	bad "detach with another pin directory removed the program: $(cat "$TMPD/detach-other.out")"
else
	grep -q "another pin directory's" "$TMPD/detach-other.out" &&
		ok "detach with another pin directory refused: $(cut -c1-120 "$TMPD/detach-other.out")" ||
		bad "detach with another pin directory: $(cat "$TMPD/detach-other.out")"
fi
in_g "$LL" detach "$LL_G_IF" --pin-dir "$PIN" >"$TMPD/detach.out" 2>&1 &&
	ok "$(cat "$TMPD/detach.out")" || bad "leaseline detach: $(cat "$TMPD/detach.out")"
loader_status >"$TMPD/status4.txt"
! grep -q leaseline "$TMPD/status4.txt" && grep -q llt_count_prog "$TMPD/status4.txt" &&
	ok "xdp-loader status: the counter alone is left" || bad "after detach: $(cat "$TMPD/status4.txt")"
before=$(count_read)
ll_recv_start "$TMPD/recv2.json" 60
ll_send "$TMPD/sent2.json" 1 "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" || bad "the sender failed"
ll_recv_stop
after=$(count_read)
python3 - "$TMPD" "${before:-0}" "${after:-0}" <<'EOF' && ok "the counter keeps working: everything sent is counted and received" || failed=$((failed + 1))
import json, sys
tmpd = sys.argv[1]
sent = sum(s["sent"] for s in json.load(open(tmpd + "/sent2.json"))["sources"].values())
recv = sum(r["count"] for r in json.load(open(tmpd + "/recv2.json"))["sources"].values())
counted = int(sys.argv[3]) - int(sys.argv[2])
print("  sent %d, counted %d, received %d" % (sent, counted, recv))
sys.exit(0 if recv == sent and sent <= counted <= sent + 10 else 1)
EOF
finish
