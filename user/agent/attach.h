/* SPDX-License-Identifier: MIT */
/*
 * Attaching the XDP program to interfaces, like `ip link set … xdp`: native
 * by default, generic only when asked (or as `auto`'s fallback), and never
 * over another tool's program without force.
 */
#ifndef LEASELINE_ATTACH_H
#define LEASELINE_ATTACH_H

#include <stdbool.h>
#include <stdint.h>

#define ATTACH_PROG_NAME "leaseline" /* how we recognise our own program */

struct attach_info {
	uint32_t prog_id; /* 0: nothing attached */
	uint8_t mode;	  /* XDP_ATTACHED_* */
	char prog_name[16];
	bool ours;
};

int attach_query(int ifindex, struct attach_info *info);
/* cfg_mode: enum cfg_xdp_mode. Replaces our own program atomically; refuses
 * (-EBUSY) another program unless force. *used_mode gets XDP_ATTACHED_*.
 */
int attach_iface(int ifindex, int prog_fd, int cfg_mode, bool force, uint8_t *used_mode);
int attach_detach(int ifindex, bool force);
const char *attach_mode_name(uint8_t mode);

#endif /* LEASELINE_ATTACH_H */
