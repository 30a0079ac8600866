// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: the wire decoder (user/lib/wire.c) on any bytes. It
 * must never read past the input, and every frame it accepts must encode
 * back to the very same bytes (the decoder accepts exactly what the encoder
 * produces, docs/protocol.md).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wire_msg m;
	static uint8_t out[WIRE_HDR_LEN + WIRE_MAX_PAYLOAD];
	/* A copy of exactly size bytes: ASan sees any read past the end. */
	uint8_t *in = malloc(size ? size : 1);
	int n, e;

	if (!in)
		return 0;
	memcpy(in, data, size);
	n = wire_decode(in, size, &m);
	if (n > 0) {
		e = wire_encode_v(&m, m.version, out, sizeof(out)); /* in its own version */
		if (e != n || memcmp(out, in, (size_t)n))
			abort(); /* accepted a frame the encoder would not produce */
	}
	free(in);
	return 0;
}
