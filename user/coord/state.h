/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's state, private to user/coord/: one entry per global
 * limit (its contract, reserve and ledger), per holder (a gateway by name,
 * its incarnation and durable fallback/bypass totals) and per connection.
 * The daemon's files (coord.c and those of coord_int.h) change it;
 * coord_metrics.c only reads it.
 */
#ifndef LEASELINE_COORD_STATE_H
#define LEASELINE_COORD_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/config.h"
#include "lib/conn.h"
#include "coord/hotkeys.h"
#include "lib/http.h"
#include "coord/election.h"
#include "coord/ledger.h"
#include "ll_types.h"
#include "coord/store.h"
#include "coord/slots.h"
#include "coord/telemetry.h"
#include "lib/tls.h"
#include "coord/usage_ledger.h"
#include "coord/usage_writer.h"
#include "lib/wire.h"

struct climit {
	char name[LL_NAME_LEN];
	uint64_t rate, burst;		      /* the contract R, B */
	uint64_t reserve_rate, reserve_burst; /* fallback shares of all gateways */
	uint8_t on_loss;
	uint64_t fb_rate, fb_burst;
	struct ledger led;
	uint64_t *t_rate, *t_burst; /* cached max-min targets per holder */
	bool dirty;		    /* demand changed since the targets were computed */
	uint64_t next_recompute_ns, recompute_ns; /* and how long the last one took */
	uint64_t max_sum_rate, max_sum_burst;	  /* highest sums of live shares seen */
	uint64_t drain_since_ns; /* contract lowered, live shares still above it since */
	uint64_t last_drain_ns;	 /* how long the last such drain took */
	struct hotkeys hot;	 /* per-key grants of hot keys (a limit with a key) */
	double waste; /* tokens committed to holders that they did not admit (telemetry.c) */
	bool meter;   /* meter: true: its reported totals go to the usage ledger */
};

/* What the coordinator keeps per holder and global limit (holder_lim). */
struct cholder_limit {
	uint64_t fallback, bypass; /* durable totals */
	uint64_t usage_ns;	   /* when last recorded */
	struct tele_slot tele;	   /* admissions, for telemetry.c */
	/* Adoption (grants.c): the share of an earlier epoch this holder
	 * proved it holds, taken into the ledger once in this run; during the
	 * quiet period it is renewed and never raised.
	 */
	bool adopt_tried, adopted;
	uint64_t adopt_rate, adopt_burst;
	/* The usage ledger's bound (metering.c): the most granted (or
	 * adopted) since its last report was committed; !lease_seen (no
	 * commit yet in this run, or grants it may hold that this run never
	 * saw): the contract bounds it.
	 */
	bool lease_seen;
	uint64_t lease_rate_max, lease_burst_max;
	/* Set when the holder took its slot (metering.c, lease_slot_taken):
	 * grants it may have spent that this slot never gave (of an earlier
	 * run, or of a slot it gave up) were dead by then, so the contract
	 * bounds its first report up to this time only, and its lease after.
	 * 0 once a report is committed.
	 */
	uint64_t contract_until_ns;
	/* Per-key figures (METER, metering.c): from known_since_ns (set at
	 * the slot take: when every grant it could hold that this run did not
	 * give was dead) the most any of its keys could spend is the most it
	 * was granted of the limit (its share, which every cold key spends)
	 * or of a key, in this slot; before it, the key's contract.
	 */
	uint64_t known_since_ns;
	uint64_t meter_rate_max, meter_burst_max;
};

struct cholder {
	bool used;
	char name[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	int conn;		   /* index in coord.conns, -1 if not connected */
	uint64_t report_seq;	   /* highest report seen from this incarnation */
	uint64_t last_report_ns;   /* a holder silent for a lease's life asks for nothing */
	bool asking;		   /* counted in the targets (connected and reporting) */
	uint64_t tele_incarnation; /* the incarnation its tele slots count */
	uint64_t uledger_ns;	   /* when its last report went to the usage ledger */
	uint64_t counters_ident;   /* its pinned counters' identity, from its HELLO (0 unknown) */
	uint8_t cert[32];	   /* SHA-256 of its certificate (TLS; zero without) */
	bool uledger_busy;	   /* a report of it at the ledger's writer: grants of its
				    * metered limits wait for that one's commit */
	bool epoch_raised;	   /* its HELLO has moved the epoch once in this run */
	uint64_t lease_end_ns;	   /* the latest deadline of a grant to it (a limit's share) */
};

/* A holder that gave its slot up (grants.c, holder_reclaim): when its
 * last grant died, for the bound on its first report in its next slot.
 */
struct lease_gone {
	char name[WIRE_HOLDER_LEN];
	uint64_t lease_end_ns;
};

struct cconn {
	struct conn c;
	int holder;	      /* -1 until HELLO */
	uint32_t events;      /* what epoll watches for it */
	uint64_t accepted_ns; /* a HELLO is due within COORD_HELLO_DEADLINE_NS */
	uint8_t peer[16];     /* the peer's address (IPv4 as v4-mapped IPv6) */
	bool spoke;	      /* it has sent something (a silent one gives way first) */
};

struct coord {
	const char *path;
	struct cfg_coord cfg;
	struct cfg_policy *pol;
	char *yaml;
	size_t yaml_len;
	struct coord_store store;
	/* The epoch grants are issued under: the store's (one coordinator) or
	 * the election's while this replica leads (replicas:); 0 while it
	 * does not.
	 */
	uint64_t epoch;
	uint64_t quiet_until;
	/* replicas: (leadership.c): the election thread and its last view. */
	struct election *el;
	struct election_view ev;
	uint64_t led_epoch;	    /* the epoch of this replica's current term, 0 none */
	uint64_t redirects_sent;    /* HELLOs answered with REDIRECT */
	uint64_t terms;		    /* terms begun (a new epoch as leader) */
	uint64_t deadline_refusals; /* grants withheld: past the leadership deadline */
	uint32_t n_limits;
	struct climit lim[LL_MAX_LIMITS];
	uint16_t by_name[LL_MAX_LIMITS]; /* indexes of lim[], sorted by name (limit_by_name) */
	struct cholder *h;		 /* cfg.gateways of them */
	/* Per holder and limit: cfg.gateways rows of hl_cap, the most global
	 * limits a policy has had, so memory follows the limits configured,
	 * not LL_MAX_LIMITS (holder_lim).
	 */
	struct cholder_limit *hl;
	uint32_t hl_cap;
	/* The last cfg.gateways holders that gave their slot up; gone_lost:
	 * one was overwritten (a name not found may then have held a slot).
	 */
	struct lease_gone *gone;
	uint32_t gone_next;
	bool gone_lost;
	struct cconn **conns;
	size_t max_conns;
	struct slot_table slots;  /* conns, for placing new ones */
	struct handshakes *hs;	  /* the door: accepts, TLS handshakes (its own thread) */
	int listen_fd, ep;
	struct http_server metrics; /* its thread reads this struct under lock */
	pthread_mutex_t lock;	    /* held by the main loop while it changes anything */
	struct wire_msg *msg;	    /* the frame being handled (one message is large) */
	struct wire_msg *out;	    /* the frame being sent: never the one being read */
	uint64_t grants, stale_reports, protocol_errors, violations, refused;
	uint64_t hello_timeouts, crowded_refused, store_failures, holders_reclaimed;
	uint64_t pending_evicted; /* closed without a HELLO to make room in a full table */
	uint64_t full_refused;	  /* refused on accept: a full table, and none could give way */
	uint64_t prefix_refused;  /* refused: pending-per-prefix from one /24 (/48) */
	struct tls_ctx tls;	  /* mutual TLS with every agent; ctx NULL: plain TCP */
	uint64_t tls_refused;	  /* holders whose certificate does not name them */
	uint64_t ring_full, key_ledger_full, link_drops; /* allocator failures (telemetry.h) */
	uint64_t reloads, reloads_refused;		 /* SIGHUP: policies loaded, refused */
	/* The usage ledger: its writer thread owns it (usage_writer.h). */
	struct uwriter *uw;
	uint64_t usage_failures; /* reports the usage ledger could not record (no grant) */
	uint64_t usage_full;	 /* reports and METER batches refused: the writer's queue full */
	uint64_t meter_recorded, meter_retry, meter_refused; /* acks sent, by status */
	/* Reports and METER batches with a total above 2^62, METER batches
	 * naming a counters identity their HELLO did not: refused.
	 */
	uint64_t usage_forged;
	/* Adoption: shares of earlier epochs taken over, refused (a tag that
	 * proves nothing), cut to the contract; HELLO epoch claims ignored
	 * (a holder that already moved the epoch once in this run).
	 */
	uint64_t adopted, adopt_refused, adopt_clamped, epoch_claims_ignored;
	uint64_t old_version_hellos; /* holders that spoke WIRE_VERSION_MIN..WIRE_VERSION-1 */
	/* Peers of another wire version: said at most once a minute
	 * (connections.c), how many since it was last said.
	 */
	uint64_t version_say_ns, version_unsaid;
};

/* This coordinator leads (always, without replicas:): HELLOs are served. */
static inline bool coord_leads(const struct coord *co)
{
	return !co->el || (co->ev.leader && co->led_epoch && co->epoch == co->ev.epoch);
}

/* Holder hi's state for limit l (< co->n_limits <= co->hl_cap). */
static inline struct cholder_limit *holder_lim(const struct coord *co, int hi, uint32_t l)
{
	return &co->hl[(size_t)hi * co->hl_cap + l];
}

#endif /* LEASELINE_COORD_STATE_H */
