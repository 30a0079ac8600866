/* SPDX-License-Identifier: MIT */
/*
 * The agent's link to the coordinator: one TCP connection, redialled with
 * backoff. Receives the policy and grants, applies them to the datapath
 * (through fencing), and sends a report every refresh interval: absolute
 * totals, demand, and the grants applied (which acknowledges them).
 * Losing the link changes nothing in the kernel: leases die there.
 */
#ifndef LEASELINE_AGENT_LINK_H
#define LEASELINE_AGENT_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/config.h"
#include "lib/conn.h"
#include "agent/hot.h"
#include "agent/meter.h"
#include "lib/wire.h"

#define LINK_SENT_RING 64 /* recent reports whose send time a grant may name */

struct dp;

struct link {
	char addr[CFG_ADDR_LEN]; /* the coordinator dialled now: addrs[cur] */
	/* Every replica the agent file lists (coordinator: {addresses}), tried
	 * in turn: a link that drops moves to the next one at once, and backs
	 * off only once every one has been tried since a frame last came. A
	 * REDIRECT moves it to the leader it names if that is one of these;
	 * it never dials an address the file does not list.
	 */
	char addrs[CFG_MAX_COORDINATORS][CFG_ADDR_LEN];
	uint32_t n_addrs, cur, tried;
	int redirect_to;    /* index a REDIRECT named, -1 none */
	uint64_t redirects; /* REDIRECTs received */
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	struct conn c;
	bool connecting, up;
	uint64_t next_dial_ns, backoff_ns, dial_ns;
	uint64_t hello_ns; /* send time of HELLO: report_seq 0 */
	bool heard;	   /* a frame came on this connection */
	/* Why the link last went down, as logged: the same reason again is
	 * said at debug level only, until a frame comes.
	 */
	char said_down[192];
	uint64_t report_seq;
	uint64_t sent_seq[LINK_SENT_RING], sent_ns[LINK_SENT_RING];
	uint64_t refresh_ns, next_report_ns;
	uint64_t last_grant_ns; /* last grant on this connection; 0 before the first */
	uint64_t last_offered[LL_MAX_LIMITS], last_sample_ns;
	uint64_t demand[LL_MAX_LIMITS];
	struct hot hot;	      /* hot keys of global per-key limits, reported with their demand */
	struct tls_ctx tls;   /* mutual TLS to the coordinator; ctx NULL: plain TCP */
	struct wire_msg *msg; /* the frame being handled */
	struct wire_msg *out; /* the frame being sent: never the one being read */
	uint64_t grants_applied, grants_stale, grants_clamped, policies_applied, policies_refused;
	uint64_t grants_bad_keys; /* refused: a per-key grant named a malformed key */
	uint64_t connects;	  /* connections made since this agent started */
	bool up_written;	  /* the link state ll_state shows */
	/* Per limit id: the uid whose whole per-key set this connection has
	 * applied (0: none yet), so changes build on a set known to both sides.
	 */
	uint32_t kg_full_uid[LL_MAX_LIMITS];
	struct meter meter; /* per-key usage of metered limits (meter.h) */
	/* Per limit id: the last grant applied, as it came, with its tag and
	 * the lease's expiry, re-presented in every report so that a
	 * coordinator that does not remember it (restarted, or a new leader)
	 * can adopt it (docs/protocol.md, "Adoption"). In memory only: an
	 * agent restart forgets it, and its share waits out the quiet period.
	 */
	struct link_held {
		uint64_t epoch, seq, rate, burst, ttl_ns, expiry_ns;
		uint8_t tag[WIRE_TAG_LEN];
	} held[LL_MAX_LIMITS];
};

/* 0, or -EINVAL with the reason logged (a certificate that does not load). */
int link_init(struct link *l, const struct cfg_agent *ac);
/* SIGHUP: load ac's certificates for the next connection; the running one
 * (and every lease) is untouched. On error the ones in use stay.
 */
int link_tls_reload(struct link *l, const struct cfg_agent *ac);
void link_free(struct link *l);
/* fd and poll events to wait for, or -1 when there is no socket. */
int link_pollfd(const struct link *l, short *events);
/* Do whatever is due: dial, read, apply, report. */
void link_step(struct link *l, struct dp *dp, short revents, uint64_t now);

struct lease_grant;
struct lease_key;

/* A grant's way into the kernel: read the limit's lease, the fence and the
 * generation counter (dp), decide (lease_grant_decide), write (dp). 0, or
 * -ESTALE if fencing refuses it, or a map error.
 */
int link_lease_apply(struct dp *dp, uint32_t id, const struct lease_grant *g, uint64_t now);
/* The same, with per-key grants of the limit (uid), by mode (WIRE_KEYS_*):
 * whole, keys is the whole set, which replaces the one held; cut, every
 * key keeps the least of what it holds, its entry in keys and the share
 * (lease_keys_cut); changes, keys set or remove entries of the held set,
 * applied only if the grant builds on the one applied (base: the fence's
 * applied seq for the limit is at least base, in the grant's epoch; else
 * -ESTALE). keys NULL: the held set stays as it is
 * (link_lease_apply). keys are checked and clamped already
 * (lease_keys_clamp). -E2BIG if the set would outgrow
 * LL_MAX_LIMIT_KEY_GRANTS.
 */
int link_lease_apply_keys(struct dp *dp, uint32_t id, uint32_t uid, const struct lease_grant *g,
			  struct lease_key *keys, size_t n_keys, uint8_t mode, uint64_t base,
			  uint64_t now);
/* Note a coordinator epoch in the fence (lease_fence_see_epoch, then dp);
 * -ESTALE if it is older than one already seen.
 */
int link_epoch_see(struct dp *dp, uint64_t epoch, uint64_t incarnation);

#endif /* LEASELINE_AGENT_LINK_H */
