/* SPDX-License-Identifier: MIT */
/*
 * Per-key usage reports (reference §6.3, "Per key"): the agent's side. Every
 * METER_PERIOD_NS the agent reads ll_meter (the kernel's per-key running
 * totals of metered limits) and queues the keys whose totals differ from
 * what the coordinator last acknowledged, at most METER_MAX_QUEUE of them
 * (the rest carry over to the next period: they still differ then). The
 * queue goes out as METER frames (one limit each, at most WIRE_MAX_METER
 * keys) as the connection's output drains, each remembered until its ack:
 * recorded, the totals it carried become the acknowledged ones; to be sent
 * again (the coordinator could not write), or no ack within
 * METER_ACK_TIMEOUT_NS, or the link dropped, its keys are pending again and
 * go in a later period. The kernel map holds the totals meanwhile, so an
 * agent cut off from the coordinator loses nothing; one restarted (its
 * memory of what was acknowledged lost) sends every key once more, which
 * the ledger's marks make harmless. With ll_meter over half full, series
 * idle METER_IDLE_NS and acknowledged are retired (deleted from the map).
 */
#ifndef LEASELINE_AGENT_METER_H
#define LEASELINE_AGENT_METER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ll_types.h"
#include "lib/hashmap.h"
#include "lib/wire.h"

#define METER_PERIOD_NS	     1000000000ull /* a scan of ll_meter a second */
#define METER_ACK_TIMEOUT_NS 10000000000ull
#define METER_MAX_QUEUE	     131072 /* keys queued per scan; the rest next time */
#define METER_INFLIGHT	     512    /* batches sent and not yet acknowledged */
/* With ll_meter more than half full, a series unchanged this long whose
 * totals were all acknowledged is retired: deleted from the map (its last
 * totals, as the delete returned them, sent if they moved meanwhile). The
 * key, if it comes back, is a new series (ll_meter.born) from 0.
 */
#define METER_IDLE_NS (600 * 1000000000ull)

/* One series: a kernel entry (key, born). */
struct meter_ent {
	struct ll_flow_key key;
	struct ll_meter acked; /* what the coordinator acknowledged */
	struct ll_meter cur;   /* as last read (while sent_seq: as sent); .born: the series' */
	uint64_t sent_seq;     /* the batch carrying cur, 0 = none */
	uint64_t changed_ns;   /* when this agent last saw cur change */
	uint64_t seen;	       /* the scan that last read it in the map */
	bool retired;	       /* deleted from ll_meter: cur are its last totals */
};

struct meter_batch {
	uint64_t seq, sent_ns;
	uint32_t n;
	uint32_t idx[WIRE_MAX_METER];
};

struct meter {
	struct meter_ent *tab; /* dense; idx finds a series */
	size_t cap, used;
	struct hmap idx; /* (key, born) -> index in tab; keys the kernel's, packets choose */
	bool idx_stale;	 /* a compaction could not index tab again: rebuilt when next used */
	uint64_t scans;
	size_t max_queue; /* keys queued per scan: METER_MAX_QUEUE (tests set less) */
	bool no_retire;	 /* the kernel cannot look up and delete: entries stay */
	uint32_t *queue; /* table indexes, grouped by limit uid */
	size_t n_queue, q_next;
	struct meter_batch *ring; /* METER_INFLIGHT, slot seq % METER_INFLIGHT */
	uint64_t seq, next_scan_ns;
	/* counters, since the agent started */
	uint64_t batches, keys_sent, keys_acked, retried, refused, timed_out, carried, retired;
};

int meter_init(struct meter *m);
void meter_free(struct meter *m);
/* A new connection: nothing is in flight any more. */
void meter_reconnect(struct meter *m);

struct dp;
struct conn;
struct ll_policy;

/* Scan when due, then send what the connection's output has room for. */
void meter_step(struct meter *m, struct dp *dp, struct conn *c, struct wire_msg *out,
		const char *holder, uint64_t incarnation, uint64_t now);
void meter_on_ack(struct meter *m, uint64_t ident, const struct wire_meter_ack *a);

#endif /* LEASELINE_AGENT_METER_H */
