/* SPDX-License-Identifier: MIT */
/*
 * The usage ledger's writer thread (design.md, "Threads of the
 * coordinator"). It owns the ledger's SQLite connection: opening it when a
 * limit becomes metered, recording which limits are metered, the per-key
 * batches (group commit), the per-limit reports, and retention pruning, all
 * on this one thread and one connection, so that no upsert and no fsync
 * runs on the coordinator's event loop.
 *
 * The loop parses and checks a batch, copies it into a job and submits it
 * (bounded: a full queue is -EAGAIN, the loop answers RETRY). The writer
 * does the job and hands it back with its result through a list the loop
 * takes when the eventfd (uwriter_fd) is readable. A job comes back only
 * once what it wrote is committed (or known not written), so an ack or a
 * grant sent on it is never ahead of the disk. Stopping commits the open
 * group (its jobs are not handed back: no ack) and drops the queued jobs:
 * their agents send them again, and the marks keep anything from counting
 * twice.
 */
#ifndef LEASELINE_COORD_USAGE_WRITER_H
#define LEASELINE_COORD_USAGE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "coord/usage_ledger.h"
#include "lib/wire.h"

enum uw_kind {
	UW_KEYS,   /* a METER batch: uledger_keys_add into the group's transaction */
	UW_REPORT, /* a report's metered entries: uledger_record_ident, alone */
};

struct uw_rentry {
	char limit[LL_NAME_LEN];
	struct uledger_totals t;
	struct uledger_contract c; /* what bounds it (usage_ledger.h) */
};

struct uw_job {
	struct uw_job *next;
	enum uw_kind kind;
	int ci, hi;	     /* the connection and holder it came on (the loop's) */
	uint64_t arrival_ns; /* CLOCK_MONOTONIC, when it arrived */
	int64_t now_s;	     /* the ledger's now when it arrived (the hour it goes in) */
	char holder[WIRE_HOLDER_LEN];
	uint64_t incarnation;
	uint64_t ident; /* counters identity */
	uint64_t seq;
	/* UW_KEYS */
	char limit[LL_NAME_LEN];
	uint64_t limit_uid;
	uint8_t key_mode, prefix_v4, prefix_v6;
	uint32_t n;
	struct wire_meter_entry *ke; /* n entries, in the same allocation */
	struct uledger_contract *kc; /* and each one's contract */
	struct uw_rentry *re;	     /* UW_REPORT: n entries, in the same allocation */
	/* The result: 0 committed; -ESTALE refused (identity pruned); other
	 * negative errno: nothing written, to be sent again.
	 */
	int err;
	size_t size; /* bytes of the allocation, for the queue's bound */
};

struct uwriter;

/* A job with room for n entries of its kind (free()), or NULL. */
struct uw_job *uw_job_new(enum uw_kind kind, uint32_t n);

/* Start the thread. lg: the ledger opened already (NULL: opened by the
 * writer once uwriter_set_metered names a limit), its ownership passes to
 * the writer. path: the ledger's file. retention_s: 0 none. series_quota:
 * the series a holder may have (0: ULEDGER_SERIES_QUOTA). max_bytes:
 * the bound of the jobs queued and in the open group; holders: how many
 * (a job's hi below it), each with a share of that bound. 0 or -errno.
 */
int uwriter_start(struct uwriter **out, struct uledger *lg, const char *path, uint64_t retention_s,
		  uint32_t series_quota, size_t max_bytes, size_t holders);
/* Readable when jobs came back (uwriter_done). */
int uwriter_fd(const struct uwriter *w);
/* 0, or -EAGAIN (the queue is full) or -EDQUOT (j's holder has its share
 * of it): j stays the caller's.
 */
int uwriter_submit(struct uwriter *w, struct uw_job *j);
/* The jobs done since the last call (a list by ->next, oldest first). */
struct uw_job *uwriter_done(struct uwriter *w);
/* The limits metered now (uledger_set_metered, before the next job). */
void uwriter_set_metered(struct uwriter *w, const char *const *names, size_t n);

struct uwriter_stats {
	struct uledger_counters c; /* the ledger's counters, as of the last job done */
	uint64_t p50, p99;	   /* arrival to commit, ns */
	size_t samples;
	bool open;	       /* the ledger is open */
	uint64_t queued_bytes; /* now */
	uint64_t queued_jobs;  /* now */
	uint64_t full;	       /* submissions refused: the queue was full */
	uint64_t holder_full;  /* of those, because the holder had its share of it */
	uint64_t groups;       /* per-key transactions committed */
};
void uwriter_stats(struct uwriter *w, struct uwriter_stats *s);

/* Commit the open group (no job of it handed back), drop the queue, join
 * the thread, close the ledger, free. Jobs handed back and not yet taken
 * are freed too.
 */
void uwriter_stop(struct uwriter *w);

#endif /* LEASELINE_COORD_USAGE_WRITER_H */
