// SPDX-License-Identifier: MIT
/*
 * `leaseline coord-status -c coord.yaml [-j]`: what an operator asks of a
 * coordinator replica, from the outside and changing nothing. Two sources:
 *  - etcd (replicas: only): each member's answer, who holds PREFIX/leader
 *    and under which epoch, the epoch counter (election_peek);
 *  - the replica's own metrics endpoint (metrics:): whether it leads,
 *    its epoch, its view of etcd, the deadline margin, holders, redirects.
 * Exit 0 when the replica answers and, with replicas, etcd names a leader;
 * 1 otherwise (the reason is printed); 2 for a bad file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "coord/coord.h"
#include "coord/coord_int.h"
#include "lib/log.h"
#include "lib/out.h"

#define STATUS_BODY_MAX	  (1024 * 1024) /* a scrape is ~10-100 kB */
#define STATUS_TIMEOUT_MS 1000

struct body {
	char *p;
	size_t n;
	bool over;
};

static size_t take(char *d, size_t sz, size_t nm, void *arg)
{
	struct body *b = arg;
	size_t n = sz * nm;

	if (b->n + n > STATUS_BODY_MAX) {
		b->over = true;
		return 0; /* cut: curl fails the transfer */
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

/* The metrics endpoint's host:port as one dials it: a wildcard listen is
 * reached on loopback.
 */
static void metrics_url(const char *listen, char *url, size_t len)
{
	if (!strncmp(listen, "0.0.0.0:", 8))
		snprintf(url, len, "http://127.0.0.1:%s/metrics", listen + 8);
	else if (!strncmp(listen, "[::]:", 5))
		snprintf(url, len, "http://[::1]:%s/metrics", listen + 5);
	else
		snprintf(url, len, "http://%s/metrics", listen);
}

/* GET url into b: 0, or -1 with why in err. */
static int scrape(const char *url, struct body *b, char *err, size_t len)
{
	CURL *c = curl_easy_init();
	long code = 0;
	CURLcode r;

	if (!c) {
		snprintf(err, len, "cannot start libcurl");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)STATUS_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	r = curl_easy_perform(c);
	if (r == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (r != CURLE_OK || code != 200) {
		snprintf(err, len, "%s",
			 b->over	 ? "answer too long"
			 : r != CURLE_OK ? curl_easy_strerror(r)
					 : "not 200");
		return -1;
	}
	return 0;
}

/* An unlabelled sample "NAME VALUE" of the scrape: 0 and *v, -1 absent. */
static int sample(const char *text, const char *name, double *v)
{
	size_t n = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		char *end;

		if (strncmp(p, name, n) || p[n] != ' ')
			continue;
		*v = strtod(p + n + 1, &end);
		return end == p + n + 1 ? -1 : 0;
	}
	return -1;
}

static const char *const GAUGES[][2] = {
    {"leaseline_coord_leader", "leader"},
    {"leaseline_coord_epoch", "epoch"},
    {"leaseline_coord_etcd_up", "etcd_up"},
    {"leaseline_coord_leader_deadline_seconds", "deadline_margin_s"},
    {"leaseline_coord_quiet_seconds", "quiet_s"},
    {"leaseline_coord_holders_connected", "holders_connected"},
    {"leaseline_coord_redirects_total", "redirects"},
    {"leaseline_coord_step_downs_total", "step_downs"},
    {"leaseline_coord_terms_total", "terms"},
    {"leaseline_coord_grants_total", "grants"},
};
#define N_GAUGES (sizeof(GAUGES) / sizeof(GAUGES[0]))

static void etcd_part(struct out *o, const struct cfg_coord *cfg, const struct election_peek *p,
		      const char **why)
{
	const struct cfg_replicas *r = &cfg->replicas;
	unsigned up = 0;

	out_obj_begin(o, "etcd");
	out_str(o, "prefix", r->prefix);
	out_arr_begin(o, "members");
	for (uint32_t i = 0; i < r->n_etcd && i < ELECTION_MAX_ENDPOINTS; i++) {
		out_obj_begin(o, NULL);
		out_str(o, "endpoint", r->etcd[i]);
		out_bool(o, "up", p->ep[i].up);
		if (p->ep[i].up) {
			out_str(o, "version", p->ep[i].version[0] ? p->ep[i].version : "?");
			out_bool(o, "raft_leader", p->ep[i].raft_leader);
		}
		out_obj_end(o);
		up += p->ep[i].up;
	}
	out_arr_end(o);
	out_obj_begin(o, "leader");
	if (p->leader_node[0]) {
		out_str(o, "node", p->leader_node);
		out_str(o, "advertise", p->leader_addr);
		out_u64(o, "epoch", p->leader_epoch);
	} else {
		out_str(o, "node", p->leader_bad ? "(malformed key)" : "(none)");
	}
	out_obj_end(o);
	if (p->read && !p->counter_bad)
		out_u64(o, "epoch_counter", p->counter);
	out_obj_end(o);
	if (!up)
		*why = "no etcd member answers";
	else if (!p->read)
		*why = "etcd did not answer the read of the leader key";
	else if (!p->leader_node[0])
		*why = p->leader_bad ? "the leader key in etcd is malformed" : "no replica leads";
}

int coord_status(const char *config_path, bool json, bool *printed)
{
	struct cfg_policy *scratch = calloc(1, sizeof(*scratch));
	struct cfg_coord *cfg = calloc(1, sizeof(*cfg));
	struct election_peek *peek = calloc(1, sizeof(*peek));
	struct body b = {.p = malloc(STATUS_BODY_MAX + 1)};
	const char *why = NULL;
	char url[CFG_ADDR_LEN + 32], err[128];
	struct cfg_err e;
	struct out o;
	int rc = 1;

	*printed = false;
	if (!scratch || !cfg || !peek || !b.p)
		goto out;
	b.p[0] = '\0';
	if (cfg_coord_load(config_path, cfg, scratch, &e)) {
		pr_warn("%s\n", e.msg);
		rc = 2;
		goto out;
	}
	if (cfg->has_replicas) {
		struct election_cfg ec;

		election_cfg_of(&cfg->replicas, &ec);
		ec.timeout_ms = STATUS_TIMEOUT_MS;
		if (election_peek(&ec, peek)) {
			pr_warn("leaseline coord-status: cannot read etcd: out of memory or bad "
				"settings\n");
			goto out;
		}
	}
	out_init(&o, stdout, json);
	out_obj_begin(&o, NULL);
	out_str(&o, "listen", cfg->listen);
	if (cfg->has_replicas) {
		out_str(&o, "node", cfg->replicas.node);
		out_str(&o, "advertise", cfg->replicas.advertise);
		etcd_part(&o, cfg, peek, &why);
	}
	out_obj_begin(&o, "replica");
	if (cfg->has_metrics) {
		metrics_url(cfg->metrics, url, sizeof(url));
		out_str(&o, "metrics", url);
		if (scrape(url, &b, err, sizeof(err))) {
			out_str(&o, "error", err);
			why = why ? why : "the replica's metrics do not answer";
		} else {
			for (size_t i = 0; i < N_GAUGES; i++) {
				double v;

				if (!sample(b.p, GAUGES[i][0], &v))
					out_f64(&o, GAUGES[i][1], v);
			}
		}
	} else {
		out_str(&o, "metrics", "(none: no metrics: in the file)");
	}
	out_obj_end(&o);
	out_bool(&o, "healthy", !why);
	if (why)
		out_str(&o, "problem", why);
	out_obj_end(&o);
	out_finish(&o);
	*printed = true;
	rc = why ? 1 : 0;
out:
	free(scratch);
	free(cfg);
	free(peek);
	free(b.p);
	return rc;
}
