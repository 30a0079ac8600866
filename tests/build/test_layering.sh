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

probe lib wire.h allowed
probe lib ll_types.h allowed
probe lib dp.h forbidden
probe lib stats.h forbidden
probe lib ledger.h forbidden
probe lib coord.h forbidden
probe agent dp.h allowed
probe agent config.h allowed
probe agent ledger.h forbidden
probe agent store.h forbidden
probe coord ledger.h allowed
probe coord lease_clock.h allowed
probe coord dp.h forbidden
probe coord lease.h forbidden
probe coord policy.h forbidden
probe coord leaseline.skel.h forbidden

# The same rule on the real sources: what each layer's files include.
for layer in lib agent coord; do
	other=""
	case $layer in
	lib) other="user/agent user/coord" ;;
	agent) other="user/coord" ;;
	coord) other="user/agent" ;;
	esac
	bad_inc=""
	for f in user/"$layer"/*.[ch]; do
		for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
			for d in $other; do
				[ -e "$d/$inc" ] && [ ! -e "user/$layer/$inc" ] && bad_inc="$bad_inc $f:$inc"
			done
		done
	done
	if [ -z "$bad_inc" ]; then
		ok "user/$layer/ includes no header of $other"
	else
		bad "user/$layer/ includes$bad_inc"
	fi
done

# No coordinator object or binary holds the agent's datapath code.
FORBIDDEN='dp_open|dp_policy_commit|policy_compile|policy_apply|leaseline_bpf__|bpf_object__open|bpf_prog_load'
for f in "$BUILD/libll-coord.a" "$BUILD/libll-lib.a" "$BUILD/bench/bench_coord" \
	"$BUILD/tests/test_coord_proto" "$BUILD/tests/test_hotkeys"; do
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
