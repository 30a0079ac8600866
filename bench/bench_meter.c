// SPDX-License-Identifier: MIT
/*
 * What per-key metering costs a packet in the leaseline program itself:
 * the same admitted traffic of one key under the same global limit (its
 * lease granted, far more than the traffic needs), metered and not, best of
 * 7 runs of each, alternated so that the machine's load hits each alike;
 * for a src-ip key (ll_meter_k, 24-byte key) and a flow key (ll_meter, 44
 * bytes: what every mode paid before ll_meter_k) in the same run. bench_meterkey
 * prices the two counts alone, outside the program. Prints figures, asserts
 * nothing; exits 1 when it cannot run at all (not root, the program does
 * not load, a policy or a grant is refused).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "csum.h"
#include "agent/dp.h"
#include "agent/lease_decide.h"
#include "agent/link.h"
#include "lib/log.h"
#include "agent/policy.h"

#define REPEAT	  200000u
#define ROUNDS	  28 /* 7 of each (mode, metered) pair, alternated */
#define PAYLOAD	  64
#define FRAME_LEN (ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr) + PAYLOAD)
#define SADDR	  0xc612000au /* 198.18.0.10 */
#define DADDR	  0xc6120101u /* 198.18.1.1 */

/* Ethernet/IPv4/UDP from SADDR:1000 to DADDR:53, PAYLOAD bytes 0, 1, 2... */
static void frame_build(uint8_t *f)
{
	struct ethhdr *eth = (struct ethhdr *)f;
	struct iphdr *ip = (struct iphdr *)(eth + 1);
	struct udphdr *udp = (struct udphdr *)(ip + 1);
	uint8_t *data = (uint8_t *)(udp + 1);

	memset(f, 0, FRAME_LEN);
	memcpy(eth->h_dest, "\x02\x00\x00\x00\x00\x02", ETH_ALEN);
	memcpy(eth->h_source, "\x02\x00\x00\x00\x00\x01", ETH_ALEN);
	eth->h_proto = htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->tot_len = htons(FRAME_LEN - ETH_HLEN);
	ip->ttl = 64;
	ip->protocol = IPPROTO_UDP;
	ip->saddr = htonl(SADDR);
	ip->daddr = htonl(DADDR);
	ip->check = (uint16_t)~csum_partial16(ip, sizeof(*ip));
	udp->source = htons(1000);
	udp->dest = htons(53);
	udp->len = htons(FRAME_LEN - ETH_HLEN - sizeof(*ip));
	for (int i = 0; i < PAYLOAD; i++)
		data[i] = (uint8_t)i;
}

/* The policy of round `version`: one global limit g on everything. */
static int apply(struct dp *dp, int version, const char *key, bool metered)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err e = {0};
	char yaml[512], err[256] = "";
	int rc;

	if (!cp)
		return -ENOMEM;
	snprintf(yaml, sizeof(yaml),
		 "version: %d\nlimits:\n"
		 "  - {name: g, key: %s, scope: global, rate: 1G, burst: 1G, meter: %s, "
		 "on-loss: fail-closed}\n"
		 "rules:\n  - {name: all, limits: [g]}\n",
		 version, key, metered ? "true" : "false");
	rc = cfg_policy_parse("bench-policy.yaml", yaml, strlen(yaml), false, cp, &e);
	if (rc)
		fprintf(stderr, "bench_meter: %s\n", e.msg);
	else if ((rc = policy_apply(dp, cp, err, sizeof(err))))
		fprintf(stderr, "bench_meter: policy apply: %s\n", err);
	free(cp);
	return rc;
}

/* Grant g (seq) a share far above the traffic, for an hour. */
static int grant(struct dp *dp, uint64_t seq)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct lease_grant g = {.epoch = 1,
				.seq = seq,
				.rate = 1000000000,
				.burst = 1000000000,
				.expiry_ns = clock_now_ns() + 3600 * NSEC_PER_SEC};
	int id, rc;

	if (!pol)
		return -ENOMEM;
	rc = dp_policy_read(dp->policy_fd, dp->state_fd, pol);
	id = rc ? rc : policy_limit_id(pol, "g");
	free(pol);
	if (id < 0)
		return id;
	return link_lease_apply(dp, (uint32_t)id, &g, clock_now_ns());
}

/* ns per packet through bpf_prog_test_run (REPEAT) of the frame. */
static int ns_per_pkt(struct dp *dp, uint8_t *frame, double *ns)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame, .data_size_in = FRAME_LEN,
		    .repeat = REPEAT);

	if (bpf_prog_test_run_opts(dp->prog_fd, &o))
		return -errno;
	if (o.retval != XDP_PASS)
		return -EPROTO; /* not admitted: not the path this prices */
	*ns = (double)o.duration;
	return 0;
}

int main(void)
{
	static const char *const mode[2] = {"src-ip", "flow"};
	static struct dp dp;
	struct dp_opts o = {.pin_dir = NULL, .max_keys = 4096};
	double best[2][2] = {{1e18, 1e18}, {1e18, 1e18}};
	uint8_t frame[FRAME_LEN];
	int err;

	log_set_level(LOG_WARN);
	log_hook_libbpf();
	frame_build(frame);
	err = dp_open(&dp, &o);
	if (err) {
		fprintf(stderr, "bench_meter: cannot open the datapath: %s (root needed)\n",
			strerror(-err));
		return 1;
	}
	for (int round = 0; round < ROUNDS; round++) {
		int metered = round % 2, m = (round / 2) % 2;
		double ns = 0;

		if ((err = apply(&dp, round + 1, mode[m], metered)) ||
		    (err = grant(&dp, (uint64_t)round + 1)) || (err = ns_per_pkt(&dp, frame, &ns)))
			goto out;
		if (ns < best[m][metered])
			best[m][metered] = ns;
	}
	for (int m = 0; m < 2; m++)
		printf("per-key metering, key: %-6s %.1f ns/packet unmetered, %.1f metered (+%.1f "
		       "ns; %s; bpf_prog_test_run, one key, best of %d runs of %u)\n",
		       mode[m], best[m][0], best[m][1], best[m][1] - best[m][0],
		       m ? "ll_meter, 44-byte key" : "ll_meter_k, 24-byte key", ROUNDS / 4,
		       REPEAT);
out:
	if (err)
		fprintf(stderr, "bench_meter: %s\n", strerror(-err));
	dp_close(&dp);
	return err ? 1 : 0;
}
