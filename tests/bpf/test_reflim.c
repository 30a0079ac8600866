// SPDX-License-Identifier: MIT
/*
 * The reference limiter (bench/bpf/reflim.bpf.c) that benchmarks price
 * leaseline against, run in the kernel with bpf_prog_test_run_opts: its
 * figures only mean something if it limits. One budget: a key is admitted
 * its burst, then refused. Four budgets (ref_limits, the source under /32,
 * /24, /16, /8): a packet pays all or none, so a packet that a shared /24
 * budget refuses leaves every budget of its as it was; on its own table the
 * verdicts are the same.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "pkt.h"
#include "reflim.skel.h"

#define SEC_NS 1000000000ull

struct fx {
	struct reflim_bpf *s;
	int prog;
};

static int setup(void **state)
{
	static struct fx f;

	f.s = reflim_bpf__open();
	if (!f.s)
		return -1;
	bpf_map__set_max_entries(f.s->maps.rl_keys, 1024);
	if (reflim_bpf__load(f.s)) {
		reflim_bpf__destroy(f.s);
		return -1;
	}
	f.prog = bpf_program__fd(f.s->progs.reflim);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	reflim_bpf__destroy(f->s);
	return 0;
}

/* Every key forgotten; rate 1 / interval, burst tau / interval + 1. */
static void reset(struct fx *f, int limits, int table, uint64_t interval, uint64_t tau)
{
	int fd = bpf_map__fd(f->s->maps.rl_keys);
	uint8_t zero[64] = {0}; /* struct rl_set: 4 ways of 16 bytes */
	uint64_t k;

	while (!bpf_map_get_next_key(fd, NULL, &k))
		assert_int_equal(bpf_map_delete_elem(fd, &k), 0);
	fd = bpf_map__fd(f->s->maps.rl_table);
	assert_int_equal(bpf_map__value_size(f->s->maps.rl_table), sizeof(zero));
	for (uint32_t i = 0; i < bpf_map__max_entries(f->s->maps.rl_table); i++)
		assert_int_equal(bpf_map_update_elem(fd, &i, zero, BPF_ANY), 0);
	f->s->data->ref_limits = limits;
	f->s->data->ref_table = table;
	f->s->data->ref_interval_ns = interval;
	f->s->data->ref_tau_ns = tau;
}

/* The verdict for one UDP frame from src. */
static int verdict(struct fx *f, const char *src)
{
	const struct pkt_layer l[] = {ETH(), IP4(src, "198.18.0.1"), UDP(1000, 7000), {0}};
	struct pkt p;
	LIBBPF_OPTS(bpf_test_run_opts, o);

	assert_int_equal(pkt_build(&p, l), 0);
	o.data_in = p.buf;
	o.data_size_in = p.len;
	o.repeat = 1;
	assert_int_equal(bpf_prog_test_run_opts(f->prog, &o), 0);
	return o.retval;
}

/* Budget i's word of src (as the program keys it), or 0 if it has none. */
static uint64_t word(struct fx *f, const char *src, int i)
{
	uint32_t a = inet_addr(src) & htonl(0xffffffffu << (8 * i));
	uint64_t k = (uint64_t)a | (uint64_t)(i + 1) << 40, v = 0;

	if (bpf_map_lookup_elem(bpf_map__fd(f->s->maps.rl_keys), &k, &v))
		return 0;
	return v;
}

static void test_one_budget_limits(void **state)
{
	struct fx *f = *state;

	reset(f, 1, 0, SEC_NS, 2 * SEC_NS); /* 1/s, burst 3 */
	for (int i = 0; i < 3; i++)
		assert_int_equal(verdict(f, "198.18.1.1"), XDP_PASS);
	assert_int_equal(verdict(f, "198.18.1.1"), XDP_DROP);
	assert_int_equal(verdict(f, "198.18.1.2"), XDP_PASS); /* another key */
}

/* Four budgets of burst 2: two sources of one /24 spend it, so a third is
 * refused, and that refusal moves none of its budgets: its own /32 stays as
 * made (full), the shared ones where the two admissions left them.
 */
static void four_budgets(struct fx *f, int table)
{
	reset(f, 4, table, SEC_NS, SEC_NS);
	assert_int_equal(verdict(f, "198.18.1.1"), XDP_PASS);
	assert_int_equal(verdict(f, "198.18.1.2"), XDP_PASS);
	assert_int_equal(verdict(f, "198.18.1.3"), XDP_DROP);
	assert_int_equal(verdict(f, "198.18.1.1"), XDP_DROP);
	if (table)
		return; /* the words are in rl_table's sets: the verdicts say it */
	/* 198.18.1.1's /32 moved on once; /24, /16 and /8 twice, as one. */
	assert_true(word(f, "198.18.1.1", 0) != 0);
	assert_true(word(f, "198.18.1.1", 1) == word(f, "198.18.1.1", 0) + SEC_NS);
	assert_true(word(f, "198.18.1.1", 2) == word(f, "198.18.1.1", 1));
	assert_true(word(f, "198.18.1.1", 3) == word(f, "198.18.1.1", 1));
	/* 198.18.1.3's /32: made at its packet's instant, before 198.18.1.1's
	 * moved-on one, and not moved itself.
	 */
	assert_true(word(f, "198.18.1.3", 0) != 0);
	assert_true(word(f, "198.18.1.3", 0) < word(f, "198.18.1.1", 0));
}

static void test_four_budgets_all_or_none(void **state)
{
	four_budgets(*state, 0);
}

static void test_four_budgets_own_table(void **state)
{
	four_budgets(*state, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_one_budget_limits),
	    cmocka_unit_test(test_four_budgets_all_or_none),
	    cmocka_unit_test(test_four_budgets_own_table),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
