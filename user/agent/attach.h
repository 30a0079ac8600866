/* SPDX-License-Identifier: MIT */
/*
 * Attaching the XDP program to interfaces. Two ways (agent file, attach.mode):
 *   direct     the program alone on the interface, like `ip link set … xdp`:
 *              native by default, generic only when asked (or as `auto`'s
 *              fallback), and never over another tool's program without force;
 *   multiprog  one program of a libxdp dispatcher, beside other programs, at
 *              a run priority (lower runs first); XDP_PASS goes on to the next
 *              program. Removing it removes only leaseline's program.
 */
#ifndef LEASELINE_AGENT_ATTACH_H
#define LEASELINE_AGENT_ATTACH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ATTACH_PROG_NAME       "leaseline"	/* how we recognise our own program */
#define ATTACH_DISPATCHER_NAME "xdp_dispatcher" /* libxdp's dispatcher program */
#define ATTACH_LINK_PIN	       "link_"		/* PIN_DIR/link_IFINDEX: the direct-mode bpf_link */

struct bpf_object;

struct attach_info {
	uint32_t prog_id; /* 0: nothing attached (the dispatcher's id if there is one) */
	uint8_t mode;	  /* XDP_ATTACHED_* */
	char prog_name[16];
	bool ours;	 /* leaseline's program runs here: alone or in the dispatcher */
	bool dispatcher; /* prog_id is a libxdp dispatcher */
	uint32_t our_id; /* in a dispatcher: leaseline's program (0: not there) */
	bool mp_foreign; /* that program spends another pin directory's ll_state */
	unsigned int our_prio;
	unsigned int n_progs; /* in a dispatcher: how many programs */
	char others[96];      /* in a dispatcher: the other programs' names, ", " joined */
};

struct attach_req {
	int xdp_mode;	 /* enum cfg_xdp_mode: native, generic, auto */
	int attach_mode; /* enum cfg_attach_mode: direct, multiprog */
	unsigned int priority;
	bool force;
	int prog_fd; /* the loaded program (direct) */
	/* direct: the agent's pin directory. The program is attached through a
	 * bpf_link pinned at PIN_DIR/link_IFINDEX (ATTACH_LINK_PIN), which the
	 * kernel lets no one else replace; the program on the interface is ours
	 * when it uses the ll_state pinned there. NULL: nothing is ours by pin.
	 */
	const char *pin_dir;
	/* multiprog: libxdp loads the program again as an extension of its
	 * dispatcher, from the object's ELF, sharing every map of the loaded
	 * object obj.
	 */
	struct bpf_object *obj;
	const void *elf;
	size_t elf_sz;
};

struct attach_result {
	uint8_t xdp_mode; /* XDP_ATTACHED_DRV or _SKB */
	bool multiprog;
	uint32_t prog_id; /* ours: the attached program (in multiprog, the component) */
	bool kept;	  /* multiprog: the same program was already there and stays */
	bool dispatcher;  /* -EBUSY: what is in the way is a libxdp dispatcher */
	uint32_t link_id; /* direct: the bpf_link the program runs through */
	bool updated;	  /* direct: our pinned link, updated to the new program */
	uint64_t gap_ns;  /* direct: how long the interface ran no program (0: none) */
	char took[448];	  /* direct, force: what was taken over ("" if nothing) */
	char why[320];	  /* on failure: what is in the way, or what the kernel said */
};

int attach_query(int ifindex, struct attach_info *info);
/* Attach as req says. Replaces our own program atomically; refuses
 * (-EBUSY, res->why filled) another program unless force; in multiprog mode
 * a libxdp dispatcher is not another program. -EOPNOTSUPP: libxdp could not
 * build a dispatcher here (res->why says what the kernel refused); nothing
 * of ours is left attached.
 */
int attach_iface(int ifindex, const struct attach_req *req, struct attach_result *res);
/* Whether attach_iface would refuse what is on the interface now, without
 * touching it (only req's attach_mode and force are read): 0, -EBUSY with
 * res->why filled, or a negative errno from the query.
 */
int attach_check(int ifindex, const struct attach_req *req, struct attach_result *res);
/* Whether what runs on ifindex now is pin_dir's (see attach.c's top: our
 * pinned link or a program on our pinned ll_state; in a dispatcher, its
 * leaseline program on our ll_state): 1 yes, 0 no (cur says what is
 * there), or a negative errno from the query (-ENODEV: no such interface).
 */
int attach_owned(int ifindex, const char *pin_dir, struct attach_info *cur);
/* Remove leaseline's program: from a dispatcher only ours (the others stay),
 * else the interface's program if it is ours (by name). -ENOENT: none of
 * ours there; -EBUSY: another program is there and force is not set (force
 * removes it, a dispatcher with every program in it). A bpf_link is
 * detached by id, and its pin under pin_dir (if that is where it is
 * pinned; pin_dir may be NULL) removed.
 */
int attach_detach(int ifindex, bool force, const char *pin_dir);
/* Before the maps are opened: drop the link pins under pin_dir whose link
 * no longer holds an interface (detached by id, or its interface gone), so
 * that the program they hold lets go of the maps. Count dropped, or a
 * negative errno.
 */
int attach_links_sweep(const char *pin_dir);
const char *attach_mode_name(uint8_t mode);
/* An unloaded copy of the program in elf (the embedded object) whose every
 * map is loaded's, by fd: what multiprog hands libxdp to load as an
 * extension of its dispatcher. NULL with errno set on failure.
 */
struct bpf_object *attach_shared_copy(struct bpf_object *loaded, const void *elf, size_t elf_sz);

#endif /* LEASELINE_AGENT_ATTACH_H */
