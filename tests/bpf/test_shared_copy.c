// SPDX-License-Identifier: MIT
/*
 * attach: {mode: multiprog} hands libxdp a second copy of the program,
 * opened from the embedded object, whose every map is the loaded one's
 * (attach_shared_copy). On the real kernel: the copy loads (here as plain
 * XDP; libxdp would load it as an extension of its dispatcher), uses
 * exactly the loaded program's maps, and charges the same buckets: a burst
 * spent through one program is spent for the other, and the limit's
 * counters see both.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bpf/harness.h"
#include "agent/attach.h"

#define BURST 5

static const char policy[] = "version: 1\n"
			     "limits:\n"
			     "  - {name: per-client, key: src-ip, rate: 1, burst: 5}\n"
			     "rules:\n"
			     "  - {name: udp, match: {proto: udp}, limits: [per-client]}\n";

struct copy {
	struct bpf_object *obj;
	int prog_fd;
};

static struct copy copy_load(struct fx *fx)
{
	struct copy c = {0};
	struct bpf_program *p;

	c.obj = attach_shared_copy(fx->dp.skel->obj, fx->dp.skel->skeleton->data,
				   fx->dp.skel->skeleton->data_sz);
	assert_non_null(c.obj);
	assert_int_equal(bpf_object__load(c.obj), 0);
	p = bpf_object__find_program_by_name(c.obj, ATTACH_PROG_NAME);
	assert_non_null(p);
	c.prog_fd = bpf_program__fd(p);
	assert_true(c.prog_fd >= 0);
	return c;
}

/* Map ids of a loaded program, sorted; returns how many. */
static uint32_t map_ids(int prog_fd, uint32_t *ids, uint32_t max)
{
	struct bpf_prog_info info = {.nr_map_ids = max, .map_ids = (uint64_t)(unsigned long)ids};
	uint32_t len = sizeof(info);

	assert_int_equal(bpf_obj_get_info_by_fd(prog_fd, &info, &len), 0);
	assert_true(info.nr_map_ids <= max);
	for (uint32_t i = 1; i < info.nr_map_ids; i++)
		for (uint32_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
			uint32_t t = ids[j];

			ids[j] = ids[j - 1];
			ids[j - 1] = t;
		}
	return info.nr_map_ids;
}

static void test_copy_uses_the_same_maps(void **state)
{
	struct fx *fx = FX(state);
	uint32_t a[64], b[64], na, nb;
	struct copy c = copy_load(fx);

	na = map_ids(fx->dp.prog_fd, a, 64);
	nb = map_ids(c.prog_fd, b, 64);
	assert_true(na > 0);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na * sizeof(a[0]));
	bpf_object__close(c.obj);
}

static void test_copy_charges_the_same_buckets(void **state)
{
	struct fx *fx = FX(state);
	struct ll_limit_stats st;
	struct pkt p;
	struct copy c;
	int passed = 0, v;

	assert_int_equal(hx_apply(fx, policy), 0);
	c = copy_load(fx);
	hx_udp4(&p, "198.18.0.7", "198.19.0.1", 1000, 53, 16);
	/* Three through the copy, then the original: five pass in all, not ten. */
	for (int i = 0; i < 3; i++) {
		v = hx_run_fd(c.prog_fd, p.buf, p.len, 1);
		assert_true(v >= 0);
		passed += v == XDP_PASS;
	}
	assert_int_equal(passed, 3);
	v = hx_send(fx, &p, 5, NULL);
	assert_int_equal(v, BURST - 3);
	v = hx_run_fd(c.prog_fd, p.buf, p.len, 1);
	assert_int_equal(v, XDP_DROP);
	st = hx_stats_of(fx, "per-client");
	assert_int_equal(st.allowed_pkts, BURST);
	assert_int_equal(st.denied_pkts, 4);
	bpf_object__close(c.obj);
	/* The loaded program keeps its maps once the copy is gone. */
	assert_int_equal(hx_run(fx, &p, 1), XDP_DROP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_copy_uses_the_same_maps, hx_setup, hx_teardown),
	    cmocka_unit_test_setup_teardown(test_copy_charges_the_same_buckets, hx_setup,
					    hx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
