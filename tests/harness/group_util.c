/* SPDX-License-Identifier: MIT */
/* What the group tests share (tests/e2e/group_util.h): an etcd of their own on
 * the loopback, members started as cusnap commands, trees standing for nodes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../e2e/group_util.h"

char etcd_url[64];
const char *etcd_extra[12];
pid_t etcd_pid;
const char *etcd_host = "127.0.0.1";
static char cusnap[PATH_MAX];

void group_util_init(void)
{
	cusnap_path(cusnap, sizeof(cusnap));
}

/* A port nothing listens on now (the kernel's pick). */
int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int port = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
				   getsockname(s, (struct sockaddr *)&a, &len) == 0
			   ? ntohs(a.sin_port)
			   : -1;
	if (s >= 0)
		close(s);
	return port;
}

void etcd_stop(void)
{
	if (etcd_pid > 0) {
		kill(etcd_pid, SIGKILL);
		test_wait_child(etcd_pid, 10000);
	}
	etcd_pid = 0;
}

/* The etcd server to run (build/etcd-path, else PATH) into out; skips without one. */
void etcd_binary(char out[PATH_MAX])
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/../etcd-path", tests_dir);
	char *given = test_read_file(path);
	out[0] = '\0';
	if (given && *given)
		snprintf(out, PATH_MAX, "%.*s", (int)strcspn(given, "\n"), given);
	free(given);
	for (const char *d = getenv("PATH"); !out[0] && d && *d; d += strcspn(d, ":") + (d[strcspn(d, ":")] != 0)) {
		snprintf(out, PATH_MAX, "%.*s/etcd", (int)strcspn(d, ":"), d);
		if (access(out, X_OK) != 0)
			out[0] = '\0';
	}
	if (!out[0] || access(out, X_OK) != 0)
		SKIP("no etcd (scripts/setup-etcd.sh provides Debian's etcd-server; see build/etcd-setup.log)\n");
}

/* etcd NAME on the loopback (scheme http or https; extra: more of its flags,
 * NULL-ended), its client URL into url, started tied to this test; once
 * `cusnap inspect --group` with probe (cusnap's etcd flags) answers. */
pid_t etcd_launch(const char *name, const char *scheme, const char *const *extra, const char *const *probe,
		  char url[64])
{
	char etcd[PATH_MAX];
	etcd_binary(etcd);
	int client = free_port(), peer = free_port();
	char data[PATH_MAX + 32], client_url[64], peer_url[64], log[PATH_MAX + 32], cluster[128];
	snprintf(data, sizeof(data), "%s/etcd-%s", e2e_root, name);
	snprintf(log, sizeof(log), "%s/etcd-%s.log", e2e_root, name);
	snprintf(client_url, sizeof(client_url), "%s://%s:%d", scheme, etcd_host, client);
	snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%d", peer);
	snprintf(cluster, sizeof(cluster), "%s=%s", name, peer_url);
	snprintf(url, 64, "%s", client_url);
	const char *argv[40] = {etcd,       "--name",
				name,       "--data-dir",
				data,       "--listen-client-urls",
				client_url, "--advertise-client-urls",
				client_url, "--listen-peer-urls",
				peer_url,   "--initial-advertise-peer-urls",
				peer_url,   "--initial-cluster",
				cluster};
	int k = 15;
	for (int i = 0; extra && extra[i] && k < 38; i++)
		argv[k++] = extra[i];
	argv[k] = NULL;
	pid_t pid = test_spawn_tied((char *const *)argv, NULL, log);
	for (int i = 0; i < 200; i++) {
		const char *q[24] = {cusnap, "inspect", "--group", "probe", "--etcd", url};
		int n = 6;
		for (int j = 0; probe && probe[j] && n < 23; j++)
			q[n++] = probe[j];
		q[n] = NULL;
		char *out = NULL;
		int rc = tool(&out, NULL, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11],
			      q[12], NULL);
		free(out);
		if (rc == 0)
			return pid;
		usleep(100000);
	}
	char *text = test_read_file(log);
	printf("etcd %s did not answer within 20 s; its log:\n%s\n", name, text ? text : "");
	free(text);
	exit(1);
}

/* cusnap args... --group NAME --members N --etcd URL --member NAME, started (its
 * output into a log). */
void member_start(struct member *m, const char *group, int members, const char *name, char *const env[],
		  const char *const args[])
{
	static int runs;
	char n[16];
	const char *argv[40] = {cusnap};
	int k = 1;
	bool named = false; /* (--members NAME,NAME,... given: no count after it, the last one would win) */
	for (int i = 0; args[i]; i++)
		named |= !strcmp(args[i], "--members"), argv[k++] = args[i];
	snprintf(n, sizeof(n), "%d", members);
	const char *tail[] = {"--group", group, "--etcd", etcd_url, "--member", name, "--members", n, NULL};
	for (int i = 0; tail[i] && !(named && !strcmp(tail[i], "--members")); i++)
		argv[k++] = tail[i];
	for (int i = 0; etcd_extra[i] && k < 38; i++)
		argv[k++] = etcd_extra[i];
	argv[k] = NULL;
	snprintf(m->log, sizeof(m->log), "%s/member-%s-%d.log", e2e_root, name, ++runs);
	m->pid = test_spawn((char *const *)argv, env, m->log);
}

/* Its exit code (-1: did not end within 90 s); *out: what it printed (malloc'ed). */
int member_wait(struct member *m, char **out)
{
	int status = test_wait_child(m->pid, 90000);
	*out = test_read_file(m->log);
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void tree_args(const struct group *g, const char *cmd, char pid[16], char dir[PATH_MAX + 16], const char *argv[12])
{
	snprintf(pid, 16, "%d", g->root);
	snprintf(dir, PATH_MAX + 16, "%s/state", g->ctl);
	const char *a[] = {cmd, "--pid", pid, "--dir", dir, "--control-dir", g->ctl, "--timeout", "20000", NULL};
	memcpy(argv, a, sizeof(a));
}

void in_place(struct member *m, const struct group *g, const char *cmd, const char *group, int members,
	      const char *name, char *const env[], const char *timeout)
{
	char pid[16], dir[PATH_MAX + 16];
	const char *argv[16];
	tree_args(g, cmd, pid, dir, argv);
	int k = 9;
	if (timeout) {
		argv[k++] = "--group-timeout";
		argv[k++] = timeout;
	}
	argv[k] = NULL;
	member_start(m, group, members, name, env, argv);
}

/* Every CUDA process of g running and every participant active. */
void untouched(struct group *g)
{
	char *j = group_inspect(g);
	if (count_of(j, "\"state\":\"running\"") != 2 || count_of(j, "\"phase\":\"active\"") != 2)
		test_fail(__FILE__, __LINE__, "the tree of %d is not as it was:\n%s", (int)g->root, j ? j : "");
	free(j);
}

/* Does pid no longer run (none, or a zombie)? */
bool gone(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *text = test_read_file(path);
	const char *end = text ? strrchr(text, ')') : NULL;
	bool dead = !end || end[1] != ' ' || end[2] == 'Z' || end[2] == 'X';
	free(text);
	return dead;
}

void restore_complete(struct group *g)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/restore-complete", g->ctl);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	close(fd);
}

void trees_pass(struct group *g, int n)
{
	for (int i = 0; i < n; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
}

/* Run cmd on trees g[0..n) as one group at once (member names m0, m1, ...;
 * env[i] for member i, NULL: none); every member's exit code into rc[i],
 * what it printed into out[i] (malloc'ed). */
void group_cmd(struct group *g, int n, const char *cmd, const char *group, char *const *env[], const char *timeout,
	       int rc[], char *out[])
{
	struct member m[4];
	for (int i = 0; i < n; i++) {
		char name[8];
		snprintf(name, sizeof(name), "m%d", i);
		in_place(&m[i], &g[i], cmd, group, n, name, env ? env[i] : NULL, timeout);
	}
	for (int i = 0; i < n; i++)
		rc[i] = member_wait(&m[i], &out[i]);
}

void group_cmd_ok(struct group *g, int n, const char *cmd, const char *group)
{
	int rc[8];
	char *out[8];
	group_cmd(g, n, cmd, group, NULL, NULL, rc, out);
	for (int i = 0; i < n; i++)
		if (rc[i] != 0)
			test_fail(__FILE__, __LINE__, "member m%d's %s of group %s exited %d:\n%s", i, cmd, group,
				  rc[i], out[i] ? out[i] : "");
	free_all(out, n);
}

void free_all(char *out[], int n)
{
	for (int i = 0; i < n; i++)
		free(out[i]);
}

/* n trees of one worker each, named TAG0, TAG1, ... */
void trees_start(struct group *g, int n, const char *tag)
{
	for (int i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "%s%d", tag, i);
		CHECK_EQ(group_start(&g[i], name, 1, 2, false, NULL, NULL, NULL), 0);
	}
}
