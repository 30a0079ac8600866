#!/bin/bash
# SPDX-License-Identifier: MIT
# Mutual TLS between agents and the coordinator (reference §6.2), with
# throwaway certificates made by the openssl command (tests/tls/mkcerts.sh):
#   1. a coordinator listening beyond loopback without tls: refuses to start
#      (exit 2, the reason on stderr);
#   2. over TLS, a real agent (gw-1, its own certificate) gets the policy and a
#      live lease and attaches;
#   3. a stranger with a valid certificate for gw-1 saying HELLO as gw-2 is
#      refused and counted, and the real gw-1 keeps its connection;
#   4. a certificate from another CA, and an agent without TLS, fail the
#      handshake and are counted; an agent whose CA did not sign the
#      coordinator's certificate refuses the coordinator;
#   5. new certificates on SIGHUP, on both sides: the coordinator presents its
#      new one to new connections, and gw-1's lease stays live throughout;
#   6. one certificate naming gw-3 and gw-4 serves one holder: gw-4 is
#      refused while gw-3 is connected.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
for t in openssl curl; do
	command -v "$t" >/dev/null || ll_skip "needs '$t'"
done

PORT=7452
CM=127.0.0.1:9477 # the coordinator's metrics, in the client namespace
fails=0
ok() { echo "  ok    $*"; }
bad() {
	echo "  FAIL  $*"
	fails=$((fails + 1))
}
coord_metric() {
	in_c curl -s --max-time 2 "http://$CM/metrics" | sed -n "s/^$1 \\([0-9.]*\\)\$/\\1/p"
}
# wait_log FILE PATTERN: bounded wait (10 s) until FILE has PATTERN.
wait_log() { ll_wait_until 10 ll_log_has "$1" "$2"; }

ll_topo
ll_bpffs
PKI=$TMPD/pki
mkdir -p "$PKI"
bash "$(dirname "$0")/../tls/mkcerts.sh" "$PKI" "$LL_C_ADDR" gw-1 gw-2 ||
	ll_fail "cannot make the test certificates"
mkdir -p "$TMPD/state"
cat >"$TMPD/policy.yaml" <<EOF
version: 1
limits:
  - {name: per-client, key: src-ip, scope: global, rate: 500, burst: 200}
rules:
  - {name: test-udp, match: {proto: udp, dst-port: $LL_PORT}, limits: [per-client]}
EOF

echo "1. beyond loopback without tls:"
cat >"$TMPD/coord-plain.yaml" <<EOF
listen: $LL_C_ADDR:$PORT
policy: policy.yaml
state-dir: state
EOF
in_c "$LL" coord -c "$TMPD/coord-plain.yaml" >"$TMPD/coord-plain.log" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "beyond loopback without tls" "$TMPD/coord-plain.log"; then
	ok "refused to start (exit 2): $(grep -o "listen.*tls:" "$TMPD/coord-plain.log" | head -1)"
else
	bad "exit $rc, log: $(head -2 "$TMPD/coord-plain.log")"
fi

cat >"$TMPD/coord.yaml" <<EOF
listen: $LL_C_ADDR:$PORT
policy: policy.yaml
state-dir: state
lease: {ttl: 1s, refresh: 200ms}
metrics: $CM
tls: {cert: pki/coord.crt, key: pki/coord.key, ca: pki/ca.crt}
EOF
nsenter --net=/run/netns/"$LL_NS_C" "$LL" coord -c "$TMPD/coord.yaml" -v >"$TMPD/coord.log" 2>&1 &
COORD_PID=$!
LL_PIDS+=("$COORD_PID")
wait_log "$TMPD/coord.log" "coordinator listening on .*(mutual TLS)" ||
	ll_fail "the coordinator did not listen: $(tail -3 "$TMPD/coord.log")"

# agent_cfg FILE NODE CERT CA [PIN] [IF]: a coordinated agent over TLS (CERT ""
# = no tls:), attached to IF (default the gateway's veth).
agent_cfg() {
	{
		echo "node: $2"
		echo "interfaces: [{name: ${6:-$LL_G_IF}, mode: native}]"
		echo "pin-dir: ${5:-$PIN-$2}"
		if [ -n "$3" ]; then
			echo "coordinator: {address: $LL_C_ADDR:$PORT}"
			echo "tls: {cert: pki/$3.crt, key: pki/$3.key, ca: pki/$4.crt}"
		else # a plain stranger, beyond loopback: it must say so
			echo "coordinator: {address: $LL_C_ADDR:$PORT, insecure: true}"
		fi
		echo "max-keys: 4096"
	} >"$1"
}
# stranger_if N: a veth pair of its own inside the gateway namespace (gone
# with it) for stranger N: an interface has one owner (one pin dir), so
# strangers running beside gw-1 cannot attach where it did.
stranger_if() {
	local a="vs$1$$" b="vt$1$$"
	ip -n "$LL_NS_G" link add "$a" type veth peer name "$b" >/dev/null 2>&1 &&
		ip -n "$LL_NS_G" link set "$a" up && ip -n "$LL_NS_G" link set "$b" up ||
		ll_fail "cannot make a veth pair for stranger $1"
	echo "$a"
}
# agent_bg CONFIG LOG: an agent that may never attach (a stranger); sets BG_PID.
agent_bg() {
	nsenter --net=/run/netns/"$LL_NS_G" "$LL" agent -c "$1" -v >"$2" 2>&1 &
	BG_PID=$!
	LL_PIDS+=("$BG_PID")
}

echo "2. a real agent over TLS:"
agent_cfg "$TMPD/gw-1.yaml" gw-1 gw-1 ca "$PIN"
ll_agent_start "$TMPD/gw-1.yaml" "$TMPD/gw-1.log" -v
GW1_PID=$AGENT_PID
wait_log "$TMPD/gw-1.log" "connected to coordinator .*(TLS)" && ok "gw-1 connected over TLS" ||
	bad "gw-1 did not say it connected over TLS"
grep -q "holder 'gw-1' connected" "$TMPD/coord.log" && ok "the coordinator took gw-1" ||
	bad "the coordinator did not take gw-1"

echo "3. a valid certificate for gw-1, HELLO as gw-2:"
agent_cfg "$TMPD/liar.yaml" gw-2 gw-1 ca "" "$(stranger_if 1)"
agent_bg "$TMPD/liar.yaml" "$TMPD/liar.log"
wait_log "$TMPD/coord.log" "holder 'gw-2' from $LL_G_ADDR refused: its certificate does not name it" &&
	ok "refused, with its address: $(grep -o "holder 'gw-2'.*" "$TMPD/coord.log" | head -1)" ||
	bad "no refusal of gw-2 in the coordinator log"
[ "$(coord_metric leaseline_coord_tls_refused_total)" -ge 1 ] 2>/dev/null &&
	ok "leaseline_coord_tls_refused_total $(coord_metric leaseline_coord_tls_refused_total)" ||
	bad "tls_refused_total is '$(coord_metric leaseline_coord_tls_refused_total)'"
grep -q "holder 'gw-2' connected" "$TMPD/coord.log" && bad "gw-2 was taken" || ok "gw-2 never became a holder"
ll_stop_pid "$BG_PID"

echo "4. strangers without a trusted certificate:"
before=$(coord_metric leaseline_coord_tls_failures_total)
agent_cfg "$TMPD/rogue.yaml" gw-1 rogue ca "" "$(stranger_if 2)"
agent_bg "$TMPD/rogue.yaml" "$TMPD/rogue.log"
ROGUE_PID=$BG_PID
agent_cfg "$TMPD/plain.yaml" gw-2 "" "" "" "$(stranger_if 3)"
agent_bg "$TMPD/plain.yaml" "$TMPD/plain.log"
PLAIN_PID=$BG_PID
agent_cfg "$TMPD/wrongca.yaml" gw-2 gw-2 rogue-ca "$PIN-wrongca" "$(stranger_if 4)" # the plain one holds gw-2's pins
agent_bg "$TMPD/wrongca.yaml" "$TMPD/wrongca.log"
WRONGCA_PID=$BG_PID
wait_log "$TMPD/wrongca.log" "coordinator link down (TLS handshake" &&
	ok "an agent that does not trust the coordinator's CA refuses it" ||
	bad "the agent with the wrong CA did not refuse: $(tail -2 "$TMPD/wrongca.log")"
# Backoff: a stranger that keeps failing the handshake redials at most
# about once a second, not ten times (before the fix: ~30 a second from
# these three), checked over the next 3 s (time that must pass: a sleep).
before=$(coord_metric leaseline_coord_tls_failures_total)
ll_sleep 3
after=$(coord_metric leaseline_coord_tls_failures_total)
[ $((${after:-0} - ${before:-0})) -le 20 ] &&
	ok "failing strangers back off: $((${after:-0} - ${before:-0})) failed handshakes from 3 of them in 3 s" ||
	bad "failing strangers redial too fast: $((${after:-0} - ${before:-0})) handshakes in 3 s"
for ((i = 0; i < LL_WAIT_TRIES; i++)); do
	after=$(coord_metric leaseline_coord_tls_failures_total)
	[ "${after:-0}" -ge $((${before:-0} + 2)) ] && break
	ll_sleep "$LL_POLL_S"
done
[ "${after:-0}" -ge $((${before:-0} + 2)) ] &&
	ok "handshakes failed and counted: tls_failures_total ${before:-0} -> $after" ||
	bad "tls_failures_total ${before:-0} -> '${after:-}'"
grep -q "TLS handshake from $LL_G_ADDR failed" "$TMPD/coord.log" &&
	ok "logged with the address" || bad "no handshake failure logged with the address"
# Which side refused, and why (X509_verify_cert_error_string), each reason
# said at most once a minute however often it recurs.
grep -q "failed: refused here: the peer's certificate: unable to get local issuer certificate" "$TMPD/coord.log" &&
	ok "the coordinator says why it refused the rogue CA's certificate" ||
	bad "no reason for the rogue's refusal: $(grep "TLS handshake from" "$TMPD/coord.log" | head -2)"
n=$(grep -c "failed: refused here: the peer's certificate: unable to get local issuer certificate" "$TMPD/coord.log")
[ "$n" -le 2 ] && ok "said $n time(s) for ${after:-0} failures" || bad "the rogue's refusal said $n times"
grep -q "coordinator link down (TLS handshake: refused here: the peer's certificate: " "$TMPD/wrongca.log" &&
	ok "the agent says why it refused the coordinator: $(grep -o "refused here: the peer's certificate: [^)]*" "$TMPD/wrongca.log" | head -1)" ||
	bad "the wrong-CA agent gave no reason: $(grep "link down" "$TMPD/wrongca.log" | head -2)"
grep -q "coordinator link down (TLS .*: refused by the peer: " "$TMPD/rogue.log" &&
	ok "the rogue agent is told the coordinator refused it: $(grep -o "refused by the peer: [^)]*" "$TMPD/rogue.log" | head -1)" ||
	bad "the rogue agent does not say who refused: $(grep "link down\|not reachable" "$TMPD/rogue.log" | head -2)"
for log in rogue plain wrongca; do
	grep -q "policy version .* applied" "$TMPD/$log.log" && bad "the $log agent got the policy"
done
grep -q "holder 'gw-1' disconnected (replaced" "$TMPD/coord.log" &&
	bad "the stranger with a rogue certificate for gw-1 replaced the real one" ||
	ok "the real gw-1 kept its connection"
ll_stop_pid "$ROGUE_PID"
ll_stop_pid "$PLAIN_PID"
ll_stop_pid "$WRONGCA_PID"

echo "5. new certificates on SIGHUP:"
old_serial=$(openssl x509 -in "$PKI/coord.crt" -noout -serial)
mkdir -p "$PKI/new"
bash "$(dirname "$0")/../tls/mkcerts.sh" "$PKI/new" "$LL_C_ADDR" gw-1 >/dev/null 2>&1 ||
	ll_fail "cannot make the second certificates"
# Same CA: sign a fresh coordinator certificate with the first CA's key.
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$PKI/coord2.key" \
	-out "$PKI/coord2.csr" -subj "/CN=coord" 2>/dev/null &&
	printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$LL_C_ADDR" >"$PKI/coord2.ext" &&
	openssl x509 -req -in "$PKI/coord2.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-out "$PKI/coord2.crt" -days 1 -extfile "$PKI/coord2.ext" 2>/dev/null ||
	ll_fail "cannot sign the second coordinator certificate"
new_serial=$(openssl x509 -in "$PKI/coord2.crt" -noout -serial)
cp "$PKI/coord2.key" "$PKI/coord.key"
cp "$PKI/coord2.crt" "$PKI/coord.crt"
# gw-1's lease, sampled while both sides reload.
python3 - "$LL" "$PIN" "$LL_NS_G" >"$TMPD/lease-samples.txt" 2>&1 <<'PY' &
import json, subprocess, sys, time
ll, pin, ns = sys.argv[1:4]
end = time.monotonic() + 3.0
while time.monotonic() < end:
    out = subprocess.run(["nsenter", "--net=/run/netns/" + ns, ll, "status", "--pin-dir", pin, "-j"],
                         capture_output=True, text=True, timeout=5).stdout
    for l in json.loads(out).get("limits", []):
        if "lease" in l:
            print("%.3f live=%s remaining=%.3f" % (time.monotonic(), l["lease"]["live"],
                                                   l["lease"]["remaining_seconds"]), flush=True)
    time.sleep(0.1)
PY
SAMPLER=$!
# The reloads once the sampler has its first sample of the lease.
ll_wait_until 5 test -s "$TMPD/lease-samples.txt" || bad "the lease sampler took no sample in 5 s"
kill -HUP "$COORD_PID"
kill -HUP "$GW1_PID"
wait_log "$TMPD/coord.log" "tls: certificate '.*coord.crt' reloaded" && ok "the coordinator reloaded its certificate" ||
	bad "no reload in the coordinator log"
wait_log "$TMPD/gw-1.log" "tls: certificate '.*gw-1.crt' loaded for the coordinator link" &&
	ok "gw-1 reloaded its certificate" || bad "no reload in gw-1's log"
served=$(in_g openssl s_client -connect "$LL_C_ADDR:$PORT" -cert "$PKI/gw-2.crt" -key "$PKI/gw-2.key" \
	-CAfile "$PKI/ca.crt" </dev/null 2>/dev/null | openssl x509 -noout -serial 2>/dev/null)
[ -n "$served" ] && [ "$served" = "$new_serial" ] && [ "$served" != "$old_serial" ] &&
	ok "a new connection gets the new certificate ($served)" ||
	bad "a new connection got '$served' (old $old_serial, new $new_serial)"
wait "$SAMPLER"
if [ -s "$TMPD/lease-samples.txt" ] && ! grep -q "live=False" "$TMPD/lease-samples.txt"; then
	ok "gw-1's lease stayed live through both reloads ($(wc -l <"$TMPD/lease-samples.txt") samples, min remaining $(awk -F'remaining=' '{print $2}' "$TMPD/lease-samples.txt" | sort -n | head -1) s)"
else
	bad "gw-1's lease was not live throughout: $(grep -m3 "live=False" "$TMPD/lease-samples.txt")"
fi
grep -q "holder 'gw-1' disconnected" "$TMPD/coord.log" && bad "gw-1 was disconnected by a reload" ||
	ok "gw-1's connection survived"

echo "6. one certificate is one holder (gw-3 and gw-4 on one certificate):"
agent_cfg "$TMPD/pair3.yaml" gw-3 pair ca "" "$(stranger_if 5)"
agent_bg "$TMPD/pair3.yaml" "$TMPD/pair3.log"
wait_log "$TMPD/coord.log" "holder 'gw-3' connected" && ok "gw-3 served" || bad "gw-3 was not served"
agent_cfg "$TMPD/pair4.yaml" gw-4 pair ca "" "$(stranger_if 6)"
agent_bg "$TMPD/pair4.yaml" "$TMPD/pair4.log"
wait_log "$TMPD/coord.log" "holder 'gw-4' from $LL_G_ADDR refused: its certificate already serves holder 'gw-3'" &&
	ok "gw-4 on the same certificate refused" || bad "gw-4 was not refused"
grep -q "holder 'gw-4' connected" "$TMPD/coord.log" && bad "gw-4 became a second holder" ||
	ok "gw-4 never became a holder"

[ "$fails" -eq 0 ] || ll_fail "$fails check(s) failed"
echo "ok: mutual TLS: holders are who their certificates say, strangers are refused and counted"
