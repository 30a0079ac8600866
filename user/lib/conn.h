/* SPDX-License-Identifier: MIT */
/*
 * A non-blocking TCP connection carrying wire frames: buffered output that
 * never blocks the caller's loop, input decoded frame by frame with the
 * strict decoder. Shared by the coordinator and the agent.
 */
#ifndef LEASELINE_CONN_H
#define LEASELINE_CONN_H

#include <stddef.h>
#include <stdint.h>
#include "net.h"
#include "wire.h"

/* Output a slow peer may leave unsent before it is cut off. */
#define CONN_MAX_OUT (4 * (WIRE_HDR_LEN + WIRE_MAX_PAYLOAD))

/* Buffers grow with what is in flight and shrink back when drained, so an
 * idle connection costs a few hundred bytes, not a maximal frame.
 */
struct conn {
	int fd;
	uint8_t *in;
	size_t in_len, in_cap;
	uint8_t *out;
	size_t out_len, out_cap;
};

void conn_init(struct conn *c, int fd);
void conn_close(struct conn *c);
/* Encode and queue m, then flush what the socket takes. 0 or negative errno. */
int conn_send(struct conn *c, const struct wire_msg *m);
/* Write queued output; 0 when all sent or the socket is full, else -errno. */
int conn_flush(struct conn *c);
/* Read what is available; 0, -ECONNRESET at EOF, or -errno. */
int conn_read(struct conn *c);
/* Next complete frame: 1 and *m filled, 0 if none yet, -EPROTO. */
int conn_next(struct conn *c, struct wire_msg *m);

#endif /* LEASELINE_CONN_H */
