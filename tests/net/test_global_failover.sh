#!/bin/bash
# SPDX-License-Identifier: MIT
# Replicas on etcd under faults (docs/global.md, test 8): 3 coordinators on a
# 3-member etcd, 8 gateways, 3R offered, fail-closed. kill -9 of the leader,
# SIGSTOP of the leader past its etcd ttl, the leader cut from etcd only (its
# agents still reach it), a rolling restart, etcd's own leader member killed
# (then restarted), etcd's quorum lost (2 of 3 members stopped until every
# lease died). Checks per fault: the lowest 500 ms window >= 90% of R, no grant
# of an earlier term applied after a later one, the deposed leader's last
# grant before the new leader's first (and, cut off, within the etcd ttl), no
# share raised while an earlier term's grant lives, Σ live shares <= R, no
# step-down when etcd's member leader dies; without quorum the last grant
# within etcd ttl + 2 election timeouts and nothing admitted after a lease
# died, and once quorum is back every agent live and >= 95% of R from one
# refresh after that; the contract over the run.
set -u
source "$(dirname "$0")/../global/lib.sh"
source "$(dirname "$0")/../global/scenarios.sh"
gl_init "${1:-}" 8
gl_topo
gl_scn_failover
