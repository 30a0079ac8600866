#!/bin/bash
# SPDX-License-Identifier: MIT
# Global limit across coordinator events (docs/global.md, tests 5 and 7, short):
# the coordinator is killed (-9) and restarted twice at random moments, then the
# contract's rate is lowered at run time (SIGHUP). Checks the quiet period, that
# the agents' live shares never add up past R and that no grant of a new epoch
# starts while one of the old epoch lives, and that shares drain to the new
# contract within two refresh intervals.
set -u
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
gl_init "${1:-}" 8
gl_topo
rc=0
gl_scn_restart 2 || rc=1
gl_scn_policy || rc=1
exit $rc
