// SPDX-License-Identifier: MIT
/*
 * The pinned maps the commands read (see pinned.h): one table of their
 * names, opened through dp_pinned_open.
 */
#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

#include "agent/dp.h"
#include "cmd/pinned.h"
#include "lib/util.h"

static const struct {
	const char *name;
	unsigned int bit;
	size_t off; /* of its fd in struct pinned */
	bool optional;
} pinned_maps[] = {
    {"ll_state", PINNED_STATE, offsetof(struct pinned, state), false},
    {"ll_policy", PINNED_POLICY, offsetof(struct pinned, policy), false},
    {"ll_buckets", PINNED_BUCKETS, offsetof(struct pinned, buckets), false},
    {"ll_flow_buckets", PINNED_FLOW_BUCKETS, offsetof(struct pinned, flow_buckets), false},
    {"ll_limit_stats", PINNED_LIMIT_STATS, offsetof(struct pinned, limit_stats), false},
    {"ll_rule_stats", PINNED_RULE_STATS, offsetof(struct pinned, rule_stats), false},
    {"ll_parse_stats", PINNED_PARSE_STATS, offsetof(struct pinned, parse_stats), false},
    {"ll_leases", PINNED_LEASES, offsetof(struct pinned, leases), false},
    {"ll_fence", PINNED_FENCE, offsetof(struct pinned, fence), false},
    {"ll_shadow_win", PINNED_SHADOW_WIN, offsetof(struct pinned, shadow_win), true},
};

static int *pinned_fd(struct pinned *p, size_t i)
{
	return (int *)((char *)p + pinned_maps[i].off);
}

int pinned_open(const char *dir, unsigned int which, struct pinned *p)
{
	struct dp_pin pins[ARRAY_SIZE(pinned_maps)];
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(pinned_maps); i++) {
		*pinned_fd(p, i) = -1;
		if (which & pinned_maps[i].bit)
			pins[n++] = (struct dp_pin){pinned_maps[i].name, pinned_fd(p, i),
						    pinned_maps[i].optional};
	}
	return dp_pinned_open(dir, pins, n);
}

void pinned_close(struct pinned *p)
{
	for (size_t i = 0; i < ARRAY_SIZE(pinned_maps); i++) {
		if (*pinned_fd(p, i) >= 0)
			close(*pinned_fd(p, i));
		*pinned_fd(p, i) = -1;
	}
}
