// SPDX-License-Identifier: MIT
/*
 * The pin directory's maps and their layout (pins.h; the directory itself,
 * its lock and audit: pins_dir.c). Invariants: pins are never
 * adopted unless every map matches this build's (type, key and value size,
 * flags, BTF types field by field) and ll_layout says this layout or none;
 * no pin is ever re-created beside others; a bucket map is replaced only
 * after every bucket of the old one was copied into it, and only when no
 * program uses the old one (so none can be charged after the copy).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <sys/stat.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "lib/monotonic.h"
#include "lib/fs.h"
#include "leaseline.skel.h"
#include "ll_types.h"
#include "lib/log.h"
#include "agent/pins.h"
#include "lib/version.h"
#include "lib/util.h"

#define PINS_MAX_MAPS	 24
#define PINS_MAX_DIFFS	 4
#define PINS_LAYOUT_NAME "ll_layout"
#define PINS_OLD_SUFFIX	 "-old" /* bpffs refuses names with a dot */

/* Bucket maps whose size follows the agent file (max-keys, max-flow-keys). */
static const char *const resizable[] = {"ll_buckets", "ll_flow_buckets", "ll_prefix_buckets"};

static bool is_resizable(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(resizable); i++)
		if (!strcmp(name, resizable[i]))
			return true;
	return false;
}

/* ---- BTF, field by field --------------------------------------------------------------------- */

static bool same_name(const struct btf *a, __u32 oa, const struct btf *b, __u32 ob)
{
	const char *na = btf__name_by_offset(a, oa), *nb = btf__name_by_offset(b, ob);

	return na && nb && !strcmp(na, nb);
}

/* Whether type ia of a and type ib of b are the same type: kinds, names,
 * sizes, encodings, members with their offsets, array lengths, enum values.
 */
static bool btf_same(const struct btf *a, __u32 ia, const struct btf *b, __u32 ib, int depth)
{
	const struct btf_type *ta, *tb;
	__u16 vlen;

	if (!ia || !ib)
		return ia == ib;
	ta = btf__type_by_id(a, ia);
	tb = btf__type_by_id(b, ib);
	if (!ta || !tb || depth > 32 || btf_kind(ta) != btf_kind(tb) ||
	    btf_vlen(ta) != btf_vlen(tb) || btf_kflag(ta) != btf_kflag(tb) ||
	    !same_name(a, ta->name_off, b, tb->name_off))
		return false;
	vlen = btf_vlen(ta);
	switch (btf_kind(ta)) {
	case BTF_KIND_INT:
		return ta->size == tb->size && *(const __u32 *)(ta + 1) == *(const __u32 *)(tb + 1);
	case BTF_KIND_FLOAT:
		return ta->size == tb->size;
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION: {
		const struct btf_member *ma = btf_members(ta), *mb = btf_members(tb);

		if (ta->size != tb->size)
			return false;
		for (__u16 i = 0; i < vlen; i++)
			if (ma[i].offset != mb[i].offset ||
			    !same_name(a, ma[i].name_off, b, mb[i].name_off) ||
			    !btf_same(a, ma[i].type, b, mb[i].type, depth + 1))
				return false;
		return true;
	}
	case BTF_KIND_ARRAY:
		return btf_array(ta)->nelems == btf_array(tb)->nelems &&
		       btf_same(a, btf_array(ta)->type, b, btf_array(tb)->type, depth + 1);
	case BTF_KIND_ENUM: {
		const struct btf_enum *ea = btf_enum(ta), *eb = btf_enum(tb);

		if (ta->size != tb->size)
			return false;
		for (__u16 i = 0; i < vlen; i++)
			if (ea[i].val != eb[i].val ||
			    !same_name(a, ea[i].name_off, b, eb[i].name_off))
				return false;
		return true;
	}
	case BTF_KIND_ENUM64: {
		/* Entries of three words: name, low and high half of the value. */
		const __u32 *ea = (const __u32 *)(ta + 1), *eb = (const __u32 *)(tb + 1);

		if (ta->size != tb->size)
			return false;
		for (__u16 i = 0; i < vlen; i++)
			if (ea[3 * i + 1] != eb[3 * i + 1] || ea[3 * i + 2] != eb[3 * i + 2] ||
			    !same_name(a, ea[3 * i], b, eb[3 * i]))
				return false;
		return true;
	}
	case BTF_KIND_FWD:
		return true; /* name and kflag (struct or union) compared above */
	case BTF_KIND_TYPEDEF:
	case BTF_KIND_VOLATILE:
	case BTF_KIND_CONST:
	case BTF_KIND_RESTRICT:
	case BTF_KIND_TYPE_TAG:
	case BTF_KIND_PTR:
		return btf_same(a, ta->type, b, tb->type, depth + 1);
	default:
		return false; /* nothing a map's key or value is made of */
	}
}

/* ---- what is pinned -------------------------------------------------------------------------- */

struct pinned_map {
	struct bpf_map *m; /* this build's */
	int fd;			 /* the pin's, or -1: not pinned */
	struct bpf_map_info info;
};

struct survey {
	struct bpf_object *obj; /* this build's */
	const char *dir;
	struct pinned_map maps[PINS_MAX_MAPS];
	size_t n, n_found;
	char missing[256]; /* names of this build's maps not pinned, "a, b" */
	uint32_t layout;   /* the pins' recorded layout; 0 none */
	bool layout_pinned;
	char layout_build[LL_LAYOUT_BUILD_LEN];
	struct btf *btf_cache[PINS_MAX_MAPS]; /* the pins' BTF objects, by btf_id */
	__u32 btf_ids[PINS_MAX_MAPS];
	size_t n_btf;
};

static void survey_free(struct survey *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->maps[i].fd >= 0)
			close(s->maps[i].fd);
	for (size_t i = 0; i < s->n_btf; i++)
		btf__free(s->btf_cache[i]);
	memset(s, 0, sizeof(*s));
}

static struct btf *pinned_btf(struct survey *s, __u32 id)
{
	struct btf *b;

	for (size_t i = 0; i < s->n_btf; i++)
		if (s->btf_ids[i] == id)
			return s->btf_cache[i];
	b = btf__load_from_kernel_by_id(id);
	if (!b || s->n_btf == PINS_MAX_MAPS) {
		btf__free(b);
		return NULL;
	}
	s->btf_ids[s->n_btf] = id;
	s->btf_cache[s->n_btf++] = b;
	return b;
}

/* Open every pin of obj's pinned maps under s->dir and read ll_layout. */
static int survey_take(struct bpf_object *obj, const char *dir, struct survey *s)
{
	struct bpf_map *m;

	memset(s, 0, sizeof(*s));
	s->obj = obj;
	s->dir = dir;
	bpf_object__for_each_map(m, obj)
	{
		struct pinned_map *p = &s->maps[s->n];
		const char *path = bpf_map__pin_path(m);
		__u32 len = sizeof(p->info);

		if (!path)
			continue; /* not pinned: rebuilt at every start */
		if (s->n == PINS_MAX_MAPS)
			return -E2BIG;
		s->n++;
		p->m = m;
		/* A symlink is never taken for a pin (nor followed by libbpf at
		 * the load: pins_prepare hands it the fds opened here).
		 */
		p->fd = fs_pin_get(path);
		if (p->fd == -ELOOP) {
			pr_warn("pins under '%s': %s is a symlink, not a pinned map: refusing it "
				"(remove it)\n",
				dir, bpf_map__name(m));
			return -ELOOP;
		}
		if (p->fd < 0) {
			int err = p->fd;

			if (err != -ENOENT) {
				pr_warn("cannot open '%s': %s\n", path, strerror(-err));
				return err;
			}
			if (strcmp(bpf_map__name(m), PINS_LAYOUT_NAME))
				snprintf(s->missing + strlen(s->missing),
					 sizeof(s->missing) - strlen(s->missing), "%s%s",
					 s->missing[0] ? ", " : "", bpf_map__name(m));
			continue;
		}
		s->n_found++;
		if (bpf_obj_get_info_by_fd(p->fd, &p->info, &len)) {
			int err = -errno;

			pr_warn("cannot read what '%s' is: %s\n", path, strerror(-err));
			return err;
		}
		if (!strcmp(bpf_map__name(m), PINS_LAYOUT_NAME) &&
		    p->info.type == BPF_MAP_TYPE_ARRAY && p->info.value_size >= 4 &&
		    p->info.value_size <= 4096) {
			char buf[4096] = {};
			__u32 k = 0;

			if (!bpf_map_lookup_elem(p->fd, &k, buf)) {
				s->layout_pinned = true;
				memcpy(&s->layout, buf, sizeof(s->layout));
				if (p->info.value_size >= sizeof(struct ll_layout))
					snprintf(s->layout_build, sizeof(s->layout_build), "%.*s",
						 LL_LAYOUT_BUILD_LEN - 1,
						 ((struct ll_layout *)buf)->agent_build);
			}
		}
	}
	return 0;
}

/* The pins' layout in words: "layout 1 (last opened by leaseline X)". */
static void found_layout(const struct survey *s, char *buf, size_t len)
{
	if (!s->layout)
		snprintf(buf, len, "no layout recorded (pins made before leaseline recorded one)");
	else
		snprintf(buf, len, "layout %u%s%s%s", s->layout,
			 s->layout_build[0] ? " (last opened by leaseline " : "", s->layout_build,
			 s->layout_build[0] ? ")" : "");
}

/* How this pinned map differs from this build's, in words; "" if it does
 * not. Its size counts only if sizes_count; *resize says it differs in size
 * alone.
 */
static void map_diff(struct survey *s, const struct pinned_map *p, bool sizes_count, bool *resize,
		     char *buf, size_t len)
{
	const struct bpf_map *m = p->m;
	struct btf *ours = bpf_object__btf(s->obj), *theirs;
	const struct bpf_map_info *i = &p->info;

	buf[0] = '\0';
	*resize = false;
	if (i->type != bpf_map__type(m))
		snprintf(buf, len, "%s is a map of type %u, this build's of type %u",
			 bpf_map__name(m), i->type, bpf_map__type(m));
	else if (i->key_size != bpf_map__key_size(m) || i->value_size != bpf_map__value_size(m))
		snprintf(buf, len, "%s has %u-byte keys and %u-byte values, this build's %u and %u",
			 bpf_map__name(m), i->key_size, i->value_size, bpf_map__key_size(m),
			 bpf_map__value_size(m));
	else if (i->map_flags != bpf_map__map_flags(m))
		snprintf(buf, len, "%s has flags 0x%x, this build's 0x%x", bpf_map__name(m),
			 i->map_flags, bpf_map__map_flags(m));
	else if (!i->btf_id || !(theirs = pinned_btf(s, i->btf_id)) || !ours)
		snprintf(buf, len, "%s has no BTF types to compare with this build's",
			 bpf_map__name(m));
	else if (!btf_same(theirs, i->btf_key_type_id, ours, bpf_map__btf_key_type_id(m), 0) ||
		 !btf_same(theirs, i->btf_value_type_id, ours, bpf_map__btf_value_type_id(m), 0))
		snprintf(buf, len,
			 "%s's key or value type differs from this build's, field by field "
			 "(bpftool btf dump id %u)",
			 bpf_map__name(m), i->btf_id);
	else if (sizes_count && i->max_entries != bpf_map__max_entries(m)) {
		if (is_resizable(bpf_map__name(m)))
			*resize = true;
		else
			snprintf(buf, len, "%s has %u entries, this build's %u", bpf_map__name(m),
				 i->max_entries, bpf_map__max_entries(m));
	}
}

#define START_AFRESH                                                                               \
	"Or, to start from scratch (every key then gets a fresh bucket, once): `leaseline detach " \
	"IFACE` for each interface, `rm %s/ll_*`, start the agent"

/* Refuse pins that are not this build's, saying which and what to do. */
static int check_layout(struct survey *s, bool agent)
{
	char found[200], diffs[PINS_MAX_DIFFS][200], d[200];
	size_t n_diffs = 0;
	bool resize;

	found_layout(s, found, sizeof(found));
	if (s->layout && s->layout != LL_LAYOUT_VERSION) {
		pr_warn("pins under '%s' are of %s; this build (leaseline %s) uses layout %u and "
			"will not read them as its own. Run a leaseline of layout %u. " START_AFRESH
			"\n",
			s->dir, found, LL_VERSION, LL_LAYOUT_VERSION, s->layout, s->dir);
		return -EPROTO;
	}
	if (agent && s->missing[0]) {
		pr_warn(
		    "pins under '%s' are incomplete (%s): %s missing; this build (leaseline %s, "
		    "layout %u) will not create %s fresh beside the others. Restore "
		    "%s. " START_AFRESH "\n",
		    s->dir, found, s->missing, LL_VERSION, LL_LAYOUT_VERSION,
		    strchr(s->missing, ',') ? "them" : "it",
		    strchr(s->missing, ',') ? "them" : "it", s->dir);
		return -EPROTO;
	}
	for (size_t i = 0; i < s->n; i++) {
		if (s->maps[i].fd < 0)
			continue;
		map_diff(s, &s->maps[i], false, &resize, d, sizeof(d));
		if (d[0] && n_diffs < PINS_MAX_DIFFS)
			snprintf(diffs[n_diffs++], sizeof(diffs[0]), "%s", d);
	}
	if (!n_diffs)
		return 0;
	if (s->layout == LL_LAYOUT_VERSION)
		snprintf(found, sizeof(found),
			 "record layout %u, this build's (leaseline %s), but do "
			 "not match it",
			 s->layout, LL_VERSION);
	else
		snprintf(found + strlen(found), sizeof(found) - strlen(found),
			 " and are not of this build's layout %u (leaseline %s)", LL_LAYOUT_VERSION,
			 LL_VERSION);
	pr_warn("pins under '%s' %s%s: %s%s%s%s%s%s%s. %s " START_AFRESH "\n", s->dir,
		s->layout == LL_LAYOUT_VERSION ? "" : "have ", found, diffs[0],
		n_diffs > 1 ? "; " : "", n_diffs > 1 ? diffs[1] : "", n_diffs > 2 ? "; " : "",
		n_diffs > 2 ? diffs[2] : "", n_diffs > 3 ? "; " : "", n_diffs > 3 ? "…" : "",
		s->layout == LL_LAYOUT_VERSION
		    ? "A map was replaced, or a build changed one without raising the layout."
		    : "Run the leaseline that made them.",
		s->dir);
	return -EPROTO;
}

/* ---- a bucket map of a new size ----------------------------------------------------------------
 */

static long map_count(int fd, __u32 key_size)
{
	char k[64], next[64];
	long n = 0;
	bool more;

	if (key_size > sizeof(k))
		return -E2BIG;
	more = !bpf_map_get_next_key(fd, NULL, next);
	while (more) {
		memcpy(k, next, key_size);
		n++;
		more = !bpf_map_get_next_key(fd, k, next);
	}
	return n;
}

/* The id of a loaded program that uses the map map_id, or 0. */
static __u32 prog_using(__u32 map_id)
{
	__u32 id = 0, found = 0;

	while (!found && !bpf_prog_get_next_id(id, &id)) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info), n, *ids;
		int fd = bpf_prog_get_fd_by_id(id);

		if (fd < 0)
			continue;
		if (!bpf_obj_get_info_by_fd(fd, &info, &len) && (n = info.nr_map_ids) &&
		    (ids = calloc(n, sizeof(*ids)))) {
			memset(&info, 0, sizeof(info));
			info.nr_map_ids = n;
			info.map_ids = (__u64)(unsigned long)ids;
			len = sizeof(info);
			if (!bpf_obj_get_info_by_fd(fd, &info, &len))
				for (__u32 i = 0; i < n && i < info.nr_map_ids; i++)
					if (ids[i] == map_id)
						found = id;
			free(ids);
		}
		close(fd);
	}
	return found;
}

/* Where the pinned ll_state says the agent attached, if in this network
 * namespace: "eth0, eth1", else "".
 */
static void attached_ifaces(const struct survey *s, char *buf, size_t len)
{
	struct ll_state st;
	__u32 k = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < s->n; i++) {
		const struct pinned_map *p = &s->maps[i];

		if (p->fd < 0 || strcmp(bpf_map__name(p->m), "ll_state") ||
		    p->info.value_size != sizeof(st) || bpf_map_lookup_elem(p->fd, &k, &st) ||
		    (st.netns_ino && st.netns_ino != fs_netns_ino()))
			continue;
		for (__u32 j = 0; j < st.n_ifaces && j < LL_MAX_IFACES; j++) {
			char name[IF_NAMESIZE];

			if (if_indextoname(st.ifindex[j], name))
				snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
					 buf[0] ? ", " : "", name);
		}
	}
}

/* A bucket map pinned at another size: set it aside for pins_finish if its
 * buckets fit and no program can charge them meanwhile; else say why not.
 */
static int plan_move(struct survey *s, struct pinned_map *p, struct pins_plan *plan)
{
	const char *name = bpf_map__name(p->m), *path = bpf_map__pin_path(p->m);
	__u32 want = bpf_map__max_entries(p->m), prog;
	long n = map_count(p->fd, p->info.key_size);
	char old[4096 + 8], where[128];

	if (n < 0)
		return (int)n;
	if ((unsigned long)n > want) {
		pr_warn("pins under '%s': %s holds %ld buckets and this agent's max-keys/"
			"max-flow-keys make room for %u (%u pinned): raise them to hold every "
			"bucket. " START_AFRESH "\n",
			s->dir, name, n, want, p->info.max_entries, s->dir);
		return -ENOSPC;
	}
	prog = prog_using(p->info.id);
	if (prog) {
		attached_ifaces(s, where, sizeof(where));
		pr_warn(
		    "pins under '%s': %s has %u entries and this agent's max-keys/max-flow-keys "
		    "ask for %u. Its %ld buckets can be copied into a map of the new size, but "
		    "not while a program still charges them (XDP program id %u%s%s): the copy "
		    "would miss what it spends meanwhile. Either set max-keys and max-flow-keys "
		    "back, or run `leaseline detach IFACE` for each interface and start the agent "
		    "again: it copies every bucket, then attaches (nothing is enforced in "
		    "between)\n",
		    s->dir, name, p->info.max_entries, want, n, prog,
		    where[0] ? ", attached to " : "", where);
		return -EBUSY;
	}
	if (plan->n_moves == PINS_MAX_MOVES)
		return -E2BIG;
	snprintf(old, sizeof(old), "%s%s", path, PINS_OLD_SUFFIX);
	if (rename(path, old)) {
		int err = -errno;

		pr_warn("cannot set '%s' aside as '%s': %s\n", path, old, strerror(-err));
		return err;
	}
	snprintf(plan->moves[plan->n_moves].name, sizeof(plan->moves[0].name), "%s", name);
	plan->moves[plan->n_moves++].old_fd = p->fd;
	p->fd = -1; /* the plan's now */
	pr_info("%s: %ld buckets to move from %u entries to %u (max-keys or max-flow-keys "
		"changed)\n",
		name, n, p->info.max_entries, want);
	return 0;
}

/* A move an earlier run left half done (NAME-old still there): put the old
 * map back, dropping the partial copy, so this run starts over from it.
 */
static int rollback(struct bpf_object *obj)
{
	struct bpf_map *m;

	bpf_object__for_each_map(m, obj)
	{
		const char *path = bpf_map__pin_path(m);
		char old[4096 + 8];
		struct stat sb;

		if (!path || !is_resizable(bpf_map__name(m)))
			continue;
		snprintf(old, sizeof(old), "%s%s", path, PINS_OLD_SUFFIX);
		if (stat(old, &sb))
			continue;
		if ((unlink(path) && errno != ENOENT) || rename(old, path)) {
			int err = -errno;

			pr_warn("cannot restore '%s' from '%s', left by an interrupted move: %s\n",
				path, old, strerror(-err));
			return err;
		}
		pr_warn("'%s': restored from '%s' (a move of its buckets was interrupted)\n", path,
			old);
	}
	return 0;
}

/* The load uses the maps looked at here, by fd: libbpf would open each pin
 * again by its path, following a symlink put there since. A map handed
 * over loses its pin path in obj (it stays pinned; libbpf neither opens nor
 * pins it); the missing ones keep theirs, and libbpf pins them new (a
 * name taken meanwhile fails the pin: EEXIST).
 */
static int hand_over(struct survey *s)
{
	for (size_t i = 0; i < s->n; i++) {
		struct pinned_map *p = &s->maps[i];
		int err;

		if (p->fd < 0)
			continue;
		err = bpf_map__reuse_fd(p->m, p->fd);
		if (!err)
			err = bpf_map__set_pin_path(p->m, NULL);
		if (err) {
			pr_warn("cannot use the pinned %s: %s\n", bpf_map__name(p->m),
				strerror(-err));
			return err;
		}
	}
	return 0;
}

int pins_prepare(struct bpf_object *obj, const char *dir, struct pins_plan *plan)
{
	struct survey *s = calloc(1, sizeof(*s));
	bool resize;
	char d[200];
	int err;

	memset(plan, 0, sizeof(*plan));
	plan->stamp = true;
	if (!s)
		return -ENOMEM;
	err = rollback(obj);
	if (!err)
		err = survey_take(obj, dir, s);
	if (err || !s->n_found)
		goto out; /* nothing pinned: all is created now */
	err = check_layout(s, true);
	for (size_t i = 0; !err && i < s->n; i++) {
		if (s->maps[i].fd < 0)
			continue;
		map_diff(s, &s->maps[i], true, &resize, d, sizeof(d));
		if (resize)
			err = plan_move(s, &s->maps[i], plan);
	}
	if (!err && !s->layout)
		pr_info("pins under '%s' record no layout; every map is this build's, type for "
			"type: adopted as layout %u\n",
			dir, LL_LAYOUT_VERSION);
	if (!err)
		err = hand_over(s);
out:
	if (err) {
		/* Put back what was set aside: nothing changed. */
		for (size_t i = 0; i < plan->n_moves; i++) {
			char path[4096 + 40], old[4096 + 48];

			snprintf(path, sizeof(path), "%s/%s", dir, plan->moves[i].name);
			snprintf(old, sizeof(old), "%s%s", path, PINS_OLD_SUFFIX);
			if (rename(old, path))
				pr_warn("cannot put '%s' back as '%s': %s\n", old, path,
					strerror(errno));
		}
		pins_plan_free(plan);
	}
	survey_free(s);
	free(s);
	return err;
}

static int move_buckets(struct bpf_object *obj, const char *dir, const char *name, int old_fd)
{
	const struct bpf_map *m = bpf_object__find_map_by_name(obj, name);
	int fd = m ? bpf_map__fd(m) : -1;
	__u32 ks = m ? bpf_map__key_size(m) : 0, vs = m ? bpf_map__value_size(m) : 0;
	char *k = calloc(2, ks ? ks : 1), *v = calloc(1, vs ? vs : 1), old[4096 + 48];
	long n = 0;
	int err = fd < 0 ? -ENOENT : !k || !v ? -ENOMEM : 0;
	bool more = !err && !bpf_map_get_next_key(old_fd, NULL, k + ks);

	while (!err && more) {
		memcpy(k, k + ks, ks);
		if (bpf_map_lookup_elem(old_fd, k, v) || bpf_map_update_elem(fd, k, v, BPF_NOEXIST))
			err = -errno;
		else
			n++;
		more = !bpf_map_get_next_key(old_fd, k, k + ks);
	}
	free(k);
	free(v);
	if (err) {
		pr_warn("%s: cannot copy its buckets into the new map: %s (the old one stays as "
			"'%s/%s%s'; the next start tries again)\n",
			name, strerror(-err), dir, name, PINS_OLD_SUFFIX);
		return err;
	}
	snprintf(old, sizeof(old), "%s/%s%s", dir, name, PINS_OLD_SUFFIX);
	if (unlink(old))
		pr_warn("cannot remove '%s' after the move: %s\n", old, strerror(errno));
	pr_info("%s: %ld buckets moved into a map of %u entries\n", name, n,
		bpf_map__max_entries(m));
	return 0;
}

int pins_finish(struct bpf_object *obj, const char *dir, struct pins_plan *plan)
{
	const struct bpf_map *lm = bpf_object__find_map_by_name(obj, PINS_LAYOUT_NAME);
	struct ll_layout l = {.version = LL_LAYOUT_VERSION};
	__u32 k = 0;
	int err = 0;

	for (size_t i = 0; !err && i < plan->n_moves; i++)
		err = move_buckets(obj, dir, plan->moves[i].name, plan->moves[i].old_fd);
	snprintf(l.agent_build, sizeof(l.agent_build), "%s", LL_VERSION);
	if (!err && plan->stamp && (!lm || bpf_map_update_elem(bpf_map__fd(lm), &k, &l, BPF_ANY))) {
		err = lm ? -errno : -ENOENT;
		pr_warn("cannot record the pin layout in '%s/%s': %s\n", dir, PINS_LAYOUT_NAME,
			strerror(-err));
	}
	pins_plan_free(plan);
	return err;
}

void pins_plan_free(struct pins_plan *plan)
{
	for (size_t i = 0; i < plan->n_moves; i++)
		if (plan->moves[i].old_fd >= 0)
			close(plan->moves[i].old_fd);
	plan->n_moves = 0;
}

int pins_readable(const char *dir)
{
	LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = dir);
	struct leaseline_bpf *skel = leaseline_bpf__open_opts(&oo);
	struct survey *s = calloc(1, sizeof(*s));
	int err = !skel ? -errno : !s ? -ENOMEM : 0;

	if (!err)
		err = survey_take(skel->obj, dir, s);
	if (!err && s->n_found)
		err = check_layout(s, false);
	if (s)
		survey_free(s);
	free(s);
	leaseline_bpf__destroy(skel);
	return err;
}
