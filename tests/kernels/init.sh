#!/bin/busybox sh
# SPDX-License-Identifier: MIT
# The guest's init (tests/kernels/vm.sh). Mounts the host's root read-only
# over virtio-9p under a tmpfs overlay at /host, the job directory read-write
# at its own path inside it, the kernel's own modules on /lib/modules/KVER
# (so that modprobe finds them), then runs JOB/cmd in a chroot
# with the host's tools and the built tree at the same paths as on the host.
# JOB/rc gets its exit status; then the guest powers off.
/bin/busybox mkdir -p /bin /proc /sys /dev
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

job="" kmods="" root=""
for a in $(cat /proc/cmdline); do
	case $a in
	ll.job=*) job=${a#ll.job=} ;;
	ll.kmods=*) kmods=${a#ll.kmods=} ;;
	ll.root=*) root=${a#ll.root=} ;;
	esac
done

fail() {
	echo "init: $*" >/dev/console
	poweroff -f
}

for m in $(cat /mod/order); do
	insmod "/mod/$m.ko" || fail "insmod $m failed"
done
[ -n "$job" ] || fail "no ll.job= on the kernel command line"

o=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /lower /rw
mount -t 9p -o "$o,ro,cache=loose" hostroot /lower || fail "cannot mount the host's root"
# The host's root, writable in the guest only: an overlay whose upper layer
# is a tmpfs (what the tests write goes nowhere but the guest's memory).
mount -t tmpfs tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /host ||
	fail "cannot mount the overlay"
# The host's temporary files and its run state (netns names, pid files)
# are not the guest's; but a tree, job or kernel cache kept below one of
# them (a clone in /tmp) stays visible.
for d in tmp run var/tmp; do
	keep=""
	for p in "$root" "$job" "$kmods"; do
		case "$p/" in "/$d/"*) keep=1 ;; esac
	done
	[ -n "$keep" ] || mount -t tmpfs tmpfs "/host/$d"
done
mkdir -p "/host$job"
mount -t 9p -o "$o" job "/host$job" || fail "cannot mount the job directory $job"
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
# As systemd does on a real host: libxdp keeps its dispatchers' state there.
mount -t bpf bpf /host/sys/fs/bpf
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
kver=$(uname -r)
mkdir -p "/host/lib/modules/$kver"
mount -o bind "/host$kmods" "/host/lib/modules/$kver" || fail "cannot bind the modules of $kver"
ip link set lo up 2>/dev/null

echo "init: $kver up, running $job/cmd" >/dev/console
chroot /host /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/tmp TERM=dumb LL_GUEST_KERNEL="$kver" /bin/bash -c \
	'bash "$1/cmd" >"$1/out" 2>&1; echo $? >"$1/rc"' _ "$job"
sync
poweroff -f
