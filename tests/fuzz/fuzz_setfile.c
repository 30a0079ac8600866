// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: the files a policy names beside itself, as the agent
 * and the coordinator read them: prefix set files (user/lib/sets.c, for
 * src-set/dst-set matches, written to the kernel by agent/set_map.c) and
 * override files (user/lib/overrides.c: by address for ovr_map.c and the
 * coordinator's pinned hot keys, by port for dst-port limits).
 *
 * The input: byte 0 the limit's prefix-v4 (0-32), byte 1 its prefix-v6
 * (0-128), byte 2 the rate bound's scale; the rest is the file, written
 * once and read by every parser. Whatever the bytes: no crash, leak or UB;
 * a file taken keeps what the headers promise: entries sorted, each once,
 * of family 4 or 6 (0: a block of ports), host bits zero, no longer than
 * the family (an override no longer than the limit's prefix), contracts
 * within the bounds given, port blocks aligned and disjoint. A set taken
 * reads back the same: every prefix printed as keyfmt prints addresses
 * ("198.18.0.0/24", a bare address for the full length) and loaded again
 * gives the same set (set_digest), and an error names FILE:LINE.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "fuzz/fuzz_tmp.h"
#include "lib/keyfmt.h"
#include "lib/overrides.h"
#include "lib/sets.h"

/* Host bits of a prefix plen of family fam (bits 32 or 128) all zero. */
static int host_bits_zero(const uint8_t *a, unsigned bits, unsigned plen)
{
	for (unsigned b = plen; b < bits; b++)
		if (a[b / 8] & (0x80 >> (b % 8)))
			return 0;
	return 1;
}

static void check_error(const char *path, int rc, const struct cfg_err *e)
{
	if (rc == -EINVAL && strncmp(e->msg, path, strlen(path)))
		abort(); /* a refusal that does not name the file */
}

static void check_sets(const char *dir, const char *path)
{
	struct set_entry *v = NULL, *w = NULL;
	struct cfg_err e = {0};
	size_t n = 0, m = 0;
	char back[256];
	FILE *f;
	int rc = set_load(path, 4096, 0, &v, &n, &e);

	check_error(path, rc, &e);
	if (rc)
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned bits = v[i].family == 4 ? 32 : 128;

		if ((v[i].family != 4 && v[i].family != 6) || v[i].plen > bits ||
		    !host_bits_zero(v[i].addr, bits, v[i].plen))
			abort();
	}
	/* Printed as keyfmt prints addresses, and read again. */
	snprintf(back, sizeof(back), "%s/back.txt", dir);
	f = fopen(back, "w");
	if (!f)
		abort();
	for (size_t i = 0; i < n; i++) {
		__u32 a[4] = {0};
		char t[KEYFMT_LEN];

		if (v[i].family == 4) {
			a[2] = htonl(0xffff);
			memcpy(&a[3], v[i].addr, 4);
		} else {
			memcpy(a, v[i].addr, 16);
		}
		/* keyfmt_addr's plen 0 is the full length (its callers'); /0 by hand. */
		keyfmt_addr(v[i].family, a, v[i].plen, t, sizeof(t));
		fprintf(f, "%s%s\n", t, v[i].plen ? "" : "/0");
	}
	if (fclose(f))
		abort();
	rc = set_load(back, 4096, 0, &w, &m, &e);
	if (rc || m != n || set_digest(v, n) != set_digest(w, m))
		abort(); /* a set that does not read back as itself */
	free(v);
	free(w);
}

static void check_overrides(const char *path, uint8_t p4, uint8_t p6, uint64_t max_rate,
			    uint64_t max_burst)
{
	struct ovr_entry *v = NULL;
	struct cfg_err e = {0};
	size_t n = 0;
	int rc = ovr_load(path, p4, p6, max_rate, max_burst, &v, &n, &e);

	check_error(path, rc, &e);
	for (size_t i = 0; !rc && i < n; i++) {
		unsigned bits = v[i].family == 4 ? 32 : 128;

		if ((v[i].family != 4 && v[i].family != 6) ||
		    v[i].plen > (v[i].family == 4 ? p4 : p6) ||
		    !host_bits_zero(v[i].addr, bits, v[i].plen) || v[i].kind > OVR_DENY ||
		    (v[i].kind == OVR_RATE && (v[i].rate > max_rate || v[i].burst > max_burst)))
			abort();
		if (i && v[i - 1].family == v[i].family && v[i - 1].plen == v[i].plen &&
		    !memcmp(v[i - 1].addr, v[i].addr, 16))
			abort(); /* the same prefix twice */
	}
	free(v);
	rc = ovr_load_ports(path, max_rate, max_burst, &v, &n, &e);
	check_error(path, rc, &e);
	for (size_t i = 0; !rc && i < n; i++) {
		unsigned first = (unsigned)v[i].addr[0] << 8 | v[i].addr[1];
		unsigned size = v[i].plen <= 16 ? 1u << (16 - v[i].plen) : 0;

		if (v[i].family != 0 || !size || first % size || first < v[i].lo ||
		    first + size - 1 > v[i].hi || v[i].kind > OVR_DENY ||
		    (v[i].kind == OVR_RATE && (v[i].rate > max_rate || v[i].burst > max_burst)))
			abort(); /* a block not aligned, or outside its line's range */
	}
	free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[256];
	const char *dir = fuzz_dir("setfile");
	uint64_t max_rate, max_burst;
	uint8_t p4, p6;

	if (size < 3)
		return 0;
	p4 = data[0] % 33;
	p6 = data[1] % 129;
	max_rate = data[2] & 0x80 ? UINT64_MAX >> (data[2] & 63) : 1000000000000ull;
	max_burst = max_rate;
	if (!path[0])
		snprintf(path, sizeof(path), "%s/in.txt", dir);
	fuzz_write_file(dir, "in.txt", data + 3, size - 3);
	check_sets(dir, path);
	check_overrides(path, p4 ? p4 : 32, p6 ? p6 : 128, max_rate, max_burst);
	return 0;
}
