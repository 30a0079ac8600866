// SPDX-License-Identifier: MIT
/*
 * The maps pinned under a pin dir, for the commands that read them without
 * loading the datapath (status, top, usage), and `leaseline reset-fence`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "agent/dp.h"
#include "lib/fs.h"
#include "lib/log.h"
#include "agent/pins.h"

int dp_pinned_open(const char *dir, const struct dp_pin *pins, size_t n)
{
	int err = pins_readable(dir);

	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		if (pins[i].optional) {
			char path[4096 + 32];

			snprintf(path, sizeof(path), "%s/%s", dir, pins[i].name);
			*pins[i].fd = fs_pin_get(path);
			if (*pins[i].fd < 0)
				*pins[i].fd = -1;
			continue;
		}
		*pins[i].fd = dp_pinned_get(dir, pins[i].name);
		if (*pins[i].fd < 0)
			return *pins[i].fd;
	}
	return 0;
}

int dp_pinned_get(const char *dir, const char *name)
{
	char path[4096 + 32];
	int fd, err;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = fs_pin_get(path);
	if (fd >= 0)
		return fd;
	err = fd;
	if (err == -ELOOP)
		pr_warn("'%s' is a symlink, not a pinned map: not followed\n", path);
	else
		pr_warn("cannot open '%s': %s (is an agent running with pin-dir '%s'?)\n", path,
			strerror(-err), dir);
	return err;
}

int dp_pinned_reset_fence(const char *pin_dir, uint64_t *old_epoch, uint64_t *old_version)
{
	int lock_fd = -1, held = pins_lock(pin_dir, &lock_fd); /* no agent running there */
	int layout = held ? held : pins_readable(pin_dir);
	int fence_fd = layout ? layout : dp_pinned_get(pin_dir, "ll_fence"),
	    state_fd = dp_pinned_get(pin_dir, "ll_state");
	int policy_fd = dp_pinned_get(pin_dir, "ll_policy");
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct ll_fence f = {};
	struct ll_state st;
	__u32 k = 0, slot;
	int err = fence_fd < 0 ? fence_fd : state_fd < 0 ? state_fd : policy_fd;

	if (err >= 0 && !pol)
		err = -ENOMEM;
	if (err >= 0)
		err = dp_state_read(state_fd, &st);
	if (!err && bpf_map_lookup_elem(fence_fd, &k, &f))
		err = -errno;
	slot = st.active_slot & (LL_POLICY_SLOTS - 1);
	if (!err && bpf_map_lookup_elem(policy_fd, &slot, pol))
		err = -errno;
	if (!err) {
		*old_epoch = f.max_epoch_seen;
		*old_version = st.version;
		memset(&f, 0, sizeof(f));
		if (bpf_map_update_elem(fence_fd, &k, &f, BPF_ANY))
			err = -errno;
	}
	/* The active slot's rules and limits are rewritten with the very same
	 * bytes; only the version changes, which packets do not read.
	 */
	if (!err && st.version > 1) {
		pol->version = 1;
		st.version = 1;
		if (bpf_map_update_elem(policy_fd, &slot, pol, BPF_ANY) ||
		    bpf_map_update_elem(state_fd, &k, &st, BPF_ANY))
			err = -errno;
	}
	free(pol);
	for (int fd = 0, *fds[] = {&fence_fd, &state_fd, &policy_fd}; fd < 3; fd++)
		if (*fds[fd] >= 0)
			close(*fds[fd]);
	pins_unlock(&lock_fd);
	return err;
}
