#!/bin/bash
# SPDX-License-Identifier: MIT
# One test (make test T=...), with the environment run-tests.sh gives it:
#   T=test_wire            a cmocka binary (tests/{unit,coord,integ,bpf})
#   T=test_wire:PATTERN    only its tests whose names match (* and ?)
#   T=net/test_reload      a script of tests/net (or build, kernels)
# Usage: run-one.sh BUILD_DIR T
set -u
BUILD=${1:?build dir}
T=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ -z "$T" ]; then
	echo "usage: make test T=test_NAME[:PATTERN] | T=net/test_NAME (tests/README.md)" >&2
	exit 2
fi
if [[ $T == */* ]]; then
	script=tests/${T%.sh}.sh
	[ -f "$script" ] || { echo "no test script $script" >&2; exit 2; }
	exec bash "$script" "$BUILD"
fi
name=${T%%:*}
filter=
[[ $T == *:* ]] && filter=${T#*:}
for dir in unit coord integ bpf; do
	if [ -f "tests/$dir/$name.c" ]; then
		log=$(mktemp)
		trap 'rm -f "$log"' EXIT
		LL_TEST_FILTER=$filter LL_ROOT=$ROOT LL_FIXTURES="$ROOT/tests/unit/fixtures" \
			LL_BIN="$BUILD/leaseline" "$BUILD/tests/$name" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		if [ -n "$filter" ] && ! grep -q '^\[ RUN ' "$log"; then
			echo "no test of $name matches '$filter':" >&2
			sed -n 's/^[[:space:]]*cmocka_unit_test[a-z_]*(\([a-z0-9_]*\).*/  \1/p' "tests/$dir/$name.c" >&2
			exit 2
		fi
		exit "$rc"
	fi
done
echo "no test '$name' in tests/{unit,coord,integ,bpf} (a script: T=net/$name)" >&2
exit 2
