/* SPDX-License-Identifier: MIT */
/*
 * A TCP port free now on loopback (the kernel's choice), for the servers
 * the tests start (tests/etcd_cluster.h, tests/pg_server.h) and the ports
 * they give the daemons. -1 if none.
 */
#ifndef LEASELINE_TESTS_FREE_PORT_H
#define LEASELINE_TESTS_FREE_PORT_H

#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static inline int test_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

#endif /* LEASELINE_TESTS_FREE_PORT_H */
