// SPDX-License-Identifier: MIT
/*
 * Hot keys of a global per-key limit (see hotkeys.h). Why the sum over
 * holders of what each may spend on a key stays within capacity:
 *
 *  - A key becomes hot with a copy of the limit's ledger: until then every
 *    grant gave the key exactly the share, under the same seq, deadline and
 *    acks, so the copy accounts for what every holder may spend on it.
 *  - From then on every grant of the limit is recorded in every hot key's
 *    ledger under the same seq and deadline (hotkeys_grant), with the value
 *    the grant gives the key (its entry, or the share where it has none),
 *    and every ack goes to every ledger (hotkeys_ack). A key's ledger
 *    issues decreases as they come and increases out of its own headroom,
 *    so its invariant holds as the limit's does.
 *  - A key leaves the table only once every live grant of every holder in
 *    its ledger is covered, seq by seq, by a grant of the limit's ledger at
 *    least as large that lives as long: from then on the limit's ledger
 *    accounts for all a holder may still spend on the key, and later grants
 *    give it the share. A cooling key's target is the share of the grant
 *    being composed, so its new grants are covered as they are issued and
 *    the old ones die within a lease.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "hotkeys.h"
#include "log.h"

#define HOTKEYS_LOG_WINDOW_NS 1000000000ull
#define HOTKEYS_LOG_LINES     5 /* per window and limit; the rest are counted */

_Static_assert(HOTKEYS_MAX <= WIRE_MAX_KEY_GRANTS, "a grant frame carries every hot key");
_Static_assert(HOTKEYS_MAX < UINT16_MAX, "slots hold an index in 16 bits");

/* ---- the hash table ---------------------------------------------------- */

static uint64_t key_hash(uint64_t seed, const struct ll_key_id *key)
{
	uint64_t w[sizeof(*key) / 8], h = seed ^ 0x6a09e667f3bcc908ull;

	_Static_assert(sizeof(*key) % 8 == 0, "a key is whole words");
	memcpy(w, key, sizeof(w));
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		h ^= w[i];
		h *= 0x9e3779b97f4a7c15ull;
		h ^= h >> 29;
	}
	h ^= h >> 32;
	h *= 0xbf58476d1ce4e5b9ull;
	return h ^ (h >> 31);
}

/* The slot holding index idx (which is in the table). */
static uint32_t slot_of(const struct hotkeys *t, uint32_t idx)
{
	uint32_t s = (uint32_t)t->k[idx].hash & t->mask;

	while (t->slot[s] != idx + 1)
		s = (s + 1) & t->mask;
	return s;
}

int hotkeys_find(const struct hotkeys *t, const struct ll_key_id *key)
{
	uint64_t h;
	uint32_t s;

	if (!t->on || !t->n)
		return -1;
	h = key_hash(t->seed, key);
	for (s = (uint32_t)h & t->mask; t->slot[s]; s = (s + 1) & t->mask) {
		const struct hotkey *k = &t->k[t->slot[s] - 1];

		if (k->hash == h && !memcmp(&k->key, key, sizeof(*key)))
			return t->slot[s] - 1;
	}
	return -1;
}

/* Empty slot s, moving later entries of its cluster back (no tombstones). */
static void slot_clear(struct hotkeys *t, uint32_t s)
{
	uint32_t j = s;

	t->slot[s] = 0;
	for (;;) {
		uint32_t home;

		j = (j + 1) & t->mask;
		if (!t->slot[j])
			return;
		home = (uint32_t)t->k[t->slot[j] - 1].hash & t->mask;
		/* Entry j may move to s unless its home lies cyclically in (s, j]. */
		if (((j - home) & t->mask) >= ((j - s) & t->mask)) {
			t->slot[s] = t->slot[j];
			t->slot[j] = 0;
			s = j;
		}
	}
}

/* ---- the table ---------------------------------------------------------- */

int hotkeys_init(struct hotkeys *t, const char *name, size_t holders, uint32_t max, uint64_t seed)
{
	uint32_t slots = 2;

	memset(t, 0, sizeof(*t));
	if (max > HOTKEYS_MAX)
		max = HOTKEYS_MAX;
	while (slots < 2 * max)
		slots *= 2;
	t->slot = calloc(slots, sizeof(*t->slot));
	t->rep = calloc(holders ? holders : 1, sizeof(*t->rep));
	if (!t->slot || !t->rep) {
		hotkeys_free(t);
		return -ENOMEM;
	}
	snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
	t->on = true;
	t->holders = holders;
	t->max = max;
	t->cool_ns = HOTKEYS_COOL_NS;
	t->mask = slots - 1;
	t->seed = seed;
	return 0;
}

static void key_free(struct hotkey *k)
{
	ledger_free(&k->led);
	free(k->h);
	k->h = NULL;
}

void hotkeys_free(struct hotkeys *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		key_free(&t->k[i]);
	free(t->k);
	free(t->slot);
	free(t->rep);
	memset(t, 0, sizeof(*t));
}

int hotkeys_copy(struct hotkeys *dst, const struct hotkeys *src)
{
	*dst = *src;
	dst->k = NULL;
	dst->slot = NULL;
	dst->rep = NULL;
	dst->n = dst->alloc = 0;
	if (!src->on)
		return 0;
	dst->slot = malloc((src->mask + 1) * sizeof(*dst->slot));
	dst->rep = malloc((src->holders ? src->holders : 1) * sizeof(*dst->rep));
	dst->k = src->n ? calloc(src->n, sizeof(*dst->k)) : NULL;
	if (!dst->slot || !dst->rep || (src->n && !dst->k))
		goto fail;
	memcpy(dst->slot, src->slot, (src->mask + 1) * sizeof(*dst->slot));
	memcpy(dst->rep, src->rep, (src->holders ? src->holders : 1) * sizeof(*dst->rep));
	dst->alloc = src->n;
	for (uint32_t i = 0; i < src->n; i++) {
		struct hotkey *d = &dst->k[i];
		const struct hotkey *s = &src->k[i];

		*d = *s;
		d->h = malloc(src->holders * sizeof(*d->h));
		if (!d->h || ledger_copy(&d->led, &s->led)) {
			free(d->h);
			d->h = NULL;
			d->led.h = NULL;
			goto fail;
		}
		memcpy(d->h, s->h, src->holders * sizeof(*d->h));
		dst->n = i + 1;
	}
	return 0;
fail:
	hotkeys_free(dst);
	return -ENOMEM;
}

void hotkeys_set_capacity(struct hotkeys *t, uint64_t rate, uint64_t burst, uint64_t now)
{
	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];

		k->led.rate = rate;
		k->led.burst = burst;
		k->draining = ledger_over(&k->led, now);
		k->dirty = true;
	}
	t->dirty = true;
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

/* Key idx leaves the table; the last key takes its place in k[]. */
static void key_drop(struct hotkeys *t, uint32_t idx, uint64_t now)
{
	uint32_t last = t->n - 1;
	char ks[128];

	if (log_ok(t, now)) {
		hotkeys_key_str(&t->k[idx].key, ks, sizeof(ks));
		pr_info("limit '%s': key %s no longer hot after %.1f s (%u hot keys left)\n",
			t->name, ks, (double)(now - t->k[idx].since_ns) / 1e9, t->n - 1);
	}
	slot_clear(t, slot_of(t, idx));
	key_free(&t->k[idx]);
	if (idx != last) {
		uint32_t s = slot_of(t, last);

		t->k[idx] = t->k[last];
		t->slot[s] = (uint16_t)(idx + 1);
	}
	memset(&t->k[last], 0, sizeof(t->k[last]));
	t->n--;
	t->dropped++;
}

/* A new hot key: its ledger is the limit's, every holder's listing empty. */
static int key_add(struct hotkeys *t, const struct ledger *lim, const struct ll_key_id *key,
		   uint64_t now)
{
	struct hotkey *k;
	uint32_t s;

	if (t->n == t->alloc) {
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
	k = &t->k[t->n];
	memset(k, 0, sizeof(*k));
	k->key = *key;
	k->hash = key_hash(t->seed, key);
	k->h = calloc(t->holders ? t->holders : 1, sizeof(*k->h));
	if (!k->h || ledger_copy_n(&k->led, lim, t->holders)) {
		free(k->h);
		k->h = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < k->led.cap; i++) {
		k->led.h[i].active = false;
		k->led.h[i].demand = 0;
	}
	k->since_ns = k->listed_ns = now;
	k->dirty = true;
	/* Created during a drain of the limit: it drains with it. */
	k->draining = ledger_over(&k->led, now);
	for (s = (uint32_t)k->hash & t->mask; t->slot[s]; s = (s + 1) & t->mask)
		;
	t->slot[s] = (uint16_t)(t->n + 1);
	t->n++;
	t->made++;
	t->dirty = true;
	return (int)(t->n - 1);
}

/* ---- reports ------------------------------------------------------------ */

void hotkeys_report_begin(struct hotkeys *t, size_t hi)
{
	struct hotkeys_rep *r;

	if (!t->on || hi >= t->holders)
		return;
	r = &t->rep[hi];
	r->cur++;
	r->prev = r->listed;
	r->listed = 0;
	r->relisted = 0;
}

/* Holder hi's demand for key k becomes d. */
static void key_demand(struct hotkeys *t, struct hotkey *k, size_t hi, uint64_t d)
{
	struct ledger_holder *lh = &k->led.h[hi];

	if (lh->demand != d || lh->active != (d > 0)) {
		lh->demand = d;
		lh->active = d > 0;
		k->dirty = true;
		t->dirty = true;
	}
}

int hotkeys_report_key(struct hotkeys *t, const struct ledger *lim, size_t hi,
		       const struct ll_key_id *key, uint64_t demand, uint64_t share, uint64_t now)
{
	struct hotkeys_rep *r;
	struct hotkey *k;
	int idx, made = 0;

	if (!t->on || hi >= t->holders)
		return 0;
	r = &t->rep[hi];
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
	k = &t->k[idx];
	if (k->h[hi].stamp == r->cur) {
		/* Listed twice in one report: the larger demand holds. */
		if (demand > k->led.h[hi].demand)
			key_demand(t, k, hi, demand);
	} else {
		if (k->h[hi].stamp && k->h[hi].stamp == r->cur - 1)
			r->relisted++;
		k->h[hi].stamp = r->cur;
		r->listed++;
		key_demand(t, k, hi, demand);
	}
	/* Hot while someone wants more than its default share: a key everybody
	 * spends within the share cools (and is dropped) although listed.
	 */
	if (demand > share) {
		k->listed_ns = now;
		if (k->cooling) {
			k->cooling = false;
			k->dirty = true;
			t->dirty = true;
		}
	}
	return made;
}

void hotkeys_report_end(struct hotkeys *t, size_t hi)
{
	struct hotkeys_rep *r;

	if (!t->on || hi >= t->holders)
		return;
	r = &t->rep[hi];
	if (r->relisted >= r->prev)
		return; /* every key of the last report is listed again */
	/* Some key is not: this holder wants none of it now. */
	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];

		if (k->h[hi].stamp && k->h[hi].stamp == r->cur - 1)
			key_demand(t, k, hi, 0);
	}
}

void hotkeys_ack(struct hotkeys *t, size_t hi, uint64_t seq, uint64_t now)
{
	for (uint32_t i = 0; i < t->n; i++)
		ledger_ack(&t->k[i].led, hi, seq, now);
}

void hotkeys_holder_quiet(struct hotkeys *t, size_t hi)
{
	if (!t->on || hi >= t->holders)
		return;
	for (uint32_t i = 0; i < t->n; i++)
		key_demand(t, &t->k[i], hi, 0);
	/* Every stamp is now older than the report before the next one. */
	t->rep[hi].cur++;
	t->rep[hi].listed = 0;
}

bool hotkeys_holder_idle(const struct hotkeys *t, size_t hi, uint64_t now)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (!ledger_holder_idle(&t->k[i].led, hi, now))
			return false;
	return true;
}

void hotkeys_holder_reset(struct hotkeys *t, size_t hi)
{
	if (!t->on || hi >= t->holders)
		return;
	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];

		ledger_holder_reset(&k->led, hi);
		memset(&k->h[hi], 0, sizeof(k->h[hi]));
		k->dirty = true;
	}
	memset(&t->rep[hi], 0, sizeof(t->rep[hi]));
	t->dirty = true;
}

/* ---- targets and grants ------------------------------------------------- */

void hotkeys_targets(struct hotkeys *t, const struct ledger *lim)
{
	uint64_t *rate = NULL, *burst = NULL;
	size_t cap = 0;
	bool left = false;

	if (!t->dirty)
		return;
	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];

		if (!k->dirty || k->cooling)
			continue;
		if (k->led.cap > cap) {
			uint64_t *r = realloc(rate, k->led.cap * sizeof(*r));
			uint64_t *b = r ? realloc(burst, k->led.cap * sizeof(*b)) : NULL;

			if (r)
				rate = r;
			if (b)
				burst = b;
			if (!r || !b) {
				left = true;
				break;
			}
			cap = k->led.cap;
		}
		for (size_t h = 0; h < k->led.cap; h++)
			k->led.h[h].weight = h < lim->cap ? lim->h[h].weight : 0;
		if (ledger_targets(&k->led, rate, burst)) {
			left = true; /* out of memory: the old targets stay */
			continue;
		}
		for (size_t h = 0; h < t->holders && h < k->led.cap; h++) {
			k->h[h].t_rate = rate[h];
			k->h[h].t_burst = burst[h];
		}
		k->dirty = false;
	}
	free(rate);
	free(burst);
	t->dirty = left;
	/* Cooling keys stay dirty: their targets are recomputed when they heat up. */
	for (uint32_t i = 0; i < t->n && !t->dirty; i++)
		t->dirty = t->k[i].dirty && !t->k[i].cooling;
}

int hotkeys_grant(struct hotkeys *t, struct ledger *lim, size_t hi, uint64_t t_rate,
		  uint64_t t_burst, uint64_t now, uint64_t live_ns, struct ledger_grant *g,
		  struct wire_key_grant *keys, uint32_t *n_keys)
{
	int err = 0;

	*n_keys = 0;
	if (!ledger_issue(lim, hi, t_rate, t_burst, now, live_ns, g))
		return 0;
	if (!t->on || !t->n)
		return 1;
	hotkeys_targets(t, lim);
	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];
		struct ledger_grant a;
		uint64_t kr, kb;

		if (hi >= t->holders) {
			err = -EAGAIN;
			break;
		}
		/* Cooling: the share this very grant carries, so the key's new
		 * grants are covered by the limit's as they are issued.
		 */
		kr = k->cooling ? g->rate : k->h[hi].t_rate;
		kb = k->cooling ? g->burst : k->h[hi].t_burst;
		if (!ledger_issue_seq(&k->led, hi, g->seq, kr, kb, now, live_ns, &a)) {
			err = -EAGAIN;
			continue;
		}
		/* A hot key is named in every grant, even at the share: a holder
		 * knows it is hot and lists what it spends on it. Leaving it out
		 * would read as "wants none" and cut the holder to 0 (seven
		 * gateways spending 0.1 R each within their share flapped
		 * between cut and denied, and the key's utilization fell to
		 * 85%). A cooling key is named only where it differs.
		 */
		if (!k->cooling || a.rate != g->rate || a.burst != g->burst)
			keys[(*n_keys)++] = (struct wire_key_grant){
			    .key = k->key, .rate = a.rate, .burst = a.burst};
	}
	return err ? err : 1;
}

/* ---- cooling, the invariant, metrics ----------------------------------- */

static bool key_covered(const struct hotkey *k, const struct ledger *lim, uint64_t now)
{
	for (size_t h = 0; h < k->led.cap; h++)
		if (!ledger_holder_within(&k->led, h, lim, now))
			return false;
	return true;
}

void hotkeys_tick(struct hotkeys *t, const struct ledger *lim, uint64_t now)
{
	/* Downwards: a drop moves the last key into the hole. */
	for (uint32_t i = t->n; i-- > 0;) {
		struct hotkey *k = &t->k[i];

		if (!k->cooling && now - k->listed_ns > t->cool_ns) {
			k->cooling = true;
			pr_debug("limit '%s': a hot key is cooling (nobody listed it for %.1f s)\n",
				 t->name, (double)(now - k->listed_ns) / 1e9);
		}
		if (k->cooling && key_covered(k, lim, now))
			key_drop(t, i, now);
	}
}

uint64_t hotkeys_check(struct hotkeys *t, uint64_t now)
{
	uint64_t bad = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		struct hotkey *k = &t->k[i];
		char ks[128];

		if (!ledger_over(&k->led, now)) {
			k->draining = false;
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

	for (uint32_t i = 0; i < t->n; i++) {
		const struct hotkey *k = &t->k[i];

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
