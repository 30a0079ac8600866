#!/bin/bash
# SPDX-License-Identifier: MIT
# vm.sh KERNEL_DIR JOB_DIR [SECONDS]: boot the kernel fetch.sh prepared in
# qemu (TCG: no /dev/kvm is needed; LL_VM_ACCEL=kvm to use one), with the
# host's root shared read-only over virtio-9p and JOB_DIR read-write, and run
# JOB_DIR/cmd inside as root (init.sh). Its output goes to JOB_DIR/out (shown
# as it comes), the guest's console to JOB_DIR/console. Exits with the
# command's status; 124 when the guest did not finish within SECONDS
# (default 900), 125 when it never ran the command.
set -uo pipefail
kdir=${1:?kernel dir (fetch.sh)}
job=$(cd "${2:?job dir}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${3:-900}
kver=$(cat "$kdir/kver")
[ -e "$job/cmd" ] || {
	echo "vm: no $job/cmd" >&2
	exit 2
}
rm -f "$job/rc" "$job/out" "$job/console"
: >"$job/out"

# TCG unless asked: this machine's /dev/kvm is there but does not run a
# guest (nested virtualisation it does not offer).
accel=tcg,thread=multi
cpu=max
if [ "${LL_VM_ACCEL:-tcg}" = kvm ]; then
	accel=kvm
	cpu=host
fi
# qemu is killed with this script, however it ends.
qpid=""
tpid=""
trap '[ -n "$qpid" ] && kill "$qpid" 2>/dev/null; [ -n "$tpid" ] && kill "$tpid" 2>/dev/null' EXIT

timeout "$secs" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp "${LL_VM_CPUS:-2}" \
	-m "${LL_VM_MEM:-2048}" -nodefaults -no-user-config -display none -no-reboot \
	-kernel "$kdir/root/boot/vmlinuz-$kver" -initrd "$kdir/initrd.img" \
	-append "console=ttyS0 panic=-1 quiet ll.job=$job ll.root=$root ll.kmods=$kdir/root/lib/modules/$kver" \
	-serial "file:$job/console" \
	-device virtio-rng-pci \
	-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
	-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
	-fsdev local,id=job,path="$job",security_model=none \
	-device virtio-9p-pci,fsdev=job,mount_tag=job &
qpid=$!
if [ "${LL_VM_QUIET:-0}" != 1 ]; then
	tail -n +1 -f "$job/out" --pid="$qpid" &
	tpid=$!
fi
wait "$qpid"
qrc=$?
qpid=""
[ -n "$tpid" ] && wait "$tpid" 2>/dev/null
tpid=""
if [ "$qrc" -eq 124 ]; then
	echo "vm: $kver did not finish in ${secs} s (console: $job/console)" >&2
	exit 124
fi
if [ ! -s "$job/rc" ]; then
	echo "vm: $kver never ran the command (qemu exit $qrc); its console:" >&2
	tail -20 "$job/console" >&2
	exit 125
fi
exit "$(cat "$job/rc")"
