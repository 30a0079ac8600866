// SPDX-License-Identifier: MIT
/*
 * The datapath tests' harness (tests/bpf/harness.h): compiled once into the
 * test archive (libll-test.a) that every BPF test binary links, so each
 * binary still has one copy of the state below.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bpf/harness.h"

/* Set once the first load finds no privilege: every later test skips at once. */
static bool hx_no_privilege;

/* A map pinned by name that the loader forgets to unpin is pinned under
 * libbpf's default root, /sys/fs/bpf, and re-adopted, contents and all, by
 * every later load anywhere on the machine. So this process gets a bpffs
 * of its own (a private mount namespace; nothing propagates back) before its
 * first load: its pins, forgotten or not, are seen by no one else and go
 * with it. Without the privilege to do so, the host's bpffs is used as is.
 */
static bool hx_bpffs_private;

static void hx_private_bpffs(void)
{
	if (hx_bpffs_private)
		return;
	hx_bpffs_private = true;
	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return;
	mount("bpf", "/sys/fs/bpf", "bpf", 0, NULL);
}

void hx_unpin_all(struct dp *dp)
{
	struct bpf_map *map = NULL;

	while ((map = bpf_object__next_map(dp->skel->obj, map)))
		if (bpf_map__is_pinned(map))
			bpf_map__unpin(map, NULL);
}

int hx_dp_open_quiet(struct dp *dp, const struct dp_opts *o)
{
	FILE *tmp = tmpfile();
	int saved = -1, err, c;

	fflush(stderr);
	if (tmp) {
		saved = dup(STDERR_FILENO);
		if (saved >= 0)
			dup2(fileno(tmp), STDERR_FILENO);
	}
	err = dp_open(dp, o);
	fflush(stderr);
	if (saved >= 0) {
		dup2(saved, STDERR_FILENO);
		close(saved);
	}
	if (tmp) {
		if (err && err != -EPERM && err != -EACCES) {
			rewind(tmp);
			while ((c = fgetc(tmp)) != EOF)
				fputc(c, stderr);
		}
		fclose(tmp);
	}
	return err;
}

int hx_setup_keys(void **state, uint32_t max_keys)
{
	struct dp_opts o = {.pin_dir = NULL, .max_keys = max_keys};
	struct fx *fx;
	int err;

	*state = NULL;
	if (hx_no_privilege)
		return 0; /* the test skips */
	fx = calloc(1, sizeof(*fx));
	if (!fx)
		return -1;
	log_set_level(LOG_WARN);
	hx_private_bpffs();
	err = hx_dp_open_quiet(&fx->dp, &o);
	if (err == -EPERM || err == -EACCES) {
		hx_no_privilege = true;
		free(fx);
		return 0;
	}
	if (err) {
		print_error("dp_open: %s\n", strerror(-err));
		free(fx);
		return -1;
	}
	hx_unpin_all(&fx->dp);
	fx->ncpus = fx->dp.ncpus;
	*state = fx;
	return 0;
}

int hx_teardown(void **state)
{
	struct fx *fx = *state;

	if (fx) {
		dp_close(&fx->dp);
		free(fx);
	}
	*state = NULL;
	return 0;
}

int hx_apply_as(struct fx *fx, const char *yaml, bool coordinated)
{
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err e = {0};
	char err[256] = "";
	int rc;

	if (!cp)
		return -ENOMEM;
	rc = cfg_policy_parse("test-policy.yaml", yaml, strlen(yaml), !coordinated, cp, &e);
	if (rc) {
		print_error("%s\n", e.msg);
		free(cp);
		return rc;
	}
	rc = policy_apply(&fx->dp, cp, err, sizeof(err));
	if (rc && rc != -ESTALE)
		print_error("policy apply: %s\n", err);
	free(cp);
	return rc;
}

static int hx_vapplyf(struct fx *fx, bool coordinated, const char *fmt, va_list ap)
{
	char yaml[HX_YAML_LEN];
	int n = vsnprintf(yaml, sizeof(yaml), fmt, ap);

	if (n < 0 || (size_t)n >= sizeof(yaml))
		return -E2BIG;
	return hx_apply_as(fx, yaml, coordinated);
}

int hx_applyf(struct fx *fx, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = hx_vapplyf(fx, false, fmt, ap);
	va_end(ap);
	return rc;
}

int hx_applyf_global(struct fx *fx, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = hx_vapplyf(fx, true, fmt, ap);
	va_end(ap);
	return rc;
}

int hx_run_fd(int prog_fd, const uint8_t *frame, size_t len, uint32_t repeat)
{
	uint8_t in[PKT_MAX + HX_MAX_META] = {0};
	struct xdp_md ctx = {0};
	size_t meta = 0;
	int err;

	if (len < PKT_ETH_LEN)
		meta = (PKT_ETH_LEN - len + 3) & ~3u;
	memcpy(in + meta, frame, len);
	LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = in, .data_size_in = (uint32_t)(meta + len),
		    .repeat = repeat);
	if (meta) {
		ctx.data = (uint32_t)meta;
		ctx.data_end = (uint32_t)(meta + len);
		o.ctx_in = &ctx;
		o.ctx_size_in = sizeof(ctx);
	}
	err = bpf_prog_test_run_opts(prog_fd, &o);
	if (err)
		return -errno;
	return (int)o.retval;
}

int hx_send(struct fx *fx, const struct pkt *p, int n, int *verdicts)
{
	int passed = 0;

	for (int i = 0; i < n; i++) {
		int v = hx_run(fx, p, 1);

		if (v < 0)
			return -1;
		if (verdicts)
			verdicts[i] = v;
		passed += v == XDP_PASS;
	}
	return passed;
}

int hx_percpu_sum(int fd, uint32_t key, unsigned int ncpus, size_t size, void *out)
{
	size_t stride = (size + 7) & ~(size_t)7, nwords = size / sizeof(uint64_t);
	uint8_t *buf = calloc(ncpus, stride);
	uint64_t sum[16] = {0}, w;
	int err = 0;

	if (!buf || nwords > 16) {
		free(buf);
		return -ENOMEM;
	}
	if (bpf_map_lookup_elem(fd, &key, buf)) {
		err = -errno;
	} else {
		for (unsigned int c = 0; c < ncpus; c++) {
			for (size_t i = 0; i < nwords; i++) {
				memcpy(&w, buf + c * stride + i * sizeof(w), sizeof(w));
				sum[i] += w;
			}
		}
	}
	memcpy(out, sum, size);
	free(buf);
	return err;
}

struct ll_limit_stats hx_limit_stats(struct fx *fx, int id)
{
	struct ll_limit_stats s;

	assert_int_equal(
	    hx_percpu_sum(fx->dp.limit_stats_fd, (uint32_t)id, fx->ncpus, sizeof(s), &s), 0);
	return s;
}

struct ll_rule_stats hx_rule_stats(struct fx *fx, uint32_t idx)
{
	struct ll_rule_stats s;

	assert_int_equal(hx_percpu_sum(fx->dp.rule_stats_fd, idx, fx->ncpus, sizeof(s), &s), 0);
	return s;
}

void hx_parse_stats(struct fx *fx, uint64_t out[LL_PARSE_MAX])
{
	for (uint32_t r = 0; r < LL_PARSE_MAX; r++)
		assert_int_equal(
		    hx_percpu_sum(fx->dp.parse_stats_fd, r, fx->ncpus, sizeof(uint64_t), &out[r]),
		    0);
}

int hx_limit(struct fx *fx, const char *name, struct ll_limit_cfg *cfg)
{
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	int id;

	assert_non_null(pol);
	assert_int_equal(dp_policy_read(fx->dp.policy_fd, fx->dp.state_fd, pol), 0);
	id = policy_limit_id(pol, name);
	if (cfg) {
		memset(cfg, 0, sizeof(*cfg));
		if (id >= 0)
			*cfg = pol->limits[id];
	}
	free(pol);
	return id;
}

int hx_limit_id(struct fx *fx, const char *name)
{
	int id = hx_limit(fx, name, NULL);

	assert_true(id >= 0);
	return id;
}

void hx_v4_mapped(uint32_t a[4], const char *ip, uint8_t plen)
{
	uint32_t v4 = 0;

	assert_int_equal(inet_pton(AF_INET, ip, &v4), 1);
	a[0] = 0;
	a[1] = 0;
	a[2] = htonl(0x0000ffff);
	a[3] = plen ? v4 & htonl(~0u << (32 - plen)) : 0;
}

static void hx_v6(uint32_t a[4], const char *ip, uint8_t plen)
{
	uint32_t m[4];

	assert_int_equal(inet_pton(AF_INET6, ip, a), 1);
	policy_mask_v6(plen, m);
	for (int i = 0; i < 4; i++)
		a[i] &= m[i];
}

struct ll_key hx_key_addr(uint32_t uid, int family, const char *ip, uint8_t plen)
{
	struct ll_key k;

	memset(&k, 0, sizeof(k));
	k.limit_uid = uid;
	k.family = (uint8_t)family;
	if (family == 4)
		hx_v4_mapped(k.addr, ip, plen);
	else
		hx_v6(k.addr, ip, plen);
	return k;
}

int hx_bucket(struct fx *fx, const struct ll_key *k, struct ll_bucket *b)
{
	memset(b, 0, sizeof(*b));
	if (bpf_map_lookup_elem_flags(fx->dp.buckets_fd, k, b, HX_BUCKET_LOCK))
		return -errno;
	return 0;
}

int hx_flow_bucket(struct fx *fx, const struct ll_flow_key *k, struct ll_bucket *b)
{
	memset(b, 0, sizeof(*b));
	if (bpf_map_lookup_elem_flags(fx->dp.flow_buckets_fd, k, b, HX_BUCKET_LOCK))
		return -errno;
	return 0;
}

int hx_count_in(int fd, uint32_t uid)
{
	struct ll_flow_key k, next; /* room for either key kind */
	struct ll_key_head h;
	int n = 0;
	bool more = !bpf_map_get_next_key(fd, NULL, &next);

	while (more) {
		k = next;
		more = !bpf_map_get_next_key(fd, &k, &next);
		memcpy(&h, &k, sizeof(h));
		n += h.limit_uid == uid && h.family != LL_OVERFLOW_FAMILY;
	}
	return n;
}

int hx_prefix_bucket(struct fx *fx, const struct ll_key *k, struct ll_bucket *b)
{
	memset(b, 0, sizeof(*b));
	if (bpf_map_lookup_elem_flags(fx->dp.prefix_buckets_fd, k, b, HX_BUCKET_LOCK))
		return -errno;
	return 0;
}

struct hx_pool hx_pool(struct fx *fx, int id, uint32_t gen)
{
	struct ll_slice *sl = calloc(fx->ncpus, sizeof(*sl));
	struct hx_pool p;
	uint32_t k = (uint32_t)id;

	memset(&p, 0, sizeof(p));
	assert_non_null(sl);
	assert_int_equal(bpf_map_lookup_elem_flags(fx->dp.pools_fd, &k, &p.pool, BPF_F_LOCK), 0);
	assert_int_equal(bpf_map_lookup_elem(fx->dp.slices_fd, &k, sl), 0);
	for (unsigned int c = 0; c < fx->ncpus; c++) {
		if (sl[c].gen != gen)
			continue;
		p.slices += sl[c].tokens;
		if (sl[c].tokens > p.slice_max)
			p.slice_max = sl[c].tokens;
	}
	free(sl);
	return p;
}

void hx_clock_catch_up(void)
{
	uint64_t t = clock_now_ns();
	struct timespec ms = {0, 1000000};

	for (int i = 0; i < 200 && hx_coarse_ns() <= t; i++)
		nanosleep(&ms, NULL);
}

void hx_pin_cpu(void)
{
	cpu_set_t set;
	int cpu = sched_getcpu();

	assert_true(cpu >= 0);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
}

void hx_unpin_cpu(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		CPU_SET(c, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

void hx_udp4(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport,
	     size_t payload)
{
	struct pkt_layer l[] = {ETH(), IP4(src, dst), UDP(sport, dport), DATA(payload), {0}};

	assert_int_equal(pkt_build(p, l), 0);
}

void hx_tcp4(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport)
{
	struct pkt_layer l[] = {ETH(), IP4(src, dst), TCP(sport, dport), {0}};

	assert_int_equal(pkt_build(p, l), 0);
}

void hx_udp6(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport)
{
	struct pkt_layer l[] = {ETH(), IP6(src, dst), UDP(sport, dport), DATA(8), {0}};

	assert_int_equal(pkt_build(p, l), 0);
}

void hx_tcp6(struct pkt *p, const char *src, const char *dst, uint16_t sport, uint16_t dport)
{
	struct pkt_layer l[] = {ETH(), IP6(src, dst), TCP(sport, dport), {0}};

	assert_int_equal(pkt_build(p, l), 0);
}
