#!/bin/bash
# SPDX-License-Identifier: MIT
# `make install` and what it installs:
#  1. into a temporary DESTDIR with PREFIX=/usr/local: exactly the binary,
#     both man pages, both systemd units and the monitoring files, listed;
#     the units' ExecStart names PREFIX's sbin; the binary runs; `make
#     uninstall` removes them all;
#  2. the units, installed again under a temporary PREFIX (so ExecStart and
#     the man pages exist), pass `systemd-analyze verify` with nothing to
#     say (skipped without systemd-analyze), and their hardening is there:
#     the agent's capability bounding set is what user/agent/privs.c keeps
#     plus CAP_SETPCAP (to drop the rest), the coordinator's is empty;
#  3. the man pages format without a warning, and leaseline(8) names every
#     command `leaseline help` lists.
# Usage: test_install.sh BUILD_DIR
set -u
BUILD=${1:?build dir}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
skip() { skipped=$((skipped + 1)); echo "skip: $*"; }
minstall() { make -s --no-print-directory BUILD="$BUILD" install "$@" >"$TMP/make.log" 2>&1; }

# 1. DESTDIR
D=$TMP/dest
if minstall DESTDIR="$D" PREFIX=/usr/local; then
	(cd "$D" && find . -type f -printf '%m %p\n' | sort -k2) >"$TMP/files"
	echo "installed into DESTDIR:"
	sed 's/^/   /' "$TMP/files"
	cat >"$TMP/want" <<'EOF2'
755 ./usr/local/sbin/leaseline
644 ./usr/local/share/man/man8/leaseline.8
644 ./usr/local/share/man/man5/leaseline.yaml.5
644 ./usr/local/lib/systemd/system/leaseline-agent.service
644 ./usr/local/lib/systemd/system/leaseline-coord.service
644 ./usr/local/share/leaseline/prometheus/leaseline-rules.yml
644 ./usr/local/share/leaseline/grafana/leaseline.json
644 ./usr/local/share/bash-completion/completions/leaseline
644 ./etc/leaseline/agent.yaml
644 ./etc/leaseline/coord.yaml
644 ./etc/leaseline/policy.yaml
EOF2
	sort -k2 "$TMP/want" -o "$TMP/want"
	if diff "$TMP/want" "$TMP/files" >"$TMP/diff"; then
		ok "make install DESTDIR=… PREFIX=/usr/local: the $(wc -l <"$TMP/want") files, modes as expected"
	else
		bad "installed files differ from the expected list:"
		sed 's/^/   /' "$TMP/diff"
	fi
	n=$(grep -l '^ExecStart=/usr/local/sbin/leaseline ' "$D"/usr/local/lib/systemd/system/*.service 2>/dev/null | wc -l)
	[ "$n" = 2 ] && ok "both units start /usr/local/sbin/leaseline" || bad "ExecStart wrong in $((2 - n)) unit(s)"
	grep -q '@SBINDIR@' "$D"/usr/local/lib/systemd/system/*.service && bad "@SBINDIR@ left in a unit"
	"$D/usr/local/sbin/leaseline" --version >"$TMP/v" 2>&1 && ok "the installed binary runs: $(cat "$TMP/v")" ||
		bad "the installed binary does not run: $(cat "$TMP/v")"
	# The example /etc files check, as the units would read them.
	for f in agent coord policy; do
		(cd "$D/etc/leaseline" && "$ROOT/$BUILD/leaseline" check -c $f.yaml) >"$TMP/check" 2>&1 &&
			ok "/etc/leaseline/$f.yaml checks: $(cat "$TMP/check")" || bad "/etc/leaseline/$f.yaml: $(cat "$TMP/check")"
	done
	# Installing again keeps the operator's edits.
	echo "# edited" >>"$D/etc/leaseline/agent.yaml"
	minstall DESTDIR="$D" PREFIX=/usr/local && grep -q "^# edited" "$D/etc/leaseline/agent.yaml" &&
		ok "install again keeps an edited /etc/leaseline/agent.yaml" || bad "install overwrote /etc/leaseline/agent.yaml"
	# Completion: commands, a command's options, and drift from 'leaseline help'.
	comp() { bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _leaseline; echo "${COMPREPLY[*]}"' _ "$D/usr/local/share/bash-completion/completions/leaseline" "$@"; }
	[ "$(comp leaseline us)" = usage ] && [ "$(comp leaseline top --w)" = "--watch" ] &&
		[ "$(comp leaseline usage --period d)" = day ] &&
		ok "bash completion: commands, options, periods" ||
		bad "bash completion: '$(comp leaseline us)' '$(comp leaseline top --w)' '$(comp leaseline usage --period d)'"
	miss=""
	for c in $("$BUILD/leaseline" help | sed -n 's/^  leaseline \([a-z-]*\).*/\1/p' | sort -u); do
		[ "$(comp leaseline "$c" | tr ' ' '\n' | grep -cx "$c")" = 1 ] || miss="$miss $c"
	done
	[ -z "$miss" ] && ok "bash completion knows every command of 'leaseline help'" || bad "bash completion lacks:$miss"
	if make -s --no-print-directory BUILD="$BUILD" uninstall DESTDIR="$D" PREFIX=/usr/local >"$TMP/make.log" 2>&1 &&
		[ -z "$(cd "$D" && find . -type f ! -path './etc/*')" ]; then
		ok "make uninstall removes every file install put there but the operator's /etc/leaseline"
	else
		bad "make uninstall left: $(cd "$D" && find . -type f ! -path './etc/*' | tr '\n' ' ') $(tail -3 "$TMP/make.log")"
	fi
else
	bad "make install DESTDIR=$D failed:"
	sed 's/^/   /' "$TMP/make.log" | tail -10
fi

# 2. the units
P=$TMP/prefix/usr
UNITS=$P/lib/systemd/system
if ! minstall PREFIX="$P" SYSCONFDIR="$P/etc"; then
	bad "make install PREFIX=$P failed: $(tail -3 "$TMP/make.log")"
elif ! command -v systemd-analyze >/dev/null; then
	skip "systemd-analyze not installed: units not verified"
else
	if MANPATH=$P/share/man systemd-analyze verify "$UNITS"/leaseline-agent.service \
		"$UNITS"/leaseline-coord.service >"$TMP/verify" 2>&1 && [ ! -s "$TMP/verify" ]; then
		ok "systemd-analyze verify: both units clean (ExecStart, Documentation= man pages resolve)"
	else
		bad "systemd-analyze verify:"
		sed 's/^/   /' "$TMP/verify" | head -20
	fi
	for u in agent coord; do
		if systemd-analyze security --offline=yes "$UNITS/leaseline-$u.service" >"$TMP/sec" 2>&1; then
			ok "systemd-analyze security: $(grep -o 'Overall exposure level.*' "$TMP/sec")"
		else
			skip "systemd-analyze security --offline not supported here"
		fi
	done
fi
unit_val() { sed -n "s/^$2=//p" "deploy/systemd/leaseline-$1.service.in" | tail -1; }
kept=$(sed -n 's/.*return \(BIT(CAP_.*\);/\1/p' user/agent/privs.c | grep -o 'CAP_[A-Z_]*' | sort | tr '\n' ' ')
want=$(printf '%s\n' $kept CAP_SETPCAP | sort | tr '\n' ' ')
have=$(unit_val agent CapabilityBoundingSet | tr ' ' '\n' | sort | tr '\n' ' ')
[ -n "$kept" ] && [ "$want" = "$have" ] &&
	ok "agent CapabilityBoundingSet = privs.c's kept set + CAP_SETPCAP: $have" ||
	bad "agent CapabilityBoundingSet '$have', privs.c keeps '$kept' (+ CAP_SETPCAP)"
[ -z "$(unit_val coord CapabilityBoundingSet)" ] && grep -q '^CapabilityBoundingSet=$' deploy/systemd/leaseline-coord.service.in &&
	ok "coordinator CapabilityBoundingSet empty" || bad "coordinator keeps capabilities: $(unit_val coord CapabilityBoundingSet)"
for u in agent coord; do
	miss=""
	for kv in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
		ProtectKernelModules=yes RestrictNamespaces=yes MemoryDenyWriteExecute=yes \
		SystemCallArchitectures=native ConfigurationDirectory=leaseline; do
		grep -qx "$kv" "deploy/systemd/leaseline-$u.service.in" || miss="$miss $kv"
	done
	[ "$u" = coord ] && for kv in DynamicUser=yes StateDirectory=leaseline; do
		grep -qx "$kv" "deploy/systemd/leaseline-$u.service.in" || miss="$miss $kv"
	done
	[ -z "$miss" ] && ok "leaseline-$u.service hardening present" || bad "leaseline-$u.service lacks:$miss"
done

# 3. man pages
if command -v groff >/dev/null; then
	for m in man/leaseline.8 man/leaseline.yaml.5; do
		groff -man -ww -z "$m" >"$TMP/groff" 2>&1
		[ ! -s "$TMP/groff" ] && ok "$m formats without a warning" ||
			bad "$m: $(head -5 "$TMP/groff" | tr '\n' ' ')"
	done
else
	skip "groff not installed: man pages not formatted"
fi
cmds=$("$BUILD/leaseline" help | sed -n 's/^  leaseline \([a-z-]*\).*/\1/p')
miss=""
for c in $cmds; do
	grep -q "^\.B leaseline $(printf '%s' "$c" | sed 's/-/\\\\-/g')\$\|^\.B leaseline $(printf '%s' "$c" | sed 's/-/\\\\-/g')\b" man/leaseline.8 || miss="$miss $c"
done
[ -n "$cmds" ] && [ -z "$miss" ] && ok "leaseline(8) has every command of 'leaseline help': $(echo $cmds)" ||
	bad "leaseline(8) lacks:$miss"

# The example of leaseline.yaml(5) is a policy and an agent file that check.
mkdir -p "$TMP/ex"
sed -n '/^\.EX$/,/^\.EE$/p' man/leaseline.yaml.5 | sed '1d;$d' |
	awk -v d="$TMP/ex" '/^# \/etc\/leaseline\// {f = d "/" substr($2, 16)} f {print > f}'
if [ -s "$TMP/ex/policy.yaml" ] && [ -s "$TMP/ex/agent.yaml" ] &&
	"$BUILD/leaseline" check -c "$TMP/ex/agent.yaml" >"$TMP/check" 2>&1; then
	ok "leaseline.yaml(5)'s example checks: $(head -1 "$TMP/check")"
else
	bad "leaseline.yaml(5)'s example: $(ls "$TMP/ex") $(cat "$TMP/check" 2>/dev/null)"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
