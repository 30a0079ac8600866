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

int check_file(const char *path, bool json, struct cfg_err *e_out)
{
	const char *kind_name;
	char note[256];
	bool noted;
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
	noted = kind == CFG_KIND_POLICY && note_global(pol, note, sizeof(note));
	if (json) {
		out_init(&o, stdout, true);
		out_obj_begin(&o, NULL);
		out_str(&o, "file", path);
		out_bool(&o, "ok", true);
		out_str(&o, "kind", kind_name);
		out_u64(&o, "policy_version", pol->version);
		out_u64(&o, "limits", pol->n_limits);
		out_u64(&o, "rules", pol->n_rules);
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
		printf("%s: ok (%s; policy version %llu, %u limits, %u rules%s)\n", path, kind_name,
		       (unsigned long long)pol->version, pol->n_limits, pol->n_rules, sets);
		if (noted)
			printf("note: %s\n", note);
	}
	free(pol);
	return 0;
}
