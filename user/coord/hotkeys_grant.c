// SPDX-License-Identifier: MIT
/*
 * Hot keys' targets and grants (hotkeys.h): what each holder's share of a
 * hot key should be, and what a grant to it names and records. The
 * argument for why the sum stays within capacity is at the top of
 * hotkeys.c; this file keeps its second and third points (every grant names
 * a key or leaves the holder holding what it held; a grant names every key
 * of a grant not yet acknowledged).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/hotkeys.h"
#include "coord/hotkeys_int.h"

/* ---- targets and grants ------------------------------------------------- */

void hotkeys_targets(struct hotkeys *t, const struct ledger *lim)
{
	uint64_t *rate = NULL, *burst = NULL;
	size_t cap = 0;
	uint32_t kept = 0;

	for (uint32_t j = 0; j < t->dirty_keys.n; j++) {
		uint32_t idx = t->dirty_keys.i[j];
		struct hotkey *k = &t->k[idx];
		bool fail = false;

		if (idx >= t->top || !k->live || !k->dirty)
			continue;
		if (k->cooling) {
			t->dirty_keys.i[kept++] = idx; /* recomputed when it heats up */
			continue;
		}
		if (k->led.cap > cap) {
			uint64_t *r = realloc(rate, k->led.cap * sizeof(*r));
			uint64_t *b = r ? realloc(burst, k->led.cap * sizeof(*b)) : NULL;

			if (r)
				rate = r;
			if (b)
				burst = b;
			fail = !r || !b;
			if (!fail)
				cap = k->led.cap;
		}
		for (size_t h = 0; !fail && h < k->led.cap; h++)
			k->led.h[h].weight = h < lim->cap ? lim->h[h].weight : 0;
		if (fail || ledger_targets(&k->led, rate, burst)) {
			t->dirty_keys.i[kept++] = idx; /* out of memory: the old targets stay */
			continue;
		}
		for (size_t h = 0; h < t->holders && h < k->led.cap; h++) {
			struct hotkey_holder *kh = &k->h[h];

			if (kh->t_rate == rate[h] && kh->t_burst == burst[h])
				continue;
			kh->t_rate = rate[h];
			kh->t_burst = burst[h];
			flag_set(t, &t->hl[h].todo, idx, h, HK_TODO);
		}
		k->dirty = false;
	}
	t->dirty_keys.n = kept;
	free(rate);
	free(burst);
}

/* Composing one grant for one holder. */
struct compose {
	struct hotkeys *t;
	size_t hi;
	const struct ledger_grant *g;
	uint64_t now, live_ns;
	struct hotkeys_out *out;
	bool failed; /* a key that had to be named or recorded could not be */
	bool raises; /* a whole set or changes (a cut never raises what is held) */
};

/* Lower (*rate, *burst), about to be given holder hi on key k, to the room
 * the other holders' records leave, while k is over on paper and what is
 * recorded for hi is not known to be what it holds (hotkey.guessed).
 */
static void guess_cap(struct hotkey *k, size_t hi, uint64_t now, uint64_t *rate,
		      uint64_t *burst)
{
	uint64_t r, b;

	if (!k->guessed || (k->h[hi].flags & HK_EXACT))
		return;
	ledger_room_others(&k->led, hi, now, &r, &b);
	*rate = r < *rate ? r : *rate;
	*burst = b < *burst ? b : *burst;
}

static bool room(const struct compose *c)
{
	return c->out->n < WIRE_MAX_KEY_GRANTS;
}

static void name(struct compose *c, uint32_t idx, uint8_t op, uint64_t rate, uint64_t burst)
{
	struct hotkey *k = &c->t->k[idx];

	c->out->keys[c->out->n++] =
	    (struct wire_key_grant){.key = k->key, .op = op, .rate = rate, .burst = burst};
	k->h[c->hi].s_seq = c->g->seq;
	if (!flag_set(c->t, &c->t->hl[c->hi].pend, idx, c->hi, HK_PEND))
		c->failed = true; /* its ack could not be followed */
}

/* Name key idx with the entry a just recorded: the holder holds it now. */
static void name_entry(struct compose *c, uint32_t idx, const struct ledger_grant *a)
{
	struct hotkey_holder *kh = &c->t->k[idx].h[c->hi];

	name(c, idx, WIRE_KEY_SET, a->rate, a->burst);
	kh->flags |= HK_NAMED;
	kh->s_rate = a->rate;
	kh->s_burst = a->burst;
}

/* Record v in key idx's ledger for this grant (an entry: until superseded;
 * the share: until the grant's deadline). false if the ring is full.
 */
static bool record(struct compose *c, uint32_t idx, uint64_t rate, uint64_t burst, bool entry,
		   struct ledger_grant *a)
{
	struct hotkey *k = &c->t->k[idx];

	if (entry && c->raises)
		guess_cap(k, c->hi, c->now, &rate, &burst);
	if (!ledger_issue_seq(&k->led, c->hi, c->g->seq, rate, burst, c->now,
			      entry ? HOTKEYS_FOREVER : c->live_ns, a))
		return false;
	flag_set(c->t, &c->t->hl[c->hi].pend, idx, c->hi, HK_PEND);
	if (ledger_over(&k->led, c->now) && !k->draining)
		c->t->bad++;
	return true;
}

/* An adopted entry, recorded as it is held (in a cut: the holder keeps at
 * most that). The key's ledger began as the limit's, counting every holder
 * not yet heard from at its share of the limit although most spend nothing
 * on this key (their entry for it is a cut to 0): cut to that guess's room,
 * the first gateways to report lost up to half of their entries for the
 * whole quiet period (no later cut can raise them). So the sum may go over
 * the key's capacity on paper; the key then drains (decreases only, as
 * after a lowered contract) until the guesses are replaced by what the
 * holders' cuts record and the sum is back within.
 */
static bool record_adopted(struct compose *c, uint32_t idx, struct ledger_grant *a)
{
	struct hotkey *k = &c->t->k[idx];
	struct hotkey_holder *kh = &k->h[c->hi];

	if (!ledger_record_seq(&k->led, c->hi, c->g->seq, kh->s_rate, kh->s_burst, c->now,
			       HOTKEYS_FOREVER, a))
		return false;
	flag_set(c->t, &c->t->hl[c->hi].pend, idx, c->hi, HK_PEND);
	if (ledger_over(&k->led, c->now))
		k->draining = k->guessed = true;
	return true;
}

/* Key idx for this grant. Returns true when the key stays on the holder's
 * todo list (its entry is not where it should be yet).
 */
static bool compose_one(struct compose *c, uint32_t idx, struct hotkey *k, struct hotkey_holder *kh,
			const struct ledger_grant *g, bool named);

static bool compose_key(struct compose *c, uint32_t idx)
{
	struct hotkey *k = &c->t->k[idx];
	struct hotkey_holder *kh = &k->h[c->hi];
	const struct ledger_grant *g = c->g;
	bool named = kh->flags & HK_NAMED, stay;
	uint64_t s_rate = kh->s_rate, s_burst = kh->s_burst;

	if (kh->mark == c->t->hl[c->hi].pass)
		return kh->flags & HK_STAY; /* visited by this grant already */
	kh->mark = c->t->hl[c->hi].pass;
	kh->flags &= (uint8_t)~HK_STAY;
	stay = compose_one(c, idx, k, kh, g, named);
	/* Exact while what it holds stays named as it stood. */
	if (!(kh->flags & HK_NAMED) || kh->s_rate != s_rate || kh->s_burst != s_burst)
		kh->flags &= (uint8_t)~HK_EXACT;
	if (stay)
		kh->flags |= HK_STAY;
	return stay;
}

static bool compose_one(struct compose *c, uint32_t idx, struct hotkey *k, struct hotkey_holder *kh,
			const struct ledger_grant *g, bool named)
{
	struct ledger_grant a;
	uint64_t r, b;

	if (k->cooling) {
		/* Back to the share: where the share fits the key's headroom. */
		ledger_peek(&k->led, c->hi, g->rate, g->burst, c->now, &r, &b);
		guess_cap(k, c->hi, c->now, &r, &b);
		if (r == g->rate && b == g->burst && (!named || room(c))) {
			if (!record(c, idx, g->rate, g->burst, false, &a)) {
				c->failed |= !named; /* the share would go unrecorded */
				return true;
			}
			if (named) {
				name(c, idx, WIRE_KEY_REMOVE, 0, 0);
				kh->flags &= (uint8_t)~HK_NAMED;
			}
			return false;
		}
		if (named)
			return true; /* its entry stands (recorded) until the share fits */
		/* No entry, and the share does not fit: cut it with an entry. */
		if (!room(c) || !record(c, idx, r, b, true, &a)) {
			c->failed = true;
			return true;
		}
		name_entry(c, idx, &a);
		return true;
	}
	if (named && kh->s_rate == kh->t_rate && kh->s_burst == kh->t_burst)
		return false;
	if (room(c) && record(c, idx, kh->t_rate, kh->t_burst, true, &a)) {
		name_entry(c, idx, &a);
		return a.rate != kh->t_rate || a.burst != kh->t_burst;
	}
	if (named)
		return true; /* the entry it holds stands, recorded */
	/* No entry and no room (or no record): it spends this grant's share,
	 * or, where that does not fit a key over on paper, an entry that does.
	 */
	ledger_peek(&k->led, c->hi, g->rate, g->burst, c->now, &r, &b);
	guess_cap(k, c->hi, c->now, &r, &b);
	if (r == g->rate && b == g->burst && record(c, idx, g->rate, g->burst, false, &a))
		return true;
	if (k->guessed && room(c) && record(c, idx, r, b, true, &a)) {
		name_entry(c, idx, &a);
		return true;
	}
	c->failed = true;
	return true;
}

/* Lower *rate, *burst (the share about to be granted to hi) to what every
 * key hi may be left holding no entry for has room for in its ledger. Only
 * when more keys may need naming than one grant carries: then some are left
 * at the share for this grant, and the share must fit each of them.
 */
static void share_fit(struct hotkeys *t, size_t hi, uint64_t now, uint64_t *rate, uint64_t *burst)
{
	struct hotkeys_hl *hl = &t->hl[hi];
	uint64_t need = hl->full ? t->n : (uint64_t)hl->pend.n + hl->todo.n + t->cool.n;

	if (need <= WIRE_MAX_KEY_GRANTS)
		return;
	for (uint32_t i = 0; i < t->top; i++) {
		struct hotkey *k = &t->k[i];
		uint64_t r, b;

		if (!k->live || (!hl->full && (k->h[hi].flags & HK_NAMED)))
			continue;
		ledger_peek(&k->led, hi, *rate, *burst, now, &r, &b);
		guess_cap(k, hi, now, &r, &b);
		*rate = r < *rate ? r : *rate;
		*burst = b < *burst ? b : *burst;
	}
}

int hotkeys_grant(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t t_rate,
		  uint64_t t_burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		  struct hotkeys_out *out)
{
	struct compose c = {t, hi, g, now, live_ns, out, false, true};
	struct hotkeys_hl *hl;
	uint32_t kept = 0;

	out->n = 0;
	out->mode = WIRE_KEYS_CHANGES;
	out->base = 0;
	if (t->on && hi < t->holders) {
		hotkeys_targets(t, lim);
		share_fit(t, hi, now, &t_rate, &t_burst);
	}
	if (!ledger_issue(lim, hi, t_rate, t_burst, now, live_ns, g))
		return 0;
	if (!t->on)
		return 1;
	if (hi >= t->holders)
		return -EAGAIN;
	hl = &t->hl[hi];
	hl->pass++; /* this grant's visits */
	if (hl->full) {
		/* The whole set: the holder drops every entry it holds and takes
		 * those named; every key is visited.
		 */
		out->mode = WIRE_KEYS_WHOLE;
		hl->full_seq = g->seq; /* changes only once the last whole set is applied */
		for (uint32_t i = 0; i < t->top; i++) {
			if (!t->k[i].live)
				continue;
			t->k[i].h[hi].flags &= (uint8_t)~(HK_NAMED | HK_ADOPTED);
			if (!t->k[i].cooling)
				flag_set(t, &hl->todo, i, hi, HK_TODO);
		}
	} else {
		/* Changes on top of what it acknowledged: first every key named
		 * since then, changed again or as it stands.
		 */
		out->base = lim->h[hi].acked_seq;
		for (uint32_t j = 0; j < hl->pend.n && !c.failed; j++) {
			uint32_t idx = hl->pend.i[j];
			struct hotkey_holder *kh;

			if (idx >= t->top || !t->k[idx].live)
				continue;
			kh = &t->k[idx].h[hi];
			if (!(kh->flags & HK_PEND) || kh->s_seq <= out->base || kh->s_seq == g->seq)
				continue;
			if ((kh->flags & HK_TODO) || t->k[idx].cooling)
				compose_key(&c, idx);
			kh->mark = hl->pass;
			if (kh->s_seq == g->seq)
				continue; /* named with its new entry */
			if (!room(&c)) {
				c.failed = true;
				break;
			}
			if (kh->flags & HK_NAMED)
				name(&c, idx, WIRE_KEY_SET, kh->s_rate, kh->s_burst);
			else
				name(&c, idx, WIRE_KEY_REMOVE, 0, 0);
		}
	}
	/* Keys whose entry changes, or that it holds none for. The flag is
	 * cleared as each is seen (an index listed twice is kept once); the
	 * ones that stay get it back.
	 */
	for (uint32_t j = 0; j < hl->todo.n; j++) {
		uint32_t idx = hl->todo.i[j];
		struct hotkey *k = &t->k[idx];
		struct hotkey_holder *kh;
		bool stay;

		if (idx >= t->top || !k->live)
			continue;
		kh = &k->h[hi];
		if (!(kh->flags & HK_TODO))
			continue;
		kh->flags &= (uint8_t)~HK_TODO;
		if (k->cooling)
			continue; /* the cooling list visits it; it is put back when it heats up */
		stay = compose_key(&c, idx);
		if (stay)
			hl->todo.i[kept++] = idx;
	}
	hl->todo.n = kept;
	for (uint32_t j = 0; j < kept; j++)
		t->k[hl->todo.i[j]].h[hi].flags |= HK_TODO;
	/* Cooling keys, every grant: each goes back to the share. */
	for (uint32_t j = 0; j < t->cool.n; j++) {
		uint32_t idx = t->cool.i[j];

		if (idx < t->top && t->k[idx].live && t->k[idx].cooling)
			compose_key(&c, idx);
	}
	if (out->mode == WIRE_KEYS_WHOLE)
		t->full_sets++;
	return c.failed ? -EAGAIN : 1;
}

/* Holder hi's part of key k's capacity, by the limit's weights of the
 * holders it has (an equal part if none has a weight).
 */
static void weighted_part(const struct hotkeys *t, const struct hotkey *k,
			  const struct ledger *lim, size_t hi, uint64_t *rate, uint64_t *burst)
{
	uint64_t sum = 0, w = hi < lim->cap ? lim->h[hi].weight : 0;

	for (size_t h = 0; h < lim->cap && h < t->holders; h++)
		if (lim->h[h].active)
			sum += lim->h[h].weight;
	if (!sum || !w) {
		sum = t->holders;
		w = 1;
	}
	*rate = (uint64_t)((unsigned __int128)k->led.rate * w / sum);
	*burst = (uint64_t)((unsigned __int128)k->led.burst * w / sum);
}

int hotkeys_grant_cut(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t rate,
		      uint64_t burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		      struct hotkeys_out *out)
{
	struct compose c = {t, hi, g, now, live_ns, out, false, false};

	out->n = 0;
	out->mode = WIRE_KEYS_CUT;
	out->base = 0;
	if (!ledger_issue(lim, hi, rate, burst, now, live_ns, g))
		return 0;
	if (!t->on)
		return 1;
	if (hi >= t->holders)
		return -EAGAIN;
	t->hl[hi].pass++;
	for (uint32_t i = 0; i < t->top && !c.failed; i++) {
		struct hotkey *k = &t->k[i];
		struct hotkey_holder *kh = &k->h[hi];
		struct ledger_grant a;
		uint64_t r, b, pr, pb;

		if (!k->live)
			continue;
		kh->mark = t->hl[hi].pass;
		if (kh->flags & HK_ADOPTED) {
			/* The entry it proved: a cut that named less would take
			 * what it holds away for the quiet period.
			 */
			if (!room(&c) || !record_adopted(&c, i, &a)) {
				c.failed = true;
				continue;
			}
			name_entry(&c, i, &a);
			continue;
		}
		ledger_peek(&k->led, hi, g->rate, g->burst, now, &r, &b);
		if (!k->pinned && r == g->rate && b == g->burst) {
			if (!record(&c, i, g->rate, g->burst, false, &a))
				c.failed = true;
			continue;
		}
		weighted_part(t, k, lim, hi, &pr, &pb);
		ledger_peek(&k->led, hi, pr < g->rate ? pr : g->rate, pb < g->burst ? pb : g->burst,
			    now, &r, &b);
		if (!room(&c) || !record(&c, i, r, b, true, &a)) {
			c.failed = true;
			continue;
		}
		name_entry(&c, i, &a);
	}
	return c.failed ? -EAGAIN : 1;
}
