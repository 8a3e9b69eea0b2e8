/* SPDX-License-Identifier: MIT */
/* One worker over several nodes (cusnap ... --group, DESIGN.md §16): two and
 * three trees, each with its own control directory, stand for the nodes; each
 * runs its own cusnap; they meet in an etcd this test starts on the loopback
 * (Debian's etcd-server, scripts/setup-etcd.sh) and stops. */
#include <netinet/in.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/socket.h>

#include "group_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX];
static const char *no_criu; /* why the CRIU cases skip, or NULL */

/* etcd on the loopback, its data in the scratch directory, answering. */

static void etcd_start(void)
{
	etcd_pid = etcd_launch("test", "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
}

/* ---- members: each its own cusnap, run at once ---- */

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
	group_cmd_ok(g, 2, "resume", "pair");
	char *view = NULL;
	CHECK_EQ(tool(&view, NULL, cusnap, "inspect", "--group", "pair", "--etcd", etcd_url, NULL), 0);
	CHECK_CONTAINS(view, "0 member(s) at work");
	char host[256] = "", m0[300];
	gethostname(host, sizeof(host) - 1);
	snprintf(m0, sizeof(m0), "member m0 on %s: ok", host);
	CHECK_EQ(count_of(view, m0), 2); /* (the suspend's and the resume's results, with their host) */
	CHECK_CONTAINS(view, "(suspend, ");
	CHECK_CONTAINS(view, "(resume, ");
	CHECK_CONTAINS(view, "no boundary (each member resumes its own tree)");
	CHECK(!contains(view, "undecided"));
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

/* Two trees (TAG0, TAG1) suspended as group NAME, member m1 with fault
 * (CUSNAP_FAULT=...): exit codes into rc, what each said into out. */
static void suspend_m1_with(struct group g[2], const char *tag, const char *name, const char *fault,
			    const char *timeout, int rc[2], char *out[2])
{
	trees_start(g, 2, tag);
	char *f[] = {(char *)fault, NULL}, *const * env[] = {NULL, f};
	group_cmd(g, 2, "suspend", name, env, timeout, rc, out);
}

/* A member failing at its boundary (after its prepare): every member undoes,
 * exit 1 naming it; the trees run on untouched. */
static void member_fails(void)
{
	struct group g[2];
	int rc[2];
	char *out[2];
	suspend_m1_with(g, "fail", "faulty", "CUSNAP_FAULT=group-ready:fail", NULL, rc, out);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(rc[i], 1);
		CHECK_CONTAINS(out[i], "member m1 failed");
		/* (m0 came after m1 had failed, on a busy machine: nothing done there) */
		CHECK(strstr(out[i], "everything undone") || strstr(out[i], "failed before this member came"));
		untouched(&g[i]);
		CHECK_NOTHING_SAID(g[i].ctl);
	}
	free_all(out, 2);
	group_cmd_ok(g, 2, "suspend", "faulty"); /* (the group is free again) */
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
	trees_pass(g, 2);
}

/* A member's cusnap killed at its boundary: its lease expires, the others
 * undo (and name it); `cusnap resume` brings its own tree back. */
static void member_killed(void)
{
	struct group g[2];
	int rc[2];
	char *out[2];
	suspend_m1_with(g, "kill", "killed", "CUSNAP_FAULT=group-ready:self", "60000", rc, out);
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

/* A member that comes after the operation it belongs to was undone and ended
 * (m1 failed at its boundary and left before m0 came): m0 is told at once
 * what was decided (it began an operation of its own and waited out the
 * group timeout for m1), nothing done; told once, its next try with m1
 * begins anew. */
static void member_late(void)
{
	struct group g[2];
	trees_start(g, 2, "late");
	struct member m[2];
	char *fault[] = {"CUSNAP_FAULT=group-ready:fail", NULL}, *out;
	in_place(&m[1], &g[1], "suspend", "lately", 2, "m1", fault, "20000");
	CHECK_EQ(member_wait(&m[1], &out), 1);
	free(out);
	in_place(&m[0], &g[0], "suspend", "lately", 2, "m0", NULL, "20000");
	CHECK_EQ(member_wait(&m[0], &out), 1);
	static const char *const says[] = {"failed before this member came", "member m1 failed at its boundary"};
	for (size_t i = 0; i < 2; i++)
		CHECK_CONTAINS(out, says[i]);
	CHECK(!contains(out, "arrived within")); /* (not an operation of its own, timed out) */
	free(out);
	untouched(&g[0]), untouched(&g[1]);
	CHECK_NOTHING_SAID(g[0].ctl);
	CHECK_NOTHING_SAID(g[1].ctl);
	group_cmd_ok(g, 2, "suspend", "lately");
	group_cmd_ok(g, 2, "resume", "lately");
	trees_pass(g, 2);
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
	trees_pass(g, 2);
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

int main(void)
{
	no_criu = getenv("CUSNAP_SANITIZER")           ? "CRIU does not dump sanitizer runtimes' shadow memory"
		  : geteuid() != 0                     ? "CRIU needs root"
		  : test_find_criu(criu, sizeof(criu)) ? "no CRIU (scripts/setup-criu.sh)"
						       : NULL;
	e2e_init("group");
	group_util_init();
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	etcd_start();
	test_run("two trees linked by TCP: group suspend and resume; the ranks still talk", suspend_resume_two);
	test_run("three trees: group checkpoint and restore, one JSON result each", checkpoint_restore_three);
	test_run("a member failing after its prepare: every member undoes, naming it; one late to a resume resumes",
		 member_fails);
	test_run("a member killed at its boundary: its lease expires, the others undo", member_killed);
	test_run("a member that never comes: the others time out, their trees untouched", member_missing);
	test_run("a member that comes after its operation was undone and ended: told at once; its next try begins anew",
		 member_late);
	test_run("etcd down: refused (69), nothing changed; a second operation on a busy group refused (75)", refusals);
	test_run("restore: a member failing makes every restored tree die, no restore-complete", restore_member_fails);
	etcd_stop();
	return e2e_done();
}
