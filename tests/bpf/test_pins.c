// SPDX-License-Identifier: MIT
/*
 * The pin layout on the real kernel (pins.h; tests/net/test_pins.sh runs the
 * same with agents on a veth): what dp_open adopts, refuses and moves.
 *  - a map of the right sizes whose BTF differs field by field is refused,
 *    nothing re-created;
 *  - a new max-keys moves every bucket, unchanged, into maps of the new
 *    size when no program uses them, and is refused while one does;
 *  - a move an earlier run left half done is rolled back and done again;
 *  - pins without ll_layout that match are adopted and stamped;
 *  - a symlink is never taken for a pin (fs_pin_get), at the look or at the
 *    load, and a restart runs on the very maps that were pinned.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>

#include <bpf/btf.h>

#include "bpf/harness.h"
#include "agent/pins.h"
#include "lib/fs.h"

#define POLICY                                                                                     \
	"version: 1\n"                                                                             \
	"limits:\n"                                                                                \
	"  - {name: l, key: src-ip, rate: 1, burst: 5}\n"                                          \
	"rules:\n"                                                                                 \
	"  - {name: all, limits: [l]}\n"

static char dir[64];

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static bool pinned(const char *name)
{
	char p[128];
	struct stat sb;

	path_of(p, sizeof(p), name);
	return !stat(p, &sb);
}

static int setup(void **state)
{
	int rc = hx_setup(state); /* for the privilege probe and the private bpffs */

	if (rc || !*state)
		return rc;
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/ll-pins-%d", (int)getpid());
	return mkdir(dir, 0700) && errno != EEXIST ? -1 : 0;
}

static int teardown(void **state)
{
	char p[128 + 256];
	struct dirent *e;
	DIR *d = opendir(dir);

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(dir);
	return hx_teardown(state);
}

/* A pinned datapath of max_keys buckets, in pfx (its dp), or a negative errno. */
static int open_pinned(struct fx *pfx, uint32_t max_keys)
{
	struct dp_opts o = {.pin_dir = dir, .max_keys = max_keys};

	memset(pfx, 0, sizeof(*pfx));
	int err = hx_dp_open_quiet(&pfx->dp, &o);

	pfx->ncpus = pfx->dp.ncpus;
	return err;
}

/* Pinned, policy applied, one key charged 3 of its 5 tokens; *b its bucket. */
static void charged(struct fx *pfx, struct ll_key *k, struct ll_bucket *b)
{
	struct ll_limit_cfg cfg;
	struct pkt p;

	assert_int_equal(open_pinned(pfx, HX_MAX_KEYS), 0);
	assert_int_equal(hx_apply(pfx, POLICY), 0);
	hx_udp4(&p, "198.18.0.10", "198.18.0.2", 1, 53, 0);
	assert_int_equal(hx_send(pfx, &p, 3, NULL), 3);
	assert_int_equal(hx_limit(pfx, "l", &cfg), 0);
	*k = hx_key_addr(cfg.uid, 4, "198.18.0.10", 32);
	assert_int_equal(hx_bucket(pfx, k, b), 0);
}

static void assert_same_bucket(struct fx *pfx, const struct ll_key *k, const struct ll_bucket *was)
{
	struct ll_bucket b;

	assert_int_equal(hx_bucket(pfx, k, &b), 0);
	assert_int_equal(b.tokens, was->tokens);
	assert_int_equal(b.last_ns, was->last_ns);
	assert_int_equal(b.spent, was->spent);
	assert_int_equal(b.gen, was->gen);
}

static uint32_t pinned_entries(const char *name)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	char p[128];
	int fd;

	path_of(p, sizeof(p), name);
	fd = bpf_obj_get(p);
	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len))
		info.max_entries = 0;
	if (fd >= 0)
		close(fd);
	return info.max_entries;
}

/* A new max-keys: refused while a program uses the buckets, moved when none. */
static void test_move_buckets(void **state)
{
	struct fx pfx, user;
	struct ll_key k;
	struct ll_bucket was;

	FX(state);
	charged(&pfx, &k, &was);
	/* pfx's program still uses ll_buckets: no move. */
	assert_int_equal(open_pinned(&user, 2 * HX_MAX_KEYS), -EBUSY);
	assert_false(pinned("ll_buckets-old"));
	assert_int_equal(pinned_entries("ll_buckets"), HX_MAX_KEYS + LL_MAX_LIMITS);
	dp_close(&pfx.dp);

	assert_int_equal(open_pinned(&pfx, 2 * HX_MAX_KEYS), 0);
	assert_int_equal(pinned_entries("ll_buckets"), 2 * HX_MAX_KEYS + LL_MAX_LIMITS);
	assert_int_equal(pinned_entries("ll_flow_buckets"), 2 * HX_MAX_KEYS + LL_MAX_LIMITS);
	assert_false(pinned("ll_buckets-old"));
	assert_same_bucket(&pfx, &k, &was);
	/* And the key goes on from there: 2 tokens left, not a fresh 5. */
	assert_int_equal(hx_apply(&pfx, POLICY), 0);
	{
		struct pkt p;

		hx_udp4(&p, "198.18.0.10", "198.18.0.2", 1, 53, 0);
		assert_in_range(hx_send(&pfx, &p, 5, NULL), 2, 3);
	}
	dp_close(&pfx.dp);
}

/* A move interrupted after the new map was pinned: the next open puts the
 * old one back and moves again; nothing is lost.
 */
static void test_interrupted_move_rolled_back(void **state)
{
	char p[128], old[128];
	struct fx pfx;
	struct ll_key k;
	struct ll_bucket was;
	int partial;

	FX(state);
	charged(&pfx, &k, &was);
	dp_close(&pfx.dp);
	path_of(p, sizeof(p), "ll_buckets");
	path_of(old, sizeof(old), "ll_buckets-old");
	assert_int_equal(rename(p, old), 0);
	/* The half-made new map: right shape, new size, empty. */
	partial = bpf_map_create(BPF_MAP_TYPE_HASH, "ll_buckets", sizeof(struct ll_key),
				 sizeof(struct ll_bucket), 3 * HX_MAX_KEYS, NULL);
	assert_true(partial >= 0);
	assert_int_equal(bpf_obj_pin(partial, p), 0);
	close(partial);

	assert_int_equal(open_pinned(&pfx, 3 * HX_MAX_KEYS), 0);
	assert_false(pinned("ll_buckets-old"));
	assert_int_equal(pinned_entries("ll_buckets"), 3 * HX_MAX_KEYS + LL_MAX_LIMITS);
	assert_same_bucket(&pfx, &k, &was);
	dp_close(&pfx.dp);
}

/* ll_fence of the same sizes whose BTF names another field: refused, left
 * as it is, nothing re-created.
 */
static void test_btf_difference_refused(void **state)
{
	LIBBPF_OPTS(bpf_map_create_opts, mo);
	struct fx pfx;
	struct ll_key k;
	struct ll_bucket was;
	struct btf *btf;
	char p[128];
	int u32, u8, arr, st, fd, btf_fd;

	FX(state);
	charged(&pfx, &k, &was);
	dp_close(&pfx.dp);

	btf = btf__new_empty();
	assert_non_null(btf);
	u32 = btf__add_int(btf, "unsigned int", 4, 0);
	u8 = btf__add_int(btf, "unsigned char", 1, 0);
	arr = btf__add_array(btf, u32, u8, sizeof(struct ll_fence));
	st = btf__add_struct(btf, "ll_fence", sizeof(struct ll_fence));
	assert_int_equal(btf__add_field(btf, "not_what_it_was", arr, 0, 0), 0);
	assert_true(u32 > 0 && u8 > 0 && arr > 0 && st > 0);
	assert_int_equal(btf__load_into_kernel(btf), 0);
	btf_fd = btf__fd(btf);
	mo.btf_fd = (__u32)btf_fd;
	mo.btf_key_type_id = (__u32)u32;
	mo.btf_value_type_id = (__u32)st;
	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ll_fence", 4, sizeof(struct ll_fence), 1, &mo);
	assert_true(fd >= 0);
	path_of(p, sizeof(p), "ll_fence");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(bpf_obj_pin(fd, p), 0);

	assert_int_equal(open_pinned(&pfx, HX_MAX_KEYS), -EPROTO);
	{
		int again = bpf_obj_get(p);
		struct bpf_map_info a = {}, b = {};
		__u32 la = sizeof(a), lb = sizeof(b);

		assert_true(again >= 0);
		bpf_obj_get_info_by_fd(fd, &a, &la);
		bpf_obj_get_info_by_fd(again, &b, &lb);
		assert_int_equal(a.id, b.id); /* the same (fake) map: not replaced */
		close(again);
	}
	close(fd);
	btf__free(btf);
}

/* No ll_layout, every map as this build's: adopted, and stamped. */
static void test_unrecorded_layout_adopted(void **state)
{
	struct ll_layout l = {};
	struct fx pfx;
	struct ll_key k;
	struct ll_bucket was;
	char p[128];
	__u32 key = 0;
	int fd;

	FX(state);
	charged(&pfx, &k, &was);
	dp_close(&pfx.dp);
	path_of(p, sizeof(p), "ll_layout");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(open_pinned(&pfx, HX_MAX_KEYS), 0);
	assert_same_bucket(&pfx, &k, &was);
	fd = bpf_obj_get(p);
	assert_true(fd >= 0);
	assert_int_equal(bpf_map_lookup_elem(fd, &key, &l), 0);
	assert_int_equal(l.version, LL_LAYOUT_VERSION);
	assert_true(l.agent_build[0] != '\0');
	close(fd);
	dp_close(&pfx.dp);
}

/* Run the leaseline binary's subcommand on the pins; its output in buf. */
static int run_cmd(const char *args, char *buf, size_t len)
{
	const char *bin = getenv("LL_BIN") ? getenv("LL_BIN") : "build/leaseline";
	char cmd[512];
	size_t n;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s %s --pin-dir %s 2>&1", bin, args, dir);
	f = popen(cmd, "r");
	assert_non_null(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	return pclose(f);
}

/* Issue 25, K: status and top read strings from pinned maps, which anyone
 * with access to the pins can write: names and the refusal reason without
 * a NUL and with terminal escapes, a rule count past the table. Both
 * commands run, print no escape byte and read nothing out of bounds (the
 * san suite runs this binary under ASan too).
 */
static void test_hostile_pins_for_status_and_top(void **state)
{
	struct fx pfx;
	struct ll_key k;
	struct ll_bucket was;
	struct ll_policy *pol = calloc(1, sizeof(*pol));
	struct ll_state st;
	char *out = malloc(1 << 16);
	__u32 zero = 0, slot;
	int rc;

	FX(state);
	assert_non_null(pol);
	assert_non_null(out);
	charged(&pfx, &k, &was);
	assert_int_equal(bpf_map_lookup_elem(pfx.dp.state_fd, &zero, &st), 0);
	memset(st.refused_why, 0x1b, sizeof(st.refused_why));
	st.refused_ns = st.applied_ns + 1;
	assert_int_equal(bpf_map_update_elem(pfx.dp.state_fd, &zero, &st, BPF_ANY), 0);
	slot = st.active_slot & (LL_POLICY_SLOTS - 1);
	assert_int_equal(bpf_map_lookup_elem(pfx.dp.policy_fd, &slot, pol), 0);
	memset(pol->limits[0].name, 0x1b, sizeof(pol->limits[0].name));
	memset(pol->rules[0].name, 0x9b, sizeof(pol->rules[0].name));
	pol->n_rules = 0xffffffffu;
	assert_int_equal(bpf_map_update_elem(pfx.dp.policy_fd, &slot, pol, BPF_ANY), 0);

	rc = run_cmd("status", out, 1 << 16);
	assert_int_equal(rc, 0);
	assert_null(strchr(out, 0x1b));
	assert_null(strchr(out, (char)0x9b));
	assert_non_null(strstr(out, "????"));
	rc = run_cmd("status -j", out, 1 << 16);
	assert_int_equal(rc, 0);
	assert_null(strchr(out, 0x1b));
	rc = run_cmd("top", out, 1 << 16);
	assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) <= 1); /* ran and exited, no signal */
	assert_null(strchr(out, 0x1b));
	dp_close(&pfx.dp);
	free(pol);
	free(out);
}

static uint32_t map_id(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);

	return fd >= 0 && !bpf_obj_get_info_by_fd(fd, &info, &len) ? info.id : 0;
}

/* fs_pin_get opens what it looked at: a pin, never a symlink to one (which
 * bpf_obj_get follows). An agent restarted over pins where one map is a
 * symlink (to another map of the same shape, pinned elsewhere) refuses the
 * whole set; with the real pin back, it loads on the very maps pinned
 * (same ids: libbpf is handed the fds looked at, it opens no path again).
 */
static void test_symlinked_pin_refused(void **state)
{
	struct fx pfx;
	struct ll_key k;
	struct ll_bucket was;
	char real[128], aside[128], fake[160];
	uint32_t state_id;
	int fd;

	FX(state);
	charged(&pfx, &k, &was);
	state_id = map_id(pfx.dp.state_fd);
	dp_close(&pfx.dp);

	path_of(real, sizeof(real), "ll_state");
	fd = fs_pin_get(real);
	assert_true(fd >= 0);
	assert_int_equal(map_id(fd), state_id);
	close(fd);
	path_of(fake, sizeof(fake), "nothing-here");
	assert_int_equal(fs_pin_get(fake), -ENOENT);

	/* ll_state set aside, a symlink to it in its place. */
	path_of(aside, sizeof(aside), "aside");
	assert_int_equal(rename(real, aside), 0);
	assert_int_equal(symlink(aside, real), 0);
	assert_int_equal(fs_pin_get(real), -ELOOP);
	assert_true(open_pinned(&pfx, HX_MAX_KEYS) < 0);
	{
		struct stat sb;

		assert_int_equal(lstat(real, &sb), 0);
		assert_true(S_ISLNK(sb.st_mode)); /* left as it was, nothing pinned there */
	}
	assert_int_equal(unlink(real), 0);
	assert_int_equal(rename(aside, real), 0);

	assert_int_equal(open_pinned(&pfx, HX_MAX_KEYS), 0);
	assert_int_equal(map_id(pfx.dp.state_fd), state_id);
	assert_same_bucket(&pfx, &k, &was);
	dp_close(&pfx.dp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_move_buckets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_interrupted_move_rolled_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_btf_difference_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unrecorded_layout_adopted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hostile_pins_for_status_and_top, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_symlinked_pin_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
