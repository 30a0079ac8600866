// SPDX-License-Identifier: MIT
/*
 * The coordinator's telemetry (see telemetry.h). Pure arithmetic over the
 * reports and the ledgers but for telemetry_report, which finds the slot.
 */
#include <string.h>

#include "lib/monotonic.h"
#include "coord/ledger.h"
#include "coord/state.h"
#include "coord/telemetry.h"

const char *telemetry_fail_name(enum coord_fail r)
{
	static const char *const names[COORD_FAIL_MAX] = {
	    [COORD_FAIL_HOLDER_REFUSED] = "holder_refused",
	    [COORD_FAIL_RING_FULL] = "ring_full",
	    [COORD_FAIL_KEY_LEDGER_FULL] = "key_ledger_full",
	    [COORD_FAIL_STORE] = "store_failure",
	    [COORD_FAIL_LINK_DROP] = "link_drop",
	};

	return r < COORD_FAIL_MAX ? names[r] : "unknown";
}

const char *tele_cohort_name(enum tele_cohort c)
{
	return c == TELE_LIGHT ? "light" : c == TELE_HEAVY ? "heavy" : "unknown";
}

/* FNV-1a; never 0, so a zeroed slot matches no limit. */
uint32_t tele_key(const char *name)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h ? h : 1;
}

double tele_interval(struct tele_slot *s, uint32_t key, uint64_t admitted, uint64_t now,
		     uint64_t max_gap_ns, uint64_t committed_rate)
{
	bool measured = s->key == key && s->ns && now > s->ns && now - s->ns <= max_gap_ns &&
			admitted >= s->admitted;
	double waste = 0, dt, spent, granted;

	s->rate = -1;
	if (measured) {
		dt = ns_to_s(now - s->ns);
		spent = (double)(admitted - s->admitted);
		granted = (double)committed_rate * dt;
		s->rate = spent / dt;
		waste = granted > spent ? granted - spent : 0;
	}
	s->key = key;
	s->admitted = admitted;
	s->ns = now;
	return waste;
}

double tele_outstanding(const struct ledger *l, uint64_t now, uint32_t *spenders)
{
	double sum = 0;
	uint32_t n = 0;

	for (size_t i = 0; i < l->cap; i++) {
		const struct ledger_holder *h = &l->h[i];
		uint64_t last = 0, r, b;

		for (uint32_t k = 0; k < h->n && k < LEDGER_MAX_PENDING; k++)
			if (h->g[k].deadline_ns >= now && h->g[k].deadline_ns > last)
				last = h->g[k].deadline_ns;
		if (!last)
			continue;
		r = ledger_committed_rate(l, i, now);
		b = ledger_committed_burst(l, i, now);
		if (!r && !b)
			continue;
		n++;
		sum += (double)b + (double)r * ns_to_s(last - now);
	}
	*spenders = n;
	return sum;
}

void tele_fair_add(struct tele_fair *f, uint64_t demand, uint64_t target, double rate)
{
	enum tele_cohort c = demand > target ? TELE_HEAVY : TELE_LIGHT;

	if (rate < 0)
		return; /* no interval measured yet */
	f->admitted[c] += rate;
	/* A light holder's fair share is what it offers: the agent reports
	 * offered load + 1 token/s (so an idle holder keeps a share).
	 */
	f->fair[c] += (double)(c == TELE_HEAVY ? target : demand ? demand - 1 : 0);
	f->holders[c]++;
}

void telemetry_report(struct coord *co, int hi, struct climit *c, uint32_t l,
		      const struct wire_report_entry *e, uint64_t now)
{
	struct cholder *h = &co->h[hi];
	double waste;

	if (h->tele_incarnation != h->incarnation) {
		for (uint32_t i = 0; i < co->hl_cap; i++) /* totals start again at 0 */
			memset(&holder_lim(co, hi, i)->tele, 0, sizeof(struct tele_slot));
		h->tele_incarnation = h->incarnation;
	}
	waste = tele_interval(&holder_lim(co, hi, l)->tele, tele_key(c->name), e->admitted, now,
			      TELE_MAX_GAP_REFRESH * co->cfg.refresh_ns,
			      ledger_committed_rate(&c->led, (size_t)hi, now));
	/* A per-key limit's share is every key's: admissions of all keys
	 * together say nothing about one share's use.
	 */
	if (!c->hot.on)
		c->waste += waste;
}
