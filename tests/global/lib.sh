# SPDX-License-Identifier: MIT
# Multi-gateway harness for global limits (docs/global.md). Sourced by
# tests/net/test_global_*.sh, scripts/bench-global.sh and scripts/demo-global.sh,
# on top of tests/net/lib.sh (ll_init, ll_fail, ll_stop_pid, the cleanup trap).
#
# Everything carries the test's pid ($$) in its name and is removed on every exit
# path (reference §8):
#   namespaces  llk$$ (coordinator), llc$$ (client), llg$$-<i> (gateway i = 1..N)
#   data        veth dc<i>x$$ (client) <-> dg<i>x$$ (gateway i), 198.18.<i>.1/24 and
#               198.18.<i>.2/24; the agent of gateway i attaches (native XDP) to dg<i>x$$
#   control     bridge kbr$$ in llk$$ with 198.19.0.1/24; one veth per gateway,
#               kk<i>x$$ (bridge port) <-> kg<i>x$$ (gateway, 198.19.0.<10+i>/24)
#   bpffs       one private mount under the temp dir; pin dirs <tag>-gw-<i> on it
#   keys        198.18.128.0/17 is local in llc$$ (a `local` route on lo), so the
#               sender can use any address of it as a source: key k of a
#               many-key run is 198.18.128.1 + k (gsend.py --kphase); each gateway
#               routes the block back via 198.18.<i>.1, so reverse-path filtering
#               (strict or loose) accepts it whatever the host's rp_filter is
# Cutting gateway i's control link = setting its bridge port kk<i>x$$ down: the
# gateway's own stack sees nothing (no error, no route change), its packets to the
# coordinator are dropped at the switch, as in a real partition.
#
# Clock: every timestamp is CLOCK_MONOTONIC (time.monotonic_ns(), bpf_ktime_get_ns,
# the leases' expiry). gl_mark writes $EPOCHREALTIME (no fork); ganalyze.py maps it
# to CLOCK_MONOTONIC with the offset it measures.

GL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../net/lib.sh
source "$GL_DIR/../net/lib.sh"

GL_PORT=7000 # UDP port the global limit's rule matches
GL_COORD_ADDR=198.19.0.1
GL_COORD_PORT=7450
GL_LIMIT=global-udp
# Source addresses of a many-key run (key k = GL_KEY_BASE + k): a block that
# meets neither the data subnets 198.18.<i>.0/24 nor the control 198.19.0.0/24.
GL_KEY_NET=198.18.128.0/17
GL_KEY_BASE=198.18.128.1
GL_KEY_MAX=32766 # addresses of GL_KEY_NET after GL_KEY_BASE, the last one excluded

# gl_init BUILD_DIR N: checks, names, temp dir, cleanup trap.
gl_init() {
	ll_init "${1:-}"
	GL_N=${2:-8}
	if [ "$GL_N" -lt 1 ] || [ "$GL_N" -gt 32 ]; then
		ll_fail "gl_init: 1..32 gateways, got $GL_N"
	fi
	command -v curl >/dev/null || ll_skip "needs 'curl'"
	GL_NS_K=llk$$
	GL_NS_C=$LL_NS_C
	GL_BR=kbr$$
	COORD_PID=
	SAMPLE_PID=
	SEND_PID=
	GL_AGENT_PIDS=()
	GL_RECV_PIDS=()
	GL_STOPPED=()
	trap gl_cleanup EXIT
}

gl_ns_g() { echo "llg$$-$1"; }
gl_if_c() { echo "dc$1x$$"; }
gl_if_g() { echo "dg$1x$$"; }
gl_if_kb() { echo "kk$1x$$"; }
gl_if_kg() { echo "kg$1x$$"; }

# Wake stopped agents first (a stopped process ignores TERM until continued), stop
# everything at once, then let tests/net/lib.sh wait, delete namespaces and unmount.
gl_cleanup() {
	local rc=$? p
	for p in "${GL_STOPPED[@]+"${GL_STOPPED[@]}"}"; do
		kill -CONT "$p" 2>/dev/null
	done
	for p in "${LL_PIDS[@]+"${LL_PIDS[@]}"}"; do
		kill -TERM "$p" 2>/dev/null
	done
	(exit "$rc")
	ll_cleanup
}

gl_track() { LL_PIDS+=("$1"); }

# Names of MAC addresses inside a namespace.
gl_mac() { ip -n "$1" -o link show "$2" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'; }

gl_topo() {
	local i g
	ip netns add "$GL_NS_K" || ll_fail "cannot create netns $GL_NS_K"
	LL_NETNS+=("$GL_NS_K")
	ip netns add "$GL_NS_C" || ll_fail "cannot create netns $GL_NS_C"
	LL_NETNS+=("$GL_NS_C")
	ip -n "$GL_NS_K" link set lo up
	ip -n "$GL_NS_C" link set lo up
	ip -n "$GL_NS_K" link add "$GL_BR" type bridge || ll_skip "cannot create a bridge"
	ip -n "$GL_NS_K" addr add "$GL_COORD_ADDR/24" dev "$GL_BR"
	ip -n "$GL_NS_K" link set "$GL_BR" up
	for ((i = 1; i <= GL_N; i++)); do
		g=$(gl_ns_g "$i")
		ip netns add "$g" || ll_fail "cannot create netns $g"
		LL_NETNS+=("$g")
		ip -n "$g" link set lo up
		# Data: client <-> gateway i.
		ip -n "$GL_NS_C" link add "$(gl_if_c "$i")" type veth peer name "$(gl_if_g "$i")" netns "$g" ||
			ll_skip "cannot create a veth pair"
		ip -n "$GL_NS_C" addr add "198.18.$i.1/24" dev "$(gl_if_c "$i")"
		ip -n "$g" addr add "198.18.$i.2/24" dev "$(gl_if_g "$i")"
		ip -n "$GL_NS_C" link set "$(gl_if_c "$i")" up
		ip -n "$g" link set "$(gl_if_g "$i")" up
		# Control: gateway i <-> the coordinator's bridge.
		ip -n "$GL_NS_K" link add "$(gl_if_kb "$i")" type veth peer name "$(gl_if_kg "$i")" netns "$g" ||
			ll_skip "cannot create a veth pair"
		ip -n "$GL_NS_K" link set "$(gl_if_kb "$i")" master "$GL_BR" up
		ip -n "$g" addr add "198.19.0.$((10 + i))/24" dev "$(gl_if_kg "$i")"
		ip -n "$g" link set "$(gl_if_kg "$i")" up
	done
	# The key block: local on the client, routed back on every gateway.
	ip -n "$GL_NS_C" route add local "$GL_KEY_NET" dev lo || ll_fail "cannot route $GL_KEY_NET to lo"
	for ((i = 1; i <= GL_N; i++)); do
		ip -n "$(gl_ns_g "$i")" route add "$GL_KEY_NET" via "198.18.$i.1" dev "$(gl_if_g "$i")" ||
			ll_fail "cannot route $GL_KEY_NET on gateway $i"
	done
	# Static neighbours on the data path: no packet of the test waits on ARP.
	for ((i = 1; i <= GL_N; i++)); do
		g=$(gl_ns_g "$i")
		ip -n "$GL_NS_C" neigh replace "198.18.$i.2" lladdr "$(gl_mac "$g" "$(gl_if_g "$i")")" \
			dev "$(gl_if_c "$i")" nud permanent || ll_fail "cannot set a neighbour"
		ip -n "$g" neigh replace "198.18.$i.1" lladdr "$(gl_mac "$GL_NS_C" "$(gl_if_c "$i")")" \
			dev "$(gl_if_g "$i")" nud permanent || ll_fail "cannot set a neighbour"
	done
	ll_bpffs
	GL_PIN_ROOT=$TMPD/bpffs
}

# gl_policy FILE VERSION RATE BURST SCOPE [ON_LOSS [FB_RATE FB_BURST]]: one key-none
# limit on UDP to GL_PORT, packets.
gl_policy() {
	local f=$1 v=$2 rate=$3 burst=$4 scope=$5 onloss=${6:-fail-closed} fr=${7:-} fb=${8:-}
	{
		echo "# written by $(basename "$0")"
		echo "version: $v"
		echo "default: pass"
		echo "limits:"
		echo "  - name: $GL_LIMIT"
		echo "    key: ${GL_KEY:-none}"
		echo "    unit: packets"
		echo "    rate: $rate"
		echo "    burst: $burst"
		echo "    scope: $scope"
		echo "    mode: enforce"
		if [ "$scope" = global ]; then
			echo "    on-loss: $onloss"
			[ "$onloss" = fallback ] && echo "    fallback: {rate: $fr, burst: $fb}"
		fi
		echo "rules:"
		echo "  - name: data"
		echo "    match: {proto: udp, dst-port: $GL_PORT}"
		echo "    limits: [$GL_LIMIT]"
	} >"$f.tmp"
	mv "$f.tmp" "$f"
}

# gl_coord_start DIR TTL REFRESH: coordinator in llk$$ with DIR/policy.yaml,
# state in DIR/state. Waits (bounded) until it listens. Sets COORD_PID.
gl_coord_start() {
	local d=$1 ttl=$2 refresh=$3
	mkdir -p "$d/state"
	cat >"$d/coord.yaml" <<EOF
listen: $GL_COORD_ADDR:$GL_COORD_PORT
policy: policy.yaml
state-dir: state
lease: {ttl: $ttl, refresh: $refresh}
metrics: 127.0.0.1:9476
gateways: $GL_N
insecure: true
EOF
	local before
	before=$(grep -c "coordinator listening" "$d/coord.log" 2>/dev/null)
	nsenter --net=/run/netns/"$GL_NS_K" "$LL" coord -c "$d/coord.yaml" -v >>"$d/coord.log" 2>&1 &
	COORD_PID=$!
	gl_track "$COORD_PID"
	gl_wait_listening "$d/coord.log" "$COORD_PID" "${before:-0}" "the coordinator"
}

# gl_wait_listening LOG PID BEFORE WHO: wait (bounded) until LOG has more
# "coordinator listening" lines than BEFORE; fails if PID exits first.
gl_wait_listening() {
	local log=$1 pid=$2 before=$3 who=$4 i n
	for ((i = 0; i < LL_WAIT_TRIES; i++)); do
		kill -0 "$pid" 2>/dev/null || {
			tail -20 "$log" | sed "s/^/   $who: /"
			ll_fail "$who exited during start-up"
		}
		n=$(grep -c "coordinator listening" "$log" 2>/dev/null || true)
		[ "${n:-0}" -gt "$before" ] && return 0
		sleep "$LL_POLL_S"
	done
	ll_fail "$who did not listen within $((LL_WAIT_TRIES / 10)) s"
}

# gl_coord_kill9: SIGKILL, as a crash.
gl_coord_kill9() {
	kill -KILL "$COORD_PID" 2>/dev/null
	wait "$COORD_PID" 2>/dev/null
	COORD_PID=
}

gl_coord_stop() {
	ll_stop_pid "$COORD_PID"
	COORD_PID=
}

# gl_agents_start DIR TAG MODE: one agent per gateway; MODE coord (coordinated, the
# policy from the coordinator), replicas (the same, dialing the 3 replicas) or
# local (standalone with DIR/policy-local.yaml).
# Pins under $GL_PIN_ROOT/TAG-gw-<i>. Waits (bounded) until every agent runs.
gl_agents_start() {
	local d=$1 tag=$2 mode=$3 i k g cfg
	GL_AGENT_PIDS=()
	GL_PIN_TAG=$tag
	for ((i = 1; i <= GL_N; i++)); do
		g=$(gl_ns_g "$i")
		cfg=$d/agent-$i.yaml
		{
			echo "node: gw-$i"
			echo "interfaces:"
			echo "  - {name: $(gl_if_g "$i"), mode: native}"
			echo "pin-dir: $GL_PIN_ROOT/$tag-gw-$i"
			if [ "$mode" = coord ]; then
				echo "coordinator: {address: $GL_COORD_ADDR:$GL_COORD_PORT, insecure: true}"
			elif [ "$mode" = replicas ]; then
				echo "coordinator: {addresses: [$(gl_replica_addr 1), $(gl_replica_addr 2), $(gl_replica_addr 3)], insecure: true}"
			else
				echo "policy: policy-local.yaml"
			fi
			echo "metrics: 127.0.0.1:9475"
			echo "max-keys: ${GL_MAX_KEYS:-4096}"
			[ -n "${GL_MAX_FLOW_KEYS:-}" ] && echo "max-flow-keys: $GL_MAX_FLOW_KEYS"
		} >"$cfg"
		nsenter --net=/run/netns/"$g" "$LL" agent -c "$cfg" -v --detach-on-exit >>"$d/agent-$i.log" 2>&1 &
		GL_AGENT_PIDS[i]=$!
		gl_track "$!"
	done
	for ((i = 1; i <= GL_N; i++)); do
		for ((k = 0; k < LL_WAIT_TRIES; k++)); do
			kill -0 "${GL_AGENT_PIDS[i]}" 2>/dev/null || {
				tail -20 "$d/agent-$i.log" | sed "s/^/   agent $i: /"
				ll_fail "agent $i exited during start-up"
			}
			grep -q "running (pid" "$d/agent-$i.log" && break
			sleep "$LL_POLL_S"
		done
		[ "$k" -lt "$LL_WAIT_TRIES" ] || ll_fail "agent $i did not start"
	done
}

gl_agents_stop() {
	local i
	for ((i = 1; i <= GL_N; i++)); do
		kill -CONT "${GL_AGENT_PIDS[i]}" 2>/dev/null
		kill -TERM "${GL_AGENT_PIDS[i]}" 2>/dev/null
	done
	for ((i = 1; i <= GL_N; i++)); do
		ll_stop_pid "${GL_AGENT_PIDS[i]}"
	done
	GL_AGENT_PIDS=()
}

gl_pin() { echo "$GL_PIN_ROOT/$GL_PIN_TAG-gw-$1"; }

# gl_wait_live N SECONDS [--new-epoch]: until N agents hold a live lease (read from
# their maps); with --new-epoch, of an epoch newer than any they hold now.
gl_wait_live() {
	local n=$1 secs=$2 args=() i
	shift 2
	for ((i = 1; i <= GL_N; i++)); do
		args+=(--pins "$i=$(gl_pin "$i")")
	done
	python3 "$GL_DIR/gsample.py" "${args[@]}" --wait-live "$n" --max-time "$secs" "$@" --out /dev/null
}

# gl_wait_dead N SECONDS: until N agents hold no live lease (read from their maps).
gl_wait_dead() {
	local args=() i
	for ((i = 1; i <= GL_N; i++)); do
		args+=(--pins "$i=$(gl_pin "$i")")
	done
	python3 "$GL_DIR/gsample.py" "${args[@]}" --wait-dead "$1" --max-time "$2" --out /dev/null
}

# gl_held_epoch: the highest epoch any agent holds a lease of.
gl_held_epoch() {
	local args=() i
	for ((i = 1; i <= GL_N; i++)); do
		args+=(--pins "$i=$(gl_pin "$i")")
	done
	python3 "$GL_DIR/gsample.py" "${args[@]}" --print-epoch --out /dev/null
}

# gl_recv_start RUN MAX_TIME: one receiver per gateway namespace.
gl_recv_start() {
	local run=$1 max=$2 i k g
	GL_RECV_PIDS=()
	for ((i = 1; i <= GL_N; i++)); do
		g=$(gl_ns_g "$i")
		rm -f "$run/recv-$i.ready"
		nsenter --net=/run/netns/"$g" python3 "$GL_DIR/grecv.py" --gw "$i" --bind "198.18.$i.2" \
			--port "$GL_PORT" --max-time "$max" --out "$run/recv-$i.json" \
			--ready "$run/recv-$i.ready" 2>>"$run/recv.log" &
		GL_RECV_PIDS[i]=$!
		gl_track "$!"
	done
	for ((i = 1; i <= GL_N; i++)); do
		for ((k = 0; k < LL_WAIT_TRIES; k++)); do
			[ -e "$run/recv-$i.ready" ] && break
			kill -0 "${GL_RECV_PIDS[i]}" 2>/dev/null || ll_fail "receiver $i exited: $(cat "$run/recv.log")"
			sleep "$LL_POLL_S"
		done
		[ "$k" -lt "$LL_WAIT_TRIES" ] || ll_fail "receiver $i did not bind"
	done
}

# gl_recv_stop: let queued datagrams drain, stop the receivers (they write on TERM).
gl_recv_stop() {
	local i
	sleep 0.3
	for ((i = 1; i <= GL_N; i++)); do
		kill -TERM "${GL_RECV_PIDS[i]}" 2>/dev/null
	done
	for ((i = 1; i <= GL_N; i++)); do
		ll_wait_pid "${GL_RECV_PIDS[i]}" 20 || ll_fail "receiver $i did not finish"
	done
	GL_RECV_PIDS=()
}

# gl_send_bg RUN PHASE...: the client sends to every gateway; PHASE = SECONDS:r1,..,rN.
gl_send_bg() {
	local run=$1 p i args=()
	shift
	# A per-key limit must see one client as one key on every gateway: send
	# from one address of the key block, not from each path's own address.
	for ((i = 1; i <= GL_N; i++)); do
		if [ "${GL_KEY:-none}" = none ]; then
			args+=(--target "198.18.$i.1,198.18.$i.2")
		else
			args+=(--target "$GL_KEY_BASE,198.18.$i.2")
		fi
	done
	for p in "$@"; do
		args+=(--phase "$p")
	done
	nsenter --net=/run/netns/"$GL_NS_C" python3 "$GL_DIR/gsend.py" --port "$GL_PORT" "${args[@]}" \
		--out "$run/send.json" 2>>"$run/send.log" &
	SEND_PID=$!
	gl_track "$SEND_PID"
}

# gl_send_keys_bg RUN NKEYS KPHASE...: many keys (gsend.py --kphase), key k from
# GL_KEY_BASE + k; with GL_KEY_PORTS=P (a `key: flow` limit) from the address
# GL_KEY_BASE + k / P and source port 20000 + k % P. KPHASE = SECONDS:GEN[+GEN].
gl_send_keys_bg() {
	local run=$1 nkeys=$2 p i args=()
	shift 2
	for ((i = 1; i <= GL_N; i++)); do
		args+=(--target "198.18.$i.1,198.18.$i.2")
	done
	for p in "$@"; do
		args+=(--kphase "$p")
	done
	nsenter --net=/run/netns/"$GL_NS_C" python3 "$GL_DIR/gsend.py" --port "$GL_PORT" "${args[@]}" \
		--keys "$nkeys" --key-base "$GL_KEY_BASE" --key-ports "${GL_KEY_PORTS:-0}" \
		--seed "${GL_SEED:-1}" --out "$run/send.json" 2>>"$run/send.log" &
	SEND_PID=$!
	gl_track "$SEND_PID"
}

# gl_coord_rss RUN TAG: the coordinator's resident memory now and its peak, kB
# (/proc/PID/status VmRSS, VmHWM), appended to RUN/coord-rss.txt.
gl_coord_rss() {
	local rss hwm
	[ -n "$COORD_PID" ] && [ -r "/proc/$COORD_PID/status" ] || return 0
	# COORD_PID is the coordinator itself (nsenter execs it without forking).
	[ "$(basename "$(readlink "/proc/$COORD_PID/exe")")" = leaseline ] || return 0
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$COORD_PID/status")
	hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$COORD_PID/status")
	echo "$2 ${rss:-0} ${hwm:-0}" >>"$1/coord-rss.txt"
}

# gl_send_wait SECONDS: wait (bounded) for the sender.
gl_send_wait() {
	ll_wait_pid "$SEND_PID" "$1" || ll_fail "the sender failed or overran ($(cat "$RUN/send.log" 2>/dev/null))"
	SEND_PID=
}

# gl_send_stop: end the sender's run now (it writes what it sent so far).
gl_send_stop() {
	kill -TERM "$SEND_PID" 2>/dev/null
	gl_send_wait 10
}

# gl_sample_start RUN [PERIOD]: map and coordinator sampler (in llk$$).
gl_sample_start() {
	local run=$1 period=${2:-0.02} args=() i k
	for ((i = 1; i <= GL_N; i++)); do
		args+=(--pins "$i=$(gl_pin "$i")")
	done
	rm -f "$run/sample.ready"
	nsenter --net=/run/netns/"$GL_NS_K" python3 "$GL_DIR/gsample.py" "${args[@]}" \
		--coord 127.0.0.1:9476 --period "$period" --coord-period 0.05 --max-time 600 \
		--out "$run/samples.jsonl" --ready "$run/sample.ready" 2>>"$run/sample.log" &
	SAMPLE_PID=$!
	gl_track "$SAMPLE_PID"
	for ((k = 0; k < LL_WAIT_TRIES; k++)); do
		[ -e "$run/sample.ready" ] && return 0
		sleep "$LL_POLL_S"
	done
	ll_fail "the sampler did not start"
}

gl_sample_stop() {
	ll_stop_pid "$SAMPLE_PID"
	SAMPLE_PID=
}

# gl_mark RUN NAME [ARGS]: an event at this instant (realtime, converted later).
gl_mark() {
	printf '%s %s %s\n' "$2" "$EPOCHREALTIME" "${*:3}" >>"$1/events.txt"
}

# gl_cut I / gl_restore I: take gateway I's switch port down / up. Through nsenter,
# not `ip -n`: ip's own namespace switch remounts /sys in a private mount namespace,
# which here intermittently took 100-220 ms (RCU grace periods), leaving the instant
# of the cut uncertain; nsenter --net + ip takes ~2.5 ms.
gl_cut() { nsenter --net=/run/netns/"$GL_NS_K" ip link set "$(gl_if_kb "$1")" down; }
gl_restore() { nsenter --net=/run/netns/"$GL_NS_K" ip link set "$(gl_if_kb "$1")" up; }

# gl_scrape_coord FILE / gl_scrape_agent I FILE: /metrics text.
gl_scrape_coord() {
	nsenter --net=/run/netns/"$GL_NS_K" curl -s -m 2 http://127.0.0.1:9476/metrics >"$1"
}
gl_scrape_agent() {
	nsenter --net=/run/netns/"$(gl_ns_g "$1")" curl -s -m 2 http://127.0.0.1:9475/metrics >"$2"
}
gl_scrape_all() {
	local run=$1 tag=${2:-final} i
	gl_scrape_coord "$run/$tag-coord.prom"
	for ((i = 1; i <= GL_N; i++)); do
		gl_scrape_agent "$i" "$run/$tag-agent-$i.prom"
	done
}

# gl_rates N RATE: "RATE,RATE,..." N times.
gl_rates() {
	local n=$1 r=$2 i out=
	for ((i = 1; i <= n; i++)); do
		out+="${out:+,}$r"
	done
	echo "$out"
}

# ---- replicas (reference §6.4): an etcd cluster and 3 coordinators in llk$$ ----
# etcd member m (0..2) listens for clients on every address of llk$$, port
# GL_ETCD_PORT0 + m; replica j (1..3) reaches it through 127.0.2.j (all of
# 127/8 is local on lo), so one nft rule on 127.0.2.j cuts replica j from etcd
# and nothing else: its agents still reach it (gl_etcd_cut J / gl_etcd_restore).
# Replica j listens on $GL_COORD_ADDR:$((GL_COORD_PORT + j - 1)), metrics on
# 127.0.0.1:$((9476 + j - 1)); state, log and config in DIR/r<j>.
GL_ETCD_PORT0=23790
GL_ETCD_PEER0=23800
GL_NREP=3
GL_ETCD_TTL=${GL_ETCD_TTL:-5s}
GL_ETCD_PIDS=()
GL_REP_PIDS=()

gl_etcdctl() {
	local eps= m
	for m in 0 1 2; do
		eps+="${eps:+,}http://127.0.0.1:$((GL_ETCD_PORT0 + m))"
	done
	ETCDCTL_API=3 nsenter --net=/run/netns/"$GL_NS_K" etcdctl --dial-timeout=500ms \
		--command-timeout=2s --endpoints="$eps" "$@"
}

# gl_etcd_member DIR M: start member M (0..2) of the 3-member cluster; on its
# data directory of an earlier run it rejoins the cluster it was part of.
gl_etcd_member() {
	local d=$1 m=$2 init= i
	for i in 0 1 2; do
		init+="${init:+,}m$i=http://127.0.0.1:$((GL_ETCD_PEER0 + i))"
	done
	nsenter --net=/run/netns/"$GL_NS_K" etcd --name "m$m" --data-dir "$d/etcd-m$m" \
		--listen-client-urls "http://0.0.0.0:$((GL_ETCD_PORT0 + m))" \
		--advertise-client-urls "http://127.0.0.1:$((GL_ETCD_PORT0 + m))" \
		--listen-peer-urls "http://127.0.0.1:$((GL_ETCD_PEER0 + m))" \
		--initial-advertise-peer-urls "http://127.0.0.1:$((GL_ETCD_PEER0 + m))" \
		--initial-cluster "$init" --initial-cluster-state new \
		--initial-cluster-token "leaseline-gl$$" --heartbeat-interval 100 \
		--election-timeout 1000 --logger zap --log-outputs "$d/etcd-m$m.log" \
		>/dev/null 2>&1 &
	GL_ETCD_PIDS[m]=$!
	gl_track "$!"
}

# gl_etcd_healthy: until every member answers healthy (bounded).
gl_etcd_healthy() {
	local k
	for ((k = 0; k < LL_WAIT_TRIES; k++)); do
		gl_etcdctl endpoint health >/dev/null 2>&1 && return 0
		sleep "$LL_POLL_S"
	done
	ll_fail "etcd: the cluster was not healthy within $((LL_WAIT_TRIES / 10)) s"
}

# gl_etcd_start DIR: 3 members, waits (bounded) until the cluster is healthy.
gl_etcd_start() {
	local m
	command -v etcd >/dev/null || ll_skip "needs etcd (etcd-server)"
	for m in 0 1 2; do
		gl_etcd_member "$1" "$m"
	done
	gl_etcd_healthy
}

# gl_etcd_cut J / gl_etcd_restore J: drop / pass replica J's packets to etcd.
gl_etcd_cut() {
	nsenter --net=/run/netns/"$GL_NS_K" nft -f - <<NFT || ll_fail "nft: cannot cut replica $1 from etcd"
table inet llcut$$
delete table inet llcut$$
table inet llcut$$ {
	chain out { type filter hook output priority 0; ip daddr 127.0.2.$1 drop; }
}
NFT
}
gl_etcd_restore() { nsenter --net=/run/netns/"$GL_NS_K" nft delete table inet "llcut$$" 2>/dev/null; }

# gl_replica_addr J: the address agents dial for replica J.
gl_replica_addr() { echo "$GL_COORD_ADDR:$((GL_COORD_PORT + $1 - 1))"; }

# gl_replicas_conf DIR TTL REFRESH: configs for the 3 replicas (one grant key).
gl_replicas_conf() {
	local d=$1 ttl=$2 refresh=$3 j eps
	head -c 32 /dev/urandom >"$d/grant.key"
	chmod 600 "$d/grant.key"
	for ((j = 1; j <= GL_NREP; j++)); do
		mkdir -p "$d/r$j/state"
		chmod 700 "$d/r$j/state"
		eps="http://127.0.2.$j:$GL_ETCD_PORT0, http://127.0.2.$j:$((GL_ETCD_PORT0 + 1)), http://127.0.2.$j:$((GL_ETCD_PORT0 + 2))"
		cat >"$d/r$j/coord.yaml" <<EOC
listen: $(gl_replica_addr "$j")
policy: $d/policy.yaml
state-dir: state
grant-key: $d/grant.key
lease: {ttl: $ttl, refresh: $refresh}
metrics: 127.0.0.1:$((9476 + j - 1))
gateways: $GL_N
insecure: true
replicas:
  etcd: [$eps]
  prefix: /leaseline/gl$$
  node: coord-$j
  advertise: $(gl_replica_addr "$j")
  ttl: $GL_ETCD_TTL
EOC
	done
}

# gl_replica_start DIR J: replica J, waits (bounded) until it listens.
gl_replica_start() {
	local d=$1/r$2 j=$2 before
	before=$(grep -c "coordinator listening" "$d/coord.log" 2>/dev/null)
	nsenter --net=/run/netns/"$GL_NS_K" "$LL" coord -c "$d/coord.yaml" -v >>"$d/coord.log" 2>&1 &
	GL_REP_PIDS[j]=$!
	gl_track "$!"
	gl_wait_listening "$d/coord.log" "${GL_REP_PIDS[j]}" "${before:-0}" "replica $j"
}

# gl_replica_metric J NAME: one unlabelled gauge of replica J ("" if unreachable).
gl_replica_metric() {
	nsenter --net=/run/netns/"$GL_NS_K" curl -s -m 1 "http://127.0.0.1:$((9476 + $1 - 1))/metrics" 2>/dev/null |
		awk -v n="$2" '$1 == n {print $2; exit}'
}

# gl_leader [SECONDS]: the replica that says it leads (bounded wait), or fails.
gl_leader() {
	local secs=${1:-20} k j
	for ((k = 0; k < secs * 10; k++)); do
		for ((j = 1; j <= GL_NREP; j++)); do
			kill -0 "${GL_REP_PIDS[j]:-0}" 2>/dev/null || continue
			[ "$(gl_replica_metric "$j" leaseline_coord_leader)" = 1 ] && {
				echo "$j"
				return 0
			}
		done
		sleep 0.1
	done
	return 1
}

# gl_etcd_leader_member: the etcd member (0..2) that leads etcd's own raft.
gl_etcd_leader_member() {
	local m f id lead
	for m in 0 1 2; do
		kill -0 "${GL_ETCD_PIDS[m]}" 2>/dev/null || continue
		f=$(ETCDCTL_API=3 nsenter --net=/run/netns/"$GL_NS_K" etcdctl --dial-timeout=500ms \
			--command-timeout=2s --endpoints="http://127.0.0.1:$((GL_ETCD_PORT0 + m))" \
			endpoint status -w fields 2>/dev/null)
		id=$(printf '%s\n' "$f" | sed -n 's/^"MemberID" : //p')
		lead=$(printf '%s\n' "$f" | sed -n 's/^"Leader" : //p')
		[ -n "$id" ] && [ "$id" = "$lead" ] && {
			echo "$m"
			return 0
		}
	done
	return 1
}
