/* SPDX-License-Identifier: MIT */
/*
 * Per-key grants of one global per-key limit (docs/design.md, "Per-key
 * grants for hot keys"): the coordinator's table of the limit's hot keys,
 * each with a ledger of its own (ledger.h) numbered by the limit ledger's
 * grant seqs and acknowledged by its acks, so that each key's ledger keeps
 *
 *   sum over holders of (max over h's live records of what it may spend on k)
 *       <= the limit's capacity (contract less reserve)
 *
 * exactly as the limit's ledger does for keys that are not hot.
 *
 * Grants carry changes only. A holder holds, for each hot key, either an
 * entry of its own (named: the value sent last) or nothing (it spends the
 * share of whatever grant it applied last). What it may spend is recorded:
 *  - an entry sent under seq g: a record (g, value) that lives until a later
 *    record of the key is acknowledged, or until the holder's lease of the
 *    limit is dead everywhere (then hotkeys_tick clears the holder and its
 *    next grant is a whole set);
 *  - a key it holds no entry for: a record (g, g's share, g's deadline) in
 *    every grant g, as the limit's ledger has.
 * A grant that is not the whole set names every key whose entry changed in
 * a grant the holder has not acknowledged, so whatever it applied of those,
 * the grant leaves it holding exactly the set it names on top of the one it
 * acknowledged (keys_base).
 *
 * A key enters the table when a holder reports it wanting more than its
 * share; its ledger starts as a copy of the limit's. A holder's demand for
 * a key stands until the holder reports it again or goes quiet. A key with
 * nobody above its share for cool_ns cools: each holder's entry goes back
 * to the share; once no holder holds an entry or has one unacknowledged
 * and every live record is covered seq by seq by the limit's ledger, the
 * key leaves the table.
 *
 * Costs: a grant costs O(keys whose entry for that holder changes, plus
 * keys it holds no entry for, plus cooling keys); an ack O(keys with records
 * it has not acknowledged); a report O(keys it lists). Keys are visited all
 * together only every HOTKEYS_SCAN_NS (cooling, dropping, dead leases).
 *
 * Pure bookkeeping: no I/O, times are passed in (log lines aside).
 */
#ifndef LEASELINE_COORD_HOTKEYS_H
#define LEASELINE_COORD_HOTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coord/ledger.h"
#include "ll_types.h"
#include "lib/hashmap.h"
#include "lib/wire.h"

#define HOTKEYS_MAX	LL_MAX_LIMIT_KEY_GRANTS /* per limit: entries an agent holds */
#define HOTKEYS_COOL_NS 3000000000ull		/* nobody above its share this long: the key cools */
#define HOTKEYS_SCAN_NS 250000000ull		/* every key visited this often (hotkeys_tick) */

/* One holder's view of one hot key. Its standing demand for the key and
 * whether it wants any (demand > 0) are the key ledger's h[i].demand and
 * h[i].active.
 */
enum {
	HK_NAMED = 1, /* after the last grant sent, the holder holds an entry */
	HK_TODO = 2,  /* in the holder's todo list: its entry is to change */
	HK_PEND = 4,  /* in the holder's pend list: records it has not acknowledged */
	HK_ABOVE = 8, /* its demand was above its share when it listed the key */
	HK_STAY = 16, /* the grant that visited it last left it on the todo list */
	/* Adoption (hotkeys_adopt): in the quiet period of a term, the entry
	 * the holder proved it holds from an earlier epoch, (s_rate, s_burst),
	 * which its cuts name (within the key's room) instead of cutting it.
	 */
	HK_ADOPTED = 32,
	HK_ADOPT_TRIED = 64, /* once per holder and key in a term */
	/* What the key's ledger records for the holder is what it holds (an
	 * adopted entry, until an entry of another size is named or none is):
	 * while the key is over on paper (guessed), only these are renewed as
	 * they stand.
	 */
	HK_EXACT = 128,
};

struct hotkey_holder {
	uint64_t t_rate, t_burst; /* max-min target, while the key is not cooling */
	uint64_t s_rate, s_burst; /* the entry sent last (HK_NAMED) */
	uint64_t s_seq;		  /* the grant that named the key last (set or remove); 0 none */
	uint32_t mark;		  /* pass of the holder's grant that visited the key last */
	uint8_t flags;		  /* HK_* */
};

struct hotkey {
	struct ll_key_id key;
	struct ledger led;	 /* same seqs and acks as the limit's */
	struct hotkey_holder *h; /* holders entries */
	uint64_t since_ns;	 /* hot since */
	uint64_t calm_ns;	 /* nobody above its share since (n_above == 0) */
	uint32_t n_above;	 /* holders with HK_ABOVE */
	bool live;		 /* the slot holds a key (k[] keeps its indices) */
	bool pinned;		 /* an override: hot for good, with a contract of its own */
	bool pin_seen;		 /* named by the pins being set (hotkeys_pins_end) */
	bool cooling;
	bool dirty;    /* demand changed since the targets were computed */
	bool draining; /* over a capacity lowered by a reload: decreases only */
	/* Over on paper since an adopted entry was recorded as held: the
	 * other holders' records are upper bounds (a guess at the share, a
	 * cut's min), so renewing one as it stands may raise what that holder
	 * really spends. Until the key is within again, an entry that is not
	 * HK_EXACT gets at most the room the other holders' records leave.
	 */
	bool guessed;
};

/* A list of key indices (a hint: the flags say whether an entry still
 * stands; an index may appear twice after its key was dropped and the slot
 * reused).
 */
struct hotkeys_list {
	uint32_t *i;
	uint32_t n, cap;
};

struct hotkeys_hl {
	struct hotkeys_list todo; /* keys with HK_TODO for this holder */
	struct hotkeys_list pend; /* keys with HK_PEND for this holder */
	uint64_t full_seq;	  /* its last whole set; until acknowledged every grant is one */
	bool full;		  /* the next grant is a whole set */
	bool dead;		  /* its lease was dead everywhere: records cleared */
	uint32_t pass;
};

struct hotkeys {
	bool on; /* the limit has a key: per-key grants apply */
	char name[LL_NAME_LEN];
	size_t holders;
	uint32_t max;		 /* at most this many hot keys (HOTKEYS_MAX in the coordinator) */
	uint64_t cool_ns;	 /* HOTKEYS_COOL_NS in the coordinator */
	uint32_t n;		 /* live keys */
	uint32_t top, alloc;	 /* slots of k[] in use (live or free), room in k[] */
	struct hotkey *k;	 /* k[0..top): live or free */
	struct hotkeys_list free_slots;
	struct hmap map;	 /* key -> its index in k[] (keys come from the network: seeded) */
	struct hotkeys_hl *hl;	 /* holders entries */
	struct hotkeys_list cool; /* cooling keys */
	struct hotkeys_list dirty_keys; /* keys whose targets are stale */
	uint64_t next_scan_ns;
	uint64_t bad;		 /* violations seen while granting, not yet returned */
	/* Counters (metrics), carried across policy reloads. */
	uint64_t refused;    /* keys that wanted in when the table was full */
	uint64_t key_grants; /* per-key entries sent in grants (counted by the sender) */
	uint64_t full_sets;  /* grants that carried a whole set */
	uint64_t adopted, adopt_refused, adopt_clamped; /* per-key entries (hotkeys_adopt) */
	uint64_t made, dropped;
	/* Log lines about keys becoming hot or dropped: a few per second. */
	uint64_t log_window_ns;
	uint32_t log_lines, log_quiet;
};

/* What hotkeys_grant puts in the grant: the wire's keys[], keys_full
 * (WIRE_KEYS_*) and keys_base.
 */
struct hotkeys_out {
	struct wire_key_grant *keys; /* room for WIRE_MAX_KEY_GRANTS */
	uint32_t n;
	uint8_t mode;
	uint64_t base;
};

/* An empty table for a limit with a key: room for `holders` holders, at most
 * max keys (<= HOTKEYS_MAX). seed keys the hash of the key map (0: one from
 * getrandom()). 0 or a negative errno (then *t is off and empty).
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

/* Overrides (reference §4): key has a contract of its own, (rate, burst)
 * less the reserve, and stays hot for good. Between _begin and _end, every
 * override of the limit is pinned; at _end a key no longer named goes back
 * to the limit's capacity and may cool. 1 made, 0 already there, -ENOSPC
 * (the table is full), -ENOMEM.
 */
void hotkeys_pins_begin(struct hotkeys *t);
int hotkeys_pin(struct hotkeys *t, const struct ledger *lim, const struct ll_key_id *key,
		uint64_t rate, uint64_t burst, uint64_t now);
void hotkeys_pins_end(struct hotkeys *t, uint64_t rate, uint64_t burst, uint64_t now);

/* Index in t->k of key (a live slot), or -1. */
int hotkeys_find(const struct hotkeys *t, const struct ll_key_id *key);

/* Holder hi lists key with demand (0: it wants none now); its demand
 * stands until it lists the key again. share: what the holder has of the
 * limit. A key listed with demand above share and not yet hot becomes hot,
 * its ledger a copy of lim's. Returns 1 when the key became hot, 0
 * otherwise, -ENOSPC when it could not (the table is full: counted in
 * refused), -ENOMEM.
 */
int hotkeys_report_key(struct hotkeys *t, const struct ledger *lim, size_t hi,
		       const struct ll_key_id *key, uint64_t demand, uint64_t share, uint64_t now);

/* In the quiet period after a term began (after the holder's share of the
 * limit was adopted): holder hi proved it holds an entry (rate, burst) for
 * key from an earlier epoch (the caller checked the tag). Once per holder
 * and key in a term, and only for a key in the table; the entry is cut to
 * the key's contract (counted in adopt_clamped), and each of the holder's
 * cuts names it and records it as held, room or not (the key drains if its
 * ledger is then over on paper), so the holder keeps spending it through
 * the quiet period. 1 adopted, 0 not (no such
 * key, or tried already in this term).
 */
int hotkeys_adopt(struct hotkeys *t, size_t hi, const struct ll_key_id *key, uint64_t rate,
		  uint64_t burst);
/* A new term: no entry is adopted, and each may be tried once again. */
void hotkeys_term_begin(struct hotkeys *t);

/* Holder hi acknowledged grant seq of the limit: so it did for every key. */
void hotkeys_ack(struct hotkeys *t, size_t hi, uint64_t seq, uint64_t now);
/* Holder hi stopped asking (disconnected or silent): it wants none of any key. */
void hotkeys_holder_quiet(struct hotkeys *t, size_t hi, uint64_t now);
/* Holder hi has a new connection: what it holds is not known, so its next
 * grants carry the whole set until one is acknowledged.
 */
void hotkeys_holder_connect(struct hotkeys *t, size_t hi);
/* No grant of holder hi can be spent for any hot key at now. */
bool hotkeys_holder_idle(const struct hotkeys *t, size_t hi, uint64_t now);
/* Holder hi's slot is reclaimed (call only when idle): empty it everywhere. */
void hotkeys_holder_reset(struct hotkeys *t, size_t hi, uint64_t now);

/* Max-min targets of every key whose demand changed (weights from lim). */
void hotkeys_targets(struct hotkeys *t, const struct ledger *lim);

/*
 * One grant for holder hi: the limit's share from lim toward (t_rate,
 * t_burst), then, under its seq, a record in the ledger of every hot key
 * whose entry for hi changes or that hi holds no entry for. out receives
 * the keys to name (changed entries, and every key named in a grant hi has
 * not acknowledged; or the whole set) and keys_full/keys_base.
 * Returns 1: send it. 0: nothing issued (the holder's ring in lim is full).
 * -EAGAIN: issued, but a key's record could not be made or named: do not
 * send (the ledgers count what was recorded until its deadline, which is
 * conservative, and the next grant names what this one would have).
 */
int hotkeys_grant(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t t_rate,
		  uint64_t t_burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		  struct hotkeys_out *out);

/*
 * A cut for holder hi (WIRE_KEYS_CUT): in a quiet period, where what hi
 * holds of the hot keys is not known (adoption), the limit's share (rate,
 * burst: the proven one, never more) and under its seq, for every hot key,
 * a record of what hi may spend on it once it applies the cut, which keeps
 * every key at the least of what it holds, its entry named and the share:
 *  - a key whose ledger has room for the share: the share, until the
 *    grant's deadline (not named);
 *  - a key whose entry was adopted (hotkeys_adopt): that entry, named and
 *    recorded as held (ledger_record_seq; the key drains if that puts it
 *    over on paper);
 *  - a key with a contract of its own (an override) or without that room:
 *    an entry named, hi's weighted part of the key's capacity within the
 *    room (recorded as an entry).
 * Nothing rises: so Σ over holders of what each may spend on a key stays
 * within what the last epoch allowed, whichever holders applied their cut.
 * The holder still gets a whole set next, once the quiet period ends.
 * Returns as hotkeys_grant does.
 */
int hotkeys_grant_cut(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t rate,
		      uint64_t burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		      struct hotkeys_out *out);

/* Periodic, a full visit at most every HOTKEYS_SCAN_NS (force: now): keys
 * with nobody above its share for cool_ns start cooling; cooling keys no
 * holder holds and whose every live record the limit's ledger covers leave
 * the table; a holder whose every grant of lim is dead is cleared from
 * every key (and gets a whole set next). Returns the violations found
 * since the last call (hotkeys_check on a full visit, plus those seen while
 * granting).
 */
uint64_t hotkeys_tick(struct hotkeys *t, const struct ledger *lim, uint64_t now, bool force);

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

#endif /* LEASELINE_COORD_HOTKEYS_H */
