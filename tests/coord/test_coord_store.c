// SPDX-License-Identifier: MIT
/*
 * The coordinator's durable state: every run gets an epoch above every
 * earlier one, a corrupt or torn log never makes an epoch be reused, and
 * usage totals read back as the highest recorded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "lib/lease_clock.h"
#include "coord/store.h"
#include "lib/log.h"

static int dir_setup(void **state)
{
	char *dir = strdup("/tmp/ll-store-XXXXXX");

	if (!dir || !mkdtemp(dir))
		return -1;
	*state = dir;
	return 0;
}

static int dir_teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", (char *)*state);
	free(*state);
	return system(cmd) == 0 ? 0 : -1;
}

static uint64_t open_epoch(const char *dir)
{
	struct coord_store s;
	uint64_t e;

	assert_int_equal(coord_store_open(&s, dir), 0);
	e = s.epoch;
	coord_store_close(&s);
	return e;
}

static void append_garbage(const char *dir, const char *file, size_t n)
{
	char path[256], junk[64];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(write(fd, junk, n), (ssize_t)n);
	close(fd);
}

static void flip_byte(const char *dir, const char *file, off_t off)
{
	char path[256];
	uint8_t b;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0xff;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

/* The grant key (docs/protocol.md, "Adoption"): made once, random, 0600,
 * the same on every later open; a file of another size, or a symlink, is
 * refused rather than replaced (a new key proves no live grant).
 */
static void test_grant_key_kept(void **state)
{
	const char *dir = *state;
	uint8_t k1[GRANT_KEY_LEN], zero[GRANT_KEY_LEN] = {0};
	struct coord_store s;
	char path[256], other[256];
	struct stat st;

	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_true(s.grant_key_new);
	memcpy(k1, s.grant_key, sizeof(k1));
	assert_memory_not_equal(k1, zero, sizeof(k1));
	coord_store_close(&s);
	snprintf(path, sizeof(path), "%s/grant.key", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, GRANT_KEY_LEN);

	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_false(s.grant_key_new);
	assert_memory_equal(s.grant_key, k1, sizeof(k1));
	coord_store_close(&s);

	/* grant-key: a shared key is read where coord.yaml says, never made. */
	snprintf(other, sizeof(other), "%s/shared.key", dir);
	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_int_equal(coord_store_grant_key(&s, other), -ENOENT);
	coord_store_close(&s);
	assert_int_equal(link(path, other), 0);
	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_int_equal(coord_store_grant_key(&s, other), 0);
	assert_memory_equal(s.grant_key, k1, sizeof(k1));
	coord_store_close(&s);
	assert_int_equal(unlink(other), 0);

	assert_int_equal(truncate(path, GRANT_KEY_LEN - 1), 0);
	assert_int_equal(coord_store_open(&s, dir), -EINVAL);
	snprintf(other, sizeof(other), "%s/elsewhere", dir);
	assert_int_equal(rename(path, other), 0);
	assert_int_equal(truncate(other, GRANT_KEY_LEN), 0);
	assert_int_equal(symlink(other, path), 0);
	assert_true(coord_store_open(&s, dir) < 0);
}

static void test_epochs_increase(void **state)
{
	const char *dir = *state;

	assert_int_equal(open_epoch(dir), 1);
	assert_int_equal(open_epoch(dir), 2);
	assert_int_equal(open_epoch(dir), 3);
}

/* A record torn by a crash costs exactly one step, as a clean restart does:
 * its epoch was never used (a run uses one only once it is fsynced). A
 * torn record that cost 2^20 + 1 epochs put a coordinator beyond every
 * agent's bound on a step, and the fleet refused it.
 */
static void test_torn_tail_costs_one_step(void **state)
{
	const char *dir = *state;
	char path[256];
	int fd;

	assert_int_equal(open_epoch(dir), 1);
	assert_int_equal(open_epoch(dir), 2);
	append_garbage(dir, "epoch.log", 7); /* a torn write of epoch 3 */
	assert_int_equal(open_epoch(dir), 3);
	/* The tail was cut, so the log stays readable: the next run goes on. */
	assert_int_equal(open_epoch(dir), 4);
	append_garbage(dir, "epoch.log", 5); /* printf xxxxx >> epoch.log */
	assert_int_equal(open_epoch(dir), 5);
	/* A whole record of zeros at the end: the file grew, its data never
	 * reached the disk.
	 */
	snprintf(path, sizeof(path), "%s/epoch.log", dir);
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, (char[24]){0}, 24), 24);
	close(fd);
	assert_int_equal(open_epoch(dir), 6);
	assert_int_equal(open_epoch(dir), 7);
}

static void test_corrupt_record_skipped_conservatively(void **state)
{
	const char *dir = *state;
	uint64_t e;

	assert_int_equal(open_epoch(dir), 1);
	assert_int_equal(open_epoch(dir), 2);
	assert_int_equal(open_epoch(dir), 3);
	flip_byte(dir, "epoch.log", 2 * 24 + 8); /* epoch 3's value: CRC fails */
	e = open_epoch(dir);
	assert_true(e >= 4); /* never back to 3, even though only 1 and 2 read well */
	/* A corrupt record with a good one after it held less than that one:
	 * it costs nothing more.
	 */
	flip_byte(dir, "epoch.log", 0 * 24 + 8); /* epoch 1's value */
	assert_int_equal(open_epoch(dir), e + 1);
}

static void test_bump(void **state)
{
	struct coord_store s;

	assert_int_equal(coord_store_open(&s, *state), 0);
	assert_int_equal(s.epoch, 1);
	assert_int_equal(coord_store_bump(&s, 10), 0);
	assert_int_equal(s.epoch, 10);
	assert_int_equal(coord_store_bump(&s, 5), 0); /* never backwards */
	assert_int_equal(s.epoch, 10);
	coord_store_close(&s);
	assert_int_equal(open_epoch(*state), 11);
}

/* A bump record that reads corrupt (its epoch was far ahead) never lets the
 * epoch go back below it; a bump beyond the bound is refused.
 */
static void test_corrupt_bump_never_lowers(void **state)
{
	struct coord_store s;
	uint64_t e;

	assert_int_equal(coord_store_open(&s, *state), 0);
	assert_int_equal(coord_store_bump(&s, 1000), 0);
	assert_int_equal(coord_store_bump(&s, 1000 + LEASE_EPOCH_STEP_MAX + 1), -ERANGE);
	assert_int_equal(coord_store_bump(&s, UINT64_MAX), -ERANGE);
	assert_int_equal(s.epoch, 1000);
	coord_store_close(&s);
	flip_byte(*state, "epoch.log", 1 * 24 + 8); /* the 1000 record */
	e = open_epoch(*state);
	assert_true(e > 1000);
}

/* A state directory that was initialised and lost its epoch log refuses to
 * open (the epochs used are unknown) until the documented recovery removes
 * its marker; it never starts silently at epoch 1.
 */
static void test_lost_epoch_log_refused(void **state)
{
	const char *dir = *state;
	struct coord_store s;
	char path[256];

	assert_int_equal(open_epoch(dir), 1);
	assert_int_equal(open_epoch(dir), 2);
	snprintf(path, sizeof(path), "%s/epoch.log", dir);
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(coord_store_open(&s, dir), -ESTALE);
	coord_store_close(&s);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(coord_store_open(&s, dir), -ESTALE);
	coord_store_close(&s);
	snprintf(path, sizeof(path), "%s/initialised", dir);
	assert_int_equal(unlink(path), 0); /* the recovery step */
	assert_int_equal(open_epoch(dir), 1);
}

/* What a restarted coordinator finds for (holder, limit): the store opened
 * again (one epoch more), its totals looked up, closed.
 */
static int read_back(const char *dir, const char *holder, const char *limit, uint64_t *fb,
		     uint64_t *bp)
{
	struct coord_store s;
	int err = coord_store_open(&s, dir);

	if (!err)
		coord_store_usage_get(&s, holder, limit, fb, bp);
	coord_store_close(&s);
	return err;
}

/* However many reports come, usage.log stays bounded by the holders and
 * limits it names, and compaction keeps every pair's highest totals.
 */
/* Issue 25, F: past 4096 distinct (holder, limit) pairs every append used
 * to rewrite the whole log (quadratic, on the grant path). A compaction
 * now waits until the log has doubled since the last one: 5000 holders
 * and 3000 more reports cost one rewrite, and every total reads back.
 */
static void test_usage_compaction_amortised(void **state)
{
	const char *dir = *state;
	struct coord_store s;
	char holder[32];
	uint64_t fb, bp;

	assert_int_equal(coord_store_open(&s, dir), 0);
	for (uint64_t i = 0; i < 8000; i++) {
		snprintf(holder, sizeof(holder), "gw-%llu", (unsigned long long)(i % 5000));
		assert_int_equal(coord_store_usage(&s, holder, "g", i + 1, 0), 0);
	}
	print_message("8000 records of 5000 holders: %llu compactions\n",
		      (unsigned long long)s.usage_compactions);
	assert_true(s.usage_compactions >= 1 && s.usage_compactions <= 2);
	coord_store_close(&s);
	assert_int_equal(read_back(dir, "gw-42", "g", &fb, &bp), 0);
	assert_int_equal(fb, 5043); /* its second report: i = 5042 */
	assert_int_equal(read_back(dir, "gw-4999", "g", &fb, &bp), 0);
	assert_int_equal(fb, 5000);
}

static void test_usage_log_bounded(void **state)
{
	const char *dir = *state;
	struct coord_store s;
	uint64_t fb, bp;
	char path[256];
	struct stat st;

	assert_int_equal(coord_store_open(&s, dir), 0);
	for (uint64_t i = 1; i <= 5000; i++)
		assert_int_equal(coord_store_usage(&s, i % 2 ? "gw-1" : "gw-2", "g", i, 2 * i), 0);
	coord_store_close(&s);
	snprintf(path, sizeof(path), "%s/usage.log", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_size < 4096 * 128); /* compacted, not 5000 records */
	assert_int_equal(read_back(dir, "gw-1", "g", &fb, &bp), 0);
	assert_int_equal(fb, 4999);
	assert_int_equal(bp, 9998);
	assert_int_equal(read_back(dir, "gw-2", "g", &fb, &bp), 0);
	assert_int_equal(fb, 5000);
	assert_int_equal(bp, 10000);
}

static void test_usage_highest_wins(void **state)
{
	struct coord_store s;
	uint64_t fb, bp;

	assert_int_equal(coord_store_open(&s, *state), 0);
	assert_int_equal(coord_store_usage(&s, "gw-1", "tenant", 5, 0), 0);
	assert_int_equal(coord_store_usage(&s, "gw-1", "tenant", 9, 3), 0);
	assert_int_equal(coord_store_usage(&s, "gw-2", "tenant", 100, 100), 0);
	coord_store_close(&s);
	assert_int_equal(read_back(*state, "gw-1", "tenant", &fb, &bp), 0);
	assert_int_equal(fb, 9);
	assert_int_equal(bp, 3);
	assert_int_equal(read_back(*state, "gw-1", "other", &fb, &bp), 0);
	assert_int_equal(fb + bp, 0);
	/* A corrupt record is not believed. */
	flip_byte(*state, "usage.log", 8);
	assert_int_equal(read_back(*state, "gw-1", "tenant", &fb, &bp), 0);
	assert_int_equal(fb, 9);
}

/* Issue 25, F (the rest): a HELLO read the whole usage.log for its
 * holder's totals, O(records) in the event loop. The store keeps them in
 * memory from the open on: with the file gone from under it, every total
 * still answers, the ones read at the open and the ones appended since.
 */
static void test_usage_totals_from_memory(void **state)
{
	const char *dir = *state;
	struct coord_store s;
	char path[256];
	uint64_t fb, bp;

	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_int_equal(coord_store_usage(&s, "gw-1", "g", 7, 1), 0);
	coord_store_close(&s);
	assert_int_equal(coord_store_open(&s, dir), 0);
	assert_int_equal(coord_store_usage(&s, "gw-2", "g", 3, 4), 0);
	snprintf(path, sizeof(path), "%s/usage.log", dir);
	assert_int_equal(unlink(path), 0);
	coord_store_usage_get(&s, "gw-1", "g", &fb, &bp);
	assert_int_equal(fb, 7);
	assert_int_equal(bp, 1);
	coord_store_usage_get(&s, "gw-2", "g", &fb, &bp);
	assert_int_equal(fb, 3);
	assert_int_equal(bp, 4);
	coord_store_usage_get(&s, "gw-3", "g", &fb, &bp);
	assert_int_equal(fb + bp, 0);
	/* A compaction writes them out from memory: the log is whole again. */
	assert_int_equal(coord_store_usage_compact(&s), 0);
	coord_store_close(&s);
	assert_int_equal(read_back(dir, "gw-1", "g", &fb, &bp), 0);
	assert_int_equal(fb, 7);
	assert_int_equal(read_back(dir, "gw-2", "g", &fb, &bp), 0);
	assert_int_equal(bp, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_epochs_increase, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_grant_key_kept, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_torn_tail_costs_one_step, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_bump_never_lowers, dir_setup,
					    dir_teardown),
	    cmocka_unit_test_setup_teardown(test_lost_epoch_log_refused, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_corrupt_record_skipped_conservatively, dir_setup,
					    dir_teardown),
	    cmocka_unit_test_setup_teardown(test_bump, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_totals_from_memory, dir_setup,
					    dir_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_highest_wins, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_log_bounded, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_usage_compaction_amortised, dir_setup,
					    dir_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
