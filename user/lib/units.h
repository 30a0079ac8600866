/* SPDX-License-Identifier: MIT */
/*
 * Parsing of the scalar forms used in configuration: counts with k/M/G
 * suffixes (decimal, 1k = 1000), durations (ns, us, ms, s, m), IP prefixes
 * and port ranges. Pure functions, no I/O; overflow is an error, never a wrap.
 */
#ifndef LEASELINE_LIB_UNITS_H
#define LEASELINE_LIB_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* "1000", "10k", "2.5M", "1G": >= 0, result must be an integer and fit in
 * uint64. Returns 0 or -EINVAL (bad form) / -ERANGE (too large).
 */
int units_parse_count(const char *s, uint64_t *out);
/* "2s", "500ms", "250us", "100ns", "1m"; a bare number is refused.
 * Fractions are allowed when the result is a whole number of ns ("1.5s").
 * Returns 0, -EINVAL or -ERANGE like units_parse_count.
 */
int units_parse_duration(const char *s, uint64_t *out_ns);
/* "198.18.0.0/15", "2001:db8::/32", or a bare address (full-length prefix).
 * addr gets 16 bytes, IPv4 in the first 4; host bits must be zero.
 * Returns 0, -EINVAL (bad form), -ERANGE (length beyond 32/128) or -EDOM
 * (host bits set; the outputs are then filled, unmasked, so that a caller
 * can suggest the masked prefix).
 */
int units_parse_prefix(const char *s, uint8_t *family, uint8_t addr[16], uint8_t *plen);
/* "53" or "1000-2000" (lo <= hi, 0-65535). Returns 0, -EINVAL (bad form or
 * lo > hi) or -ERANGE (a port above 65535).
 */
int units_parse_port_range(const char *s, uint16_t *lo, uint16_t *hi);

/* Plain decimal digits only ("42"): no sign, suffix or space.
 * Returns 0, -EINVAL or -ERANGE.
 */
int units_parse_uint(const char *s, uint64_t *out);
/* Zero the host bits of addr beyond plen (family 4: first 4 bytes only). */
void units_prefix_mask(uint8_t family, uint8_t addr[16], uint8_t plen);
/* A prefix as the kernel's LPM tries hold it (ll_overrides, ll_sets): IPv4
 * v4-mapped (::ffff:a.b.c.d), IPv6 as is. Writes out[16]; returns the
 * prefix's length in those 128 bits.
 */
/* Order of two prefixes: family, then address, then length (qsort, and
 * 0 for the same prefix twice).
 */
int units_prefix_cmp(uint8_t fa, const uint8_t a[16], uint8_t pa, uint8_t fb, const uint8_t b[16],
		     uint8_t pb);
uint32_t units_prefix_v6map(uint8_t family, const uint8_t addr[16], uint8_t plen, uint8_t out[16]);
/* Shortest exact form that units_parse_count/_duration read back to the same
 * value ("100G", "1500", "500ms"). Return snprintf's result.
 */
int units_format_count(uint64_t v, char *buf, size_t size);
int units_format_duration(uint64_t ns, char *buf, size_t size);

#endif /* LEASELINE_LIB_UNITS_H */
