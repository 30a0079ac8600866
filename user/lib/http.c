// SPDX-License-Identifier: MIT
/*
 * A minimal HTTP/1.0 responder for the metrics endpoints of both daemons,
 * polled from their event loops. Invariants: one request per connection, a
 * bounded read, and a client that does not send or read in time is cut
 * off, so a request never holds the loop longer than HTTP_TIMEOUT_MS.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "http.h"
#include "net.h"

#define HTTP_REQ_MAX	2048 /* enough for a GET line and headers */
#define HTTP_TIMEOUT_MS 200

int http_listen(const char *addr)
{
	return net_listen(addr);
}

static void respond(int c, http_writer write, void *arg)
{
	struct timeval tv = {.tv_usec = HTTP_TIMEOUT_MS * 1000};
	char req[HTTP_REQ_MAX], *body = NULL, hdr[160];
	size_t blen = 0;
	ssize_t n;
	FILE *f;

	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	n = recv(c, req, sizeof(req) - 1, 0);
	if (n <= 0)
		return;
	req[n] = '\0';
	if (strncmp(req, "GET /metrics", 12) != 0) {
		const char *nf = "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";

		send(c, nf, strlen(nf), MSG_NOSIGNAL);
		return;
	}
	f = open_memstream(&body, &blen);
	if (!f)
		return;
	write(f, arg);
	fclose(f);
	snprintf(hdr, sizeof(hdr),
		 "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 blen);
	if (send(c, hdr, strlen(hdr), MSG_NOSIGNAL) > 0)
		send(c, body, blen, MSG_NOSIGNAL);
	free(body);
}

void http_serve(int listen_fd, http_writer write, void *arg)
{
	int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return;
	/* The listening socket is non-blocking; the connection must not be. */
	respond(c, write, arg);
	close(c);
}
