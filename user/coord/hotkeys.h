/* SPDX-License-Identifier: MIT */
/*
 * Per-key grants of one global per-key limit (docs/design.md, "Per-key
 * grants for hot keys"): the coordinator's table of the limit's hot keys,
 * each with a ledger of its own (ledger.h) that shares the limit ledger's
 * grant numbers and acks. Holder h's grant seq g records for key k the
 * per-key grant if g carries one for k, else g's share, so each key's
 * ledger keeps
 *
 *   sum over holders of (max over h's live grants of what it may spend on k)
 *       <= the limit's capacity (contract less reserve)
 *
 * exactly as the limit's ledger does for keys that are not hot.
 *
 * A key enters the table when a holder reports it wanting more than its
 * share; its ledger starts as a copy of the limit's (until then every grant
 * gave the key exactly the share, seq by seq). Targets per key are weighted
 * max-min over the holders that list it (a holder that does not list a key
 * wants none of it). A key nobody listed for HOTKEYS_COOL_NS is cooling:
 * each grant gives it the share it carries; once every live grant of every
 * holder is covered seq by seq by the limit's ledger, the key leaves the
 * table and the limit's ledger alone accounts for it again.
 *
 * Pure bookkeeping: no I/O, times are passed in (log lines aside).
 */
#ifndef LEASELINE_HOTKEYS_H
#define LEASELINE_HOTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"
#include "ll_types.h"
#include "wire.h"

#define HOTKEYS_MAX	LL_MAX_LIMIT_KEY_GRANTS /* per limit: one grant frame carries them all */
#define HOTKEYS_COOL_NS 3000000000ull		/* unlisted this long: the key cools */

/* One holder's view of one hot key. Its demand for the key and whether it
 * lists it (demand > 0) are the key ledger's h[i].demand and h[i].active.
 */
struct hotkey_holder {
	uint64_t stamp;		  /* the holder's report that last listed the key; 0 never */
	uint64_t t_rate, t_burst; /* max-min target, while the key is not cooling */
};

struct hotkey {
	struct ll_key_id key;
	uint64_t hash;
	struct ledger led;	 /* same seqs, deadlines and acks as the limit's */
	struct hotkey_holder *h; /* holders entries */
	uint64_t since_ns;	 /* hot since */
	uint64_t listed_ns;	 /* last listed with demand > 0 by any holder */
	bool cooling;
	bool dirty;    /* demand changed since the targets were computed */
	bool draining; /* over a capacity lowered by a reload: decreases only */
};

/* Where a holder is in its reports: stamps tell which keys its last report
 * listed, so a report costs O(keys it lists) unless it dropped some.
 */
struct hotkeys_rep {
	uint64_t cur;	   /* stamp of the holder's report being read (or last read) */
	uint32_t listed;   /* keys the report listed */
	uint32_t prev;	   /* keys the report before listed */
	uint32_t relisted; /* of those, listed again */
};

struct hotkeys {
	bool on; /* the limit has a key: per-key grants apply */
	char name[LL_NAME_LEN];
	size_t holders;
	uint32_t max;		 /* at most this many hot keys (HOTKEYS_MAX in the coordinator) */
	uint64_t cool_ns;	 /* HOTKEYS_COOL_NS in the coordinator */
	uint32_t n, alloc;	 /* keys in k[], room in k[] */
	struct hotkey *k;	 /* dense: k[0..n) */
	uint16_t *slot;		 /* hash table: index in k[] + 1, 0 empty; linear probing */
	uint32_t mask;		 /* slots - 1 */
	uint64_t seed;		 /* of the hash: keys come from the network */
	struct hotkeys_rep *rep; /* holders entries */
	bool dirty;		 /* some key's targets are stale */
	/* Counters (metrics), carried across policy reloads. */
	uint64_t refused;    /* keys that wanted in when the table was full */
	uint64_t key_grants; /* per-key entries sent in grants (counted by the sender) */
	uint64_t made, dropped;
	/* Log lines about keys becoming hot or dropped: a few per second. */
	uint64_t log_window_ns;
	uint32_t log_lines, log_quiet;
};

/* An empty table for a limit with a key: room for `holders` holders, at most
 * max keys (<= HOTKEYS_MAX). 0 or -ENOMEM (then *t is off and empty).
 */
int hotkeys_init(struct hotkeys *t, const char *name, size_t holders, uint32_t max, uint64_t seed);
/* Free everything; *t is off and empty afterwards (freeing twice is fine). */
void hotkeys_free(struct hotkeys *t);
/* Deep copy (a policy reload keeps a limit's hot keys). 0 or -ENOMEM (then
 * *dst is off and empty).
 */
int hotkeys_copy(struct hotkeys *dst, const struct hotkeys *src);
/* A reload changed the limit's capacity: every key ledger takes it; a key
 * now over it drains (decreases only) rather than counting as a violation.
 */
void hotkeys_set_capacity(struct hotkeys *t, uint64_t rate, uint64_t burst, uint64_t now);

/* Index in t->k of key, or -1. */
int hotkeys_find(const struct hotkeys *t, const struct ll_key_id *key);

/* A report of holder hi: begin, one call per hot key of this limit it lists,
 * end. A key listed with demand above share (what the holder has of the
 * limit) and not yet hot becomes hot, its ledger a copy of lim's. Returns 1
 * when the key became hot, 0 otherwise, -ENOSPC when it could not (the
 * table is full: counted in refused), -ENOMEM. A hot key the report does not
 * list gets demand 0 from that holder at _end.
 */
void hotkeys_report_begin(struct hotkeys *t, size_t hi);
int hotkeys_report_key(struct hotkeys *t, const struct ledger *lim, size_t hi,
		       const struct ll_key_id *key, uint64_t demand, uint64_t share, uint64_t now);
void hotkeys_report_end(struct hotkeys *t, size_t hi);

/* Holder hi acknowledged grant seq of the limit: so it did for every key. */
void hotkeys_ack(struct hotkeys *t, size_t hi, uint64_t seq, uint64_t now);
/* Holder hi stopped asking (disconnected or silent): it lists nothing now. */
void hotkeys_holder_quiet(struct hotkeys *t, size_t hi);
/* No grant of holder hi can be spent for any hot key at now. */
bool hotkeys_holder_idle(const struct hotkeys *t, size_t hi, uint64_t now);
/* Holder hi's slot is reclaimed (call only when idle): empty it everywhere. */
void hotkeys_holder_reset(struct hotkeys *t, size_t hi);

/* Max-min targets of every key whose demand changed (weights from lim). */
void hotkeys_targets(struct hotkeys *t, const struct ledger *lim);

/*
 * One grant for holder hi: the limit's share from lim toward (t_rate,
 * t_burst), then, under its seq, one grant in every hot key's ledger toward
 * the key's target (its share while cooling). keys[] (room for HOTKEYS_MAX)
 * receives every key whose grant differs from the share: the whole set.
 * Returns 1 and fills *g, keys, *n_keys: send it. 0: nothing issued (the
 * holder's ring in lim is full). -EAGAIN: issued, but a key ledger could not
 * record it: do not send (the ledgers count it until its deadline, which is
 * conservative).
 */
int hotkeys_grant(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t t_rate,
		  uint64_t t_burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		  struct wire_key_grant *keys, uint32_t *n_keys);

/* Periodic: keys unlisted for cool_ns start cooling; cooling keys whose
 * every live grant the limit's ledger covers leave the table.
 */
void hotkeys_tick(struct hotkeys *t, const struct ledger *lim, uint64_t now);

/* The invariant for every key: how many are over capacity outside a drain
 * (each logged as INVARIANT VIOLATED). Ends the drain of keys back within.
 */
uint64_t hotkeys_check(struct hotkeys *t, uint64_t now);

/* Sum over keys and holders of max(0, committed rate - demand): capacity set
 * apart for hot keys that nobody uses (tokens/s).
 */
uint64_t hotkeys_stranded(const struct hotkeys *t, uint64_t now);

/* A key as text for log lines: "10.0.0.1", "[2001:db8::1]", "tcp/443", a flow. */
void hotkeys_key_str(const struct ll_key_id *key, char *buf, size_t len);

#endif /* LEASELINE_HOTKEYS_H */
