// SPDX-License-Identifier: MIT
/*
 * Linked into every cmocka test binary (the Makefile wraps
 * _cmocka_run_group_tests with -Wl,--wrap): LL_TEST_FILTER=PATTERN runs
 * only the tests whose names match PATTERN (cmocka's filter: * and ?), so
 * `make test T=test_wire:test_decode*` runs one test of one binary. cmocka
 * 1.1 takes a filter only through cmocka_set_test_filter, not from the
 * environment.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

int __real__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
				   const size_t num_tests, CMFixtureFunction group_setup,
				   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
				   const size_t num_tests, CMFixtureFunction group_setup,
				   CMFixtureFunction group_teardown);

int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
				   const size_t num_tests, CMFixtureFunction group_setup,
				   CMFixtureFunction group_teardown)
{
	const char *f = getenv("LL_TEST_FILTER");

	if (f && *f)
		cmocka_set_test_filter(f);
	return __real__cmocka_run_group_tests(group_name, tests, num_tests, group_setup,
					      group_teardown);
}
