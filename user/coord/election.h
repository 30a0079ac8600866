/* SPDX-License-Identifier: MIT */
/*
 * Leadership among coordinator replicas, decided by etcd (reference §6.4,
 * docs/design.md "Replicas"). A thread of its own talks to etcd's v3 JSON
 * API (coord/etcd.h: libcurl + json-c) and hands the event loop a view:
 * whether this replica leads, under which epoch, until when it may grant,
 * and who leads otherwise. No etcd call ever runs on the event loop.
 *
 * The election, on the thread:
 *  - one etcd lease of ttl_s (>= 5 s: etcd itself may take ~3 s to elect
 *    a new member leader), kept alive every ttl/3;
 *  - a campaign is ONE transaction: if PREFIX/leader does not exist and
 *    PREFIX/epoch still has the mod_revision just read, put PREFIX/leader
 *    (under our lease; value: {"node","advertise","epoch"}) and PREFIX/epoch
 *    = max(counter, floor) + 1 (a dense counter, never etcd's revision);
 *  - leadership is decided by transactions only, never by a watch event;
 *  - the deadline: t_send of the last keepalive (or campaign) etcd answered
 *    + granted ttl·(1 − ρ) − δ (lib/lease_clock.h), CLOCK_MONOTONIC. Past
 *    it the loop grants nothing, whatever the thread believes;
 *  - after a step-down by its own clock, a replica whose etcd lease still
 *    holds PREFIX/leader (a keepalive answered again, the key's lease ours)
 *    resumes at the same epoch; otherwise it campaigns as any follower;
 *  - a follower reads PREFIX/leader every ttl/10 (bounded) for the view's
 *    leader and address, and campaigns when it is absent.
 */
#ifndef LEASELINE_COORD_ELECTION_H
#define LEASELINE_COORD_ELECTION_H

#include <stdbool.h>
#include <stdint.h>

#include "lib/wire.h"

#define ELECTION_MAX_ENDPOINTS 8
#define ELECTION_TTL_MIN_S     5

#define ELECTION_PATH_LEN 4096 /* CFG_PATH_LEN */

struct election_cfg {
	/* etcd client URLs, "http://127.0.0.1:2379"; tried in turn. */
	char endpoints[ELECTION_MAX_ENDPOINTS][WIRE_ADDR_LEN];
	unsigned n_endpoints;
	char prefix[64];	       /* keys under it: "/leaseline/<cluster>" */
	char node[WIRE_HOLDER_LEN];    /* this replica's name */
	char advertise[WIRE_ADDR_LEN]; /* host:port agents dial for this replica */
	unsigned ttl_s;		       /* etcd lease ttl, >= ELECTION_TTL_MIN_S */
	unsigned timeout_ms;	       /* one HTTP request's bound (default ttl/5) */
	/* Mutual TLS to etcd (https:// endpoints): PEM files, "" for none. */
	char tls_ca[ELECTION_PATH_LEN], tls_cert[ELECTION_PATH_LEN], tls_key[ELECTION_PATH_LEN];
};

struct election_view {
	bool leader;			   /* this replica won and has not seen it lost */
	uint64_t epoch;			   /* leader: ours; else the leader's, 0 unknown */
	uint64_t deadline_ns;		   /* leader: grant only while now < this */
	char leader_node[WIRE_HOLDER_LEN]; /* "" unknown */
	char leader_addr[WIRE_ADDR_LEN];   /* the leader's advertise, "" unknown */
	bool etcd_ok;			   /* the last request etcd answered */
	uint64_t last_ok_ns;		   /* when a request last got an answer */
	/* Counters for metrics (monotonic). */
	uint64_t campaigns, won, lost_lease, step_downs, resumed, etcd_errors, bad_answers;
};

struct election;

/* Start the thread (0 or -errno; -EINVAL for a cfg out of bounds). */
int election_start(struct election **out, const struct election_cfg *cfg);
/* Readable (eventfd) whenever the view changed. */
int election_fd(const struct election *e);
/* Clear the fd and copy the current view. */
void election_view(struct election *e, struct election_view *out);
/* A holder has seen epoch `seen`: the next epoch this replica takes (and,
 * if it leads, the one it moves to at once, in a transaction that checks
 * it still leads) is above it. Asynchronous: the view shows the result.
 */
void election_floor(struct election *e, uint64_t seen);
/* One look at etcd for `leaseline coord-status`: each endpoint's answer
 * to /v3/maintenance/status, then PREFIX/leader and PREFIX/epoch. No
 * lease, no campaign, no thread: it changes nothing in etcd.
 */
struct election_peek {
	struct {
		bool up;	  /* answered */
		bool raft_leader; /* the member that leads etcd's own raft */
		char version[16];
	} ep[ELECTION_MAX_ENDPOINTS];
	bool read;			   /* the keys were read (some endpoint answered) */
	bool leader_bad;		   /* PREFIX/leader exists but is malformed */
	bool counter_bad;		   /* PREFIX/epoch exists but is malformed */
	char leader_node[WIRE_HOLDER_LEN]; /* "" no leader */
	char leader_addr[WIRE_ADDR_LEN];
	uint64_t leader_epoch, counter; /* counter: PREFIX/epoch, 0 absent */
};
/* 0, -EINVAL for a cfg out of bounds, -ENOMEM. */
int election_peek(const struct election_cfg *cfg, struct election_peek *out);
/* Resign (delete PREFIX/leader if ours, revoke the lease), stop, free. */
void election_stop(struct election *e);

#endif /* LEASELINE_COORD_ELECTION_H */
