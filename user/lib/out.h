/* SPDX-License-Identifier: MIT */
/*
 * One code path for text and JSON output, in the manner of iproute2's
 * json_print: callers describe objects, arrays and fields once; the printer
 * renders indented "key: value" text for people or one JSON document.
 */
#ifndef LEASELINE_LIB_OUT_H
#define LEASELINE_LIB_OUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define OUT_MAX_DEPTH 16

struct out {
	FILE *f;
	bool json;
	int depth;
	bool first[OUT_MAX_DEPTH]; /* no comma needed yet at this depth */
	bool in_array[OUT_MAX_DEPTH];
	bool inline_next; /* text: the next member follows a "- " on the same line */
};

void out_init(struct out *o, FILE *f, bool json);
void out_finish(struct out *o);
/* key is ignored inside arrays; NULL for the top-level object */
void out_obj_begin(struct out *o, const char *key);
void out_obj_end(struct out *o);
void out_arr_begin(struct out *o, const char *key);
void out_arr_end(struct out *o);
void out_str(struct out *o, const char *key, const char *val);
void out_u64(struct out *o, const char *key, uint64_t val);
void out_f64(struct out *o, const char *key, double val);
void out_bool(struct out *o, const char *key, bool val);

#endif /* LEASELINE_LIB_OUT_H */
