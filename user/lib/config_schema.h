/* SPDX-License-Identifier: MIT */
/*
 * Private to config.c, config_policy.c, config_match.c and config_replicas.c: the state the
 * checks of one file share through the walk (walk_ctx.user), and the
 * sections one part of the schema hands another. The public interface is
 * config.h.
 */
#ifndef LEASELINE_LIB_CONFIG_SCHEMA_H
#define LEASELINE_LIB_CONFIG_SCHEMA_H

#include <stdbool.h>

#include "lib/config.h"
#include "lib/walk.h"

/* What the checks of one file need besides the object being filled. */
struct cfg_state {
	bool standalone; /* policy: scope global is refused */
	/* A policy a coordinator served: its global limits' override files
	 * are the coordinator's.
	 */
	bool served;
	struct cfg_policy *pol; /* the policy being built, or where an agent's/coordinator's goes */
	struct cfg_agent *agent;
};

static inline struct cfg_state *state(struct walk_ctx *c)
{
	return c->user;
}

static inline void set_pos(const yaml_node_t *n, int *line, int *col)
{
	*line = (int)walk_line(n);
	*col = (int)walk_col(n);
}

/* The coordinator's port (reference §2): agents dial it, replicas advertise it. */
#define CFG_COORD_PORT 7450

/* tls: {cert, key, ca}, the same section wherever it appears (config.c). */
extern const struct walk_section cfg_tls_section;
/* coord.yaml's replicas: (config_replicas.c). */
int cfg_coord_replicas(struct walk_ctx *c, const struct walk_field *f, yaml_node_t *v, void *obj);

/* A rule's fields: its match (config_match.c) and the rest (config_policy.c). */
#define RULE(m) WALK_AT(struct cfg_rule, m)

/* A policy file's top section (config_policy.c), for config.c's loaders. */
extern const struct walk_section cfg_policy_section;
/* A rule's match: section (config_match.c), for the rule's fields. */
extern const struct walk_section cfg_match_section;

#endif /* LEASELINE_LIB_CONFIG_SCHEMA_H */
