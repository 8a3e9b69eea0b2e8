/* SPDX-License-Identifier: MIT */
/* A checkpoint's record of its tree's sockets (DESIGN.md §9.4), as the
 * manifest and the plugin's image hold it: "sockets" (what the tree held
 * before the dump) and "time_wait" (the entries its own closed connections
 * left on its ports), each endpoint as text; its writer beside its reader,
 * and the check a restore makes with it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap/json.h"
#include "internal.h"

static json_t *sock_json(const struct inet_sock *s, bool full)
{
	char at[80], peer[80];
	inet_endpoint_text(s, false, at, sizeof(at));
	inet_endpoint_text(s, true, peer, sizeof(peer));
	if (!full)
		return json_pack("{s:s, s:s, s:I}", "local", at, "remote", peer, "netns", (json_int_t)s->netns);
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:b, s:I, s:b, s:i}", "pid", (int)s->pid, "protocol",
			 s->proto == IPPROTO_TCP ? "tcp" : "udp", "local", at, "remote", peer, "state",
			 inet_state_name(s->proto, s->state), "netns_here", s->netns_here, "netns",
			 (json_int_t)s->netns, "reuseport", s->reuseport, "uid", (int)s->uid);
}

json_t *inet_record(const struct inet_sock *socks, size_t n, const struct inet_sock *tw, size_t ntw)
{
	json_t *a = json_array(), *b = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, sock_json(&socks[i], true));
	for (size_t i = 0; i < ntw; i++)
		json_array_append_new(b, sock_json(&tw[i], false));
	return json_pack("{s:o, s:o}", "sockets", a, "time_wait", b);
}

/* One recorded socket back: 0, or -EINVAL. */
static int sock_from_json(const json_t *o, bool full, struct inet_sock *s)
{
	memset(s, 0, sizeof(*s));
	const char *local = json_member_string(o, "local"), *remote = json_member_string(o, "remote");
	int fr;
	if (!local || !remote || inet_endpoint_parse(local, &s->family, s->local, &s->lport) < 0 ||
	    inet_endpoint_parse(remote, &fr, s->remote, &s->rport) < 0 || fr != s->family)
		return -EINVAL;
	s->proto = IPPROTO_TCP;
	s->state = 6;                                                /* a TIME_WAIT entry */
	s->netns = (unsigned long)json_member_number(o, "netns", 0); /* (absent before: not known) */
	if (!full)
		return 0;
	const char *proto = json_member_string(o, "protocol"), *state = json_member_string(o, "state");
	if (!proto || !state || (strcmp(proto, "tcp") && strcmp(proto, "udp")))
		return -EINVAL;
	s->proto = strcmp(proto, "tcp") ? IPPROTO_UDP : IPPROTO_TCP;
	s->state = -1;
	for (int k = 0; k < 12 && s->state < 0; k++)
		if (!strcmp(inet_state_name(s->proto, k), state))
			s->state = k;
	s->pid = (pid_t)json_member_number(o, "pid", 0);
	s->netns_here = json_is_true(json_object_get(o, "netns_here"));
	s->reuseport = json_is_true(json_object_get(o, "reuseport")); /* (absent before: not set) */
	s->uid = (unsigned)json_member_number(o, "uid", 0);
	return s->state < 0 ? -EINVAL : 0;
}

/* A list of the manifest's "network" into *out, *n: 0, or -EINVAL/-ENOMEM. */
static int list_from_json(const json_t *a, bool full, struct inet_sock **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!a)
		return 0;
	if (!json_is_array(a))
		return -EINVAL;
	size_t count = json_array_size(a);
	if (!count)
		return 0;
	if (!(*out = calloc(count, sizeof(**out))))
		return -ENOMEM;
	for (size_t i = 0; i < count; i++)
		if (sock_from_json(json_array_get(a, i), full, &(*out)[i]) < 0) {
			free(*out);
			*out = NULL;
			return -EINVAL;
		}
	*n = count;
	return 0;
}

static bool on_loopback(const struct inet_sock *s)
{
	static const unsigned char v6[16] = {[15] = 1};
	return s->family == AF_INET ? s->local[0] == 127 : !memcmp(s->local, v6, 16);
}

/* Is this network namespace's loopback up? (an unknown answer: yes) */
static bool loopback_up(void)
{
	struct ifreq ifr = {.ifr_name = "lo"};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool up = fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) < 0 || (ifr.ifr_flags & IFF_UP);
	if (fd >= 0)
		close(fd);
	return up;
}

/* A socket of socks[0..n) to be bound again here on the loopback while this
 * namespace's loopback is down: -EADDRNOTAVAIL with why (CRIU would fail to
 * bind it), else 0. */
static int loopback_ready(const struct inet_sock *socks, size_t n, char *why, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (socks[i].netns_here && on_loopback(&socks[i]) && !loopback_up()) {
			char at[INET6_ADDRSTRLEN + 10];
			inet_endpoint_text(&socks[i], false, at, sizeof(at));
			snprintf(why, len,
				 "%s %s, which the checkpointed tree must bind again, is on the loopback, and the "
				 "loopback of this network namespace is down (`ip link set lo up` in it)",
				 socks[i].proto == IPPROTO_TCP ? "TCP" : "UDP", at);
			return -EADDRNOTAVAIL;
		}
	return 0;
}

/* The named network namespace (/run/netns, as `ip netns` keeps them) whose
 * inode is netns, opened: a descriptor, or -1 when none is (the tree's own
 * namespace ended with it: a restore makes a new one, with nothing left in it). */
static int named_netns(unsigned long netns)
{
	static const char *const dirs[] = {"/run/netns", "/var/run/netns"};
	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		int dfd = open(dirs[d], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
		struct dirent *e;
		int fd = -1;
		while (dir && fd < 0 && (e = readdir(dir))) {
			struct stat st;
			if (e->d_name[0] != '.' && fstatat(dfd, e->d_name, &st, 0) == 0 && st.st_ino == netns)
				fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC);
		}
		if (dir)
			closedir(dir);
		else if (dfd >= 0)
			close(dfd);
		if (fd >= 0)
			return fd;
	}
	return -1;
}

/* The checks of inet_ports_free for the sockets of the tree in network
 * namespace netns (those of cusnap's own: 0), made in it: 0, or -errno with why. */
static int ports_free_in(unsigned long netns, const struct inet_sock *socks, size_t n, const struct inet_sock *tw,
			 size_t ntw, int wait_ms, char *why, size_t len)
{
	if (!netns) {
		int rc = loopback_ready(socks, n, why, len);
		return rc ? rc : inet_ports_free(socks, n, tw, ntw, wait_ms, why, len);
	}
	int nsfd = named_netns(netns);
	if (nsfd < 0)
		return 0;
	/* In a child that enters it: the checks read /proc/self/net, and the
	 * entries are destroyed through a netlink socket made there. */
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0) {
		close(nsfd);
		return snprintf(why, len, "pipe: %s", strerror(errno)), -errno;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(pipefd[0]);
		struct inet_sock *own = (struct inet_sock *)socks; /* (the child's own copy) */
		for (size_t i = 0; i < n; i++)                     /* (there, these are the ones "here") */
			own[i].netns_here = own[i].netns == netns;
		int rc = setns(nsfd, CLONE_NEWNET) < 0 ? (snprintf(why, len, "setns: %s", strerror(errno)), -EPERM)
						       : ports_free_in(0, socks, n, tw, ntw, wait_ms, why, len);
		if (rc)
			(void)!write(pipefd[1], why, strlen(why) + 1);
		_exit(rc ? 1 : 0);
	}
	close(nsfd);
	close(pipefd[1]);
	if (pid < 0) {
		close(pipefd[0]);
		return snprintf(why, len, "fork: %s", strerror(errno)), -errno;
	}
	char said[1024] = "";
	ssize_t got = read(pipefd[0], said, sizeof(said) - 1);
	close(pipefd[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	snprintf(why, len, "%s", got > 0 ? said : "the check in the tree's network namespace failed");
	return -EADDRINUSE;
}

int inet_record_decode(const json_t *rec, struct inet_rec *r, char *why, size_t len)
{
	memset(r, 0, sizeof(*r));
	const json_t *lock = json_is_object(rec) ? json_object_get(rec, "lock") : NULL;
	int rc = !json_is_object(rec) ? -EINVAL
				      : list_from_json(json_object_get(rec, "sockets"), true, &r->socks, &r->n);
	if (rc == 0)
		rc = list_from_json(json_object_get(rec, "time_wait"), false, &r->tw, &r->ntw);
	if (rc == 0 && lock) {
		const char *method = json_member_string(lock, "method"), *table = json_member_string(lock, "table");
		r->lock_netns = (unsigned long)json_member_number(lock, "netns", 0);
		if (!json_is_object(lock) || !method || !*method || !r->lock_netns ||
		    snprintf(r->lock_method, sizeof(r->lock_method), "%s", method) >= (int)sizeof(r->lock_method) ||
		    snprintf(r->lock_table, sizeof(r->lock_table), "%s", table ? table : "") >=
			    (int)sizeof(r->lock_table))
			rc = -EINVAL;
	}
	if (rc == 0)
		return 0;
	snprintf(why, len, "%s", rc == -ENOMEM ? "out of memory" : "the record of the tree's sockets is malformed");
	inet_record_free(r);
	return rc;
}

void inet_record_free(struct inet_rec *r)
{
	free(r->socks);
	free(r->tw);
	memset(r, 0, sizeof(*r));
}

int inet_record_ports_free(const struct inet_rec *r, int wait_ms, char *why, size_t len)
{
	const struct inet_sock *socks = r->socks, *tw = r->tw;
	size_t n = r->n, ntw = r->ntw;
	int rc = 0;
	/* Cusnap's own namespace, then each other one the tree had sockets in
	 * that still stands (a named one: a node's, a pod's), each with the
	 * TIME_WAIT entries recorded there (an older record's: all of them here). */
	unsigned long here = 0;
	for (size_t i = 0; i < n && !here; i++)
		here = socks[i].netns_here ? socks[i].netns : 0;
	struct inet_sock *mine = rc == 0 && ntw ? calloc(ntw, sizeof(*mine)) : NULL;
	if (rc == 0 && ntw && !mine)
		rc = -ENOMEM, snprintf(why, len, "out of memory");
	for (size_t i = 0; rc == 0 && i <= n; i++) {
		unsigned long ns = i == n ? 0 : socks[i].netns;
		bool first = i == n || (!socks[i].netns_here && ns);
		for (size_t k = 0; i < n && k < i && first; k++)
			first = socks[k].netns_here || socks[k].netns != ns;
		if (!first)
			continue;
		size_t nmine = 0;
		for (size_t k = 0; k < ntw; k++)
			if (i == n ? !tw[k].netns || tw[k].netns == here : tw[k].netns == ns)
				mine[nmine++] = tw[k];
		rc = ports_free_in(ns, socks, n, mine, nmine, wait_ms, why, len);
	}
	free(mine);
	return rc;
}

ssize_t inet_record_locked(const struct inet_rec *r, struct inet_sock **conns)
{
	*conns = r->n ? calloc(r->n, sizeof(**conns)) : NULL;
	if (r->n && !*conns)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < r->n; i++) /* (the connections: what the lock holds) */
		if (inet_needs_tcp_established(&r->socks[i]))
			(*conns)[k++] = r->socks[i];
	return (ssize_t)k;
}
