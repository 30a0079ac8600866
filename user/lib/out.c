// SPDX-License-Identifier: MIT
/*
 * Text/JSON printer (see out.h). JSON strings are escaped; text mode
 * indents two spaces per level and prints arrays as "- " items.
 */
#include <string.h>

#include "lib/out.h"

void out_init(struct out *o, FILE *f, bool json)
{
	memset(o, 0, sizeof(*o));
	o->f = f;
	o->json = json;
	o->first[0] = true;
}

void out_finish(struct out *o)
{
	if (o->json)
		fputc('\n', o->f);
	fflush(o->f);
}

static void json_escaped(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void indent(struct out *o)
{
	for (int i = 1; i < o->depth; i++)
		fputs("  ", o->f);
}

/* Start a member: comma and key in JSON, indentation and "key: " in text. */
static void member(struct out *o, const char *key, bool container)
{
	bool arr = o->in_array[o->depth];

	if (o->json) {
		if (!o->first[o->depth])
			fputc(',', o->f);
		o->first[o->depth] = false;
		if (key && !arr) {
			json_escaped(o->f, key);
			fputc(':', o->f);
		}
		return;
	}
	if (o->depth == 0)
		return;
	if (o->inline_next)
		o->inline_next = false;
	else
		indent(o);
	if (arr) {
		fputs("- ", o->f);
		o->inline_next = container; /* an item's first field goes after the dash */
	}
	if (key && !arr)
		fprintf(o->f, container ? "%s:\n" : "%s: ", key);
}

static void open_level(struct out *o, char c, bool array)
{
	if (o->json)
		fputc(c, o->f);
	if (o->depth < OUT_MAX_DEPTH - 1)
		o->depth++;
	o->first[o->depth] = true;
	o->in_array[o->depth] = array;
}

static void close_level(struct out *o, char c)
{
	if (o->depth > 0)
		o->depth--;
	if (o->json)
		fputc(c, o->f);
}

void out_obj_begin(struct out *o, const char *key)
{
	member(o, key, true);
	open_level(o, '{', false);
}

void out_obj_end(struct out *o)
{
	close_level(o, '}');
}

void out_arr_begin(struct out *o, const char *key)
{
	member(o, key, true);
	open_level(o, '[', true);
}

void out_arr_end(struct out *o)
{
	close_level(o, ']');
}

void out_str(struct out *o, const char *key, const char *val)
{
	member(o, key, false);
	if (o->json)
		json_escaped(o->f, val);
	else
		fprintf(o->f, "%s\n", val);
}

void out_u64(struct out *o, const char *key, uint64_t val)
{
	member(o, key, false);
	fprintf(o->f, o->json ? "%llu" : "%llu\n", (unsigned long long)val);
}

void out_f64(struct out *o, const char *key, double val)
{
	member(o, key, false);
	fprintf(o->f, o->json ? "%.9g" : "%.9g\n", val);
}

void out_bool(struct out *o, const char *key, bool val)
{
	member(o, key, false);
	fprintf(o->f, o->json ? "%s" : "%s\n", val ? "true" : "false");
}
