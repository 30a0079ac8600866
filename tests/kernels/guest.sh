#!/bin/bash
# SPDX-License-Identifier: MIT
# guest.sh BUILD_DIR smoke|full|multiprog EXPECT: what runs on one kernel, in a qemu
# guest (vm.sh) or on the host's own kernel. EXPECT is kernels.list's: runs
# or refuses.
#   kernel     `leaseline kernel`: the helper probe and a real load, timed;
#              on a kernel that refuses, one line naming what is missing and
#              no verifier log (then nothing else runs)
#   bpf        (full) the BPF suite, bpf_prog_test_run_opts on this kernel
#   enforce    tests/net/test_enforce.sh: the agent on a veth, real traffic
#   multiprog  (full, multiprog) tests/net/test_multiprog.sh: leaseline and
#              another program in one libxdp dispatcher (77: the kernel
#              cannot hold one, as on a host that refuses freplace); the
#              multiprog mode runs the probe and this only
# Prints "RESULT key=value ..." lines that run.sh tabulates, and ends with
# "N passed, N failed".
set -u
BUILD=$(cd "${1:?build dir}" && pwd)
MODE=${2:-smoke}
EXPECT=${3:-runs}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0 skipped=0
kernel=$(uname -r)
result() { echo "RESULT kernel=$kernel $*"; }
ok() {
	echo "  ok    $*"
	passed=$((passed + 1))
}
bad() {
	echo "  FAIL  $*"
	failed=$((failed + 1))
}
finish() {
	echo "$passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
	exit
}

echo "== $kernel: leaseline kernel"
"$BUILD/leaseline" kernel >"$T/kernel.out" 2>"$T/kernel.err"
rc=$?
cat $T/kernel.out $T/kernel.err
if [ "$EXPECT" = refuses ]; then
	lines=$(grep -c . $T/kernel.err)
	if [ "$rc" -eq 1 ] && grep -q "leaseline needs Linux" $T/kernel.err &&
		! grep -q "PROG LOAD LOG\|processed [0-9]* insns" $T/kernel.err && [ "$lines" -le 2 ]; then
		ok "refused in one line: $(head -1 $T/kernel.err)"
		result "load=refused why=\"$(head -1 $T/kernel.err | sed 's/"//g')\""
	else
		bad "expected a one-line refusal, got exit $rc: $(head -3 $T/kernel.err)"
		result "load=unexpected"
	fi
	finish
fi
if [ "$rc" -eq 0 ]; then
	ok "$(cat $T/kernel.out)"
	ms=$(sed -n 's/.* loads in \([0-9]*\) ms.*/\1/p' $T/kernel.out)
	insns=$(sed -n 's/.* ms, \([0-9]*\) instructions verified.*/\1/p' $T/kernel.out)
	result "load=ok load_ms=$ms verified_insns=$insns"
else
	bad "leaseline kernel exited $rc: $(tail -3 $T/kernel.err)"
	result "load=failed"
	finish
fi

if [ "$MODE" = full ]; then
	echo "== $kernel: BPF suite"
	scripts/run-tests.sh "$BUILD" bpf >$T/bpf.log 2>&1
	grep -E "^== |FAILED|ERROR|passed, " $T/bpf.log | grep -v "^== " | head -30
	line=$(tail -1 $T/bpf.log)
	p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
	f=$(echo "$line" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
	if [ -n "$p" ] && [ "${f:-1}" -eq 0 ] && [ "$p" -gt 0 ]; then
		ok "BPF suite: $line"
	else
		bad "BPF suite: $line"
	fi
	result "bpf=\"$line\""
fi

case $MODE in
full) net="enforce multiprog" ;;
multiprog) net=multiprog ;;
*) net=enforce ;;
esac
for t in $net; do
	echo "== $kernel: tests/net/test_$t.sh"
	timeout 600 bash "tests/net/test_$t.sh" "$BUILD" >"$T/$t.log" 2>&1
	rc=$?
	sed 's/^/   /' "$T/$t.log" | tail -15
	case $rc in
	0) ok "$t"; result "$t=ok" ;;
	77) skipped=$((skipped + 1)); result "$t=skipped" ;;
	*) bad "$t (exit $rc)"; result "$t=failed" ;;
	esac
done
finish
