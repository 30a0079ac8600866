// SPDX-License-Identifier: MIT
/*
 * Per-key metering: does a 24-byte key make the per-packet count cheaper
 * than the 44-byte key ll_meter uses for every key mode (issue #12)? The
 * three programs of bench/bpf/meterkey.bpf.c on one crafted UDP frame,
 * bpf_prog_test_run with repeat, alternated round by round in one run so
 * that the machine's load hits each alike; the best round of each. Prints
 * ns per packet and the ratio of the two counts' costs above the floor.
 * A figure, not an assert.
 */
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include "meterkey.skel.h"

#define REPEAT 200000
#define ROUNDS 9

static double run(int prog_fd, void *pkt, size_t len)
{
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = pkt, .data_size_in = (__u32)len,
		    .repeat = REPEAT);

	if (bpf_prog_test_run_opts(prog_fd, &o) || o.retval != 2 /* XDP_PASS */)
		return -1;
	return (double)o.duration;
}

int main(void)
{
	unsigned char pkt[128] = {0};
	struct ethhdr *eth = (void *)pkt;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	struct meterkey_bpf *sk = meterkey_bpf__open_and_load();
	double best[3] = {1e18, 1e18, 1e18};
	const char *name[3] = {"headers only", "44-byte key", "24-byte key"};
	int fd[3];

	if (!sk) {
		fprintf(stderr, "cannot load meterkey.bpf.o\n");
		return 1;
	}
	fd[0] = bpf_program__fd(sk->progs.mk_none);
	fd[1] = bpf_program__fd(sk->progs.mk_44);
	fd[2] = bpf_program__fd(sk->progs.mk_24);
	eth->h_proto = htons(ETH_P_IP);
	ip->version = 4;
	ip->ihl = 5;
	ip->protocol = 17;
	ip->tot_len = htons(100 - sizeof(*eth));
	ip->saddr = htonl(0xc612000au); /* 198.18.0.10 */
	ip->daddr = htonl(0xc6130001u);
	udp->dest = htons(5001);
	udp->len = htons(100 - sizeof(*eth) - sizeof(*ip));
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < 3; i++) {
			int p = (r + i) % 3; /* rotate who goes first */
			double ns = run(fd[p], pkt, 100);

			if (ns < 0) {
				fprintf(stderr, "bpf_prog_test_run failed\n");
				meterkey_bpf__destroy(sk);
				return 1;
			}
			if (ns < best[p])
				best[p] = ns;
		}
	printf("Per-key meter count by key size (bpf_prog_test_run, one key, best of %d rounds "
	       "of %d, alternated):\n",
	       ROUNDS, REPEAT);
	for (int i = 0; i < 3; i++)
		printf("  %-13s %6.1f ns/packet\n", name[i], best[i]);
	printf("  count above the floor: 44-byte %.1f ns, 24-byte %.1f ns (24/44 = %.2f)\n",
	       best[1] - best[0], best[2] - best[0],
	       best[1] > best[0] ? (best[2] - best[0]) / (best[1] - best[0]) : 0.0);
	meterkey_bpf__destroy(sk);
	return 0;
}
