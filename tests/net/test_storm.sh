#!/bin/bash
# SPDX-License-Identifier: MIT
# The connection tests (docs/security.md): a coordinator over mutual TLS
# serving a real agent (gw-1, refresh 200 ms) while strangers storm it.
# Namespaces: coordinator (llc), gw-1 (llg, XDP on its veth), the storm
# (lla, routed to the coordinator over a veth of its own, every address of
# 198.19.0.0/16 local to it), and gw-2 with a fake coordinator (llf).
# During the storm:
#   - silent peers first: 64 connections from 8 addresses of 198.19.41.0/24,
#     held open until the coordinator closes them (4 pending per address:
#     the rest refused at once; none may outlive the 2 s HELLO deadline),
#     and 40 from 40 addresses of 198.19.42.0/24 (32 pending per /24: 8
#     refused at once);
#   - 0.5 s later, for 6 s, TCP connects from 4094 addresses of
#     198.19.16.0/20 as fast as one Python process can (10,000 at least;
#     60k-120k here): most silent, one in ten sending garbage, one in ten
#     replaying one TLS ClientHello (a key exchange and a signature each);
#   - a rogue holder with gw-2's valid certificate saying HELLO as gw-1, one
#     with a certificate for gw-1 from another CA, and a certified insider
#     sending a malformed frame instead of HELLO, each redialling every 250 ms;
#   - a gateway joining (gw-3, its own certificate) 1 s into the flood:
#     served during it (strangers' handshakes are the coordinator's door
#     thread's, and the fullest prefix gives way to it);
#   - gw-2, a real agent pointed at a fake coordinator that sends garbage,
#     grants of rate 2^64-1 (for another holder and for gw-2), a policy
#     version 2^64-1 and a 2 GiB frame header: it stays up, clamps, refuses.
# Checked: gw-1's grant inter-arrival gaps during the storm (p50, p99 and
# max printed, with the baseline's), the longest within one refresh interval
# + 150 ms, and each report answered within 100 ms of the quickest round
# trip (scheduling on a shared 2-CPU machine: see TOL_MAX_MS); its lease
# live and its connection up throughout; the coordinator's counters show
# every kind of stranger; its RSS stays bounded. About 25 s.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
for t in openssl curl; do
	command -v "$t" >/dev/null || ll_skip "needs '$t'"
done
STORM_PY=$LL_NET_DIR/storm.py

PORT=7452
FAKE_PORT=7453
CM=127.0.0.1:9477 # the coordinator's metrics, in its namespace
REFRESH_MS=200
# Allowed beyond one refresh interval for the longest gap (ms), and for the
# slowest answer over the quickest round trip. gw-1 reports one refresh
# interval after its last report (its loop wakes every 10 ms), on 2 CPUs
# shared with the storm's generator, gw-2, the coordinator and whatever else
# the machine runs. Observed with the fix, 11 runs: longest gap 218..262 ms
# in ten, 339 ms in one (its round trip +89 ms; +9..21 ms in the others);
# with no storm at all, the 3 s baselines reached 304 and 308 ms (+73, +76
# ms) in 2 of 33, the load average 4..9 from other jobs. A grant missed
# would be a gap of two intervals (400 ms). Before the fix, 2 of 6 runs had
# 391 ms gaps (+175 and +189 ms round trips).
TOL_MAX_MS=${LL_STORM_TOL_MAX_MS:-150}
RTT_TOL_MS=${LL_STORM_RTT_TOL_MS:-100}
# Allowed RSS growth of the coordinator over the storm (KiB): observed 5.5
# MiB whether 60k or 120k connects (strangers' TLS state in a table of
# gateways + 64 connections), 1.2 MiB before the fix (strangers mostly
# closed on accept).
RSS_GROWTH_MAX_KB=${LL_STORM_RSS_KB:-16384}
BASE_S=3
# The storm's processes run at this niceness: an attacker is on other
# machines, not on the coordinator's and gw-1's CPUs (0 to share them evenly).
NICE=${LL_STORM_NICE:-10}
STORM_S=12 # the storm's processes, at most
FLOOD_S=6  # the flood goes on past 10,000 connects until then

fails=0
ok() { echo "  ok    $*"; }
bad() {
	echo "  FAIL  $*"
	fails=$((fails + 1))
}
coord_metric() {
	in_c curl -s --max-time 2 "http://$CM/metrics" | sed -n "s/^$1 \\([0-9.]*\\)\$/\\1/p"
}
wait_log() {
	local i
	for ((i = 0; i < LL_WAIT_TRIES; i++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		ll_sleep "$LL_POLL_S"
	done
	return 1
}
# jq-less JSON field: jf FILE EXPR (python expression over d).
jf() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

ll_topo
ll_bpffs

# The storm's namespace: its own veth to the coordinator's, 198.19.0.0/16
# local to it (any address binds), routed both ways through one neighbour.
LL_NS_A=lla$$
LL_NS_F=llf$$
A_IF=vac$$ C_IF2=vca$$
ip netns add "$LL_NS_A" || ll_fail "cannot create netns $LL_NS_A"
LL_NETNS+=("$LL_NS_A")
ip -n "$LL_NS_C" link add "$C_IF2" type veth peer name "$A_IF" netns "$LL_NS_A" ||
	ll_skip "cannot create a veth pair"
ip -n "$LL_NS_C" addr add 198.18.1.1/24 dev "$C_IF2"
ip -n "$LL_NS_A" addr add 198.18.1.2/24 dev "$A_IF"
ip -n "$LL_NS_C" link set "$C_IF2" up
ip -n "$LL_NS_A" link set "$A_IF" up
ip -n "$LL_NS_A" link set lo up
ip -n "$LL_NS_A" route add local 198.19.0.0/16 dev lo
ip -n "$LL_NS_A" route add "$LL_C_ADDR/32" via 198.18.1.1
ip -n "$LL_NS_C" route add 198.19.0.0/16 via 198.18.1.2
in_f() { nsenter --net=/run/netns/"$LL_NS_F" "$@"; }
# bg NS CMD...: CMD in namespace NS in the background, as one process (so
# that stopping BG_PID stops it); sets BG_PID.
bg() {
	nsenter --net=/run/netns/"$1" "${@:2}" &
	BG_PID=$!
	LL_PIDS+=("$BG_PID")
}

# gw-2's namespace: a veth pair of its own to attach to, the fake on loopback.
ip netns add "$LL_NS_F" || ll_fail "cannot create netns $LL_NS_F"
LL_NETNS+=("$LL_NS_F")
F_IF=vfa$$
ip -n "$LL_NS_F" link add "$F_IF" type veth peer name vfb$$ || ll_skip "cannot create a veth pair"
ip -n "$LL_NS_F" link set lo up
ip -n "$LL_NS_F" link set "$F_IF" up
ip -n "$LL_NS_F" link set vfb$$ up

PKI=$TMPD/pki
mkdir -p "$PKI" "$TMPD/state"
bash "$(dirname "$0")/../tls/mkcerts.sh" "$PKI" "$LL_C_ADDR" gw-1 gw-2 gw-3 ||
	ll_fail "cannot make the test certificates"
cat >"$TMPD/policy.yaml" <<EOF
version: 1
limits:
  - {name: per-client, key: src-ip, scope: global, rate: 500, burst: 200}
rules:
  - {name: test-udp, match: {proto: udp, dst-port: $LL_PORT}, limits: [per-client]}
EOF
cat >"$TMPD/coord.yaml" <<EOF
listen: $LL_C_ADDR:$PORT
policy: policy.yaml
state-dir: state
lease: {ttl: 1s, refresh: ${REFRESH_MS}ms}
metrics: $CM
tls: {cert: pki/coord.crt, key: pki/coord.key, ca: pki/ca.crt}
EOF
nsenter --net=/run/netns/"$LL_NS_C" "$LL" coord -c "$TMPD/coord.yaml" -v >"$TMPD/coord.log" 2>&1 &
COORD_PID=$!
LL_PIDS+=("$COORD_PID")
wait_log "$TMPD/coord.log" "coordinator listening on .*(mutual TLS)" ||
	ll_fail "the coordinator did not listen: $(tail -3 "$TMPD/coord.log")"

# gw-1, every log line stamped with CLOCK_MONOTONIC as it arrives.
cat >"$TMPD/gw-1.yaml" <<EOF
node: gw-1
interfaces: [{name: $LL_G_IF, mode: native}]
pin-dir: $PIN
coordinator: {address: $LL_C_ADDR:$PORT}
max-keys: 4096
tls: {cert: pki/gw-1.crt, key: pki/gw-1.key, ca: pki/ca.crt}
EOF
nsenter --net=/run/netns/"$LL_NS_G" "$LL" agent -c "$TMPD/gw-1.yaml" -v \
	> >(python3 "$STORM_PY" stamp --out "$TMPD/gw-1.log") 2>&1 &
AGENT_PID=$!
# gw-2, for the fake coordinator (which is not listening yet: it redials).
cat >"$TMPD/gw-2.yaml" <<EOF
node: gw-2
interfaces: [{name: $F_IF, mode: native}]
pin-dir: $PIN-gw-2
coordinator: {address: 127.0.0.1:$FAKE_PORT}
max-keys: 4096
EOF
bg "$LL_NS_F" "$LL" agent -c "$TMPD/gw-2.yaml" -v >"$TMPD/gw-2.log" 2>&1
GW2_PID=$BG_PID
# The baseline from the third grant on: until the first, the agent reports
# every 500 ms (its default), not every refresh interval.
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	[ "$(grep -c " grant per-client epoch" "$TMPD/gw-1.log" 2>/dev/null)" -ge 3 ] 2>/dev/null && break
	ll_sleep "$LL_POLL_S"
done
[ "$i" -lt "$LL_WAIT_TRIES" ] || ll_fail "gw-1 got no grants: $(tail -5 "$TMPD/gw-1.log")"
wait_log "$TMPD/gw-2.log" "waiting for the coordinator's policy" || ll_fail "gw-2 did not start: $(tail -5 "$TMPD/gw-2.log")"
echo "1. gw-1 holds a lease over TLS (refresh ${REFRESH_MS} ms); baseline ${BASE_S} s"

python3 "$STORM_PY" sample --ll "$LL" --ns "$LL_NS_G" --pin "$PIN" --pid "$COORD_PID" \
	--duration $((BASE_S + STORM_S + 8)) --interval 0.2 --out "$TMPD/samples.txt" &
LL_PIDS+=($!)
T_BASE=$(ll_now)
ll_sleep "$BASE_S"
T_STORM=$(ll_now)
cpu0=$(awk '{print $14 + $15}' /proc/"$COORD_PID"/stat)
# The main loop's own CPU (its thread's id is the process's).
loop0=$(awk '{print $14 + $15}' /proc/"$COORD_PID"/task/"$COORD_PID"/stat)

echo "2. the storm (${STORM_S} s at most)"
# Silent peers first: 8 connections from each of 8 addresses, 4 refused at
# once (pending-per-address); the flood then has the rest give way.
bg "$LL_NS_A" nice -n "$NICE" python3 "$STORM_PY" flood --dst "$LL_C_ADDR:$PORT" \
	--src-base 198.19.41.1 --addrs 8 --count 64 --garbage 0 --hello 0 --hold 4 \
	--max-time "$STORM_S" --out "$TMPD/silent.json"
SILENT_PID=$BG_PID
bg "$LL_NS_A" nice -n "$NICE" python3 "$STORM_PY" flood --dst "$LL_C_ADDR:$PORT" \
	--src-base 198.19.42.1 --addrs 40 --count 40 --garbage 0 --hello 0 --hold 4 \
	--max-time "$STORM_S" --out "$TMPD/prefix.json"
PREFIX_PID=$BG_PID
ll_sleep 0.5
bg "$LL_NS_A" nice -n "$NICE" python3 "$STORM_PY" flood --dst "$LL_C_ADDR:$PORT" \
	--src-base 198.19.16.1 --addrs 4094 --count 10000 --duration "$FLOOD_S" --garbage 1000 \
	--hello 1000 --hold 3 --max-time "$STORM_S" --out "$TMPD/flood.json"
FLOOD_PID=$BG_PID
# LL_STORM_PERF=FILE: a profile of the coordinator during the flood.
if [ -n "${LL_STORM_PERF:-}" ]; then
	perf record -q -F 997 -g -p "$COORD_PID" -o "$LL_STORM_PERF" -- sleep "$FLOOD_S" >/dev/null 2>&1 &
	LL_PIDS+=($!)
fi
# client SRC CERT OUT ARGS...: a TLS client in the storm's namespace.
client() {
	local src=$1 cert=$2 out=$3
	shift 3
	bg "$LL_NS_A" nice -n "$NICE" python3 "$STORM_PY" client --dst "$LL_C_ADDR:$PORT" --src "$src" \
		--ca "$PKI/ca.crt" --cert "$PKI/$cert.crt" --key "$PKI/$cert.key" --out "$TMPD/$out.json" "$@"
	CLIENTS+=("$BG_PID")
}
CLIENTS=()
client 198.19.40.1 gw-2 liar --holder gw-1 --duration 8
client 198.19.40.2 rogue rogue --holder gw-1 --duration 8
client 198.19.40.3 gw-2 insider --garbage --duration 8
bg "$LL_NS_F" python3 "$STORM_PY" fakecoord --port "$FAKE_PORT" --duration 8 --out "$TMPD/fake.log"
FAKE_PID=$BG_PID
ll_sleep 1
client 198.19.40.4 gw-3 joiner --holder gw-3 --once --duration 4
for p in "$FLOOD_PID" "$SILENT_PID" "$PREFIX_PID" "${CLIENTS[@]}" "$FAKE_PID"; do
	ll_wait_pid "$p" $((STORM_S + 10)) || bad "storm process $p did not finish in time"
done
T_END=$(ll_now)
cpu1=$(awk '{print $14 + $15}' /proc/"$COORD_PID"/stat)
loop1=$(awk '{print $14 + $15}' /proc/"$COORD_PID"/task/"$COORD_PID"/stat)
ll_sleep 1

echo "3. what the storm did"
[ -s "$TMPD/flood.json" ] || ll_fail "no flood results"
est=$(jf "$TMPD/flood.json" 'd["established"]')
echo "  flood: $(jf "$TMPD/flood.json" '"%d attempted, %d established in %.2f s (%.0f connects/s), failed %s, max open %d, open at end %d" % (d["attempted"], d["established"], d["connect_seconds"], d["connects_per_second"], d["failed"], d["max_open"], d["open_at_end"])')"
echo "  flood: closed by the coordinator within 0.1 s: $(jf "$TMPD/flood.json" '", ".join("%s %d of %d (longest %.2f s)" % (k, d["closed_within_0.1s_" + k], len(d["lifetimes"][k]), d["lifetime_max_" + k]) for k in ("silent", "garbage", "hello"))')"
[ "${est:-0}" -ge 10000 ] && ok "$est connects established (at least 10000)" ||
	bad "only ${est:-0} connects established"
held=$(jf "$TMPD/flood.json" 'd["open_at_end"] + sum(1 for v in d["lifetimes"].values() for x in v if x > 2.5)')
[ "$held" = 0 ] && ok "no storm connection outlived the HELLO deadline (2 s) by 0.5 s" ||
	bad "$held storm connections lived past 2.5 s"

sil=$(jf "$TMPD/silent.json" '"%d established, %d closed within 0.1 s, the rest after %.2f..%.2f s, %d open at end" % (d["established"], d["closed_within_0.1s_silent"], min([x for x in d["lifetimes"]["silent"] if x >= 0.1] or [0]), d["lifetime_max_silent"], d["open_at_end"])')
echo "  silent peers (8 addresses x 8): $sil"
jf "$TMPD/silent.json" 'int(d["open_at_end"] == 0 and d["lifetime_max_silent"] <= 2.5 and d["established"] == 64)' |
	grep -qx 1 && ok "silent peers: none held a connection past 2.5 s" || bad "silent peers: $sil"

pfx=$(jf "$TMPD/prefix.json" '"%d established, %d closed within 0.1 s, longest %.2f s, %d open at end" % (d["established"], d["closed_within_0.1s_silent"], d["lifetime_max_silent"], d["open_at_end"])')
echo "  one /24 (40 addresses x 1): $pfx"
jf "$TMPD/prefix.json" 'int(d["established"] == 40 and d["closed_within_0.1s_silent"] >= 8 and d["open_at_end"] == 0 and d["lifetime_max_silent"] <= 2.5)' |
	grep -qx 1 && ok "one /24: at most 32 held, the rest refused at once" || bad "one /24: $pfx"

for c in liar rogue insider joiner; do
	echo "  $c: $(jf "$TMPD/$c.json" '"%d attempts: %s" % (d["attempts"], d["outcomes"])')"
done
served=$(jf "$TMPD/liar.json" 'd["outcomes"].get("served", 0)')
[ "$served" = 0 ] && grep -q "holder 'gw-1' from 198.19.40.1 refused: its certificate does not name it" \
	"$TMPD/coord.log" && ok "gw-2's certificate saying HELLO as gw-1: refused ($(grep -c "from 198.19.40.1 refused" "$TMPD/coord.log") times)" ||
	bad "the liar: served $served, refusals logged $(grep -c "from 198.19.40.1 refused" "$TMPD/coord.log")"
served=$(jf "$TMPD/rogue.json" 'd["outcomes"].get("served", 0)')
[ "$served" = 0 ] && grep -q "TLS handshake from 198.19.40.2 failed" "$TMPD/coord.log" &&
	ok "another CA's certificate for gw-1: handshake failed ($(grep -c "handshake from 198.19.40.2 failed" "$TMPD/coord.log") times)" ||
	bad "the rogue CA: served $served, failures logged $(grep -c "handshake from 198.19.40.2 failed" "$TMPD/coord.log")"
served=$(jf "$TMPD/insider.json" 'd["outcomes"].get("served", 0)')
[ "$served" = 0 ] && ok "a certified insider's malformed frame: never served" || bad "the insider was served"
# It dialled 1 s into the flood, redialling with the agent's backoff.
joined=$(jf "$TMPD/joiner.json" 'd["served_after"]')
if [ "$joined" != None ] && jf "$TMPD/flood.json" "int($joined + 1 < d['connect_seconds'])" | grep -qx 1; then
	ok "gw-3 joined during the flood: served ${joined} s after its first dial ($(jf "$TMPD/joiner.json" 'd["attempts"]') dials)"
else
	bad "gw-3 was not served during the flood (served after: $joined s)"
fi

echo "4. the coordinator"
for m in crowded_refused prefix_refused hello_timeouts tls_failures tls_refused protocol_errors pending_evicted; do
	v=$(coord_metric "leaseline_coord_${m}_total")
	[ "${v:-0}" -gt 0 ] 2>/dev/null && ok "leaseline_coord_${m}_total $v" ||
		bad "leaseline_coord_${m}_total is '${v:-}'"
done
echo "  leaseline_coord_full_refused_total $(coord_metric leaseline_coord_full_refused_total)"
echo "  coordinator CPU during the storm: $(awk -v a="$cpu0" -v b="$cpu1" -v c="$loop0" -v d="$loop1" -v t="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f s, of which the main loop %.2f s", (b - a) / t, (d - c) / t}')"
rss=$(awk -v t0="$T_STORM" -v t1="$T_END" '{split($5, r, "="); if ($1 < t0) {b = r[2]} else if ($1 <= t1 + 1 && r[2] > m) {m = r[2]}} END {print b + 0, m + 0}' "$TMPD/samples.txt")
set -- $rss
echo "  coordinator RSS: ${1} KiB before the storm, at most ${2} KiB during it"
[ "$2" -gt 0 ] && [ $(($2 - $1)) -le "$RSS_GROWTH_MAX_KB" ] && ok "RSS grew $(($2 - $1)) KiB (bound $RSS_GROWTH_MAX_KB)" ||
	bad "RSS ${1} -> ${2} KiB"
grep -q "holder 'gw-1' disconnected" "$TMPD/coord.log" && bad "gw-1 was disconnected: $(grep "holder 'gw-1' disconnected" "$TMPD/coord.log" | head -2)" ||
	ok "gw-1 kept its connection"

echo "5. gw-1's grants"
gaps=$(python3 "$STORM_PY" gaps --log "$TMPD/gw-1.log" --limit per-client \
	--window "base=$T_BASE-$T_STORM" --window "storm=$T_STORM-$T_END")
echo "$gaps" >"$TMPD/gaps.json"
for w in base storm; do
	echo "  $w: $(jf "$TMPD/gaps.json" '"%d grants, gap p50 %.1f ms, p99 %.1f ms, max %.1f ms; lease left at arrival >= %.3f s (round trip up to %.0f ms over the quickest, p99 %.0f ms); longest report interval %.1f ms" % tuple([d["'$w'"][k] * m for k, m in (("grants", 1), ("gap_p50", 1e3), ("gap_p99", 1e3), ("gap_max", 1e3), ("left_min", 1), ("rtt_excess_max", 1e3), ("rtt_excess_p99", 1e3), ("send_interval_max", 1e3))])')"
done
# With ~50 gaps a run, the p99 is the largest or the next: the bound is on the largest.
jf "$TMPD/gaps.json" 'int(d["storm"]["grants"] >= 10 and d["storm"]["gap_max"] * 1e3 <= '$((REFRESH_MS + TOL_MAX_MS))')' |
	grep -qx 1 && ok "storm: every gap within ${REFRESH_MS} + ${TOL_MAX_MS} ms: no grant missed" ||
	bad "storm: a gap over ${REFRESH_MS} + ${TOL_MAX_MS} ms (or too few grants)"
jf "$TMPD/gaps.json" 'int(d["storm"]["rtt_excess_max"] * 1e3 <= '$RTT_TOL_MS')' | grep -qx 1 &&
	ok "storm: every report answered within ${RTT_TOL_MS} ms of the quickest round trip" ||
	bad "storm: a report answered more than ${RTT_TOL_MS} ms later than the quickest"
n_samples=$(awk -v t0="$T_STORM" -v t1="$T_END" '$1 >= t0 && $1 <= t1' "$TMPD/samples.txt" | wc -l)
dead=$(awk -v t0="$T_STORM" -v t1="$T_END" '$1 >= t0 && $1 <= t1 && $2 != "live=True"' "$TMPD/samples.txt" | wc -l)
minrem=$(awk -v t0="$T_STORM" -v t1="$T_END" '$1 >= t0 && $1 <= t1 {split($3, r, "="); print r[2]}' "$TMPD/samples.txt" | sort -n | head -1)
[ "$n_samples" -gt 0 ] && [ "$dead" = 0 ] && ok "gw-1's lease live in all $n_samples samples (min remaining ${minrem} s)" ||
	bad "gw-1's lease not live in $dead of $n_samples samples"

echo "6. gw-2 against a fake coordinator"
sed 's/^/   fake: /' "$TMPD/fake.log"
kill -0 "$GW2_PID" 2>/dev/null && ok "gw-2 is still running" || bad "gw-2 exited"
st=$(in_f "$LL" status --pin-dir "$PIN-gw-2" -j 2>/dev/null)
echo "$st" >"$TMPD/gw-2-status.json"
jf "$TMPD/gw-2-status.json" 'int(d["policy_version"] == 1 and "out of bounds" in d["refused"]["reason"])' |
	grep -qx 1 && ok "policy version 2^64-1 refused; version 1 runs" ||
	bad "gw-2's policy state: $(head -c 300 "$TMPD/gw-2-status.json")"
jf "$TMPD/gw-2-status.json" 'int(d["limits"][0]["lease"]["rate"] <= 1000 and d["limits"][0]["lease"]["burst"] <= 100)' |
	grep -qx 1 && ok "the grant of rate 2^64-1 was clamped to the contract" || bad "gw-2's lease beyond the contract"
grep -q "stale grant for 'g'" "$TMPD/gw-2.log" && ok "the grant for another holder was not applied" ||
	bad "no stale grant in gw-2's log"
[ "$(grep -c "coordinator link down\|coordinator not reachable" "$TMPD/gw-2.log")" -ge 2 ] &&
	ok "garbage and oversized frames dropped the link: $(grep -o "coordinator link down ([^)]*)" "$TMPD/gw-2.log" | sort | uniq -c | tr -s ' ' | paste -sd';')" ||
	bad "gw-2's link was not dropped on garbage"
[ -n "$(in_f ip -d link show "$F_IF" | sed -n 's/.*prog\/xdp id \([0-9]*\).*/\1/p')" ] &&
	ok "gw-2's XDP program is still attached" || bad "gw-2's XDP program is gone"

[ "$fails" -eq 0 ] || ll_fail "$fails check(s) failed"
echo "ok: the connection storm: gw-1's grants on time, every stranger refused and counted"
