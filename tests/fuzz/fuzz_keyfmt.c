// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: keys and deny hints as text (user/lib/keyfmt.c), on
 * any key bytes (any family, protocol, ports, padding) in every key mode
 * and prefix. What keyfmt.h promises, checked:
 *  - every key fits KEYFMT_LEN ("room for the longest key"), and the text
 *    is printable ASCII (it goes to terminals: `top`, `usage`, the ledger);
 *  - an address key (src-ip, dst-ip) of family 4 or 6 reads back: the text
 *    before "/" is the address (inet_pton), the number after it the prefix,
 *    present exactly when the prefix is shorter than the family's length
 *    (0 meaning the full length, as the callers use it);
 *  - a flow key names its protocol first and its two ends around " -> ";
 *  - a deny hint's wait never runs past the end of its rounding step, and
 *    its text is printable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "lib/keyfmt.h"

static void check_text(const char *s, int n)
{
	if (n < 0 || n >= KEYFMT_LEN || strlen(s) != (size_t)n)
		abort(); /* cut, or longer than keyfmt.h promises */
	for (int i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			abort();
}

static void check_addr(const struct ll_key_id *k, uint8_t plen, const char *s)
{
	uint8_t full = k->family == 4 ? 32 : 128, got[16];
	const char *slash = strchr(s, '/');
	char a[INET6_ADDRSTRLEN];
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);

	if (alen >= sizeof(a))
		abort();
	memcpy(a, s, alen);
	a[alen] = '\0';
	if (inet_pton(k->family == 4 ? AF_INET : AF_INET6, a, got) != 1)
		abort(); /* an address text that does not parse back */
	if (memcmp(got, k->family == 4 ? (const void *)&k->addr[3] : (const void *)k->addr,
		   k->family == 4 ? 4 : 16))
		abort(); /* ... or parses to another address */
	if ((plen && plen < full) != (slash != NULL))
		abort(); /* a prefix shown when it is the full length, or hidden when shorter */
	if (slash && strtoul(slash + 1, NULL, 10) != plen)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ll_key_id k;
	char buf[KEYFMT_LEN], proto[8];
	uint8_t p4, p6;
	uint64_t hint, now;
	int n;

	if (size < sizeof(k) + 2 + 17)
		return 0;
	memcpy(&k, data, sizeof(k));
	p4 = data[sizeof(k)];
	p6 = data[sizeof(k) + 1];
	memcpy(&hint, data + sizeof(k) + 2, 8);
	memcpy(&now, data + sizeof(k) + 10, 8);
	for (uint8_t mode = 0; mode <= LL_KEY_FLOW + 1; mode++) {
		n = keyfmt_key(&k, mode, p4, p6, buf, sizeof(buf));
		check_text(buf, n);
		if (k.family == LL_OVERFLOW_FAMILY) {
			if (strcmp(buf, "(overflow)"))
				abort();
			continue;
		}
		if ((mode == LL_KEY_SRC_IP || mode == LL_KEY_DST_IP) &&
		    (k.family == 4 || k.family == 6) && (k.family == 4 ? p4 <= 32 : p6 <= 128))
			check_addr(&k, k.family == 4 ? p4 : p6, buf);
		if (mode == LL_KEY_FLOW) {
			const char *pn = keyfmt_proto(k.proto, proto, sizeof(proto));

			if (strncmp(buf, pn, strlen(pn)) || buf[strlen(pn)] != ' ' ||
			    !strstr(buf, " -> "))
				abort();
		}
	}
	/* A short buffer: cut, never overrun (ASan), always terminated. */
	n = keyfmt_key(&k, LL_KEY_FLOW, p4, p6, buf, data[sizeof(k) + 18 - 1] % 16 + 1);
	if (n < 0 || strlen(buf) > (size_t)(data[sizeof(k) + 18 - 1] % 16))
		abort();
	{
		struct keyfmt_retry r = keyfmt_retry(hint, data[size - 1] & 1, now);
		const uint64_t step = LL_HINT_CLASS_MASK + 1;

		if (r.state == KEYFMT_RETRY_WAIT &&
		    (r.wait_ns == 0 || r.wait_ns > step + (hint & ~LL_HINT_CLASS_MASK) - now))
			abort();
		if (r.state == KEYFMT_RETRY_WAIT && r.wait_ns > step &&
		    now >= (hint & ~LL_HINT_CLASS_MASK))
			abort(); /* longer than the rest of the step the hint was rounded to */
		n = keyfmt_retry_str(&r, buf, sizeof(buf));
		check_text(buf, n);
	}
	return 0;
}
