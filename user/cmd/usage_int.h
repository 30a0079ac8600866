/* SPDX-License-Identifier: MIT */
/*
 * What the files of `leaseline usage` share and nothing else includes:
 * usage_cmd.c (the ledger by period, and reconciled with the contract)
 * and usage_live.c (reconciled with a gateway's live counters, --pin-dir).
 */
#ifndef LEASELINE_CMD_USAGE_INT_H
#define LEASELINE_CMD_USAGE_INT_H

#include "lib/config.h"
#include "cmd/usage_cmd.h"
#include "ll_types.h"

/* The JSON names of the meter classes, enum ll_meter_class. */
extern const char *const usage_class_names[LL_METER_CLASSES];

/* The limit of pol named name, or NULL. */
const struct cfg_limit *usage_policy_limit(const struct cfg_policy *pol, const char *name);

/* --reconcile --pin-dir: the ledger's key marks of the gateway's counters
 * identity against its ll_meter (pol may have no limits: --ledger alone).
 * 0: equal; 1: differences listed; or a negative errno.
 */
int usage_live(const struct usage_opts *o, const struct cfg_policy *pol, const char *path);

#endif /* LEASELINE_CMD_USAGE_INT_H */
