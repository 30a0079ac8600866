// SPDX-License-Identifier: MIT
/*
 * Lease clock arithmetic (see lease_clock.h). Pure functions: no clock is
 * read here, so both sides and the unit tests compute the same instants.
 */
#include "lib/lease_clock.h"

#define PPM 1000000ull

uint64_t lease_expiry(uint64_t t_send_ns, uint64_t ttl_ns)
{
	uint64_t span = ttl_ns - ttl_ns / PPM * LEASE_RHO_PPM;

	return span > LEASE_DELTA_NS ? t_send_ns + span - LEASE_DELTA_NS : t_send_ns;
}

uint64_t lease_deadline(uint64_t t_issue_ns, uint64_t ttl_ns)
{
	return t_issue_ns + ttl_ns + (ttl_ns + PPM - 1) / PPM * LEASE_RHO_PPM + LEASE_DELTA_NS;
}
