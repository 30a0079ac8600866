// SPDX-License-Identifier: MIT
/*
 * Capability dropping with the raw capget/capset and prctl interfaces (see
 * privs.h): three calls, not worth a library.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "lib/log.h"
#include "agent/privs.h"

#define BIT(c) (1ull << (c))

uint64_t privs_kept(void)
{
	return BIT(CAP_BPF) | BIT(CAP_PERFMON) | BIT(CAP_SYS_ADMIN) | BIT(CAP_NET_ADMIN);
}

uint64_t privs_missing(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return privs_kept();
	return privs_kept() & ~((uint64_t)d[1].effective << 32 | d[0].effective);
}

int privs_drop(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	uint64_t keep = privs_kept(), eff, perm;

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return -errno;
	eff = ((uint64_t)d[1].effective << 32 | d[0].effective) & keep;
	perm = ((uint64_t)d[1].permitted << 32 | d[0].permitted) & keep;
	/* The bounding set first (needs CAP_SETPCAP, still held). */
	for (int c = 0; c <= CAP_LAST_CAP; c++)
		if (!(keep & BIT(c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) && errno != EINVAL)
			return -errno;
	d[0].effective = (uint32_t)eff;
	d[1].effective = (uint32_t)(eff >> 32);
	d[0].permitted = (uint32_t)perm;
	d[1].permitted = (uint32_t)(perm >> 32);
	d[0].inheritable = d[1].inheritable = 0;
	if (syscall(SYS_capset, &h, d))
		return -errno;
	pr_info("capabilities dropped: keeping CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, "
		"CAP_NET_ADMIN\n");
	return 0;
}
