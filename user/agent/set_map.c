// SPDX-License-Identifier: MIT
/*
 * Writing a policy's prefix sets into ll_sets (see set_map.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "agent/dp.h"
#include "lib/log.h"
#include "agent/set_map.h"
#include "lib/sets.h"
#include "lib/units.h"

/* What the agent wrote for the live policy (live) and for the one being
 * applied (next): each set's file, content digest and id. A set of a new
 * policy with the same file and digest as a live one is not written again.
 * Empty after a start: the first policy writes every set afresh and
 * settles away whatever earlier agents left.
 */
struct set_memo_ent {
	char path[CFG_PATH_LEN];
	uint64_t digest;
	uint32_t id;
};

struct set_memo {
	size_t n_live, n_next;
	bool clean; /* ll_sets holds the live ids' entries only */
	struct set_memo_ent live[LL_MAX_SETS], next[LL_MAX_SETS];
};

static struct set_memo *memo(struct dp *dp)
{
	if (!dp->sets_memo)
		dp->sets_memo = calloc(1, sizeof(struct set_memo));
	return dp->sets_memo;
}

static bool id_in(uint32_t id, const uint32_t *ids, size_t n);

/* The distinct set ids pol's rules name, into ids (room for 2 *
 * LL_MAX_RULES; a policy names at most LL_MAX_SETS), so that a walk of the
 * trie compares each entry with a few ids, not one per rule.
 */
static size_t policy_ids(const struct ll_policy *pol, uint32_t *ids)
{
	size_t n = 0;

	for (uint32_t i = 0; pol && i < pol->n_rules && i < LL_MAX_RULES; i++) {
		uint32_t s = pol->rules[i].src_set, d = pol->rules[i].dst_set;

		if (s && !id_in(s, ids, n))
			ids[n++] = s;
		if (d && !id_in(d, ids, n))
			ids[n++] = d;
	}
	return n;
}

void set_map_free(struct dp *dp)
{
	free(dp->sets_memo);
	dp->sets_memo = NULL;
}

static struct ll_set_key set_key(uint32_t id, const struct set_entry *e)
{
	struct ll_set_key k = {.set_id = id};

	k.prefixlen = 32 + units_prefix_v6map(e->family, e->addr, e->plen, (uint8_t *)k.addr);
	return k;
}

static bool id_in(uint32_t id, const uint32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Delete every entry whose id is not one of keep[0..n). */
static void prune(struct dp *dp, const uint32_t *keep, size_t n)
{
	struct ll_set_key k, next, *prev = NULL, *gone = NULL;
	size_t ng = 0, cap = 0;

	while (!bpf_map_get_next_key(dp->sets_fd, prev, &next)) {
		k = next;
		prev = &k;
		if (id_in(k.set_id, keep, n))
			continue;
		if (ng == cap) {
			struct ll_set_key *g =
			    realloc(gone, (cap = cap ? 2 * cap : 1024) * sizeof(*g));

			if (!g)
				break;
			gone = g;
		}
		gone[ng++] = k;
	}
	for (size_t i = 0; i < ng; i++)
		bpf_map_delete_elem(dp->sets_fd, &gone[i]);
	if (ng)
		pr_debug("%zu prefixes of sets no longer named removed\n", ng);
	free(gone);
}

int set_map_write(struct dp *dp, const struct cfg_policy *cp, const struct ll_policy *prev,
		  uint32_t *next_uid, uint32_t *ids, char *err, size_t errlen)
{
	static uint32_t keep[2 * LL_MAX_RULES]; /* one thread applies policies */
	struct set_memo *m = memo(dp);
	size_t nfresh = 0, used = 0;
	int rc = 0;

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->n_next = 0;
	/* The first policy of this agent: entries no live id names (an agent
	 * that died mid-write) would take the room the new sets need.
	 */
	if (!m->clean && cp->n_sets) {
		size_t nk = policy_ids(prev, keep);

		prune(dp, keep, nk);
		/* The running policy's sets, of unknown files: written anew
		 * below, and deleted once the new policy is live.
		 */
		m->n_live = 0;
		for (size_t j = 0; j < nk; j++) {
			size_t i;

			for (i = 0; i < m->n_live && m->live[i].id != keep[j]; i++)
				;
			if (i == m->n_live && m->n_live < LL_MAX_SETS) {
				memset(&m->live[i], 0, sizeof(m->live[i]));
				m->live[i].id = keep[j];
				m->n_live++;
			}
		}
		m->clean = true;
	}
	for (uint32_t i = 0; !rc && i < cp->n_sets; i++) {
		struct cfg_err ce = {0};
		struct set_entry *e = NULL;
		uint64_t digest;
		size_t n = 0, j;

		rc = set_load(cp->sets[i].path, LL_MAX_SET_ENTRIES - used, used, &e, &n, &ce);
		if (rc) {
			snprintf(err, errlen, "%s", ce.msg);
			break;
		}
		used += n;
		digest = set_digest(e, n);
		for (j = 0; j < m->n_live; j++)
			if (m->live[j].digest == digest &&
			    !strcmp(m->live[j].path, cp->sets[i].path))
				break;
		if (j < m->n_live) {
			ids[i] = m->live[j].id; /* the running policy's, unchanged */
		} else {
			ids[i] = (*next_uid)++;
			nfresh++;
		}
		snprintf(m->next[i].path, sizeof(m->next[i].path), "%s", cp->sets[i].path);
		m->next[i].digest = digest;
		m->next[i].id = ids[i];
		m->n_next = i + 1;
		for (size_t k = 0; j == m->n_live && k < n; k++) {
			struct ll_set_key key = set_key(ids[i], &e[k]);
			uint32_t line = e[k].line;

			if (bpf_map_update_elem(dp->sets_fd, &key, &line, BPF_ANY)) {
				rc = -errno;
				snprintf(err, errlen,
					 "set %s: cannot write the prefix of line %u: %s (ll_sets "
					 "holds %d prefixes)",
					 cp->sets[i].path, line, strerror(-rc), LL_SET_MAP_ENTRIES);
				break;
			}
		}
		if (!rc && j == m->n_live)
			pr_info("set %s: %zu prefixes written under id %u\n", cp->sets[i].path, n,
				ids[i]);
		free(e);
	}
	/* Only the running policy's ids stay. */
	if (rc && nfresh)
		prune(dp, keep, policy_ids(prev, keep));
	return rc;
}

void set_map_settle(struct dp *dp, const struct ll_policy *live, bool applied)
{
	static uint32_t keep[2 * LL_MAX_RULES];
	struct set_memo *m = memo(dp);
	size_t nk = policy_ids(live, keep);
	bool same;

	if (!m)
		return;
	if (applied) {
		/* Nothing to delete when every id the map held is still named. */
		same = m->clean;
		for (size_t j = 0; same && j < m->n_live; j++)
			same = id_in(m->live[j].id, keep, nk);
		memcpy(m->live, m->next, m->n_next * sizeof(m->live[0]));
		m->n_live = m->n_next;
	} else {
		same = false;
	}
	m->n_next = 0;
	if (!same)
		prune(dp, keep, nk);
	m->clean = true;
}
