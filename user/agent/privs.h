/* SPDX-License-Identifier: MIT */
/*
 * The agent's privileges after start-up (docs/operations.md, "Privileges"):
 * once the program is loaded, the maps pinned and the interfaces attached,
 * it keeps only the capabilities its loop needs. Invariant: dropped ones
 * are gone for good (effective, permitted, inheritable and the bounding
 * set), so neither a bug in the YAML or wire parsers nor a child process
 * can take them back.
 */
#ifndef LEASELINE_AGENT_PRIVS_H
#define LEASELINE_AGENT_PRIVS_H

#include <stdint.h>

/* What the running agent keeps: CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN for
 * bpf() on its maps (map writes, the RCU barrier's map), CAP_NET_ADMIN to
 * detach on exit. Every other capability is dropped.
 */
uint64_t privs_kept(void);

/* Drop every capability but privs_kept(). 0 or a negative errno. */
int privs_drop(void);
/* The capabilities of privs_kept() this process does not hold (effective):
 * 0 when it can load, pin and attach.
 */
uint64_t privs_missing(void);

#endif /* LEASELINE_AGENT_PRIVS_H */
