// SPDX-License-Identifier: MIT
/*
 * XDP attachment. Direct: a bpf_link pinned in the agent's pin directory
 * (PIN_DIR/link_IFINDEX). The kernel puts nothing else on an interface a
 * link holds (another link, a netlink attach: EBUSY), so a second agent
 * cannot replace the first one's program by accident; a restart updates the
 * link to the new program (bpf_link_update: no packet runs without one);
 * the pin keeps it attached while no agent runs. Which program is ours is
 * decided by the maps, not the name: it uses the ll_state pinned in our
 * directory. Multiprog: libxdp, which keeps a dispatcher program on the
 * interface and runs each of its programs (freplace extensions of the
 * dispatcher) in priority order. Either way the program stays attached when
 * the process exits.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include "agent/attach.h"
#include "lib/config.h"
#include "lib/log.h"

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

static int prog_info(int fd, struct bpf_prog_info *pi, uint32_t *map_ids, uint32_t n_max)
{
	__u32 len = sizeof(*pi);

	memset(pi, 0, sizeof(*pi));
	if (map_ids) {
		pi->nr_map_ids = n_max;
		pi->map_ids = (__u64)(unsigned long)map_ids;
	}
	return bpf_obj_get_info_by_fd(fd, pi, &len) ? -errno : 0;
}

/* The dispatcher's programs: ours (by name), the others' names. */
static void dispatcher_info(int ifindex, struct attach_info *info)
{
	struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
	struct xdp_program *p;
	size_t n = 0;

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

int attach_query(int ifindex, struct attach_info *info)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	struct bpf_prog_info pi;
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
	err = prog_info(fd, &pi, NULL, 0);
	close(fd);
	if (err)
		return err;
	memcpy(info->prog_name, pi.name, sizeof(info->prog_name) - 1);
	info->ours = !strcmp(info->prog_name, ATTACH_PROG_NAME);
	if (!strcmp(info->prog_name, ATTACH_DISPATCHER_NAME)) {
		libxdp_hook();
		dispatcher_info(ifindex, info);
	}
	return 0;
}

/* ---- bpf_links (direct mode) ----------------------------------------------------------------- */

static void link_pin_path(char *buf, size_t len, const char *dir, int ifindex)
{
	snprintf(buf, len, "%s/%s%d", dir, ATTACH_LINK_PIN, ifindex);
}

static int link_info(int fd, struct bpf_link_info *li)
{
	__u32 len = sizeof(*li);

	memset(li, 0, sizeof(*li));
	return bpf_obj_get_info_by_fd(fd, li, &len) ? -errno : 0;
}

/* The XDP bpf_link on ifindex that runs prog_id, or 0 (attached through
 * netlink, or nothing). A link's info names the ifindex but not its network
 * namespace: the program id, the one bpf_xdp_query found here, says which.
 */
static uint32_t link_on(int ifindex, uint32_t prog_id)
{
	__u32 id = 0;

	while (prog_id && !bpf_link_get_next_id(id, &id)) {
		struct bpf_link_info li;
		int fd = bpf_link_get_fd_by_id(id);
		bool hit;

		if (fd < 0)
			continue;
		hit = !link_info(fd, &li) && li.type == BPF_LINK_TYPE_XDP &&
		      li.xdp.ifindex == (__u32)ifindex && li.prog_id == prog_id;
		close(fd);
		if (hit)
			return id;
	}
	return 0;
}

/* The XDP link pinned at path: an fd (li filled), or a negative errno.
 * bpf_obj_get follows symlinks (libbpf 1.1 has no BPF_F_PATH_FD), so the
 * path is looked at first: a symlink is never followed.
 */
static int pinned_link_open(const char *path, struct bpf_link_info *li)
{
	struct stat sb;
	int fd, err;

	if (lstat(path, &sb))
		return -errno;
	if (S_ISLNK(sb.st_mode)) {
		pr_warn("'%s' is a symlink, not a pinned link: left alone\n", path);
		return -ELOOP;
	}
	fd = bpf_obj_get(path);
	if (fd < 0)
		return -errno;
	err = link_info(fd, li);
	if (!err && li->type != BPF_LINK_TYPE_XDP)
		err = -EINVAL;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/* A link whose last pin went is freed by the kernel a moment later (and
 * with it the program, which then lets go of the maps): wait for that,
 * 2 s at most.
 */
static void link_wait_gone(uint32_t link_id, uint32_t prog_id)
{
	const struct timespec tick = {.tv_nsec = 10 * 1000 * 1000};

	for (int i = 0; i < 200; i++) {
		int l = bpf_link_get_fd_by_id(link_id);
		int p = l < 0 && prog_id ? bpf_prog_get_fd_by_id(prog_id) : -1;

		if (l >= 0)
			close(l);
		if (p >= 0)
			close(p);
		if (l < 0 && p < 0)
			return;
		nanosleep(&tick, NULL);
	}
}

/* Does program prog_id use the ll_state map pinned under pin_dir? That,
 * not its name, makes the program on an interface this directory's.
 */
static bool uses_pinned_state(uint32_t prog_id, const char *pin_dir)
{
	struct bpf_map_info mi = {};
	__u32 ml = sizeof(mi), ids[64];
	struct bpf_prog_info pi;
	char path[4096];
	struct stat sb;
	bool found = false;
	int fd;

	snprintf(path, sizeof(path), "%s/ll_state", pin_dir);
	if (lstat(path, &sb) || S_ISLNK(sb.st_mode))
		return false;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return false;
	if (bpf_obj_get_info_by_fd(fd, &mi, &ml))
		mi.id = 0;
	close(fd);
	fd = mi.id ? bpf_prog_get_fd_by_id(prog_id) : -1;
	if (fd < 0)
		return false;
	if (!prog_info(fd, &pi, ids, 64))
		for (__u32 i = 0; i < pi.nr_map_ids && i < 64 && !found; i++)
			found = ids[i] == mi.id;
	close(fd);
	return found;
}

/* Under dir (depth levels more at most), the directory holding name
 * pinned as link id, into out.
 */
static bool find_pin(const char *dir, const char *name, uint32_t id, int depth, char *out,
		     size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;
	char p[4096];

	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		struct bpf_link_info li;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (e->d_type == DT_DIR && depth > 0) {
			found = find_pin(p, name, id, depth - 1, out, len);
		} else if (e->d_type == DT_REG && !strcmp(e->d_name, name)) {
			fd = pinned_link_open(p, &li);
			if (fd >= 0) {
				found = li.id == id;
				close(fd);
			}
			if (found)
				snprintf(out, len, "%s", dir);
		}
	}
	closedir(d);
	return found;
}

/* Which pin directory holds link id (for ifindex) as its link_IFINDEX:
 * every bpffs this process sees, three levels deep. "" if none.
 */
static void link_owner(uint32_t id, int ifindex, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char line[1024], name[32], mnt[512], type[32];

	out[0] = '\0';
	snprintf(name, sizeof(name), "%s%d", ATTACH_LINK_PIN, ifindex);
	while (f && !out[0] && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %511s %31s", mnt, type) == 2 && !strcmp(type, "bpf"))
			find_pin(mnt, name, id, 3, out, len);
	if (f)
		fclose(f);
}

/* "bpf_link id L, pinned under 'DIR'" (or "pinned nowhere this agent can
 * see": another mount namespace, or held by a process's fd).
 */
static void link_what(uint32_t id, int ifindex, char *buf, size_t len)
{
	char dir[512];

	link_owner(id, ifindex, dir, sizeof(dir));
	if (dir[0])
		snprintf(buf, len, "bpf_link id %u, pinned under '%s'", id, dir);
	else
		snprintf(buf, len, "bpf_link id %u, pinned nowhere this agent can see", id);
}

static int link_pin(int fd, const char *path)
{
	if (unlink(path) && errno != ENOENT)
		return -errno;
	return bpf_obj_pin(fd, path) ? -errno : 0;
}

int attach_links_sweep(const char *pin_dir)
{
	size_t plen = strlen(ATTACH_LINK_PIN);
	DIR *d = opendir(pin_dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		struct bpf_link_info li;
		char path[4096];
		int fd;

		if (strncmp(e->d_name, ATTACH_LINK_PIN, plen))
			continue;
		snprintf(path, sizeof(path), "%s/%s", pin_dir, e->d_name);
		fd = pinned_link_open(path, &li);
		if (fd < 0)
			continue;
		close(fd);
		if (li.xdp.ifindex || unlink(path))
			continue;
		pr_info("dropped '%s': its bpf_link (id %u) holds no interface any more\n", path,
			li.id);
		link_wait_gone(li.id, li.prog_id);
		n++;
	}
	closedir(d);
	return n;
}

/* What is in the way: cur, through bpf_link link_id (0: netlink). */
static void busy(struct attach_result *res, const struct attach_info *cur, int ifindex,
		 uint32_t link_id)
{
	char via[600] = "";

	res->dispatcher = cur->dispatcher;
	if (cur->dispatcher) {
		snprintf(res->why, sizeof(res->why),
			 "a libxdp dispatcher (id %u) with %u program(s)%s%s; --force would remove "
			 "the dispatcher and every program in it",
			 cur->prog_id, cur->n_progs, cur->others[0] ? ": " : "", cur->others);
		return;
	}
	if (link_id) {
		link_what(link_id, ifindex, via + 2, sizeof(via) - 2);
		memcpy(via, ", ", 2);
	}
	if (!strcmp(cur->prog_name, ATTACH_PROG_NAME))
		snprintf(res->why, sizeof(res->why),
			 "leaseline's XDP program (id %u) of another pin directory%.190s",
			 cur->prog_id, via);
	else
		snprintf(res->why, sizeof(res->why), "another XDP program, '%s' (id %u)%.190s",
			 cur->prog_name, cur->prog_id, via);
}

/* Is link_id the link pinned under pin_dir for ifindex? */
static bool link_pinned_here(const char *pin_dir, int ifindex, uint32_t link_id)
{
	struct bpf_link_info li;
	char path[4096];
	int fd;

	link_pin_path(path, sizeof(path), pin_dir, ifindex);
	fd = pinned_link_open(path, &li);
	if (fd < 0)
		return false;
	close(fd);
	return li.id == link_id;
}

/* Direct mode: whose the program on the interface is (see the top of this
 * file: our pinned link, or a program on our pinned maps), and the link it
 * runs through (*link_id, 0: netlink). A dispatcher keeps its by-name rule
 * (multiprog's).
 */
static void owner_direct(int ifindex, const struct attach_req *req, struct attach_info *cur,
			 uint32_t *link_id)
{
	*link_id = link_on(ifindex, cur->prog_id);
	if (cur->prog_id && !cur->dispatcher)
		cur->ours = req->pin_dir &&
			    ((*link_id && link_pinned_here(req->pin_dir, ifindex, *link_id)) ||
			     uses_pinned_state(cur->prog_id, req->pin_dir));
}

/* Whether attaching as req says over what cur found is refused without
 * --force: another tool's program, alone or in a dispatcher that is not
 * ours alone (direct mode); another tool's program that is not a libxdp
 * dispatcher (multiprog mode, which runs beside a dispatcher's programs).
 */
static bool refused(const struct attach_info *cur, const struct attach_req *req)
{
	if (!cur->prog_id || req->force)
		return false;
	if (req->attach_mode == CFG_ATTACH_MULTIPROG)
		return !cur->dispatcher && !cur->ours;
	return !(cur->ours && (!cur->dispatcher || cur->n_progs == 1));
}

int attach_check(int ifindex, const struct attach_req *req, struct attach_result *res)
{
	struct attach_info cur;
	int err;

	uint32_t link_id = 0;

	memset(res, 0, sizeof(*res));
	err = attach_query(ifindex, &cur);
	if (err)
		return err;
	if (req->attach_mode != CFG_ATTACH_MULTIPROG)
		owner_direct(ifindex, req, &cur, &link_id);
	if (refused(&cur, req)) {
		busy(res, &cur, ifindex, link_id);
		return -EBUSY;
	}
	return 0;
}

/* libxdp keeps a dispatcher's links pinned in LIBXDP_BPFFS (default
 * /sys/fs/bpf/xdp)/dispatch-IFINDEX-ID; once the dispatcher is off the
 * interface they only hold its programs. This one's, and no other: the
 * names do not say which network namespace they belong to, so libxdp's own
 * libxdp_clean_references() could take another namespace's.
 */
static void unpin_dispatcher(int ifindex, uint32_t id)
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

/* Remove whatever is attached (cur), by id: our own program or, with force,
 * another tool's or a whole dispatcher. A bpf_link is detached (a pin of it
 * then holds no interface; attach_links_sweep drops ours).
 */
static int remove_attached(int ifindex, const struct attach_info *cur)
{
	LIBBPF_OPTS(bpf_xdp_attach_opts, ao);
	__u32 flags = cur->mode == XDP_ATTACHED_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	uint32_t link_id = link_on(ifindex, cur->prog_id);
	int old_fd, err;

	if (link_id) {
		int fd = bpf_link_get_fd_by_id(link_id);

		if (fd < 0)
			return -errno;
		err = bpf_link_detach(fd) ? -errno : 0;
		close(fd);
		return err;
	}
	old_fd = bpf_prog_get_fd_by_id(cur->prog_id);
	if (old_fd >= 0) {
		ao.old_prog_fd = old_fd;
		flags |= XDP_FLAGS_REPLACE;
	}
	err = bpf_xdp_detach(ifindex, flags, &ao);
	if (old_fd >= 0)
		close(old_fd);
	if (!err && cur->dispatcher)
		unpin_dispatcher(ifindex, cur->prog_id);
	return err;
}

/* Our own link (link_id), in the mode asked for: the new program in its
 * place, atomically; pinned at path again if its pin went.
 */
static int link_update(const char *path, uint32_t link_id, const struct attach_req *req,
		       struct attach_result *res)
{
	struct bpf_link_info li;
	int fd = pinned_link_open(path, &li), err;
	bool pinned = fd >= 0 && li.id == link_id;

	if (!pinned) {
		if (fd >= 0)
			close(fd);
		fd = bpf_link_get_fd_by_id(link_id);
		if (fd < 0)
			return -errno;
	}
	err = bpf_link_update(fd, req->prog_fd, NULL) ? -errno : 0;
	if (!err && !pinned)
		err = link_pin(fd, path);
	close(fd);
	if (err)
		return err;
	res->link_id = link_id;
	res->updated = true;
	return 0;
}

/* A new link, pinned at path: native unless generic was asked (auto falls
 * back to generic). A pin at path that holds a live link elsewhere (its
 * ifindex in another network namespace) is not replaced.
 */
static int link_new(int ifindex, const char *path, const struct attach_req *req,
		    struct attach_result *res)
{
	struct bpf_link_info li;
	int fd = pinned_link_open(path, &li), err = 0;

	if (fd >= 0) {
		close(fd);
		if (li.xdp.ifindex) {
			snprintf(
			    res->why, sizeof(res->why),
			    "'%.120s' holds bpf_link id %u, attached to another interface (another "
			    "network namespace's?); remove it to attach here",
			    path, li.id);
			return -EEXIST;
		}
	} else if (fd == -ELOOP) {
		snprintf(res->why, sizeof(res->why), "'%.200s' is a symlink", path);
		return fd;
	}
	for (int generic = req->xdp_mode == CFG_XDP_GENERIC; generic < 2; generic++) {
		LIBBPF_OPTS(bpf_link_create_opts, lo,
			    .flags = generic ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE);

		fd = bpf_link_create(req->prog_fd, ifindex, BPF_XDP, &lo);
		if (fd >= 0) {
			res->xdp_mode = generic ? XDP_ATTACHED_SKB : XDP_ATTACHED_DRV;
			break;
		}
		err = -errno;
		if (generic || req->xdp_mode != CFG_XDP_AUTO || err == -EBUSY)
			return err;
		pr_info("native XDP unavailable on ifindex %d (%s), using generic\n", ifindex,
			strerror(-err));
	}
	err = link_pin(fd, path);
	if (err) {
		/* Unpinned, it would go with this process: none rather than that. */
		snprintf(res->why, sizeof(res->why), "cannot pin the link at '%.160s': %s", path,
			 strerror(-err));
		bpf_link_detach(fd);
		close(fd);
		return err;
	}
	res->link_id = link_info(fd, &li) ? 0 : li.id;
	close(fd);
	return 0;
}

static bool other_mode(const struct attach_req *req, const struct attach_info *cur)
{
	return (req->xdp_mode == CFG_XDP_NATIVE && cur->mode == XDP_ATTACHED_SKB) ||
	       (req->xdp_mode == CFG_XDP_GENERIC && cur->mode == XDP_ATTACHED_DRV);
}

static int attach_direct(int ifindex, const struct attach_req *req, struct attach_result *res,
			 struct attach_info *cur)
{
	uint32_t link_id;
	char path[4096];
	int err;

	if (!req->pin_dir)
		return -EINVAL;
	link_pin_path(path, sizeof(path), req->pin_dir, ifindex);
	owner_direct(ifindex, req, cur, &link_id);
	/* Our program alone in a dispatcher is ours; a dispatcher with others'
	 * programs is theirs too.
	 */
	if (refused(cur, req)) {
		busy(res, cur, ifindex, link_id);
		return -EBUSY;
	}
	if (cur->ours && link_id && !other_mode(req, cur)) {
		res->xdp_mode = cur->mode;
		return link_update(path, link_id, req, res);
	}
	/* Anything else goes first: the kernel puts a link neither over another
	 * link nor over a program attached through netlink (EBUSY). Until ours
	 * is there, a moment with no program.
	 */
	if (cur->prog_id) {
		if (!cur->ours) {
			char via[600];

			if (link_id)
				link_what(link_id, ifindex, via, sizeof(via));
			else
				snprintf(via, sizeof(via), "its netlink attachment");
			snprintf(res->took, sizeof(res->took), "%.400s (program '%s', id %u)", via,
				 cur->dispatcher ? ATTACH_DISPATCHER_NAME : cur->prog_name,
				 cur->prog_id);
		} else {
			pr_info("ifindex %d: our program (id %u) %s; attaching it anew through a "
				"bpf_link\n",
				ifindex, cur->prog_id,
				link_id ? "runs in the other XDP mode"
					: "was attached through netlink");
		}
		err = remove_attached(ifindex, cur);
		if (err)
			return err;
	}
	return link_new(ifindex, path, req, res);
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

static int mp_detach_id(int ifindex, uint32_t id)
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

static int attach_multiprog(int ifindex, const struct attach_req *req, struct attach_result *res,
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
		int derr = mp_detach_id(ifindex, old_id);

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

int attach_iface(int ifindex, const struct attach_req *req, struct attach_result *res)
{
	struct attach_info cur;
	int err;

	memset(res, 0, sizeof(*res));
	err = attach_query(ifindex, &cur);
	if (err)
		return err;
	if (req->attach_mode == CFG_ATTACH_MULTIPROG)
		return attach_multiprog(ifindex, req, res, &cur);
	return attach_direct(ifindex, req, res, &cur);
}

int attach_detach(int ifindex, bool force, const char *pin_dir)
{
	struct attach_info cur;
	struct bpf_link_info li;
	uint32_t link_id;
	char path[4096];
	int err = attach_query(ifindex, &cur), fd;

	if (err)
		return err;
	if (!cur.prog_id)
		return -ENOENT;
	/* In a dispatcher: ours alone goes; the dispatcher goes with its last program. */
	if (cur.dispatcher && cur.our_id)
		return mp_detach_id(ifindex, cur.our_id);
	if (!cur.ours && !force)
		return -EBUSY;
	link_id = link_on(ifindex, cur.prog_id);
	err = remove_attached(ifindex, &cur);
	if (err || !link_id || !pin_dir)
		return err;
	/* The pin of the link just detached goes too: then nothing holds it. */
	link_pin_path(path, sizeof(path), pin_dir, ifindex);
	fd = pinned_link_open(path, &li);
	if (fd < 0)
		return 0;
	close(fd);
	if (li.id == link_id && !unlink(path))
		link_wait_gone(link_id, 0);
	return 0;
}
