// SPDX-License-Identifier: MIT
/*
 * Hot keys of a global per-key limit (see hotkeys.h). Why the sum over
 * holders of what each may spend on a key stays within capacity:
 *
 *  - A key becomes hot with a copy of the limit's ledger: until then every
 *    grant gave the key exactly the share, under the same seq, deadline and
 *    acks, so the copy accounts for what every holder may spend on it.
 *  - From then on, for each holder h, every grant either names the key
 *    (its entry, recorded until a later record is acknowledged or h's lease
 *    is dead everywhere) or leaves h holding what it held: an entry already
 *    recorded, or none, in which case the grant records its share for the
 *    key under its seq and deadline. Increases come out of the key's own
 *    headroom (ledger_issue_seq), decreases as they come.
 *  - A grant names every key named in a grant h has not acknowledged, with
 *    the latest entry: whichever of those h applied, after this one it
 *    holds what the coordinator records. A whole set replaces everything
 *    (a new connection, or a lease that died), and until one is
 *    acknowledged every grant is a whole set.
 *  - A key leaves the table only when no holder holds an entry, none has a
 *    name unacknowledged, and every live record is covered seq by seq by a
 *    grant of the limit's ledger at least as large that lives as long: from
 *    then on the limit's ledger accounts for all a holder may spend on it.
 *
 * Each point above is kept by a different part: key_add, hotkeys_grant and
 * its compose_* (hotkeys_grant.c: what a grant names and records),
 * hotkeys_ack, holder_clear, hotkeys_tick (here); after a restart, the
 * entries holders prove (hotkeys_adopt.c) and what their cuts record of
 * them. The files read and write the same per-holder flags and lists
 * (HK_*, todo, pend, hotkeys.h); the grant side sets flags only through
 * flag_set (hotkeys_int.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "coord/hotkeys.h"
#include "coord/hotkeys_int.h"
#include "lib/log.h"

#define HOTKEYS_LOG_WINDOW_NS 1000000000ull
#define HOTKEYS_LOG_LINES     5 /* per window and limit; the rest are counted */

_Static_assert(HOTKEYS_MAX < UINT32_MAX, "slots hold an index in 32 bits");
_Static_assert(HOTKEYS_MAX <= UINT16_MAX, "an agent counts a limit's entries in a u16");

/* ---- lists --------------------------------------------------------------- */

static int list_push(struct hotkeys_list *l, uint32_t idx)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? 2 * l->cap : 16;
		uint32_t *p = realloc(l->i, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->i = p;
		l->cap = cap;
	}
	l->i[l->n++] = idx;
	return 0;
}

static void list_free(struct hotkeys_list *l)
{
	free(l->i);
	memset(l, 0, sizeof(*l));
}

static int list_copy(struct hotkeys_list *d, const struct hotkeys_list *s)
{
	memset(d, 0, sizeof(*d));
	if (!s->n)
		return 0;
	d->i = malloc(s->n * sizeof(*d->i));
	if (!d->i)
		return -ENOMEM;
	memcpy(d->i, s->i, s->n * sizeof(*d->i));
	d->n = d->cap = s->n;
	return 0;
}

/* Set flag f of (key idx, holder hi), putting idx on list l if it was clear.
 * Out of memory, the flag stays clear (the caller's conservative path).
 */
bool flag_set(struct hotkeys *t, struct hotkeys_list *l, uint32_t idx, size_t hi, uint8_t f)
{
	struct hotkey_holder *kh = &t->k[idx].h[hi];

	if (kh->flags & f)
		return true;
	if (list_push(l, idx))
		return false;
	kh->flags |= f;
	return true;
}

/* ---- the key map --------------------------------------------------------- */

/* Whether k[idx] is key (the map's eq: it holds indexes in k[]). */
static bool key_eq(const struct hmap *m, const void *key, uint32_t idx)
{
	const struct hotkeys *t = HMAP_OWNER(m, struct hotkeys, map);

	return !memcmp(&t->k[idx].key, key, sizeof(struct ll_key_id));
}

int hotkeys_find(const struct hotkeys *t, const struct ll_key_id *key)
{
	return t->on ? (int)hmap_find(&t->map, key) : -1;
}

/* ---- the table ---------------------------------------------------------- */

int hotkeys_init(struct hotkeys *t, const char *name, size_t holders, uint32_t max, uint64_t seed)
{
	/* A given seed (tests; the coordinator draws one per limit) fills both
	 * words of SipHash's key, the second mixed from it.
	 */
	struct hmap_seed hs = {seed, (seed ^ (seed >> 31)) * 0xbf58476d1ce4e5b9ull};
	int err;

	memset(t, 0, sizeof(*t));
	if (max > HOTKEYS_MAX)
		max = HOTKEYS_MAX;
	/* The key map grows with the hot keys (at most 2 x max slots): 256
	 * keyed limits cost nothing until used.
	 */
	err =
	    hmap_init(&t->map, sizeof(struct ll_key_id), max ? max : 1, key_eq, seed ? &hs : NULL);
	if (err)
		return err;
	t->hl = calloc(holders ? holders : 1, sizeof(*t->hl));
	if (!t->hl) {
		hotkeys_free(t);
		return -ENOMEM;
	}
	snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
	t->on = true;
	t->holders = holders;
	t->max = max;
	t->cool_ns = HOTKEYS_COOL_NS;
	/* Whatever a holder holds from before is unknown: a whole set first. */
	for (size_t h = 0; h < holders; h++)
		t->hl[h].full = true;
	return 0;
}

static void key_free(struct hotkey *k)
{
	ledger_free(&k->led);
	free(k->h);
	k->h = NULL;
}

static void hl_free(struct hotkeys_hl *hl)
{
	list_free(&hl->todo);
	list_free(&hl->pend);
}

void hotkeys_free(struct hotkeys *t)
{
	for (uint32_t i = 0; i < t->top; i++)
		if (t->k[i].live)
			key_free(&t->k[i]);
	for (size_t h = 0; t->hl && h < t->holders; h++)
		hl_free(&t->hl[h]);
	free(t->k);
	hmap_free(&t->map);
	free(t->hl);
	list_free(&t->free_slots);
	list_free(&t->cool);
	list_free(&t->dirty_keys);
	memset(t, 0, sizeof(*t));
}

int hotkeys_copy(struct hotkeys *dst, const struct hotkeys *src)
{
	size_t nh = src->holders ? src->holders : 1;

	*dst = *src;
	dst->k = NULL;
	dst->hl = NULL;
	dst->top = dst->alloc = 0;
	memset(&dst->free_slots, 0, sizeof(dst->free_slots));
	memset(&dst->cool, 0, sizeof(dst->cool));
	memset(&dst->dirty_keys, 0, sizeof(dst->dirty_keys));
	if (hmap_copy(&dst->map, &src->map))
		goto fail; /* dst->map is empty */
	if (!src->on)
		return 0;
	dst->hl = calloc(nh, sizeof(*dst->hl));
	dst->k = src->top ? calloc(src->top, sizeof(*dst->k)) : NULL;
	if (!dst->hl || (src->top && !dst->k))
		goto fail;
	dst->alloc = src->top;
	if (list_copy(&dst->free_slots, &src->free_slots) || list_copy(&dst->cool, &src->cool) ||
	    list_copy(&dst->dirty_keys, &src->dirty_keys))
		goto fail;
	for (size_t h = 0; h < src->holders; h++) {
		dst->hl[h] = src->hl[h];
		if (list_copy(&dst->hl[h].todo, &src->hl[h].todo) ||
		    list_copy(&dst->hl[h].pend, &src->hl[h].pend)) {
			memset(&dst->hl[h].todo, 0, sizeof(dst->hl[h].todo));
			memset(&dst->hl[h].pend, 0, sizeof(dst->hl[h].pend));
			goto fail;
		}
	}
	for (uint32_t i = 0; i < src->top; i++) {
		struct hotkey *d = &dst->k[i];
		const struct hotkey *s = &src->k[i];

		dst->top = i + 1;
		if (!s->live)
			continue;
		*d = *s;
		d->h = malloc(nh * sizeof(*d->h));
		if (!d->h || ledger_copy(&d->led, &s->led)) {
			free(d->h);
			d->h = NULL;
			d->led.h = NULL;
			d->live = false;
			goto fail;
		}
		memcpy(d->h, s->h, nh * sizeof(*d->h));
	}
	return 0;
fail:
	hotkeys_free(dst);
	return -ENOMEM;
}

static void key_dirty(struct hotkeys *t, uint32_t idx)
{
	struct hotkey *k = &t->k[idx];

	if (!k->dirty && !list_push(&t->dirty_keys, idx))
		k->dirty = true;
}

void hotkeys_set_capacity(struct hotkeys *t, uint64_t rate, uint64_t burst, uint64_t now)
{
	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];

		if (!k->live || k->pinned)
			continue; /* an override keeps its own */
		k->led.rate = rate;
		k->led.burst = burst;
		k->draining = ledger_over(&k->led, now);
		key_dirty(t, i);
	}
}

/* At most HOTKEYS_LOG_LINES lines per second and limit; true to log one. */
static bool log_ok(struct hotkeys *t, uint64_t now)
{
	if (now - t->log_window_ns >= HOTKEYS_LOG_WINDOW_NS) {
		if (t->log_quiet)
			pr_info("limit '%s': %u more hot-key changes not logged (%u hot keys)\n",
				t->name, t->log_quiet, t->n);
		t->log_window_ns = now;
		t->log_lines = 0;
		t->log_quiet = 0;
	}
	if (t->log_lines < HOTKEYS_LOG_LINES) {
		t->log_lines++;
		return true;
	}
	t->log_quiet++;
	return false;
}

/* Key idx leaves the table; its slot goes to the free list. */
static void key_drop(struct hotkeys *t, uint32_t idx, uint64_t now)
{
	struct hotkey *k = &t->k[idx];
	char ks[128];

	if (log_ok(t, now)) {
		hotkeys_key_str(&k->key, ks, sizeof(ks));
		pr_info("limit '%s': key %s no longer hot after %.1f s (%u hot keys left)\n",
			t->name, ks, (double)(now - k->since_ns) / 1e9, t->n - 1);
	}
	hmap_del(&t->map, &k->key);
	key_free(k);
	memset(k, 0, sizeof(*k));
	if (list_push(&t->free_slots, idx) && idx + 1 == t->top)
		t->top--; /* no room on the free list: only the last slot is given back */
	t->n--;
	t->dropped++;
}

/* A new hot key: its ledger is the limit's, every holder holding no entry
 * for it (each on its todo list, to be named).
 */
static int key_add(struct hotkeys *t, const struct ledger *lim, const struct ll_key_id *key,
		   uint64_t now)
{
	struct hotkey *k;
	uint32_t idx;

	/* Room in the map first: the put below cannot fail (n < max). */
	if (hmap_reserve(&t->map, t->n + 1))
		return -ENOMEM;
	if (t->free_slots.n) {
		idx = t->free_slots.i[--t->free_slots.n];
	} else {
		if (t->top == t->alloc) {
			uint32_t alloc = t->alloc ? t->alloc * 2 : 8;
			struct hotkey *p;

			if (alloc > t->max)
				alloc = t->max;
			p = realloc(t->k, alloc * sizeof(*p));
			if (!p)
				return -ENOMEM;
			t->k = p;
			t->alloc = alloc;
		}
		idx = t->top;
	}
	k = &t->k[idx];
	memset(k, 0, sizeof(*k));
	k->key = *key;
	k->h = calloc(t->holders ? t->holders : 1, sizeof(*k->h));
	if (!k->h || ledger_copy_n(&k->led, lim, t->holders)) {
		free(k->h);
		k->h = NULL;
		if (idx != t->top)
			t->free_slots.i[t->free_slots.n++] = idx;
		return -ENOMEM;
	}
	if (idx == t->top)
		t->top++;
	k->live = true;
	for (size_t i = 0; i < k->led.cap; i++) {
		k->led.h[i].active = false;
		k->led.h[i].demand = 0;
	}
	for (size_t h = 0; h < t->holders; h++) {
		flag_set(t, &t->hl[h].todo, idx, h, HK_TODO);
		/* The copied records are acknowledged through this list. */
		flag_set(t, &t->hl[h].pend, idx, h, HK_PEND);
	}
	k->since_ns = k->calm_ns = now;
	key_dirty(t, idx);
	/* Created during a drain of the limit: it drains with it. */
	k->draining = ledger_over(&k->led, now);
	hmap_put(&t->map, key, &idx);
	t->n++;
	t->made++;
	return (int)idx;
}

static void key_reheat(struct hotkeys *t, uint32_t idx);

/* ---- overrides ---------------------------------------------------------- */

void hotkeys_pins_begin(struct hotkeys *t)
{
	for (uint32_t i = 0; i < t->top; i++)
		t->k[i].pin_seen = false;
}

/* Key idx's capacity becomes (rate, burst): a lower one drains. */
static void key_capacity(struct hotkeys *t, uint32_t idx, uint64_t rate, uint64_t burst,
			 uint64_t now)
{
	struct hotkey *k = &t->k[idx];

	if (k->led.rate == rate && k->led.burst == burst)
		return;
	k->led.rate = rate;
	k->led.burst = burst;
	k->draining = ledger_over(&k->led, now);
	key_dirty(t, idx);
}

int hotkeys_pin(struct hotkeys *t, const struct ledger *lim, const struct ll_key_id *key,
		uint64_t rate, uint64_t burst, uint64_t now)
{
	int idx, made = 0;

	if (!t->on)
		return 0;
	idx = hotkeys_find(t, key);
	if (idx < 0) {
		if (t->n >= t->max) {
			t->refused++;
			return -ENOSPC;
		}
		idx = key_add(t, lim, key, now);
		if (idx < 0)
			return idx;
		made = 1;
	}
	if (t->k[idx].cooling)
		key_reheat(t, (uint32_t)idx);
	t->k[idx].pinned = true;
	t->k[idx].pin_seen = true;
	/* Every holder takes part: with no demand anywhere the key's contract
	 * is spread over the gateways, as a limit's is, not cut to 0.
	 */
	for (size_t h = 0; h < t->holders && h < t->k[idx].led.cap; h++)
		t->k[idx].led.h[h].active = true;
	key_dirty(t, (uint32_t)idx);
	key_capacity(t, (uint32_t)idx, rate, burst, now);
	return made;
}

void hotkeys_pins_end(struct hotkeys *t, uint64_t rate, uint64_t burst, uint64_t now)
{
	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];

		if (!k->live || !k->pinned || k->pin_seen)
			continue;
		k->pinned = false; /* an ordinary hot key again: it may cool */
		k->calm_ns = now;
		for (size_t h = 0; h < t->holders && h < k->led.cap; h++)
			k->led.h[h].active = k->led.h[h].demand > 0;
		key_capacity(t, i, rate, burst, now);
	}
}

/* ---- reports ------------------------------------------------------------ */

/* Holder hi's demand for key idx becomes d; above: d is above its share. */
static void key_demand(struct hotkeys *t, uint32_t idx, size_t hi, uint64_t d, bool above,
		       uint64_t now)
{
	struct hotkey *k = &t->k[idx];
	struct ledger_holder *lh = &k->led.h[hi];
	struct hotkey_holder *kh = &k->h[hi];

	if (lh->demand != d || lh->active != (d > 0 || k->pinned)) {
		lh->demand = d;
		lh->active = d > 0 || k->pinned;
		key_dirty(t, idx);
	}
	if (above && !(kh->flags & HK_ABOVE)) {
		kh->flags |= HK_ABOVE;
		k->n_above++;
	} else if (!above && (kh->flags & HK_ABOVE)) {
		kh->flags &= (uint8_t)~HK_ABOVE;
		if (!--k->n_above)
			k->calm_ns = now;
	}
}

/* A cooling key is wanted again: every holder's entry goes back to target. */
static void key_reheat(struct hotkeys *t, uint32_t idx)
{
	struct hotkey *k = &t->k[idx];

	k->cooling = false;
	for (size_t h = 0; h < t->holders; h++)
		flag_set(t, &t->hl[h].todo, idx, h, HK_TODO);
	key_dirty(t, idx);
}

int hotkeys_report_key(struct hotkeys *t, const struct ledger *lim, size_t hi,
		       const struct ll_key_id *key, uint64_t demand, uint64_t share, uint64_t now)
{
	int idx, made = 0;

	if (!t->on || hi >= t->holders)
		return 0;
	idx = hotkeys_find(t, key);
	if (idx < 0) {
		char ks[128];

		if (demand <= share)
			return 0; /* the share serves it: no per-key grant needed */
		if (t->n >= t->max) {
			t->refused++;
			return -ENOSPC;
		}
		idx = key_add(t, lim, key, now);
		if (idx < 0)
			return idx;
		made = 1;
		if (log_ok(t, now)) {
			hotkeys_key_str(key, ks, sizeof(ks));
			pr_info("limit '%s': key %s is hot (demand %llu/s > share %llu/s; %u hot "
				"keys)\n",
				t->name, ks, (unsigned long long)demand, (unsigned long long)share,
				t->n);
		}
	}
	key_demand(t, (uint32_t)idx, hi, demand, demand > share, now);
	/* Hot while someone wants more than its default share: a key everybody
	 * spends within the share cools (and is dropped) although wanted.
	 */
	if (demand > share && t->k[idx].cooling)
		key_reheat(t, (uint32_t)idx);
	return made;
}

/* ---- acks, holders ------------------------------------------------------ */

/* The newest record of holder hi in key ledger l at or below seq (0: none). */
static uint64_t record_at(const struct ledger *l, size_t hi, uint64_t seq)
{
	const struct ledger_holder *h = &l->h[hi];
	uint64_t best = 0;

	for (uint32_t j = 0; j < h->n && j < LEDGER_MAX_PENDING; j++)
		if (h->g[j].seq <= seq && h->g[j].seq > best)
			best = h->g[j].seq;
	return best;
}

/* Whether holder hi has a record above seq in key ledger l. */
static bool record_above(const struct ledger *l, size_t hi, uint64_t seq)
{
	const struct ledger_holder *h = &l->h[hi];

	for (uint32_t j = 0; j < h->n && j < LEDGER_MAX_PENDING; j++)
		if (h->g[j].seq > seq)
			return true;
	return false;
}

/* Acknowledge seq in key idx's ledger for hi: the newest record at or
 * below it is what hi holds, the older ones die. true while hi still has
 * records (or a name) not acknowledged.
 */
static bool key_ack(struct hotkeys *t, uint32_t idx, size_t hi, uint64_t seq, uint64_t now)
{
	struct hotkey *k = &t->k[idx];
	uint64_t at = record_at(&k->led, hi, seq);

	if (at)
		ledger_ack(&k->led, hi, at, now);
	return record_above(&k->led, hi, seq) || k->h[hi].s_seq > seq;
}

void hotkeys_ack(struct hotkeys *t, size_t hi, uint64_t seq, uint64_t now)
{
	struct hotkeys_hl *hl;
	uint32_t kept = 0;

	if (!t->on || hi >= t->holders)
		return;
	hl = &t->hl[hi];
	if (hl->full_seq && seq >= hl->full_seq) {
		hl->full = false; /* a whole set arrived: changes from here on */
		hl->full_seq = 0;
	}
	/* The flag is cleared as each entry is seen, so an index listed twice
	 * is kept once; the kept ones get it back.
	 */
	for (uint32_t j = 0; j < hl->pend.n; j++) {
		uint32_t idx = hl->pend.i[j];
		struct hotkey *k = &t->k[idx];

		if (idx >= t->top || !k->live || !(k->h[hi].flags & HK_PEND))
			continue;
		k->h[hi].flags &= (uint8_t)~HK_PEND;
		if (key_ack(t, idx, hi, seq, now))
			hl->pend.i[kept++] = idx;
	}
	hl->pend.n = kept;
	for (uint32_t j = 0; j < kept; j++)
		t->k[hl->pend.i[j]].h[hi].flags |= HK_PEND;
}

void hotkeys_holder_quiet(struct hotkeys *t, size_t hi, uint64_t now)
{
	if (!t->on || hi >= t->holders)
		return;
	for (uint32_t i = 0; i < t->top; i++)
		if (t->k[i].live)
			key_demand(t, i, hi, 0, false, now);
}

bool hotkeys_holder_idle(const struct hotkeys *t, size_t hi, uint64_t now)
{
	for (uint32_t i = 0; i < t->top; i++)
		if (t->k[i].live && !ledger_holder_idle(&t->k[i].led, hi, now))
			return false;
	return true;
}

/* Holder hi holds nothing the coordinator must count (its lease is dead
 * everywhere, or its slot is reclaimed): forget its entries and records;
 * its next grants carry the whole set.
 */
static void holder_clear(struct hotkeys *t, size_t hi, bool reset, uint64_t now)
{
	struct hotkeys_hl *hl = &t->hl[hi];

	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];
		uint8_t keep;

		if (!k->live)
			continue;
		if (reset)
			ledger_holder_reset(&k->led, hi);
		else
			ledger_holder_clear(&k->led, hi);
		keep = reset ? 0 : k->h[hi].flags & HK_ABOVE;
		if (!keep && (k->h[hi].flags & HK_ABOVE) && !--k->n_above)
			k->calm_ns = now;
		memset(&k->h[hi], 0, sizeof(k->h[hi]));
		k->h[hi].flags = keep;
		if (k->pinned && hi < k->led.cap)
			k->led.h[hi].active = true;
		key_dirty(t, i);
	}
	hl_free(hl);
	memset(hl, 0, sizeof(*hl));
	hl->full = true;
	/* Every key it holds no entry for is on its todo list. */
	for (uint32_t i = 0; i < t->top; i++)
		if (t->k[i].live)
			flag_set(t, &hl->todo, i, hi, HK_TODO);
}

void hotkeys_holder_reset(struct hotkeys *t, size_t hi, uint64_t now)
{
	if (!t->on || hi >= t->holders)
		return;
	holder_clear(t, hi, true, now);
}

/* ---- cooling, the invariant, metrics ----------------------------------- */

static bool key_covered(const struct hotkey *k, const struct ledger *lim, uint64_t now)
{
	for (size_t h = 0; h < k->led.cap; h++)
		if (!ledger_holder_within(&k->led, h, lim, now))
			return false;
	return true;
}

static bool key_held(const struct hotkeys *t, const struct hotkey *k, const struct ledger *lim)
{
	for (size_t h = 0; h < t->holders; h++) {
		const struct hotkey_holder *kh = &k->h[h];

		if ((kh->flags & HK_NAMED) || (h < lim->cap && kh->s_seq > lim->h[h].acked_seq))
			return true;
	}
	return false;
}

uint64_t hotkeys_tick(struct hotkeys *t, const struct ledger *lim, uint64_t now, bool force)
{
	uint64_t bad = t->bad;
	uint32_t kept = 0;

	t->bad = 0;
	if (!t->on || (!force && now < t->next_scan_ns))
		return bad;
	t->next_scan_ns = now + HOTKEYS_SCAN_NS;
	/* A holder whose every grant of the limit is dead spends nothing: its
	 * records go, and it gets a whole set next.
	 */
	for (size_t h = 0; h < t->holders; h++) {
		bool idle = ledger_holder_idle(lim, h, now);

		if (idle && !t->hl[h].dead) {
			holder_clear(t, h, false, now);
			t->hl[h].dead = true;
		} else if (!idle) {
			t->hl[h].dead = false;
		}
	}
	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];

		if (!k->live || k->cooling || k->pinned || k->n_above ||
		    now - k->calm_ns <= t->cool_ns)
			continue;
		if (list_push(&t->cool, i))
			break;
		k->cooling = true;
		pr_debug("limit '%s': a hot key is cooling (nobody above its share for %.1f s)\n",
			 t->name, (double)(now - k->calm_ns) / 1e9);
	}
	for (uint32_t j = 0; j < t->cool.n; j++) {
		uint32_t idx = t->cool.i[j];
		struct hotkey *k = &t->k[idx];

		if (idx >= t->top || !k->live || !k->cooling)
			continue;
		if (!key_held(t, k, lim) && key_covered(k, lim, now))
			key_drop(t, idx, now);
		else
			t->cool.i[kept++] = idx;
	}
	t->cool.n = kept;
	return bad + hotkeys_check(t, now);
}

uint64_t hotkeys_check(struct hotkeys *t, uint64_t now)
{
	uint64_t bad = 0;

	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];
		char ks[128];

		if (!k->live)
			continue;
		if (!ledger_over(&k->led, now)) {
			k->draining = k->guessed = false;
			continue;
		}
		if (k->draining)
			continue; /* a lowered contract: decreases are on their way */
		bad++;
		hotkeys_key_str(&k->key, ks, sizeof(ks));
		pr_warn("limit '%s' key %s: INVARIANT VIOLATED: live grants %llu/s, %llu exceed "
			"%llu/s, %llu\n",
			t->name, ks, (unsigned long long)ledger_sum_rate_fast(&k->led, now),
			(unsigned long long)ledger_sum_burst_fast(&k->led, now),
			(unsigned long long)k->led.rate, (unsigned long long)k->led.burst);
	}
	return bad;
}

uint64_t hotkeys_stranded(const struct hotkeys *t, uint64_t now)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < t->top; i++) {
		const struct hotkey *k = &t->k[i];

		if (!k->live)
			continue;
		for (size_t h = 0; h < k->led.cap; h++) {
			uint64_t c = ledger_committed_rate(&k->led, h, now);

			if (c > k->led.h[h].demand)
				sum += c - k->led.h[h].demand;
		}
	}
	return sum;
}

static void addr_str(uint8_t family, const __u32 addr[4], char *out, size_t len)
{
	char s[INET6_ADDRSTRLEN] = "?";

	if (family == 4) {
		inet_ntop(AF_INET, &addr[3], s, sizeof(s)); /* IPv4 as ::ffff:a.b.c.d */
		snprintf(out, len, "%s", s);
	} else {
		inet_ntop(AF_INET6, addr, s, sizeof(s));
		snprintf(out, len, "[%s]", s);
	}
}

void hotkeys_key_str(const struct ll_key_id *key, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN + 2], b[INET6_ADDRSTRLEN + 2];
	bool flow = key->sport || key->addr2[0] || key->addr2[1] || key->addr2[2] || key->addr2[3];

	if (key->family != 4 && key->family != 6) {
		snprintf(buf, len, "proto %u port %u", key->proto, ntohs(key->dport));
		return;
	}
	addr_str(key->family, key->addr, a, sizeof(a));
	if (!flow) {
		snprintf(buf, len, "%s", a);
		return;
	}
	addr_str(key->family, key->addr2, b, sizeof(b));
	snprintf(buf, len, "%s:%u -> %s:%u proto %u", a, ntohs(key->sport), b, ntohs(key->dport),
		 key->proto);
}
