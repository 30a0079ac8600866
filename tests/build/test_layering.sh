#!/bin/bash
# SPDX-License-Identifier: MIT
# The layering the build enforces (docs/design.md, "Layers"):
#  1. each folder of user/ compiles with only the include paths it may use:
#     a header of a layer it may not use does not compile there, and one it
#     may use does (so this test fails if the flags stop working either way);
#  2. no coordinator object or binary contains the BPF loader, the compiled
#     policy or the embedded BPF object.
# Usage: test_layering.sh BUILD_DIR
set -u
BUILD=${1:?build dir}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
CC=${CC:-gcc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

flags() { make -s --no-print-directory BUILD="$BUILD" print-flags LAYER="$1"; }

# probe LAYER HEADER EXPECT: compile a file of LAYER that includes HEADER.
probe() {
	local layer=$1 hdr=$2 expect=$3 src="$TMP/probe.c" rc
	printf '#include "%s"\nint probe_%s;\n' "$hdr" "$layer" >"$src"
	# shellcheck disable=SC2046
	$CC $(flags "$layer") -fsyntax-only "$src" 2>"$TMP/err"
	rc=$?
	if [ "$expect" = allowed ] && [ $rc -eq 0 ]; then
		ok "$layer may include $hdr"
	elif [ "$expect" = forbidden ] && [ $rc -ne 0 ] && grep -q 'No such file' "$TMP/err"; then
		ok "$layer cannot include $hdr"
	else
		bad "$layer including $hdr: expected $expect, compiler exit $rc"
		sed 's/^/   /' "$TMP/err" | head -5
	fi
}

probe lib lib/wire.h allowed
probe lib ll_types.h allowed
probe lib agent/dp.h forbidden
probe lib agent/stats.h forbidden
probe lib coord/ledger.h forbidden
probe lib coord/coord.h forbidden
probe lib cmd/status.h forbidden
probe agent agent/dp.h allowed
probe agent lib/config.h allowed
probe agent leaseline.skel.h allowed
probe agent coord/ledger.h forbidden
probe agent coord/store.h forbidden
probe agent cmd/top.h forbidden
probe coord coord/ledger.h allowed
probe coord lib/lease_clock.h allowed
probe coord agent/dp.h forbidden
probe coord agent/lease_decide.h forbidden
probe coord agent/policy.h forbidden
probe coord cmd/usage_cmd.h forbidden
probe coord leaseline.skel.h forbidden
probe cmd agent/dp.h allowed
probe cmd coord/coord.h allowed
probe cmd cmd/status.h allowed

# The same rule on the real sources: every header of user/ is included by
# its path from user/, and only from a layer that may see it.
sees() {
	case $1 in
	lib) echo "lib" ;;
	agent) echo "lib agent" ;;
	coord) echo "lib coord" ;;
	cmd) echo "lib agent coord cmd" ;;
	esac
}
for layer in lib agent coord cmd; do
	bad_inc=""
	for f in user/"$layer"/*.[ch]; do
		for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
			case $inc in
			*/*)
				top=${inc%%/*}
				[ -e "user/$inc" ] || continue
				case " $(sees "$layer") " in
				*" $top "*) ;;
				*) bad_inc="$bad_inc $f:$inc" ;;
				esac
				;;
			*)
				# a bare name must not be a header of user/
				for d in user/*/; do
					[ -e "$d$inc" ] && bad_inc="$bad_inc $f:$inc(by-name)"
				done
				;;
			esac
		done
	done
	if [ -z "$bad_inc" ]; then
		ok "user/$layer/ includes only $(sees "$layer"), each by its path"
	else
		bad "user/$layer/ includes$bad_inc"
	fi
done

# No two headers share a name (a reader never has to ask which clock.h).
same=$(find bpf include user tests bench -name '*.h' -printf '%f\n' | sort | uniq -d | tr '\n' ' ')
[ -z "$same" ] && ok "every header has its own name" || bad "header names shared: $same"

# No two headers share an include guard.
dups=$(grep -h '^#ifndef LEASELINE_[A-Z0-9_]*_H$' $(find bpf include user tests bench -name '*.h') | sort | uniq -d)
[ -z "$dups" ] && ok "every header has its own include guard" || bad "guards shared: $dups"

# No coordinator object or binary holds the agent's datapath code. The
# coordinator's binaries are those of its folders (the Makefile links them
# without the agent's archive): tests/coord, tests/integ and bench/coord.
FORBIDDEN='dp_open|dp_policy_commit|policy_compile|policy_apply|leaseline_bpf__|bpf_object__open|bpf_prog_load'
coord_bins=()
for src in tests/coord/test_*.c tests/integ/test_*.c; do
	[ -e "$src" ] && coord_bins+=("$BUILD/tests/$(basename "$src" .c)")
done
for src in bench/coord/bench_*.c; do
	[ -e "$src" ] && coord_bins+=("$BUILD/bench/$(basename "$src" .c)")
done
[ ${#coord_bins[@]} -ge 3 ] && ok "${#coord_bins[@]} coordinator binaries, by folder" ||
	bad "only ${#coord_bins[@]} coordinator binaries found in tests/coord, tests/integ, bench/coord"
for f in "$BUILD/libll-coord.a" "$BUILD/libll-lib.a" "${coord_bins[@]}"; do
	if [ ! -e "$f" ]; then
		bad "$f not built"
		continue
	fi
	hits=$(nm -A "$f" 2>/dev/null | grep -E " [A-Za-z] ($FORBIDDEN)" | head -3)
	if [ -z "$hits" ]; then
		ok "$(basename "$f") has no BPF loader, policy compiler or BPF object"
	else
		bad "$(basename "$f") contains: $hits"
	fi
done
# ... and the check above can see them where they are.
if nm -A "$BUILD/leaseline" 2>/dev/null | grep -qE " [A-Za-z] (dp_open|leaseline_bpf__)"; then
	ok "the nm check finds the loader in build/leaseline (where it belongs)"
else
	bad "nm finds no dp_open in $BUILD/leaseline: the check above proves nothing"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
