#!/bin/bash
# SPDX-License-Identifier: MIT
# A real Prometheus server scraping a real agent and a real coordinator:
# everything runs in this test's gateway namespace (the coordinator and both
# metrics endpoints on its loopback, Prometheus on a port free there), the
# clients send UDP from theirs. The agent enforces a local per-client limit
# and two global limits leased by the coordinator; the clients send past
# the per-client limit, so packets are denied. Then through Prometheus's
# HTTP API (/api/v1/query):
#  - both targets are up, and the alert rules of deploy/prometheus loaded;
#  - sum(leaseline_packets_total{verdict="denied"}) equals what the agent
#    counted (read from its /metrics once the traffic stopped), is above 0,
#    and allowed + denied equals what the clients sent;
#  - every metric the Grafana dashboard and the rules query was ingested.
set -u
source "$(dirname "$0")/lib.sh"
ll_init "${1:-}"
command -v curl >/dev/null || ll_skip "needs 'curl'"
command -v prometheus >/dev/null || ll_skip "needs 'prometheus' (scripts/install-deps.sh)"
ROOT=$(cd "$LL_NET_DIR/../.." && pwd)

RATE=20      # per-client tokens/s
BURST=10
SEND_PPS=100 # per client: 5x the rate
DURATION=3
NSRC=4
COORD_PORT=7450
AGENT_METRICS=127.0.0.1:9475
COORD_METRICS=127.0.0.1:9476
SCRAPE=1s

passed=0 failed=0
ok() {
	passed=$((passed + 1))
	echo "  ok    $*"
}
bad() {
	failed=$((failed + 1))
	echo "  FAIL  $*"
}
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ] || exit 1
	exit 0
}

ll_topo
ll_sources "$NSRC"
ll_bpffs
mkdir -p "$TMPD/state" "$TMPD/prom"
cat >"$TMPD/policy.yaml" <<EOF2
version: 1
limits:
  - {name: per-client, key: src-ip, rate: $RATE, burst: $BURST}
  - {name: total, key: none, scope: global, rate: 1M, burst: 1M}
  - {name: per-port, key: dst-port, scope: global, rate: 1M, burst: 1M}
rules:
  - {name: udp, match: {proto: udp, dst-port: $LL_PORT}, limits: [per-client, total, per-port]}
EOF2
cat >"$TMPD/coord.yaml" <<EOF2
listen: 127.0.0.1:$COORD_PORT
policy: policy.yaml
state-dir: state
lease: {ttl: 1s, refresh: 200ms}
metrics: $COORD_METRICS
EOF2
cat >"$TMPD/agent.yaml" <<EOF2
node: gw-prom-$$
interfaces:
  - {name: $LL_G_IF, mode: native}
pin-dir: $PIN
coordinator: {address: 127.0.0.1:$COORD_PORT}
metrics: $AGENT_METRICS
max-keys: 4096
EOF2
# nsenter itself, not the in_g function: $! must be the daemon (nsenter
# execs it), or cleanup would stop a subshell and leave the daemon running.
nsenter --net=/run/netns/"$LL_NS_G" "$LL" coord -c "$TMPD/coord.yaml" >"$TMPD/coord.log" 2>&1 &
LL_PIDS+=("$!")
ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"

# A port nobody listens on in the gateway namespace (ours alone).
PROM_PORT=$(in_g python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
[ -n "$PROM_PORT" ] || ll_fail "cannot find a free port"
PROM=http://127.0.0.1:$PROM_PORT
cp "$ROOT/deploy/prometheus/leaseline-rules.yml" "$TMPD/rules.yml"
cat >"$TMPD/prometheus.yml" <<EOF2
global:
  scrape_interval: $SCRAPE
  scrape_timeout: 900ms
  evaluation_interval: $SCRAPE
rule_files: [rules.yml]
scrape_configs:
  - job_name: leaseline-agent
    static_configs: [{targets: ['$AGENT_METRICS']}]
  - job_name: leaseline-coord
    static_configs: [{targets: ['$COORD_METRICS']}]
EOF2
nsenter --net=/run/netns/"$LL_NS_G" prometheus --config.file="$TMPD/prometheus.yml" --storage.tsdb.path="$TMPD/prom" \
	--storage.tsdb.retention.time=1h --web.listen-address="127.0.0.1:$PROM_PORT" \
	>"$TMPD/prometheus.log" 2>&1 &
PROM_PID=$!
LL_PIDS+=("$PROM_PID")
for ((i = 0; i < LL_WAIT_TRIES * 3; i++)); do
	in_g curl -sf --max-time 1 "$PROM/-/ready" >/dev/null && break
	kill -0 "$PROM_PID" 2>/dev/null || {
		tail -20 "$TMPD/prometheus.log"
		ll_fail "prometheus exited during start-up"
	}
	ll_sleep "$LL_POLL_S"
done
in_g curl -sf --max-time 1 "$PROM/-/ready" >/dev/null || ll_fail "prometheus not ready within 30 s"
ok "prometheus $(prometheus --version 2>&1 | awk 'NR == 1 {print $3}') ready on port $PROM_PORT (scrape every $SCRAPE)"

# query PROMQL: the instant vector as "labels value" lines (python3 parses).
query() {
	in_g curl -s --max-time 3 --data-urlencode "query=$1" "$PROM/api/v1/query" >"$TMPD/q.json" || return 1
	python3 - "$TMPD/q.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
if d.get("status") != "success":
    sys.exit("query failed: %s" % d)
for r in d["data"]["result"]:
    print(json.dumps(r["metric"], sort_keys=True), r["value"][1])
PY
}
# scalar PROMQL: the single value, or empty.
scalar() { query "$1" | awk 'NR == 1 {print $NF}'; }

# Both targets up, and the leases live (fail-closed until then: the global
# limits would deny everything).
for ((i = 0; i < LL_WAIT_TRIES * 2; i++)); do
	[ "$(scalar 'sum(up{job=~"leaseline-agent|leaseline-coord"})')" = 2 ] &&
		[ "$(scalar 'count(leaseline_lease_remaining_seconds > 0)')" = 2 ] && break
	ll_sleep 0.2
done
up=$(query 'up{job=~"leaseline-.*"}' | tr '\n' ' ')
[ "$(scalar 'sum(up{job=~"leaseline-agent|leaseline-coord"})')" = 2 ] &&
	ok "both targets up: $up" || bad "targets: $up"
[ "$(scalar 'count(leaseline_lease_remaining_seconds > 0)')" = 2 ] &&
	ok "Prometheus sees both leases live on the gateway" ||
	bad "leases not live: $(query leaseline_lease_remaining_seconds | tr '\n' ' ')"
rules=$(in_g curl -s --max-time 3 "$PROM/api/v1/rules" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(len(g["rules"]) for g in d["data"]["groups"]))')
want=$(grep -c -- '- alert:' "$ROOT/deploy/prometheus/leaseline-rules.yml")
[ "$rules" = "$want" ] && ok "the $want alert rules of deploy/prometheus loaded" ||
	bad "rules loaded: ${rules:-none}, expected $want"

ll_recv_start "$TMPD/recv.json" 60
ll_send "$TMPD/sent.json" "$DURATION" "$LL_SRC_FIRST-$LL_SRC_LAST:$SEND_PPS" || ll_fail "the sender failed"
ll_recv_stop

# What the agent counted, from its own endpoint, now that nothing is sent.
in_g curl -s --max-time 2 "http://$AGENT_METRICS/metrics" >"$TMPD/agent.txt"
agent_denied=$(awk '/^leaseline_packets_total\{.*verdict="denied"/ {s += $NF} END {print s + 0}' "$TMPD/agent.txt")
agent_allowed=$(awk '/^leaseline_packets_total\{limit="per-client",verdict="allowed"/ {print $NF}' "$TMPD/agent.txt")
sent=$(python3 -c 'import json, sys; print(sum(s["sent"] for s in json.load(open(sys.argv[1]))["sources"].values()))' "$TMPD/sent.json")
recv=$(python3 -c 'import json, sys; print(sum(s["count"] for s in json.load(open(sys.argv[1]))["sources"].values()))' "$TMPD/recv.json")
echo "  sent $sent, received $recv; the agent counted denied $agent_denied, per-client allowed $agent_allowed"

# The PromQL answer once Prometheus has scraped past the end of the traffic
# (bounded: 20 scrape intervals).
Q='sum(leaseline_packets_total{job="leaseline-agent",verdict="denied"})'
for ((i = 0; i < 100; i++)); do
	prom_denied=$(scalar "$Q")
	[ "$prom_denied" = "$agent_denied" ] && break
	ll_sleep 0.2
done
echo "  PromQL $Q = ${prom_denied:-none}"
[ "${prom_denied:-x}" = "$agent_denied" ] &&
	ok "Prometheus answers $prom_denied denied packets, what the agent counted" ||
	bad "Prometheus answers ${prom_denied:-nothing}, the agent counted $agent_denied"
[ "${agent_denied:-0}" -gt 0 ] && ok "packets were denied ($agent_denied of $sent)" ||
	bad "nothing denied: $sent sent at ${SEND_PPS}/s per client against $RATE/s"
[ $((agent_denied + ${agent_allowed:-0})) -eq "$sent" ] && [ "${agent_allowed:-0}" -eq "$recv" ] &&
	ok "allowed $agent_allowed + denied $agent_denied = $sent sent; allowed = received" ||
	bad "allowed ${agent_allowed:-?} + denied $agent_denied vs sent $sent, received $recv"
prom_rule=$(scalar 'sum(leaseline_rule_packets_total{job="leaseline-agent",rule="udp",result="dropped"})')
[ "$prom_rule" = "$agent_denied" ] && ok "the rule's drops in Prometheus match too ($prom_rule)" ||
	bad "rule udp dropped ${prom_rule:-nothing} in Prometheus, denied $agent_denied"
inc=$(scalar 'sum(increase(leaseline_packets_total{job="leaseline-agent",verdict="denied"}[5m]))')
python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if v > 0 else 1)" "${inc:-0}" &&
	ok "increase(denied[5m]) = $inc (> 0: extrapolated from the samples)" ||
	bad "increase(denied[5m]) = ${inc:-nothing}"

# Every metric the dashboard and the rules query, ingested from the two.
in_g curl -s --max-time 3 "$PROM/api/v1/label/__name__/values" |
	python3 -c 'import json, sys; print("\n".join(sorted(json.load(sys.stdin)["data"])))' >"$TMPD/ingested"
python3 "$ROOT/tests/build/metric_names.py" queried "$ROOT" >"$TMPD/queried"
missing=$(comm -23 "$TMPD/queried" "$TMPD/ingested" | tr '\n' ' ')
[ -z "$missing" ] && ok "all $(wc -l <"$TMPD/queried") metrics the dashboard and rules query were ingested" ||
	bad "queried but not scraped: $missing"
# The coordinator's telemetry, as Prometheus has it: the aggregate limit
# leased 1M/s to a gateway that admitted a few hundred packets wasted most of
# it; the bound is positive while the lease lives; the light cohort (demand
# far below the target) got what it offered while it sent (averaged over the
# scrapes that had a sample: none once the clients stopped, nothing offered).
waste=$(scalar 'leaseline_coord_lease_waste_total{limit="total"}')
bound=$(scalar 'leaseline_coord_overshoot_bound{limit="total"}')
fair=$(scalar 'avg_over_time(leaseline_coord_fairness{limit="total",cohort="light"}[1m])')
echo "  coordinator: waste ${waste:-none} tokens, overshoot bound ${bound:-none}, fairness light ${fair:-none}"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 1e5 and float(sys.argv[2]) > 0 else 1)" \
	"${waste:-0}" "${bound:-0}" && ok "waste and overshoot bound of the aggregate limit are there and positive" ||
	bad "waste ${waste:-none}, bound ${bound:-none}"
python3 -c "import sys; sys.exit(0 if 0.5 < float(sys.argv[1]) < 1.5 else 1)" "${fair:-0}" &&
	ok "fairness of the light cohort while sending: $fair" || bad "fairness of limit total: ${fair:-no sample}"
build=$(query leaseline_build_info | wc -l)
[ "$build" = 2 ] && ok "leaseline_build_info from both daemons" || bad "leaseline_build_info: $build series"

finish
