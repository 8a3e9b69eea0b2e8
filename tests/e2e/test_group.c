/* SPDX-License-Identifier: MIT */
/* One worker over several nodes (cusnap ... --group, DESIGN.md §16): two and
 * three trees, each with its own control directory, stand for the nodes; each
 * runs its own cusnap; they meet in an etcd this test starts on the loopback
 * (Debian's etcd-server, scripts/setup-etcd.sh) and stops. */
#include <netinet/in.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/socket.h>

#include "e2e_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX], etcd_url[64];
static const char *no_criu; /* why the CRIU cases skip, or NULL */
static pid_t etcd_pid;
/* cusnap's etcd flags for every member (the secured etcds' certificates, user). */
static const char *etcd_extra[12];

/* A port nothing listens on now (the kernel's pick). */
static int free_port(void)
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

static void etcd_stop(void)
{
	if (etcd_pid > 0) {
		kill(etcd_pid, SIGKILL);
		test_wait_child(etcd_pid, 10000);
	}
	etcd_pid = 0;
}

/* etcd on the loopback, its data in the scratch directory, answering. */
/* The etcd server to run (build/etcd-path, else PATH) into out; skips without one. */
static void etcd_binary(char out[PATH_MAX])
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
static pid_t etcd_launch(const char *name, const char *scheme, const char *const *extra, const char *const *probe,
			 char url[64])
{
	char etcd[PATH_MAX];
	etcd_binary(etcd);
	int client = free_port(), peer = free_port();
	char data[PATH_MAX + 32], client_url[64], peer_url[64], log[PATH_MAX + 32], cluster[128];
	snprintf(data, sizeof(data), "%s/etcd-%s", e2e_root, name);
	snprintf(log, sizeof(log), "%s/etcd-%s.log", e2e_root, name);
	snprintf(client_url, sizeof(client_url), "%s://127.0.0.1:%d", scheme, client);
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

static void etcd_start(void)
{
	etcd_pid = etcd_launch("test", "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
}

/* ---- members: each its own cusnap, run at once ---- */

struct member {
	pid_t pid;
	char log[PATH_MAX + 32];
};

/* cusnap args... --group NAME --members N --etcd URL --member NAME, started (its
 * output into a log). */
static void member_start(struct member *m, const char *group, int members, const char *name, char *const env[],
			 const char *const args[])
{
	static int runs;
	char n[16];
	const char *argv[40] = {cusnap};
	int k = 1;
	for (int i = 0; args[i]; i++)
		argv[k++] = args[i];
	snprintf(n, sizeof(n), "%d", members);
	const char *tail[] = {"--group", group, "--members", n, "--etcd", etcd_url, "--member", name, NULL};
	for (int i = 0; tail[i]; i++)
		argv[k++] = tail[i];
	for (int i = 0; etcd_extra[i] && k < 38; i++)
		argv[k++] = etcd_extra[i];
	argv[k] = NULL;
	snprintf(m->log, sizeof(m->log), "%s/member-%s-%d.log", e2e_root, name, ++runs);
	m->pid = test_spawn((char *const *)argv, env, m->log);
}

/* Its exit code (-1: did not end within 90 s); *out: what it printed (malloc'ed). */
static int member_wait(struct member *m, char **out)
{
	int status = test_wait_child(m->pid, 90000);
	*out = test_read_file(m->log);
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define MEMBER_OK(m)                                                                                   \
	do {                                                                                           \
		char *out_;                                                                            \
		int rc_ = member_wait((m), &out_);                                                     \
		if (rc_ != 0)                                                                          \
			test_fail(__FILE__, __LINE__, "member exited %d:\n%s", rc_, out_ ? out_ : ""); \
		free(out_);                                                                            \
	} while (0)

static void tree_args(const struct group *g, const char *cmd, char pid[16], char dir[PATH_MAX + 16],
		      const char *argv[12])
{
	snprintf(pid, 16, "%d", g->root);
	snprintf(dir, PATH_MAX + 16, "%s/state", g->ctl);
	const char *a[] = {cmd, "--pid", pid, "--dir", dir, "--control-dir", g->ctl, "--timeout", "20000", NULL};
	memcpy(argv, a, sizeof(a));
}

static void in_place(struct member *m, const struct group *g, const char *cmd, const char *group, int members,
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
static void untouched(struct group *g)
{
	char *j = group_inspect(g);
	if (count_of(j, "\"state\":\"running\"") != 2 || count_of(j, "\"phase\":\"active\"") != 2)
		test_fail(__FILE__, __LINE__, "the tree of %d is not as it was:\n%s", (int)g->root, j ? j : "");
	free(j);
}

/* Does pid no longer run (none, or a zombie)? */
static bool gone(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *text = test_read_file(path);
	const char *end = text ? strrchr(text, ')') : NULL;
	bool dead = !end || end[1] != ' ' || end[2] == 'Z' || end[2] == 'X';
	free(text);
	return dead;
}

static void restore_complete(struct group *g)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/restore-complete", g->ctl);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	close(fd);
}

/* A signal at the boundary: one member of two waits there (its peer never
 * comes, the group timeout is long); SIGINT ends it at once (not at the group
 * timeout), its tree untouched, and the decision says why. */
static void signal_at_boundary(void)
{
	struct group g;
	if (group_start_pair(&g, "sig") < 0)
		return;
	struct member m;
	in_place(&m, &g, "suspend", "sig", 2, "m0", NULL, "60000");
	/* (at the boundary once inspect --group shows it ready) */
	for (int waited = 0; waited < 200; waited++) {
		char *view = NULL;
		tool(&view, NULL, cusnap, "inspect", "--group", "sig", "--etcd", etcd_url, NULL);
		bool ready = contains(view, "member m0: suspend of 2 members, ready");
		free(view);
		if (ready)
			break;
		usleep(50000);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	kill(m.pid, SIGINT);
	char *out;
	int rc = member_wait(&m, &out);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK_EQ(rc, 1);
	CHECK_CONTAINS(out, "interrupted by Interrupt at the boundary");
	CHECK_CONTAINS(out, "everything undone");
	if (took > 10000)
		test_fail(__FILE__, __LINE__, "the member took %.0f ms to end after SIGINT (the group timeout is 60 s)",
			  took);
	free(out);
	untouched(&g);
	group_done(&g, 2);
}

/* Run cmd on trees g[0..n) as one group at once (member names m0, m1, ...;
 * env[i] for member i, NULL: none); every member's exit code into rc[i],
 * what it printed into out[i] (malloc'ed). */
static void group_cmd(struct group *g, int n, const char *cmd, const char *group, char *const *env[],
		      const char *timeout, int rc[], char *out[])
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

static void free_all(char *out[], int n)
{
	for (int i = 0; i < n; i++)
		free(out[i]);
}

/* Two trees linked by TCP suspended and resumed as one group; the ranks still
 * talk; every member prints every member's result; inspect --group shows them. */
static void suspend_resume_two(void)
{
	struct group g[2];
	int port = free_port(), rc[2];
	char listen_on[48], connect_to[48], *out[2];
	snprintf(listen_on, sizeof(listen_on), "VMM_GROUP_TCP=listen:%d", port);
	snprintf(connect_to, sizeof(connect_to), "VMM_GROUP_TCP=connect:%d", port);
	char *env_a[] = {listen_on, NULL}, *env_b[] = {connect_to, NULL};
	/* (each waits for the other's connection before it is ready) */
	group_launch(&g[0], "tcp-a", 1, 2, false, NULL, env_a, NULL, false);
	CHECK_EQ(group_start(&g[1], "tcp-b", 1, 2, false, NULL, env_b, NULL), 0);
	CHECK_EQ(group_wait_ready(&g[0], "tcp-a"), 0);
	group_cmd(g, 2, "suspend", "pair", NULL, NULL, rc, out);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(rc[i], 0);
		CHECK_CONTAINS(out[i], "every one of the 2 members ready: crossing");
		CHECK_CONTAINS(out[i], "group pair: suspend: member m0: ok");
		CHECK_CONTAINS(out[i], "group pair: suspend: member m1: ok");
		char *j = group_inspect(&g[i]);
		CHECK_EQ(count_of(j, "\"state\":\"checkpointed\""), 2);
		free(j);
	}
	free_all(out, 2);
	group_cmd(g, 2, "resume", "pair", NULL, NULL, rc, out);
	CHECK_EQ(rc[0], 0);
	CHECK_EQ(rc[1], 0);
	free_all(out, 2);
	char *view = NULL;
	CHECK_EQ(tool(&view, NULL, cusnap, "inspect", "--group", "pair", "--etcd", etcd_url, NULL), 0);
	CHECK_CONTAINS(view, "0 member(s) at work");
	CHECK_EQ(count_of(view, "member m0: ok"), 2); /* (the suspend's and the resume's results) */
	free(view);
	for (int i = 0; i < 2; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
	}
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(group_finish(&g[i]), 2);
		char *log = test_read_file(g[i].log);
		CHECK_CONTAINS(log, "token restored exchanged with the other tree");
		free(log);
	}
}

/* n trees of one worker each, named TAG0, TAG1, ... */
static void trees_start(struct group *g, int n, const char *tag)
{
	for (int i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "%s%d", tag, i);
		CHECK_EQ(group_start(&g[i], name, 1, 2, false, NULL, NULL, NULL), 0);
	}
}

/* For the CRIU cases: the trees, each with a checkpoint directory and its
 * root's PID as an argument. false (said) when they skip. */
static bool criu_trees_start(struct group *g, int n, const char *tag, char ck[][PATH_MAX + 16], char pid[][16])
{
	if (no_criu) {
		printf("  skipped: %s\n", no_criu);
		return false;
	}
	trees_start(g, n, tag);
	for (int i = 0; i < n; i++) {
		snprintf(ck[i], PATH_MAX + 16, "%s/%s-%d", e2e_root, tag, i);
		snprintf(pid[i], 16, "%d", g[i].root);
	}
	return true;
}

/* Three trees checkpointed and restored as one group; --json: one object. */
static void checkpoint_restore_three(void)
{
	struct group g[3];
	struct member m[3];
	char ck[3][PATH_MAX + 16], pid[3][16], name[3][8], *out;
	if (!criu_trees_start(g, 3, "ck", ck, pid))
		return;
	for (int i = 0; i < 3; i++) {
		snprintf(name[i], sizeof(name[i]), "n%d", i);
		const char *argv[] = {"checkpoint", "--pid",  pid[i], "--dir",  ck[i], "--control-dir",
				      g[i].ctl,     "--criu", criu,   "--json", NULL};
		member_start(&m[i], "trio", 3, name[i], NULL, argv);
	}
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(member_wait(&m[i], &out), 0);
		CHECK_CONTAINS(out, "\"members_ok\":3");
		CHECK_CONTAINS(out, "\"holds_checkpoint\":true");
		free(out);
	}
	for (int i = 0; i < 3; i++) /* (every member waited for first: this reaps whatever ended) */
		group_dumped(&g[i]);
	for (int i = 0; i < 3; i++) {
		const char *argv[] = {"restore", "--dir", ck[i], "--criu", criu, NULL};
		member_start(&m[i], "trio", 3, name[i], NULL, argv);
	}
	for (int i = 0; i < 3; i++)
		MEMBER_OK(&m[i]);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(restored_passes(&g[i], restored_root(ck[i])), 2);
}

/* A member failing at its boundary (after its prepare): every member undoes,
 * exit 1 naming it; the trees run on untouched. */
static void member_fails(void)
{
	struct group g[2];
	int rc[2];
	char *out[2];
	trees_start(g, 2, "fail");
	char *fault[] = {"CUSNAP_FAULT=group-ready:fail", NULL}, *const * env[] = {NULL, fault};
	group_cmd(g, 2, "suspend", "faulty", env, NULL, rc, out);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(rc[i], 1);
		CHECK_CONTAINS(out[i], "member m1 failed");
		CHECK_CONTAINS(out[i], "everything undone");
		untouched(&g[i]);
	}
	free_all(out, 2);
	group_cmd(g, 2, "suspend", "faulty", NULL, NULL, rc, out); /* (the group is free again) */
	CHECK_EQ(rc[0], 0);
	CHECK_EQ(rc[1], 0);
	free_all(out, 2);
	/* A resume has no boundary: m0, coming after m1 resumed its tree (m1 held
	 * while it waits for the others' results), still resumes its own. */
	struct member m[2];
	char *held[] = {"CUSNAP_FAULT=group-done:stop", NULL};
	in_place(&m[1], &g[1], "resume", "faulty", 2, "m1", held, "30000");
	bool done = false;
	for (int i = 0; i < 200 && !done; i++, usleep(50000)) {
		char *text = NULL;
		tool(&text, NULL, cusnap, "inspect", "--group", "faulty", "--etcd", etcd_url, NULL);
		done = contains(text, "member m1: resume of 2 members, done");
		free(text);
	}
	CHECK(done);
	in_place(&m[0], &g[0], "resume", "faulty", 2, "m0", NULL, "30000");
	MEMBER_OK(&m[0]);
	kill(m[1].pid, SIGCONT);
	MEMBER_OK(&m[1]);
	for (int i = 0; i < 2; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
}

/* A member's cusnap killed at its boundary: its lease expires, the others
 * undo (and name it); `cusnap resume` brings its own tree back. */
static void member_killed(void)
{
	struct group g[2];
	int rc[2];
	char *out[2];
	trees_start(g, 2, "kill");
	char *fault[] = {"CUSNAP_FAULT=group-ready:self", NULL}, *const * env[] = {NULL, fault};
	group_cmd(g, 2, "suspend", "killed", env, "60000", rc, out);
	CHECK_EQ(rc[0], 1);
	CHECK_CONTAINS(out[0], "member m1 is gone");
	CHECK_CONTAINS(out[0], "everything undone");
	/* (it did not wait the 60 s group timeout for m1's result: m1 is gone) */
	CHECK_CONTAINS(out[0], "1 of 2 members reported; the others are no longer in the group");
	CHECK(!contains(out[0], "reported within"));
	CHECK_EQ(rc[1], -1); /* (killed) */
	free_all(out, 2);
	untouched(&g[0]);
	char *o = NULL;
	CHECK_EQ(group_resume(&g[1], &o, NULL), 0);
	free(o);
	untouched(&g[1]);
	for (int i = 0; i < 2; i++) {
		restore_complete(&g[i]);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
}

/* A member that never comes: the one that came times out and undoes. */
static void member_missing(void)
{
	struct group g;
	struct member m;
	char *out;
	CHECK_EQ(group_start_pair(&g, "alone"), 0);
	in_place(&m, &g, "suspend", "missing", 2, "m0", NULL, "1500");
	CHECK_EQ(member_wait(&m, &out), 1);
	CHECK_CONTAINS(out, "1 of 2 members arrived within 1500 ms");
	CHECK_CONTAINS(out, "everything undone");
	free(out);
	untouched(&g);
	restore_complete(&g);
	CHECK_EQ(group_finish(&g), 2);
}

/* etcd that cannot be reached: refused (69) before anything changes; a
 * second operation on a busy group: refused (75), nothing changed. */
static void refusals(void)
{
	struct group g[2];
	char pid[16], dir[PATH_MAX + 16], *out = NULL;
	trees_start(g, 2, "busy");
	snprintf(pid, sizeof(pid), "%d", g[0].root);
	snprintf(dir, sizeof(dir), "%s/state", g[0].ctl);
	int down = free_port();
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", down);
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--dir", dir, "--control-dir", g[0].ctl, "--group",
		      "down", "--members", "2", "--etcd", url, NULL),
		 69);
	CHECK_CONTAINS(out, "unreachable");
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	out = NULL;
	/* libcurl is loaded only for a group: one that cannot be is named. */
	char libs[PATH_MAX + 16], curl[PATH_MAX + 32], env_libs[PATH_MAX + 32];
	snprintf(libs, sizeof(libs), "%s/no-curl", e2e_root);
	snprintf(curl, sizeof(curl), "%s/libcurl.so.4", libs);
	snprintf(env_libs, sizeof(env_libs), "LD_LIBRARY_PATH=%s", libs);
	mkdir(libs, 0700);
	close(open(curl, O_WRONLY | O_CREAT | O_TRUNC, 0600)); /* not a library */
	char *no_curl[] = {env_libs, NULL};
	CHECK_SAYS(out,
		   tool(&out, no_curl, cusnap, "suspend", "--pid", pid, "--dir", dir, "--control-dir", g[0].ctl,
			"--group", "no-curl", "--members", "2", "--etcd", etcd_url, NULL),
		   69, "groups need libcurl");
	untouched(&g[0]);
	/* m0 suspends (and waits for m1); a resume of the same group is refused meanwhile. */
	struct member m, r;
	in_place(&m, &g[0], "suspend", "one-at-a-time", 2, "m0", NULL, "30000");
	for (int i = 0; i < 100; i++) {
		free(out);
		out = NULL;
		tool(&out, NULL, cusnap, "inspect", "--group", "one-at-a-time", "--etcd", etcd_url, NULL);
		if (contains(out, "member m0: suspend"))
			break;
		usleep(100000);
	}
	free(out);
	in_place(&r, &g[1], "resume", "one-at-a-time", 2, "m1", NULL, NULL);
	CHECK_SAYS(out, member_wait(&r, &out), 75, "busy with suspend of 2 members (begun by member m0)");
	untouched(&g[1]);
	in_place(&r, &g[1], "suspend", "one-at-a-time", 2, "m1", NULL, NULL);
	MEMBER_OK(&r);
	MEMBER_OK(&m);
	int rc[2];
	char *outs[2];
	group_cmd(g, 2, "resume", "one-at-a-time", NULL, NULL, rc, outs);
	free_all(outs, 2);
	for (int i = 0; i < 2; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
}

/* A restore in which one member fails before its rebuild: every restored tree
 * is killed, no restore-complete anywhere; every member exits non-zero. */
static void restore_member_fails(void)
{
	struct group g[2];
	struct member m[2];
	char ck[2][PATH_MAX + 16], pid[2][16], *out;
	if (!criu_trees_start(g, 2, "rf", ck, pid))
		return;
	for (int i = 0; i < 2; i++) {
		char *o = NULL;
		CHECK_EQ(tool(&o, NULL, cusnap, "checkpoint", "--pid", pid[i], "--dir", ck[i], "--control-dir",
			      g[i].ctl, "--criu", criu, NULL),
			 0);
		free(o);
		group_dumped(&g[i]);
	}
	char *fault[] = {"CUSNAP_FAULT=group-ready:fail", NULL};
	for (int i = 0; i < 2; i++) {
		const char *argv[] = {"restore", "--dir", ck[i], "--criu", criu, NULL};
		member_start(&m[i], "rf", 2, i ? "r1" : "r0", i ? fault : NULL, argv);
	}
	for (int i = 0; i < 2; i++) {
		CHECK(member_wait(&m[i], &out) != 0);
		CHECK_CONTAINS(out, "member r1 failed");
		CHECK_CONTAINS(out, "restored tree killed");
		free(out);
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/restore-complete", g[i].ctl);
		CHECK(access(path, F_OK) != 0);
		pid_t root = restored_root(ck[i]);
		CHECK(root > 0 && gone(root));
	}
	reap_all();
}

/* ---- etcd as production runs it: TLS, client certificates, authentication ---- */

static char pki[PATH_MAX];

/* A CA, a server certificate for 127.0.0.1 and a client certificate (openssl),
 * in e2e_root/pki: 0, or -1. */
static int pki_make(void)
{
	snprintf(pki, sizeof(pki), "%s/pki", e2e_root);
	mkdir(pki, 0700);
	char script[PATH_MAX * 2 + 1400];
	snprintf(script, sizeof(script),
		 "set -e; cd '%s'; o() { openssl \"$@\" 2>/dev/null; }\n"
		 "o req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj /CN=cusnap-test-ca -days 2\n"
		 "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext\n"
		 "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n"
		 "for w in server client; do\n"
		 "  o req -newkey rsa:2048 -nodes -keyout $w.key -out $w.csr -subj /CN=cusnap-$w\n"
		 "  o x509 -req -in $w.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $w.crt -days 2 -extfile "
		 "$w.ext\n"
		 "done\n"
		 "chmod 600 *.key\n",
		 pki);
	char *argv[] = {"/bin/sh", "-c", script, NULL};
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/pki.log", e2e_root);
	return test_run_cmd(argv, log, 60000) == 0 ? 0 : -1;
}

/* One of etcd's gateway calls as curl makes it (the root user's token, when
 * given): 0, or -1. */
static int gateway(const char *url, const char *path, const char *body, const char *token)
{
	char ca[PATH_MAX + 16], full[160], auth[600] = "";
	snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
	snprintf(full, sizeof(full), "%s%s", url, path);
	if (token)
		snprintf(auth, sizeof(auth), "Authorization: %s", token);
	char *argv[] = {"/usr/bin/curl", "-sf", "--cacert", ca, "-H", auth[0] ? auth : "X-None: 1", "-d",
			(char *)body,    full,  NULL};
	return test_run_cmd(argv, "/dev/null", 20000) == 0 ? 0 : -1;
}

/* Authentication on in the etcd at url: root, and a user "node" (password
 * "node-pw") granted read and write of /cusnap/groups/ alone. 0, or -1. */
static int auth_enable(const char *url)
{
	/* ("L2N1c25hcC9ncm91cHMv" and "L2N1c25hcC9ncm91cHMw": /cusnap/groups/ and the key past its range) */
	const char *steps[][2] = {
		{"/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"root-pw\"}"},
		{"/v3/auth/role/add", "{\"name\":\"root\"}"},
		{"/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}"},
		{"/v3/auth/role/add", "{\"name\":\"groups\"}"},
		{"/v3/auth/role/grant", "{\"name\":\"groups\",\"perm\":{\"permType\":\"READWRITE\",\"key\":"
					"\"L2N1c25hcC9ncm91cHMv\",\"range_end\":\"L2N1c25hcC9ncm91cHMw\"}}"},
		{"/v3/auth/user/add", "{\"name\":\"node\",\"password\":\"node-pw\"}"},
		{"/v3/auth/user/grant", "{\"user\":\"node\",\"role\":\"groups\"}"},
		{"/v3/auth/enable", "{}"},
	};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (gateway(url, steps[i][0], steps[i][1], NULL) < 0) {
			printf("  etcd's gateway refused %s\n", steps[i][0]);
			return -1;
		}
	return 0;
}

/* Two trees as one group through the etcd at url with flags: suspended and
 * resumed, both members ok, both trees then passing. */
static void pair_through(const char *tag, const char *url, const char *const *flags)
{
	char saved[64];
	snprintf(saved, sizeof(saved), "%s", etcd_url);
	snprintf(etcd_url, sizeof(etcd_url), "%s", url);
	for (int i = 0; flags[i]; i++)
		etcd_extra[i] = flags[i];
	struct group g[2];
	int rc[2];
	char *out[2];
	trees_start(g, 2, tag);
	group_cmd(g, 2, "suspend", tag, NULL, NULL, rc, out);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(rc[i], 0);
		CHECK(!contains(out[i], "plain http://"));
	}
	free_all(out, 2);
	group_cmd(g, 2, "resume", tag, NULL, NULL, rc, out);
	CHECK_EQ(rc[0], 0);
	CHECK_EQ(rc[1], 0);
	free_all(out, 2);
	for (int i = 0; i < 2; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
	memset(etcd_extra, 0, sizeof(etcd_extra));
	snprintf(etcd_url, sizeof(etcd_url), "%s", saved);
}

/* inspect --group through url with flags: its exit code, what it printed in *out. */
static int inspect_through(const char *url, const char *const *flags, char **out)
{
	const char *q[16] = {"inspect", "--group", "g", "--etcd", url};
	int n = 5;
	for (int i = 0; flags[i] && n < 15; i++)
		q[n++] = flags[i];
	q[n] = NULL;
	return tool(out, NULL, cusnap, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12],
		    q[13], q[14], NULL);
}

/* etcd with mutual TLS (--client-cert-auth), and etcd with TLS and
 * authentication on (a user granted /cusnap/groups/ alone): a 2-member
 * suspend and resume through each; each refusal names its cause. */
static void tls_and_auth(void)
{
	if (access("/usr/bin/openssl", X_OK) || access("/usr/bin/curl", X_OK)) {
		printf("  (skipped: openssl and curl make the certificates and set etcd up)\n");
		return;
	}
	CHECK_EQ(pki_make(), 0);
	char ca[PATH_MAX + 16], scrt[PATH_MAX + 16], skey[PATH_MAX + 16], ccrt[PATH_MAX + 16], ckey[PATH_MAX + 16],
		pw[PATH_MAX + 16], bad[PATH_MAX + 16], open_pw[PATH_MAX + 16], mtls[64], authed[64], *out;
	snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
	snprintf(scrt, sizeof(scrt), "%s/server.crt", pki);
	snprintf(skey, sizeof(skey), "%s/server.key", pki);
	snprintf(ccrt, sizeof(ccrt), "%s/client.crt", pki);
	snprintf(ckey, sizeof(ckey), "%s/client.key", pki);
	const char *tls[] = {"--cert-file",       scrt, "--key-file",         skey,
			     "--trusted-ca-file", ca,   "--client-cert-auth", NULL};
	const char *mine[] = {"--etcd-cacert", ca, "--etcd-cert", ccrt, "--etcd-key", ckey, NULL};
	pid_t a = etcd_launch("mtls", "https", tls, mine, mtls);
	pair_through("mtls", mtls, mine);
	const char *no_client[] = {"--etcd-cacert", ca, NULL},
		   *no_ca[] = {"--etcd-cert", ccrt, "--etcd-key", ckey, NULL};
	CHECK_SAYS(out, inspect_through(mtls, no_client, &out), 69, "client");
	CHECK_SAYS(out, inspect_through(mtls, no_ca, &out), 69, "etcd's certificate cannot be verified");
	kill(a, SIGKILL);
	test_wait_child(a, 10000);

	const char *tls_only[] = {"--cert-file", scrt, "--key-file", skey, NULL},
		   *ca_only[] = {"--etcd-cacert", ca, NULL};
	pid_t b = etcd_launch("auth", "https", tls_only, ca_only, authed);
	CHECK_EQ(auth_enable(authed), 0);
	snprintf(pw, sizeof(pw), "%s/node.pw", pki);
	snprintf(bad, sizeof(bad), "%s/bad.pw", pki);
	snprintf(open_pw, sizeof(open_pw), "%s/open.pw", pki);
	test_write_file(pw, "node-pw\n");
	test_write_file(bad, "guess\n");
	test_write_file(open_pw, "node-pw\n");
	chmod(pw, 0600);
	chmod(bad, 0600);
	chmod(open_pw, 0644);
	const char *user[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", pw, NULL};
	pair_through("authed", authed, user);
	const char *wrong[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", bad, NULL};
	CHECK_SAYS(out, inspect_through(authed, wrong, &out), 69, "authentication");
	CHECK_SAYS(out, inspect_through(authed, ca_only, &out), 69, "(authentication");
	const char *readable[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", open_pw, NULL};
	CHECK_SAYS(out, inspect_through(authed, readable, &out), 64, "no one else can read");
	kill(b, SIGKILL);
	test_wait_child(b, 10000);
}

int main(void)
{
	no_criu = getenv("CUSNAP_SANITIZER")           ? "CRIU does not dump sanitizer runtimes' shadow memory"
		  : geteuid() != 0                     ? "CRIU needs root"
		  : test_find_criu(criu, sizeof(criu)) ? "no CRIU (scripts/setup-criu.sh)"
						       : NULL;
	e2e_init("group");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	etcd_start();
	test_run("two trees linked by TCP: group suspend and resume; the ranks still talk", suspend_resume_two);
	test_run("three trees: group checkpoint and restore, one JSON result each", checkpoint_restore_three);
	test_run("a member failing after its prepare: every member undoes, naming it; one late to a resume resumes",
		 member_fails);
	test_run("a member killed at its boundary: its lease expires, the others undo", member_killed);
	test_run("a member that never comes: the others time out, their trees untouched", member_missing);
	test_run("SIGINT at the boundary: the member undoes at once, its tree untouched", signal_at_boundary);
	test_run("etcd with mutual TLS, and with TLS and a user granted its prefix: a group through each; refusals "
		 "named",
		 tls_and_auth);
	test_run("etcd down: refused (69), nothing changed; a second operation on a busy group refused (75)", refusals);
	test_run("restore: a member failing makes every restored tree die, no restore-complete", restore_member_fails);
	etcd_stop();
	return e2e_done();
}
