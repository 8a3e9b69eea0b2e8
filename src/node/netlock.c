/* SPDX-License-Identifier: MIT */
/* CRIU's network lock, accounted for (DESIGN.md §9.4). A --tcp-established
 * dump drops the tree's connections' packets with iptables rules (each marked
 * with CRIU's 0xc114, two per direction) until a restore in the same network
 * namespace lifts them. A checkpoint restored in another namespace, on another
 * node, or never, leaves them in the dump's namespace for good. The checkpoint
 * records the namespace; the rules still there are found (iptables -S, in that
 * namespace: any process's /proc/PID/ns/net with its inode), listed, and
 * removed on the operator's word or once the connections were restored
 * elsewhere. CRIU's nftables lock (where iptables-restore is missing) is one
 * table ("inet CRIU-..."), named in CRIU's dump log, deleted in one netlink
 * batch (NFT_MSG_DELTABLE) where a table is asked for by name (NFT_MSG_GETTABLE). */
#include <arpa/inet.h>
#include <dirent.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

static unsigned long netns_inode(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

unsigned long netlock_netns_here(void)
{
	return netns_inode("/proc/self/ns/net");
}

/* A descriptor of the network namespace with inode ino (a process's in it), or -1. */
static int netns_open(unsigned long ino)
{
	if (netns_inode("/proc/self/ns/net") == ino)
		return open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	DIR *d = opendir("/proc");
	struct dirent *e;
	int fd = -1;
	while (d && fd < 0 && (e = readdir(d))) {
		char path[300];
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/ns/net", e->d_name);
		if (netns_inode(path) == ino)
			fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (d)
		closedir(d);
	return fd;
}

/* argv run in network namespace nsfd, its output into out (at most len): its
 * exit status, or -1. */
static int run_in(int nsfd, char *const argv[], char *out, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		if (setns(nsfd, CLONE_NEWNET) < 0 || dup2(p[1], STDOUT_FILENO) < 0 || null < 0 ||
		    dup2(null, STDERR_FILENO) < 0)
			_exit(127);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	size_t got = 0;
	for (ssize_t n; pid > 0 && got + 1 < len && (n = read(p[0], out + got, len - 1 - got)) > 0;)
		got += (size_t)n;
	out[got] = '\0';
	close(p[0]);
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Is rule (an iptables -S line) CRIU's lock of one of conns? */
static bool locks_one_of(const char *rule, const struct inet_sock *conns, size_t n)
{
	if (strncmp(rule, "-A INPUT ", 9) && strncmp(rule, "-A OUTPUT ", 10))
		return false;
	if (!strstr(rule, "--mark 0xc114") || !strstr(rule, "-j DROP"))
		return false;
	unsigned sport = 0, dport = 0;
	const char *s = strstr(rule, "--sport "), *d = strstr(rule, "--dport ");
	if (!s || !d || sscanf(s + 8, "%u", &sport) != 1 || sscanf(d + 8, "%u", &dport) != 1)
		return false;
	for (size_t i = 0; i < n; i++)
		if (conns[i].rport && ((conns[i].lport == sport && conns[i].rport == dport) ||
				       (conns[i].lport == dport && conns[i].rport == sport)))
			return true;
	return false;
}

int netlock_rules(unsigned long netns, const struct inet_sock *conns, size_t n, char *rules, size_t len, size_t *count)
{
	*count = 0;
	rules[0] = '\0';
	int nsfd = netns_open(netns);
	if (nsfd < 0)
		return -ENOENT;
	static char out[1 << 16];
	size_t at = 0;
	static char *const tools[2][3] = {{"iptables", "-S", NULL}, {"ip6tables", "-S", NULL}};
	for (int t = 0; t < 2; t++) {
		if (run_in(nsfd, tools[t], out, sizeof(out)) != 0)
			continue; /* (no iptables: no rules of its) */
		for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
			if (!locks_one_of(line, conns, n))
				continue;
			(*count)++;
			if (at + strlen(line) + 16 < len)
				at += (size_t)snprintf(rules + at, len - at, "%s %s\n", t ? "ip6tables" : "iptables",
						       line);
		}
	}
	close(nsfd);
	return 0;
}

int netlock_remove(unsigned long netns, const char *rules, size_t *removed)
{
	*removed = 0;
	int nsfd = netns_open(netns);
	if (nsfd < 0)
		return -ENOENT;
	char *copy = strdup(rules), *save = NULL;
	int rc = copy ? 0 : -ENOMEM;
	for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
		char *argv[64], *w, *save2 = NULL;
		int k = 0;
		for (w = strtok_r(line, " ", &save2); w && k < 62; w = strtok_r(NULL, " ", &save2))
			argv[k++] = w;
		argv[k] = NULL;
		if (k < 3 || strcmp(argv[1], "-A"))
			continue;
		argv[1] = "-D"; /* (the same rule, deleted) */
		char out[256];
		if (run_in(nsfd, argv, out, sizeof(out)) == 0)
			(*removed)++;
		else
			rc = -EIO;
	}
	free(copy);
	close(nsfd);
	return rc;
}

/* ---- CRIU's nftables table ---- */

/* Append a netlink message of type (nftables' subsystem unless batch) with
 * the inet family and, when name, NFTA_TABLE_NAME; its length. */
static size_t nft_msg(uint8_t *at, uint16_t type, uint16_t flags, uint32_t seq, const char *name)
{
	struct nlmsghdr *h = (struct nlmsghdr *)at;
	struct nfgenmsg *g = (struct nfgenmsg *)NLMSG_DATA(h);
	size_t len = NLMSG_LENGTH(sizeof(*g));
	memset(at, 0, NLMSG_SPACE(sizeof(*g)));
	h->nlmsg_type = type;
	h->nlmsg_flags = NLM_F_REQUEST | flags;
	h->nlmsg_seq = seq;
	g->nfgen_family = name ? NFPROTO_INET : AF_UNSPEC;
	g->version = NFNETLINK_V0;
	g->res_id = name ? 0 : htons(NFNL_SUBSYS_NFTABLES);
	if (name) {
		struct nlattr *a = (struct nlattr *)(at + NLMSG_ALIGN(len));
		size_t n = strlen(name) + 1;
		a->nla_type = NFTA_TABLE_NAME;
		a->nla_len = (uint16_t)(NLA_HDRLEN + n);
		memcpy((uint8_t *)a + NLA_HDRLEN, name, n);
		len = NLMSG_ALIGN(len) + NLA_ALIGN(a->nla_len);
	}
	h->nlmsg_len = (uint32_t)len;
	return NLMSG_ALIGN(len);
}

/* In the child (in the namespace): the table asked for (get) or deleted in a
 * batch; 0 done (or there), 1 no such table, 2 failed. */
static int nft_table_op(const char *name, bool del)
{
	int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (sock < 0)
		return 2;
	static uint8_t buf[8192];
	size_t len = 0;
	uint32_t seq = 1;
	if (del) {
		len += nft_msg(buf + len, NFNL_MSG_BATCH_BEGIN, 0, seq++, NULL);
		len += nft_msg(buf + len, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE, NLM_F_ACK, seq++, name);
		len += nft_msg(buf + len, NFNL_MSG_BATCH_END, 0, seq++, NULL);
	} else {
		len += nft_msg(buf, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE, NLM_F_ACK, seq++, name);
	}
	struct sockaddr_nl to = {.nl_family = AF_NETLINK};
	if (sendto(sock, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)len)
		return close(sock), 2;
	int rc = 2;
	for (int tries = 0; rc == 2 && tries < 8; tries++) {
		ssize_t n = recv(sock, buf, sizeof(buf), 0);
		if (n <= 0)
			break;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_ERROR) {
				int err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
				rc = err == 0 ? 0 : err == -ENOENT ? 1 : 2;
			} else if (!del && (h->nlmsg_type & 0xff) == NFT_MSG_NEWTABLE) {
				rc = 0; /* (the table, then its ack) */
			}
		}
	}
	close(sock);
	return rc;
}

int netlock_nft_table(unsigned long netns, const char *table, bool del)
{
	const char *name = strncmp(table, "inet ", 5) == 0 ? table + 5 : table;
	int nsfd = netns_open(netns);
	if (nsfd < 0)
		return -ENOENT;
	pid_t pid = fork();
	if (pid == 0)
		_exit(setns(nsfd, CLONE_NEWNET) < 0 ? 2 : nft_table_op(name, del));
	close(nsfd);
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -EIO;
	return WEXITSTATUS(status) == 0 ? 1 : WEXITSTATUS(status) == 1 ? 0 : -EIO;
}
