/* SPDX-License-Identifier: MIT */
/*
 * TCP sockets from "host:port" or "[v6]:port" strings, shared by both
 * daemons and the metrics server. Functions return an fd or a negative errno.
 */
#ifndef LEASELINE_LIB_NET_H
#define LEASELINE_LIB_NET_H

#include <stddef.h>
#include <sys/socket.h>

/* "host:port" or "[v6]:port" (numeric port) to a socket address. */
int net_addr(const char *hostport, struct sockaddr_storage *sa, socklen_t *len);
/* A non-blocking listening socket. */
int net_listen(const char *hostport);
/* Start a non-blocking connect; returns the fd (connection may be in progress). */
int net_connect(const char *hostport);
/* hostport as listener fd has it: with port 0, the port the kernel chose
 * instead of 0; any other hostport as it is. Into buf, always terminated.
 */
void net_bound_name(const char *hostport, int fd, char *buf, size_t len);

#endif /* LEASELINE_LIB_NET_H */
