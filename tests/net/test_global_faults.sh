#!/bin/bash
# SPDX-License-Identifier: MIT
# Global limit under failures (docs/global.md, tests 4 and 6, short): 3 of 8
# gateways lose their control link for 5 ttl under each on-loss policy, and one
# agent is stopped (SIGSTOP) past its ttl. Checks that leases die in the kernel
# within ttl, that nothing is admitted under a dead fail-closed lease, that the
# fallback share holds, that fallback/bypass totals reach the coordinator equal
# to the agents' counters, and that the contract holds (fail-open excepted).
set -u
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
gl_init "${1:-}" 8
gl_topo
rc=0
gl_scn_partition fail-closed || rc=1
gl_scn_partition fallback || rc=1
gl_scn_partition fail-open || rc=1
gl_scn_stale || rc=1
exit $rc
