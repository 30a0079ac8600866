#!/bin/bash
# SPDX-License-Identifier: MIT
# Global limit across 8 gateways (docs/global.md, tests 1-3, short): real UDP from
# one client to 8 gateway namespaces, each with a coordinated agent on native XDP;
# one coordinator leases shares of R = 1000/s, B = 200. Checks that no window of
# the merged admissions exceeds B + R*w, that utilization reaches 95% of R in
# steady state and after demand moves between gateways, and that 8 standalone
# buckets with the same traffic overshoot (the measurement can see it).
set -u
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
gl_init "${1:-}" 8
gl_topo
rc=0
gl_scn_steady lease || rc=1
gl_scn_steady local || rc=1
gl_scn_shift || rc=1
exit $rc
