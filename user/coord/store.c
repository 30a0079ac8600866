// SPDX-License-Identifier: MIT
/*
 * Append-only, CRC-checked records (see coord_store.h). Invariant: the epoch
 * returned by coord_store_open is strictly greater than every epoch any
 * earlier run could have used, whenever the log was readable; a log that is
 * corrupt only ever makes the caller wait longer, never reuse an epoch.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <zlib.h>

#include "lib/fs.h"
#include "lib/lease_clock.h"
#include "lib/log.h"
#include "coord/store.h"

#define EPOCH_MAGIC 0x4c4c4550u /* "LLEP" */
#define USAGE_MAGIC 0x4c4c5553u /* "LLUS" */

struct epoch_rec {
	uint32_t magic;
	uint32_t pad;
	uint64_t epoch;
	uint32_t crc; /* CRC32 of the bytes before it */
	uint32_t pad2;
};

struct usage_rec {
	uint32_t magic;
	uint32_t pad;
	char holder[WIRE_HOLDER_LEN];
	char limit[LL_NAME_LEN];
	uint64_t fallback;
	uint64_t bypass;
	uint32_t crc;
	uint32_t pad2;
};

static uint32_t rec_crc(const void *rec, size_t crc_off)
{
	return (uint32_t)crc32(0L, rec, (uInt)crc_off);
}

static int append_sync(int dir_fd, int fd, const void *rec, size_t len)
{
	ssize_t n = write(fd, rec, len);

	if (n != (ssize_t)len)
		return n < 0 ? -errno : -EIO;
	if (fsync(fd) || fsync(dir_fd))
		return -errno;
	return 0;
}

#define STORE_MARKER "initialised"
/* usage.log is compacted (one record per holder and limit) at this size. */
#define USAGE_COMPACT_RECORDS 4096

static int open_log(struct coord_store *s, const char *name)
{
	int fd =
	    openat(s->dir_fd, name, O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);

	return fd < 0 ? -errno : fd;
}

/* Whether the len bytes at p are all zero. */
static bool all_zero(const void *p, size_t len)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < len; i++)
		if (c[i])
			return false;
	return true;
}

/* Highest valid epoch in the log; counts bad records. A torn tail, a record
 * whose write a crash cut short, is cut off so that later records stay
 * aligned, and costs nothing: a run uses an epoch only once its record is
 * fsynced, so the torn one's epoch was never used. So is a last record of
 * zeros (the file grew, its data never reached the disk). A whole record
 * that fails its CRC may have been used before it rotted: it is counted
 * (s->corrupt), and only when no good record follows it (s->corrupt_last)
 * can it have held the highest epoch.
 */
static uint64_t epoch_scan(struct coord_store *s)
{
	struct epoch_rec r;
	uint64_t max = 0;
	off_t off = 0, keep = 0;
	struct stat st;
	ssize_t n;

	if (!fstat(s->epoch_fd, &st) && st.st_size % (off_t)sizeof(r))
		s->torn = true;
	while ((n = pread(s->epoch_fd, &r, sizeof(r), off)) == (ssize_t)sizeof(r)) {
		off += n;
		s->had_state = true;
		if (r.magic != EPOCH_MAGIC ||
		    r.crc != rec_crc(&r, offsetof(struct epoch_rec, crc))) {
			if (all_zero(&r, sizeof(r)))
				continue; /* torn, if nothing good follows */
			s->corrupt++;
			s->corrupt_last = true;
			keep = off;
			continue;
		}
		s->corrupt_last = false;
		keep = off;
		if (r.epoch > max)
			max = r.epoch;
	}
	if (n > 0)
		s->had_state = true;
	if (keep < st.st_size) {
		/* The torn tail, and zeros at the end: never used. */
		s->torn = true;
		if (ftruncate(s->epoch_fd, keep))
			pr_warn("state: cannot cut the torn tail of epoch.log: %s\n",
				strerror(errno));
	}
	return max;
}

static int epoch_write(struct coord_store *s, uint64_t epoch)
{
	struct epoch_rec r = {.magic = EPOCH_MAGIC, .epoch = epoch};
	int err;

	r.crc = rec_crc(&r, offsetof(struct epoch_rec, crc));
	err = append_sync(s->dir_fd, s->epoch_fd, &r, sizeof(r));
	if (!err)
		s->epoch = epoch;
	return err;
}

int coord_store_bump(struct coord_store *s, uint64_t epoch)
{
	if (epoch <= s->epoch)
		return 0;
	if (epoch >= LEASE_EPOCH_MAX || epoch - s->epoch > LEASE_EPOCH_STEP_MAX)
		return -ERANGE; /* checked arithmetic: the caller bounds it too */
	return epoch_write(s, epoch);
}

/* A state directory remembers that it was initialised (a marker written
 * with the first epoch). One that was, but whose epoch log is now empty
 * (deleted, truncated), cannot tell which epochs were used: refuse, rather
 * than silently start at 1.
 */
static int initialised_check(struct coord_store *s, const char *dir)
{
	int fd = openat(s->dir_fd, STORE_MARKER, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		if (s->had_state)
			return 0;
		pr_warn("state: '%s' was initialised but its epoch.log is missing or empty: the "
			"epochs already used are unknown, so the coordinator refuses to start. "
			"Recovery (docs/operations.md, \"Epoch log\"): stop every coordinator for "
			"this state, wait one lease ttl, remove '%s/%s'; the coordinator then "
			"starts at epoch 1 and moves past any epoch a gateway reports\n",
			dir, dir, STORE_MARKER);
		return -ESTALE;
	}
	if (errno != ENOENT)
		return -errno;
	fd = openat(s->dir_fd, STORE_MARKER, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		return -errno;
	close(fd);
	return fsync(s->dir_fd) ? -errno : 0;
}

/* state-dir/grant.key: exactly GRANT_KEY_LEN bytes of a regular file no
 * symlink leads to; made (random, 0600, durable before use) when absent.
 * Anything else there is refused rather than replaced: a key replaced is
 * every live grant unprovable.
 */
static int grant_key_read(struct coord_store *s, int dir_fd, const char *name, bool create)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	ssize_t n;
	int err = 0;

	if (fd >= 0) {
		if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size != GRANT_KEY_LEN)
			err = -EINVAL;
		else if ((n = read(fd, s->grant_key, GRANT_KEY_LEN)) != GRANT_KEY_LEN)
			err = n < 0 ? -errno : -EIO;
		close(fd);
		if (err == -EINVAL)
			pr_warn("state: %s is not a %d-byte regular file: refusing to run\n", name,
				GRANT_KEY_LEN);
		return err;
	}
	if (errno != ENOENT || !create) {
		err = -errno;
		pr_warn("state: cannot read the grant key %s: %s%s\n", name, strerror(-err),
			err == -ENOENT ? " (replicas share one: make it once with head -c 32 "
					 "/dev/urandom and copy it to each, mode 0600)"
				       : "");
		return err;
	}
	if (getrandom(s->grant_key, GRANT_KEY_LEN, 0) != GRANT_KEY_LEN)
		return -EIO;
	unlinkat(s->dir_fd, "grant.key.new", 0);
	fd = openat(s->dir_fd, "grant.key.new",
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, s->grant_key, GRANT_KEY_LEN) != GRANT_KEY_LEN || fsync(fd))
		err = -EIO;
	close(fd);
	if (!err && renameat(s->dir_fd, "grant.key.new", s->dir_fd, "grant.key"))
		err = -errno;
	if (!err && fsync(s->dir_fd))
		err = -errno;
	s->grant_key_new = !err;
	return err;
}

static int grant_key_load(struct coord_store *s)
{
	return grant_key_read(s, s->dir_fd, "grant.key", true);
}

int coord_store_grant_key(struct coord_store *s, const char *path)
{
	int err = grant_key_read(s, AT_FDCWD, path, false);

	if (!err)
		s->grant_key_new = false;
	return err;
}

/* The key of a pair: its holder and limit names, NUL-padded, as a record
 * lays them out one after the other.
 */
#define USAGE_KEY_OFF  offsetof(struct usage_rec, holder)
#define USAGE_KEY_LEN  (WIRE_HOLDER_LEN + LL_NAME_LEN)
#define USAGE_MAX_PAIRS (1u << 20) /* beyond: logged, not indexed (see usage_keep) */

static bool usage_eq(const struct hmap *m, const void *key, uint32_t ref)
{
	const struct coord_store *s = HMAP_OWNER(m, struct coord_store, usage_map);

	return !memcmp((const char *)&s->usage_pairs[ref] + USAGE_KEY_OFF, key, USAGE_KEY_LEN);
}

/* r's totals into its pair's (the highest of each). A pair the index has no
 * room for is not kept: its holder's next HELLO starts from 0, and its next
 * report is recorded again (one record more, nothing lost). Compaction,
 * which writes out what memory holds, then stops: the log keeps every
 * record, growing, rather than lose the pairs memory does not hold.
 */
static void usage_keep(struct coord_store *s, const struct usage_rec *r)
{
	const char *key = (const char *)r + USAGE_KEY_OFF;
	long found = hmap_find(&s->usage_map, key);
	uint32_t ref = s->usage_n;
	int err = 0;

	if (found >= 0) {
		struct usage_rec *p = &s->usage_pairs[found];

		if (r->fallback > p->fallback)
			p->fallback = r->fallback;
		if (r->bypass > p->bypass)
			p->bypass = r->bypass;
		return;
	}
	if (s->usage_n == s->usage_cap) {
		uint32_t cap = s->usage_cap ? 2 * s->usage_cap : 64;
		struct usage_rec *np = realloc(s->usage_pairs, (size_t)cap * sizeof(*np));

		if (np) {
			s->usage_pairs = np;
			s->usage_cap = cap;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err) {
		s->usage_pairs[ref] = *r;
		err = hmap_put(&s->usage_map, key, &ref);
	}
	if (err < 0) {
		if (!s->usage_unkept)
			pr_warn("state: usage totals of '%.63s' (limit '%.31s') not kept in memory: "
				"%s; usage.log is no longer compacted\n",
				r->holder, r->limit, strerror(-err));
		s->usage_unkept = true;
		return;
	}
	s->usage_n++;
}

/* The log, once, into memory. Names are NUL-padded again (a record's bytes
 * after the NUL are the key's too); a corrupt record was never believed.
 */
static int usage_load(struct coord_store *s)
{
	struct usage_rec r;
	off_t off = 0;
	int err = hmap_init(&s->usage_map, USAGE_KEY_LEN, USAGE_MAX_PAIRS, usage_eq, NULL);

	if (err)
		return err;
	while (pread(s->usage_fd, &r, sizeof(r), off) == sizeof(r)) {
		off += sizeof(r);
		if (r.magic != USAGE_MAGIC || r.crc != rec_crc(&r, offsetof(struct usage_rec, crc)))
			continue;
		r.holder[sizeof(r.holder) - 1] = r.limit[sizeof(r.limit) - 1] = '\0';
		memset(r.holder + strlen(r.holder), 0, sizeof(r.holder) - strlen(r.holder));
		memset(r.limit + strlen(r.limit), 0, sizeof(r.limit) - strlen(r.limit));
		usage_keep(s, &r);
	}
	return 0;
}

int coord_store_open(struct coord_store *s, const char *dir)
{
	uint64_t epoch;
	int err;

	memset(s, 0, sizeof(*s));
	s->dir_fd = s->epoch_fd = s->usage_fd = -1;
	err = fs_mkdir_p(dir, 0700);
	if (err)
		return err;
	s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dir_fd < 0)
		return -errno;
	/* Whoever can write here can plant links and replace the logs. */
	{
		struct stat st;

		if (fstat(s->dir_fd, &st))
			return -errno;
		if (st.st_mode & (S_IWGRP | S_IWOTH)) {
			pr_warn("state: '%s' is writable by group or others (mode %03o): refusing "
				"(chmod 700 it)\n",
				dir, (unsigned)(st.st_mode & 0777));
			return -EPERM;
		}
	}
	s->epoch_fd = open_log(s, "epoch.log");
	if (s->epoch_fd < 0)
		return s->epoch_fd;
	s->usage_fd = open_log(s, "usage.log");
	if (s->usage_fd < 0)
		return s->usage_fd;
	err = usage_load(s);
	if (err)
		return err;
	epoch = epoch_scan(s) + 1;
	err = initialised_check(s, dir);
	if (!err)
		err = grant_key_load(s);
	if (err)
		return err;
	if (s->torn)
		pr_warn("state: epoch.log ended in a torn record (a crash during its write; its "
			"epoch was never used): cut off\n");
	if (s->corrupt_last) {
		/* The last whole record is corrupt: it may have held the highest
		 * epoch, at most one bounded step (LEASE_EPOCH_STEP_MAX) above the
		 * good one before it. A corrupt record with a good one after it
		 * held less than that one.
		 */
		epoch += LEASE_EPOCH_STEP_MAX + 1;
	}
	if (s->corrupt)
		pr_warn("state: %u corrupt epoch records skipped%s; starting at epoch %llu\n",
			s->corrupt, s->corrupt_last ? ", the last one past its bound" : "",
			(unsigned long long)epoch);
	if (epoch >= LEASE_EPOCH_MAX) {
		pr_warn("state: epoch %llu is past the bound %llu: refusing to run (see "
			"docs/operations.md, \"Epoch log\")\n",
			(unsigned long long)epoch, (unsigned long long)LEASE_EPOCH_MAX);
		return -ERANGE;
	}
	return epoch_write(s, epoch);
}

void coord_store_close(struct coord_store *s)
{
	int *fds[] = {&s->usage_fd, &s->epoch_fd, &s->dir_fd};

	explicit_bzero(s->grant_key, sizeof(s->grant_key));
	hmap_free(&s->usage_map);
	free(s->usage_pairs);
	s->usage_pairs = NULL;
	s->usage_n = s->usage_cap = 0;
	s->usage_unkept = false;
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

int coord_store_usage_compact(struct coord_store *s)
{
	int fd, err = 0;
	uint32_t n = s->usage_n;

	if (s->usage_unkept)
		return -ENOSPC; /* memory does not hold every pair: the log does */
	/* One record per (holder, limit) with its highest totals, from memory
	 * (O(pairs), no read back), written to a new file that replaces the log
	 * only once it is durable.
	 */
	fd = openat(s->dir_fd, "usage.log.new", O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		err = -errno;
	for (uint32_t i = 0; !err && i < n; i++) {
		struct usage_rec *r = &s->usage_pairs[i];

		r->crc = rec_crc(r, offsetof(struct usage_rec, crc));
		if (write(fd, r, sizeof(*r)) != sizeof(*r))
			err = -EIO;
	}
	if (!err && fsync(fd))
		err = -errno;
	if (!err && renameat(s->dir_fd, "usage.log.new", s->dir_fd, "usage.log"))
		err = -errno;
	if (!err && fsync(s->dir_fd))
		err = -errno;
	if (!err) {
		close(s->usage_fd);
		s->usage_fd =
		    openat(s->dir_fd, "usage.log", O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
		if (s->usage_fd < 0)
			err = -errno;
	}
	if (fd >= 0)
		close(fd);
	if (!err) {
		/* Next when the log has doubled: a rewrite costs O(live), paid
		 * for by as many appends, however many holders there are.
		 */
		s->usage_compactions++;
		s->usage_compact_at = 2 * n > USAGE_COMPACT_RECORDS ? 2 * n : USAGE_COMPACT_RECORDS;
	}
	return err;
}

int coord_store_usage(struct coord_store *s, const char *holder, const char *limit,
		      uint64_t fallback, uint64_t bypass)
{
	struct usage_rec r = {.magic = USAGE_MAGIC, .fallback = fallback, .bypass = bypass};
	struct stat st;
	int err;

	snprintf(r.holder, sizeof(r.holder), "%s", holder);
	snprintf(r.limit, sizeof(r.limit), "%s", limit);
	r.crc = rec_crc(&r, offsetof(struct usage_rec, crc));
	err = append_sync(s->dir_fd, s->usage_fd, &r, sizeof(r));
	if (err)
		return err;
	usage_keep(s, &r);
	/* Bounded: past USAGE_COMPACT_RECORDS (or twice the pairs the last
	 * compaction kept), one record per pair is kept. The record above is
	 * durable whatever happens to the compaction.
	 */
	if (!s->usage_compact_at)
		s->usage_compact_at = USAGE_COMPACT_RECORDS;
	if (!s->usage_unkept && !fstat(s->usage_fd, &st) &&
	    st.st_size >= (off_t)(s->usage_compact_at * sizeof(r)) &&
	    (err = coord_store_usage_compact(s)))
		pr_warn("state: cannot compact usage.log: %s\n", strerror(-err));
	return 0;
}

void coord_store_usage_get(const struct coord_store *s, const char *holder, const char *limit,
			   uint64_t *fallback, uint64_t *bypass)
{
	char key[USAGE_KEY_LEN] = {0};
	long ref;

	snprintf(key, WIRE_HOLDER_LEN, "%s", holder);
	snprintf(key + WIRE_HOLDER_LEN, LL_NAME_LEN, "%s", limit);
	ref = hmap_find(&s->usage_map, key);
	*fallback = ref < 0 ? 0 : s->usage_pairs[ref].fallback;
	*bypass = ref < 0 ? 0 : s->usage_pairs[ref].bypass;
}
