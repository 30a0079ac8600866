// SPDX-License-Identifier: MIT
/*
 * The election's thread (election.h): etcd's lease, the campaign
 * transaction, the deadline on our own clock, the view for the loop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "coord/election.h"
#include "coord/etcd.h"
#include "lib/lease_clock.h"
#include "lib/log.h"
#include "lib/monotonic.h"

#define TICK_NS (100 * NSEC_PER_MSEC)

struct election {
	struct election_cfg cfg;
	struct etcd etcd;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	uint64_t floor; /* the highest epoch a holder has seen (election_floor) */
	int efd;
	struct election_view view; /* under mu */
	/* The thread's own. */
	uint64_t lease_id, lease_ttl_s,
	    lease_sent_ns; /* t_send of the last answered grant/keepalive */
	uint64_t next_keepalive_ns, next_poll_ns;
	uint64_t create_rev; /* of PREFIX/leader, ours while we lead */
	bool leader, stepped_down;
	uint64_t epoch;
	char k_leader[96], k_epoch[96];
	struct election_view v; /* what the thread publishes */
};

static struct json_object *key_obj(const char *k)
{
	return etcd_b64(k, strlen(k));
}

static void publish(struct election *e)
{
	uint64_t one = 1;

	e->v.leader = e->leader;
	e->v.epoch = e->leader || e->stepped_down ? e->epoch : e->v.epoch;
	e->v.deadline_ns =
	    e->leader ? lease_expiry(e->lease_sent_ns, e->lease_ttl_s * NSEC_PER_SEC) : 0;
	e->v.etcd_errors = e->etcd.errors;
	e->v.bad_answers = e->etcd.bad;
	pthread_mutex_lock(&e->mu);
	if (memcmp(&e->view, &e->v, sizeof(e->v))) {
		e->view = e->v;
		if (write(e->efd, &one, sizeof(one)) < 0)
			(void)0; /* the counter is full: the loop reads the view anyway */
	}
	pthread_mutex_unlock(&e->mu);
}

static void answered(struct election *e, bool ok)
{
	e->v.etcd_ok = ok;
	if (ok)
		e->v.last_ok_ns = clock_now_ns();
}

/* /v3/lease/grant or keepalive: t_send before the request. */
static void lease_refresh(struct election *e, uint64_t now)
{
	struct json_object *b = json_object_new_object(), *a, *r;
	uint64_t id = 0, ttl = 0, t_send = clock_now_ns();
	char num[24];

	if (!e->lease_id) {
		snprintf(num, sizeof(num), "%u", e->cfg.ttl_s);
		json_object_object_add(b, "TTL", json_object_new_string(num));
		a = etcd_call(&e->etcd, "/v3/lease/grant", b);
		r = a;
	} else {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->lease_id);
		json_object_object_add(b, "ID", json_object_new_string(num));
		a = etcd_call(&e->etcd, "/v3/lease/keepalive", b);
		r = NULL;
		if (a && !json_object_object_get_ex(a, "result", &r))
			r = NULL;
	}
	answered(e, a != NULL);
	if (!a)
		return;
	if (!r || etcd_u64(r, "ID", &id) || etcd_u64(r, "TTL", &ttl) || ttl > 3600) {
		e->etcd.bad++;
	} else if (!id || !ttl) {
		/* The lease is gone at etcd: so is any key under it. */
		if (e->lease_id)
			pr_warn("election: etcd lease %llx expired\n",
				(unsigned long long)e->lease_id);
		e->lease_id = 0;
		if (e->leader || e->stepped_down) {
			e->v.lost_lease++;
			e->leader = e->stepped_down = false;
		}
	} else {
		e->lease_id = id;
		e->lease_ttl_s = ttl;
		e->lease_sent_ns = t_send;
		/* Six a ttl (etcd's client sends three): when etcd's own leader
		 * dies, its members take a second or more (more on a loaded
		 * host) to elect another, and each keepalive waits that out. A
		 * keepalive every ttl/3 left as little as 2/3 of the ttl for that,
		 * and the leader stepped down (and resumed) while etcd kept
		 * quorum; every ttl/6 leaves 5/6.
		 */
		e->next_keepalive_ns = now + ttl * NSEC_PER_SEC / 6;
	}
	json_object_put(a);
}

/* The first kv of a range or txn response r, or NULL. */
static struct json_object *first_kv(struct json_object *r)
{
	struct json_object *kvs;

	if (!r || !json_object_object_get_ex(r, "kvs", &kvs) ||
	    !json_object_is_type(kvs, json_type_array) || !json_object_array_length(kvs))
		return NULL;
	return json_object_array_get_idx(kvs, 0);
}

/* The leader key's kv: its value parsed into the view. false if malformed. */
static bool leader_seen(struct election *e, struct json_object *kv, uint64_t *lease,
			uint64_t *create_rev)
{
	char val[ETCD_VALUE_MAX];
	struct json_object *j, *x;
	bool ok = true;

	*lease = *create_rev = 0;
	if (!kv) {
		e->v.leader_node[0] = e->v.leader_addr[0] = '\0';
		return true;
	}
	if (etcd_u64(kv, "lease", lease) || etcd_u64(kv, "create_revision", create_rev) ||
	    etcd_unb64(kv, "value", val, sizeof(val)) <= 0)
		return false;
	j = json_tokener_parse(val);
	if (!j || !json_object_is_type(j, json_type_object))
		ok = false;
	if (ok && json_object_object_get_ex(j, "node", &x) &&
	    json_object_is_type(x, json_type_string) &&
	    strlen(json_object_get_string(x)) < sizeof(e->v.leader_node))
		snprintf(e->v.leader_node, sizeof(e->v.leader_node), "%s",
			 json_object_get_string(x));
	else
		ok = false;
	if (ok && json_object_object_get_ex(j, "advertise", &x) &&
	    json_object_is_type(x, json_type_string) &&
	    strlen(json_object_get_string(x)) < sizeof(e->v.leader_addr))
		snprintf(e->v.leader_addr, sizeof(e->v.leader_addr), "%s",
			 json_object_get_string(x));
	else
		ok = false;
	if (ok && json_object_object_get_ex(j, "epoch", &x) &&
	    json_object_is_type(x, json_type_int) && json_object_get_int64(x) > 0)
		e->v.epoch = (uint64_t)json_object_get_int64(x);
	else
		ok = false;
	json_object_put(j);
	/* A leader named with characters a REDIRECT cannot carry is no leader. */
	for (const char *p = e->v.leader_node; ok && *p; p++)
		ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		     (*p >= '0' && *p <= '9') || strchr("_.-", *p);
	for (const char *p = e->v.leader_addr; ok && *p; p++)
		ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		     (*p >= '0' && *p <= '9') || strchr("_.-:[]", *p);
	if (!ok)
		e->v.leader_node[0] = e->v.leader_addr[0] = '\0';
	return ok;
}

static struct json_object *range_body(const char *key)
{
	struct json_object *b = json_object_new_object();

	json_object_object_add(b, "key", key_obj(key));
	return b;
}

static struct json_object *compare(const char *target, const char *key, const char *field,
				   uint64_t v)
{
	struct json_object *c = json_object_new_object();
	char num[24];

	snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
	json_object_object_add(c, "result", json_object_new_string("EQUAL"));
	json_object_object_add(c, "target", json_object_new_string(target));
	json_object_object_add(c, "key", key_obj(key));
	json_object_object_add(c, field, json_object_new_string(num));
	return c;
}

static struct json_object *put(const char *key, const char *value, uint64_t lease)
{
	struct json_object *op = json_object_new_object(), *p = json_object_new_object();
	char num[24];

	json_object_object_add(p, "key", key_obj(key));
	json_object_object_add(p, "value", etcd_b64(value, strlen(value)));
	if (lease) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)lease);
		json_object_object_add(p, "lease", json_object_new_string(num));
	}
	json_object_object_add(op, "request_put", p);
	return op;
}

/* The counter: its value (0 absent) and mod_revision (0 absent). -1 on failure. */
static int read_epoch(struct election *e, uint64_t *epoch, uint64_t *mod_rev)
{
	struct json_object *a = etcd_call(&e->etcd, "/v3/kv/range", range_body(e->k_epoch)), *kv;
	char val[32];
	char *end;
	int rc = 0;

	answered(e, a != NULL);
	if (!a)
		return -1;
	*epoch = *mod_rev = 0;
	kv = first_kv(a);
	if (kv) {
		if (etcd_u64(kv, "mod_revision", mod_rev) ||
		    etcd_unb64(kv, "value", val, sizeof(val)) <= 0) {
			rc = -1;
		} else {
			errno = 0;
			*epoch = strtoull(val, &end, 10);
			if (errno || *end || *epoch >= LEASE_EPOCH_MAX)
				rc = -1;
		}
	}
	if (rc)
		e->etcd.bad++;
	json_object_put(a);
	return rc;
}

/* One transaction moves PREFIX/epoch to a new value and puts PREFIX/leader:
 * campaign (the key must not exist) or move (the key must be ours). true if
 * it succeeded; the failure branch reads who leads.
 */
static bool epoch_txn(struct election *e, bool campaign)
{
	struct json_object *b = json_object_new_object(), *cmp = json_object_new_array();
	struct json_object *ok = json_object_new_array(), *fail = json_object_new_array(), *a, *x;
	struct json_object *rr = json_object_new_object();
	uint64_t epoch, mod_rev, floor, lease, crev, rev = 0, next;
	char val[ETCD_VALUE_MAX], num[24];
	bool won = false;

	if (read_epoch(e, &epoch, &mod_rev)) {
		json_object_put(b), json_object_put(cmp), json_object_put(ok),
		    json_object_put(fail);
		json_object_put(rr);
		return false;
	}
	pthread_mutex_lock(&e->mu);
	floor = e->floor;
	pthread_mutex_unlock(&e->mu);
	next = (epoch > floor ? epoch : floor) + 1;
	if (next >= LEASE_EPOCH_MAX) {
		pr_warn("election: epoch %llu is out of bounds\n", (unsigned long long)next);
		json_object_put(b), json_object_put(cmp), json_object_put(ok),
		    json_object_put(fail);
		json_object_put(rr);
		return false;
	}
	json_object_array_add(
	    cmp, compare("CREATE", e->k_leader, "create_revision", campaign ? 0 : e->create_rev));
	if (mod_rev)
		json_object_array_add(cmp, compare("MOD", e->k_epoch, "mod_revision", mod_rev));
	else
		json_object_array_add(cmp, compare("CREATE", e->k_epoch, "create_revision", 0));
	snprintf(val, sizeof(val), "{\"node\":\"%s\",\"advertise\":\"%s\",\"epoch\":%llu}",
		 e->cfg.node, e->cfg.advertise, (unsigned long long)next);
	json_object_array_add(ok, put(e->k_leader, val, e->lease_id));
	snprintf(num, sizeof(num), "%llu", (unsigned long long)next);
	json_object_array_add(ok, put(e->k_epoch, num, 0));
	json_object_object_add(rr, "request_range", range_body(e->k_leader));
	json_object_array_add(fail, rr);
	json_object_object_add(b, "compare", cmp);
	json_object_object_add(b, "success", ok);
	json_object_object_add(b, "failure", fail);
	a = etcd_call(&e->etcd, "/v3/kv/txn", b);
	answered(e, a != NULL);
	if (!a)
		return false;
	if (json_object_object_get_ex(a, "succeeded", &x) && json_object_get_boolean(x)) {
		struct json_object *hdr;

		if (json_object_object_get_ex(a, "header", &hdr) &&
		    !etcd_u64(hdr, "revision", &rev) && rev) {
			won = true;
			if (campaign)
				e->create_rev = rev; /* the put that created the key */
			e->epoch = next;
			snprintf(e->v.leader_node, sizeof(e->v.leader_node), "%s", e->cfg.node);
			snprintf(e->v.leader_addr, sizeof(e->v.leader_addr), "%s",
				 e->cfg.advertise);
		} else {
			e->etcd.bad++;
		}
	} else {
		struct json_object *resp, *r0, *r;

		/* The failure branch: the leader's key as it is. */
		if (json_object_object_get_ex(a, "responses", &resp) &&
		    json_object_is_type(resp, json_type_array) && json_object_array_length(resp) &&
		    (r0 = json_object_array_get_idx(resp, 0)) &&
		    json_object_object_get_ex(r0, "response_range", &r)) {
			if (!leader_seen(e, first_kv(r), &lease, &crev))
				e->etcd.bad++;
		}
	}
	json_object_put(a);
	return won;
}

/* Follower: who leads; none, then campaign. */
static void follow(struct election *e)
{
	struct json_object *a = etcd_call(&e->etcd, "/v3/kv/range", range_body(e->k_leader)), *kv;
	uint64_t lease, crev;

	answered(e, a != NULL);
	if (!a)
		return;
	kv = first_kv(a);
	if (!leader_seen(e, kv, &lease, &crev)) {
		e->etcd.bad++;
	} else if (kv && e->stepped_down && lease == e->lease_id && crev == e->create_rev) {
		/* Our key, under our live lease: no one else can have led. */
		e->leader = true;
		e->stepped_down = false;
		e->v.resumed++;
		pr_info(
		    "election: etcd answers again and the leader key is still ours: epoch %llu\n",
		    (unsigned long long)e->epoch);
	} else if (!kv && e->lease_id) {
		e->stepped_down = false;
		e->v.campaigns++;
		if (epoch_txn(e, true)) {
			e->leader = true;
			e->v.won++;
		}
	}
	json_object_put(a);
}

static void *run(void *arg)
{
	struct election *e = arg;

	pthread_mutex_lock(&e->mu);
	while (!e->stop) {
		uint64_t now, floor;
		struct timespec ts;

		pthread_mutex_unlock(&e->mu);
		now = clock_now_ns();
		if (!e->lease_id || now >= e->next_keepalive_ns)
			lease_refresh(e, now);
		now = clock_now_ns();
		/* Our own clock decides: past the deadline we do not lead. */
		if (e->leader &&
		    now >= lease_expiry(e->lease_sent_ns, e->lease_ttl_s * NSEC_PER_SEC)) {
			e->leader = false;
			e->stepped_down = true;
			e->v.step_downs++;
			pr_warn(
			    "election: etcd silent past the deadline: not leading (epoch %llu)\n",
			    (unsigned long long)e->epoch);
		}
		if (!e->leader && e->lease_id && now >= e->next_poll_ns) {
			e->next_poll_ns = now + e->cfg.ttl_s * NSEC_PER_SEC / 10;
			follow(e);
		}
		pthread_mutex_lock(&e->mu);
		floor = e->floor;
		pthread_mutex_unlock(&e->mu);
		if (e->leader && floor >= e->epoch && !epoch_txn(e, false))
			e->leader = false; /* not ours any more, or etcd silent: follow */
		publish(e);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += TICK_NS;
		if (ts.tv_nsec >= (long)NSEC_PER_SEC) {
			ts.tv_sec++;
			ts.tv_nsec -= NSEC_PER_SEC;
		}
		pthread_mutex_lock(&e->mu);
		if (!e->stop)
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* The keys and the etcd client of cfg (no thread, no eventfd yet); NULL
 * and *err on failure.
 */
static struct election *election_new(const struct election_cfg *cfg, long timeout_ms, int *err)
{
	struct election *e = calloc(1, sizeof(*e));
	char eps[ETCD_MAX_ENDPOINTS][136];

	*err = -ENOMEM;
	if (!e)
		return NULL;
	e->cfg = *cfg;
	snprintf(e->k_leader, sizeof(e->k_leader), "%s/leader", cfg->prefix);
	snprintf(e->k_epoch, sizeof(e->k_epoch), "%s/epoch", cfg->prefix);
	for (unsigned i = 0; i < cfg->n_endpoints; i++)
		snprintf(eps[i], sizeof(eps[i]), "%s", cfg->endpoints[i]);
	*err = etcd_init(&e->etcd, eps, cfg->n_endpoints, timeout_ms);
	if (!*err && cfg->tls_ca[0]) {
		*err = etcd_tls(&e->etcd, cfg->tls_ca, cfg->tls_cert, cfg->tls_key);
		if (*err)
			etcd_free(&e->etcd);
	}
	if (*err) {
		free(e);
		return NULL;
	}
	return e;
}

int election_start(struct election **out, const struct election_cfg *cfg)
{
	struct election *e;
	int err;

	if (!cfg->n_endpoints || cfg->n_endpoints > ELECTION_MAX_ENDPOINTS ||
	    cfg->ttl_s < ELECTION_TTL_MIN_S || !cfg->node[0] || !cfg->advertise[0] ||
	    cfg->prefix[0] != '/')
		return -EINVAL;
	e = election_new(cfg, cfg->timeout_ms ? (long)cfg->timeout_ms : (long)cfg->ttl_s * 1000 / 5,
			 &err);
	if (!e)
		return err;
	e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	if (!err && e->efd < 0)
		err = -errno;
	if (!err)
		err = -pthread_create(&e->thread, NULL, run, e);
	if (err) {
		etcd_free(&e->etcd);
		if (e->efd >= 0)
			close(e->efd);
		free(e);
		return err;
	}
	*out = e;
	return 0;
}

/* The endpoint i's member status: up, its version, whether it leads raft. */
static void peek_member(struct election *e, unsigned i, struct election_peek *p)
{
	struct json_object *a, *h, *v, *id, *lead;

	e->etcd.cur = i;
	a = etcd_call(&e->etcd, "/v3/maintenance/status", json_object_new_object());
	if (!a)
		return;
	p->ep[i].up = true;
	/* Member ids are uint64 (past int64): compared as the strings they are. */
	if (json_object_object_get_ex(a, "header", &h) &&
	    json_object_object_get_ex(h, "member_id", &id) &&
	    json_object_object_get_ex(a, "leader", &lead) &&
	    json_object_is_type(id, json_type_string) &&
	    json_object_is_type(lead, json_type_string))
		p->ep[i].raft_leader =
		    json_object_get_string(id)[0] &&
		    !strcmp(json_object_get_string(id), json_object_get_string(lead));
	/* etcd's word, shown to a person: digits and dots, or nothing. */
	if (json_object_object_get_ex(a, "version", &v) &&
	    json_object_is_type(v, json_type_string) &&
	    strlen(json_object_get_string(v)) < sizeof(p->ep[i].version) &&
	    strspn(json_object_get_string(v), "0123456789.") == strlen(json_object_get_string(v)))
		snprintf(p->ep[i].version, sizeof(p->ep[i].version), "%s",
			 json_object_get_string(v));
	json_object_put(a);
}

int election_peek(const struct election_cfg *cfg, struct election_peek *out)
{
	struct election *e;
	struct json_object *a;
	uint64_t lease, rev, mod;
	int err;

	memset(out, 0, sizeof(*out));
	if (!cfg->n_endpoints || cfg->n_endpoints > ELECTION_MAX_ENDPOINTS || cfg->prefix[0] != '/')
		return -EINVAL;
	e = election_new(cfg, cfg->timeout_ms ? (long)cfg->timeout_ms : 1000, &err);
	if (!e)
		return err;
	for (unsigned i = 0; i < cfg->n_endpoints; i++)
		peek_member(e, i, out);
	for (unsigned i = 0; i < cfg->n_endpoints; i++)
		if (out->ep[i].up) {
			e->etcd.cur = i;
			break;
		}
	a = etcd_call(&e->etcd, "/v3/kv/range", range_body(e->k_leader));
	if (a) {
		out->read = true;
		if (!leader_seen(e, first_kv(a), &lease, &rev))
			out->leader_bad = true;
		snprintf(out->leader_node, sizeof(out->leader_node), "%s", e->v.leader_node);
		snprintf(out->leader_addr, sizeof(out->leader_addr), "%s", e->v.leader_addr);
		out->leader_epoch = out->leader_node[0] ? e->v.epoch : 0;
		json_object_put(a);
		out->counter_bad = read_epoch(e, &out->counter, &mod) != 0;
	}
	etcd_free(&e->etcd);
	free(e);
	return 0;
}

int election_fd(const struct election *e)
{
	return e->efd;
}

void election_view(struct election *e, struct election_view *out)
{
	uint64_t v;

	if (read(e->efd, &v, sizeof(v)) < 0)
		(void)0; /* nothing new: the view is copied all the same */
	pthread_mutex_lock(&e->mu);
	*out = e->view;
	pthread_mutex_unlock(&e->mu);
}

void election_floor(struct election *e, uint64_t seen)
{
	pthread_mutex_lock(&e->mu);
	if (seen > e->floor && seen < LEASE_EPOCH_MAX)
		e->floor = seen;
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

void election_stop(struct election *e)
{
	struct json_object *b, *cmp, *ok, *op, *d, *a;
	char num[24];

	pthread_mutex_lock(&e->mu);
	e->stop = true;
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	/* Resign: delete the key if it is ours, then revoke the lease. */
	if (e->create_rev && (e->leader || e->stepped_down)) {
		b = json_object_new_object();
		cmp = json_object_new_array();
		ok = json_object_new_array();
		op = json_object_new_object();
		d = json_object_new_object();
		json_object_array_add(
		    cmp, compare("CREATE", e->k_leader, "create_revision", e->create_rev));
		json_object_object_add(d, "key", key_obj(e->k_leader));
		json_object_object_add(op, "request_delete_range", d);
		json_object_array_add(ok, op);
		json_object_object_add(b, "compare", cmp);
		json_object_object_add(b, "success", ok);
		a = etcd_call(&e->etcd, "/v3/kv/txn", b);
		json_object_put(a);
	}
	if (e->lease_id) {
		b = json_object_new_object();
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->lease_id);
		json_object_object_add(b, "ID", json_object_new_string(num));
		a = etcd_call(&e->etcd, "/v3/lease/revoke", b);
		json_object_put(a);
	}
	etcd_free(&e->etcd);
	close(e->efd);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}
