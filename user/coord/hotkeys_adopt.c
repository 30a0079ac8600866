// SPDX-License-Identifier: MIT
/*
 * Per-key adoption (hotkeys.h, docs/protocol.md "Adoption"): in the quiet
 * period of a term, the entry a holder proved it holds of a key from an
 * earlier epoch (its tag checked by grants.c adopt_key) is what that
 * holder's cuts name (hotkeys_grant.c record_adopted), once per holder and
 * key in a term; a new connection or a new term forgets it.
 */
#include <stdint.h>

#include "coord/hotkeys.h"

/* Forget what holder hi (every holder: hi == SIZE_MAX) had adopted. */
static void adopt_forget(struct hotkeys *t, size_t hi)
{
	for (uint32_t i = 0; i < t->top; i++) {
		if (!t->k[i].live)
			continue;
		for (size_t h = 0; h < t->holders; h++)
			if (hi == SIZE_MAX || h == hi)
				t->k[i].h[h].flags &=
				    (uint8_t)~(HK_ADOPTED | HK_ADOPT_TRIED | HK_EXACT);
	}
}

void hotkeys_holder_connect(struct hotkeys *t, size_t hi)
{
	if (!t->on || hi >= t->holders)
		return;
	t->hl[hi].full = true;
	t->hl[hi].full_seq = 0;
	adopt_forget(t, hi); /* what it holds is not known: proven again, or not at all */
}

int hotkeys_adopt(struct hotkeys *t, size_t hi, const struct ll_key_id *key, uint64_t rate,
		  uint64_t burst)
{
	struct hotkey_holder *kh;
	struct hotkey *k;
	int idx;

	if (!t->on || hi >= t->holders || (idx = hotkeys_find(t, key)) < 0)
		return 0;
	k = &t->k[idx];
	kh = &k->h[hi];
	if (kh->flags & HK_ADOPT_TRIED)
		return 0;
	kh->flags |= HK_ADOPT_TRIED;
	if (rate > k->led.rate || burst > k->led.burst) {
		t->adopt_clamped++;
		rate = rate < k->led.rate ? rate : k->led.rate;
		burst = burst < k->led.burst ? burst : k->led.burst;
	}
	kh->s_rate = rate;
	kh->s_burst = burst;
	kh->flags |= HK_ADOPTED | HK_EXACT;
	t->adopted++;
	return 1;
}

void hotkeys_term_begin(struct hotkeys *t)
{
	if (t->on)
		adopt_forget(t, SIZE_MAX);
}
