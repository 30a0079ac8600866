/* SPDX-License-Identifier: MIT */
/*
 * The gateway daemon: load (re-adopting pinned state), attach, apply the
 * policy, then reload on SIGHUP and reap idle buckets until told to stop.
 */
#ifndef LEASELINE_AGENT_AGENT_H
#define LEASELINE_AGENT_AGENT_H

#include <stdbool.h>
#include <stdint.h>

struct agent_opts {
	const char *config_path;
	bool detach_on_exit;
	bool force; /* replace another program's XDP attachment */
};

/* Returns a process exit code (reference §2: 0, 1 runtime, 2 configuration). */
int agent_run(const struct agent_opts *opts);

/* Make sure dir is on a bpffs, mounting one there if needed. */
int agent_bpffs_ensure(const char *dir);

#endif /* LEASELINE_AGENT_AGENT_H */
