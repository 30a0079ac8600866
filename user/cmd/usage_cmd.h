/* SPDX-License-Identifier: MIT */
/*
 * `leaseline usage`: the usage ledger (usage_ledger.h) by period, limit and
 * holder as text, JSON or CSV; --reconcile compares it with the contract.
 */
#ifndef LEASELINE_CMD_USAGE_CMD_H
#define LEASELINE_CMD_USAGE_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include "coord/usage_ledger.h"

enum usage_format {
	USAGE_TEXT = 0,
	USAGE_JSON,
	USAGE_CSV,
};

struct usage_opts {
	const char *config; /* coord.yaml */
	enum uledger_period period;
	const char *limit, *holder;
	int64_t from, to; /* UTC seconds; 0: open */
	enum usage_format format;
	bool reconcile;
	bool keys;	 /* per key of metered per-key limits (--keys, or --key KEY) */
	const char *key; /* one key only, as printed ("198.18.0.1") */
	const char *ledger;  /* --ledger FILE: the ledger file (else coord.yaml's) */
	const char *pin_dir; /* --reconcile --pin-dir DIR: against the live ll_meter there */
	bool *json_printed;  /* set once the JSON document is out (exit 1 then is its verdict) */
};

/* 0: printed (reconcile: within the contract); 1: reconcile listed
 * differences, or a runtime failure (said on stderr); 2: configuration error.
 */
int usage_run(const struct usage_opts *o);

/* "2026-11-01", "2026-11-01T10", "2026-11-01T10:20", "2026-11-01T10:20:30Z"
 * (UTC) or "@SECONDS". 0 or -EINVAL.
 */
int usage_parse_time(const char *s, int64_t *out);

#endif /* LEASELINE_CMD_USAGE_CMD_H */
