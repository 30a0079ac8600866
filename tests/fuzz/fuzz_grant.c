// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: a frame from a (fake) coordinator through the agent's
 * decisions on it: decoded by the wire decoder; a GRANT clamped against a
 * limit's contract and decided against the current lease and fence
 * (lease_grant_clamp, lease_grant_decide), as user/agent/link.c does before
 * any map is written. Whatever the bytes, the lease that would be written
 * stays within the contract and the ttl cap, the fence never moves past the
 * epoch bounds, and a generation is never reused.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/lease_decide.h"
#include "tb_math.h"
#include "lib/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wire_msg m;
	static const struct ll_limit_cfg cfg = {.rate = 1000, .burst_s = 100 * TB_SCALE};
	struct ll_lease old = {.gen = 7, .expiry_ns = 5000, .rate = 10, .burst_s = 10 * TB_SCALE};
	struct ll_fence f = {.max_epoch_seen = 3};
	struct lease_update u;
	struct lease_grant g;
	uint64_t ttl;

	f.applied_epoch[1] = 3;
	f.applied_seq[1] = 9;
	if (wire_decode(data, size, &m) <= 0 || m.type != WIRE_GRANT)
		return 0;
	g = (struct lease_grant){.epoch = m.grant.epoch,
				 .seq = m.grant.seq,
				 .rate = m.grant.rate,
				 .burst = m.grant.burst};
	ttl = m.grant.ttl_ns;
	lease_grant_clamp(&g, &ttl, &cfg);
	if (g.rate > 1000 || g.burst > 100 || ttl > LEASE_TTL_MAX_NS)
		abort();
	g.expiry_ns = lease_expiry(4000, ttl);
	if (lease_grant_decide(&old, &f, 8, 1, &g, 4500, 2, &u))
		return 0;
	if (u.lease.rate > 1000 || u.lease.burst_s > 100 * TB_SCALE ||
	    u.fence.max_epoch_seen >= LEASE_EPOCH_MAX ||
	    u.fence.max_epoch_seen > 3 + LEASE_EPOCH_STEP_MAX)
		abort();
	if (u.lease.gen != old.gen && (u.lease.gen < 8 || u.next_gen <= u.lease.gen))
		abort(); /* a generation handed out twice */
	return 0;
}
