/* SPDX-License-Identifier: MIT */
/*
 * What hotkeys.c and hotkeys_grant.c share; not for the rest of the
 * coordinator (hotkeys.h is its interface).
 */
#ifndef LEASELINE_COORD_HOTKEYS_INT_H
#define LEASELINE_COORD_HOTKEYS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coord/hotkeys.h"

#define HOTKEYS_FOREVER UINT64_MAX /* an entry's record: until superseded or the lease dies */

/* Set flag f of (key idx, holder hi), putting idx on list l if it was
 * clear. Out of memory, the flag stays clear (the caller's conservative
 * path): false.
 */
bool flag_set(struct hotkeys *t, struct hotkeys_list *l, uint32_t idx, size_t hi, uint8_t f);

#endif /* LEASELINE_COORD_HOTKEYS_INT_H */
