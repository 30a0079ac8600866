#!/bin/bash
# SPDX-License-Identifier: MIT
# fetch.sh NAME...: make each kernel of kernels.list ready to boot, and print
# its directory (one line a kernel). The kernel package comes from Debian's
# archive with `apt-get download` through a private apt state (the machine's
# own sources and lists are not touched) and is unpacked with `dpkg-deb -x`,
# never installed. The directory then holds:
#   root/             the package's files (boot/vmlinuz-KVER, lib/modules/KVER)
#   kver              KVER
#   initrd.img        busybox-static, init, the modules that mount 9p and an
#                     overlay, and veth (the tests make veth pairs)
# Cached under LL_KERNEL_CACHE (default /var/cache/leaseline/kernels), one
# directory a package version; NAME is a link to the newest one fetched. When
# the archive cannot be reached, a kernel fetched before is used (and said).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${LL_KERNEL_CACHE:-/var/cache/leaseline/kernels}
LIST=$HERE/kernels.list
APT=$CACHE/apt

say() { echo "fetch: $*" >&2; }
die() {
	say "$*"
	exit 1
}

[ "$#" -gt 0 ] || die "usage: fetch.sh NAME... (names from $LIST)"
for t in apt-get apt-cache dpkg-deb depmod cpio gzip busybox; do
	command -v "$t" >/dev/null || die "needs '$t' (scripts/install-deps.sh)"
done
[ -x /bin/busybox ] && file_static=$(ldd /bin/busybox 2>&1 || true)
case ${file_static:-} in
*"not a dynamic"* | *"statically linked"*) ;;
*) die "/bin/busybox is not static: install busybox-static (scripts/install-deps.sh)" ;;
esac

suites_of() { awk -v n="$1" '$1 == n { $1 = ""; $2 = ""; print; exit }' "$LIST"; }
all_suites() { awk '!/^#/ && NF > 2 { for (i = 3; i <= NF; i++) print $i }' "$LIST" | sort -u; }

apt_opts=(-o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts="$APT/none"
	-o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache"
	-o Dir::Etc::Preferences="$APT/none" -o Dir::Etc::PreferencesParts="$APT/none"
	-o APT::Get::List-Cleanup=0 -o Acquire::Languages=none -o Debug::NoLocking=1
	-o APT::Sandbox::User=root)

# The private apt state, refreshed when older than a day.
apt_ready=0
apt_update() {
	mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/none"
	local s kr=/usr/share/keyrings/debian-archive-keyring.gpg new=$APT/sources.list.new
	: >"$new"
	for s in $(all_suites); do
		case $s in
		*-security) echo "deb [signed-by=$kr] http://deb.debian.org/debian-security $s main" ;;
		*) echo "deb [signed-by=$kr] http://deb.debian.org/debian $s main" ;;
		esac >>"$new"
	done
	if cmp -s "$new" "$APT/sources.list" &&
		[ -n "$(find "$APT/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
		rm -f "$new"
		apt_ready=1
		return
	fi
	mv "$new" "$APT/sources.list"
	if apt-get "${apt_opts[@]}" -qq update >"$APT/update.log" 2>&1; then
		apt_ready=1
	else
		say "cannot reach Debian's archive ($(tail -1 "$APT/update.log"))"
	fi
}

# The package (name=version) that linux-image-amd64 points at, highest
# version over NAME's suites.
resolve() {
	local s best="" bestv="" dep ver
	for s in $(suites_of "$1"); do
		dep=$(apt-cache "${apt_opts[@]}" show "linux-image-amd64/$s" 2>/dev/null |
			sed -n 's/^Depends: \(linux-image-[^ ,]*\) (= \([^)]*\)).*/\1=\2/p' | head -1)
		[ -n "$dep" ] || continue
		ver=${dep#*=}
		if [ -z "$best" ] || dpkg --compare-versions "$ver" gt "$bestv"; then
			best=$dep bestv=$ver
		fi
	done
	echo "$best"
}

# Modules to load, in order, so that MOD can load: its dependencies first.
# Built-in ones (modules.builtin) are skipped.
declare -A seen
mod_order() {
	local root=$1 kver=$2 mod=$3 path deps d
	path=$(awk -F: -v m="$mod" '{ n = $1; sub(".*/", "", n); sub("\\.ko.*", "", n); gsub("-", "_", n) }
		n == m { print $1; exit }' "$root/lib/modules/$kver/modules.dep")
	if [ -z "$path" ]; then
		grep -q "/$mod.ko" "$root/lib/modules/$kver/modules.builtin" ||
			grep -q "/${mod//_/-}.ko" "$root/lib/modules/$kver/modules.builtin" ||
			die "$kver has no module '$mod', built in or not"
		return
	fi
	[ -n "${seen[$path]:-}" ] && return
	seen[$path]=1
	deps=$(awk -F: -v p="$path" '$1 == p { print $2; exit }' "$root/lib/modules/$kver/modules.dep")
	for d in $deps; do
		d=${d##*/}
		d=${d%%.ko*}
		mod_order "$root" "$kver" "${d//-/_}"
	done
	echo "$path"
}

# busybox, the init of init.sh, and the modules 9p over virtio needs.
make_initrd() {
	local dir=$1 kver=$2 t m n
	t=$(mktemp -d)
	mkdir -p "$t"/{bin,dev,proc,sys,host,mod}
	cp /bin/busybox "$t/bin/busybox"
	cp "$HERE/init.sh" "$t/init"
	chmod 0755 "$t/init"
	seen=()
	: >"$t/mod/order"
	for m in virtio_pci 9pnet_virtio 9p overlay veth; do
		mod_order "$dir/root" "$kver" "$m"
	done | while read -r m; do
		n=$(basename "$m")
		case $n in
		*.xz) xz -dc "$dir/root/lib/modules/$kver/$m" >"$t/mod/${n%.xz}" ;;
		*.zst) zstd -qdc "$dir/root/lib/modules/$kver/$m" >"$t/mod/${n%.zst}" ;;
		*) cp "$dir/root/lib/modules/$kver/$m" "$t/mod/$n" ;;
		esac
		echo "${n%.*z*}" | sed 's/\.ko$//' >>"$t/mod/order"
	done
	(cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir/initrd.img.new"
	mv "$dir/initrd.img.new" "$dir/initrd.img"
	rm -rf "$t"
}

prepare() {
	local name=$1 pkg dir kver tmp deb
	[ -n "$(suites_of "$name")" ] || die "no kernel '$name' in $LIST"
	[ "$apt_ready" -eq 1 ] || apt_update
	pkg=""
	[ "$apt_ready" -eq 1 ] && pkg=$(resolve "$name")
	if [ -z "$pkg" ]; then
		if [ -e "$CACHE/$name/ready" ]; then
			say "$name: using $(readlink "$CACHE/$name") fetched before"
			readlink -f "$CACHE/$name"
			return
		fi
		die "$name: no linux-image-amd64 in suites $(suites_of "$name") and nothing cached"
	fi
	dir=$CACHE/${pkg/=/_}
	if [ ! -e "$dir/ready" ]; then
		say "$name: fetching $pkg"
		rm -rf "$dir"
		mkdir -p "$dir"
		tmp=$(mktemp -d)
		(cd "$tmp" && apt-get "${apt_opts[@]}" -qq download "$pkg" >/dev/null) ||
			die "$name: apt-get download $pkg failed"
		deb=$(ls "$tmp"/*.deb)
		dpkg-deb -x "$deb" "$dir/root"
		rm -rf "$tmp"
		# trixie's packages put the modules under usr/ (merged /usr)
		[ -d "$dir/root/lib" ] || ln -s usr/lib "$dir/root/lib"
		kver=$(ls "$dir/root/lib/modules")
		[ -e "$dir/root/boot/vmlinuz-$kver" ] || die "$name: $pkg has no boot/vmlinuz-$kver"
		depmod -b "$dir/root" "$kver"
		echo "$kver" >"$dir/kver"
		make_initrd "$dir" "$kver"
		touch "$dir/ready"
	elif [ "$HERE/init.sh" -nt "$dir/initrd.img" ] || [ "$0" -nt "$dir/initrd.img" ]; then
		make_initrd "$dir" "$(cat "$dir/kver")" # init or its modules changed
	fi
	ln -sfn "$(basename "$dir")" "$CACHE/$name"
	echo "$dir"
}

mkdir -p "$CACHE"
for n in "$@"; do
	prepare "$n"
done
