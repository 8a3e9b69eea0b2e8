/* SPDX-License-Identifier: MIT */
/* A tree's network sockets (DESIGN.md §9.4): which inet sockets its processes
 * hold (the kernel's tables under /proc/PID/net, matched by inode with their
 * descriptors), whether the CRIU at hand can dump them on this kernel, and,
 * before a restore on this host, whether the ports the tree listened on can be
 * bound again: TIME_WAIT entries the checkpointed tree itself left are
 * destroyed (netlink SOCK_DESTROY), others waited for within a bound, a live
 * socket of another process named. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cusnap/paths.h"
#include "internal.h"

/* The kernel's TCP states (include/net/tcp_states.h). */
enum { TCPS_ESTABLISHED = 1, TCPS_TIME_WAIT = 6, TCPS_CLOSE = 7, TCPS_LISTEN = 10 };

static const struct {
	const char *file;
	int family, proto;
} tables[] = {
	{"tcp", AF_INET, IPPROTO_TCP},
	{"tcp6", AF_INET6, IPPROTO_TCP},
	{"udp", AF_INET, IPPROTO_UDP},
	{"udp6", AF_INET6, IPPROTO_UDP},
};

const char *inet_state_name(int proto, int state)
{
	static const char *const tcp[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
					  "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
					  "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
	if (proto == IPPROTO_UDP)
		return state == TCPS_ESTABLISHED ? "CONNECTED" : "BOUND";
	return state > 0 && state < (int)(sizeof(tcp) / sizeof(tcp[0])) ? tcp[state] : "?";
}

void inet_endpoint_text(const struct inet_sock *s, bool remote, char *out, size_t len)
{
	char addr[INET6_ADDRSTRLEN] = "?";
	inet_ntop(s->family, remote ? s->remote : s->local, addr, sizeof(addr));
	unsigned port = remote ? s->rport : s->lport;
	if (s->family == AF_INET6)
		snprintf(out, len, "[%s]:%u", addr, port);
	else
		snprintf(out, len, "%s:%u", addr, port);
}

int inet_endpoint_parse(const char *text, int *family, unsigned char addr[16], unsigned *port)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(text, ':');
	if (!colon || (size_t)(colon - text) >= sizeof(host))
		return -EINVAL;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	char *end;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (*end || p > 65535 || end == colon + 1)
		return -EINVAL;
	memset(addr, 0, 16);
	size_t n = strlen(host);
	if (n > 2 && host[0] == '[' && host[n - 1] == ']') {
		host[n - 1] = '\0';
		*family = AF_INET6;
		if (inet_pton(AF_INET6, host + 1, addr) != 1)
			return -EINVAL;
	} else {
		*family = AF_INET;
		if (inet_pton(AF_INET, host, addr) != 1)
			return -EINVAL;
	}
	*port = (unsigned)p;
	return 0;
}

/* One address of a /proc/net table: 32-bit words in hex, each the kernel's
 * value as it lies in memory (so copied back as it is). */
static int hex_address(const char *hex, size_t words, unsigned char *out)
{
	for (size_t w = 0; w < words; w++) {
		char word[9];
		memcpy(word, hex + 8 * w, 8);
		word[8] = '\0';
		char *end;
		uint32_t v = (uint32_t)strtoul(word, &end, 16);
		if (*end)
			return -1;
		memcpy(out + 4 * w, &v, 4);
	}
	return 0;
}

/* The sockets of table i of the network namespace /proc/PID/net (pid 0: this
 * process's) appended to *v (*n of *cap). keep(s, arg) chooses. */
static int table_read(pid_t pid, size_t i, bool (*keep)(const struct inet_sock *, void *), void *arg,
		      struct inet_sock **v, size_t *n, size_t *cap)
{
	char path[64];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, tables[i].file);
	else
		snprintf(path, sizeof(path), "/proc/self/net/%s", tables[i].file);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : -errno; /* (no IPv6 in that kernel) */
	char line[512], local[40], remote[40];
	int rc = 0;
	if (!fgets(line, sizeof(line), f)) /* the header */
		goto out;
	size_t words = tables[i].family == AF_INET ? 1 : 4;
	while (fgets(line, sizeof(line), f)) {
		struct inet_sock s = {.family = tables[i].family, .proto = tables[i].proto};
		unsigned lport, rport, state, uid;
		if (sscanf(line, " %*d: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %*s %*s %*s %u %*d %lu", local, &lport,
			   remote, &rport, &state, &uid, &s.inode) != 7 ||
		    strlen(local) != 8 * words || strlen(remote) != 8 * words ||
		    hex_address(local, words, s.local) < 0 || hex_address(remote, words, s.remote) < 0)
			continue;
		s.lport = lport;
		s.rport = rport;
		s.state = (int)state;
		s.uid = uid;
		if (keep && !keep(&s, arg))
			continue;
		if (*n == *cap) {
			size_t c = *cap ? 2 * *cap : 16;
			struct inet_sock *nv = realloc(*v, c * sizeof(*nv));
			if (!nv) {
				rc = -ENOMEM;
				goto out;
			}
			*v = nv;
			*cap = c;
		}
		(*v)[(*n)++] = s;
	}
out:
	fclose(f);
	return rc;
}

/* The socket inodes process pid holds, sorted, into *out: the count, or -errno. */
static ssize_t socket_inodes(pid_t pid, unsigned long **out)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	*out = NULL;
	if (!d)
		return -errno;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char link[320], target[64];
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		unsigned long inode;
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (sscanf(target, "socket:[%lu]", &inode) != 1)
			continue;
		if (n == cap) {
			unsigned long *nv = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof(*nv));
			if (!nv) {
				closedir(d);
				free(*out);
				*out = NULL;
				return -ENOMEM;
			}
			*out = nv;
		}
		(*out)[n++] = inode;
	}
	closedir(d);
	return (ssize_t)n;
}

/* SO_REUSEPORT of socket inode, held by pid: its descriptor borrowed with
 * pidfd_getfd (Linux 5.6; what CRIU's own parasite reads). 1 or 0; -1 when it
 * cannot be asked (an older kernel, not root). */
static int sock_reuseport(pid_t pid, unsigned long inode)
{
	char path[64], want[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	DIR *d = opendir(path);
	int fdno = -1;
	struct dirent *e;
	while (d && fdno < 0 && (e = readdir(d))) {
		char link[320], target[64];
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len > 0 && (target[len] = '\0', !strcmp(target, want)))
			fdno = atoi(e->d_name);
	}
	if (d)
		closedir(d);
	int pfd = fdno < 0 ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
	int fd = pfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pfd, fdno, 0);
	int on = 0, rc = -1;
	socklen_t len = sizeof(on);
	if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &len) == 0)
		rc = on != 0;
	if (fd >= 0)
		close(fd);
	if (pfd >= 0)
		close(pfd);
	return rc;
}

static bool holds(const unsigned long *inodes, size_t n, unsigned long inode)
{
	for (size_t i = 0; i < n; i++)
		if (inodes[i] == inode)
			return true;
	return false;
}

static unsigned long netns_of(pid_t pid)
{
	char path[64];
	struct stat st;
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/ns/net");
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

struct held_by {
	const unsigned long *inodes;
	size_t n;
};

static bool held(const struct inet_sock *s, void *arg)
{
	const struct held_by *h = arg;
	return s->inode && holds(h->inodes, h->n, s->inode);
}

ssize_t inet_of_tree(const struct proc *procs, size_t nprocs, struct inet_sock **out)
{
	struct inet_sock *v = NULL;
	size_t n = 0, cap = 0;
	unsigned long here = netns_of(0);
	int rc = 0;
	for (size_t p = 0; p < nprocs && rc == 0; p++) {
		unsigned long *inodes;
		ssize_t ni = socket_inodes(procs[p].pid, &inodes);
		if (ni <= 0)
			continue; /* none, or gone: nothing of it to dump */
		struct held_by h = {inodes, (size_t)ni};
		size_t first = n;
		bool own = netns_of(procs[p].pid) == here;
		for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]) && rc == 0; i++)
			rc = table_read(procs[p].pid, i, held, &h, &v, &n, &cap);
		for (size_t i = first; i < n; i++) {
			v[i].pid = procs[p].pid;
			v[i].netns_here = own;
			v[i].netns = netns_of(procs[p].pid);
			bool binds = (v[i].proto == IPPROTO_TCP && v[i].state == TCPS_LISTEN) ||
				     v[i].proto == IPPROTO_UDP;
			v[i].reuseport = binds && v[i].lport && sock_reuseport(procs[p].pid, v[i].inode) == 1;
		}
		free(inodes);
	}
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v;
	return (ssize_t)n;
}

bool inet_needs_tcp_established(const struct inet_sock *s)
{
	return s->proto == IPPROTO_TCP && s->state != TCPS_LISTEN && s->state != TCPS_CLOSE;
}

bool criu_dumps_inet(const char *version, char *why, size_t len)
{
	int major = 0, minor = 0, kmajor = 0, kminor = 0;
	struct utsname u;
	if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &kmajor, &kminor) != 2)
		return true; /* (cannot tell: CRIU itself will say) */
	if (kmajor * 1000 + kminor < 6016)
		return true;
	if (sscanf(version, "%d.%d", &major, &minor) != 2)
		return true;
	if (major * 1000 + minor >= 4002)
		return true;
	snprintf(why, len,
		 "CRIU %s cannot dump inet sockets on kernel %s (kernels 6.16 and later answer SO_PASSCRED only for "
		 "Unix and netlink sockets; CRIU 4.2 copes): provision CRIU 4.2 or later (scripts/setup-criu.sh, "
		 "'make criu') or name one with --criu",
		 version, u.release);
	return false;
}

/* ---- before a restore on this host ---- */

static bool is_any(int family, const unsigned char *a)
{
	static const unsigned char zero[16];
	return memcmp(a, zero, family == AF_INET ? 4 : 16) == 0;
}

/* Do the local endpoints of a and b collide in a bind (same port; one of them
 * a wildcard, or the same address)? IPv4 and IPv6 compared as sockets are:
 * an IPv6 wildcard covers IPv4 too (a dual-stack socket). */
static bool collide(const struct inet_sock *a, const struct inet_sock *b)
{
	if (a->lport != b->lport || a->proto != b->proto)
		return false;
	if (is_any(a->family, a->local) || is_any(b->family, b->local))
		return a->family == b->family || (a->family == AF_INET6 && is_any(AF_INET6, a->local)) ||
		       (b->family == AF_INET6 && is_any(AF_INET6, b->local));
	return a->family == b->family && memcmp(a->local, b->local, a->family == AF_INET ? 4 : 16) == 0;
}

static bool same_tuple(const struct inet_sock *a, const struct inet_sock *b)
{
	size_t n = a->family == AF_INET ? 4 : 16;
	return a->family == b->family && a->lport == b->lport && a->rport == b->rport &&
	       memcmp(a->local, b->local, n) == 0 && memcmp(a->remote, b->remote, n) == 0;
}

static bool bound_here(const struct inet_sock *s)
{
	return s->netns_here && s->lport &&
	       ((s->proto == IPPROTO_TCP && s->state == TCPS_LISTEN) || (s->proto == IPPROTO_UDP));
}

static bool time_wait(const struct inet_sock *s, void *arg)
{
	(void)arg;
	return s->proto == IPPROTO_TCP && s->state == TCPS_TIME_WAIT;
}

/* A TCP listener of the tree with a port: where TIME_WAIT entries can block
 * its bind at a restore. */
static bool listens(const struct inet_sock *s)
{
	return s->proto == IPPROTO_TCP && s->state == TCPS_LISTEN && s->lport;
}

ssize_t inet_time_wait_of(const struct inet_sock *tree, size_t n, struct inet_sock **out)
{
	struct inet_sock *all = NULL, *v = NULL;
	size_t nall = 0, cap = 0, nv = 0;
	int rc = 0;
	/* Each network namespace the tree listens in, read once: this one through
	 * /proc/self, another through the first of the tree's processes in it
	 * while it is still there (after a dump that ended the tree, none is). */
	for (size_t j = 0; j < n && rc == 0; j++) {
		bool first = listens(&tree[j]) && (tree[j].netns_here || netns_of(tree[j].pid) == tree[j].netns);
		for (size_t k = 0; k < j && first; k++)
			first = !(listens(&tree[k]) && tree[k].netns == tree[j].netns);
		size_t from = nall;
		for (size_t i = 0; first && i < 2 && rc == 0; i++) /* tcp, tcp6 */
			rc = table_read(tree[j].netns_here ? 0 : tree[j].pid, i, time_wait, NULL, &all, &nall, &cap);
		for (size_t i = from; i < nall; i++)
			all[i].netns = tree[j].netns, all[i].netns_here = tree[j].netns_here;
	}
	if (rc == 0 && nall)
		v = calloc(nall, sizeof(*v));
	if (rc == 0 && nall && !v)
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < nall; i++)
		for (size_t j = 0; j < n; j++)
			if (listens(&tree[j]) && tree[j].netns == all[i].netns && collide(&all[i], &tree[j])) {
				v[nv++] = all[i];
				break;
			}
	free(all);
	if (rc < 0) {
		free(v);
		return rc;
	}
	*out = v;
	return (ssize_t)nv;
}

/* Destroy TIME_WAIT entry s (netlink SOCK_DESTROY through inet_diag, as
 * `ss -K` does; needs CAP_NET_ADMIN): 0, or -errno. */
static int destroy(const struct inet_sock *s)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg;
	memset(&msg, 0, sizeof(msg));
	msg.nlh.nlmsg_len = sizeof(msg);
	msg.nlh.nlmsg_type = SOCK_DESTROY;
	msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	msg.req.sdiag_family = (unsigned char)s->family;
	msg.req.sdiag_protocol = IPPROTO_TCP;
	msg.req.idiag_states = 1u << TCPS_TIME_WAIT;
	msg.req.id.idiag_sport = htons((uint16_t)s->lport);
	msg.req.id.idiag_dport = htons((uint16_t)s->rport);
	memcpy(msg.req.id.idiag_src, s->local, 16);
	memcpy(msg.req.id.idiag_dst, s->remote, 16);
	msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	int rc = 0;
	if (sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
	} else {
		char buf[512];
		ssize_t got = recv(fd, buf, sizeof(buf), 0);
		const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
		if (got < 0)
			rc = -errno;
		else if (got >= (ssize_t)(sizeof(*h) + sizeof(struct nlmsgerr)) && h->nlmsg_type == NLMSG_ERROR)
			rc = ((const struct nlmsgerr *)NLMSG_DATA(h))->error;
		else
			rc = -EPROTO;
	}
	close(fd);
	return rc;
}

/* The process holding socket inode (and its name and owner), or 0. */
static pid_t owner_of(unsigned long inode, char *comm, size_t len, unsigned *uid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t found = 0;
	while (d && !found && (e = readdir(d))) {
		pid_t pid = (pid_t)atoi(e->d_name);
		unsigned long *inodes;
		ssize_t n = pid > 0 ? socket_inodes(pid, &inodes) : -1;
		if (n <= 0)
			continue;
		if (holds(inodes, (size_t)n, inode))
			found = pid;
		free(inodes);
	}
	if (d)
		closedir(d);
	snprintf(comm, len, "?");
	*uid = (unsigned)-1;
	if (!found)
		return 0;
	proc_comm(found, comm, len);
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)found);
	if (stat(path, &st) == 0)
		*uid = st.st_uid;
	return found;
}

struct port_wanted {
	const struct inet_sock *tree;
	size_t n;
};

static bool on_a_port(const struct inet_sock *s, void *arg)
{
	const struct port_wanted *w = arg;
	for (size_t j = 0; j < w->n; j++)
		if (bound_here(&w->tree[j]) && collide(s, &w->tree[j]))
			return true;
	return false;
}

/* Does live socket s (held by pid) let the tree's socket on its port bind
 * beside it: both set SO_REUSEPORT, with the same uid (the kernel's rule)? */
static bool shares_port(const struct inet_sock *tree, size_t n, const struct inet_sock *s, pid_t pid)
{
	for (size_t j = 0; j < n; j++)
		if (bound_here(&tree[j]) && collide(s, &tree[j]))
			if (!tree[j].reuseport || tree[j].uid != s->uid || sock_reuseport(pid, s->inode) != 1)
				return false;
	return true;
}

int inet_ports_free(const struct inet_sock *tree, size_t n, const struct inet_sock *ours, size_t nours, int wait_ms,
		    char *why, size_t len)
{
	struct port_wanted w = {tree, n};
	bool said = false;
	size_t destroyed = 0;
	for (int waited = 0;; waited += 100) {
		struct inet_sock *v = NULL;
		size_t nv = 0, cap = 0;
		int rc = 0;
		for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]) && rc == 0; i++)
			rc = table_read(0, i, on_a_port, &w, &v, &nv, &cap);
		if (rc < 0) {
			free(v);
			snprintf(why, len, "cannot read this host's sockets: %s", strerror(-rc));
			return rc;
		}
		const struct inet_sock *pending = NULL;
		for (size_t i = 0; i < nv; i++) {
			char at[INET6_ADDRSTRLEN + 10];
			inet_endpoint_text(&v[i], false, at, sizeof(at));
			if (v[i].inode) {
				char comm[64];
				unsigned uid;
				pid_t pid = owner_of(v[i].inode, comm, sizeof(comm), &uid);
				if (pid && shares_port(tree, n, &v[i], pid))
					continue; /* SO_REUSEPORT on both, the same uid: the kernel binds both */
				if (pid)
					snprintf(why, len,
						 "%s %s, which the checkpointed tree must bind again, is taken by "
						 "process "
						 "%d (%s, uid %u; %s)",
						 v[i].proto == IPPROTO_TCP ? "TCP" : "UDP", at, (int)pid, comm, uid,
						 inet_state_name(v[i].proto, v[i].state));
				else
					snprintf(why, len,
						 "%s %s, which the checkpointed tree must bind again, is taken (%s, "
						 "uid "
						 "%u, by a process not visible here)",
						 v[i].proto == IPPROTO_TCP ? "TCP" : "UDP", at,
						 inet_state_name(v[i].proto, v[i].state), v[i].uid);
				free(v);
				return -EADDRINUSE;
			}
			/* The tree's own: an entry recorded at the dump, or one of its
			 * recorded connections closed since (a restore killed). */
			bool own = false;
			for (size_t k = 0; k < nours && !own; k++)
				own = same_tuple(&v[i], &ours[k]);
			for (size_t k = 0; k < n && !own; k++)
				own = tree[k].proto == IPPROTO_TCP && same_tuple(&v[i], &tree[k]);
			if (own && v[i].state == TCPS_TIME_WAIT && destroy(&v[i]) == 0) {
				destroyed++;
				continue;
			}
			pending = &v[i];
		}
		if (!pending) {
			free(v);
			if (destroyed)
				progress("ports", 0,
					 "%zu TIME_WAIT entr%s of the checkpointed tree's own connections cleared",
					 destroyed, destroyed == 1 ? "y" : "ies");
			return 0;
		}
		char at[INET6_ADDRSTRLEN + 10], peer[INET6_ADDRSTRLEN + 10];
		inet_endpoint_text(pending, false, at, sizeof(at));
		inet_endpoint_text(pending, true, peer, sizeof(peer));
		if (waited >= wait_ms) {
			snprintf(why, len,
				 "TCP %s, which the checkpointed tree must bind again, is still held by a closing "
				 "connection (%s, to %s) after %d s",
				 at, inet_state_name(pending->proto, pending->state), peer, wait_ms / 1000);
			free(v);
			return -EADDRINUSE;
		}
		if (!said)
			voice(VOICE_WARN,
			      "TCP %s, which the checkpointed tree must bind again, is held by a closing "
			      "connection (%s, to %s) that is not the tree's own: waiting for it (at most %d s)",
			      at, inet_state_name(pending->proto, pending->state), peer, wait_ms / 1000);
		said = true;
		free(v);
		usleep(100000);
	}
}
