// SPDX-License-Identifier: MIT
/*
 * The coordinator's exposition (see metrics.h): reads struct coord (under
 * the state lock, from the metrics thread), never changes what a grant
 * depends on. Families are tables, written family by family, so every one
 * has HELP and TYPE and its samples together.
 */
#include "lib/monotonic.h"
#include "coord/coord_metrics.h"
#include "coord/handshakes.h"
#include "lib/prom.h"
#include "coord/state.h"
#include "coord/telemetry.h"
#include "lib/util.h"

struct coord_family {
	const char *name, *type, *help;
	double (*value)(struct coord *co, struct climit *c, uint32_t l, uint32_t hi, uint64_t now);
};

static double holders_in(struct coord *co, bool asking);

/* What the door (the handshake thread) has counted; zeros before it starts. */
static struct hs_counts door(const struct coord *co)
{
	struct hs_counts n = {0};

	if (co->hs)
		handshakes_counts(co->hs, &n);
	return n;
}

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
V(key_sets, c->hot.full_sets)
V(key_adopted, c->hot.adopted)
V(key_adopt_refused, c->hot.adopt_refused)
V(key_adopt_clamped, c->hot.adopt_clamped)
V(stranded, hotkeys_stranded(&c->hot, now))
V(lease_rate, ledger_committed_rate(&c->led, hi, now))
V(demand, c->led.h[hi].demand)
V(fallback, holder_lim(co, (int)hi, l)->fallback)
V(bypass, holder_lim(co, (int)hi, l)->bypass)
V(epoch, co->epoch)
V(version, co->pol->version)
V(quiet, co->quiet_until > now ? ns_to_s(co->quiet_until - now) : 0.0)
V(grants, co->grants)
V(stale_reports, co->stale_reports)
V(protocol_errors, co->protocol_errors)
V(violations, co->violations)
V(hello_timeouts, co->hello_timeouts + door(co).timeouts)
V(crowded, co->crowded_refused + door(co).crowded)
V(prefix, co->prefix_refused + door(co).prefix)
V(evicted, co->pending_evicted + door(co).evicted)
V(full, co->full_refused + door(co).full)
V(store_failures, co->store_failures)
V(reclaimed, co->holders_reclaimed)
V(tls_failures, door(co).tls_failures)
V(tls_refused, co->tls_refused)
V(leader, coord_leads(co) ? 1 : 0)
V(etcd_up, co->el ? co->ev.etcd_ok : 1)
V(deadline_margin,
  co->el &&coord_leads(co) && co->ev.deadline_ns > now ? ns_to_s(co->ev.deadline_ns - now) : 0.0)
V(terms, co->terms)
V(redirects, co->redirects_sent)
V(deadline_refusals, co->deadline_refusals)
V(etcd_errors, co->ev.etcd_errors)
V(etcd_bad_answers, co->ev.bad_answers)
V(step_downs, co->ev.step_downs)
V(adopted, co->adopted)
V(adopt_refused, co->adopt_refused)
V(adopt_clamped, co->adopt_clamped)
V(epoch_claims_ignored, co->epoch_claims_ignored)
V(old_version_hellos, co->old_version_hellos)
V(waste, c->waste)
V(holders_connected, holders_in(co, false))
V(holders_asking, holders_in(co, true))

static double outstanding(struct coord *co, struct climit *c, uint32_t l, uint32_t hi, uint64_t now)
{
	uint32_t n;

	(void)co, (void)l, (void)hi;
	return tele_outstanding(&c->led, now, &n);
}

static double spenders(struct coord *co, struct climit *c, uint32_t l, uint32_t hi, uint64_t now)
{
	uint32_t n;

	(void)co, (void)l, (void)hi;
	tele_outstanding(&c->led, now, &n);
	return n;
}

/* Waste and fairness are about one share spent by the whole limit: an
 * aggregate (key: none) limit's.
 */
static bool aggregate(const struct climit *c)
{
	return !c->hot.on;
}

static double holders_in(struct coord *co, bool asking)
{
	uint32_t n = 0;

	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++)
		n += co->h[hi].used && (asking ? co->h[hi].asking : co->h[hi].conn >= 0);
	return n;
}

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
    {"leaseline_coord_key_sets_total", "counter",
     "Grants that carried a holder's whole set of per-key grants (a new connection, a dead "
     "lease) rather than changes.",
     key_sets},
    {"leaseline_coord_key_adopted_total", "counter",
     "Per-key entries a holder proved it holds from an earlier epoch, kept through a quiet "
     "period.",
     key_adopted},
    {"leaseline_coord_key_adopt_refused_total", "counter",
     "Per-key entries re-presented with a tag that does not prove them: not adopted.",
     key_adopt_refused},
    {"leaseline_coord_key_adopt_clamped_total", "counter",
     "Adopted per-key entries cut to fit the key's contract.",
     key_adopt_clamped},
    {"leaseline_coord_stranded_rate", "gauge",
     "Per-key rate committed to holders beyond their reported demand for the key, summed over "
     "hot keys and holders (tokens/s).",
     stranded},
    {"leaseline_coord_overshoot_bound", "gauge",
     "Tokens the holders of live grants could still admit without another grant: the sum "
     "over them of burst share + rate share x time to their last live grant's deadline "
     "(spenders x remaining budget; per key for a per-key limit).",
     outstanding},
    {"leaseline_coord_spenders", "gauge",
     "Holders with a live grant of a share other than 0: who can spend without the "
     "coordinator.",
     spenders},
};

/* One sample per aggregate (key: none) global limit. */
static const struct coord_family per_aggregate[] = {
    {"leaseline_coord_lease_waste_total", "counter",
     "Tokens committed to holders that they did not admit: per report interval, the "
     "holder's committed rate share times the interval less its admissions, when positive.",
     waste},
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
    {"leaseline_coord_prefix_refused_total", "counter",
     "Connections refused: too many without a HELLO from one /24 (IPv6: /48).", prefix},
    {"leaseline_coord_pending_evicted_total", "counter",
     "Connections without a HELLO (or TLS handshakes) closed to make room for a new one, "
     "the table being full: from the prefix holding the most, silent ones first, then ones "
     "past 0.5 s.",
     evicted},
    {"leaseline_coord_full_refused_total", "counter",
     "Connections refused on accept: the table full (connections, or TLS handshakes), and "
     "none without a HELLO could give way.",
     full},
    {"leaseline_coord_store_failures_total", "counter",
     "Usage records that could not be written (no grant answered them).", store_failures},
    {"leaseline_coord_holders_reclaimed_total", "counter",
     "Holder slots given to a new holder after their holder left with no live grant.", reclaimed},
    {"leaseline_coord_tls_failures_total", "counter",
     "TLS handshakes refused, by either side (the log says which and why, once a minute "
     "per reason).",
     tls_failures},
    {"leaseline_coord_tls_refused_total", "counter",
     "HELLOs refused: the certificate does not name the holder.", tls_refused},
    {"leaseline_coord_leader", "gauge",
     "1 while this coordinator leads (always, without replicas:), else 0.", leader},
    {"leaseline_coord_etcd_up", "gauge",
     "1 if etcd answered this replica's last request (1 without replicas:).", etcd_up},
    {"leaseline_coord_leader_deadline_seconds", "gauge",
     "Leading: time left before this replica stops granting unless etcd answers a keepalive.",
     deadline_margin},
    {"leaseline_coord_terms_total", "counter", "Terms this replica began as leader.", terms},
    {"leaseline_coord_redirects_total", "counter",
     "HELLOs answered with REDIRECT: this replica did not lead.", redirects},
    {"leaseline_coord_deadline_refusals_total", "counter",
     "Grants withheld: not leading, or past the leadership deadline.", deadline_refusals},
    {"leaseline_coord_etcd_errors_total", "counter",
     "etcd requests that failed (no answer, or an error status).", etcd_errors},
    {"leaseline_coord_etcd_bad_answers_total", "counter",
     "etcd answers refused as malformed (hostile input).", etcd_bad_answers},
    {"leaseline_coord_step_downs_total", "counter",
     "Times this replica stopped leading on its own clock (etcd silent past the deadline).",
     step_downs},
    {"leaseline_coord_adopted_total", "counter",
     "Shares of an earlier epoch taken over in the quiet period, proven by their grant tag.",
     adopted},
    {"leaseline_coord_adopt_refused_total", "counter",
     "Held shares reported with a tag that does not prove them: not adopted.", adopt_refused},
    {"leaseline_coord_adopt_clamped_total", "counter",
     "Adopted shares cut to fit the contract or the ledger's room.", adopt_clamped},
    {"leaseline_coord_old_version_hellos_total", "counter",
     "Holders that said HELLO in an older wire version (answered in it, during an upgrade).",
     old_version_hellos},
    {"leaseline_coord_epoch_claims_ignored_total", "counter",
     "HELLO epoch claims not acted on: the holder already moved the epoch once in this run.",
     epoch_claims_ignored},
    {"leaseline_coord_holders_connected", "gauge", "Holders with a connection (after HELLO).",
     holders_connected},
    {"leaseline_coord_holders_asking", "gauge",
     "Holders taking part in the division: connected and reporting within a lease's life.",
     holders_asking},
};

/* Fairness per (aggregate limit, cohort) over the holders taking part in
 * the division whose last report interval was measured (telemetry.h).
 */
static void write_fairness(FILE *f, struct coord *co)
{
	prom_family(f, "leaseline_coord_fairness", "gauge",
		    "Admitted rate / fair share, summed over a cohort of holders: light (demand "
		    "at or below its max-min target; fair share = its offered load) or heavy "
		    "(demand above it; fair share = the target); last report interval; aggregate "
		    "limits.");
	for (uint32_t l = 0; l < co->n_limits; l++) {
		struct climit *c = &co->lim[l];
		struct tele_fair fr = {};
		uint32_t key = tele_key(c->name);

		if (!aggregate(c))
			continue;
		for (uint32_t hi = 0; hi < co->cfg.gateways && hi < c->led.cap; hi++) {
			const struct cholder *h = &co->h[hi];

			const struct tele_slot *t = &holder_lim(co, (int)hi, l)->tele;

			if (h->used && h->asking && t->key == key)
				tele_fair_add(&fr, c->led.h[hi].demand, c->t_rate[hi], t->rate);
		}
		for (int k = 0; k < TELE_COHORTS; k++)
			if (fr.fair[k] > 0) {
				fprintf(f, "leaseline_coord_fairness{limit=\"%s\",cohort=\"%s\"}",
					c->name, tele_cohort_name((enum tele_cohort)k));
				prom_value(f, fr.admitted[k] / fr.fair[k]);
			}
	}
}

/* Per holder the coordinator has a slot for: the link's state from here. */
static void write_holders(FILE *f, struct coord *co, uint64_t now)
{
	prom_family(f, "leaseline_coord_holder_up", "gauge",
		    "1 while a holder is connected and reporting, 0 once it is gone or silent "
		    "(its grants then expire).");
	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++)
		if (co->h[hi].used)
			fprintf(f, "leaseline_coord_holder_up{holder=\"%s\"} %d\n", co->h[hi].name,
				co->h[hi].conn >= 0 && co->h[hi].asking);
	prom_family(f, "leaseline_coord_holder_report_age_seconds", "gauge",
		    "Time since a holder's last report.");
	for (uint32_t hi = 0; hi < co->cfg.gateways; hi++)
		if (co->h[hi].used) {
			fprintf(f, "leaseline_coord_holder_report_age_seconds{holder=\"%s\"}",
				co->h[hi].name);
			prom_value(f, co->h[hi].last_report_ns && now > co->h[hi].last_report_ns
					  ? ns_to_s(now - co->h[hi].last_report_ns)
					  : 0.0);
		}
}

static void write_failures(FILE *f, struct coord *co)
{
	const uint64_t n[COORD_FAIL_MAX] = {
	    [COORD_FAIL_HOLDER_REFUSED] = co->refused,
	    [COORD_FAIL_RING_FULL] = co->ring_full,
	    [COORD_FAIL_KEY_LEDGER_FULL] = co->key_ledger_full,
	    [COORD_FAIL_STORE] = co->store_failures,
	    [COORD_FAIL_LINK_DROP] = co->link_drops,
	};

	prom_family(f, "leaseline_coord_allocator_failures_total", "counter",
		    "Allocations that did not happen, by reason: holder_refused (gateways: full), "
		    "ring_full (8 grants unacknowledged), key_ledger_full (a hot key's ledger "
		    "full: grant withheld), store_failure (usage not durable: report unanswered), "
		    "link_drop (a holder's connection dropped).");
	for (int r = 0; r < COORD_FAIL_MAX; r++)
		fprintf(f, "leaseline_coord_allocator_failures_total{reason=\"%s\"} %llu\n",
			telemetry_fail_name((enum coord_fail)r), (unsigned long long)n[r]);
	prom_family(f, "leaseline_coord_reloads_total", "counter",
		    "SIGHUP policy reloads by result: applied, or refused (the running policy "
		    "stays).");
	fprintf(f,
		"leaseline_coord_reloads_total{result=\"applied\"} %llu\n"
		"leaseline_coord_reloads_total{result=\"refused\"} %llu\n",
		(unsigned long long)co->reloads, (unsigned long long)co->reloads_refused);
}

/* The usage ledger (usage_ledger.h): zeros until a limit is metered. */
static void write_usage_ledger(FILE *f, struct coord *co)
{
	struct uwriter_stats st = {0};
	struct uledger_counters c;
	uint64_t p50, p99;

	/* The writer's copy, as of its last job: it owns the ledger. */
	if (co->uw)
		uwriter_stats(co->uw, &st);
	c = st.c;
	p50 = st.p50;
	p99 = st.p99;
	prom_family(f, "leaseline_coord_usage_ledger_reports_total", "counter",
		    "Reports of metered limits by result: recorded (one transaction each), or "
		    "failed (nothing written; no grant for their metered limits).");
	fprintf(f,
		"leaseline_coord_usage_ledger_reports_total{result=\"recorded\"} %llu\n"
		"leaseline_coord_usage_ledger_reports_total{result=\"failed\"} %llu\n",
		(unsigned long long)c.reports, (unsigned long long)co->usage_failures);
	prom_family(
	    f, "leaseline_coord_usage_ledger_entries_total", "counter",
	    "Report entries by what the ledger made of them: stale (not above the mark, or "
	    "of a closed incarnation: nothing added), backwards (totals below the mark: "
	    "counted from 0), continued (a new incarnation whose totals go on from the "
	    "last), restarted (a new incarnation counted from 0), first (the first report of "
	    "an agent started before the limit was metered: the baseline).");
	fprintf(f,
		"leaseline_coord_usage_ledger_entries_total{kind=\"stale\"} %llu\n"
		"leaseline_coord_usage_ledger_entries_total{kind=\"backwards\"} %llu\n"
		"leaseline_coord_usage_ledger_entries_total{kind=\"continued\"} %llu\n"
		"leaseline_coord_usage_ledger_entries_total{kind=\"restarted\"} %llu\n"
		"leaseline_coord_usage_ledger_entries_total{kind=\"first\"} %llu\n",
		(unsigned long long)c.stale, (unsigned long long)c.backwards,
		(unsigned long long)c.continued, (unsigned long long)c.restarted,
		(unsigned long long)c.first);
	prom_family(
	    f, "leaseline_coord_usage_ledger_key_batches_total", "counter",
	    "Per-key usage batches (METER) by the ack they got: recorded (committed), retry "
	    "(not written: the agent sends them again), refused (not a metered per-key "
	    "limit here, or a malformed key).");
	fprintf(f,
		"leaseline_coord_usage_ledger_key_batches_total{result=\"recorded\"} %llu\n"
		"leaseline_coord_usage_ledger_key_batches_total{result=\"retry\"} %llu\n"
		"leaseline_coord_usage_ledger_key_batches_total{result=\"refused\"} %llu\n",
		(unsigned long long)co->meter_recorded, (unsigned long long)co->meter_retry,
		(unsigned long long)co->meter_refused);
	prom_family(f, "leaseline_coord_usage_ledger_key_entries_total", "counter",
		    "Key entries of committed or attempted batches: counted (added usage), stale "
		    "(at or below their mark in every field: a duplicate, replay or older batch).");
	fprintf(f,
		"leaseline_coord_usage_ledger_key_entries_total{kind=\"counted\"} %llu\n"
		"leaseline_coord_usage_ledger_key_entries_total{kind=\"stale\"} %llu\n",
		(unsigned long long)c.key_counted, (unsigned long long)c.key_stale);
	prom_family(f, "leaseline_coord_usage_ledger_pruned_total", "counter",
		    "Ledger retention (ledger-retention): usage rows and marks deleted, counters "
		    "identities whose marks went, and reports or batches refused because they "
		    "belong to a pruned incarnation or identity.");
	fprintf(f,
		"leaseline_coord_usage_ledger_pruned_total{kind=\"usage\"} %llu\n"
		"leaseline_coord_usage_ledger_pruned_total{kind=\"marks\"} %llu\n"
		"leaseline_coord_usage_ledger_pruned_total{kind=\"identities\"} %llu\n"
		"leaseline_coord_usage_ledger_pruned_total{kind=\"refused\"} %llu\n",
		(unsigned long long)c.pruned_usage, (unsigned long long)c.pruned_marks,
		(unsigned long long)c.pruned_idents, (unsigned long long)c.pruned_refused);
	prom_family(f, "leaseline_coord_usage_ledger_bounded_total", "counter",
		    "What the usage ledger did not count (reference 6.3, Bounds): report entries "
		    "whose admitted figure was cut to what the holder's own lease could have "
		    "passed (lease), other entries cut to what their contract or the line rate "
		    "could have passed (clamped), new series past their holder's quota (quota), "
		    "reports and METER batches refused for a total above 2^62 or another counters "
		    "identity than their HELLO's (forged).");
	fprintf(f,
		"leaseline_coord_usage_ledger_bounded_total{kind=\"lease\"} %llu\n"
		"leaseline_coord_usage_ledger_bounded_total{kind=\"clamped\"} %llu\n"
		"leaseline_coord_usage_ledger_bounded_total{kind=\"quota\"} %llu\n"
		"leaseline_coord_usage_ledger_bounded_total{kind=\"forged\"} %llu\n",
		(unsigned long long)c.lease_clamped,
		(unsigned long long)(c.clamped - c.lease_clamped), (unsigned long long)c.quota,
		(unsigned long long)co->usage_forged);
	prom_family(f, "leaseline_coord_usage_ledger_clamped_units_total", "counter",
		    "Packets (or the limit's tokens) claimed beyond a bound: not counted.");
	fprintf(f, "leaseline_coord_usage_ledger_clamped_units_total %llu\n",
		(unsigned long long)c.clamped_pkts);
	prom_family(f, "leaseline_coord_usage_ledger_commit_seconds", "summary",
		    "From a report's arrival to its ledger commit, over the last 4096 recorded "
		    "reports.");
	fprintf(f, "leaseline_coord_usage_ledger_commit_seconds{quantile=\"0.5\"}");
	prom_value(f, ns_to_s(p50));
	fprintf(f, "leaseline_coord_usage_ledger_commit_seconds{quantile=\"0.99\"}");
	prom_value(f, ns_to_s(p99));
	prom_family(f, "leaseline_coord_usage_ledger_queue_full_total", "counter",
		    "Reports and METER batches the ledger's writer thread could not take (its "
		    "queue full): a batch is answered retry, a report's metered limits get no "
		    "grant; the agent sends them again.");
	fprintf(f, "leaseline_coord_usage_ledger_queue_full_total %llu\n",
		(unsigned long long)co->usage_full);
	prom_family(
	    f, "leaseline_coord_usage_ledger_queue_bytes", "gauge",
	    "Bytes of reports and METER batches at the ledger's writer thread (queued or in "
	    "its open transaction).");
	fprintf(f, "leaseline_coord_usage_ledger_queue_bytes %llu\n",
		(unsigned long long)st.queued_bytes);
	prom_family(f, "leaseline_coord_usage_ledger_holder_share_full_total", "counter",
		    "Of queue_full: refused because their holder had its share of the writer's "
		    "queue (a quarter of it with four holders or more).");
	fprintf(f, "leaseline_coord_usage_ledger_holder_share_full_total %llu\n",
		(unsigned long long)st.holder_full);
}

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
	for (size_t i = 0; i < ARRAY_SIZE(per_aggregate); i++) {
		prom_family(f, per_aggregate[i].name, per_aggregate[i].type, per_aggregate[i].help);
		for (uint32_t l = 0; l < co->n_limits; l++)
			if (aggregate(&co->lim[l])) {
				fprintf(f, "%s{limit=\"%s\"}", per_aggregate[i].name,
					co->lim[l].name);
				prom_value(f, per_aggregate[i].value(co, &co->lim[l], l, 0, now));
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
	write_fairness(f, co);
	write_holders(f, co, now);
	write_failures(f, co);
	write_usage_ledger(f, co);
	prom_build_info(f);
	return 0;
}
