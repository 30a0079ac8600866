#!/bin/bash
# SPDX-License-Identifier: MIT
# Demo of a per-client global limit (docs/global.md, reference §6.1): one tenant
# (one client address) sprays UDP over 4 gateways at 1.5R each, and its contract
# is (R, B) per client. First every gateway runs a standalone agent with its own
# per-client bucket (R, B): together they admit ~4B at the start and ~4R after,
# four times the contract. Then a coordinator leases each gateway a share of
# every client's (R, B): together they admit B at the start and R after. Then
# gateway 1's control link is cut: its lease dies in the kernel within ttl and it
# stops admitting, while the others go on. Prints a table and writes BUILD/demo-global.svg (admitted rate
# per 100 ms against the contract line). Namespaces only (reference §8), ~45 s.
#
# Usage: scripts/demo-global.sh BUILD_DIR
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd) || exit 2
source "$ROOT/tests/global/lib.sh"
R=500 B=100 TTL=1 OFFER=750
GL_KEY=src-ip # the contract is per client: the tenant's address is the key
gl_init "$BUILD" 4
echo "demo: one tenant sprays 4 gateways, per-client contract R = $R packets/s, B = $B;"
echo "      each gateway offered $OFFER/s"
gl_topo
RUN=$TMPD/demo
mkdir -p "$RUN"
: >"$RUN/events.txt"
gl_recv_start "$RUN" 120

echo "1/3 standalone agents, a per-client bucket (R, B) on each gateway"
gl_policy "$RUN/policy-local.yaml" 1 "$R" "$B" local
gl_agents_start "$RUN" standalone local
gl_mark "$RUN" standalone
gl_send_bg "$RUN" "6:$(gl_rates 4 $OFFER)"
gl_send_wait 40
gl_mark "$RUN" standalone_end
mv "$RUN/send.json" "$RUN/send-standalone.json"
gl_agents_stop

echo "2/3 leaseline: a coordinator leases each gateway a share of every client's (R, B)"
gl_policy "$RUN/policy.yaml" 1 "$R" "$B" global fail-closed
gl_coord_start "$RUN" "${TTL}s" 250ms
gl_agents_start "$RUN" leased coord
gl_wait_live 4 20 || ll_fail "the agents hold no lease"
gl_sample_start "$RUN"
gl_mark "$RUN" leaseline
gl_send_bg "$RUN" "16:$(gl_rates 4 $OFFER)"
ll_sleep 6
echo "3/3 gateway 1's control link cut for 5 s (5 ttl), then restored"
gl_mark "$RUN" cut
gl_cut 1
gl_mark "$RUN" cut_end
ll_sleep 5
gl_mark "$RUN" restore
gl_restore 1
gl_send_wait 40
gl_mark "$RUN" end
gl_recv_stop
gl_sample_stop
gl_agents_stop
gl_coord_stop
echo
python3 "$GL_DIR/gdemo.py" "$RUN" --rate "$R" --burst "$B" --gateways 4 --offered "$OFFER" \
	--ttl "$TTL" --svg "$BUILD/demo-global.svg"
