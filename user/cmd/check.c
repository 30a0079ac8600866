// SPDX-License-Identifier: MIT
/*
 * `leaseline check` (see check.h): a file's kind from its top-level keys,
 * the file validated with the policy it names and its set, override and
 * TLS files, as the daemon that reads it would; no side effects.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/check.h"
#include "lib/config.h"
#include "lib/out.h"
#include "lib/tls.h"

/* A lone policy with global limits is fine for a coordinator; a standalone
 * agent would refuse it. Say so, without failing.
 */
static bool note_global(const struct cfg_policy *pol, char *note, size_t len)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < pol->n_limits; i++)
		n += pol->limits[i].scope == LL_SCOPE_GLOBAL;
	if (n)
		snprintf(note, len,
			 "%u global limit%s: this policy is for a coordinator (coord.yaml "
			 "policy:); a standalone agent (policy: in agent.yaml) refuses it",
			 n, n == 1 ? "" : "s");
	return n;
}

/* Limits no rule names: they limit nothing (a rule lost in an edit, or a
 * name typed differently). Said, without failing; appended to note.
 */
static bool note_unused(const struct cfg_policy *pol, char *note, size_t len)
{
	char names[256] = "";
	size_t n = strlen(note), nn = 0;
	uint32_t unused = 0;

	for (uint32_t i = 0; i < pol->n_limits; i++) {
		bool named = false;

		for (uint32_t r = 0; r < pol->n_rules && !named; r++)
			for (uint32_t k = 0; k < pol->rules[r].n_limits && !named; k++)
				named = pol->rules[r].limit[k] == i;
		if (named)
			continue;
		if (nn + strlen(pol->limits[i].name) + 8 < sizeof(names))
			nn += (size_t)snprintf(names + nn, sizeof(names) - nn, "%s'%s'",
					       unused ? ", " : "", pol->limits[i].name);
		unused++;
	}
	if (unused)
		snprintf(note + n, len - n, "%s%s %s %s named by no rule: %s nothing", n ? "; " : "",
			 unused == 1 ? "limit" : "limits", names, unused == 1 ? "is" : "are",
			 unused == 1 ? "it limits" : "they limit");
	return unused;
}

int check_file(const char *path, bool json, struct cfg_err *e_out)
{
	const char *kind_name;
	char note[512] = "";
	bool noted, from_coord;
	struct out o;
	struct cfg_policy *pol = calloc(1, sizeof(*pol));
	struct cfg_agent ac;
	struct cfg_coord cc;
	enum cfg_kind kind;
	struct cfg_err e;
	int err;

	if (!pol)
		return CHECK_RUNTIME;
	err = cfg_detect_kind(path, &kind, &e);
	if (!err && kind == CFG_KIND_AGENT)
		err = cfg_agent_load(path, &ac, pol, &e);
	else if (!err && kind == CFG_KIND_COORD)
		err = cfg_coord_load(path, &cc, pol, &e);
	else if (!err) /* alone, a policy may be a coordinator's: see the note below */
		err = cfg_policy_load(path, false, pol, &e);
	/* The certificates load as the daemon would load them: a missing CA
	 * fails here, not at the daemon's start.
	 */
	if (!err && ((kind == CFG_KIND_AGENT && ac.has_coordinator && ac.tls.set) ||
		     (kind == CFG_KIND_COORD && cc.tls.set))) {
		struct tls_ctx t = {0};
		char why[CFG_ERR_LEN / 2];

		err = tls_ctx_load(&t, kind == CFG_KIND_AGENT ? &ac.tls : &cc.tls,
				   kind == CFG_KIND_COORD, why, sizeof(why));
		tls_ctx_free(&t);
		if (err) {
			err = -EINVAL;
			snprintf(e.msg, sizeof(e.msg), "%.*s: %s", (int)(CFG_ERR_LEN / 2 - 4), path,
				 why);
			cfg_err_at(&e, path, 0, 0);
		}
	}
	if (err) {
		/* A file that is missing, unreadable or wrong is a configuration
		 * error (2), whatever errno said; only running out of memory is not.
		 */
		*e_out = e;
		free(pol);
		return err == -ENOMEM ? CHECK_RUNTIME : CHECK_USAGE;
	}
	kind_name = kind == CFG_KIND_AGENT   ? "agent"
		    : kind == CFG_KIND_COORD ? "coordinator"
					     : "policy";
	/* A coordinated agent's policy is the coordinator's: nothing here. */
	from_coord = kind == CFG_KIND_AGENT && ac.has_coordinator;
	noted = kind == CFG_KIND_POLICY && note_global(pol, note, sizeof(note));
	noted |= !from_coord && note_unused(pol, note, sizeof(note));
	if (json) {
		out_init(&o, stdout, true);
		out_obj_begin(&o, NULL);
		out_str(&o, "file", path);
		out_bool(&o, "ok", true);
		out_str(&o, "kind", kind_name);
		if (from_coord) {
			out_str(&o, "policy_from", "coordinator");
			out_str(&o, "coordinator", ac.coordinator);
		} else {
			out_u64(&o, "policy_version", pol->version);
			out_u64(&o, "limits", pol->n_limits);
			out_u64(&o, "rules", pol->n_rules);
		}
		if (pol->n_sets) {
			out_u64(&o, "sets", pol->n_sets);
			out_u64(&o, "set_prefixes", pol->set_entries);
		}
		if (noted)
			out_str(&o, "note", note);
		out_obj_end(&o);
		out_finish(&o);
	} else {
		char sets[64] = "";

		if (pol->n_sets)
			snprintf(sets, sizeof(sets), ", %u prefix sets of %u prefixes", pol->n_sets,
				 pol->set_entries);
		if (from_coord)
			printf("%s: ok (agent; its policy comes from the coordinator at %s)\n", path,
			       ac.coordinator);
		else
			printf("%s: ok (%s; policy version %llu, %u limits, %u rules%s)\n", path,
			       kind_name, (unsigned long long)pol->version, pol->n_limits,
			       pol->n_rules, sets);
		if (noted)
			printf("note: %s\n", note);
	}
	free(pol);
	return 0;
}
