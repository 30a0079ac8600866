// SPDX-License-Identifier: MIT
/*
 * A randomised model test of adoption across restarts (docs/protocol.md,
 * "Adoption"), against the real `leaseline coord`: four holders that behave
 * as agents do (one grant held per limit, the newest (epoch, seq) wins, its
 * expiry counted from the send time of the report it answers, the held
 * grant and its tag re-presented in every report), driven by a seeded PRNG
 * through reports with changing demand, disconnects, silences that let
 * leases die, forged re-presentations (a share above the one the tag
 * proves) and kill -9 + restart of the coordinator on the same state,
 * after which half the holders come back late with their grants live.
 *
 * A second limit, k, is per source address: the holders list its keys hot
 * with changing demands and apply its per-key grants as link.c does (a
 * whole set replaces what they hold; changes only on top of a whole set of
 * this connection and the base applied, in the grant's epoch; a cut keeps
 * each key at the least of its entry, the entry named and the share).
 *
 * After every event, over what the holders hold at that instant, across
 * epochs: Σ live rates ≤ R and Σ live bursts ≤ B, for a and for each key
 * of k (what a holder may spend on a key: its entry, else its share);
 * every grant is within (R, B), answers a report that was sent, and is of
 * an epoch above every epoch of an earlier run of the coordinator (epochs
 * strictly increase).
 *
 * LL_SEED=N reproduces a run (the seed is printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "integ/coord_fx.h"
#include "unit/rnd.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>

#include "lib/conn.h"
#include "lib/lease_clock.h"
#include "lib/monotonic.h"
#include "lib/wire.h"

#define R	  900
#define B	  90
#define TTL_MS	  600
#define H	  4
#define STEPS	  500
#define RESTARTS  6
#define SENT_RING 64
#define NL	  2 /* limits: a (one bucket), k (per source address) */
#define NK	  3 /* keys of k the holders use */

struct holder {
	struct conn c; /* fd -1: down, redials when next picked */
	char name[16];
	uint64_t inc, seq, demand;
	struct coord_held held[NL]; /* epoch 0: none */
	uint64_t expiry[NL];	    /* of held, the holder's clock */
	/* k's per-key set as the kernel holds it; full_seen: this connection
	 * applied a whole set (link.c's kg_full_uid).
	 */
	bool has[NK], full_seen;
	uint64_t krate[NK], kburst[NK], want[NK];
	/* Each entry's tag as it came (hot.c's proof): re-presented with the key. */
	struct {
		uint64_t epoch, seq, rate, burst;
		uint8_t tag[WIRE_TAG_LEN];
	} proof[NK];
	uint64_t away_until;	/* slow to come back after a restart: silent until then */
	uint64_t sent_seq[SENT_RING], sent_ns[SENT_RING];
};

struct model {
	pid_t pid;
	int port;
	char dir[64];
	struct wire_msg *m;
	struct holder h[H];
	uint64_t seed, epoch_min, epoch_max;
	uint64_t grants, stale, restarts, forged, adopted, keys_adopted, max_rate, max_burst;
	uint64_t cuts, wholes, changes, refused, max_key, key_forged;
};

/* The coordinator's "adopted" lines in this run's log (keys: the per-key
 * entries they count).
 */
static uint64_t adopted_in_log(const struct model *x, bool keys)
{
	char path[96], line[512];
	uint64_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/coord.log", x->dir);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, "': adopted ");

		if (at && strstr(at, "per-key entries"))
			n += keys ? strtoull(at + strlen("': adopted "), NULL, 10) : 0;
		else
			n += at && !keys;
	}
	if (f)
		fclose(f);
	return n;
}

static int spawn(struct model *x)
{
	char cfg[128], log[128];

	snprintf(cfg, sizeof(cfg), "%s/coord.yaml", x->dir);
	snprintf(log, sizeof(log), "%s/coord.log", x->dir);
	if (truncate(log, 0) && errno != ENOENT)
		return -1;
	x->pid = fork();
	if (x->pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		dup2(out, 2);
		execl(bin(), bin(), "coord", "-c", cfg, (char *)NULL);
		_exit(127);
	}
	return x->pid > 0 ? coord_wait_ready(x->dir, &x->pid, &x->port, NULL) : -1;
}

static int setup(void **state)
{
	struct model *x = calloc(1, sizeof(*x));
	char coord[256];
	const char *s = getenv("LL_SEED");

	if (!x || access(bin(), X_OK))
		return -1;
	x->m = malloc(sizeof(*x->m));
	snprintf(x->dir, sizeof(x->dir), "/tmp/ll-adopt-model-XXXXXX");
	if (!x->m || !mkdtemp(x->dir))
		return -1;
	x->seed = s ? strtoull(s, NULL, 0) : clock_now_ns();
	write_file(x->dir, "policy.yaml",
		   "version: 1\nlimits:\n"
		   "  - {name: a, key: none, scope: global, rate: 900, burst: 90}\n"
		   "  - {name: k, key: src-ip, scope: global, rate: 900, burst: 90}\n"
		   "rules:\n  - {name: all, limits: [a, k]}\n");
	snprintf(coord, sizeof(coord),
		 "listen: 127.0.0.1:0\npolicy: policy.yaml\nstate-dir: state\n"
		 "lease: {ttl: %dms, refresh: 100ms}\ngateways: %d\n",
		 TTL_MS, H);
	write_file(x->dir, "coord.yaml", coord);
	for (int i = 0; i < H; i++) {
		x->h[i].c.fd = -1;
		snprintf(x->h[i].name, sizeof(x->h[i].name), "gw-%d", i + 1);
		x->h[i].inc = 1000 + (uint64_t)i;
		x->h[i].demand = R;
	}
	*state = x;
	return spawn(x);
}

static int teardown(void **state)
{
	struct model *x = *state;
	char cmd[128];
	int st = 0;

	for (int i = 0; i < H; i++)
		conn_close(&x->h[i].c);
	if (x->pid > 0) {
		kill(x->pid, SIGTERM);
		waitpid(x->pid, &st, 0);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
	if (system(cmd))
		return -1;
	free(x->m);
	free(x);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static bool live(const struct holder *h, int l, uint64_t now)
{
	return h->held[l].epoch && now < h->expiry[l];
}

/* Σ of what the holders hold live now, across epochs: within (R, B), for a
 * and for every key of k.
 */
static void invariant(struct model *x, const char *after)
{
	uint64_t now = clock_now_ns(), sr = 0, sb = 0;

	for (int i = 0; i < H; i++)
		if (live(&x->h[i], 0, now)) {
			sr += x->h[i].held[0].rate;
			sb += x->h[i].held[0].burst;
		}
	x->max_rate = sr > x->max_rate ? sr : x->max_rate;
	x->max_burst = sb > x->max_burst ? sb : x->max_burst;
	if (sr > R || sb > B)
		fail_msg("seed %llu, after %s: holders hold %llu/s burst %llu live, above (%d, %d)",
			 (unsigned long long)x->seed, after, (unsigned long long)sr,
			 (unsigned long long)sb, R, B);
	for (int u = 0; u < NK; u++) {
		uint64_t kr = 0, kb = 0;

		for (int i = 0; i < H; i++) {
			const struct holder *h = &x->h[i];

			if (!live(h, 1, now))
				continue;
			kr += h->has[u] ? h->krate[u] : h->held[1].rate;
			kb += h->has[u] ? h->kburst[u] : h->held[1].burst;
		}
		x->max_key = kr > x->max_key ? kr : x->max_key;
		if (kr > R || kb > B)
			for (int i = 0; i < H; i++) {
				const struct holder *h = &x->h[i];

				print_message("  %s: live %d, share of k epoch %llu seq %llu %llu/s "
					      "burst %llu; key %d: %s %llu/s burst %llu\n",
					      h->name, live(h, 1, now),
					      (unsigned long long)h->held[1].epoch,
					      (unsigned long long)h->held[1].seq,
					      (unsigned long long)h->held[1].rate,
					      (unsigned long long)h->held[1].burst, u,
					      h->has[u] ? "entry" : "no entry",
					      (unsigned long long)h->krate[u],
					      (unsigned long long)h->kburst[u]);
			}
		if (kr > R || kb > B)
			fail_msg("seed %llu, after %s: holders may spend %llu/s burst %llu on key %d "
				 "of k, above (%d, %d)",
				 (unsigned long long)x->seed, after, (unsigned long long)kr,
				 (unsigned long long)kb, u, R, B);
	}
}

/* Key u of k: 10.0.0.(u + 1). */
static struct ll_key_id key_of(int u)
{
	struct ll_key_id k = {.family = 4};

	k.addr[2] = htonl(0xffff);
	k.addr[3] = htonl(0x0a000001u + (uint32_t)u);
	return k;
}

static int key_index(const struct ll_key_id *k)
{
	for (int u = 0; u < NK; u++) {
		struct ll_key_id w = key_of(u);

		if (!memcmp(&w, k, sizeof(w)))
			return u;
	}
	return -1;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* k's per-key set after grant g, as link.c applies it: false if the agent
 * refuses the grant (then nothing of it is applied).
 */
static bool apply_keys(struct model *x, struct holder *h, const struct wire_grant *g)
{
	bool named[NK] = {false};

	if (g->keys_full == WIRE_KEYS_CHANGES &&
	    (!h->full_seen || h->held[1].epoch != g->epoch || h->held[1].seq < g->keys_base)) {
		x->refused++;
		return false;
	}
	if (g->keys_full != WIRE_KEYS_CHANGES)
		memset(h->proof, 0, sizeof(h->proof)); /* hot_grant_applied */
	if (g->keys_full == WIRE_KEYS_WHOLE) {
		memset(h->has, 0, sizeof(h->has));
		h->full_seen = true;
		x->wholes++;
	} else if (g->keys_full == WIRE_KEYS_CUT) {
		h->full_seen = false;
		x->cuts++;
	} else {
		x->changes++;
	}
	for (uint32_t i = 0; i < g->n_keys; i++) {
		const struct wire_key_grant *k = &g->keys[i];
		int u = key_index(&k->key);

		if (u < 0)
			fail_msg("seed %llu: a grant names a key nobody listed",
				 (unsigned long long)x->seed);
		named[u] = true;
		memset(&h->proof[u], 0, sizeof(h->proof[u]));
		if (k->op == WIRE_KEY_SET) {
			h->proof[u].epoch = g->epoch;
			h->proof[u].seq = g->seq;
			h->proof[u].rate = k->rate;
			h->proof[u].burst = k->burst;
			memcpy(h->proof[u].tag, k->tag, WIRE_TAG_LEN);
		}
		if (g->keys_full == WIRE_KEYS_CUT) {
			assert_int_equal(k->op, WIRE_KEY_SET);
			h->krate[u] = min64(k->rate, h->has[u] ? h->krate[u] : g->rate);
			h->kburst[u] = min64(k->burst, h->has[u] ? h->kburst[u] : g->burst);
			h->has[u] = true;
			continue;
		}
		h->has[u] = k->op == WIRE_KEY_SET;
		h->krate[u] = k->rate;
		h->kburst[u] = k->burst;
	}
	for (int u = 0; g->keys_full == WIRE_KEYS_CUT && u < NK; u++)
		if (h->has[u] && !named[u]) {
			h->krate[u] = min64(h->krate[u], g->rate);
			h->kburst[u] = min64(h->kburst[u], g->burst);
		}
	return true;
}

static void up(struct model *x, struct holder *h)
{
	if (h->c.fd >= 0)
		return;
	coord_dial(x->port, &h->c);
	WIRE_MSG_CLEAR(x->m, hello);
	x->m->type = WIRE_HELLO;
	snprintf(x->m->hello.holder, sizeof(x->m->hello.holder), "%s", h->name);
	x->m->hello.incarnation = h->inc;
	x->m->hello.max_epoch_seen =
	    h->held[0].epoch > h->held[1].epoch ? h->held[0].epoch : h->held[1].epoch;
	h->full_seen = false; /* a new connection: no whole set yet */
	assert_int_equal(conn_send(&h->c, x->m), 0);
}

/* As an agent applies a grant: newer (epoch, seq) only; expiry from the
 * send time of the report it answers.
 */
static void on_grant(struct model *x, struct holder *h, const struct wire_grant *g)
{
	int l = !strcmp(g->limit, "k");
	uint64_t t_send = 0;

	for (int k = 0; k < SENT_RING; k++)
		if (h->sent_ns[k] && h->sent_seq[k] == g->report_seq)
			t_send = h->sent_ns[k];
	if (!t_send)
		fail_msg("seed %llu: grant answers report %llu, which %s did not send recently",
			 (unsigned long long)x->seed, (unsigned long long)g->report_seq, h->name);
	assert_true(g->rate <= R && g->burst <= B);
	if (g->epoch < x->epoch_min)
		fail_msg("seed %llu: a grant of epoch %llu after a restart past epoch %llu",
			 (unsigned long long)x->seed, (unsigned long long)g->epoch,
			 (unsigned long long)x->epoch_min - 1);
	x->epoch_max = g->epoch > x->epoch_max ? g->epoch : x->epoch_max;
	x->grants++;
	if (h->held[l].epoch > g->epoch ||
	    (h->held[l].epoch == g->epoch && h->held[l].seq >= g->seq)) {
		x->stale++; /* the agent refuses it: older than what it holds */
		return;
	}
	if (getenv("LL_TRACE") && l == 1) {
		print_message("%s grant k e%llu s%llu share %llu/%llu mode %u base %llu:",
			      h->name, (unsigned long long)g->epoch, (unsigned long long)g->seq,
			      (unsigned long long)g->rate, (unsigned long long)g->burst,
			      g->keys_full, (unsigned long long)g->keys_base);
		for (uint32_t i = 0; i < g->n_keys; i++)
			print_message(" [%d %s %llu/%llu]", key_index(&g->keys[i].key),
				      g->keys[i].op == WIRE_KEY_SET ? "set" : "del",
				      (unsigned long long)g->keys[i].rate,
				      (unsigned long long)g->keys[i].burst);
		print_message("\n");
	}
	if (l == 1 && !apply_keys(x, h, g))
		return;
	if (l == 0)
		assert_int_equal(g->n_keys, 0);
	h->held[l] = coord_held_of(g);
	h->expiry[l] = t_send + g->ttl_ns;
}

/* Read what each connected holder has been sent, apply it, check. */
static void drain(struct model *x)
{
	for (int i = 0; i < H; i++) {
		struct holder *h = &x->h[i];
		int r, err;

		if (h->c.fd < 0)
			continue;
		err = conn_read(&h->c);
		while ((r = conn_next(&h->c, x->m)) > 0) {
			if (x->m->type == WIRE_GRANT)
				on_grant(x, h, &x->m->grant);
			invariant(x, "a grant");
		}
		if (err || r < 0)
			conn_close(&h->c);
	}
}

/* forge: 0 none, 1 the share re-presented above what its tag proves, 2 the
 * per-key entries.
 */
static void report(struct model *x, struct holder *h, int forge)
{
	uint64_t now = clock_now_ns();
	int k;

	WIRE_MSG_CLEAR(x->m, report.hot[NK]);
	x->m->type = WIRE_REPORT;
	snprintf(x->m->report.holder, sizeof(x->m->report.holder), "%s", h->name);
	x->m->report.incarnation = h->inc;
	x->m->report.seq = ++h->seq;
	x->m->report.max_epoch_seen =
	    h->held[0].epoch > h->held[1].epoch ? h->held[0].epoch : h->held[1].epoch;
	x->m->report.n = NL;
	for (int l = 0; l < NL; l++) {
		struct wire_report_entry *e = &x->m->report.e[l];

		snprintf(e->limit, sizeof(e->limit), "%s", l ? "k" : "a");
		e->demand = h->demand;
		if (live(h, l, now)) {
			coord_entry_held(e, &h->held[l], h->expiry[l] - now);
			if (forge == 1) {
				/* More than the tag proves: must earn nothing beyond it. */
				e->held_rate = R;
				e->held_burst = B;
				x->forged++;
			}
		} else if (h->held[l].epoch) {
			e->applied_epoch = h->held[l].epoch; /* dead: applied, nothing to adopt */
			e->applied_seq = h->held[l].seq;
		}
	}
	/* k's keys with the demand each wants (it stands until told again),
	 * and the entry held, as hot.c re-presents it (forge: more than the
	 * tag proves).
	 */
	for (int u = 0; u < NK; u++) {
		struct wire_hot *w = &x->m->report.hot[x->m->report.n_hot++];

		*w = (struct wire_hot){.entry = 1, .key = key_of(u), .demand = h->want[u]};
		if (!live(h, 1, now) || !h->has[u] || !h->proof[u].seq ||
		    h->proof[u].epoch != h->held[1].epoch)
			continue;
		w->held_seq = h->proof[u].seq;
		w->held_rate = forge == 2 ? R : h->proof[u].rate;
		w->held_burst = forge == 2 ? B : h->proof[u].burst;
		memcpy(w->held_tag, h->proof[u].tag, WIRE_TAG_LEN);
		x->key_forged += forge == 2;
	}
	k = (int)(h->seq % SENT_RING);
	h->sent_seq[k] = h->seq;
	h->sent_ns[k] = now;
	if (conn_send(&h->c, x->m))
		conn_close(&h->c);
}

static void restart(struct model *x, uint64_t *s)
{
	int st;

	if (getenv("LL_TRACE"))
		print_message("-- restart\n");
	kill(x->pid, SIGKILL);
	waitpid(x->pid, &st, 0);
	/* Its own check, before the next run empties the log. */
	assert_false(coord_log_has(x->dir, "INVARIANT VIOLATED"));
	x->adopted += adopted_in_log(x, false);
	x->keys_adopted += adopted_in_log(x, true);
	for (int i = 0; i < H; i++)
		conn_close(&x->h[i].c);
	/* Every epoch seen so far is an earlier run's: the next run's are above. */
	x->epoch_min = x->epoch_max + 1;
	x->restarts++;
	assert_int_equal(spawn(x), 0);
	/* Half the holders come back late, their old grants still live: the
	 * shares the new run does not know of while it serves the others.
	 */
	for (int i = 0; i < H; i++)
		x->h[i].away_until =
		    rnd_in(s, 0, 1) ? clock_now_ns() + rnd_in(s, 0, TTL_MS) * NSEC_PER_MSEC : 0;
}

static void test_random_restarts_keep_the_sum(void **state)
{
	struct model *x = *state;
	uint64_t s = x->seed;
	int last_restart = 0;

	fprintf(stderr, "adoption model: seed %llu (LL_SEED to replay)\n",
		(unsigned long long)x->seed);
	for (int step = 0; step < STEPS; step++) {
		struct holder *h = &x->h[rnd_in(&s, 0, H - 1)];
		uint64_t ev = rnd_in(&s, 0, 99);

		if (clock_now_ns() < h->away_until) {
			/* silent */
		} else if (ev < 70) {
			up(x, h);
			report(x, h, 0);
		} else if (ev < 78) {
			static const uint64_t d[] = {0, R / 8, R / 4, R, 3 * R};

			h->demand = d[rnd_in(&s, 0, 4)];
			h->want[rnd_in(&s, 0, NK - 1)] = d[rnd_in(&s, 0, 4)];
		} else if (ev < 86) {
			conn_close(&h->c);
		} else if (ev < 90) {
			up(x, h);
			report(x, h, (int)rnd_in(&s, 1, 2));
		} else if (ev < 96) {
			usleep((useconds_t)rnd_in(&s, 0, 3 * TTL_MS / 2) *
			       1000); /* leases may die */
		} else if (x->restarts < RESTARTS &&
			   step - last_restart >= STEPS / (RESTARTS + 2)) {
			restart(x, &s); /* spread over the run: adoption, then steady state */
			last_restart = step;
		}
		invariant(x, "an event");
		usleep((useconds_t)rnd_in(&s, 5, 25) * 1000);
		drain(x);
	}
	fprintf(stderr,
		"adoption model: %d steps, %llu restarts, %llu grants (%llu older than held), "
		"%llu forged re-presentations, %llu adoptions, epochs up to %llu; max live %llu/s "
		"burst %llu (R %d, B %d); k: %llu whole sets, %llu changes (%llu refused), %llu "
		"cuts, %llu per-key entries adopted, %llu forged, max on one key %llu/s\n",
		STEPS, (unsigned long long)x->restarts, (unsigned long long)x->grants,
		(unsigned long long)x->stale, (unsigned long long)x->forged,
		(unsigned long long)(x->adopted + adopted_in_log(x, false)),
		(unsigned long long)x->epoch_max, (unsigned long long)x->max_rate,
		(unsigned long long)x->max_burst, R, B, (unsigned long long)x->wholes,
		(unsigned long long)x->changes, (unsigned long long)x->refused,
		(unsigned long long)x->cuts,
		(unsigned long long)(x->keys_adopted + adopted_in_log(x, true)),
		(unsigned long long)x->key_forged, (unsigned long long)x->max_key);
	/* The run exercised what it is about: restarts, and grants after them. */
	assert_true(x->restarts >= 1);
	assert_true(x->adopted + adopted_in_log(x, false) >= 1);
	assert_true(x->keys_adopted + adopted_in_log(x, true) >= 1);
	assert_true(x->epoch_max > 1);
	assert_true(x->grants > 50);
	assert_true(x->cuts >= 1); /* k was renewed in a quiet period */
	assert_false(coord_log_has(x->dir, "INVARIANT VIOLATED"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_random_restarts_keep_the_sum, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
