#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what leaseline's build, tests and benchmarks need on Debian.
# Idempotent: packages already present are not touched, and apt is only
# consulted when something is missing.
set -eu

PKGS="make gcc clang llvm pkg-config libbpf-dev libelf-dev zlib1g-dev bpftool \
libcmocka-dev libyaml-dev iproute2 ethtool iputils-ping procps python3 libclang-rt-dev \
iptables nftables linux-libc-dev curl linux-perf prometheus libssl-dev openssl \
libxdp-dev xdp-tools libsqlite3-dev sqlite3 libpq-dev postgresql libmicrohttpd-dev \
libcurl4-openssl-dev libjson-c-dev etcd-server etcd-client \
qemu-system-x86 busybox-static kmod cpio xz-utils zstd"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages:$missing (run as root to install)" >&2
	exit 1
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
