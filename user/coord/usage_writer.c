// SPDX-License-Identifier: MIT
/* The usage ledger's writer thread: usage_writer.h. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "lib/monotonic.h"
#include "lib/keyfmt.h"
#include "lib/log.h"
#include "coord/usage_writer.h"

/* Group commit: the per-key transaction stays open until it is this old or
 * this large, so that one fsync covers many batches (8 gateways x 100k keys
 * per 10 s is 160 batches a second).
 */
#define UW_COMMIT_NS	  (200 * NSEC_PER_MSEC)
#define UW_COMMIT_BATCHES 1024

/* Retention: one small transaction (UW_PRUNE_ROWS rows at most) every
 * UW_PRUNE_STEP_NS while a pass has work, then the next pass an hour later;
 * only between groups, never inside one.
 */
#define UW_PRUNE_ROWS	 1024
#define UW_PRUNE_STEP_NS (100 * NSEC_PER_MSEC)
#define UW_PRUNE_PASS_NS (3600 * NSEC_PER_SEC)
#define UW_PRUNE_FAIL_NS (60 * NSEC_PER_SEC)

struct uwriter {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int efd;
	char path[4096];
	uint64_t retention_s;
	uint32_t series_quota; /* 0: the ledger's default */
	size_t max_bytes;
	size_t *hbytes, n_hold; /* under mu: each holder's bytes queued (by hi) */
	/* Under mu: */
	struct uw_job *in_head, *in_tail;
	struct uw_job *out_head, *out_tail;
	size_t bytes, jobs; /* submitted and not yet handed back */
	bool stop;
	bool sync; /* names changed: uledger_set_metered before the next job */
	char (*names)[LL_NAME_LEN];
	size_t n_names;
	struct uwriter_stats st;
	/* The writer thread's own: */
	struct uledger *lg;
	bool unsynced;
	char (*my_names)[LL_NAME_LEN];
	size_t my_n;
	struct uw_job *group, **gtail;
	size_t gn;
	bool txn, txn_failed;
	uint64_t groups; /* committed; copied to st under mu */
	uint64_t prune_next;
	struct uw_job *done, **dtail;
	struct uledger_key_entry e[WIRE_MAX_METER];
	char text[WIRE_MAX_METER][KEYFMT_LEN];
};

struct uw_job *uw_job_new(enum uw_kind kind, uint32_t n)
{
	size_t es = kind == UW_KEYS
			? sizeof(struct wire_meter_entry) + sizeof(struct uledger_contract)
			: sizeof(struct uw_rentry);
	size_t size = sizeof(struct uw_job) + (size_t)n * es;
	struct uw_job *j = calloc(1, size);

	if (!j)
		return NULL;
	j->kind = kind;
	j->size = size;
	if (kind == UW_KEYS) {
		j->ke = (struct wire_meter_entry *)(j + 1);
		j->kc = (struct uledger_contract *)(j->ke + n);
	} else
		j->re = (struct uw_rentry *)(j + 1);
	return j;
}

static void done_push(struct uwriter *w, struct uw_job *j)
{
	j->next = NULL;
	*w->dtail = j;
	w->dtail = &j->next;
}

/* Open the ledger if needed and record which limits are metered. */
static int resync(struct uwriter *w)
{
	const char *names[LL_MAX_LIMITS];
	char where[256];
	size_t n = 0;
	int err;

	for (size_t i = 0; i < w->my_n && n < LL_MAX_LIMITS; i++)
		names[n++] = w->my_names[i];
	w->unsynced = true;
	if (!w->lg && !n) {
		w->unsynced = false;
		return 0;
	}
	if (!w->lg) {
		err = uledger_open(&w->lg, w->path);
		if (err) {
			pr_warn("cannot open the usage ledger '%s': %s\n",
				uledger_where(w->path, where, sizeof(where)), strerror(-err));
			return err;
		}
		pr_info("usage ledger '%s' open\n", uledger_where(w->path, where, sizeof(where)));
		if (w->series_quota)
			uledger_set_series_quota(w->lg, w->series_quota);
	}
	err = uledger_set_metered(w->lg, names, n, uledger_now());
	if (err)
		pr_warn("usage ledger: cannot record which limits are metered: %s; no grant for "
			"metered limits until it can\n",
			strerror(-err));
	w->unsynced = err != 0;
	return err;
}

/* Commit (or, a batch of it not written, abort) the group; its jobs come
 * back with the result.
 */
static void flush(struct uwriter *w)
{
	int err = 0;

	if (!w->txn)
		return;
	w->txn = false;
	if (w->txn_failed) {
		uledger_keys_abort(w->lg);
		err = -EIO;
	} else {
		err = uledger_keys_commit(w->lg, w->group ? w->group->arrival_ns : clock_now_ns());
		if (!err)
			w->groups++;
	}
	while (w->group) {
		struct uw_job *j = w->group;

		w->group = j->next;
		j->err = err;
		done_push(w, j);
	}
	w->gtail = &w->group;
	w->gn = 0;
}

static void do_keys(struct uwriter *w, struct uw_job *j)
{
	int err = w->unsynced || !w->lg ? resync(w) : 0;

	if (!err && !w->lg)
		err = -ENOENT; /* no limit metered */
	if (!err) {
		/* An identity whose marks retention pruned: counting it would
		 * count its series from 0 a second time (reference §6.3).
		 */
		int r = uledger_ident_pruned(w->lg, j->holder, j->ident);

		if (r == 1) {
			uledger_note_refused(w->lg);
			pr_warn(
			    "meter batch %llu of '%s': its counters identity %016llx was silent "
			    "past ledger-retention and its marks are pruned: refused\n",
			    (unsigned long long)j->seq, j->holder, (unsigned long long)j->ident);
			err = -ESTALE;
		} else if (r < 0) {
			err = r == -ESTALE ? -EIO : r;
		}
	}
	if (!err && !w->txn) {
		err = uledger_keys_begin(w->lg);
		w->txn = !err;
		w->txn_failed = false;
	}
	if (err) {
		j->err = err;
		done_push(w, j);
		return;
	}
	for (uint32_t i = 0; i < j->n; i++) {
		struct uledger_key_entry *e = &w->e[i];

		memset(e, 0, sizeof(*e));
		e->key = j->ke[i].key;
		e->born = j->ke[i].born;
		keyfmt_key(&j->ke[i].key, j->key_mode, j->prefix_v4, j->prefix_v6, w->text[i],
			   sizeof(w->text[i]));
		e->key_text = w->text[i];
		memcpy(e->pkts, j->ke[i].pkts, sizeof(e->pkts));
		memcpy(e->bytes, j->ke[i].bytes, sizeof(e->bytes));
		e->c = j->kc[i];
	}
	if (!w->txn_failed && uledger_keys_add(w->lg, j->holder, j->ident, j->limit_uid, j->limit,
					       j->now_s, w->e, j->n))
		w->txn_failed = true;
	j->next = NULL;
	*w->gtail = j;
	w->gtail = &j->next;
	w->gn++;
}

static void do_report(struct uwriter *w, struct uw_job *j)
{
	struct uledger_entry e[WIRE_MAX_ENTRIES];
	int err;

	flush(w); /* the per-key transaction commits first: one at a time */
	err = w->unsynced || !w->lg ? resync(w) : 0;
	if (!err && !w->lg)
		err = -ENOENT;
	if (!err) {
		for (uint32_t i = 0; i < j->n && i < WIRE_MAX_ENTRIES; i++) {
			e[i].limit = j->re[i].limit;
			e[i].t = j->re[i].t;
			e[i].c = j->re[i].c;
		}
		err = uledger_record_ident(w->lg, j->holder, j->incarnation, j->ident, j->seq,
					   j->now_s, j->arrival_ns, e, j->n);
	}
	j->err = err;
	done_push(w, j);
}

static void free_list(struct uw_job *j)
{
	while (j) {
		struct uw_job *next = j->next;

		free(j);
		j = next;
	}
}

static void *uw_main(void *arg)
{
	struct uwriter *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct uw_job *jobs;
		bool sync;

		for (;;) {
			uint64_t now = clock_now_ns(), due = UINT64_MAX;
			struct timespec ts;

			if (w->in_head || w->stop || w->sync)
				break;
			if (w->txn)
				due = w->group ? w->group->arrival_ns + UW_COMMIT_NS : now;
			else if (w->lg && w->retention_s)
				due = w->prune_next;
			if (due <= now)
				break;
			if (due - now > NSEC_PER_SEC)
				due = now + NSEC_PER_SEC;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)((due - now) / NSEC_PER_SEC);
			ts.tv_nsec += (long)((due - now) % NSEC_PER_SEC);
			if (ts.tv_nsec >= (long)NSEC_PER_SEC) {
				ts.tv_sec++;
				ts.tv_nsec -= (long)NSEC_PER_SEC;
			}
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
		if (w->stop)
			break;
		jobs = w->in_head;
		w->in_head = w->in_tail = NULL;
		sync = w->sync;
		if (sync) {
			char(*t)[LL_NAME_LEN] = w->my_names;

			w->my_names = w->names;
			w->my_n = w->n_names;
			w->names = t;
			w->sync = false;
		}
		pthread_mutex_unlock(&w->mu);

		if (sync) {
			flush(w);
			resync(w);
		}
		while (jobs) {
			struct uw_job *j = jobs;

			/* Stopping: what is not begun is dropped (no ack). */
			if (__atomic_load_n(&w->stop, __ATOMIC_RELAXED)) {
				free_list(jobs);
				break;
			}
			jobs = j->next;
			if (j->kind == UW_KEYS)
				do_keys(w, j);
			else
				do_report(w, j);
		}
		if (w->txn && (w->txn_failed || w->gn >= UW_COMMIT_BATCHES || !w->group ||
			       clock_now_ns() - w->group->arrival_ns >= UW_COMMIT_NS))
			flush(w);
		if (!w->txn && w->lg && w->retention_s && !w->unsynced &&
		    clock_now_ns() >= w->prune_next) {
			int r = uledger_prune(w->lg, uledger_now(), w->retention_s, UW_PRUNE_ROWS);

			w->prune_next = clock_now_ns() + (r > 0	   ? UW_PRUNE_STEP_NS
							  : r == 0 ? UW_PRUNE_PASS_NS
								   : UW_PRUNE_FAIL_NS);
		}

		pthread_mutex_lock(&w->mu);
		if (w->lg) {
			w->st.c = *uledger_counters(w->lg);
			uledger_latency(w->lg, &w->st.p50, &w->st.p99, &w->st.samples);
		}
		w->st.open = w->lg != NULL;
		w->st.groups = w->groups;
		if (w->done) {
			uint64_t one = 1;

			for (struct uw_job *j = w->done; j; j = j->next) {
				w->bytes -= j->size;
				w->jobs--;
				if (j->hi >= 0 && (size_t)j->hi < w->n_hold)
					w->hbytes[j->hi] -= j->size;
			}
			if (w->out_tail)
				w->out_tail->next = w->done;
			else
				w->out_head = w->done;
			w->out_tail =
			    (struct uw_job *)((char *)w->dtail - offsetof(struct uw_job, next));
			w->done = NULL;
			w->dtail = &w->done;
			if (write(w->efd, &one, sizeof(one)) != sizeof(one))
				pr_warn("usage writer: eventfd: %s\n", strerror(errno));
		}
	}
	/* Stopping: the group's batches commit (their acks are not sent: the
	 * agents send them again, adding nothing); the queued ones are dropped.
	 */
	free_list(w->in_head);
	w->in_head = w->in_tail = NULL;
	pthread_mutex_unlock(&w->mu);
	flush(w);
	free_list(w->done);
	w->done = NULL;
	w->dtail = &w->done;
	return NULL;
}

int uwriter_start(struct uwriter **out, struct uledger *lg, const char *path, uint64_t retention_s,
		  uint32_t series_quota, size_t max_bytes, size_t holders)
{
	struct uwriter *w = calloc(1, sizeof(*w));
	pthread_condattr_t ca;
	int err;

	if (!w)
		return -ENOMEM;
	w->names = calloc(LL_MAX_LIMITS, sizeof(*w->names));
	w->my_names = calloc(LL_MAX_LIMITS, sizeof(*w->my_names));
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->n_hold = holders;
	w->hbytes = calloc(holders ? holders : 1, sizeof(*w->hbytes));
	if (!w->names || !w->my_names || !w->hbytes || w->efd < 0) {
		err = w->efd < 0 ? -errno : -ENOMEM;
		goto fail;
	}
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->lg = lg;
	w->retention_s = retention_s;
	w->series_quota = series_quota;
	if (lg && series_quota)
		uledger_set_series_quota(lg, series_quota);
	w->max_bytes = max_bytes;
	w->gtail = &w->group;
	w->dtail = &w->done;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&w->th, NULL, uw_main, w);
	if (err) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->mu);
		goto fail;
	}
	*out = w;
	return 0;
fail:
	if (w->efd >= 0)
		close(w->efd);
	free(w->names);
	free(w->my_names);
	free(w->hbytes);
	free(w);
	return err;
}

int uwriter_fd(const struct uwriter *w)
{
	return w->efd;
}

/* One holder's share of the queue: the whole of it alone, half of it with
 * one other, else UW_HOLDER_SHARE-th. A holder that floods the ledger
 * (batches of new keys without end) fills its share and is answered retry
 * itself; the others' batches still find room, behind at most its share.
 * A holder with nothing queued may always queue one.
 */
#define UW_HOLDER_SHARE 4

int uwriter_submit(struct uwriter *w, struct uw_job *j)
{
	bool own = j->hi >= 0 && (size_t)j->hi < w->n_hold;
	size_t share = w->max_bytes / (w->n_hold < UW_HOLDER_SHARE ? (w->n_hold ? w->n_hold : 1)
								    : UW_HOLDER_SHARE);

	pthread_mutex_lock(&w->mu);
	if (w->stop || w->bytes + j->size > w->max_bytes) {
		w->st.full++;
		pthread_mutex_unlock(&w->mu);
		return -EAGAIN;
	}
	if (own && w->hbytes[j->hi] && w->hbytes[j->hi] + j->size > share) {
		w->st.full++;
		w->st.holder_full++;
		pthread_mutex_unlock(&w->mu);
		return -EDQUOT;
	}
	if (own)
		w->hbytes[j->hi] += j->size;
	j->next = NULL;
	if (w->in_tail)
		w->in_tail->next = j;
	else
		w->in_head = j;
	w->in_tail = j;
	w->bytes += j->size;
	w->jobs++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

struct uw_job *uwriter_done(struct uwriter *w)
{
	struct uw_job *j;
	uint64_t v;

	while (read(w->efd, &v, sizeof(v)) == sizeof(v))
		;
	pthread_mutex_lock(&w->mu);
	j = w->out_head;
	w->out_head = w->out_tail = NULL;
	pthread_mutex_unlock(&w->mu);
	return j;
}

void uwriter_set_metered(struct uwriter *w, const char *const *names, size_t n)
{
	pthread_mutex_lock(&w->mu);
	w->n_names = 0;
	for (size_t i = 0; i < n && i < LL_MAX_LIMITS; i++)
		snprintf(w->names[w->n_names++], LL_NAME_LEN, "%s", names[i]);
	w->sync = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void uwriter_stats(struct uwriter *w, struct uwriter_stats *s)
{
	pthread_mutex_lock(&w->mu);
	*s = w->st;
	s->queued_bytes = w->bytes;
	s->queued_jobs = w->jobs;
	pthread_mutex_unlock(&w->mu);
}

void uwriter_stop(struct uwriter *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	__atomic_store_n(&w->stop, true, __ATOMIC_RELAXED);
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	free_list(w->out_head);
	uledger_close(w->lg);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	close(w->efd);
	free(w->names);
	free(w->my_names);
	free(w->hbytes);
	free(w);
}
