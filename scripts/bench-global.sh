#!/bin/bash
# SPDX-License-Identifier: MIT
# The global-limit benchmark (docs/global.md): tests 1-7 with longer runs than
# `make check` (GL_SCALE x the short durations), the reference's lease timing
# (ttl 2 s, refresh 500 ms) and 5 coordinator kills; 8, failover: 3 replicas on
# a 3-member etcd through kill -9, SIGSTOP, a cut from etcd, a rolling restart
# and etcd's leader member killed; then the many-key scenarios of a per-key
# global limit (key: src-ip): keys-split, zipf (c, 1000 keys), zipf-restart (f,
# c with 3 coordinator kills) and cold (g, 32766 cold keys). 8 gateways with
# coordinated agents on native XDP, real UDP, in namespaces this script creates
# and removes (reference §8). Prints each test's figures, then one table; the
# RESULT lines go to BUILD/bench-global.jsonl and the table to
# BUILD/bench-global.txt.
#
# Usage: scripts/bench-global.sh BUILD_DIR
# Knobs: GL_SCALE (5), GL_TTL (2), GL_REFRESH (0.5), GL_R (1000), GL_B (200),
#        GL_KILLS (5), GL_SEED (random, printed), GL_ONLY ("steady shift ..."),
#        GL_STRICT=1 (known shortfalls fail), LL_KEEP=1 (keep the run directories).
#        Failover: GL_FO_TTL (lease ttl, 8 s), GL_ETCD_TTL (the replicas' etcd lease, 5s).
#        Many keys: GL_ONLY="keys-split zipf zipf-restart zipf-local cold", GL_ZIPF_KILLS (3),
#        and the GL_KS_*, GL_ZIPF_*, GL_COLD_* knobs of tests/global/scenarios.sh
#        (GL_COLD_PORTS=32 GL_COLD_KEYS=1048512: key flow, ~1M keys).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd) || exit 2
export GL_SCALE=${GL_SCALE:-5} GL_TTL=${GL_TTL:-2} GL_REFRESH=${GL_REFRESH:-0.5}
GL_KILLS=${GL_KILLS:-5}
GL_ZIPF_KILLS=${GL_ZIPF_KILLS:-3}
GL_SEED=${GL_SEED:-$((RANDOM * 32768 + RANDOM))}
GL_RESULTS=$BUILD/bench-global.jsonl
source "$ROOT/tests/global/lib.sh"
source "$ROOT/tests/global/scenarios.sh"
gl_init "$BUILD" 8
: >"$GL_RESULTS"
echo "bench-global: R $GL_R/s B $GL_B, ttl $GL_TTL s, refresh $GL_REFRESH s, scale $GL_SCALE," \
	"8 gateways, seed $GL_SEED; $(nproc) CPUs, kernel $(uname -r), $(date -u '+%Y-%m-%d %H:%M UTC')"
gl_topo
rc=0
want() { [ -z "${GL_ONLY:-}" ] || [[ " $GL_ONLY " == *" $1 "* ]]; }
want steady && { gl_scn_steady lease || rc=1; }
want naive && { gl_scn_steady local || rc=1; }
want shift && { gl_scn_shift || rc=1; }
for m in fail-closed fallback fail-open; do
	want partition && { gl_scn_partition "$m" || rc=1; }
done
want restart && { gl_scn_restart "$GL_KILLS" || rc=1; }
want stale && { gl_scn_stale || rc=1; }
want policy && { gl_scn_policy || rc=1; }
want failover && { gl_scn_failover || rc=1; }
want keys-split && { gl_scn_keys_split || rc=1; }
want zipf && { gl_scn_zipf || rc=1; }
want zipf-restart && { gl_scn_zipf "$GL_ZIPF_KILLS" || rc=1; }
want zipf-local && { gl_scn_zipf local || rc=1; }
want cold && { gl_scn_cold || rc=1; }
echo
echo "== summary (seed $GL_SEED)"
python3 "$ROOT/tests/global/gsummary.py" "$GL_RESULTS" | tee "$BUILD/bench-global.txt"
python3 "$ROOT/tests/global/gsummary.py" "$GL_RESULTS" --markdown >"$BUILD/bench-global.md"
[ "$rc" -eq 0 ] && echo "bench-global: all checks passed" || echo "bench-global: some checks FAILED"
exit $rc
