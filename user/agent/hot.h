/* SPDX-License-Identifier: MIT */
/*
 * Hot keys of global per-key limits (docs/design.md, "Per-key grants for
 * hot keys"): the keys this gateway wants other than its default share of.
 * Two sources: the datapath's ll_hot ring buffer (a key denied while the
 * lease lives) and the per-key grants it holds (a key spending one). The
 * link puts them in every report with a demand each:
 *   - denied within the window: the contract's rate ("as much as it can
 *     get"; the coordinator's max-min makes that fair);
 *   - holding a grant and spending: what its bucket's spent counter shows
 *     over the last interval, plus 1/32;
 *   - holding a grant, spending nothing: not listed (it wants none).
 * Bounded: HOT_CAPACITY / 2 keys tracked (the memory taken at open),
 * WIRE_MAX_HOT reported; what does not fit is counted and stays at the
 * default share. The keys are the datapath's, which packets choose: they are
 * found through lib/hashmap.h's map, keyed with a random seed.
 */
#ifndef LEASELINE_AGENT_HOT_H
#define LEASELINE_AGENT_HOT_H

#include <stdbool.h>
#include <stdint.h>

#include "ll_types.h"
#include "lib/hashmap.h"
#include "lib/wire.h"

#define HOT_CAPACITY 8192 /* slots of the key map, all limits; at most half of them used */

struct dp;
struct ring_buffer;

/* What a hot key is found by (every byte hashed: no padding). */
struct hot_id {
	uint32_t id; /* limit id */
	struct ll_key_id key;
};

struct hot_key {
	struct hot_id hid;
	uint32_t uid;		  /* of the limit id served when the key came */
	uint64_t denied_ns;	  /* last denial the datapath reported; 0 none */
	uint64_t spent, spent_ns; /* the bucket's spent counter, and when it was read */
	uint64_t told;		  /* the demand the coordinator has (0: none) */
	uint64_t grant;		  /* during hot_report: its per-key grant's rate + 1; 0 none */
	/* The per-key entry held for the key as the coordinator sent it, with
	 * its tag (wire_key_grant): what the key's hot listing re-presents for
	 * adoption. seq 0: none.
	 */
	struct hot_proof {
		uint64_t epoch, seq, rate, burst;
		uint8_t tag[WIRE_TAG_LEN];
	} proof;
};

struct hot {
	struct ring_buffer *rb;
	struct hot_key *t; /* t[0..n), in the order they came; NULL until hot_open */
	size_t n;
	struct hmap map;       /* hid -> index in t[] */
	uint64_t events;       /* hot events read from the ring */
	uint64_t dropped;      /* keys not tracked or not reported: no room */
	uint32_t reported;     /* hot keys in the last report */
};

/* Read ring buffer ring_fd (ll_hot). 0 or a negative errno. */
int hot_open(struct hot *h, int ring_fd);
void hot_close(struct hot *h);
/* Take in every event waiting in the ring. */
void hot_poll(struct hot *h);
/* A new connection: the coordinator knows no demand of this gateway. */
void hot_reconnect(struct hot *h);
/* Grant g for limit id (uid) was applied: keep the tags of the entries it
 * set. A whole set or a cut leaves proofs only for the keys it names (a
 * cut's other keys keep entries of an older epoch, which no later epoch
 * adopts); changes set or drop the keys they name.
 */
void hot_grant_applied(struct hot *h, uint32_t id, uint32_t uid, const struct wire_grant *g);

/* Fill r->hot (r->n_hot) for the global per-key limits of pol, whose
 * entries in r are entry_of[id] (-1: not in this report). window_ns: a
 * denial this recent still makes a key hot.
 */
void hot_report(struct hot *h, struct dp *dp, const struct ll_policy *pol, const int *entry_of,
		struct wire_report *r, uint64_t window_ns, uint64_t now);

#endif /* LEASELINE_AGENT_HOT_H */
