// SPDX-License-Identifier: MIT
/*
 * Multiprog attachment (attach.h): libxdp keeps a dispatcher program on the
 * interface and runs each of its programs (freplace extensions of the
 * dispatcher) in priority order; leaseline's is one of them, found by its
 * name. attach.c keeps direct mode (the pinned bpf_link) and what both
 * modes share (attach_int.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_link.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include "agent/attach.h"
#include "agent/attach_int.h"
#include "lib/config.h"
#include "lib/log.h"

/* libxdp's messages: through our log, and the last failure it reported
 * kept, so that one it turns into a bare EOPNOTSUPP (or a silent fallback)
 * can say what the kernel refused.
 */
static char xdp_last[200];

static int libxdp_print(enum libxdp_print_level level, const char *fmt, va_list ap)
{
	char line[sizeof(xdp_last)];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	if (!n)
		return 0;
	if (strstr(line, "failed") || strstr(line, "Failed") || strstr(line, "Couldn't"))
		memcpy(xdp_last, line, n + 1);
	if (level == LIBXDP_WARN)
		pr_warn("libxdp: %s\n", line);
	else
		pr_debug("libxdp: %s\n", line);
	return 0;
}

static void libxdp_hook(void)
{
	static bool done;

	if (!done) {
		libxdp_set_print(libxdp_print);
		done = true;
	}
}

/* The dispatcher's programs: ours (by name), the others' names. */
void attach_mp_info(int ifindex, struct attach_info *info)
{
	struct xdp_multiprog *mp;
	struct xdp_program *p;
	size_t n = 0;

	libxdp_hook();
	mp = xdp_multiprog__get_from_ifindex(ifindex);
	if (libxdp_get_error(mp) || !mp)
		return;
	if (xdp_multiprog__is_legacy(mp)) {
		xdp_multiprog__close(mp);
		return;
	}
	info->dispatcher = true;
	for (p = xdp_multiprog__next_prog(NULL, mp); p; p = xdp_multiprog__next_prog(p, mp)) {
		const char *name = xdp_program__name(p);

		info->n_progs++;
		if (!info->our_id && name && !strcmp(name, ATTACH_PROG_NAME)) {
			info->our_id = xdp_program__id(p);
			info->our_prio = xdp_program__run_prio(p);
			continue;
		}
		if (n < sizeof(info->others) - 1)
			n += (size_t)snprintf(info->others + n, sizeof(info->others) - n, "%s%s",
					      n ? ", " : "", name ? name : "?");
	}
	info->ours = info->our_id != 0;
	xdp_multiprog__close(mp);
}

/* libxdp keeps a dispatcher's links pinned in LIBXDP_BPFFS (default
 * /sys/fs/bpf/xdp)/dispatch-IFINDEX-ID; once the dispatcher is off the
 * interface they only hold its programs. This one's, and no other: the
 * names do not say which network namespace they belong to, so libxdp's own
 * libxdp_clean_references() could take another namespace's.
 */
void attach_mp_unpin(int ifindex, uint32_t id)
{
	const char *root = getenv("LIBXDP_BPFFS");
	char dir[512], path[768];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/dispatch-%d-%u", root && *root ? root : "/sys/fs/bpf/xdp",
		 ifindex, id);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* Does the program in the dispatcher (id) run the same code on the same
 * maps as the one just loaded (fd)? Then it can stay.
 */
static bool same_program(uint32_t id, int fd)
{
	uint32_t a_ids[64], b_ids[64];
	struct bpf_prog_info a, b;
	int afd = bpf_prog_get_fd_by_id(id);
	bool same;

	if (afd < 0)
		return false;
	same = !prog_info(afd, &a, a_ids, 64) && !prog_info(fd, &b, b_ids, 64) &&
	       !memcmp(a.tag, b.tag, sizeof(a.tag)) && a.nr_map_ids == b.nr_map_ids &&
	       a.nr_map_ids <= 64;
	for (uint32_t i = 0; same && i < a.nr_map_ids; i++) {
		bool found = false;

		for (uint32_t j = 0; j < b.nr_map_ids && !found; j++)
			found = a_ids[i] == b_ids[j];
		same = found;
	}
	close(afd);
	return same;
}

struct bpf_object *attach_shared_copy(struct bpf_object *loaded, const void *elf, size_t elf_sz)
{
	LIBBPF_OPTS(bpf_object_open_opts, oo, .object_name = bpf_object__name(loaded));
	struct bpf_object *obj = bpf_object__open_mem(elf, elf_sz, &oo);
	struct bpf_map *m;
	int err;

	if (!obj) {
		if (!errno)
			errno = EINVAL;
		return NULL;
	}
	bpf_object__for_each_map(m, obj)
	{
		const struct bpf_map *src = bpf_object__find_map_by_name(loaded, bpf_map__name(m));

		bpf_map__set_pin_path(m, NULL);
		err = src ? bpf_map__reuse_fd(m, bpf_map__fd(src)) : -ENOENT;
		if (err) {
			pr_warn("cannot share map '%s' with the loaded program: %s\n",
				bpf_map__name(m), strerror(-err));
			bpf_object__close(obj);
			errno = -err;
			return NULL;
		}
	}
	return obj;
}

/* The copy as a libxdp program at the configured priority, chaining on
 * XDP_PASS: libxdp loads it as an extension of the dispatcher.
 */
static struct xdp_program *mp_program(const struct attach_req *req, struct bpf_object **objp)
{
	DECLARE_LIBXDP_OPTS(xdp_program_opts, xo, .prog_name = ATTACH_PROG_NAME);
	struct bpf_object *obj = attach_shared_copy(req->obj, req->elf, req->elf_sz);
	struct xdp_program *xp;
	int err;

	if (!obj)
		return NULL;
	xo.obj = obj;
	errno = 0;
	xp = xdp_program__create(&xo);
	if (!xp || libxdp_get_error(xp)) {
		err = errno ? -errno : -EINVAL;
		goto fail;
	}
	/* XDP_PASS goes on to the next program; every other verdict is final. */
	err = xdp_program__set_run_prio(xp, req->priority);
	if (!err)
		err = xdp_program__set_chain_call_enabled(xp, XDP_PASS, true);
	if (err) {
		xdp_program__close(xp);
		goto fail;
	}
	*objp = obj;
	return xp;
fail:
	bpf_object__close(obj);
	errno = -err;
	return NULL;
}

int attach_mp_detach_id(int ifindex, uint32_t id)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
	struct xdp_program *p;
	int err = -ENOENT;

	if (libxdp_get_error(mp) || !mp)
		return -ENOENT;
	for (p = xdp_multiprog__next_prog(NULL, mp); p; p = xdp_multiprog__next_prog(p, mp)) {
		if (xdp_program__id(p) == id) {
			err = xdp_program__detach(p, ifindex, xdp_multiprog__attach_mode(mp), 0);
			break;
		}
	}
	xdp_multiprog__close(mp);
	return err;
}

int attach_multiprog(int ifindex, const struct attach_req *req, struct attach_result *res,
		     struct attach_info *cur)
{
	enum xdp_attach_mode xm;
	struct bpf_object *obj = NULL;
	struct xdp_program *xp;
	struct attach_info now;
	uint32_t old_id = 0;
	int err;

	libxdp_hook();
	res->multiprog = true;
	if (cur->prog_id && !cur->dispatcher) {
		/* Not a dispatcher: our own direct program (switching modes: a
		 * moment with no program), or another tool's (only with force).
		 */
		if (refused(cur, req)) {
			busy(res, cur, ifindex, 0);
			return -EBUSY;
		}
		err = remove_attached(ifindex, cur);
		if (err)
			return err;
		pr_info("removed the %s XDP program '%s' (id %u) for the dispatcher\n",
			cur->ours ? "direct" : "other", cur->prog_name, cur->prog_id);
		memset(cur, 0, sizeof(*cur));
	}
	if (cur->dispatcher && refused(cur, req)) {
		busy(res, cur, ifindex, 0); /* another pin directory's leaseline */
		return -EBUSY;
	}
	if (cur->dispatcher && cur->our_id) {
		if (cur->our_prio == req->priority && same_program(cur->our_id, req->prog_fd)) {
			res->kept = true;
			res->prog_id = cur->our_id;
			res->xdp_mode = cur->mode;
			return 0;
		}
		old_id = cur->our_id; /* replaced below: the new one first, then the old out */
	}
	if (cur->dispatcher)
		xm = cur->mode == XDP_ATTACHED_SKB ? XDP_MODE_SKB : XDP_MODE_NATIVE;
	else
		xm = req->xdp_mode == CFG_XDP_GENERIC ? XDP_MODE_SKB : XDP_MODE_NATIVE;
	if (cur->dispatcher && ((req->xdp_mode == CFG_XDP_NATIVE && xm == XDP_MODE_SKB) ||
				(req->xdp_mode == CFG_XDP_GENERIC && xm == XDP_MODE_NATIVE))) {
		snprintf(res->why, sizeof(res->why),
			 "the dispatcher there runs in %s mode; the interface's mode must match it",
			 xm == XDP_MODE_SKB ? "generic" : "native");
		return -EBUSY;
	}
	xp = mp_program(req, &obj);
	if (!xp)
		return -errno;
	xdp_last[0] = '\0';
	err = xdp_program__attach(xp, ifindex, xm, 0);
	if (err && !cur->dispatcher && req->xdp_mode == CFG_XDP_AUTO) {
		pr_info("native XDP unavailable on ifindex %d (%s), using generic\n", ifindex,
			strerror(-err));
		xdp_program__close(xp);
		bpf_object__close(obj);
		xp = mp_program(req, &obj);
		if (!xp)
			return -errno;
		xm = XDP_MODE_SKB;
		err = xdp_program__attach(xp, ifindex, xm, 0);
	}
	if (err) {
		snprintf(res->why, sizeof(res->why), "libxdp: %s",
			 xdp_last[0] ? xdp_last : strerror(-err));
		goto out;
	}
	res->prog_id = xdp_program__id(xp);
	res->xdp_mode = xm == XDP_MODE_SKB ? XDP_ATTACHED_SKB : XDP_ATTACHED_DRV;
	/* Without a dispatcher (the kernel refused its freplace programs)
	 * libxdp falls back to attaching the one program directly: not what
	 * was asked. Undo it and say why.
	 */
	err = attach_query(ifindex, &now);
	if (!err && !now.dispatcher) {
		snprintf(res->why, sizeof(res->why),
			 "libxdp could not build a dispatcher here (%s); the kernel must load "
			 "freplace (BPF_PROG_TYPE_EXT) programs",
			 xdp_last[0] ? xdp_last : "no reason given");
		if (now.prog_id && now.ours)
			remove_attached(ifindex, &now);
		err = -EOPNOTSUPP;
		goto out;
	}
	if (old_id) {
		int derr = attach_mp_detach_id(ifindex, old_id);

		if (derr)
			pr_warn(
			    "multiprog: the previous leaseline program (id %u) stays beside the "
			    "new one: %s\n",
			    old_id, strerror(-derr));
	}
out:
	xdp_program__close(xp);
	bpf_object__close(obj);
	return err;
}
