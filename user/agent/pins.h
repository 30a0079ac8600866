/* SPDX-License-Identifier: MIT */
/*
 * The pin directory as a whole: one agent at a time holds it (a flock on the
 * directory). Functions return 0 or a negative errno and say why in a log
 * line.
 */
#ifndef LEASELINE_PINS_H
#define LEASELINE_PINS_H

/* Take the pin directory dir for this process (until it exits or
 * pins_unlock): *fd holds the lock. -EBUSY when another process holds it,
 * said with its pid, command line and start time.
 */
int pins_lock(const char *dir, int *fd);
void pins_unlock(int *fd);

#endif /* LEASELINE_PINS_H */
