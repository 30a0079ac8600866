# SPDX-License-Identifier: MIT
# Helpers for leaseline's namespace tests (reference §8). Sourced by tests/net/test_*.sh
# and scripts/demo.sh. Everything a test creates carries its pid in the name and is
# removed by ll_cleanup, which runs on every exit path (EXIT; INT and TERM exit):
#   namespaces  llc$$ (client) and llg$$ (gateway), joined by veth vc$$ <-> vg$$
#               (created inside the namespaces: never a host interface)
#   addresses   198.18.0.0/15 only, inside those namespaces
#   bpffs       a private mount under the test's temp dir, unmounted on exit
# The agent runs with `nsenter --net` (network namespace only), so its pins live in
# the shared mount namespace and survive agent restarts; `ip netns exec` would remount
# /sys and lose them.
#
# Usage: source lib.sh; ll_init BUILD_DIR; ll_topo; ll_sources 32; ll_bpffs; ...

LL_NET_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Addresses (198.18.0.0/15, RFC 2544 benchmarking range).
LL_C_ADDR=198.18.0.1 # client veth (LL_C_IF)
LL_G_ADDR=198.18.0.2 # gateway veth (LL_G_IF): the receiving socket binds here
LL_SRC_BASE=10       # simulated clients 198.18.0.10, .11, ... (/32 on LL_C_IF)
LL_PORT=7000         # UDP port the policy's rule matches
# Bounded waits: attempts x LL_POLL_S seconds.
LL_POLL_S=0.1
LL_WAIT_TRIES=100

# Checks that go on after a failure: ok/bad count into CHECKS and FAILS, and the
# test ends with ll_checks_done. (Older tests define their own copies.)
CHECKS=0
FAILS=0
ok() {
	CHECKS=$((CHECKS + 1))
	printf '  ok    %s\n' "$*"
}
bad() {
	CHECKS=$((CHECKS + 1))
	FAILS=$((FAILS + 1))
	printf '  FAIL  %s\n' "$*"
}
# ll_expect_rc WANT DESCRIPTION CMD...: run CMD (output in $TMPD/out), check its exit.
ll_expect_rc() {
	local want=$1 what=$2 rc
	shift 2
	"$@" >"$TMPD/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$want" ]; then
		ok "$what (exit $rc)"
	else
		bad "$what: exit $rc, expected $want: $(grep -v '^libbpf' "$TMPD/out" | tail -3 | tr '\n' ' ')"
	fi
}
# ll_out_has DESCRIPTION REGEX: the last ll_expect_rc's output matches REGEX.
ll_out_has() {
	if grep -qE -- "$2" "$TMPD/out"; then ok "$1"; else bad "$1: no /$2/ in: $(tail -3 "$TMPD/out" | tr '\n' ' ')"; fi
}
# ll_checks_done WHAT: one line counting the checks; exit 1 if any failed.
ll_checks_done() {
	echo "$CHECKS checks, $FAILS failed"
	[ "$FAILS" -eq 0 ] || ll_fail "$FAILS of $CHECKS $1 checks failed"
}

ll_fail() {
	printf 'FAIL: %s\n' "$*"
	exit 1
}
ll_skip() {
	printf 'skip: %s\n' "$*"
	exit 77
}

# ll_init BUILD_DIR: checks, temp dir, cleanup trap. Sets LL (the binary), TMPD.
ll_init() {
	local build=${1:-}
	[ -n "$build" ] || {
		echo "usage: $0 BUILD_DIR" >&2
		exit 2
	}
	LL_BUILD=$(cd "$build" 2>/dev/null && pwd) || ll_fail "no build dir '$build'"
	LL=$LL_BUILD/leaseline
	[ -x "$LL" ] || ll_fail "'$LL' is not built"
	[ "$(id -u)" -eq 0 ] || ll_skip "needs root (network namespaces, XDP)"
	local t
	for t in ip nsenter python3 mount umount; do
		command -v "$t" >/dev/null || ll_skip "needs '$t'"
	done
	LL_NS_C=llc$$
	LL_NS_G=llg$$
	LL_C_IF=vc$$ # veth names: <= 15 bytes with any pid
	LL_G_IF=vg$$
	LL_PIDS=()
	LL_MOUNTS=()
	LL_NETNS=()
	AGENT_PID=
	TMPD=$(mktemp -d /tmp/leaseline-net.XXXXXX) || ll_fail "cannot create a temp dir"
	trap ll_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# Stop a process we started, by pid: TERM, then KILL after ~2 s.
ll_stop_pid() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 20; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep "$LL_POLL_S"
	done
	kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

ll_cleanup() {
	local rc=$? p m n
	trap - EXIT INT TERM
	[ -n "${LL_SLEEP_PID:-}" ] && kill "$LL_SLEEP_PID" 2>/dev/null
	ll_stop_pid "$AGENT_PID"
	for p in "${LL_PIDS[@]+"${LL_PIDS[@]}"}"; do
		ll_stop_pid "$p"
	done
	# Deleting the namespaces deletes the veth pair and with it the XDP program.
	for n in "${LL_NETNS[@]+"${LL_NETNS[@]}"}"; do
		ip netns del "$n" 2>/dev/null
	done
	for ((m = ${#LL_MOUNTS[@]} - 1; m >= 0; m--)); do
		umount "${LL_MOUNTS[m]}" 2>/dev/null || umount -l "${LL_MOUNTS[m]}" 2>/dev/null
	done
	# The agent mounts bpffs itself when its pin-dir is not on one: catch those too.
	if [ -n "${TMPD:-}" ] && [ -d "$TMPD" ]; then
		for m in $(awk -v d="$TMPD/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
		done
		if [ -n "${LL_KEEP:-}" ]; then
			echo "kept $TMPD"
		else
			rm -rf --one-file-system "$TMPD"
		fi
	fi
	exit "$rc"
}

in_c() { nsenter --net=/run/netns/"$LL_NS_C" "$@"; }
in_g() { nsenter --net=/run/netns/"$LL_NS_G" "$@"; }

# Two namespaces and one veth pair created inside them: nothing touches the host's
# interfaces. Static neighbours, so no packet of the test waits on ARP.
ll_topo() {
	ip netns add "$LL_NS_C" || ll_fail "cannot create netns $LL_NS_C"
	LL_NETNS+=("$LL_NS_C")
	ip netns add "$LL_NS_G" || ll_fail "cannot create netns $LL_NS_G"
	LL_NETNS+=("$LL_NS_G")
	ip -n "$LL_NS_C" link add $LL_C_IF type veth peer name $LL_G_IF netns "$LL_NS_G" ||
		ll_skip "cannot create a veth pair"
	ip -n "$LL_NS_C" addr add "$LL_C_ADDR/24" dev $LL_C_IF
	ip -n "$LL_NS_G" addr add "$LL_G_ADDR/24" dev $LL_G_IF
	ip -n "$LL_NS_C" link set lo up
	ip -n "$LL_NS_G" link set lo up
	ip -n "$LL_NS_C" link set $LL_C_IF up
	ip -n "$LL_NS_G" link set $LL_G_IF up
	local gmac cmac
	gmac=$(ip -n "$LL_NS_G" -o link show $LL_G_IF | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
	cmac=$(ip -n "$LL_NS_C" -o link show $LL_C_IF | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
	[ -n "$gmac" ] && [ -n "$cmac" ] || ll_fail "cannot read the veth MAC addresses"
	ip -n "$LL_NS_C" neigh replace "$LL_G_ADDR" lladdr "$gmac" dev $LL_C_IF nud permanent
	ip -n "$LL_NS_G" neigh replace "$LL_C_ADDR" lladdr "$cmac" dev $LL_G_IF nud permanent
}

# ll_sources N: add N simulated clients 198.18.0.10.. as /32 addresses on LL_C_IF.
ll_sources() {
	local n=$1 i
	[ "$n" -ge 1 ] && [ "$n" -le 200 ] || ll_fail "ll_sources: 1..200, got $n"
	for ((i = 0; i < n; i++)); do
		ip -n "$LL_NS_C" addr add "198.18.0.$((LL_SRC_BASE + i))/32" dev $LL_C_IF ||
			ll_fail "cannot add source address $i"
	done
	LL_SRC_FIRST=198.18.0.$LL_SRC_BASE
	LL_SRC_LAST=198.18.0.$((LL_SRC_BASE + n - 1))
}

# A private bpffs for this test's pins: PIN is the agent's pin-dir.
ll_bpffs() {
	mkdir -p "$TMPD/bpffs"
	mount -t bpf bpf "$TMPD/bpffs" || ll_skip "cannot mount bpffs"
	LL_MOUNTS+=("$TMPD/bpffs")
	PIN=$TMPD/bpffs/leaseline
}

# ll_policy FILE VERSION RATE BURST [MODE]: one src-ip limit on UDP to LL_PORT.
ll_policy() {
	local f=$1 v=$2 rate=$3 burst=$4 mode=${5:-enforce}
	cat >"$f.tmp" <<EOF
# written by $(basename "$0")
version: $v
default: pass
limits:
  - name: per-client
    key: src-ip
    unit: packets
    rate: $rate
    burst: $burst
    mode: $mode
rules:
  - name: test-udp
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client]
EOF
	mv "$f.tmp" "$f" # the agent never reads half a file
}

# ll_agent_cfg FILE POLICY_FILE: agent on LL_G_IF, native mode, pins under PIN.
ll_agent_cfg() {
	cat >"$1" <<EOF
node: gw-test-$$
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $PIN
policy: $2
max-keys: 4096
EOF
}

# ll_agent_start CONFIG LOG [ARGS...]: run the agent in the gateway namespace and
# wait (bounded) until it is attached and status answers. Sets AGENT_PID.
ll_agent_start() {
	local cfg=$1 log=$2 i
	shift 2
	nsenter --net=/run/netns/"$LL_NS_G" "$LL" agent -c "$cfg" "$@" >>"$log" 2>&1 &
	AGENT_PID=$!
	for ((i = 0; i < LL_WAIT_TRIES; i++)); do
		kill -0 "$AGENT_PID" 2>/dev/null || {
			sed 's/^/   agent: /' "$log" | tail -20
			ll_fail "the agent exited during start-up"
		}
		grep -q "running (pid" "$log" && return 0
		ll_sleep "$LL_POLL_S"
	done
	sed 's/^/   agent: /' "$log" | tail -20
	ll_fail "the agent did not start within $((LL_WAIT_TRIES / 10)) s"
}

# ll_agent_wait_exit [TRIES]: wait (bounded) for the agent to exit; prints its status.
ll_agent_wait_exit() {
	local tries=${1:-50} i
	for ((i = 0; i < tries; i++)); do
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep "$LL_POLL_S"
	done
	kill -0 "$AGENT_PID" 2>/dev/null && return 1
	{ wait "$AGENT_PID"; } 2>/dev/null
	LL_AGENT_RC=$?
	AGENT_PID=
	return 0
}

# ll_status [ARGS]: `leaseline status` in the gateway namespace (interface names resolve).
ll_status() { in_g "$LL" status --pin-dir "$PIN" "$@"; }

# ll_xdp_prog IFACE: id of the XDP program on IFACE in the gateway namespace, or "".
ll_xdp_prog() {
	ip -n "$LL_NS_G" -d link show "$1" 2>/dev/null |
		sed -n 's/.*prog\/xdp id \([0-9]*\).*/\1/p' | head -1
}

# ll_sleep SECONDS: an interruptible sleep (see ll_send).
ll_sleep() {
	sleep "$1" &
	LL_SLEEP_PID=$!
	wait "$LL_SLEEP_PID"
}

# ll_wait_until SECONDS CMD [ARGS...]: a bounded wait for something to happen:
# CMD every LL_POLL_S until it succeeds (0), or SECONDS have passed and it
# still fails (1). For an event, not for time that must pass (a bucket's
# refill, a lease's expiry, a window of traffic): those sleep, and say so.
ll_wait_until() {
	local tries i
	tries=$(awk -v s="$1" -v p="$LL_POLL_S" 'BEGIN { n = int(s / p + 0.5); print (n > 0 ? n : 1) }')
	shift
	for ((i = 0; i < tries; i++)); do
		"$@" && return 0
		ll_sleep "$LL_POLL_S"
	done
	"$@"
}

# ll_log_has FILE PATTERN [N]: FILE has at least N (default 1) lines matching
# the grep pattern PATTERN (a missing FILE has none).
ll_log_has() {
	local n
	n=$(grep -c -- "$2" "$1" 2>/dev/null)
	[ "${n:-0}" -ge "${3:-1}" ]
}

# ll_lease_live [LIMIT]: status on PIN shows a live lease for LIMIT, or for
# every limit that has a lease when none is named (and at least one has).
ll_lease_live() {
	ll_status -j 2>/dev/null | python3 -c '
import json, sys
try:
    st = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
name = sys.argv[1] if len(sys.argv) > 1 else None
ls = [l["lease"] for l in st.get("limits", []) if "lease" in l and name in (None, l["name"])]
sys.exit(0 if ls and all(x["live"] for x in ls) else 1)' "$@"
}

# ll_now: CLOCK_MONOTONIC in seconds, the clock udpsend.py and udpcount.py record.
ll_now() { python3 -c 'import time; print("%.4f" % time.monotonic())'; }

# ll_recv_start OUT MAX_TIME: receiver on LL_G_IF's address; waits (bounded) until bound.
ll_recv_start() {
	local out=$1 max=$2 i
	rm -f "$out.ready"
	nsenter --net=/run/netns/"$LL_NS_G" python3 "$LL_NET_DIR/udpcount.py" --bind "$LL_G_ADDR" --port "$LL_PORT" \
		--max-time "$max" --out "$out" --ready "$out.ready" 2>>"$TMPD/recv.log" &
	LL_RECV_PID=$!
	LL_PIDS+=("$LL_RECV_PID")
	for ((i = 0; i < LL_WAIT_TRIES; i++)); do
		[ -e "$out.ready" ] && return 0
		kill -0 "$LL_RECV_PID" 2>/dev/null || ll_fail "the receiver exited: $(cat "$TMPD/recv.log")"
		sleep "$LL_POLL_S"
	done
	ll_fail "the receiver did not bind within $((LL_WAIT_TRIES / 10)) s"
}

# ll_recv_stop: let queued datagrams drain, stop the receiver, wait for its JSON.
ll_recv_stop() {
	sleep 0.3
	ll_stop_pid "$LL_RECV_PID"
}

# ll_send_args OUT DURATION FLOW...: argv of the paced sender (client namespace).
# Each FLOW is FIRST[-LAST]:RATE (packets/s per source).
ll_send_args() {
	local out=$1 dur=$2 f
	shift 2
	LL_SEND_ARGV=(nsenter --net=/run/netns/"$LL_NS_C" python3 "$LL_NET_DIR/udpsend.py"
		--dst "$LL_G_ADDR" --port "$LL_PORT" --duration "$dur" --out "$out")
	for f in "$@"; do
		LL_SEND_ARGV+=(--flow "$f")
	done
}

# ll_send OUT DURATION FLOW...: send and wait for the sender. It runs in the
# background so that a signal to the test interrupts `wait` and cleans up at once
# (bash runs traps only after a foreground child has finished).
ll_send() {
	ll_send_bg "$@"
	wait "$LL_SEND_PID"
}

# ll_send_bg OUT DURATION FLOW...: the same in the background; sets LL_SEND_PID.
ll_send_bg() {
	ll_send_args "$@"
	"${LL_SEND_ARGV[@]}" &
	LL_SEND_PID=$!
	LL_PIDS+=("$LL_SEND_PID")
}

# ll_wait_pid PID SECONDS: wait (bounded) for a background job we started.
ll_wait_pid() {
	local pid=$1 tries=$(($2 * 10)) i
	for ((i = 0; i < tries; i++)); do
		kill -0 "$pid" 2>/dev/null || {
			wait "$pid"
			return $?
		}
		sleep "$LL_POLL_S"
	done
	return 124
}
