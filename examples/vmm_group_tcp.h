/* SPDX-License-Identifier: MIT */
/* vmm_group's link to another tree (VMM_GROUP_TCP=listen:PORT or
 * connect:PORT): the parents of two trees standing for two nodes of one
 * worker (ranks that talk over TCP, as NCCL's bootstrap and socket transport
 * do) exchange a token when ready, and another over the same connection after
 * restore-complete: the ranks still talk after a group suspend and resume.
 *
 * An IPv4 address before the port (listen:198.18.0.2:PORT) stands for
 * another node's; without one, the loopback.
 *
 * VMM_GROUP_TCP=self: the parent alone, as NCCL's bootstrap leaves a rank: a
 * listener on an ephemeral loopback port (no SO_REUSEADDR) kept open, a few
 * short connections to it that its side closed first (their TIME_WAIT entries
 * hold its port), and one connection kept, both ends in this process. The
 * tokens go through that connection; after restore-complete the listener must
 * also accept a new connection. Its port is printed ("tcp: listening on").
 * VMM_GROUP_TCP_REUSEPORT=1: the listener sets SO_REUSEPORT first, as NCCL's
 * RAS service does on its well-known port. */
#ifndef VMM_GROUP_TCP_H
#define VMM_GROUP_TCP_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int tcp_link = -1, tcp_peer = -1, tcp_listener = -1;

/* A loopback connection to port: the socket, or -1. */
static int tcp_dial(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(s);
		s = -1;
	}
	return s;
}

/* The same within ms: a SYN that another listener of a SO_REUSEPORT port
 * drops (its queue full) is sent again from the same port to the same
 * listener, and a plain connect would wait minutes. */
static int tcp_dial_within(int port, int ms)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
	socklen_t len = sizeof(err);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		struct pollfd p = {.fd = s, .events = POLLOUT};
		if (errno != EINPROGRESS || poll(&p, 1, ms) != 1 ||
		    getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
			close(s);
			return -1;
		}
	}
	return s;
}

/* VMM_GROUP_TCP=self (see above): 0 or -1 (said). */
static int tcp_self(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	const char *reuse = getenv("VMM_GROUP_TCP_REUSEPORT");
	if (l >= 0 && reuse && !strcmp(reuse, "1") && setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
		perror("vmm_group: VMM_GROUP_TCP_REUSEPORT=1: SO_REUSEPORT");
		return -1;
	}
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 8) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0) {
		perror("vmm_group: VMM_GROUP_TCP=self: cannot listen");
		return -1;
	}
	int port = ntohs(a.sin_port);
	for (int i = 0; i < 3; i++) { /* accepted side closes first: TIME_WAIT on the listener's port */
		int c = tcp_dial(port), s = c >= 0 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
		if (s < 0) {
			perror("vmm_group: VMM_GROUP_TCP=self: a short connection failed");
			return -1;
		}
		close(s);
		char byte;
		(void)!recv(c, &byte, 1, 0); /* its FIN arrived */
		close(c);
	}
	tcp_link = tcp_dial(port);
	tcp_peer = tcp_link >= 0 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
	if (tcp_peer < 0) {
		perror("vmm_group: VMM_GROUP_TCP=self: the kept connection failed");
		return -1;
	}
	tcp_listener = l;
	printf("vmm_group: tcp: listening on 127.0.0.1:%d\n", port);
	return 0;
}

/* After a restore: the listener accepts a new connection. With SO_REUSEPORT
 * the kernel spreads connections over every listener of the port by their
 * addresses: up to 32 tries, each from another port, 1 s each (a try whose
 * SYN another listener drops gives up at that second too). 0 or -1 (said). */
static int tcp_accepts(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	if (tcp_listener < 0)
		return 0;
	int s = -1;
	bool listening = getsockname(tcp_listener, (struct sockaddr *)&a, &len) == 0;
	for (int tries = 0; listening && s < 0 && tries < 32; tries++) {
		int c = tcp_dial_within(ntohs(a.sin_port), 1000);
		struct pollfd p = {.fd = tcp_listener, .events = POLLIN};
		s = c >= 0 && poll(&p, 1, tries ? 1000 : 30000 / 32) == 1
			    ? accept4(tcp_listener, NULL, NULL, SOCK_CLOEXEC)
			    : -1;
		if (c >= 0)
			close(c);
	}
	if (s < 0) {
		fprintf(stderr, "vmm_group: tcp: the listener accepts no new connection\n");
		return -1;
	}
	close(s);
	printf("vmm_group: tcp: the listener accepted a new connection\n");
	return 0;
}

/* VMM_GROUP_TCP_STREAM=1 beside listen:/connect:: a second connection on
 * PORT + 1 carries a byte every millisecond from the connecting tree to the
 * listening one, whose reader keeps the longest gap between two arrivals: what
 * a stream between the nodes sees across a checkpoint and restore (printed after
 * restore-complete, for bench/two_nodes.sh). */
static int tcp_stream_fd = -1;
static double tcp_stream_gap_ms;
static unsigned long tcp_stream_bytes;

static double tcp_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void *tcp_stream_run(void *arg)
{
	bool reader = arg != NULL;
	char byte = 's';
	double last = 0;
	for (;;) {
		if (!reader) {
			if (send(tcp_stream_fd, &byte, 1, MSG_NOSIGNAL) != 1)
				return NULL;
			usleep(1000);
			continue;
		}
		char buf[256];
		ssize_t r = recv(tcp_stream_fd, buf, sizeof(buf), 0);
		if (r <= 0)
			return NULL;
		double now = tcp_now_ms();
		if (last && now - last > tcp_stream_gap_ms)
			tcp_stream_gap_ms = now - last;
		last = now;
		tcp_stream_bytes += (unsigned long)r;
	}
}

/* The stream's connection (listening: accept on addr's port + 1), its thread started. 0 or -1 (said). */
static int tcp_stream_open(bool listening, struct sockaddr_in a)
{
	const char *on = getenv("VMM_GROUP_TCP_STREAM");
	if (!on || strcmp(on, "1"))
		return 0;
	a.sin_port = htons((uint16_t)(ntohs(a.sin_port) + 1));
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (listening) {
		struct pollfd p = {.fd = s, .events = POLLIN};
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 1) < 0 || poll(&p, 1, 30000) != 1 ||
		    (tcp_stream_fd = accept4(s, NULL, NULL, SOCK_CLOEXEC)) < 0) {
			perror("vmm_group: VMM_GROUP_TCP_STREAM: no stream");
			return -1;
		}
		close(s);
	} else {
		for (int tries = 0; connect(s, (struct sockaddr *)&a, sizeof(a)) < 0; tries++) {
			close(s);
			if (tries == 300) {
				perror("vmm_group: VMM_GROUP_TCP_STREAM: cannot connect");
				return -1;
			}
			usleep(100000);
			s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		}
		tcp_stream_fd = s;
	}
	pthread_t t;
	if (pthread_create(&t, NULL, tcp_stream_run, listening ? (void *)1 : NULL) != 0)
		return -1;
	pthread_detach(t);
	return 0;
}

/* After restore-complete and a token: the stream's longest gap (the reader). */
static void tcp_stream_report(void)
{
	if (tcp_stream_fd >= 0 && tcp_stream_bytes)
		printf("vmm_group: tcp: the stream's longest gap %.1f ms (%lu bytes read)\n", tcp_stream_gap_ms,
		       tcp_stream_bytes);
}

/* The connection VMM_GROUP_TCP asks for (none: 0), within 30 s. 0 or -1 (said). */
static int tcp_open(void)
{
	const char *spec = getenv("VMM_GROUP_TCP");
	if (!spec || !*spec)
		return 0;
	if (!strcmp(spec, "self"))
		return tcp_self();
	bool listening = !strncmp(spec, "listen:", 7);
	/* [ADDR:]PORT: the loopback unless an IPv4 address is named (two nodes) */
	const char *at = strchr(spec, ':') ? strchr(spec, ':') + 1 : "", *colon = strrchr(at, ':');
	int port = atoi(colon ? colon + 1 : at);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	char host[64] = "";
	if (colon && (size_t)(colon - at) < sizeof(host))
		memcpy(host, at, (size_t)(colon - at));
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || port <= 0 || (!listening && strncmp(spec, "connect:", 8) != 0) ||
	    (colon && inet_pton(AF_INET, host, &a.sin_addr) != 1)) {
		fprintf(stderr, "vmm_group: VMM_GROUP_TCP=%s: listen:[ADDR:]PORT or connect:[ADDR:]PORT\n", spec);
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
		return tcp_stream_open(true, a);
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
	return tcp_stream_open(false, a);
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
	if (tcp_peer >= 0) { /* (self: the other end of the connection echoes it) */
		p.fd = tcp_peer;
		char echo[32];
		size_t e = 0;
		while (e < n && poll(&p, 1, 30000) == 1) {
			ssize_t r = recv(tcp_peer, echo + e, n - e, 0);
			if (r <= 0)
				break;
			e += (size_t)r;
		}
		if (e != n || send(tcp_peer, echo, n, MSG_NOSIGNAL) != (ssize_t)n)
			goto bad;
		p.fd = tcp_link;
	}
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
