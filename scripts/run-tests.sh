#!/bin/bash
# SPDX-License-Identifier: MIT
# Run leaseline's tests and print one closing line that counts them:
#   build scripts tests/build/test_*.sh: what the build enforces (layering)
#   unit  cmocka binaries from tests/unit and tests/coord (the coordinator's;
#         no root needed)
#   integ cmocka binaries from tests/integ: a real `leaseline coord` process
#         (LL_BIN) driven over loopback; the tmpfs cases need root, else skip
#   bpf   cmocka binaries from tests/bpf (real kernel, bpf_prog_test_run_opts)
#   net   scripts tests/net/test_*.sh (namespaces + veth, reference §8); exit 77 = skip
#   kernel scripts tests/kernels/test_*.sh: Debian 12's kernel booted in qemu
#         (tests/kernels/README.md)
#   san-net  the network tests of SAN_NET (LL_SAN_NET) with BUILD/san's
#         leaseline: agent and coordinator under ASan+UBSan (make san)
#   san   BUILD/san (make san): the unit and integration tests again under
#         ASan+UBSan (the coordinator they run is BUILD's), and each
#         libFuzzer harness of tests/fuzz for LL_FUZZ_SECONDS (default 10) on a
#         copy of its seed corpus; skipped when BUILD/san is not built
# Usage: run-tests.sh BUILD_DIR [build|unit|integ|bpf|net|kernel|san|san-net]...
set -u
BUILD=${1:?build dir}
shift
SUITES=${*:-build unit integ bpf net kernel san}
SAN_NET=${LL_SAN_NET:-test_tls test_reload test_restart test_global_coord test_usage_keys test_refusal}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

passed=0 failed=0 skipped=0
failures=()
# Wall time of each test (ms), for the slowest-first list at the end: CI
# runs within a time bound, and this says where the time goes.
timings=()
now_ms() { date +%s%3N; }
timed() { # timed NAME START_MS: record NAME's time since START_MS, and print it
	local ms=$(($(now_ms) - $2))
	timings+=("$ms $1")
	printf '   (%d.%01d s)\n' $((ms / 1000)) $((ms % 1000 / 100))
}

# cmocka prints "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)...".
count_cmocka() {
	local name=$1 log=$2 rc=$3 p f
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed or failed before cmocka could count
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	[ "$f" -ne 0 ] && failures+=("$name")
}

run_cmocka_suite() {
	local dir=$1 build=${2:-$BUILD} tag=${3:-$1} src bin log rc t0
	for src in tests/"$dir"/test_*.c; do
		[ -e "$src" ] || continue
		bin="$build/tests/$(basename "$src" .c)"
		log=$(mktemp)
		echo "== $tag/$(basename "$bin")"
		t0=$(now_ms)
		LL_FIXTURES="$ROOT/tests/unit/fixtures" LL_BIN="$BUILD/leaseline" "$bin" >"$log" 2>&1
		rc=$?
		timed "$tag/$(basename "$bin")" "$t0"
		grep -E '^\[  (FAILED|PASSED)|^\[  ERROR|^\[ +FAIL|Failed|failure|error' "$log" | head -40
		# A failed suite: its last lines whole (a model test's seed, what it saw).
		[ "$rc" -eq 0 ] || sed 's/^/   | /' "$log" | tail -30
		count_cmocka "$bin" "$log" "$rc"
		rm -f "$log"
	done
}

# The sanitizer build: unit and integration tests under ASan+UBSan, then a
# short run of every fuzzer (each one test: exit 0, no crash, no leak, no
# sanitizer report).
run_san_suite() {
	local san=$BUILD/san f name corpus log rc t0 secs=${LL_FUZZ_SECONDS:-10}
	if [ ! -d "$san/tests" ]; then
		echo "== san: $san not built (make san): skipped"
		skipped=$((skipped + 1))
		return
	fi
	run_cmocka_suite unit "$san" san
	run_cmocka_suite coord "$san" san
	run_cmocka_suite integ "$san" san
	for f in "$san"/fuzz/fuzz_*; do
		[ -x "$f" ] || continue
		name=$(basename "$f")
		corpus=$(mktemp -d)
		cp tests/fuzz/corpus/"${name#fuzz_}"/* "$corpus"/ 2>/dev/null
		log=$(mktemp)
		echo "== san/$name (${secs} s)"
		t0=$(now_ms)
		timeout $((secs + 60)) "$f" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 \
			"$corpus" >"$log" 2>&1
		rc=$?
		timed "san/$name" "$t0"
		grep -E '^Done|ERROR|SUMMARY' "$log" | sed 's/^/   /' | head -5
		if [ "$rc" -eq 0 ]; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
			failures+=("$name (exit $rc; crash input kept in the working directory)")
		fi
		rm -rf "$corpus" "$log"
	done
}

# Scripts: each is one test, exit 0 passed, 77 skipped, anything else failed.
run_script_suite() {
	local dir=$1 build=${2:-$BUILD} tag=${3:-$1} only=${4:-} t rc log t0
	for t in tests/"$dir"/test_*.sh; do
		[ -e "$t" ] || continue
		[ -z "$only" ] || [[ " $only " == *" $(basename "$t" .sh) "* ]] || continue
		log=$(mktemp)
		echo "== $tag/$(basename "$t")"
		t0=$(now_ms)
		timeout 300 bash "$t" "$build" >"$log" 2>&1
		rc=$?
		timed "$tag/$(basename "$t")" "$t0"
		sed 's/^/   /' "$log" | tail -25
		# A failed check may be far above the tail: name it.
		[ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] &&
			grep -E '\[FAIL\]|^ *FAIL' "$log" | head -10 | sed 's/^/   failed: /'
		case $rc in
		0) passed=$((passed + 1)) ;;
		77) skipped=$((skipped + 1)) ;;
		*) failed=$((failed + 1)); failures+=("$t (exit $rc)") ;;
		esac
		rm -f "$log"
	done
}

for s in $SUITES; do
	case $s in
	build | net) run_script_suite "$s" ;;
	kernel) run_script_suite kernels ;;
	unit) run_cmocka_suite unit; run_cmocka_suite coord ;;
	integ | bpf) run_cmocka_suite "$s" ;;
	san) run_san_suite ;;
	san-net)
		# The daemons under ASan+UBSan (make san builds BUILD/san/leaseline)
		# on the network tests that run them longest: agent and
		# coordinator, TLS, reloads, restarts, leases, METER.
		if [ -x "$BUILD/san/leaseline" ]; then
			run_script_suite net "$BUILD/san" san-net "$SAN_NET"
		else
			echo "== san-net: $BUILD/san/leaseline not built (make san): skipped"
			skipped=$((skipped + 1))
		fi
		;;
	*) echo "unknown suite '$s'" >&2; exit 2 ;;
	esac
done

if [ "${#timings[@]}" -gt 0 ]; then
	echo "slowest (wall s):"
	printf '%s\n' "${timings[@]}" | sort -rn | head -12 |
		awk '{printf "   %6.1f  %s\n", $1 / 1000, $2}'
	printf '%s\n' "${timings[@]}" | awk '{split($2, p, "/"); s[p[1]] += $1}
		END {printf "by suite:"; for (k in s) printf " %s %.0f s,", k, s[k] / 1000; print ""}'
fi
for f in "${failures[@]+"${failures[@]}"}"; do
	echo "FAILED: $f"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
