/* SPDX-License-Identifier: MIT */
/*
 * The coordinator's durable state under state-dir: the epoch log and the
 * usage log (fallback and bypass admissions reported per holder). Records
 * are fixed-size with a zlib CRC32 and appended with write + fsync (file and
 * directory) before the caller acts on them. A torn record (a crash during
 * its write) is cut off and costs no epoch, since its epoch was never used;
 * a corrupt one is skipped and reported, never makes the coordinator
 * generous, and never lowers the epoch. A directory that was initialised (marker file
 * "initialised") but has lost its epoch log makes the open fail: the
 * epochs used are unknown.
 */
#ifndef LEASELINE_COORD_STORE_H
#define LEASELINE_COORD_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "ll_types.h"
#include "coord/grant_tag.h"
#include "lib/hashmap.h"
#include "lib/wire.h"

struct coord_store {
	int dir_fd;
	int epoch_fd;
	int usage_fd;
	uint64_t epoch;	   /* this run's epoch, durable before any grant */
	bool had_state;	   /* an earlier epoch was found (valid or not) */
	uint32_t corrupt;  /* records skipped because their CRC or magic was wrong */
	bool corrupt_last; /* the last whole record was one of them */
	bool torn;	   /* the log ended in a torn record (cut off, never used) */
	/* The key of the grant tags (grant_tag.h): state-dir/grant.key, made
	 * at the first start. Lost with the directory, the old tags prove
	 * nothing and a restart waits out its quiet period, as before tags.
	 */
	uint8_t grant_key[GRANT_KEY_LEN];
	bool grant_key_new; /* made by this open */
	/* usage.log: compacted when it reaches this many records (twice the
	 * pairs the last compaction kept, at least 4096), and how often it was.
	 */
	uint64_t usage_compact_at, usage_compactions;
	/* Each (holder, limit)'s highest totals, as usage.log holds them: read
	 * once at the open, then kept with every append, so that a HELLO looks
	 * its holder up instead of reading the log, and a compaction writes
	 * these out instead of reading it back. usage_map indexes usage_pairs.
	 */
	struct usage_rec *usage_pairs;
	uint32_t usage_n, usage_cap;
	struct hmap usage_map;
	bool usage_unkept; /* a pair memory could not hold: no more compaction */
};

/* Open (creating) state-dir, read the epoch log, make epoch = highest seen + 1
 * durable, read (or make) the grant key. Returns 0 or a negative errno.
 */
/* grant-key: in coord.yaml: the key read from path instead (it must exist:
 * replicas share one, and one replica making its own would prove nothing
 * to the others). 0 or -errno, logged.
 */
int coord_store_grant_key(struct coord_store *s, const char *path);
int coord_store_open(struct coord_store *s, const char *dir);
void coord_store_close(struct coord_store *s);
/* Durably move to a later epoch (one a holder says it has seen surpassed). */
int coord_store_bump(struct coord_store *s, uint64_t epoch);

/* Durably record that `holder` reported these absolute totals for `limit`. */
int coord_store_usage(struct coord_store *s, const char *holder, const char *limit,
		      uint64_t fallback, uint64_t bypass);

/* Rewrite usage.log with one record per (holder, limit), its highest totals
 * (coord_store_usage does it past a size, so the log stays bounded by the
 * holders and limits it names, not by how many reports came). Crash-safe:
 * the new file replaces the log by rename once durable. 0 or -errno.
 */
int coord_store_usage_compact(struct coord_store *s);

/* Highest recorded totals for (holder, limit); 0 if none. O(1): from
 * memory, which holds what the log does.
 */
void coord_store_usage_get(const struct coord_store *s, const char *holder, const char *limit,
			   uint64_t *fallback, uint64_t *bypass);

#endif /* LEASELINE_COORD_STORE_H */
