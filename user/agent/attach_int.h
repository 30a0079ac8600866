/* SPDX-License-Identifier: MIT */
/*
 * What attach.c (direct mode, and the shared query and removal) and
 * attach_multiprog.c (libxdp's dispatcher) call of each other. Not for the
 * agent: attach.h is its interface.
 */
#ifndef LEASELINE_AGENT_ATTACH_INT_H
#define LEASELINE_AGENT_ATTACH_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <bpf/bpf.h>

#include "agent/attach.h"

/* attach.c */
int prog_info(int fd, struct bpf_prog_info *pi, uint32_t *map_ids, uint32_t n_max);
/* What is in the way (res->why): cur, through bpf_link link_id (0: netlink). */
void busy(struct attach_result *res, const struct attach_info *cur, int ifindex, uint32_t link_id);
/* Whether attaching as req says over cur is refused without --force. */
bool refused(const struct attach_info *cur, const struct attach_req *req);
/* Remove whatever is attached (cur), by id. 0 or -errno. */
int remove_attached(int ifindex, const struct attach_info *cur);

/* attach_multiprog.c */
/* Fill info's dispatcher fields from libxdp (prog_id is a dispatcher). */
void attach_mp_info(int ifindex, struct attach_info *info);
/* Remove the pins libxdp left for dispatcher id on ifindex. */
void attach_mp_unpin(int ifindex, uint32_t id);
/* Detach program id from ifindex's dispatcher. 0 or -errno. */
int attach_mp_detach_id(int ifindex, uint32_t id);
int attach_multiprog(int ifindex, const struct attach_req *req, struct attach_result *res,
		     struct attach_info *cur);

#endif /* LEASELINE_AGENT_ATTACH_INT_H */
