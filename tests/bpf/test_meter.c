// SPDX-License-Identifier: MIT
/*
 * Per-key metering of metered global limits (ll_meter, docs/maps.md) on the
 * real kernel: every packet's outcome under a metered limit is counted under
 * its key, by class (admitted, denied, fallback, bypass), packets and bytes;
 * the per-key totals add up exactly to the limit's own counters; a full map
 * counts a new key under its limit's overflow entry (and says so), never
 * silently; reaping a bucket loses no totals; the counters' identity stays
 * with the pins and changes when they are lost; unmetered limits have no
 * entries.
 */
#include <dirent.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <time.h>
#include <cmocka.h>

#include <sys/socket.h>

#include "bpf/harness.h"
#include "lib/conn.h"
#include "agent/lease_decide.h"
#include "agent/link.h"
#include "agent/meter.h"
#include "lib/wire.h"

#define FAR_FUTURE (clock_now_ns() + 3600 * NSEC_PER_SEC)
#define DST	   "198.18.1.1"

static int apply_g(struct fx *fx, const char *meter, const char *extra)
{
	return hx_applyf_global(
	    fx,
	    "version: 1\nlimits:\n"
	    "  - {name: g, key: src-ip, scope: global, rate: 1000, burst: 1000, "
	    "meter: %s%s}\n"
	    "rules:\n  - {name: all, limits: [g]}\n",
	    meter, extra);
}

static int share(struct fx *fx, uint64_t rate, uint64_t burst)
{
	struct lease_grant g = {
	    .epoch = 1, .seq = 1, .rate = rate, .burst = burst, .expiry_ns = FAR_FUTURE};

	return link_lease_apply(&fx->dp, (uint32_t)hx_limit_id(fx, "g"), &g, clock_now_ns());
}

static struct ll_flow_key mkey(struct fx *fx, const char *src)
{
	struct ll_limit_cfg cfg;
	struct ll_key k;
	struct ll_flow_key fk;

	assert_true(hx_limit(fx, "g", &cfg) >= 0);
	k = hx_key_addr(cfg.uid, 4, src, 32);
	memset(&fk, 0, sizeof(fk));
	fk.limit_uid = k.limit_uid;
	fk.family = k.family;
	memcpy(fk.addr, k.addr, sizeof(fk.addr));
	return fk;
}

static struct ll_flow_key okey(struct fx *fx)
{
	struct ll_limit_cfg cfg;
	struct ll_flow_key fk;

	assert_true(hx_limit(fx, "g", &cfg) >= 0);
	memset(&fk, 0, sizeof(fk));
	fk.limit_uid = cfg.uid;
	fk.family = LL_OVERFLOW_FAMILY;
	return fk;
}

/* A key's totals summed over CPUs; -ENOENT when it has no entry. */
static int meter_of(struct fx *fx, const struct ll_flow_key *fk, struct ll_meter *out)
{
	struct ll_meter *pc = calloc(fx->ncpus, sizeof(*pc));
	int err = 0;

	assert_non_null(pc);
	memset(out, 0, sizeof(*out));
	/* Flow keys in ll_meter, the other modes' in ll_meter_k (an ll_key). */
	if (!fk->sport && !fk->addr2[0] && !fk->addr2[1] && !fk->addr2[2] && !fk->addr2[3]) {
		struct ll_key k = {.limit_uid = fk->limit_uid,
				   .proto = fk->proto,
				   .family = fk->family,
				   .dport = fk->dport};

		memcpy(k.addr, fk->addr, sizeof(k.addr));
		if (bpf_map_lookup_elem(fx->dp.meter_k_fd, &k, pc))
			err = -errno;
	} else if (bpf_map_lookup_elem(fx->dp.meter_fd, fk, pc)) {
		err = -errno;
	}
	for (unsigned int c = 0; !err && c < fx->ncpus; c++)
		for (int i = 0; i < LL_METER_CLASSES; i++) {
			out->pkts[i] += pc[c].pkts[i];
			out->bytes[i] += pc[c].bytes[i];
		}
	free(pc);
	return err;
}

/* Every entry summed (dp_meter_read, what the agent reports). */
static struct ll_meter meter_all(struct fx *fx, size_t *entries)
{
	struct ll_flow_key *k;
	struct ll_meter *v, sum = {0};
	size_t n;

	assert_int_equal(dp_meter_read(&fx->dp, &k, &v, &n), 0);
	for (size_t j = 0; j < n; j++)
		for (int i = 0; i < LL_METER_CLASSES; i++) {
			sum.pkts[i] += v[j].pkts[i];
			sum.bytes[i] += v[j].bytes[i];
		}
	if (entries)
		*entries = n;
	free(k);
	free(v);
	return sum;
}

/* Per key, per class, packets and bytes; the sum over keys is the limit's. */
static void test_meter_per_key(void **state)
{
	struct fx *fx = FX(state);
	struct ll_flow_key a, b;
	struct ll_limit_stats s;
	struct ll_meter ma, mb, all;
	struct pkt pa, pb;
	size_t n;

	assert_int_equal(apply_g(fx, "true", ", on-loss: fail-closed"), 0);
	assert_int_equal(share(fx, 1, 5), 0);
	hx_udp4(&pa, "198.18.0.10", DST, 1000, 53, 100);
	hx_udp4(&pb, "198.18.0.11", DST, 1000, 53, 300);
	assert_int_equal(hx_send(fx, &pa, 8, NULL), 5);
	assert_int_equal(hx_send(fx, &pb, 3, NULL), 3);
	a = mkey(fx, "198.18.0.10");
	b = mkey(fx, "198.18.0.11");
	assert_int_equal(meter_of(fx, &a, &ma), 0);
	assert_int_equal(meter_of(fx, &b, &mb), 0);
	assert_int_equal(ma.pkts[LL_METER_ADMITTED], 5);
	assert_int_equal(ma.pkts[LL_METER_DENIED], 3);
	assert_int_equal(ma.bytes[LL_METER_ADMITTED], 5 * pa.len);
	assert_int_equal(ma.bytes[LL_METER_DENIED], 3 * pa.len);
	assert_int_equal(mb.pkts[LL_METER_ADMITTED], 3);
	assert_int_equal(mb.pkts[LL_METER_DENIED], 0);
	assert_int_equal(mb.bytes[LL_METER_ADMITTED], 3 * pb.len);
	/* The keys and the (empty) overflow entry; the sum is the limit's. */
	all = meter_all(fx, &n);
	assert_int_equal(n, 3);
	s = hx_stats_of(fx, "g");
	assert_int_equal(all.pkts[LL_METER_ADMITTED], s.allowed_pkts);
	assert_int_equal(all.bytes[LL_METER_ADMITTED], s.allowed_bytes);
	assert_int_equal(all.pkts[LL_METER_DENIED], s.denied_pkts);
	assert_int_equal(all.bytes[LL_METER_DENIED], s.denied_bytes);
}

/* Flow keys go to ll_meter (44 bytes), the other modes' to ll_meter_k (24):
 * a metered flow limit counts each flow apart, read back by dp_meter_read
 * as the agent reports them, and the src-ip map stays empty; retiring a
 * series finds it in its map.
 */
static void test_meter_flow_keys(void **state)
{
	struct fx *fx = FX(state);
	struct ll_flow_key *k;
	struct ll_meter *v;
	struct ll_limit_stats s;
	struct ll_key knext;
	struct pkt pa, pb;
	uint64_t adm = 0;
	size_t n;

	assert_int_equal(hx_applyf_global(fx,
					  "version: 1\nlimits:\n"
					  "  - {name: g, key: flow, scope: global, rate: 1000, "
					  "burst: 1000, meter: true, on-loss: fail-closed}\n"
					  "rules:\n  - {name: all, limits: [g]}\n"),
			 0);
	assert_int_equal(share(fx, 1000, 1000), 0);
	hx_udp4(&pa, "198.18.0.10", DST, 1000, 53, 100);
	hx_udp4(&pb, "198.18.0.10", DST, 1001, 53, 100); /* another source port */
	assert_int_equal(hx_send(fx, &pa, 4, NULL), 4);
	assert_int_equal(hx_send(fx, &pb, 2, NULL), 2);
	assert_int_not_equal(bpf_map_get_next_key(fx->dp.meter_k_fd, NULL, &knext), 0);
	assert_int_equal(dp_meter_read(&fx->dp, &k, &v, &n), 0);
	assert_int_equal(n, 3); /* two flows and the overflow entry */
	for (size_t j = 0; j < n; j++) {
		if (k[j].family == LL_OVERFLOW_FAMILY)
			continue;
		assert_true(k[j].sport == htons(1000) || k[j].sport == htons(1001));
		assert_int_equal(v[j].pkts[LL_METER_ADMITTED], k[j].sport == htons(1000) ? 4 : 2);
		adm += v[j].pkts[LL_METER_ADMITTED];
		assert_true(v[j].born > 0);
	}
	s = hx_stats_of(fx, "g");
	assert_int_equal(adm, s.allowed_pkts);
	for (size_t j = 0; j < n; j++)
		assert_int_equal(dp_meter_delete(&fx->dp, &k[j], NULL), 0);
	free(k);
	free(v);
	assert_int_equal(dp_meter_read(&fx->dp, &k, &v, &n), 0);
	assert_int_equal(n, 0);
	free(k);
	free(v);
}

/* Not metered: no entry at all, the packet path pays nothing for it. */
static void test_unmetered_no_entries(void **state)
{
	struct fx *fx = FX(state);
	struct pkt p;
	size_t n;

	assert_int_equal(apply_g(fx, "false", ", on-loss: fail-closed"), 0);
	assert_int_equal(share(fx, 1, 5), 0);
	hx_udp4(&p, "198.18.0.10", DST, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &p, 4, NULL), 4);
	meter_all(fx, &n);
	assert_int_equal(n, 0);
}

/* After the lease: fail-open is bypass, the fallback share is fallback. */
static void test_meter_bypass_fallback(void **state)
{
	struct fx *fx = FX(state);
	struct ll_flow_key a;
	struct ll_meter m;
	struct ll_limit_stats s;
	struct pkt p;

	assert_int_equal(apply_g(fx, "true", ", on-loss: fail-open"), 0);
	hx_udp4(&p, "198.18.0.10", DST, 1000, 53, 10);
	assert_int_equal(hx_send(fx, &p, 4, NULL), 4);
	a = mkey(fx, "198.18.0.10");
	assert_int_equal(meter_of(fx, &a, &m), 0);
	assert_int_equal(m.pkts[LL_METER_BYPASS], 4);
	assert_int_equal(m.bytes[LL_METER_BYPASS], 4 * p.len);
	assert_int_equal(m.pkts[LL_METER_ADMITTED], 0);
	s = hx_stats_of(fx, "g");
	assert_int_equal(s.bypass_pkts, 4);

	/* The same limit (same uid) now with a fallback share of 3. */
	assert_int_equal(hx_applyf_global(fx,
					  "version: 2\nlimits:\n"
					  "  - {name: g, key: src-ip, scope: global, rate: 1000, "
					  "burst: 1000, meter: true, on-loss: fallback, "
					  "fallback: {rate: 1, burst: 3}}\n"
					  "rules:\n  - {name: all, limits: [g]}\n"),
			 0);
	assert_int_equal(hx_send(fx, &p, 5, NULL), 3);
	assert_int_equal(meter_of(fx, &a, &m), 0);
	assert_int_equal(m.pkts[LL_METER_BYPASS], 4); /* kept */
	assert_int_equal(m.pkts[LL_METER_FALLBACK], 3);
	assert_int_equal(m.pkts[LL_METER_DENIED], 2);
}

/* A bucket reaped (deleted) loses nothing: the totals live apart. */
static void test_meter_survives_bucket_delete(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_cfg cfg;
	struct ll_flow_key a;
	struct ll_key k;
	struct ll_meter m;
	struct pkt p;

	assert_int_equal(apply_g(fx, "true", ", on-loss: fail-closed"), 0);
	assert_int_equal(share(fx, 1000, 1000), 0);
	hx_udp4(&p, "198.18.0.10", DST, 1000, 53, 0);
	assert_int_equal(hx_send(fx, &p, 7, NULL), 7);
	assert_true(hx_limit(fx, "g", &cfg) >= 0);
	k = hx_key_addr(cfg.uid, 4, "198.18.0.10", 32);
	assert_int_equal(bpf_map_delete_elem(fx->dp.buckets_fd, &k), 0);
	assert_int_equal(hx_send(fx, &p, 2, NULL), 2);
	a = mkey(fx, "198.18.0.10");
	assert_int_equal(meter_of(fx, &a, &m), 0);
	assert_int_equal(m.pkts[LL_METER_ADMITTED], 9);
}

/* Full: new keys count under the overflow entry and in ll_meter_info.full;
 * with no overflow entry, in lost. The totals still add up to the limit's.
 */
static void test_meter_full_counted(void **state)
{
	struct fx *fx = *state, small;
	struct dp_opts o = {.max_keys = HX_MAX_KEYS, .max_meter_keys = 4};
	struct ll_meter_info info;
	struct ll_flow_key ok;
	struct ll_meter m, all;
	struct ll_limit_stats s;
	uint32_t cap;
	size_t n;
	int sent = 0;

	if (!fx)
		skip();
	memset(&small, 0, sizeof(small));
	assert_int_equal(hx_dp_open_quiet(&small.dp, &o), 0);
	hx_unpin_all(&small.dp);
	small.ncpus = small.dp.ncpus;
	cap = bpf_map__max_entries(small.dp.skel->maps.ll_meter_k); /* src-ip keys */
	assert_int_equal(apply_g(&small, "true", ", on-loss: fail-open"), 0);
	for (uint32_t i = 0; i < cap + 10; i++) {
		char src[32];
		struct pkt p;

		snprintf(src, sizeof(src), "198.18.%u.%u", 2 + i / 250, 1 + i % 250);
		hx_udp4(&p, src, DST, 1000, 53, 0);
		assert_int_equal(hx_send(&small, &p, 1, NULL), 1);
		sent++;
	}
	all = meter_all(&small, &n);
	assert_int_equal(n, cap);
	assert_int_equal(all.pkts[LL_METER_BYPASS], sent);
	ok = okey(&small);
	assert_int_equal(meter_of(&small, &ok, &m), 0);
	assert_int_equal(m.pkts[LL_METER_BYPASS], sent - (cap - 1));
	assert_int_equal(dp_meter_info_read(&small.dp, &info), 0);
	assert_int_equal(info.full, sent - (cap - 1));
	assert_int_equal(info.lost_pkts, 0);
	/* No overflow entry either: lost, and said so. */
	assert_int_equal(dp_meter_delete(&small.dp, &ok, NULL), 0);
	{
		struct pkt p;

		/* The freed room goes to the next new key; the one after is lost. */
		hx_udp4(&p, "198.18.100.1", DST, 1000, 53, 0);
		assert_int_equal(hx_send(&small, &p, 1, NULL), 1);
		hx_udp4(&p, "198.18.100.2", DST, 1000, 53, 0);
		assert_int_equal(hx_send(&small, &p, 1, NULL), 1);
		assert_int_equal(dp_meter_info_read(&small.dp, &info), 0);
		assert_int_equal(info.lost_pkts, 1);
		assert_int_equal(info.lost_bytes, p.len);
	}
	s = hx_stats_of(&small, "g");
	assert_int_equal(s.bypass_pkts, sent + 2);
	dp_close(&small.dp);
}

/* The identity: kept with the pins (totals continue), new without them
 * (totals from zero).
 */
static void test_meter_ident_pins(void **state)
{
	struct fx *fx = *state, p1, p2, p3;
	char dir[64], path[64 + 260];
	struct dp_opts o = {.max_keys = HX_MAX_KEYS};
	struct ll_flow_key a;
	struct ll_meter m;
	struct pkt p;
	uint64_t ident;
	struct dirent *e;
	DIR *d;

	if (!fx)
		skip();
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/ll-meter-%d", (int)getpid());
	assert_true(!mkdir(dir, 0700) || errno == EEXIST);
	o.pin_dir = dir;
	memset(&p1, 0, sizeof(p1));
	assert_int_equal(hx_dp_open_quiet(&p1.dp, &o), 0);
	p1.ncpus = p1.dp.ncpus;
	assert_true(p1.dp.meter_ident != 0);
	ident = p1.dp.meter_ident;
	assert_int_equal(apply_g(&p1, "true", ", on-loss: fail-open"), 0);
	hx_udp4(&p, "198.18.0.10", DST, 1000, 53, 0);
	assert_int_equal(hx_send(&p1, &p, 3, NULL), 3);
	a = mkey(&p1, "198.18.0.10");
	dp_close(&p1.dp);

	/* A restart that kept the pins: same identity, the totals go on. */
	memset(&p2, 0, sizeof(p2));
	assert_int_equal(hx_dp_open_quiet(&p2.dp, &o), 0);
	p2.ncpus = p2.dp.ncpus;
	assert_int_equal(p2.dp.meter_ident, ident);
	assert_int_equal(meter_of(&p2, &a, &m), 0);
	assert_int_equal(m.pkts[LL_METER_BYPASS], 3);
	dp_close(&p2.dp);

	/* The pins removed (a reboot): a new identity, nothing carried. */
	d = opendir(dir);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
	memset(&p3, 0, sizeof(p3));
	assert_int_equal(hx_dp_open_quiet(&p3.dp, &o), 0);
	p3.ncpus = p3.dp.ncpus;
	assert_true(p3.dp.meter_ident != 0);
	assert_true(p3.dp.meter_ident != ident);
	assert_int_equal(meter_of(&p3, &a, &m), -ENOENT);
	hx_unpin_all(&p3.dp);
	dp_close(&p3.dp);
	rmdir(dir);
}

/* The agent's side (meter.c) over the real kernel map: what it sends is
 * what the kernel counted; acknowledged, nothing is sent again; a retry
 * ack sends it again; under pressure, idle acknowledged series are retired
 * (deleted from ll_meter), and a retired key that comes back is a new
 * series (a later born) from 0.
 */
struct sent {
	uint64_t seq[64];
	size_t n_seq, n_keys;
	struct wire_meter_entry e[256];
};

static void drain_frames(struct conn *peer, struct wire_msg *msg, struct sent *s)
{
	memset(s, 0, sizeof(*s));
	conn_read(peer);
	while (conn_next(peer, msg) > 0) {
		assert_int_equal(msg->type, WIRE_METER);
		assert_true(s->n_seq < 64);
		s->seq[s->n_seq++] = msg->meter.seq;
		for (uint32_t i = 0; i < msg->meter.n && s->n_keys < 256; i++)
			s->e[s->n_keys++] = msg->meter.e[i];
	}
}

static void ack_all(struct meter *mt, uint64_t ident, const struct sent *s, uint8_t status)
{
	for (size_t i = 0; i < s->n_seq; i++) {
		struct wire_meter_ack a = {.ident = ident, .seq = s->seq[i], .status = status};

		meter_on_ack(mt, ident, &a);
	}
}

static void test_agent_meter_step(void **state)
{
	struct fx *fx = *state, small;
	struct dp_opts o = {.max_keys = HX_MAX_KEYS, .max_meter_keys = 8};
	struct wire_msg *out = malloc(sizeof(*out)), *in = malloc(sizeof(*in));
	struct conn c, peer;
	struct meter mt;
	struct sent *s = calloc(1, sizeof(*s));
	uint64_t t = 1000 * NSEC_PER_SEC, born0 = 0;
	struct ll_flow_key *k;
	struct ll_meter *v;
	size_t n;
	int sv[2];
	const int nkeys = 40; /* > half of the 8 keys' entries: under pressure */

	if (!fx)
		skip();
	assert_non_null(out);
	assert_non_null(in);
	memset(&small, 0, sizeof(small));
	assert_int_equal(hx_dp_open_quiet(&small.dp, &o), 0);
	hx_unpin_all(&small.dp);
	small.ncpus = small.dp.ncpus;
	assert_int_equal(apply_g(&small, "true", ", on-loss: fail-open"), 0);
	for (int i = 0; i < nkeys; i++) {
		char src[32];
		struct pkt p;

		snprintf(src, sizeof(src), "198.18.3.%d", 1 + i);
		hx_udp4(&p, src, DST, 1000, 53, 0);
		assert_int_equal(hx_send(&small, &p, 1 + i % 3, NULL), 1 + i % 3);
	}
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	conn_init(&c, sv[0]);
	conn_init(&peer, sv[1]);
	assert_int_equal(meter_init(&mt), 0);

	/* At most max_queue keys a scan: the rest carry over to the next. */
	mt.max_queue = 16;
	{
		size_t got = 0, rounds = 0;
		bool seen[64] = {false};

		while (got < (size_t)nkeys && rounds < 5) {
			meter_step(&mt, &small.dp, &c, out, "gw-1", 7,
				   t - 10 * NSEC_PER_SEC + rounds * 2 * NSEC_PER_SEC);
			conn_flush(&c);
			drain_frames(&peer, in, s);
			assert_true(s->n_keys <= 16);
			for (size_t i = 0; i < s->n_keys; i++) {
				unsigned last = ntohl(s->e[i].key.addr[3]) & 0xff;

				assert_false(seen[last]); /* each key once */
				seen[last] = true;
			}
			got += s->n_keys;
			ack_all(&mt, small.dp.meter_ident, s, WIRE_METER_RECORDED);
			rounds++;
		}
		assert_int_equal(got, nkeys);
		assert_int_equal(rounds, 3); /* 16 + 16 + 8 */
	}
	meter_free(&mt);
	assert_int_equal(meter_init(&mt), 0); /* an agent restart: all sent again */

	/* The first scan sends every key, with what the kernel counted. */
	meter_step(&mt, &small.dp, &c, out, "gw-1", 7, t);
	conn_flush(&c);
	drain_frames(&peer, in, s);
	assert_int_equal(s->n_keys, nkeys);
	for (size_t i = 0; i < s->n_keys; i++) {
		unsigned last = ntohl(s->e[i].key.addr[3]) & 0xff;

		assert_int_equal(s->e[i].pkts[LL_METER_BYPASS], 1 + (last - 1) % 3);
		assert_true(s->e[i].born != 0);
		if (last == 1)
			born0 = s->e[i].born;
	}
	assert_true(born0 != 0);
	/* A retry ack: sent again at the next scan. */
	ack_all(&mt, small.dp.meter_ident, s, WIRE_METER_RETRY);
	meter_step(&mt, &small.dp, &c, out, "gw-1", 7, t + 2 * NSEC_PER_SEC);
	conn_flush(&c);
	drain_frames(&peer, in, s);
	assert_int_equal(s->n_keys, nkeys);
	/* Recorded: nothing more to send. */
	ack_all(&mt, small.dp.meter_ident, s, WIRE_METER_RECORDED);
	meter_step(&mt, &small.dp, &c, out, "gw-1", 7, t + 4 * NSEC_PER_SEC);
	conn_flush(&c);
	drain_frames(&peer, in, s);
	assert_int_equal(s->n_keys, 0);
	/* Idle past METER_IDLE_NS under pressure: retired from the map. */
	meter_step(&mt, &small.dp, &c, out, "gw-1", 7, t + METER_IDLE_NS + 5 * NSEC_PER_SEC);
	conn_flush(&c);
	drain_frames(&peer, in, s);
	assert_int_equal(s->n_keys, 0);
	assert_int_equal(mt.retired, nkeys);
	assert_int_equal(dp_meter_read(&small.dp, &k, &v, &n), 0);
	assert_int_equal(n, 1); /* the overflow entry stays */
	free(k);
	free(v);
	/* The first key comes back: a new series from 0. */
	{
		struct pkt p;

		hx_udp4(&p, "198.18.3.1", DST, 1000, 53, 0);
		assert_int_equal(hx_send(&small, &p, 2, NULL), 2);
	}
	meter_step(&mt, &small.dp, &c, out, "gw-1", 7, t + METER_IDLE_NS + 7 * NSEC_PER_SEC);
	conn_flush(&c);
	drain_frames(&peer, in, s);
	assert_int_equal(s->n_keys, 1);
	assert_int_equal(s->e[0].pkts[LL_METER_BYPASS], 2);
	assert_true(s->e[0].born > born0);
	meter_free(&mt);
	conn_close(&c);
	conn_close(&peer);
	dp_close(&small.dp);
	free(s);
	free(in);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_meter_per_key, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_meter_flow_keys, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_unmetered_no_entries, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_meter_bypass_fallback, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_meter_survives_bucket_delete, hx_setup,
					    hx_teardown),
	    cmocka_unit_test_setup_teardown(test_meter_full_counted, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_meter_ident_pins, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_agent_meter_step, hx_setup, hx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
