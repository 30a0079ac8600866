# SPDX-License-Identifier: MIT
# The global-limit scenarios (docs/global.md, tests 1-7). Sourced after lib.sh and
# gl_topo; each scenario starts its own coordinator and agents (fresh state, fresh
# pins), runs real traffic, stops them and hands the run directory to gcheck.py,
# which prints the figures and returns non-zero when a check fails.
#
# Knobs (set before calling; the short tests and the benchmark differ in durations):
#   GL_R GL_B          contract: packets/s and packets
#   GL_TTL GL_REFRESH  lease ttl and refresh, seconds
#   GL_FB_R GL_FB_B    fallback share per gateway (on-loss fallback)
#   GL_SCALE           multiplies every traffic duration (1 = short test)
#   GL_KEY             the limit's key (default none: one aggregate); src-ip makes
#                      it a per-key limit, and the one client address one key
#   GL_RESULTS         if set, every RESULT line is appended there
# Offered load is 3R in total unless a scenario says otherwise.
#
# The many-key scenarios (keys-split, zipf, zipf-restart, cold) always use
# key: src-ip (cold: key: flow with GL_COLD_PORTS) and contracts of their own,
# small enough that a Python sender on 2 CPUs offers several R per hot key:
#   GL_KS_R GL_KS_B GL_KS_COLD          keys-split: contract (100/s, 20), cold keys (4)
#   GL_ZIPF_R GL_ZIPF_B GL_ZIPF_KEYS    zipf: contract (20/s, 40), keys (1000),
#   GL_ZIPF_S GL_ZIPF_PPS GL_ZIPF_SEED  exponent (1.0), total offered (2400/s), pattern seed (1)
#   GL_COLD_R GL_COLD_B GL_COLD_KEYS    cold: contract (100/s, 20), keys (32766, all of
#   GL_COLD_PPS GL_COLD_PORTS           198.18.128.0/17), total offered (2400/s), source
#                                       ports per address (0: src-ip; P: key flow, P x keys)
#   GL_KEYS_WARM                        warm-up before utilization is measured (3 refresh)

GL_R=${GL_R:-1000}
GL_B=${GL_B:-200}
GL_TTL=${GL_TTL:-1}
GL_REFRESH=${GL_REFRESH:-0.25}
GL_FB_R=${GL_FB_R:-25}
GL_FB_B=${GL_FB_B:-10}
GL_SCALE=${GL_SCALE:-1}
GL_SEED=${GL_SEED:-$$}
RANDOM=$GL_SEED
GL_KS_R=${GL_KS_R:-100}
GL_KS_B=${GL_KS_B:-20}
GL_KS_COLD=${GL_KS_COLD:-4}
GL_ZIPF_R=${GL_ZIPF_R:-20}
# B 40: each of 8 gateways' default share holds 5 tokens of burst. With B 10
# it held 1 (0 while shares move at start), and cold keys lost half their
# packets to burst granularity, per-key grants or not.
GL_ZIPF_B=${GL_ZIPF_B:-40}
GL_ZIPF_KEYS=${GL_ZIPF_KEYS:-1000}
GL_ZIPF_S=${GL_ZIPF_S:-1.0}
GL_ZIPF_PPS=${GL_ZIPF_PPS:-2400}
GL_ZIPF_SEED=${GL_ZIPF_SEED:-1}
GL_COLD_R=${GL_COLD_R:-100}
GL_COLD_B=${GL_COLD_B:-20}
GL_COLD_PPS=${GL_COLD_PPS:-2400}
GL_COLD_PORTS=${GL_COLD_PORTS:-0}

# gl_dur SECONDS: a traffic duration scaled by GL_SCALE (one decimal).
gl_dur() { awk -v s="$1" -v k="$GL_SCALE" 'BEGIN {printf "%.1f", s * k}'; }
# gl_ms SECONDS: as milliseconds for the coordinator's durations.
gl_ms() { awk -v s="$1" 'BEGIN {printf "%dms", s * 1000 + 0.5}'; }
gl_add() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a + b}'; }
gl_mul() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a * b}'; }
# gl_rand_s LO HI: a random duration in [LO, HI] seconds, from $RANDOM (seeded).
gl_rand_s() { awk -v lo="$1" -v hi="$2" -v r="$RANDOM" 'BEGIN {printf "%.3f", lo + (hi - lo) * r / 32767}'; }

# gl_run NAME: a fresh run directory; sets RUN.
gl_run() {
	RUN=$TMPD/$1
	mkdir -p "$RUN"
	: >"$RUN/events.txt"
}

# gl_lease_up ON_LOSS: coordinator + coordinated agents on RUN, all leases live.
gl_lease_up() {
	local onloss=${1:-fail-closed}
	gl_policy "$RUN/policy.yaml" 1 "$GL_R" "$GL_B" global "$onloss" "$GL_FB_R" "$GL_FB_B"
	gl_coord_start "$RUN" "$(gl_ms "$GL_TTL")" "$(gl_ms "$GL_REFRESH")"
	gl_agents_start "$RUN" "$(basename "$RUN")" coord
	gl_wait_live "$GL_N" 20 || {
		tail -5 "$RUN/coord.log" | sed 's/^/   coord: /'
		ll_fail "not every agent holds a lease 20 s after start"
	}
	gl_sample_start "$RUN"
}

# gl_local_up: standalone agents, each with the whole (R, B) as a local limit.
gl_local_up() {
	gl_policy "$RUN/policy-local.yaml" 1 "$GL_R" "$GL_B" local
	gl_agents_start "$RUN" "$(basename "$RUN")" local
	gl_sample_start "$RUN"
}

# gl_down: stop traffic helpers and daemons, keep the run directory.
gl_down() {
	gl_sample_stop
	gl_scrape_all "$RUN" final
	gl_agents_stop
	[ -n "$COORD_PID" ] && gl_coord_stop
	return 0
}

gl_check() {
	local out rc
	out=$(python3 "$GL_DIR/gcheck.py" "$@")
	rc=$?
	printf '%s\n' "$out" | grep -v '^RESULT '
	if [ -n "${GL_RESULTS:-}" ]; then
		printf '%s\n' "$out" | sed -n 's/^RESULT //p' >>"$GL_RESULTS"
	fi
	return $rc
}

# gcheck.py's common options, as an array (GL_ARGS).
gl_common_args() {
	GL_ARGS=(--rate "$GL_R" --burst "$GL_B" --ttl "$GL_TTL" --refresh "$GL_REFRESH" --gateways "$GL_N")
}

# ---- 1 and 3: steady state, uniform then one hot gateway; leaseline or standalone ----
# Uniform: 3R/N to each. Skewed: gateway 1 gets 2.3R, the others share 0.7R.
gl_scn_steady() {
	local kind=${1:-lease} tu ts hot cold
	tu=$(gl_dur 3.5)
	ts=$(gl_dur 3.5)
	hot=$((GL_R * 23 / 10))
	cold=$((GL_R * 7 / 10 / (GL_N - 1)))
	gl_run "steady-$kind"
	echo "-- steady state ($kind): uniform 3R for $tu s, then gateway 1 at 2.3R and the others at 0.7R/$((GL_N - 1)) for $ts s"
	if [ "$kind" = lease ]; then gl_lease_up fail-closed; else gl_local_up; fi
	gl_recv_start "$RUN" 300
	gl_send_bg "$RUN" "$tu:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))" "$ts:$hot,$(gl_rates $((GL_N - 1)) "$cold")"
	gl_send_wait "$(awk -v a="$tu" -v b="$ts" 'BEGIN {printf "%d", a + b + 30}')"
	gl_recv_stop
	gl_down
	gl_common_args
	gl_check steady "$RUN" "${GL_ARGS[@]}" --kind "$kind" --warm 1.5
}

# ---- 2: demand moves from gateways 1..N/2 to N/2+1..N ----
gl_scn_shift() {
	local ta tb h=$((GL_N / 2)) r a b
	ta=$(gl_dur 3)
	tb=$(gl_dur 3)
	r=$((3 * GL_R / h))
	a="$(gl_rates "$h" "$r"),$(gl_rates $((GL_N - h)) 0)"
	b="$(gl_rates "$h" 0),$(gl_rates $((GL_N - h)) "$r")"
	gl_run shift
	echo "-- demand shift: 3R on gateways 1-$h for $ta s, then on $((h + 1))-$GL_N for $tb s"
	gl_lease_up fail-closed
	gl_recv_start "$RUN" 300
	gl_send_bg "$RUN" "$ta:$a" "$tb:$b"
	gl_send_wait "$(awk -v a="$ta" -v b="$tb" 'BEGIN {printf "%d", a + b + 30}')"
	gl_recv_stop
	gl_down
	gl_common_args
	gl_check shift "$RUN" "${GL_ARGS[@]}" --warm 1.5
}

# ---- 4: partition: cut NCUT gateways' control links for 5 ttl ----
gl_scn_partition() {
	local onloss=$1 ncut=${2:-3} pre cut post i total
	pre=$(gl_dur 1.5)
	cut=$(gl_mul 5 "$GL_TTL")
	post=$(gl_dur 2)
	total=$(awk -v a="$pre" -v b="$cut" -v c="$post" 'BEGIN {printf "%.1f", a + b + c + 0.2}')
	gl_run "partition-$onloss"
	echo "-- partition ($onloss): gateways 1-$ncut cut off for $cut s (5 ttl) under uniform 3R"
	gl_lease_up "$onloss"
	gl_recv_start "$RUN" 300
	gl_send_bg "$RUN" "$total:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"
	gl_mark "$RUN" cut "$(seq -s, 1 "$ncut")"
	for ((i = 1; i <= ncut; i++)); do
		gl_mark "$RUN" cut_begin "$i"
		gl_cut "$i"
		gl_mark "$RUN" cut_end "$i"
	done
	ll_sleep "$cut"
	gl_mark "$RUN" restore
	for ((i = 1; i <= ncut; i++)); do gl_restore "$i"; done
	gl_mark "$RUN" restore_end
	gl_send_wait "$(awk -v a="$total" 'BEGIN {printf "%d", a + 30}')"
	gl_recv_stop
	# The counters must reach the coordinator once the links are back: wait
	# (bounded) for one more report from every cut gateway after traffic stopped.
	ll_sleep "$(gl_add "$GL_REFRESH" 0.5)"
	gl_wait_reported "$ncut" 20
	gl_down
	gl_common_args
	gl_check partition "$RUN" "${GL_ARGS[@]}" --onloss "$onloss" --cut "$ncut" \
		--fb-rate "$GL_FB_R" --fb-burst "$GL_FB_B"
}

# gl_wait_reported NCUT SECONDS: coordinator fallback/bypass totals equal the agents'.
gl_wait_reported() {
	local ncut=$1 secs=$2 k i ok
	for ((k = 0; k < secs * 4; k++)); do
		gl_scrape_all "$RUN" final
		ok=1
		for ((i = 1; i <= ncut; i++)); do
			python3 "$GL_DIR/gcheck.py" reported "$RUN" --gw "$i" >/dev/null || ok=0
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.25
	done
	return 0 # gcheck reports the mismatch with figures
}

# gl_kills KILLS: kill -9 the coordinator KILLS times at random moments (seeded),
# each time down 0.1-1.2 s (GL_DOWN_MIN, GL_DOWN_MAX), restarted, until every
# agent holds a new-epoch lease.
gl_kills() {
	local kills=$1 k down epoch
	for ((k = 1; k <= kills; k++)); do
		ll_sleep "$(gl_rand_s 0 1)"
		epoch=$(gl_held_epoch)
		gl_mark "$RUN" kill "$k"
		gl_coord_kill9
		down=$(gl_rand_s "${GL_DOWN_MIN:-0.1}" "${GL_DOWN_MAX:-1.2}")
		ll_sleep "$down"
		gl_mark "$RUN" restart "$k"
		# Shares proven by their tags are renewed at once (adoption): the
		# epoch to pass is the one held before the kill.
		gl_coord_start "$RUN" "$(gl_ms "$GL_TTL")" "$(gl_ms "$GL_REFRESH")"
		gl_wait_live "$GL_N" 30 --epoch-above "$epoch" || ll_fail "agents hold no new-epoch lease 30 s after restart $k"
		gl_mark "$RUN" live "$k"
		ll_sleep "$(gl_rand_s 0.5 1.5)"
	done
}

# ---- 5: coordinator kill -9 and restart at random moments ----
gl_scn_restart() {
	local kills=${1:-2} pre post
	pre=$(gl_dur 1.5)
	post=$(gl_dur 1.5)
	gl_run restart
	echo "-- coordinator kill -9 and restart, $kills times at random moments (seed $GL_SEED), uniform 3R"
	gl_lease_up fail-closed
	gl_recv_start "$RUN" 600
	# Runs until stopped below (bounded by gsend's own limit).
	gl_send_bg "$RUN" "300:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"
	gl_kills "$kills"
	ll_sleep "$post"
	gl_mark "$RUN" "done"
	gl_send_stop
	gl_recv_stop
	gl_down
	gl_common_args
	gl_check restart "$RUN" "${GL_ARGS[@]}"
}

# ---- 6: a stale holder: SIGSTOP one agent past its ttl, then SIGCONT ----
gl_scn_stale() {
	local pre stop post total pid
	pre=$(gl_dur 1.5)
	stop=$(gl_add "$(gl_mul 2 "$GL_TTL")" 0.5)
	post=$(gl_dur 2)
	total=$(awk -v a="$pre" -v b="$stop" -v c="$post" 'BEGIN {printf "%.1f", a + b + c}')
	gl_run stale
	echo "-- stale holder: agent 1 stopped (SIGSTOP) for $stop s (ttl $GL_TTL s), uniform 3R"
	gl_lease_up fail-closed
	gl_recv_start "$RUN" 300
	gl_send_bg "$RUN" "$total:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"
	pid=${GL_AGENT_PIDS[1]}
	GL_STOPPED+=("$pid")
	gl_mark "$RUN" stop 1
	kill -STOP "$pid"
	ll_sleep "$stop"
	kill -CONT "$pid"
	gl_mark "$RUN" cont 1
	gl_send_wait "$(awk -v a="$total" 'BEGIN {printf "%d", a + 30}')"
	gl_recv_stop
	gl_down
	gl_common_args
	gl_check stale "$RUN" "${GL_ARGS[@]}" --gw 1
}

# ---- 7: policy change: R lowered at run time (SIGHUP, version 2) ----
gl_scn_policy() {
	local pre post total r2=$((GL_R * 6 / 10))
	pre=$(gl_dur 2)
	post=$(gl_dur 2.5)
	total=$(awk -v a="$pre" -v b="$post" 'BEGIN {printf "%.1f", a + b}')
	gl_run policy
	echo "-- policy change: R $GL_R -> $r2 at run time (SIGHUP, version 2), uniform 3R"
	gl_lease_up fail-closed
	gl_recv_start "$RUN" 300
	gl_send_bg "$RUN" "$total:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"
	gl_policy "$RUN/policy.yaml" 2 "$r2" "$GL_B" global fail-closed
	gl_mark "$RUN" hup "$r2"
	kill -HUP "$COORD_PID"
	gl_send_wait "$(awk -v a="$total" 'BEGIN {printf "%d", a + 30}')"
	gl_recv_stop
	gl_down
	gl_common_args
	gl_check policy "$RUN" "${GL_ARGS[@]}" --new-rate "$r2"
}

# ---- 8: replicas on etcd (reference §6.4): faults of the leader and of etcd ----
# 3 replicas, 3 etcd members (lib.sh), fail-closed, uniform 3R, the lease ttl
# GL_FO_TTL (8 s: longer than a failover, docs/operations.md). In turn: kill -9 of
# the leader (it comes back as a follower), SIGSTOP of the leader past its etcd
# ttl then SIGCONT, the leader cut from etcd only (its agents still reach it), a
# rolling restart (followers first, SIGTERM), etcd's own leader member killed.
# Each fault is marked `fault NAME REPLICA EPOCH`; `live NAME` once every agent
# holds a lease of a higher epoch (no mark for the etcd member: no new term).
GL_FO_TTL=${GL_FO_TTL:-8}

# gl_fo_new NAME EPOCH: wait (bounded) until every agent holds a lease above EPOCH.
gl_fo_new() {
	gl_wait_live "$GL_N" 40 --epoch-above "$2" || ll_fail "$1: agents hold no lease above epoch $2 after 40 s"
	gl_mark "$RUN" live "$1"
}

gl_fo_leader() { gl_leader 30 || ll_fail "no replica leads 30 s on"; }

gl_scn_failover() {
	local pre post l e j m pid etcd_ttl=${GL_ETCD_TTL%s} sd0 sd1 qs
	pre=$(gl_dur 1.5)
	post=$(gl_dur 1.5)
	gl_run failover
	echo "-- replicas: 3 coordinators on a 3-member etcd (etcd ttl $GL_ETCD_TTL, lease ttl $GL_FO_TTL s);" \
		"kill -9, SIGSTOP, cut from etcd, rolling restart, etcd leader member killed, quorum lost; uniform 3R"
	gl_etcd_start "$RUN"
	gl_policy "$RUN/policy.yaml" 1 "$GL_R" "$GL_B" global fail-closed
	gl_replicas_conf "$RUN" "$(gl_ms "$GL_FO_TTL")" "$(gl_ms "$GL_REFRESH")"
	for ((j = 1; j <= GL_NREP; j++)); do
		gl_replica_start "$RUN" "$j"
	done
	gl_agents_start "$RUN" failover replicas
	gl_wait_live "$GL_N" 30 || ll_fail "not every agent holds a lease 30 s after start"
	gl_sample_start "$RUN"
	gl_recv_start "$RUN" 900
	gl_send_bg "$RUN" "600:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"

	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	gl_mark "$RUN" fault kill9 "$l" "$e"
	kill -KILL "${GL_REP_PIDS[l]}"
	wait "${GL_REP_PIDS[l]}" 2>/dev/null
	gl_fo_new kill9 "$e"
	gl_replica_start "$RUN" "$l"
	ll_sleep "$(gl_rand_s 1 2)"

	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	pid=${GL_REP_PIDS[l]}
	GL_STOPPED+=("$pid")
	gl_mark "$RUN" fault stop "$l" "$e"
	kill -STOP "$pid"
	gl_fo_new stop "$e"
	ll_sleep 1
	kill -CONT "$pid"
	gl_mark "$RUN" cont "$l"
	ll_sleep "$(gl_rand_s 1 2)"

	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	gl_mark "$RUN" fault cut "$l" "$e"
	gl_etcd_cut "$l"
	gl_fo_new cut "$e"
	ll_sleep 1
	gl_etcd_restore
	gl_mark "$RUN" uncut "$l"
	ll_sleep "$(gl_rand_s 1 2)"

	# Rolling: each follower, then the leader; each back (listening) before the next.
	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	gl_mark "$RUN" fault rolling "$l" "$e"
	for ((j = 1; j <= GL_NREP; j++)); do
		[ "$j" = "$l" ] && continue
		ll_stop_pid "${GL_REP_PIDS[j]}"
		gl_replica_start "$RUN" "$j"
		ll_sleep 1
	done
	ll_stop_pid "${GL_REP_PIDS[l]}"
	gl_replica_start "$RUN" "$l"
	gl_fo_new rolling "$e"
	ll_sleep "$(gl_rand_s 1 2)"

	# etcd's leader member: no replica steps down (2 of 3 keep quorum).
	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	m=$(gl_etcd_leader_member) || ll_fail "etcd: no member says it leads"
	sd0=$(gl_replica_metric "$l" leaseline_coord_step_downs_total)
	gl_mark "$RUN" fault etcd-member "$l" "$e" "$m"
	kill -KILL "${GL_ETCD_PIDS[m]}"
	wait "${GL_ETCD_PIDS[m]}" 2>/dev/null
	ll_sleep "$(awk -v t="$etcd_ttl" 'BEGIN {print t + 1}')"
	sd1=$(gl_replica_metric "$l" leaseline_coord_step_downs_total)
	gl_mark "$RUN" etcd-member-after "$l" "$(gl_held_epoch)" "${sd0:-x}" "${sd1:-x}"
	gl_etcd_member "$RUN" "$m"
	gl_etcd_healthy
	ll_sleep "$(gl_rand_s 1 2)"

	# Quorum lost: 2 of 3 members stopped, the two that do not lead etcd (the
	# one left may renew until raft's CheckQuorum demotes it: the worst case).
	# Grants stop by the leader's deadline, every lease dies (fail-closed: 0
	# admitted), and the fleet is back once quorum is.
	l=$(gl_fo_leader)
	e=$(gl_held_epoch)
	m=$(gl_etcd_leader_member) || ll_fail "etcd: no member says it leads"
	qs=()
	for j in 0 1 2; do
		[ "$j" = "$m" ] || qs+=("${GL_ETCD_PIDS[j]}")
	done
	GL_STOPPED+=("${qs[@]}")
	gl_mark "$RUN" fault quorum "$l" "$e" "$m"
	kill -STOP "${qs[@]}"
	gl_wait_dead "$GL_N" 40 || ll_fail "quorum: agents still hold live leases 40 s after quorum was lost"
	gl_mark "$RUN" dead quorum
	ll_sleep 1
	kill -CONT "${qs[@]}"
	gl_mark "$RUN" quorum-back "$l"
	gl_wait_live "$GL_N" 40 || ll_fail "quorum: not every agent holds a lease 40 s after quorum returned"
	gl_mark "$RUN" live quorum "$(gl_held_epoch)"
	ll_sleep 2

	ll_sleep "$post"
	gl_mark "$RUN" "done"
	gl_send_stop
	gl_recv_stop
	gl_sample_stop
	gl_scrape_all "$RUN" final
	gl_agents_stop
	for ((j = 1; j <= GL_NREP; j++)); do
		ll_stop_pid "${GL_REP_PIDS[j]}"
	done
	gl_common_args
	GL_ARGS+=(--ttl "$GL_FO_TTL" --etcd-ttl "$etcd_ttl")
	gl_check failover "$RUN" "${GL_ARGS[@]}"
}

# ---- many keys: a per-key global limit (key: src-ip), one contract per key ----
# Key k sends from 198.18.128.1 + k (lib.sh). Each scenario has its own contract
# (GL_KS_*, GL_ZIPF_*, GL_COLD_*, see the top) and the per-key checks of gcheck.py.

gl_keys_warm() { echo "${GL_KEYS_WARM:-$(gl_mul 3 "$GL_REFRESH")}"; }

# gl_keys_end: traffic over: receivers, coordinator memory, daemons.
gl_keys_end() {
	gl_recv_stop
	gl_coord_rss "$RUN" end
	gl_down
}

# ---- keys-split: two keys, each hot on one gateway only, at once ----
# Key 0 offered 3R on gateway 1 only, key 1 3R on gateway 2 only, GL_KS_COLD cold
# keys at 0.2R each spread over all gateways. Each hot key should get ~R: its
# contract is wanted on one gateway only. Without per-key grants a key gets its
# gateway's share of the limit (R/2 at best, less with the cold keys' demand).
gl_scn_keys_split() {
	local GL_KEY=src-ip GL_R=$GL_KS_R GL_B=$GL_KS_B cold=$GL_KS_COLD t gen warm
	t=$(gl_dur 6)
	warm=$(gl_keys_warm)
	gen="hot:0@1=$((3 * GL_R))+hot:1@2=$((3 * GL_R))"
	[ "$cold" -gt 0 ] && gen+="+uniform:2-$((1 + cold))@all=$((GL_R / 5))"
	gl_run keys-split
	echo "-- keys split: key 0 at 3R on gateway 1 only, key 1 at 3R on gateway 2 only," \
		"$cold cold keys at 0.2R over all gateways, $t s (per key R $GL_R/s, B $GL_B)"
	gl_lease_up fail-closed
	gl_coord_rss "$RUN" start
	gl_recv_start "$RUN" 300
	gl_send_keys_bg "$RUN" $((2 + cold)) "$t:$gen"
	gl_send_wait "$(awk -v a="$t" 'BEGIN {printf "%d", a + 30}')"
	gl_keys_end
	gl_common_args
	gl_check keys-split "$RUN" "${GL_ARGS[@]}" --warm "$warm" --hot-keys 0,1
}

# ---- c (zipf) and f (zipf-restart): Zipf demand over many keys ----
# GL_ZIPF_KEYS keys, key i offered GL_ZIPF_PPS * (i+1)^-s / H in total, spread
# over 1, 2, 4 or 8 gateways in a fixed random pattern (GL_ZIPF_SEED). KILLS > 0:
# the coordinator is killed -9 KILLS times during the run (gl_kills). KILLS
# "local": standalone agents, each with a per-key (R, B) of its own (zipf-local,
# which must overshoot: it shows the per-key measurement sees an overshoot).
gl_scn_zipf() {
	local kills=${1:-0} GL_KEY=src-ip GL_R=$GL_ZIPF_R GL_B=$GL_ZIPF_B nk=$GL_ZIPF_KEYS
	local t gen warm name=zipf
	[ "$nk" -ge 1 ] && [ "$nk" -le "$GL_KEY_MAX" ] || ll_fail "GL_ZIPF_KEYS: 1..$GL_KEY_MAX"
	t=$(gl_dur 6)
	warm=$(gl_keys_warm)
	gen="zipf:0-$((nk - 1)),s=$GL_ZIPF_S,pps=$GL_ZIPF_PPS,seed=$GL_ZIPF_SEED"
	if [ "$kills" = local ]; then
		name=zipf-local
		kills=0
	elif [ "$kills" -gt 0 ]; then
		name=zipf-restart
	fi
	gl_run "$name"
	echo "-- $name: $nk keys, Zipf s $GL_ZIPF_S, $GL_ZIPF_PPS/s in total, each key on 1/2/4/8" \
		"gateways (pattern seed $GL_ZIPF_SEED), per key R $GL_R/s, B $GL_B$(
			[ "$kills" -gt 0 ] && echo "; coordinator kill -9 x$kills (seed $GL_SEED)"
			[ "$name" = zipf-local ] && echo "; standalone agents, (R, B) per key on each")"
	if [ "$name" = zipf-local ]; then
		gl_local_up
	else
		gl_lease_up fail-closed
	fi
	gl_coord_rss "$RUN" start
	gl_recv_start "$RUN" 600
	if [ "$kills" -eq 0 ]; then
		gl_send_keys_bg "$RUN" "$nk" "$t:$gen"
		gl_send_wait "$(awk -v a="$t" 'BEGIN {printf "%d", a + 30}')"
	else
		# Runs until stopped (bounded by gsend's own limit).
		gl_send_keys_bg "$RUN" "$nk" "300:$gen"
		ll_sleep "$(gl_dur 1.5)"
		gl_kills "$kills"
		ll_sleep "$(gl_dur 1.5)"
		gl_mark "$RUN" "done"
		gl_send_stop
	fi
	gl_keys_end
	gl_common_args
	gl_check "$name" "$RUN" "${GL_ARGS[@]}" --warm "$warm"
}

# ---- g (cold): many cold keys at a low rate each ----
# GL_COLD_KEYS keys cycled through by every gateway's stream (GL_COLD_PPS in
# total): each key far below its default share, so no key may be reported hot
# and no per-key grant sent. With GL_COLD_PORTS=P the limit is key: flow and key
# k is (198.18.128.1 + k/P, source port 20000 + k%P): up to 32766 * P keys.
gl_scn_cold() {
	local GL_KEY=src-ip GL_R=$GL_COLD_R GL_B=$GL_COLD_B GL_KEY_PORTS=$GL_COLD_PORTS
	local GL_MAX_KEYS=${GL_MAX_KEYS:-4096} GL_MAX_FLOW_KEYS=${GL_MAX_FLOW_KEYS:-}
	local nk=${GL_COLD_KEYS:-$GL_KEY_MAX} t per kind warm
	t=$(gl_dur 8)
	per=$(awk -v a="$GL_COLD_PPS" -v n="$GL_N" 'BEGIN {printf "%.3f", a / n}')
	if [ "$GL_KEY_PORTS" -gt 0 ]; then
		GL_KEY=flow
		[ "$nk" -le $((GL_KEY_MAX * GL_KEY_PORTS)) ] || ll_fail "GL_COLD_KEYS: at most $((GL_KEY_MAX * GL_KEY_PORTS))"
		# Every key a bucket of its own: no key may share the overflow bucket.
		GL_MAX_FLOW_KEYS=$((nk + 1024))
		kind="key flow, $((  (nk + GL_KEY_PORTS - 1) / GL_KEY_PORTS)) addresses x $GL_KEY_PORTS source ports"
	else
		[ "$nk" -le "$GL_KEY_MAX" ] || ll_fail "GL_COLD_KEYS: at most $GL_KEY_MAX with key src-ip"
		GL_MAX_KEYS=$((nk + 1024))
		kind="key src-ip"
	fi
	# The shares move while the gateways' first reports of demand arrive: measure
	# after 2 ttl of the same traffic (the cycle goes on through new keys).
	warm=$(gl_mul 2 "$GL_TTL")
	gl_run cold
	echo "-- cold keys: $nk keys ($kind), $GL_COLD_PPS/s in total cycling through them on" \
		"every gateway, $warm s warm-up then $t s measured (per key R $GL_R/s, B $GL_B)"
	gl_lease_up fail-closed
	gl_coord_rss "$RUN" start
	gl_recv_start "$RUN" 600
	gl_send_keys_bg "$RUN" "$nk" "$warm:cycle:0-$((nk - 1))@all=$per" "$t:cycle:0-$((nk - 1))@all=$per"
	gl_send_wait "$(awk -v a="$t" -v w="$warm" 'BEGIN {printf "%d", a + w + 30}')"
	gl_keys_end
	gl_common_args
	gl_check cold "$RUN" "${GL_ARGS[@]}" --warm "$warm"
}
