/* SPDX-License-Identifier: MIT */
/* vmm_group's link to another tree (VMM_GROUP_TCP=listen:PORT or
 * connect:PORT): the parents of two trees standing for two nodes of one
 * worker (ranks that talk over TCP, as NCCL's bootstrap and socket transport
 * do) exchange a token when ready, and another over the same connection after
 * restore-complete: the ranks still talk after a group suspend and resume. */
#ifndef VMM_GROUP_TCP_H
#define VMM_GROUP_TCP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int tcp_link = -1;

/* The connection VMM_GROUP_TCP asks for (none: 0), within 30 s. 0 or -1 (said). */
static int tcp_open(void)
{
	const char *spec = getenv("VMM_GROUP_TCP");
	if (!spec || !*spec)
		return 0;
	bool listening = !strncmp(spec, "listen:", 7);
	int port = atoi(strchr(spec, ':') ? strchr(spec, ':') + 1 : "0");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || port <= 0 || (!listening && strncmp(spec, "connect:", 8) != 0)) {
		fprintf(stderr, "vmm_group: VMM_GROUP_TCP=%s: listen:PORT or connect:PORT\n", spec);
		return -1;
	}
	if (listening) {
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		struct pollfd p = {.fd = s, .events = POLLIN};
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 1) < 0 || poll(&p, 1, 30000) != 1 ||
		    (tcp_link = accept4(s, NULL, NULL, SOCK_CLOEXEC)) < 0) {
			perror("vmm_group: VMM_GROUP_TCP: no peer connected");
			close(s);
			return -1;
		}
		close(s); /* (one peer) */
		return 0;
	}
	for (int tries = 0; connect(s, (struct sockaddr *)&a, sizeof(a)) < 0; tries++) {
		if (tries == 300) {
			perror("vmm_group: VMM_GROUP_TCP: cannot connect");
			close(s);
			return -1;
		}
		close(s);
		usleep(100000);
		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	}
	tcp_link = s;
	return 0;
}

/* Send token, receive the peer's: it must be the same. 0 or -1 (said). */
static int tcp_exchange(const char *token)
{
	if (tcp_link < 0)
		return 0;
	char got[32] = "";
	size_t n = strlen(token) + 1, have = 0;
	struct pollfd p = {.fd = tcp_link, .events = POLLIN};
	if (send(tcp_link, token, n, MSG_NOSIGNAL) != (ssize_t)n)
		goto bad;
	while (have < n && poll(&p, 1, 30000) == 1) {
		ssize_t r = recv(tcp_link, got + have, n - have, 0);
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	if (have == n && !strcmp(got, token)) {
		printf("vmm_group: tcp: token %s exchanged with the other tree\n", token);
		fflush(stdout);
		return 0;
	}
bad:
	fprintf(stderr, "vmm_group: tcp: token %s not exchanged with the other tree (got \"%s\")\n", token, got);
	return -1;
}

#endif
