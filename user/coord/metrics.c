// SPDX-License-Identifier: MIT
/*
 * The coordinator's exposition (see metrics.h): reads struct coord, never
 * changes it, so a scrape cannot alter a grant.
 */
#include "clock.h"
#include "metrics.h"
#include "state.h"

int coord_metrics_write(FILE *f, void *arg)
{
	struct coord *co = arg;
	uint64_t now = clock_now_ns();

	fprintf(f, "# TYPE leaseline_coord_live_rate gauge\n");
	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct climit *c = &co->lim[l];

		fprintf(f, "leaseline_coord_live_rate{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)ledger_sum_rate_fast(&c->led, now));
		fprintf(f, "leaseline_coord_live_burst{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)ledger_sum_burst_fast(&c->led, now));
		fprintf(f, "leaseline_coord_max_live_rate{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)c->max_sum_rate);
		fprintf(f, "leaseline_coord_contract_rate{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)c->rate);
		fprintf(f, "leaseline_coord_contract_burst{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)c->burst);
		fprintf(f, "leaseline_coord_reserve_rate{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)c->reserve_rate);
		fprintf(f, "leaseline_coord_draining{limit=\"%s\"} %d\n", c->name,
			c->drain_since_ns != 0);
		fprintf(f, "leaseline_coord_last_drain_seconds{limit=\"%s\"} %.3f\n", c->name,
			ns_to_s(c->last_drain_ns));
		fprintf(f, "leaseline_coord_recompute_seconds{limit=\"%s\"} %.6f\n", c->name,
			ns_to_s(c->recompute_ns));
		for (uint32_t hi = 0; hi < co->cfg.gateways; hi++) {
			if (!co->h[hi].used)
				continue;
			fprintf(
			    f, "leaseline_coord_lease_rate{limit=\"%s\",holder=\"%s\"} %llu\n",
			    c->name, co->h[hi].name,
			    (unsigned long long)ledger_committed_rate(&c->led, (size_t)hi, now));
			fprintf(f, "leaseline_coord_demand{limit=\"%s\",holder=\"%s\"} %llu\n",
				c->name, co->h[hi].name, (unsigned long long)c->led.h[hi].demand);
			fprintf(f,
				"leaseline_coord_fallback_total{limit=\"%s\",holder=\"%s\"} %llu\n",
				c->name, co->h[hi].name, (unsigned long long)co->h[hi].fallback[l]);
			fprintf(f,
				"leaseline_coord_bypass_total{limit=\"%s\",holder=\"%s\"} %llu\n",
				c->name, co->h[hi].name, (unsigned long long)co->h[hi].bypass[l]);
		}
	}
	fprintf(f, "leaseline_coord_epoch %llu\n", (unsigned long long)co->store.epoch);
	fprintf(f, "leaseline_policy_version %llu\n", (unsigned long long)co->pol->version);
	fprintf(f, "leaseline_coord_quiet_seconds %.3f\n",
		co->quiet_until > now ? ns_to_s(co->quiet_until - now) : 0.0);
	fprintf(f, "leaseline_coord_grants_total %llu\n", (unsigned long long)co->grants);
	fprintf(f, "leaseline_coord_stale_reports_total %llu\n",
		(unsigned long long)co->stale_reports);
	fprintf(f, "leaseline_coord_protocol_errors_total %llu\n",
		(unsigned long long)co->protocol_errors);
	fprintf(f, "leaseline_coord_invariant_violations_total %llu\n",
		(unsigned long long)co->violations);
	fprintf(f, "leaseline_coord_hello_timeouts_total %llu\n",
		(unsigned long long)co->hello_timeouts);
	fprintf(f, "leaseline_coord_crowded_refused_total %llu\n",
		(unsigned long long)co->crowded_refused);
	fprintf(f, "leaseline_coord_store_failures_total %llu\n",
		(unsigned long long)co->store_failures);
	return 0;
}
