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

GL_R=${GL_R:-1000}
GL_B=${GL_B:-200}
GL_TTL=${GL_TTL:-1}
GL_REFRESH=${GL_REFRESH:-0.25}
GL_FB_R=${GL_FB_R:-25}
GL_FB_B=${GL_FB_B:-10}
GL_SCALE=${GL_SCALE:-1}
GL_SEED=${GL_SEED:-$$}
RANDOM=$GL_SEED

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

# ---- 5: coordinator kill -9 and restart at random moments ----
gl_scn_restart() {
	local kills=${1:-2} k pre post down
	pre=$(gl_dur 1.5)
	post=$(gl_dur 1.5)
	gl_run restart
	echo "-- coordinator kill -9 and restart, $kills times at random moments (seed $GL_SEED), uniform 3R"
	gl_lease_up fail-closed
	gl_recv_start "$RUN" 600
	# Runs until stopped below (bounded by gsend's own limit).
	gl_send_bg "$RUN" "300:$(gl_rates "$GL_N" $((3 * GL_R / GL_N)))"
	ll_sleep "$pre"
	for ((k = 1; k <= kills; k++)); do
		ll_sleep "$(gl_rand_s 0 1)"
		gl_mark "$RUN" kill "$k"
		gl_coord_kill9
		down=$(gl_rand_s 0.1 1.2)
		ll_sleep "$down"
		gl_mark "$RUN" restart "$k"
		# The wait must start before the quiet period ends (no new epoch yet).
		gl_coord_start "$RUN" "$(gl_ms "$GL_TTL")" "$(gl_ms "$GL_REFRESH")"
		gl_wait_live "$GL_N" 30 --new-epoch || ll_fail "agents hold no new-epoch lease 30 s after restart $k"
		gl_mark "$RUN" live "$k"
		ll_sleep "$(gl_rand_s 0.5 1.5)"
	done
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
