// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: a policy text as the agent takes it from the network
 * (cfg_policy_parse with the input caps of walk.c), then compiled against
 * a running policy as a reload would (policy_compile). Neither may crash,
 * leak or read out of bounds; a compiled policy keeps the invariants the
 * datapath relies on.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/config.h"
#include "agent/policy.h"
#include "tb_math.h"

static const char prev_text[] = "version: 1\n"
				"limits:\n"
				"  - {name: a, key: src-ip, rate: 10, burst: 20}\n"
				"  - {name: g, key: none, scope: global, rate: 100, burst: 10}\n"
				"rules:\n"
				"  - {name: r, limits: [a, g]}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cfg_policy cp, prev_cp;
	static struct ll_policy prev, out;
	static int have_prev;
	struct policy_compile_opts o = {.now_ns = 1000, .ncpus = 2};
	uint32_t next_uid = 100;
	char err[256];
	struct cfg_err e;

	if (!have_prev) {
		uint32_t uid = 1;
		struct policy_compile_opts po = {.next_uid = &uid, .now_ns = 1, .ncpus = 2};

		if (cfg_policy_parse("prev", prev_text, sizeof(prev_text) - 1, false, &prev_cp, &e) ||
		    policy_compile(&prev_cp, &po, &prev, err, sizeof(err)))
			abort();
		have_prev = 1;
	}
	if (cfg_policy_parse("fuzz", (const char *)data, size, false, &cp, &e))
		return 0;
	o.prev = &prev;
	o.next_uid = &next_uid;
	if (policy_compile(&cp, &o, &out, err, sizeof(err)))
		return 0;
	for (uint32_t i = 0; i < LL_MAX_LIMITS; i++) {
		const struct ll_limit_cfg *l = &out.limits[i];

		if (!l->in_use)
			continue;
		if (l->rate > TB_MAX_RATE || l->burst_s > TB_MAX_BURST * TB_SCALE ||
		    (l->rate && l->fill_ns != tb_fill_ns(l->rate, l->burst_s)))
			abort(); /* the refill product could wrap */
	}
	for (uint32_t r = 0; r < out.n_rules; r++)
		for (uint32_t k = 0; k < out.rules[r].n_limits; k++)
			if (!out.limits[out.rules[r].limit[k] & (LL_MAX_LIMITS - 1)].in_use)
				abort(); /* a rule charging a limit that is not there */
	return 0;
}
