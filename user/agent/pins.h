/* SPDX-License-Identifier: MIT */
/*
 * The pin directory as a whole: one agent at a time holds it (a flock on the
 * directory), and its maps follow one layout (ll_layout, LL_LAYOUT_VERSION)
 * that an agent checks before it adopts them: pins of another layout, an
 * incomplete set, or a map whose shape or BTF types differ from this build's
 * are refused with what to do, never re-created beside the others (which
 * would start every key with a fresh bucket). The one change it carries
 * out itself is a new size of the bucket maps (max-keys, max-flow-keys):
 * their buckets are copied into maps of the new size, when no program uses
 * the old ones any more. Functions return 0 or a negative errno and say
 * why in a log line.
 */
#ifndef LEASELINE_AGENT_PINS_H
#define LEASELINE_AGENT_PINS_H

#include <stdbool.h>
#include <stddef.h>

struct bpf_object;

/* Take the pin directory dir for this process (until it exits or
 * pins_unlock): *fd holds the lock. -EBUSY when another process holds it,
 * said with its pid, command line and start time.
 */
int pins_lock(const char *dir, int *fd);
/* Before anything is made in dir: refused (logged, a negative errno) when
 * it is a symlink, not a directory, another user's, writable by its group
 * or others, or under a directory others could swap it from (see pins.c).
 * A dir not made yet passes: the agent makes it 0700.
 */
int pins_dir_audit(const char *dir);
void pins_unlock(int *fd);

#define PINS_MAX_MOVES 4

/* What pins_prepare found and pins_finish completes. */
struct pins_plan {
	bool stamp; /* record this build's layout in ll_layout after the load */
	size_t n_moves;
	struct {
		char name[32]; /* the map */
		int old_fd;    /* the old map, its pin renamed to NAME-old */
	} moves[PINS_MAX_MOVES];
};

/* Before the object obj (opened with pin_root_path dir, sizes set) is
 * loaded: check the pins under dir against it. A bucket map whose size
 * alone differs is set aside (its pin renamed NAME-old) for pins_finish to
 * copy. A migration an earlier run left half done is rolled back first.
 */
int pins_prepare(struct bpf_object *obj, const char *dir, struct pins_plan *plan);
/* After the load: copy the set-aside buckets into their new maps, drop the
 * old pins, record the layout. pins_plan_free in every case.
 */
int pins_finish(struct bpf_object *obj, const char *dir, struct pins_plan *plan);
void pins_plan_free(struct pins_plan *plan);

/* For the commands that read pins (status, top, reset-fence): the pins
 * under dir are of this build's layout (sizes of tables aside).
 */
int pins_readable(const char *dir);

#endif /* LEASELINE_AGENT_PINS_H */
