#!/bin/bash
# SPDX-License-Identifier: MIT
# run.sh BUILD_DIR [smoke|full|multiprog] [NAME...]: `make check-kernels` (full, every
# kernel of kernels.list and the host's own) and `make check`'s bookworm test
# (smoke, 6.1). Each listed kernel is fetched (fetch.sh), booted in qemu
# (vm.sh) and runs guest.sh; the host's kernel runs guest.sh natively (name
# "host"). Prints a table, one row a kernel: what loaded, how long it took,
# how many instructions the verifier walked, and what passed; ends with
# "N passed, N failed" over the kernels.
set -u
BUILD=$(cd "${1:?build dir}" && pwd)
MODE=${2:-full}
shift 2 2>/dev/null || shift $#
HERE=$(cd "$(dirname "$0")" && pwd)
LIST=$HERE/kernels.list
names=("$@")
if [ "${#names[@]}" -eq 0 ]; then
	mapfile -t names < <(awk '!/^#/ && NF > 2 { print $1 }' "$LIST")
	names+=(host)
fi
for t in qemu-system-x86_64 busybox; do
	command -v "$t" >/dev/null || {
		echo "run: needs '$t' (scripts/install-deps.sh)" >&2
		exit 1
	}
done

passed=0 failed=0
rows=()
for n in "${names[@]}"; do
	job=$BUILD/vm/$n
	rm -rf "$job"
	mkdir -p "$job"
	t0=$(date +%s)
	if [ "$n" = host ]; then
		echo "=== host kernel $(uname -r), natively"
		bash "$HERE/guest.sh" "$BUILD" "$MODE" runs >"$job/out" 2>&1
		rc=$?
		sed 's/^/  /' "$job/out"
	else
		expect=$(awk -v n="$n" '$1 == n { print $2 }' "$LIST")
		[ -n "$expect" ] || {
			echo "run: no kernel '$n' in $LIST" >&2
			exit 2
		}
		kdir=$("$HERE/fetch.sh" "$n" | tail -1)
		if [ -z "$kdir" ] || [ ! -e "$kdir/ready" ]; then
			echo "=== $n: cannot fetch it"
			rows+=("$(printf '%-10s %-26s %s' "$n" "-" "not fetched")")
			failed=$((failed + 1))
			continue
		fi
		echo "=== $n: $(cat "$kdir/kver") in qemu (TCG)"
		printf 'bash %q %q %q %q\n' "$HERE/guest.sh" "$BUILD" "$MODE" "$expect" >"$job/cmd"
		LL_VM_QUIET=0 bash "$HERE/vm.sh" "$kdir" "$job" "${LL_VM_SECONDS:-3000}" 2>&1 |
			sed 's/^/  /'
		rc=${PIPESTATUS[0]}
	fi
	secs=$(($(date +%s) - t0))
	r=$(grep -h '^RESULT ' "$job/out" 2>/dev/null | sed 's/^RESULT //' | tr '\n' ' ')
	kv=$(echo "$r" | sed -n 's/.*kernel=\([^ ]*\).*/\1/p')
	rest=$(echo "$r" | sed 's/kernel=[^ ]* //g')
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		verdict=passed
	else
		failed=$((failed + 1))
		verdict="FAILED (exit $rc)"
	fi
	rows+=("$(printf '%-10s %-26s %s; %s (%d s)' "$n" "${kv:-?}" "$verdict" "$rest" "$secs")")
done

echo
echo "kernel     release                    result"
for r in "${rows[@]}"; do
	echo "$r"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
