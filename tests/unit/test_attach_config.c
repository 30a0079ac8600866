// SPDX-License-Identifier: MIT
/*
 * The agent file's attach: section (reference §4): direct by default,
 * multiprog with a run priority, and each refused value reported at its
 * FILE:LINE:COL with its exact message. Each case writes its own agent file
 * (and an empty-rules policy beside it) into a temporary directory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/config.h"

static char dir[] = "/tmp/ll-attach-cfg.XXXXXX";

static int setup(void **state)
{
	char path[256];
	FILE *f;

	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/policy.yaml", dir);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fputs("version: 1\ndefault: pass\n", f);
	return fclose(f);
}

static int teardown(void **state)
{
	char path[256];

	(void)state;
	snprintf(path, sizeof(path), "%s/policy.yaml", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/agent.yaml", dir);
	unlink(path);
	return rmdir(dir);
}

/* Load an agent file whose last lines are attach_lines; rc and err out. */
static int load(const char *attach_lines, struct cfg_agent *a, struct cfg_err *err)
{
	static struct cfg_policy pol;
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/agent.yaml", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "interfaces: [{name: eth0}]\npolicy: policy.yaml\n%s", attach_lines);
	assert_int_equal(fclose(f), 0);
	memset(a, 0, sizeof(*a));
	return cfg_agent_load(path, a, &pol, err);
}

static void expect_err(const char *attach_lines, const char *at, const char *msg)
{
	struct cfg_agent *a = calloc(1, sizeof(*a));
	char want[512];
	struct cfg_err err;

	assert_non_null(a);
	assert_int_equal(load(attach_lines, a, &err), -EINVAL);
	snprintf(want, sizeof(want), "%s/agent.yaml:%s: %s", dir, at, msg);
	assert_string_equal(err.msg, want);
	free(a);
}

static void test_default_is_direct(void **state)
{
	struct cfg_agent *a = calloc(1, sizeof(*a));
	struct cfg_err err;

	(void)state;
	assert_non_null(a);
	assert_int_equal(load("", a, &err), 0);
	assert_int_equal(a->attach_mode, CFG_ATTACH_DIRECT);
	assert_int_equal(a->attach_priority, CFG_DEFAULT_ATTACH_PRIORITY);
	assert_string_equal(cfg_attach_mode_name(a->attach_mode), "direct");
	free(a);
}

static void test_multiprog_with_priority(void **state)
{
	struct cfg_agent *a = calloc(1, sizeof(*a));
	struct cfg_err err;

	(void)state;
	assert_non_null(a);
	assert_int_equal(load("attach: {mode: multiprog, priority: 20}\n", a, &err), 0);
	assert_int_equal(a->attach_mode, CFG_ATTACH_MULTIPROG);
	assert_int_equal(a->attach_priority, 20);
	assert_int_equal(load("attach:\n  mode: multiprog\n", a, &err), 0);
	assert_int_equal(a->attach_priority, CFG_DEFAULT_ATTACH_PRIORITY);
	assert_int_equal(load("attach: {mode: multiprog, priority: 0}\n", a, &err), 0);
	assert_int_equal(a->attach_priority, 0);
	assert_int_equal(load("attach: {mode: direct}\n", a, &err), 0);
	assert_int_equal(a->attach_mode, CFG_ATTACH_DIRECT);
	free(a);
}

static void test_bad_mode(void **state)
{
	(void)state;
	expect_err("attach: {mode: chained}\n", "3:16",
		   "attach: mode 'chained' is not valid (expected one of: direct, multiprog)");
}

static void test_priority_out_of_range(void **state)
{
	(void)state;
	expect_err("attach: {mode: multiprog, priority: 1001}\n", "3:37",
		   "attach: priority '1001' is out of range (expected 0..1000)");
}

static void test_priority_not_a_number(void **state)
{
	(void)state;
	expect_err("attach: {mode: multiprog, priority: high}\n", "3:37",
		   "attach: priority 'high' is not an integer (expected digits only, e.g. 1)");
}

static void test_priority_without_multiprog(void **state)
{
	(void)state;
	expect_err("attach: {priority: 10}\n", "3:20",
		   "attach: priority applies only to mode: multiprog (expected mode: multiprog "
		   "with it, or no priority)");
}

static void test_unknown_key(void **state)
{
	(void)state;
	expect_err("attach: {mode: multiprog, prio: 10}\n", "3:27",
		   "unknown key 'prio' in attach (expected one of: mode, priority)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_is_direct),
	    cmocka_unit_test(test_multiprog_with_priority),
	    cmocka_unit_test(test_bad_mode),
	    cmocka_unit_test(test_priority_out_of_range),
	    cmocka_unit_test(test_priority_not_a_number),
	    cmocka_unit_test(test_priority_without_multiprog),
	    cmocka_unit_test(test_unknown_key),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
