#!/bin/bash
# SPDX-License-Identifier: MIT
# A per-key global limit (key: src-ip) with many keys across 8 gateways
# (docs/global.md, "Many keys"): the client sends from many addresses of
# 198.18.128.0/17, each one a key with its own contract, and the checks look at
# every key's admissions over all gateways together.
#   keys-split: key 0 hot (3R) on gateway 1 only, key 1 hot on gateway 2 only,
#      at once, with 4 cold keys over all gateways: no key's window above
#      B + R*w; each hot key gets >= 90% of R (needs per-key grants: without
#      them a key gets its gateway's share of the limit);
#   zipf: 100 keys, Zipf demand, each key on 1-8 gateways: no key's window above
#      B + R*w; median utilization of the keys offered >= R at least 90%; the
#      coordinator's messages per second;
#   zipf-local: the same traffic on standalone agents, each with a per-key
#      (R, B) of its own: keys on several gateways must overshoot (the per-key
#      measurement sees an overshoot when there is one).
# Short runs (~45 s); scripts/bench-global.sh runs the long ones (and f, g).
set -u
: "${GL_ZIPF_KEYS:=100}" "${GL_ZIPF_PPS:=1200}"
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
gl_init "${1:-}" 8
gl_topo
rc=0
gl_scn_keys_split || rc=1
gl_scn_zipf || rc=1
gl_scn_zipf local || rc=1
exit $rc
