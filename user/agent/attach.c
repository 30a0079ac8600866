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
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/attach.h"
#include "agent/attach_int.h"
#include "lib/config.h"
#include "lib/fs.h"
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

int prog_info(int fd, struct bpf_prog_info *pi, uint32_t *map_ids, uint32_t n_max)
{
	__u32 len = sizeof(*pi);

	memset(pi, 0, sizeof(*pi));
	if (map_ids) {
		pi->nr_map_ids = n_max;
		pi->map_ids = (__u64)(unsigned long)map_ids;
	}
	return bpf_obj_get_info_by_fd(fd, pi, &len) ? -errno : 0;
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
	if (!strcmp(info->prog_name, ATTACH_DISPATCHER_NAME))
		attach_mp_info(ifindex, info);
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

/* The XDP link pinned at path: an fd (li filled), or a negative errno. A
 * symlink is never followed (fs_pin_get).
 */
static int pinned_link_open(const char *path, struct bpf_link_info *li)
{
	int fd = fs_pin_get(path), err;

	if (fd == -ELOOP)
		pr_warn("'%s' is a symlink, not a pinned link: left alone\n", path);
	if (fd < 0)
		return fd;
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
	bool found = false;
	int fd;

	snprintf(path, sizeof(path), "%s/ll_state", pin_dir);
	fd = fs_pin_get(path);
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
void busy(struct attach_result *res, const struct attach_info *cur, int ifindex, uint32_t link_id)
{
	char via[600] = "";

	res->dispatcher = cur->dispatcher && !cur->mp_foreign;
	if (cur->dispatcher && cur->mp_foreign) {
		snprintf(res->why, sizeof(res->why),
			 "a libxdp dispatcher (id %u) whose leaseline program (id %u) is another "
			 "pin directory's (it spends another ll_state)",
			 cur->prog_id, cur->our_id);
		return;
	}
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
static void owner_direct(int ifindex, const char *pin_dir, struct attach_info *cur,
			 uint32_t *link_id)
{
	*link_id = link_on(ifindex, cur->prog_id);
	if (cur->prog_id && !cur->dispatcher)
		cur->ours = pin_dir && ((*link_id && link_pinned_here(pin_dir, ifindex, *link_id)) ||
					uses_pinned_state(cur->prog_id, pin_dir));
}

/* multiprog: is the leaseline program in the dispatcher another pin
 * directory's? The name says only that it is a leaseline; ours spends the
 * ll_state pinned in our pin directory.
 */
static void owner_multiprog(const char *pin_dir, struct attach_info *cur)
{
	cur->mp_foreign = cur->dispatcher && cur->our_id &&
			  !(pin_dir && uses_pinned_state(cur->our_id, pin_dir));
}

/* What is on ifindex (cur) and whose, by multiprog's rule (1) or direct
 * mode's (0), or by the rule of what is there (-1: a dispatcher's, else
 * direct's); *link_id the direct link it runs through (0: none, netlink).
 */
static int query_owner(int ifindex, const char *pin_dir, int multiprog, struct attach_info *cur,
		       uint32_t *link_id)
{
	int err = attach_query(ifindex, cur);

	*link_id = 0;
	if (err)
		return err;
	if (multiprog < 0)
		multiprog = cur->dispatcher;
	if (multiprog)
		owner_multiprog(pin_dir, cur);
	else
		owner_direct(ifindex, pin_dir, cur, link_id);
	return 0;
}

/* Whether attaching as req says over what cur found is refused without
 * --force: another tool's program, alone or in a dispatcher that is not
 * ours alone (direct mode); another tool's program that is not a libxdp
 * dispatcher, or a dispatcher whose leaseline program is another pin
 * directory's (multiprog mode, which runs beside a dispatcher's programs).
 */
bool refused(const struct attach_info *cur, const struct attach_req *req)
{
	if (!cur->prog_id || req->force)
		return false;
	if (req->attach_mode == CFG_ATTACH_MULTIPROG)
		return (!cur->dispatcher && !cur->ours) || cur->mp_foreign;
	return !(cur->ours && (!cur->dispatcher || cur->n_progs == 1));
}

int attach_check(int ifindex, const struct attach_req *req, struct attach_result *res)
{
	struct attach_info cur;
	uint32_t link_id;
	int err;

	memset(res, 0, sizeof(*res));
	err = query_owner(ifindex, req->pin_dir, req->attach_mode == CFG_ATTACH_MULTIPROG, &cur,
			  &link_id);
	if (err)
		return err;
	if (refused(&cur, req)) {
		busy(res, &cur, ifindex, link_id);
		return -EBUSY;
	}
	return 0;
}

int attach_owned(int ifindex, const char *pin_dir, struct attach_info *cur)
{
	uint32_t link_id;
	int err = query_owner(ifindex, pin_dir, -1, cur, &link_id);

	if (err)
		return err;
	return cur->dispatcher ? cur->our_id && !cur->mp_foreign : cur->ours;
}

/* Remove whatever is attached (cur), by id: our own program or, with force,
 * another tool's or a whole dispatcher. A bpf_link is detached (a pin of it
 * then holds no interface; attach_links_sweep drops ours).
 */
int remove_attached(int ifindex, const struct attach_info *cur)
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
		attach_mp_unpin(ifindex, cur->prog_id);
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
	owner_direct(ifindex, req->pin_dir, cur, &link_id);
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
	 * link nor over a program attached through netlink (EBUSY), and holds
	 * no native program beside a generic one (EEXIST). Until ours is
	 * there, a moment with no program: measured, for the log.
	 */
	if (cur->prog_id) {
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
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
		err = link_new(ifindex, path, req, res);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		res->gap_ns = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull +
			      (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec;
		return err;
	}
	return link_new(ifindex, path, req, res);
}

int attach_iface(int ifindex, const struct attach_req *req, struct attach_result *res)
{
	struct attach_info cur;
	int err;

	memset(res, 0, sizeof(*res));
	err = attach_query(ifindex, &cur);
	if (err)
		return err;
	if (req->attach_mode == CFG_ATTACH_MULTIPROG) {
		owner_multiprog(req->pin_dir, &cur);
		return attach_multiprog(ifindex, req, res, &cur);
	}
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
	if (cur.dispatcher && cur.our_id) {
		owner_multiprog(pin_dir, &cur);
		if (cur.mp_foreign && !force)
			return -EBUSY; /* another pin directory's leaseline */
		return attach_mp_detach_id(ifindex, cur.our_id);
	}
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
