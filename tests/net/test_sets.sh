#!/bin/bash
# SPDX-License-Identifier: MIT
# Prefix sets as allow and deny lists on a real veth. 62 clients send UDP
# at 100/s for T s to a gateway whose policy has: an allowlist rule
# (src-set allow.txt, action pass) holding one /28, a denylist rule
# (src-set deny.txt, action drop) holding another /28 among 100,000 other
# prefixes, then a per-client limit (20/s, burst 10) for everyone else.
# Allowed clients get all they send, denied ones nothing, the rest their
# contract; the gateway's rule counters and ethtool's XDP drops agree with
# the receiver. A reload moves the denylist to another /28 (those clients
# now get nothing, the old ones the limit's contract); a reload with a bad
# set file is refused and the running lists keep holding.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"

SEND_PPS=100
DURATION=3
SKEW=0.2 # s of rate: a Python sender's stamps around the XDP run (see test_enforce.sh)

ll_topo
ll_sources 62 # 198.18.0.10 .. 198.18.0.71
ll_bpffs

# deny.txt: the /28 given, then 100,000 prefixes no client is in
# (60,000 IPv4 /32s in 198.19.0.0/16 and above, 40,000 IPv6 /64s).
deny_file() {
	python3 - "$1" "$2" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("# denylist (written by test_sets.sh)\n%s\n" % sys.argv[2])
    for i in range(60000):
        f.write("198.%d.%d.%d\n" % (19 + (i >> 16), (i >> 8) & 0xff, i & 0xff))
    for i in range(40000):
        f.write("2001:db8:%x:%x::/64\n" % (i >> 8, i & 0xff))
EOF
}
printf '# allowlist\n198.18.0.16/28\n2001:db8:a11::/48\n' >"$TMPD/allow.txt"
deny_file "$TMPD/deny.txt" 198.18.0.32/28
cat >"$TMPD/policy.yaml" <<EOF
version: 1
limits:
  - {name: per-client, key: src-ip, rate: 20, burst: 10}
rules:
  - {name: allow, match: {proto: udp, dst-port: $LL_PORT, src-set: allow.txt}, action: pass}
  - {name: deny, match: {src-set: deny.txt}, action: drop}
  - name: test-udp
    match: {proto: udp, dst-port: $LL_PORT, src: 198.18.0.0/15}
    limits: [per-client]
EOF
"$LL" check "$TMPD/policy.yaml" >"$TMPD/check.out" || ll_fail "leaseline check refused the policy"
grep -q "3 rules, 2 prefix sets of 100003 prefixes)" "$TMPD/check.out" ||
	ll_fail "leaseline check does not count the sets: $(cat "$TMPD/check.out")"
ll_agent_cfg "$TMPD/agent.yaml" policy.yaml
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"

xdp_drops() {
	in_g ethtool -S $LL_G_IF 2>/dev/null |
		awk -F: '/rx_queue_[0-9]+_xdp_drops/ {n += $2; f = 1} END {if (f) print n}'
}

# round NAME LIST...: each LIST is FIRST-LAST:KIND with KIND allow, deny or
# limit. Checks the receiver against the lists, then the gateway's counters
# (this round's deltas) against the receiver.
round() {
	local name=$1 d0 d1
	shift
	ll_status -j >"$TMPD/st0-$name.json" || ll_fail "leaseline status -j failed"
	d0=$(xdp_drops)
	ll_recv_start "$TMPD/recv-$name.json" 60
	ll_send "$TMPD/sent-$name.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" ||
		ll_fail "the sender failed"
	ll_recv_stop
	d1=$(xdp_drops)
	ll_status -j >"$TMPD/st1-$name.json" || ll_fail "leaseline status -j failed"
	python3 - "$TMPD" "$name" "$SKEW" "${d0:-}" "${d1:-}" "$@" <<'EOF' || FAILED=1
import ipaddress, json, sys

tmpd, name, skew, d0, d1 = sys.argv[1:6]
skew = float(skew)
lists = []
for t in sys.argv[6:]:
    span, kind = t.split(":")
    a, b = span.split("-")
    lists.append((int(ipaddress.ip_address(a)), int(ipaddress.ip_address(b)), kind))
sent = json.load(open("%s/sent-%s.json" % (tmpd, name)))["sources"]
recv = json.load(open("%s/recv-%s.json" % (tmpd, name)))["sources"]
st0 = json.load(open("%s/st0-%s.json" % (tmpd, name)))
st1 = json.load(open("%s/st1-%s.json" % (tmpd, name)))
bad, tot = [], {"allow": [0, 0], "deny": [0, 0], "limit": [0, 0]}
for src, s in sent.items():
    ip = int(ipaddress.ip_address(src))
    kind = [k for lo, hi, k in lists if lo <= ip <= hi]
    if len(kind) != 1:
        bad.append("%s: no list" % src)
        continue
    kind = kind[0]
    got, t = recv.get(src, {"count": 0})["count"], s["last"] - s["first"]
    tot[kind][0] += s["sent"]
    tot[kind][1] += got
    if kind == "allow" and got != s["sent"]:
        bad.append("%s (allowed): received %d of %d" % (src, got, s["sent"]))
    if kind == "deny" and got != 0:
        bad.append("%s (denied): received %d of %d" % (src, got, s["sent"]))
    if kind == "limit":
        upper, lower = 10 + 20 * (t + skew) + 1, max(0, 10 + 20 * (t - skew) - 1)
        if not lower <= got <= upper:
            bad.append("%s: received %d, the limit allows %.0f..%.0f" % (src, got, lower, upper))
for k, (s, r) in sorted(tot.items()):
    print("  %s %-5s sent %5d received %5d" % (name, k, s, r))

def rule(st, n):
    r = [x for x in st["rules"] if x["name"] == n]
    return r[0] if r else {"matched_packets": 0, "dropped_packets": 0}

delta = {n: (rule(st1, n)["matched_packets"] - rule(st0, n)["matched_packets"],
             rule(st1, n)["dropped_packets"] - rule(st0, n)["dropped_packets"])
         for n in ("allow", "deny", "test-udp")}
print("  %s gateway rules (matched, dropped): %r; ethtool xdp_drops +%s"
      % (name, delta, (int(d1) - int(d0)) if d0 and d1 else "n/a"))
acts = {x["name"]: x.get("action") for x in st1["rules"]}
if (acts.get("allow"), acts.get("deny"), acts.get("test-udp")) != ("pass", "drop", None):
    bad.append("status shows the rules' actions as %r" % acts)
if delta["allow"] != (tot["allow"][0], 0):
    bad.append("rule allow counted %r, sent %d" % (delta["allow"], tot["allow"][0]))
if delta["deny"] != (tot["deny"][0], tot["deny"][0]):
    bad.append("rule deny counted %r, sent %d" % (delta["deny"], tot["deny"][0]))
lim_drops = delta["test-udp"][1]
if delta["test-udp"][0] - lim_drops != tot["limit"][1]:
    bad.append("rule test-udp admitted %d, received %d" % (delta["test-udp"][0] - lim_drops,
                                                          tot["limit"][1]))
if d0 and d1 and int(d1) - int(d0) != tot["deny"][0] + lim_drops:
    bad.append("ethtool xdp_drops +%d != denied %d + limited %d"
               % (int(d1) - int(d0), tot["deny"][0], lim_drops))
for b in bad[:10]:
    print("  " + b)
if bad:
    print("FAIL: %s: %d problem(s)" % (name, len(bad)))
    sys.exit(1)
print("ok: %s: the allowlist passed, the denylist dropped, the rest held to the limit" % name)
EOF
}

reload_to() {
	local v=$1
	sed -i "s/^version: .*/version: $v/" "$TMPD/policy.yaml"
	: >"$TMPD/agent.log.mark"
	kill -HUP "$AGENT_PID"
	for ((i = 0; i < LL_WAIT_TRIES * 3; i++)); do
		grep -q "policy version $v applied\|reload refused" "$TMPD/agent.log" && break
		sleep "$LL_POLL_S"
	done
}

FAILED=0
round lists 198.18.0.10-198.18.0.15:limit 198.18.0.16-198.18.0.31:allow \
	198.18.0.32-198.18.0.47:deny 198.18.0.48-198.18.0.71:limit

# The denylist moves to .48/28: its clients now get nothing; .32/28, never
# charged while denied, now get the limit's contract from a full bucket.
deny_file "$TMPD/deny.txt" 198.18.0.48/28
reload_to 2
grep -q "policy version 2 applied" "$TMPD/agent.log" || ll_fail "the reload was not applied"
round moved 198.18.0.10-198.18.0.15:limit 198.18.0.16-198.18.0.31:allow \
	198.18.0.32-198.18.0.47:limit 198.18.0.48-198.18.0.63:deny 198.18.0.64-198.18.0.71:limit

# A bad line in the set file: refused, and version 2's lists keep holding.
printf '198.18.0.32/28\n198.18.0.33/28\n' >"$TMPD/deny.txt"
reload_to 3
grep -q "reload refused; policy version 2 keeps enforcing" "$TMPD/agent.log" ||
	ll_fail "a bad set file was not refused"
grep -q "deny.txt:2:1: prefix '198.18.0.33/28' has host bits set" "$TMPD/agent.log" ||
	ll_fail "the refusal does not name the set file's line"
"$LL" check "$TMPD/policy.yaml" >"$TMPD/check.out" 2>&1
[ $? -eq 2 ] && grep -q "deny.txt:2:1: " "$TMPD/check.out" ||
	ll_fail "leaseline check did not refuse the bad set file with exit 2 at its line"
sleep 1 # buckets of the limited clients refill a little: the bound covers it
round kept 198.18.0.10-198.18.0.15:limit 198.18.0.16-198.18.0.31:allow \
	198.18.0.32-198.18.0.47:limit 198.18.0.48-198.18.0.63:deny 198.18.0.64-198.18.0.71:limit

[ "$FAILED" = 0 ] || ll_fail "a list did not hold"
echo "ok: sets: an allowlist and a denylist of 100k prefixes held on a real veth, across a reload and a refused one"
