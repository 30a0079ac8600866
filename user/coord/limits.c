// SPDX-License-Identifier: MIT
/*
 * The policy's global limits on the coordinator: each one's contract, less
 * the fallback reserve of every gateway, as a ledger (ledger.h) with its
 * hot keys (hotkeys.h); loading a policy (at start and on SIGHUP) keeps the
 * ledger and live grants of every limit that stays. Also what follows a
 * limit's demand: the max-min targets, which holders take part in them,
 * and the check of the invariant sum of live shares <= contract.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "coord/coord_int.h"
#include "lib/fs.h"
#include "coord/hotkeys.h"
#include "lib/overrides.h"
#include "tb_math.h"
#include "coord/ledger.h"
#include "lib/log.h"
#include "coord/state.h"
#include "lib/wire.h"

#define COORD_RECOMPUTE_NS 50000000ull /* targets follow demand within 50 ms */

/* A report names up to 256 limits: each found in log2(n) comparisons, not
 * a walk of all of them (a walk would make a report's lookups quadratic).
 */
struct climit *limit_by_name(struct coord *co, const char *name)
{
	uint32_t lo = 0, hi = co->n_limits;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(co->lim[co->by_name[mid]].name, name);

		if (!c)
			return &co->lim[co->by_name[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* co->by_name for the n_limits of co->lim (insertion sort: at most 256). */
static void limits_index(struct coord *co)
{
	for (uint32_t i = 0; i < co->n_limits; i++) {
		uint32_t j = i;

		while (j > 0 && strcmp(co->lim[co->by_name[j - 1]].name, co->lim[i].name) > 0) {
			co->by_name[j] = co->by_name[j - 1];
			j--;
		}
		co->by_name[j] = (uint16_t)i;
	}
}

static void climit_free(struct climit *c)
{
	ledger_free(&c->led);
	hotkeys_free(&c->hot);
	free(c->t_rate);
	free(c->t_burst);
	c->t_rate = c->t_burst = NULL;
}

void limits_free(struct climit *lim, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		climit_free(&lim[i]);
}

/* A limit's state for the new policy: a deep copy of the running one (its
 * live grants go on counting, per-key grants included) or a fresh ledger,
 * room for every gateway.
 */
static int climit_init(struct climit *c, const struct climit *old, uint32_t gateways)
{
	int err;

	memset(c, 0, sizeof(*c));
	if (old) {
		*c = *old;
		memset(&c->hot, 0, sizeof(c->hot));
		err = ledger_copy(&c->led, &old->led);
		if (!err)
			err = hotkeys_copy(&c->hot, &old->hot);
	} else {
		err = ledger_init(&c->led, 0, 0);
	}
	c->t_rate = c->t_burst = NULL;
	if (!err)
		err = ledger_reserve(&c->led, gateways);
	if (!err) {
		c->t_rate = calloc(c->led.cap, sizeof(*c->t_rate));
		c->t_burst = calloc(c->led.cap, sizeof(*c->t_burst));
		if (!c->t_rate || !c->t_burst)
			err = -ENOMEM;
	}
	c->dirty = true;
	c->next_recompute_ns = 0;
	return err;
}

static uint64_t hash_seed(void)
{
	uint64_t seed;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = clock_now_ns() * 0x9e3779b97f4a7c15ull;
	return seed;
}

/* An override of a global limit is a key hot for good with a contract of
 * its own (less the reserve): every gateway holds its share of it.
 */
static int limit_pins(struct climit *c, const struct cfg_limit *l)
{
	uint64_t now = clock_now_ns();
	struct ovr_entry *e = NULL;
	struct cfg_err err = {0};
	size_t n = 0;
	int rc = 0;

	hotkeys_pins_begin(&c->hot);
	if (l->overrides[0]) {
		rc = ovr_load(l->overrides, l->prefix_v4, l->prefix_v6, TB_MAX_RATE, TB_MAX_BURST,
			      &e, &n, &err);
		if (rc)
			pr_warn("limit '%s': %s\n", c->name, err.msg);
	}
	for (size_t i = 0; !rc && i < n; i++) {
		struct ll_key_id k = {.family = e[i].family};
		uint64_t r = e[i].kind == OVR_RATE   ? e[i].rate
			     : e[i].kind == OVR_DENY ? 0
						     : TB_MAX_RATE;
		uint64_t b = e[i].kind == OVR_RATE   ? e[i].burst
			     : e[i].kind == OVR_DENY ? 0
						     : TB_MAX_BURST;
		int p;

		if (e[i].family == 4) {
			k.addr[2] = htonl(0xffff);
			memcpy(&k.addr[3], e[i].addr, 4);
		} else {
			memcpy(k.addr, e[i].addr, 16);
		}
		r = r > c->reserve_rate ? r - c->reserve_rate : 0;
		b = b > c->reserve_burst ? b - c->reserve_burst : 0;
		p = hotkeys_pin(&c->hot, &c->led, &k, r, b, now);
		if (p < 0) {
			pr_warn("limit '%s': override on line %u not leased by its own contract: "
				"%s (at most %u hot keys a limit)\n",
				c->name, e[i].line, strerror(-p), c->hot.max);
			rc = p == -ENOSPC ? 0 : p;
			if (!rc)
				break;
		}
	}
	hotkeys_pins_end(&c->hot, c->led.rate, c->led.burst, now);
	free(e);
	return rc;
}

/* A limit with a key has a table of hot keys, kept across reloads with the
 * capacity of the new contract: dropping it while per-key grants are live
 * would let the sum over gateways exceed the contract for those keys. A
 * limit without a key has none.
 */
static int limit_hotkeys(struct coord *co, struct climit *c, const struct cfg_limit *l)
{
	int err;

	if (l->key_mode == LL_KEY_NONE) {
		if (c->hot.n)
			pr_info("limit '%s' has no key now: its %u hot keys are forgotten\n",
				c->name, c->hot.n);
		hotkeys_free(&c->hot);
		return 0;
	}
	if (!c->hot.on) {
		err = hotkeys_init(&c->hot, c->name, co->cfg.gateways, HOTKEYS_MAX, hash_seed());
		if (err)
			return err;
	}
	snprintf(c->hot.name, sizeof(c->hot.name), "%s", c->name);
	hotkeys_set_capacity(&c->hot, c->led.rate, c->led.burst, clock_now_ns());
	return limit_pins(c, l);
}

/* Global limits of pol as ledgers, keeping the ledger (live grants) of a
 * limit that stays. Fallback shares of every gateway come off the top.
 */
static int limits_build(struct coord *co, const struct cfg_policy *pol, struct climit *out,
			uint32_t *n_out)
{
	char msg[CFG_ERR_LEN];
	uint32_t n = 0;
	int err = 0;

	for (uint32_t i = 0; i < pol->n_limits && !err; i++) {
		const struct cfg_limit *l = &pol->limits[i];
		struct climit *c = &out[n];
		uint64_t fr = 0, fb = 0;

		if (l->scope != LL_SCOPE_GLOBAL)
			continue;
		err = climit_init(c, limit_by_name(co, l->name), co->cfg.gateways);
		n++;
		if (err)
			break;
		snprintf(c->name, sizeof(c->name), "%s", l->name);
		if (l->on_loss == LL_ON_LOSS_FALLBACK) {
			fr = l->fallback_rate * co->cfg.gateways;
			fb = l->fallback_burst * co->cfg.gateways;
		}
		err = cfg_reserve_check(l, co->cfg.gateways, msg, sizeof(msg));
		if (!err && co->cfg.has_replicas)
			err = cfg_replicas_check(&co->cfg, l, msg, sizeof(msg));
		if (err) {
			pr_warn("%s:%d:%d: %s\n", co->cfg.policy_path, l->line, l->col, msg);
			break;
		}
		c->rate = l->rate;
		c->burst = l->burst;
		c->reserve_rate = fr;
		c->reserve_burst = fb;
		c->on_loss = l->on_loss;
		c->fb_rate = l->fallback_rate;
		c->fb_burst = l->fallback_burst;
		c->meter = l->meter;
		c->led.rate = l->rate - fr;
		c->led.burst = l->burst - fb;
		err = limit_hotkeys(co, c, l);
	}
	if (err) {
		limits_free(out, n);
		n = 0;
	}
	*n_out = n;
	return err;
}

/* Room in co->hl for n limits per holder: a larger table, rows copied, when
 * a policy has more global limits than any before. 0 or -ENOMEM (the
 * policy is then refused and the running one stays).
 */
static int holders_grow(struct coord *co, uint32_t n)
{
	struct cholder_limit *t;

	if (n <= co->hl_cap)
		return 0;
	t = calloc((size_t)co->cfg.gateways * n, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t hi = 0; co->hl && hi < co->cfg.gateways; hi++)
		memcpy(&t[hi * n], &co->hl[hi * co->hl_cap], co->hl_cap * sizeof(*t));
	free(co->hl);
	co->hl = t;
	co->hl_cap = n;
	return 0;
}

int policy_load(struct coord *co, bool initial)
{
	struct cfg_policy *pol = calloc(1, sizeof(*pol));
	struct climit *lim = calloc(LL_MAX_LIMITS, sizeof(*lim));
	struct cfg_err e;
	char *yaml = NULL;
	size_t len = 0;
	uint32_t n = 0;
	int err = pol && lim ? 0 : -ENOMEM;

	/* Parse the very bytes that will be pushed to the agents. */
	if (!err && (err = fs_read_file(co->cfg.policy_path, WIRE_MAX_POLICY, &yaml, &len))) {
		char msg[CFG_ERR_LEN];
		struct stat st;

		if (err == -EFBIG && stat(co->cfg.policy_path, &st) == 0) {
			cfg_policy_too_big(co->cfg.policy_path, (uint64_t)st.st_size, msg,
					   sizeof(msg));
			pr_warn("%s\n", msg);
		} else {
			pr_warn("cannot read '%s': %s\n", co->cfg.policy_path, strerror(-err));
		}
	}
	if (!err && (err = cfg_policy_parse(co->cfg.policy_path, yaml, len, false, pol, &e)))
		pr_warn("%s\n", e.msg);
	if (!err && co->pol && pol->version <= co->pol->version && !initial) {
		pr_warn("policy version %llu refused: not newer than the running version %llu\n",
			(unsigned long long)pol->version, (unsigned long long)co->pol->version);
		err = -ESTALE;
	}
	if (!err)
		err = limits_build(co, pol, lim, &n);
	if (!err && (err = holders_grow(co, n))) {
		pr_warn("no memory for %u global limits of %u gateways\n", n, co->cfg.gateways);
		limits_free(lim, n);
	}
	if (!err) {
		free(co->pol);
		free(co->yaml);
		co->pol = pol;
		co->yaml = yaml;
		co->yaml_len = len;
		limits_free(co->lim, co->n_limits);
		memcpy(co->lim, lim, sizeof(co->lim));
		co->n_limits = n;
		limits_index(co);
		for (uint32_t i = 0; i < n; i++)
			if (ledger_over(&co->lim[i].led, clock_now_ns()))
				co->lim[i].drain_since_ns = clock_now_ns();
		/* A limit new in this policy starts with every holder inactive:
		 * the holders asking now ask for it too, or it would grant them
		 * nothing until they reconnect.
		 */
		for (int hi = 0; co->h && hi < (int)co->cfg.gateways; hi++)
			if (co->h[hi].used && co->h[hi].asking)
				holder_asking(co, hi, true);
		pol = NULL;
		yaml = NULL;
		pr_info("policy version %llu loaded (%u global limits)\n",
			(unsigned long long)co->pol->version, n);
	}
	free(pol);
	free(yaml);
	free(lim);
	return err;
}

/* Max-min targets from the latest demands: O(holders log holders), so done
 * at most every COORD_RECOMPUTE_NS per limit rather than per report.
 */
void targets_recompute(struct climit *c, uint64_t now)
{
	uint64_t t0 = clock_now_ns();

	if (ledger_targets(&c->led, c->t_rate, c->t_burst))
		return; /* out of memory: keep the old targets */
	c->dirty = false;
	c->recompute_ns = clock_now_ns() - t0;
	c->next_recompute_ns = now + COORD_RECOMPUTE_NS;
}

/* Whether holder hi takes part in the max-min division. A gateway that is
 * connected but silent (a cut path TCP has not noticed, a stopped agent)
 * must not keep a share reserved that nobody spends.
 */
void holder_asking(struct coord *co, int hi, bool asking)
{
	co->h[hi].asking = asking;
	for (uint32_t l = 0; l < co->n_limits; l++) {
		co->lim[l].led.h[hi].active = asking;
		if (!asking) {
			co->lim[l].led.h[hi].demand = 0;
			hotkeys_holder_quiet(&co->lim[l].hot, (size_t)hi, clock_now_ns());
		}
		co->lim[l].dirty = true;
	}
}

void check_invariant(struct coord *co, struct climit *c, uint64_t now)
{
	uint64_t sr = ledger_sum_rate_fast(&c->led, now), sb = ledger_sum_burst_fast(&c->led, now);

	if (sr > c->max_sum_rate)
		c->max_sum_rate = sr;
	if (sb > c->max_sum_burst)
		c->max_sum_burst = sb;
	if (ledger_over(&c->led, now) && c->drain_since_ns)
		return; /* a lowered contract: decreases are on their way, no increase goes out */
	if (c->drain_since_ns) {
		c->last_drain_ns = now - c->drain_since_ns;
		c->drain_since_ns = 0;
		pr_info("limit '%s': live shares within the new contract after %.3f s\n", c->name,
			ns_to_s(c->last_drain_ns));
	}
	if (ledger_over(&c->led, now)) {
		co->violations++;
		pr_warn("limit '%s': INVARIANT VIOLATED: live shares %llu/s, %llu exceed %llu/s, "
			"%llu\n",
			c->name, (unsigned long long)sr, (unsigned long long)sb,
			(unsigned long long)c->led.rate, (unsigned long long)c->led.burst);
	}
}
