// SPDX-License-Identifier: MIT
/*
 * Connection slots (slots.h): one pass counts what the new connection's
 * address and prefix hold and finds a free slot; only a full table takes a
 * second, which counts every prefix in a scratch hash table (SipHash-keyed:
 * the prefixes are the peers' choice) and picks the connection that gives
 * way from the fullest.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "coord/slots.h"
#include "coord/state.h"

struct slot_prefix {
	uint8_t key[16];
	uint32_t gen; /* the pass that used it (else empty) */
	uint32_t count;
	int32_t silent, spoke; /* the oldest that has sent nothing / is past the grace */
	uint64_t silent_ns, spoke_ns;
};

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_v4(const uint8_t a[16])
{
	return !memcmp(a, v4mapped, sizeof(v4mapped));
}

void slots_peer_bytes(const struct sockaddr_storage *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->ss_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

const char *slots_addr_str(const uint8_t a[16], char *buf, size_t len)
{
	if (is_v4(a))
		inet_ntop(AF_INET, a + 12, buf, (socklen_t)len);
	else
		inet_ntop(AF_INET6, a, buf, (socklen_t)len);
	return buf;
}

bool slots_same_prefix(const uint8_t a[16], const uint8_t b[16])
{
	bool v4 = is_v4(a);

	return v4 == is_v4(b) && !memcmp(a, b, v4 ? 15 : 6);
}

int slots_init(struct slot_table *t, struct cconn **c, size_t n)
{
	size_t slots = 2;

	memset(t, 0, sizeof(*t));
	t->c = c;
	t->n = n;
	while (slots < 2 * n)
		slots *= 2;
	/* calloc: its pages are touched only once a table fills. */
	t->pfx = calloc(slots, sizeof(*t->pfx));
	if (!t->pfx)
		return -ENOMEM;
	t->mask = (uint32_t)(slots - 1);
	while (getrandom(&t->seed, sizeof(t->seed), 0) != (ssize_t)sizeof(t->seed))
		if (errno != EINTR)
			return -errno;
	return 0;
}

void slots_free(struct slot_table *t)
{
	free(t->pfx);
	t->pfx = NULL;
}

static struct slot_prefix *prefix_entry(struct slot_table *t, const uint8_t peer[16])
{
	uint8_t key[16];
	uint32_t i;

	memcpy(key, peer, 16);
	if (is_v4(peer))
		key[15] = 0;
	else
		memset(key + 6, 0, 10);
	i = (uint32_t)hmap_siphash24(&t->seed, key, 16) & t->mask;
	for (;; i = (i + 1) & t->mask) {
		struct slot_prefix *e = &t->pfx[i];

		if (e->gen != t->gen) {
			memcpy(e->key, key, 16);
			e->gen = t->gen;
			e->count = 0;
			e->silent = e->spoke = -1;
			return e;
		}
		if (!memcmp(e->key, key, 16))
			return e;
	}
}

/* Whether a may give way before b: a fuller prefix, then one with a
 * silent connection, then the older connection.
 */
static bool gives_way_first(const struct slot_prefix *a, const struct slot_prefix *b)
{
	if (!b)
		return true;
	if (a->count != b->count)
		return a->count > b->count;
	if ((a->silent >= 0) != (b->silent >= 0))
		return a->silent >= 0;
	return a->silent >= 0 ? a->silent_ns < b->silent_ns : a->spoke_ns < b->spoke_ns;
}

static long fullest_prefix_victim(struct slot_table *t, uint64_t batch_ns, uint64_t now)
{
	const struct slot_prefix *best = NULL;

	if (++t->gen == 0) { /* wrapped: every entry looks used by pass 0 */
		for (uint32_t i = 0; i <= t->mask; i++)
			t->pfx[i].gen = 0;
		t->gen = 1;
	}
	for (size_t ci = 0; ci < t->n; ci++) {
		const struct cconn *cc = t->c[ci];
		struct slot_prefix *e;

		if (!cc || cc->holder >= 0)
			continue;
		e = prefix_entry(t, cc->peer);
		e->count++;
		if (cc->accepted_ns >= batch_ns)
			continue;
		if (!cc->spoke && (e->silent < 0 || cc->accepted_ns < e->silent_ns)) {
			e->silent = (int32_t)ci;
			e->silent_ns = cc->accepted_ns;
		} else if (cc->spoke && now - cc->accepted_ns >= COORD_PENDING_GRACE_NS &&
			   (e->spoke < 0 || cc->accepted_ns < e->spoke_ns)) {
			e->spoke = (int32_t)ci;
			e->spoke_ns = cc->accepted_ns;
		}
	}
	for (uint32_t i = 0; i <= t->mask; i++) {
		const struct slot_prefix *e = &t->pfx[i];

		if (e->gen == t->gen && (e->silent >= 0 || e->spoke >= 0) && gives_way_first(e, best))
			best = e;
	}
	return !best ? -1 : best->silent >= 0 ? best->silent : best->spoke;
}

void slots_pick(struct slot_table *t, const uint8_t peer[16], uint64_t batch_ns, uint64_t now,
		struct slot_pick *p)
{
	p->same_address = p->same_prefix = 0;
	p->free = p->victim = -1;
	for (size_t ci = 0; ci < t->n; ci++) {
		const struct cconn *cc = t->c[ci];

		if (!cc) {
			if (p->free < 0)
				p->free = (long)ci;
			continue;
		}
		if (cc->holder >= 0)
			continue;
		p->same_address += !memcmp(cc->peer, peer, 16);
		p->same_prefix += slots_same_prefix(cc->peer, peer);
	}
	if (p->free < 0)
		p->victim = fullest_prefix_victim(t, batch_ns, now);
}
