#!/bin/bash
# SPDX-License-Identifier: MIT
# `make fuzz`: every libFuzzer harness of tests/fuzz, built by `make san` under
# SAN_BUILD, for SECONDS each, on a working copy of its seed corpus (what it
# finds new is kept in build/fuzz-corpus/NAME; add the useful inputs to
# tests/fuzz/corpus/NAME by hand). A crash leaves crash-* in the current
# directory and ends the run with its status.
# Usage: scripts/run-fuzz.sh SAN_BUILD SECONDS
set -u
SAN=${1:?sanitizer build dir}
SECS=${2:-600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
rc=0
for f in "$SAN"/fuzz/fuzz_*; do
	[ -x "$f" ] || continue
	name=$(basename "$f")
	work=build/fuzz-corpus/${name#fuzz_}
	mkdir -p "$work"
	cp -n tests/fuzz/corpus/"${name#fuzz_}"/* "$work"/ 2>/dev/null
	echo "== $name: $SECS s"
	"$f" -max_total_time="$SECS" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 |
		grep -E '^Done|ERROR|SUMMARY|stat::number_of_executed_units|stat::peak_rss_mb'
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit $rc
