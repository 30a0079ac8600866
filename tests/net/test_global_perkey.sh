#!/bin/bash
# SPDX-License-Identifier: MIT
# A per-key global limit across 8 gateways (reference §6.1, docs/global.md): the
# same scenarios as the aggregate's with key: src-ip, so the client's one
# address is one key with the contract R = 1000/s, B = 200 across all of them.
#   a. the key sprayed evenly over 8 gateways at 3R, then concentrated on one
#      (2.3R there): no window above B + R*w, utilization >= 95% of R;
#      8 standalone per-key buckets with the same traffic overshoot;
#   d. its traffic moving from gateways 1-4 to 5-8: no overshoot, no fresh
#      bucket where it arrives;
#   e. 3 gateways cut off, fail-closed and fallback: nothing after expiry under
#      fail-closed, fallback within its reserve and counted.
set -u
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
GL_KEY=src-ip
gl_init "${1:-}" 8
gl_topo
rc=0
gl_scn_steady lease || rc=1
gl_scn_steady local || rc=1
gl_scn_shift || rc=1
gl_scn_partition fail-closed || rc=1
gl_scn_partition fallback || rc=1
exit $rc
