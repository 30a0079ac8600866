#!/bin/bash
# SPDX-License-Identifier: MIT
# Live datapath figures (docs/benchmarks-live.md): our XDP generator
# (bench/bpf/trafgen.bpf.c, driven by build/bench/bench_live on CPU 0) sends 64-byte
# UDP frames out of a veth; the DUT is the peer veth in another namespace, its
# threaded NAPI kthread pinned to CPU 1. Figures per run, after a warm-up: DUT
# kthread CPU ns per packet (primary) and packets/s, the DUT saturated with at
# most BL_WINDOW frames in flight (the generator waits for the DUT's XDP counter
# instead of overrunning the veth ring: see bench/bpf/trafgen.bpf.c).
# Only namespaces and veths this script creates (names carry its pid),
# 198.18.0.0/15 inside them, removed on every exit path (tests/net/lib.sh's
# trap), every loop and wait bounded (reference §8).
#
#   1. throughput: drop (counting XDP_DROP floor), ll1, ll4, ll4f (leaseline, 1
#      and 4 limits), ll1b (ll1 counted in bytes), ll1g (ll1 as a per-key global limit on a leased share), hashlimit (XDP_PASS +
#      iptables-legacy xt_hashlimit in raw PREROUTING), nft (XDP_PASS + nftables
#      dynamic set with limit), the same per-key limit everywhere (BL_RATE packets/s,
#      burst BL_BURST), ref (the reference limiter of issue #14, bench/bpf/reflim.bpf.c:
#      4-byte source key, BPF_MAP_TYPE_HASH, bpf_ktime_get_ns, a CAS), at 1, 64k and 1M keys, interleaved ABC..CBA over BL_REPS
#      repetitions; medians
#   2. BPF run time per packet of the DUT program (BPF_STATS_RUN_TIME)
#   3. accuracy under load: 10 s saturating senders at 1 and 64k keys, admitted
#      per key (nft per-element counters behind XDP) vs burst + rate * t
#   4. memory: the real agent with max-keys 1M, 1M keys: ll_buckets memlock,
#      agent RSS, bucket creations (reaper) and overflow
#   5. perf profile of the DUT NAPI kthread for a few configurations (when perf works)
#
# Usage: scripts/bench-live.sh [BUILD_DIR]
#        scripts/bench-live.sh --summary RAW_FILE   (the tables of an earlier run)
# Knobs: BL_REPS (5), BL_DUR (3 s per run), BL_WINDOW (192 frames; 0: overrun the ring),
#        BL_GEN_WRITE (changed: the generator writes a frame's varied fields only when
#        its page holds other values, so at 1 key the DUT reads headers no other CPU
#        has just written, as from a NIC; always: into every frame, as before
#        2026-12-02, which puts a cross-CPU cache miss on every packet's first read),
#        BL_BATCH (256: test_run's batch, which sizes its page pool),
#        BL_RATE (1), BL_BURST (1), BL_KEYS ("1 65536 1048576"),
#        BL_CONFIGS ("drop kfloor kfloorc ref reftc ll1 ll1g ll4 ll4f ll1b hashlimit nft"; also kfhdr,
#        reft refc: the reference on its own table, timed by the coarse clock (reftc: both),
#        llsyn llsynack: TCP SYN / ACK frames against a tcp-flags: syn rule), BL_ONLY ("tput stats acc mem perf"),
#        BL_PERF_CFGS ("ll1:1 ll4:1 ll1:65536 hashlimit:65536 nft:65536 ll1:1048576"),
#        BL_ACC_S (10), LL_KEEP=1 (keep the temp dir). Raw lines: BUILD/bench-live.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)

# bl_summary FILE: medians and ratios of the throughput lines, then the
# accuracy, memory and profile lines, from a raw file of this script.
bl_summary() {
	python3 - "$1" <<'EOF'
import statistics, sys
tput, stats = {}, {}
for line in open(sys.argv[1]):
    if not line.startswith("run "):
        continue
    d = dict(kv.split("=", 1) for kv in line.split()[1:])
    parts = d["label"].split(":")
    if parts[0] != "tput" or len(parts) != 4:
        continue
    cfg, keys, rep, phase = parts[1], int(parts[2]), parts[3], d["phase"]
    if rep == "stats":
        stats[(cfg, keys, phase)] = float(d["prog_ns_per_pkt"])
    elif rep != "perf":
        tput.setdefault((cfg, keys, phase), []).append(d)
def med(rs, f):
    return statistics.median(float(r[f]) for r in rs)
keys = sorted({k for _, k, _ in tput})
order = ["drop", "pass", "kfhdr", "kfloor", "kfloorc", "ref", "reft", "refc", "reftc", "refa", "ll1", "ll1p", "ll1a", "ll1pa", "ll4a", "ll1g", "ll4", "ll4f", "ll1b", "llsyn",
         "llsynack", "hashlimit", "nft"]
cfgs = [c for c in order if any((c, k, p) in tput for k in keys for p in ("win", "open"))]
for phase, title in (("win", "DUT saturated, window-limited generator"),
                     ("open", "generator overrunning the veth ring")):
    if not any(p == phase for _, _, p in tput):
        continue
    print("-- %s: medians over repetitions (min-max of DUT ns/pkt)" % title)
    print("%-10s %8s %3s %10s %11s %7s %8s %6s %6s %7s %6s %8s %6s %6s" % ("config", "keys", "n",
          "DUT ns/pkt", "(min-max)", "cyc/pkt", "DUT Mpps", "busy", "other", "admit", "loss",
          "prog ns", "clk ns", "mem ns"))
    for k in keys:
        for c in cfgs:
            rs = tput.get((c, k, phase))
            if not rs:
                continue
            ns = [float(r["napi_ns_per_pkt"]) for r in rs]
            st = stats.get((c, k, phase))
            host = lambda f: "%.0f" % med(rs, f) if all(f in r for r in rs) else "-"
            # cycles at the nominal clock /proc/cpuinfo gives (cpu_mhz)
            cyc = ("%.0f" % (statistics.median(ns) * med(rs, "cpu_mhz") / 1e3)
                   if all(float(r.get("cpu_mhz", -1)) > 0 for r in rs) else "-")
            print("%-10s %8d %3d %10.1f %5.0f-%-5.0f %7s %8.3f %6.2f %6.2f %7s %6.3f %8s %6s %6s" % (
                c, k, len(rs), statistics.median(ns), min(ns), max(ns), cyc,
                med(rs, "dut_pps") / 1e6, med(rs, "napi_busy"), med(rs, "cpu_other"),
                "%.4f" % max(med(rs, "admit_frac"), 0) if c.startswith("ll") else "-",
                med(rs, "ring_loss"), "%.1f" % st if st is not None else "-",
                host("host_clock_ns"), host("host_mem_ns")))
    print()
    def ratio(a, b, k):
        # Median over repetitions of the ratio within each repetition: the
        # configurations of one repetition ran within seconds of each other,
        # so a slow spell of a shared machine mostly cancels out.
        def per_rep(c):
            return {r["label"].split(":")[3]: float(r["napi_ns_per_pkt"])
                    for r in tput.get((c, k, phase), [])}
        ra, rb = per_rep(a), per_rep(b)
        rs = [ra[x] / rb[x] for x in ra if x in rb and rb[x] > 0]
        return (statistics.median(rs), min(rs), max(rs)) if rs else None
    for (a, b, k, op, tgt) in [("ll1", "ref", 1, "<=", 1.0), ("ll1", "ref", 65536, "<=", 1.0),
                               ("ll1", "ref", 1048576, "<=", 1.0), ("ll4", "ref", 1, None, None),
                               ("reft", "ref", 1, None, None), ("reft", "ref", 65536, None, None),
                               ("reft", "ref", 1048576, None, None), ("reft", "drop", 1, None, None),
                               ("refc", "drop", 1, None, None), ("reftc", "drop", 1, None, None),
                               ("ll1", "reftc", 1, None, None), ("ll1", "reftc", 65536, None, None),
                               ("hashlimit", "reftc", 65536, None, None), ("nft", "reftc", 65536, None, None),
                               ("reftc", "refc", 1048576, None, None),
                               ("ll1a", "pass", 1, "<=", 1.5), ("refa", "pass", 1, None, None),
                               ("ll1a", "refa", 1, "<=", 1.0), ("ll1pa", "ll1a", 1, None, None),
                               ("ll4a", "ll1a", 1, "<=", 2.0), ("ll4a", "pass", 1, None, None),
                               ("ll1p", "ref", 1, None, None), ("ll1p", "ll1", 1, None, None),
                               ("ll1p", "ll1", 65536, None, None), ("ref", "drop", 1, None, None), ("ref", "drop", 65536, None, None),
                               ("ll1", "drop", 1, "<=", 1.5), ("ll4", "drop", 1, "<=", 1.3),
                               ("ll4f", "drop", 1, "<=", 1.3),
                               ("hashlimit", "ll1", 65536, ">=", 4), ("nft", "ll1", 65536, ">=", 4),
                               ("hashlimit", "ll4", 65536, ">=", 4), ("nft", "ll4", 65536, ">=", 4),
                               ("hashlimit", "ll4f", 65536, ">=", 4), ("nft", "ll4f", 65536, ">=", 4),
                               ("hashlimit", "ll1", 1048576, None, None),
                               ("nft", "ll1", 1048576, None, None),
                               ("ll1", "drop", 65536, None, None), ("ll1", "drop", 1048576, None, None),
                               ("ll1b", "ll1", 1, None, None), ("ll1b", "ll1", 65536, None, None),
                               ("ll1g", "ll1", 65536, "<=", 1.1), ("ll1g", "ll1", 1, None, None),
                               ("ll1g", "ll1", 1048576, None, None),
                               ("kfhdr", "drop", 1, None, None),
                               ("kfloor", "drop", 1, None, None), ("kfloorc", "drop", 1, None, None),
                               ("ll1", "kfloor", 1, None, None), ("ll1", "kfloor", 65536, None, None),
                               ("hashlimit", "kfloor", 65536, None, None),
                               ("hashlimit", "kfloorc", 65536, None, None),
                               ("nft", "kfloorc", 65536, None, None),
                               ("nft", "kfloor", 65536, None, None),
                               ("llsyn", "ll1", 1, None, None), ("llsyn", "ll1", 65536, None, None),
                               ("llsynack", "ll1", 1, None, None),
                               ("llsynack", "ll1", 65536, None, None),
                               ("llsynack", "drop", 1, None, None),
                               ("llsynack", "drop", 65536, None, None)]:
        rr = ratio(a, b, k)
        if rr is None:
            continue
        r, lo, hi = rr
        verdict = ""
        if op:
            ok = r <= tgt if op == "<=" else r >= tgt
            verdict = "target %s %.1f: %s" % (op, tgt, "met" if ok else "MISSED")
        print("ratio %-9s / %-4s at %7d keys, %-4s (DUT ns/pkt, median of per-rep ratios): %5.2f"
              " (%.2f-%.2f)  %s" % (a, b, k, phase, r, lo, hi, verdict))
    print()
EOF
	grep -E '^(bench-live|acc|mem|perf|  ) ' "$1"
}

# scripts/bench-live.sh --summary FILE: print the summary of an earlier run.
if [ "${1:-}" = --summary ]; then
	bl_summary "${2:?raw file}"
	exit
fi

BUILD=$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd) || {
	echo "bench-live: no build dir '${1:-$ROOT/build}'" >&2
	exit 2
}
BL=$BUILD/bench/bench_live
BL_REPS=${BL_REPS:-5}
BL_DUR=${BL_DUR:-3}
BL_RATE=${BL_RATE:-1}
BL_BURST=${BL_BURST:-1}
BL_WINDOW=${BL_WINDOW:-192}
BL_GEN_WRITE=${BL_GEN_WRITE:-changed}
BL_BATCH=${BL_BATCH:-256}
FRAME=64 # bytes per generated frame: ll1b's cost per packet in bytes mode
BL_KEYS=${BL_KEYS:-"1 65536 1048576"}
BL_CONFIGS=${BL_CONFIGS:-"drop kfloor kfloorc ref reftc ll1 ll1g ll4 ll4f ll1b hashlimit nft"}
BL_ONLY=${BL_ONLY:-"tput stats acc mem perf"}
BL_ACC_S=${BL_ACC_S:-10}
BL_PERF_CFGS=${BL_PERF_CFGS:-"ll1:1 ll4:1 ll1:65536 hashlimit:65536 nft:65536 ll1:1048576"}
OUT=$BUILD/bench-live.txt
# Accuracy limits. Rate: 1 key far below the offered rate; at 64k keys low
# enough that each key's share (DUT packets/s / 65536) still exceeds it.
# Burst >= rate * 1 s: a pause of the DUT thread shorter than burst/rate (a
# shared machine's scheduler) costs no tokens, so the figure is the limiter's.
ACC1_R=10000 ACC1_B=10000
ACC64_R=1 ACC64_B=10

source "$ROOT/tests/net/lib.sh"
ll_init "$BUILD"
[ -x "$BL" ] || ll_fail "'$BL' is not built (make)"
for t in iptables-legacy nft bpftool; do
	command -v "$t" >/dev/null || ll_skip "needs '$t' (scripts/install-deps.sh)"
done
[ "$(nproc)" -ge 2 ] || ll_skip "needs 2 CPUs (generator on 0, DUT on 1)"
want() { [[ " $BL_ONLY " == *" $1 "* ]]; }

# Generator = lib.sh's client side (llc$$, vc$$), DUT = gateway side (llg$$, vg$$).
GEN_NS=/run/netns/$LL_NS_C
DUT_NS=/run/netns/$LL_NS_G
DUT_IF=$LL_G_IF
ll_topo
# Native XDP on the veth's receive side needs a program on it: the NAPI exists
# from then on, and stays while the driver replaces one program by the next.
ip -n "$LL_NS_G" link set dev "$DUT_IF" xdpdrv obj "$BUILD/pass.bpf.o" sec xdp ||
	ll_skip "cannot attach native XDP to a veth"
bl_threaded() {
	ip netns exec "$LL_NS_G" sh -c "echo 1 > /sys/class/net/$DUT_IF/threaded" ||
		ll_fail "cannot make $DUT_IF's NAPI threaded"
}
bl_threaded

: >"$OUT"
echo "bench-live: $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs" \
	"($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), loadavg $(cut -d' ' -f1-3 /proc/loadavg)" |
	tee -a "$OUT"
echo "bench-live: limit $BL_RATE packets/s burst $BL_BURST per key, $BL_REPS reps x $BL_DUR s," \
	"window $BL_WINDOW, batch $BL_BATCH, keys: $BL_KEYS" | tee -a "$OUT"
echo "bench-live: tree $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" \
	"($(git -C "$ROOT" status --short bpf include user 2>/dev/null | wc -l) changed files under bpf include user)," \
	"leaseline.bpf.o $(sha256sum "$BUILD/leaseline.bpf.o" | cut -c1-12)" | tee -a "$OUT"

# Netfilter state of the DUT namespace for one configuration. The tables die
# with the namespace; each run starts from empty tables and rules.
nf_clear() {
	in_g iptables-legacy -t raw -F PREROUTING 2>/dev/null
	in_g nft flush ruleset 2>/dev/null
}
# nf_set CONFIG KEYS: the per-key limit of the throughput runs.
nf_set() {
	local cfg=$1 keys=$2 r=$BL_RATE b=$BL_BURST mode=srcip type=ipv4_addr sel="ip saddr" size max
	nf_clear
	if [ "$keys" -gt 65536 ]; then # the generator varies the source port past 64k keys
		mode=srcip,srcport
		type="ipv4_addr . inet_service"
		sel="ip saddr . udp sport"
	fi
	# Table sizes a careful operator would pick: one hash bucket per key, room
	# for twice the keys (xt_hashlimit caps both at 2^20 entries).
	size=$((keys < 1024 ? 1024 : keys))
	max=$((2 * size > 1048576 ? 1048576 : 2 * size))
	case $cfg in
	hashlimit)
		in_g iptables-legacy -t raw -A PREROUTING -p udp --dport "$LL_PORT" -m hashlimit \
			--hashlimit-mode "$mode" --hashlimit-above "$r/sec" --hashlimit-burst "$b" \
			--hashlimit-name llb --hashlimit-htable-size "$size" \
			--hashlimit-htable-max "$max" -j DROP || ll_fail "cannot add the hashlimit rule"
		;;
	nft)
		in_g nft -f - <<EOF || ll_fail "cannot add the nftables limiter"
table ip llb {
	set keys { type $type; size $((2 * size)); flags dynamic,timeout; timeout 60s; }
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		udp dport $LL_PORT update @keys { $sel limit rate over $r/second burst $b packets } drop
	}
}
EOF
		;;
	esac
}

# Per-source counters of what got through XDP (accuracy): an nftables set with
# a counter per element, in raw PREROUTING, behind the XDP program.
nf_count() {
	nf_clear
	in_g nft -f - <<EOF || ll_fail "cannot add the counting set"
table ip llacc {
	set seen { type ipv4_addr; size 262144; flags dynamic; }
	chain pre {
		type filter hook prerouting priority raw; policy accept;
		udp dport $LL_PORT update @seen { ip saddr counter }
	}
}
EOF
}

# bl_run LABEL PROG KEYS [DRIVER ARGS...]: one driver run, interruptible and
# bounded; its line goes to OUT and to stdout.
bl_run() {
	local label=$1 prog=$2 keys=$3 pid rc
	shift 3
	LL_BENCH_LIVE=1 timeout -s TERM 120 "$BL" run --gen-ns "$GEN_NS" --gen-if "$LL_C_IF" \
		--dut-ns "$DUT_NS" --dut-if "$DUT_IF" --dst "$LL_G_ADDR" --dport "$LL_PORT" \
		--prog "$prog" --keys "$keys" --label "$label" "$@" >"$TMPD/run.out" 2>"$TMPD/run.err" &
	pid=$!
	LL_PIDS+=("$pid")
	wait "$pid"
	rc=$?
	if [ "$rc" -ne 0 ] || ! grep -q '^run ' "$TMPD/run.out"; then
		cat "$TMPD/run.err" >&2
		ll_fail "driver run '$label' failed (rc $rc)"
	fi
	tee -a "$OUT" <"$TMPD/run.out"
}

# One throughput run of configuration CFG at KEYS keys.
tput_run() {
	local cfg=$1 keys=$2 rep=$3 prog lim
	shift 3
	lim=(--unit packets --rate "$BL_RATE" --burst "$BL_BURST")
	case $cfg in
	hashlimit | nft | pass) prog=pass ;;
	ll1g) # the same limit as a per-key global one, spending a leased share
		prog=ll1
		lim+=(--global)
		;;
	ll1p) # ll1 charged against bpf_ktime_get_ns (leaseline's clock before issue #14)
		prog=ll1
		lim+=(--precise-clock)
		;;
	refc | reftc) # the reference (on its own table) timed by the coarse clock, as ll1
		prog=${cfg%c}
		set -- "$@" --coarse-clock
		;;
	ll1a | ll1pa | ll4a | refa) # the admit path: a key under its limit (10^9/s, burst 10^9)
		prog=${cfg%a}
		prog=${prog%p}
		lim=(--unit packets --rate 1000000000 --burst 1000000000)
		[ "$cfg" = ll1pa ] && lim+=(--precise-clock)
		;;
	ll1b) # the same limit counted in bytes (every frame is FRAME bytes)
		prog=ll1
		lim=(--unit bytes --rate $((FRAME * BL_RATE)) --burst $((FRAME * BL_BURST)))
		;;
	llsyn) # rule {proto tcp, dst-port, tcp-flags: syn}, default drop; SYN frames: charged
		prog=llsyn
		set -- "$@" --tcp-flags 0x02
		;;
	llsynack) # the same DUT; ACK frames: not a SYN, the rule is skipped, the default drops
		prog=llsyn
		set -- "$@" --tcp-flags 0x10
		;;
	*) prog=$cfg ;;
	esac
	nf_set "$cfg" "$keys"
	# Per-key tables sized as nf_set sizes the netfilter ones: room for 2N keys.
	bl_run "tput:$cfg:$keys:$rep" "$prog" "$keys" "${lim[@]}" --duration "$BL_DUR" \
		--window "$BL_WINDOW" --batch "$BL_BATCH" --gen-write "$BL_GEN_WRITE" --max-keys $((2 * (keys < 1024 ? 1024 : keys))) "$@"
	nf_clear
}

if want tput; then
	echo "== 1. throughput (A/B/A interleaved, order reversed every other repetition)"
	for keys in $BL_KEYS; do
		order=($BL_CONFIGS)
		for ((rep = 1; rep <= BL_REPS; rep++)); do
			for cfg in "${order[@]}"; do
				tput_run "$cfg" "$keys" "$rep"
			done
			for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
				t=${order[i]} && order[i]=${order[j]} && order[j]=$t
			done
		done
	done
fi

if want stats; then
	echo "== 2. BPF run time per packet of the DUT program (stats on: slower runs, not used above)"
	for keys in $BL_KEYS; do
		for cfg in drop ll1 ll4 pass; do
			[ "$cfg" = pass ] || [ "$cfg" = drop ] && [ "$keys" != 1 ] && continue
			tput_run "$cfg" "$keys" stats --prog-stats
		done
	done
	echo "== 2b. the generator unchecked (window 0: it overruns the veth ring; drop floor)"
	tput_run drop 1 open --window 0
fi

# acc_run KEYS RATE BURST: saturating senders for BL_ACC_S s on every key,
# leaseline with one limit in packets. Admitted per key: an nftables counter
# per source behind XDP (independent of leaseline's own counters). Each key's
# window: from the generator's first frame (trafgen's tg_first_ns) to the key's
# last packet (its bucket's last_ns), so B + R * window is an upper bound that
# must hold, and a saturated key should come within a packet or two below it.
acc_run() {
	local keys=$1 r=$2 b=$3 noports0 noports1
	nf_count
	noports0=$(in_g awk '/^Udp:/ && ++n == 2 {print $3}' /proc/net/snmp)
	bl_run "acc:$keys" ll1 "$keys" --rate "$r" --burst "$b" --warmup 0 --duration "$BL_ACC_S" \
		--dump-buckets "$TMPD/buckets-$keys.txt"
	sleep 0.2
	noports1=$(in_g awk '/^Udp:/ && ++n == 2 {print $3}' /proc/net/snmp)
	in_g nft -j list set ip llacc seen >"$TMPD/acc-$keys.json" || ll_fail "cannot read the counting set"
	python3 - "$TMPD/acc-$keys.json" "$TMPD/run.out" "$TMPD/buckets-$keys.txt" "$r" "$b" \
		"$((noports1 - noports0))" <<'EOF' | tee -a "$OUT"
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
run = dict(kv.split("=", 1) for kv in open(sys.argv[2]).read().split()[1:])
rate, burst, noports = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
nft = {}
for item in doc["nftables"]:
    for e in item.get("set", {}).get("elem", []) or []:
        el = e.get("elem", e)
        nft[el["val"]] = el["counter"]["packets"]
t0 = float(run["t_first_ns"]) or float(run["t0_ns"])  # the generator's first frame
err, over, adm_sum, exp_sum = [], 0, 0, 0.0
for line in open(sys.argv[3]):
    ip, sport, last, tokens = line.split()
    exp = burst + rate * (float(last) - t0) / 1e9
    adm = nft.get(ip, 0)
    err.append(adm - exp)
    over += adm > exp
    adm_sum += adm
    exp_sum += exp
keys = int(run["keys"])
offered = float(run["dut_pkts"]) / float(run["secs"]) / keys
med = statistics.median(err) if err else 0
worst = max(err, key=abs) if err else 0
mean_exp = exp_sum / len(err) if err else 0
print("acc keys=%d rate=%g burst=%g secs=%.3f offered_per_key_pps=%.1f buckets=%d nft_keys=%d "
      "admitted_nft=%d admitted_leaseline=%s udp_noports=%d expected_sum=%.0f "
      "err_worst=%+.2f err_median=%+.2f err_min=%+.2f err_max=%+.2f over_bound=%d "
      "rel_worst=%+.5f rel_median=%+.5f" % (
          keys, rate, burst, float(run["total_secs"]), offered, len(err), len(nft), adm_sum,
          run["total_allowed"], noports, exp_sum, worst, med, min(err, default=0),
          max(err, default=0), over, worst / mean_exp if mean_exp else 0,
          med / mean_exp if mean_exp else 0))
EOF
	nf_clear
}

if want acc; then
	echo "== 3. accuracy under load ($BL_ACC_S s, leaseline 1 limit)"
	acc_run 1 "$ACC1_R" "$ACC1_B"
	acc_run 65536 "$ACC64_R" "$ACC64_B"
fi

if want mem; then
	echo "== 4. memory: the agent, max-keys 1048576, 1M flow keys ($BL_RATE packets/s burst $BL_BURST)"
	# The agent attaches only where no foreign program is: take ours off first
	# (the NAPI goes with it and comes back, threaded, with the agent's program).
	ip -n "$LL_NS_G" link set dev "$DUT_IF" xdpdrv off
	ll_bpffs
	cat >"$TMPD/policy.yaml" <<EOF
version: 1
default: pass
limits:
  - {name: client, key: flow, unit: packets, rate: $BL_RATE, burst: $BL_BURST}
rules:
  - name: udp
    match: {proto: udp, dst-port: $LL_PORT}
    limits: [client]
EOF
	cat >"$TMPD/agent.yaml" <<EOF
node: bench-live-$$
interfaces:
  - {name: $DUT_IF, mode: native}
pin-dir: $PIN
policy: $TMPD/policy.yaml
max-keys: 1048576
EOF
	ll_agent_start "$TMPD/agent.yaml" "$TMPD/agent.log"
	bl_threaded
	rss0=$(awk '/^VmRSS/ {print $2}' /proc/"$AGENT_PID"/status)
	# 12 s: two of the agent's 5 s reaper passes with the map over half full.
	bl_run "mem:1048576" keep 1048576 --pin-dir "$PIN" --duration 12
	rss1=$(awk '/^VmRSS/ {print $2}' /proc/"$AGENT_PID"/status)
	hwm=$(awk '/^VmHWM/ {print $2}' /proc/"$AGENT_PID"/status)
	for m in ll_buckets ll_flow_buckets; do
		bpftool -j map show pinned "$PIN/$m" >"$TMPD/$m.json" ||
			ll_fail "cannot read $m's info"
	done
	ll_status -j >"$TMPD/status.json" || ll_fail "leaseline status -j failed"
	python3 - "$TMPD" "$rss0" "$rss1" "$hwm" <<'EOF' | tee -a "$OUT"
import json, sys
d = sys.argv[1]
live = sum(l["keys"] for l in json.load(open(d + "/status.json"))["limits"])
r8 = lambda n: (n + 7) // 8 * 8
for name in ("ll_buckets", "ll_flow_buckets"):
    m = json.load(open("%s/%s.json" % (d, name)))
    kv = m["bytes_key"] + m["bytes_value"]
    ml = m.get("bytes_memlock", 0)
    # The kernel's own element: struct htab_elem (48 B on 6.x, x86-64) + key
    # + value, each rounded to 8; and one 16-byte hash bucket per power of 2.
    elem = 48 + r8(m["bytes_key"]) + r8(m["bytes_value"])
    nb = 1 << (m["max_entries"] - 1).bit_length()
    prealloc = not m.get("flags", 0) & 1  # BPF_F_NO_PREALLOC
    n = m["max_entries"] if prealloc else live
    per = ml / n if n else 0
    print("mem %s max_entries=%d key=%d value=%d flags=0x%x memlock=%d live_keys=%d "
          "per_key=%.1f per_key_over_kv=%.2f kernel_elem=%d hash_buckets=%d "
          "per_key_over_kernel_elem=%.2f" % (
              name, m["max_entries"], m["bytes_key"], m["bytes_value"], m.get("flags", 0), ml,
              live if not prealloc else -1, per, per / kv, elem, nb, per / elem))
print("mem agent rss_kib_start=%s rss_kib_after=%s hwm_kib=%s" % tuple(sys.argv[2:5]))
EOF
	ll_stop_pid "$AGENT_PID"
	AGENT_PID=
	# Back to a plain program for anything after this.
	ip -n "$LL_NS_G" link set dev "$DUT_IF" xdpdrv off 2>/dev/null
	ip -n "$LL_NS_G" link set dev "$DUT_IF" xdpdrv obj "$BUILD/pass.bpf.o" sec xdp
	bl_threaded
fi

# bl_napi_tid: the DUT's NAPI kthread (the driver pins it; its comm may be cut).
bl_napi_tid() {
	local f c
	for f in /proc/[0-9]*/comm; do
		read -r c <"$f" 2>/dev/null || continue
		[[ $c == "napi/$DUT_IF-"* ]] && { f=${f#/proc/} && echo "${f%/comm}" && return 0; }
	done
	return 1
}

# perf_run CFG KEYS: profile the DUT's NAPI kthread for 2 s in the middle of a
# run. Without a hardware PMU (a VM) perf samples on a timer, which cannot fire
# while interrupts are off: time under bpf_spin_lock (irqsave) shows up on
# __bpf_spin_unlock_irqrestore.
perf_run() {
	local cfg=$1 keys=$2 ppid tid
	tid=$(bl_napi_tid) || ll_fail "no NAPI kthread for $DUT_IF"
	(
		sleep 1.5
		exec perf record -q ${BL_PERF_ARGS:-} ${BL_PERF_TARGET:--t $tid} -F 4999 -o "$TMPD/perf-$cfg-$keys.data" -- sleep 2
	) >/dev/null 2>&1 &
	ppid=$!
	LL_PIDS+=("$ppid")
	tput_run "$cfg" "$keys" perf --duration 4
	ll_wait_pid "$ppid" 10
	echo "perf cfg=$cfg keys=$keys top symbols of the DUT NAPI kthread (self %):" | tee -a "$OUT"
	perf report -q -i "$TMPD/perf-$cfg-$keys.data" --no-children --sort sym --stdio 2>/dev/null |
		grep -v '^$' | head -24 | sed 's/^/  /' | tee -a "$OUT"
}

if want perf && command -v perf >/dev/null && perf record -q -o /dev/null -- true >/dev/null 2>&1; then
	echo "== 5. perf profile of the DUT NAPI kthread"
	for c in $BL_PERF_CFGS; do
		perf_run "${c%%:*}" "${c#*:}"
	done
fi

echo "== summary (medians; raw lines in $OUT)"
bl_summary "$OUT" | tee "$BUILD/bench-live-summary.txt"

echo "bench-live: done; summary in $BUILD/bench-live-summary.txt"
