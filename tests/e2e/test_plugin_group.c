/* SPDX-License-Identifier: MIT */
/* The CRIU plugin in a group (DESIGN.md §16): two trees, each dumped by its
 * own plain `criu dump` with cusnap's plugin, meet as one group in an etcd this
 * test starts on the loopback, with nothing but the group's settings in CRIU's
 * environment (CUSNAP_GROUP, CUSNAP_MEMBERS, CUSNAP_ETCD, CUSNAP_MEMBER): both
 * dumped (one 5 s after the other, longer than CRIU's own --timeout 3: the
 * wait at the boundary is the plugin's to bound), both restored by their own
 * `criu restore` and passing; and a member
 * failing at its boundary keeps the other from crossing (its dump fails, its
 * tree runs on, told nothing). */
#include <sys/prctl.h>

#include "group_util.h"

static char criu[PATH_MAX], plugins[PATH_MAX], libcuda[PATH_MAX + 32];

/* criu OP (dump of g's tree, or restore of its images) as member NAME of
 * group GROUP, started (extra: one more environment entry, or NULL). */
static pid_t member_criu(const char *op, const struct group *g, const char *group, const char *name, const char *extra,
			 char log[PATH_MAX + 32])
{
	char images[PATH_MAX + 32], pidfile[PATH_MAX + 32], pid[16], e_group[160], e_member[160], e_etcd[128];
	snprintf(images, sizeof(images), "%s/images", g->ctl);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", g->ctl);
	snprintf(pid, sizeof(pid), "%d", (int)g->root);
	snprintf(e_group, sizeof(e_group), "CUSNAP_GROUP=%s", group);
	snprintf(e_member, sizeof(e_member), "CUSNAP_MEMBER=%s", name);
	snprintf(e_etcd, sizeof(e_etcd), "CUSNAP_ETCD=%s", etcd_url);
	snprintf(log, PATH_MAX + 32, "%s/%s-%s.log", g->ctl, op, name);
	char *env[] = {libcuda,
		       "CUSNAP_CONTENT=host",
		       "CUSNAP_MEMBERS=2",
		       "CUSNAP_GROUP_TIMEOUT_MS=20000",
		       e_group,
		       e_member,
		       e_etcd,
		       (char *)extra,
		       NULL};
	mkdir(images, 0700);
	const char *shell = getsid(g->root) != g->root ? "--shell-job" : NULL;
	if (!strcmp(op, "dump")) {
		/* (CRIU's own --timeout short: a member waiting at its boundary longer than
		 * it is the plugin's to bound, not CRIU's) */
		char *argv[] = {criu,        "dump", "-t",  pid,        "-D",    images,        "-o", "dump.log",
				"--timeout", "3",    "-v4", "--libdir", plugins, (char *)shell, NULL};
		return test_spawn(argv, env, log);
	}
	unlink(pidfile);
	char *argv[] = {criu,  "restore",  "-d",    "-D",        images,  "-o",          "restore.log",
			"-v4", "--libdir", plugins, "--pidfile", pidfile, (char *)shell, NULL};
	return test_spawn(argv, env, log);
}

/* Its exit status (-1: not within 120 s); what it printed into *out. */
static int criu_wait(pid_t pid, const char *log, char **out)
{
	int st = test_wait_child(pid, 120000);
	*out = test_read_file(log);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Both trees dumped as one group, then both restored as one; each passes. */
static void dumped_and_restored_together(void)
{
	struct group g[2];
	trees_start(g, 2, "pg");
	char log[2][PATH_MAX + 32], *out;
	pid_t p[2];
	for (int i = 0; i < 2; i++) {
		if (i)
			sleep(5); /* (n0 waits at its boundary past CRIU's --timeout 3) */
		p[i] = member_criu("dump", &g[i], "plugged", i ? "n1" : "n0", NULL, log[i]);
	}
	for (int i = 0; i < 2; i++) /* (both waited for before the dumped trees are reaped) */
		CHECK_SAYS(out, criu_wait(p[i], log[i], &out), 0, "every one of the 2 members ready: crossing");
	for (int i = 0; i < 2; i++)
		group_dumped(&g[i]);
	for (int i = 0; i < 2; i++)
		p[i] = member_criu("restore", &g[i], "plugged", i ? "n1" : "n0", NULL, log[i]);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(criu_wait(p[i], log[i], &out), 0);
		CHECK_CONTAINS(out, "restore-complete written");
		CHECK_CONTAINS(out, "member n0: ok");
		CHECK_CONTAINS(out, "member n1: ok");
		free(out);
	}
	for (int i = 0; i < 2; i++) {
		char pidfile[PATH_MAX + 32], *text;
		snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", g[i].ctl);
		text = test_read_file(pidfile);
		pid_t root = text ? (pid_t)atoi(text) : 0;
		free(text);
		CHECK(root > 0);
		if (root > 0)
			CHECK_EQ(restored_passes(&g[i], root), 2);
	}
}

/* Member n1 fails at its boundary (n0 there first): n0's dump fails too,
 * naming it; both trees run on as before, told nothing, and verify themselves. */
static void one_fails_none_crosses(void)
{
	struct group g[2];
	trees_start(g, 2, "pf");
	char log[2][PATH_MAX + 32], *out;
	pid_t p[2];
	p[0] = member_criu("dump", &g[0], "plugfail", "n0", NULL, log[0]);
	/* n1 joins once n0 has: on a busy machine n1 could otherwise fail and
	 * leave before n0 arrives, and n0 begin an operation of its own, which
	 * then times out without n1 to name. */
	bool joined = false;
	for (int waited = 0; !joined && waited < 60000; waited += 50) {
		char *text = test_read_file(log[0]);
		joined = contains(text, "member n0 of 2 for checkpoint");
		free(text);
		if (!joined)
			usleep(50000);
	}
	CHECK(joined);
	p[1] = member_criu("dump", &g[1], "plugfail", "n1", "CUSNAP_FAULT=group-ready:fail", log[1]);
	for (int i = 0; i < 2; i++) {
		CHECK(criu_wait(p[i], log[i], &out) != 0);
		CHECK_CONTAINS(out, "member n1 failed");
		free(out);
		untouched(&g[i]);
		CHECK_NOTHING_SAID(g[i].ctl);
		CHECK_EQ(group_finish(&g[i]), 2);
	}
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("plugin-group");
	group_util_init();
	snprintf(plugins, sizeof(plugins), "%s/../lib/criu", bin_dir);
	snprintf(libcuda, sizeof(libcuda), "CUSNAP_LIBCUDA=%s/libcuda.so.1", emu_dir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	etcd_pid = etcd_launch("plugin", "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
	test_run("two plain criu dumps with the plugin as one group, then two restores: both pass",
		 dumped_and_restored_together);
	test_run("a member failing at its boundary: the other's dump fails too, both trees run on, told nothing",
		 one_fails_none_crosses);
	return e2e_done();
}
