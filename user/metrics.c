// SPDX-License-Identifier: MIT
/*
 * Metrics endpoint. Reads only; never blocks the agent for more than the
 * socket timeout of one request.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <bpf/bpf.h>

#include "conn.h"
#include "dp.h"
#include "log.h"
#include "metrics.h"
#include "stats.h"
#include "tb_math.h"

#define METRICS_REQ_MAX	   2048 /* enough for a GET line and headers */
#define METRICS_TIMEOUT_MS 200

int metrics_listen(const char *addr)
{
	return net_listen(addr);
}

static const char *verdicts[] = {"allowed", "denied", "shadow_denied", "fallback", "bypass"};
#define N_VERDICTS (sizeof(verdicts) / sizeof(verdicts[0]))

/* This gateway's share of each global limit and how long it has left. */
static void write_leases(FILE *f, struct dp *dp, const struct ll_policy *pol)
{
	uint64_t now = dp_now_ns();

	fprintf(f, "# HELP leaseline_lease_rate This gateway's leased rate share.\n"
		   "# TYPE leaseline_lease_rate gauge\n");
	for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
		const struct ll_limit_cfg *c = &pol->limits[id];
		struct ll_lease l;

		if (!c->in_use || c->scope != LL_SCOPE_GLOBAL ||
		    bpf_map_lookup_elem_flags(dp->leases_fd, &id, &l, BPF_F_LOCK))
			continue;
		fprintf(f, "leaseline_lease_rate{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)l.rate);
		fprintf(f, "leaseline_lease_burst{limit=\"%s\"} %llu\n", c->name,
			(unsigned long long)(l.burst_s / TB_SCALE));
		fprintf(f, "leaseline_lease_remaining_seconds{limit=\"%s\"} %.3f\n", c->name,
			l.expiry_ns > now ? (double)(l.expiry_ns - now) / 1e9 : 0.0);
	}
}

int metrics_write(FILE *f, void *arg)
{
	struct dp *dp = arg;
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	uint64_t parse[LL_PARSE_MAX] = {};
	struct ll_state st = {};
	int err = pol ? 0 : -ENOMEM;

	if (!err)
		err = dp_state_read(dp->state_fd, &st);
	if (!err)
		err = dp_policy_read(dp->policy_fd, dp->state_fd, pol);
	if (err)
		goto out;
	fprintf(f, "# HELP leaseline_packets_total Packets by limit and verdict.\n"
		   "# TYPE leaseline_packets_total counter\n");
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			fprintf(f, "# HELP leaseline_bytes_total Bytes by limit and verdict.\n"
				   "# TYPE leaseline_bytes_total counter\n");
		for (uint32_t id = 0; id < LL_MAX_LIMITS; id++) {
			struct ll_limit_stats s;
			uint64_t v[N_VERDICTS];

			if (!pol->limits[id].in_use || stats_limit(dp->limit_stats_fd, id, &s))
				continue;
			v[0] = pass ? s.allowed_bytes : s.allowed_pkts;
			v[1] = pass ? s.denied_bytes : s.denied_pkts;
			v[2] = pass ? s.shadow_denied_bytes : s.shadow_denied_pkts;
			v[3] = pass ? s.fallback_bytes : s.fallback_pkts;
			v[4] = pass ? s.bypass_bytes : s.bypass_pkts;
			for (size_t i = 0; i < N_VERDICTS; i++)
				fprintf(f, "leaseline_%s_total{limit=\"%s\",verdict=\"%s\"} %llu\n",
					pass ? "bytes" : "packets", pol->limits[id].name,
					verdicts[i], (unsigned long long)v[i]);
		}
	}
	write_leases(f, dp, pol);
	fprintf(f, "# HELP leaseline_parse_total Frames by parse outcome.\n"
		   "# TYPE leaseline_parse_total counter\n");
	stats_parse(dp->parse_stats_fd, parse);
	for (uint32_t r = 0; r < LL_PARSE_MAX; r++)
		fprintf(f, "leaseline_parse_total{reason=\"%s\"} %llu\n",
			stats_parse_reason_name(r), (unsigned long long)parse[r]);
	fprintf(f,
		"# HELP leaseline_policy_version Version of the enforcing policy.\n"
		"# TYPE leaseline_policy_version gauge\nleaseline_policy_version %llu\n",
		(unsigned long long)st.version);
out:
	free(pol);
	return err;
}

static void respond(int c, metrics_writer write, void *arg)
{
	struct timeval tv = {.tv_usec = METRICS_TIMEOUT_MS * 1000};
	char req[METRICS_REQ_MAX], *body = NULL, hdr[160];
	size_t blen = 0;
	ssize_t n;
	FILE *f;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = recv(c, req, sizeof(req) - 1, 0);
	if (n <= 0)
		return;
	req[n] = '\0';
	if (strncmp(req, "GET /metrics", 12) != 0) {
		const char *nf = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";

		send(c, nf, strlen(nf), MSG_NOSIGNAL);
		return;
	}
	f = open_memstream(&body, &blen);
	if (!f)
		return;
	write(f, arg);
	fclose(f);
	snprintf(hdr, sizeof(hdr),
		 "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 blen);
	if (send(c, hdr, strlen(hdr), MSG_NOSIGNAL) > 0)
		send(c, body, blen, MSG_NOSIGNAL);
	free(body);
}

void metrics_serve(int listen_fd, metrics_writer write, void *arg)
{
	int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return;
	/* The listening socket is non-blocking; the connection must not be. */
	respond(c, write, arg);
	close(c);
}
