// SPDX-License-Identifier: MIT
/*
 * The coordinator's exposition (see metrics.h): reads struct coord (under
 * the state lock, from the metrics thread), never changes what a grant
 * depends on. Families are tables, written family by family, so every one
 * has HELP and TYPE and its samples together.
 */
#include "clock.h"
#include "metrics.h"
#include "prom.h"
#include "state.h"

struct coord_family {
	const char *name, *type, *help;
	double (*value)(struct coord *co, struct climit *c, uint32_t l, uint32_t hi, uint64_t now);
};

#define V(fn, expr)                                                                                \
	static double fn(struct coord *co, struct climit *c, uint32_t l, uint32_t hi,              \
			 uint64_t now)                                                             \
	{                                                                                          \
		(void)co, (void)c, (void)l, (void)hi, (void)now;                                   \
		return (double)(expr);                                                             \
	}

V(live_rate, ledger_sum_rate_fast(&c->led, now))
V(live_burst, ledger_sum_burst_fast(&c->led, now))
V(max_live_rate, c->max_sum_rate)
V(contract_rate, c->rate)
V(contract_burst, c->burst)
V(reserve_rate, c->reserve_rate)
V(draining, c->drain_since_ns != 0)
V(last_drain, ns_to_s(c->last_drain_ns))
V(recompute, ns_to_s(c->recompute_ns))
V(hot_keys, c->hot.n)
V(hot_refused, c->hot.refused)
V(key_grants, c->hot.key_grants)
V(stranded, hotkeys_stranded(&c->hot, now))
V(lease_rate, ledger_committed_rate(&c->led, hi, now))
V(demand, c->led.h[hi].demand)
V(fallback, co->h[hi].fallback[l])
V(bypass, co->h[hi].bypass[l])
V(epoch, co->store.epoch)
V(version, co->pol->version)
V(quiet, co->quiet_until > now ? ns_to_s(co->quiet_until - now) : 0.0)
V(grants, co->grants)
V(stale_reports, co->stale_reports)
V(protocol_errors, co->protocol_errors)
V(violations, co->violations)
V(hello_timeouts, co->hello_timeouts)
V(crowded, co->crowded_refused)
V(evicted, co->pending_evicted)
V(full, co->full_refused)
V(store_failures, co->store_failures)
V(reclaimed, co->holders_reclaimed)
V(tls_failures, co->tls_failures)
V(tls_refused, co->tls_refused)

/* One sample per global limit. */
static const struct coord_family per_limit[] = {
    {"leaseline_coord_live_rate", "gauge",
     "Sum of the live rate shares of a limit (tokens/s): at most the contract less the reserve.",
     live_rate},
    {"leaseline_coord_live_burst", "gauge", "Sum of the live burst shares of a limit (tokens).",
     live_burst},
    {"leaseline_coord_max_live_rate", "gauge", "Highest sum of live rate shares seen (tokens/s).",
     max_live_rate},
    {"leaseline_coord_contract_rate", "gauge", "The limit's contract R (tokens/s).", contract_rate},
    {"leaseline_coord_contract_burst", "gauge", "The limit's contract B (tokens).", contract_burst},
    {"leaseline_coord_reserve_rate", "gauge",
     "Fallback shares of all gateways, reserved out of the contract (tokens/s).", reserve_rate},
    {"leaseline_coord_draining", "gauge",
     "1 while a lowered contract waits for live shares to fit it.", draining},
    {"leaseline_coord_last_drain_seconds", "gauge",
     "How long the last drain to a lowered contract took.", last_drain},
    {"leaseline_coord_recompute_seconds", "gauge", "Duration of the last max-min recomputation.",
     recompute},
    {"leaseline_coord_hot_keys", "gauge",
     "Keys of a per-key limit with a ledger of their own (per-key grants).", hot_keys},
    {"leaseline_coord_hot_keys_refused_total", "counter",
     "Hot-key listings refused because the limit's table of hot keys was full (each report "
     "listing such a key counts; the key stays at the share).",
     hot_refused},
    {"leaseline_coord_key_grants_total", "counter",
     "Per-key grants sent (entries of grant key lists).", key_grants},
    {"leaseline_coord_stranded_rate", "gauge",
     "Per-key rate committed to holders beyond their reported demand for the key, summed over "
     "hot keys and holders (tokens/s).",
     stranded},
};

/* One sample per (global limit, holder). */
static const struct coord_family per_holder[] = {
    {"leaseline_coord_lease_rate", "gauge", "A holder's committed rate share (tokens/s).",
     lease_rate},
    {"leaseline_coord_demand", "gauge", "A holder's reported demand (tokens/s).", demand},
    {"leaseline_coord_fallback_total", "counter",
     "Packets a holder reported admitted from its fallback share (durable totals).", fallback},
    {"leaseline_coord_bypass_total", "counter",
     "Packets a holder reported admitted fail-open (durable totals).", bypass},
};

/* One sample each. */
static const struct coord_family scalars[] = {
    {"leaseline_coord_epoch", "gauge", "The coordinator's durable epoch.", epoch},
    {"leaseline_policy_version", "gauge", "Version of the policy served.", version},
    {"leaseline_coord_quiet_seconds", "gauge",
     "Time left in the quiet period after a restart (no grants).", quiet},
    {"leaseline_coord_grants_total", "counter", "Grants sent.", grants},
    {"leaseline_coord_stale_reports_total", "counter", "Reports retransmitted or reordered.",
     stale_reports},
    {"leaseline_coord_protocol_errors_total", "counter",
     "Connections dropped for a protocol error.", protocol_errors},
    {"leaseline_coord_invariant_violations_total", "counter",
     "Moments the live shares exceeded a contract outside a drain; must stay 0.", violations},
    {"leaseline_coord_hello_timeouts_total", "counter",
     "Connections dropped without a HELLO in time.", hello_timeouts},
    {"leaseline_coord_crowded_refused_total", "counter",
     "Connections refused: too many without a HELLO from one address.", crowded},
    {"leaseline_coord_pending_evicted_total", "counter",
     "Connections without a HELLO closed to make room for a new one, the connection table "
     "being full: silent ones first, then ones past 0.5 s.",
     evicted},
    {"leaseline_coord_full_refused_total", "counter",
     "Connections refused on accept: the connection table full, and none without a HELLO "
     "could give way.",
     full},
    {"leaseline_coord_store_failures_total", "counter",
     "Usage records that could not be written (no grant answered them).", store_failures},
    {"leaseline_coord_holders_reclaimed_total", "counter",
     "Holder slots given to a new holder after their holder left with no live grant.", reclaimed},
    {"leaseline_coord_tls_failures_total", "counter",
     "TLS handshakes that failed: no certificate, or one the CA did not sign.", tls_failures},
    {"leaseline_coord_tls_refused_total", "counter",
     "HELLOs refused: the certificate does not name the holder.", tls_refused},
};

int coord_metrics_write(FILE *f, void *arg)
{
	struct coord *co = arg;
	uint64_t now = clock_now_ns();

	for (size_t i = 0; i < ARRAY_SIZE(per_limit); i++) {
		prom_family(f, per_limit[i].name, per_limit[i].type, per_limit[i].help);
		for (uint32_t l = 0; l < co->n_limits; l++) {
			fprintf(f, "%s{limit=\"%s\"}", per_limit[i].name, co->lim[l].name);
			prom_value(f, per_limit[i].value(co, &co->lim[l], l, 0, now));
		}
	}
	for (size_t i = 0; i < ARRAY_SIZE(per_holder); i++) {
		prom_family(f, per_holder[i].name, per_holder[i].type, per_holder[i].help);
		for (uint32_t l = 0; l < co->n_limits; l++)
			for (uint32_t hi = 0; hi < co->cfg.gateways; hi++)
				if (co->h[hi].used) {
					fprintf(f, "%s{limit=\"%s\",holder=\"%s\"}",
						per_holder[i].name, co->lim[l].name,
						co->h[hi].name);
					prom_value(
					    f, per_holder[i].value(co, &co->lim[l], l, hi, now));
				}
	}
	for (size_t i = 0; i < ARRAY_SIZE(scalars); i++) {
		prom_family(f, scalars[i].name, scalars[i].type, scalars[i].help);
		fputs(scalars[i].name, f);
		prom_value(f, scalars[i].value(co, NULL, 0, 0, now));
	}
	prom_build_info(f);
	return 0;
}
