// SPDX-License-Identifier: MIT
/*
 * XDP attachment through libbpf's netlink helpers. The program stays
 * attached when the process exits; replacing our own program uses
 * XDP_FLAGS_REPLACE so no packet runs without a program in between.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_link.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "attach.h"
#include "config.h"
#include "log.h"

const char *attach_mode_name(uint8_t mode)
{
	switch (mode) {
	case XDP_ATTACHED_DRV:
		return "native";
	case XDP_ATTACHED_SKB:
		return "generic";
	case XDP_ATTACHED_HW:
		return "offload";
	case XDP_ATTACHED_MULTI:
		return "multi";
	default:
		return "none";
	}
}

int attach_query(int ifindex, struct attach_info *info)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	struct bpf_prog_info pi = {};
	__u32 len = sizeof(pi);
	int err, fd;

	memset(info, 0, sizeof(*info));
	err = bpf_xdp_query(ifindex, 0, &q);
	if (err)
		return err;
	info->mode = q.attach_mode;
	info->prog_id = q.prog_id ? q.prog_id : (q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id);
	if (!info->prog_id)
		return 0;
	fd = bpf_prog_get_fd_by_id(info->prog_id);
	if (fd < 0)
		return -errno;
	err = bpf_obj_get_info_by_fd(fd, &pi, &len);
	close(fd);
	if (err)
		return -errno;
	memcpy(info->prog_name, pi.name, sizeof(info->prog_name) - 1);
	info->ours = !strcmp(info->prog_name, ATTACH_PROG_NAME);
	return 0;
}

static int try_attach(int ifindex, int prog_fd, __u32 mode_flag, const struct attach_info *cur)
{
	LIBBPF_OPTS(bpf_xdp_attach_opts, ao);
	__u32 flags = mode_flag;
	int old_fd = -1, err;

	if (cur->prog_id) {
		old_fd = bpf_prog_get_fd_by_id(cur->prog_id);
		if (old_fd >= 0) {
			ao.old_prog_fd = old_fd;
			flags |= XDP_FLAGS_REPLACE;
		}
	} else {
		flags |= XDP_FLAGS_UPDATE_IF_NOEXIST;
	}
	err = bpf_xdp_attach(ifindex, prog_fd, flags, &ao);
	if (old_fd >= 0)
		close(old_fd);
	return err;
}

int attach_iface(int ifindex, int prog_fd, int cfg_mode, bool force, uint8_t *used_mode)
{
	struct attach_info cur;
	int err = attach_query(ifindex, &cur);

	if (err)
		return err;
	if (cur.prog_id && !cur.ours && !force)
		return -EBUSY;
	/* A program in the other mode must go first: the kernel refuses two. */
	if (cur.prog_id && ((cfg_mode == CFG_XDP_NATIVE && cur.mode == XDP_ATTACHED_SKB) ||
			    (cfg_mode == CFG_XDP_GENERIC && cur.mode == XDP_ATTACHED_DRV))) {
		err = attach_detach(ifindex, true);
		if (err)
			return err;
		memset(&cur, 0, sizeof(cur));
	}
	if (cfg_mode != CFG_XDP_GENERIC) {
		err = try_attach(ifindex, prog_fd, XDP_FLAGS_DRV_MODE, &cur);
		if (!err) {
			*used_mode = XDP_ATTACHED_DRV;
			return 0;
		}
		if (cfg_mode == CFG_XDP_NATIVE)
			return err;
		pr_info("native XDP unavailable on ifindex %d (%s), using generic\n", ifindex,
			strerror(-err));
	}
	err = try_attach(ifindex, prog_fd, XDP_FLAGS_SKB_MODE, &cur);
	if (!err)
		*used_mode = XDP_ATTACHED_SKB;
	return err;
}

int attach_detach(int ifindex, bool force)
{
	LIBBPF_OPTS(bpf_xdp_attach_opts, ao);
	struct attach_info cur;
	__u32 flags;
	int err = attach_query(ifindex, &cur), old_fd;

	if (err)
		return err;
	if (!cur.prog_id)
		return -ENOENT;
	if (!cur.ours && !force)
		return -EBUSY;
	flags = cur.mode == XDP_ATTACHED_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	old_fd = bpf_prog_get_fd_by_id(cur.prog_id);
	if (old_fd >= 0) {
		ao.old_prog_fd = old_fd;
		flags |= XDP_FLAGS_REPLACE;
	}
	err = bpf_xdp_detach(ifindex, flags, &ao);
	if (old_fd >= 0)
		close(old_fd);
	return err;
}
