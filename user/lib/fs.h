/* SPDX-License-Identifier: MIT */
/*
 * Small file-system helpers shared by the agent and the coordinator.
 * Return 0 or a negative errno.
 */
#ifndef LEASELINE_LIB_FS_H
#define LEASELINE_LIB_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with mode for every directory created. */
int fs_mkdir_p(const char *dir, mode_t mode);
/* The whole file in a NUL-terminated malloc'd buffer; -EFBIG above max,
 * -EISDIR for a directory, -EINVAL for anything else that is not a regular
 * file (a FIFO, a device): never opened for blocking, never read.
 */
int fs_read_file(const char *path, size_t max, char **buf, size_t *len);

/* The inode of this process's network namespace (/proc/self/ns/net), 0 if
 * unknown: which namespace ifindexes belong to.
 */
uint64_t fs_netns_ino(void);

/* The BPF object pinned at path, never through a symlink: an fd, or a
 * negative errno (-ELOOP: path is a symlink, refused; -ENOENT: nothing
 * there). bpf_obj_get follows one, and libbpf 1.1 has no BPF_F_PATH_FD: the
 * pin is opened O_PATH|O_NOFOLLOW and got through /proc/self/fd, so what is
 * looked at is what is got, with no window between.
 */
int fs_pin_get(const char *path);

#endif /* LEASELINE_LIB_FS_H */
