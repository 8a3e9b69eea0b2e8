/* SPDX-License-Identifier: MIT */
/* Safe as root beside other commands and other users (DESIGN.md §9, §12): one
 * command per tree, and nothing written through a path someone else controls. */
#include "sweep.h"

static char cusnap[PATH_MAX];

/* Two commands on one tree at once: while a suspend is under way (held,
 * stopped, after QUIESCE), a second suspend, a resume and the coordinator's
 * prepare are refused with exit 75, the holder named and nothing changed;
 * inspect names the holder instead of calling the tree half-done; the first
 * suspend then completes, and the group comes back whole. */
static void one_command_per_tree(void)
{
	struct group g;
	if (group_start_pair(&g, "busy") < 0)
		return;
	char pid[16], log[PATH_MAX + 32], dir[PATH_MAX + 32], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(log, sizeof(log), "%s/first.out", g.ctl);
	snprintf(dir, sizeof(dir), "%s/state", g.ctl);
	char *argv[] = {cusnap, "suspend", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, NULL};
	char *env[] = {"CUSNAP_FAULT=kill-after-quiesce:stop", NULL};
	pid_t first = test_spawn(argv, env, log);
	if (!wait_stopped(first, 20000)) {
		char *text = test_read_file(log);
		test_fail(__FILE__, __LINE__, "the first suspend did not stop after QUIESCE:\n%s", text ? text : "");
		free(text);
	}
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL), 75);
	CHECK_CONTAINS(out, "held by cusnap suspend --pid");
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	CHECK_EQ(tool(&out, NULL, cusnap, "resume", "--pid", pid, "--control-dir", g.ctl, NULL), 75);
	free(out);
	pid_t pids[8];
	int n = tree_pids(g.root, pids, 8);
	char a[16], b[16], coord[PATH_MAX + 32], cd[PATH_MAX + 32], other[PATH_MAX + 32];
	snprintf(a, sizeof(a), "%d", pids[0]);
	snprintf(b, sizeof(b), "%d", pids[n > 1 ? 1 : 0]);
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	snprintf(cd, sizeof(cd), "--control-dir=%s", g.ctl);
	snprintf(other, sizeof(other), "%s/other", g.ctl);
	mkdir(other, 0700);
	CHECK_EQ(tool(&out, NULL, coord, "--prepare", cd, "--checkpoint-dir", other, "--process", a, a, "--process", b,
		      b, NULL),
		 75);
	free(out);
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--control-dir", g.ctl, "--json", NULL), 0);
	CHECK_CONTAINS(out, "\"held_by\":\"cusnap suspend --pid");
	CHECK_CONTAINS(out, "\"half_done\":false");
	CHECK_EQ(count_of(out, "\"phase\":\"quiesced\""), 2); /* where the first left them, untouched */
	free(out);
	kill(first, SIGCONT);
	int status = test_wait_child(first, 60000);
	char *text = test_read_file(log);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		test_fail(__FILE__, __LINE__, "the first suspend ended with status %#x:\n%s", status, text ? text : "");
	free(text);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	group_done(&g, 2);
}

/* A stopped participant (SIGSTOP): inspect and suspend with --timeout 1000
 * return by themselves with exit 1, name the process and change nothing;
 * after SIGCONT the group suspends, resumes and passes. */
static void stopped_participant(void)
{
	struct group g;
	if (group_start_pair(&g, "stopped") < 0)
		return;
	pid_t pids[8];
	int n = group_pids(&g, pids, 2);
	char pid[16], stopped[32], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(stopped, sizeof(stopped), "process %d", pids[n - 1]);
	kill(pids[n - 1], SIGSTOP);
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--timeout", "1000", "--control-dir", g.ctl, NULL),
		 1);
	CHECK_CONTAINS(out, stopped);
	CHECK_CONTAINS(out, "did not answer");
	free(out);
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--timeout", "1000", "--control-dir", g.ctl, NULL),
		 1);
	CHECK_CONTAINS(out, stopped);
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	kill(pids[n - 1], SIGCONT);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"phase\":\"active\""), 2);
	CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
	free(json);
	group_round_trip(&g);
}

/* Directories someone else controls (ssh's StrictModes): a --dir owned by
 * another uid or writable by others is refused with 64 by suspend and
 * restore, nothing written there and nothing changed; a run directory owned by
 * another uid refuses the command (exit 1, nothing done). In a run directory of
 * ours, a symlink planted where the state-directory note goes is replaced, not
 * followed. */
static void foreign_dirs(void)
{
	if (geteuid() != 0) {
		printf("  (skipped: making another user's directory needs root)\n");
		return;
	}
	struct group g;
	if (group_start_pair(&g, "dirs") < 0)
		return;
	char pid[16], theirs[PATH_MAX], open_to_all[PATH_MAX], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(theirs, sizeof(theirs), "%s/theirs", e2e_root);
	snprintf(open_to_all, sizeof(open_to_all), "%s/open-to-all", e2e_root);
	CHECK_EQ(mkdir(theirs, 0700), 0);
	CHECK_EQ(chown(theirs, 65534, 65534), 0);
	CHECK_EQ(mkdir(open_to_all, 0700), 0);
	CHECK_EQ(chmod(open_to_all, 0777), 0);
	const char *dirs[] = {theirs, open_to_all};
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--dir", dirs[i], "--control-dir", g.ctl,
			      NULL),
			 64);
		CHECK_CONTAINS(out, "refusing to use it");
		free(out);
		CHECK_SAYS(out, tool(&out, NULL, cusnap, "restore", "--dir", dirs[i], NULL), 64, "refusing to use it");
		char state[PATH_MAX + 32];
		snprintf(state, sizeof(state), "%s/cuda-vmm.state", dirs[i]);
		CHECK(access(state, F_OK) != 0);
	}
	/* Another user's directory or symlink on the way (they could swap what
	 * lies under it): refused too, nothing made under it. */
	char ours[PATH_MAX + 16], link[PATH_MAX + 16], via_link[PATH_MAX + 32], sub[PATH_MAX + 32];
	snprintf(ours, sizeof(ours), "%s/ours", e2e_root);
	snprintf(link, sizeof(link), "%s/link", e2e_root);
	snprintf(via_link, sizeof(via_link), "%s/ckpt", link);
	snprintf(sub, sizeof(sub), "%s/sub", theirs);
	CHECK_EQ(mkdir(ours, 0700), 0);
	CHECK_EQ(symlink(ours, link), 0);
	CHECK_EQ(lchown(link, 65534, 65534), 0);
	CHECK_EQ(mkdir(sub, 0700), 0); /* root's, inside theirs */
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--dir", via_link, "--control-dir", g.ctl, NULL),
		 64);
	CHECK_CONTAINS(out, "a symlink on the way");
	free(out);
	CHECK(access(via_link, F_OK) != 0);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--dir", sub, "--control-dir", g.ctl, NULL),
		   64, "a directory on the way");
	/* A CRIU configuration others can write (CRIU, as root, takes any option
	 * from it): refused before anything is done. */
	char cfg[PATH_MAX + 32], ckpt[PATH_MAX + 32];
	snprintf(cfg, sizeof(cfg), "%s/criu.conf", open_to_all);
	snprintf(ckpt, sizeof(ckpt), "%s/ckpt-cfg", e2e_root);
	test_write_file(cfg, "tcp-established\n");
	CHECK_EQ(chmod(cfg, 0666), 0);
	CHECK_EQ(tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", ckpt, "--control-dir", g.ctl,
		      "--criu-config", cfg, NULL),
		 64);
	CHECK_CONTAINS(out, "--criu-config");
	free(out);
	CHECK(access(ckpt, F_OK) != 0);
	char env_run[PATH_MAX + 32];
	snprintf(env_run, sizeof(env_run), "CUSNAP_RUN_DIR=%s", theirs);
	char *run_env[] = {env_run, NULL};
	CHECK_EQ(tool(&out, run_env, cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL), 1);
	CHECK_CONTAINS(out, "owned by uid 65534");
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"phase\":\"active\""), 2);
	CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
	free(json);
	/* Our own run directory, a symlink where the note goes. */
	char run[PATH_MAX], note_dir[PATH_MAX + 32], note[PATH_MAX + 48], victim[PATH_MAX + 16], state[PATH_MAX + 16];
	snprintf(run, sizeof(run), "%s/run", e2e_root);
	snprintf(note_dir, sizeof(note_dir), "%s/suspend-%d", run, g.root);
	snprintf(note, sizeof(note), "%s/state-dir", note_dir);
	snprintf(victim, sizeof(victim), "%s/victim", e2e_root);
	snprintf(state, sizeof(state), "%s/state", g.ctl);
	CHECK_EQ(mkdir(run, 0700), 0);
	CHECK_EQ(mkdir(note_dir, 0700), 0);
	/* The lock of a process long gone (its holder was killed): swept. */
	char stale[PATH_MAX + 48];
	snprintf(stale, sizeof(stale), "%s/proc-%d-1.lock", run, g.root);
	test_write_file(stale, "cusnap suspend --pid 1 (pid 1, since 0)\n");
	/* And the state of a suspended tree that was killed instead of resumed. */
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	char dead_dir[PATH_MAX + 32], dead_state[PATH_MAX + 64];
	snprintf(dead_dir, sizeof(dead_dir), "%s/suspend-%d", run, dead);
	snprintf(dead_state, sizeof(dead_state), "%s/cuda-vmm.state", dead_dir);
	CHECK_EQ(mkdir(dead_dir, 0700), 0);
	test_write_file(dead_state, "state");
	/* What a command in another PID namespace made in the same run directory
	 * (its PIDs mean nothing in this /proc): its tagged state directory and a
	 * lock it still holds stay. */
	char other_dir[PATH_MAX + 32], other_tag[PATH_MAX + 64], held[PATH_MAX + 48];
	snprintf(other_dir, sizeof(other_dir), "%s/suspend-%d", run, dead + 1000000);
	snprintf(other_tag, sizeof(other_tag), "%s/pid-namespace", other_dir);
	CHECK_EQ(mkdir(other_dir, 0700), 0);
	test_write_file(other_tag, "pid:[1]\n");
	snprintf(held, sizeof(held), "%s/proc-%d-1.lock", run, dead + 1000000);
	test_write_file(held, "cusnap suspend --pid 7 (pid 7, since 0)\n");
	int held_fd = open(held, O_RDONLY | O_CLOEXEC);
	CHECK(held_fd >= 0 && flock(held_fd, LOCK_EX | LOCK_NB) == 0);
	test_write_file(victim, "keep");
	CHECK_EQ(symlink(victim, note), 0);
	snprintf(env_run, sizeof(env_run), "CUSNAP_RUN_DIR=%s", run);
	CHECK_EQ(tool(&out, run_env, cusnap, "suspend", "--pid", pid, "--dir", state, "--control-dir", g.ctl, NULL), 0);
	free(out);
	char *text = test_read_file(victim);
	CHECK_STR(text, "keep");
	free(text);
	CHECK(access(stale, F_OK) != 0);
	CHECK(access(dead_dir, F_OK) != 0);
	CHECK(access(other_tag, F_OK) == 0);
	CHECK(access(held, F_OK) == 0);
	close(held_fd);
	/* resume --pid alone finds the state through the note, then the note goes. */
	CHECK_SAYS(out, tool(&out, run_env, cusnap, "resume", "--pid", pid, "--control-dir", g.ctl, NULL), 0,
		   "topology identical");
	CHECK(access(note_dir, F_OK) != 0);
	group_done(&g, 2);
}

/* Commands run as another user (nobody), from a copy of the build it can reach. */
#define AS_NOBODY "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"

static char pub_cusnap[PATH_MAX + 32], pub_ld[PATH_MAX + 32];

static bool public_tools(void)
{
	if (geteuid() != 0) {
		printf("  (skipped: becoming another user needs root)\n");
		return false;
	}
	const char *pub = e2e_public_tree();
	if (!pub)
		return false;
	snprintf(pub_cusnap, sizeof(pub_cusnap), "%s/bin/cusnap", pub);
	snprintf(pub_ld, sizeof(pub_ld), "LD_LIBRARY_PATH=%s/emu", pub);
	return true;
}

/* Another user's tree: suspend, resume and inspect by nobody of root's group
 * say "permission denied" (64), running or suspended, and change nothing
 * (they used to say "no CUDA process" and "nothing to resume", exit 0). */
static void another_users_tree(void)
{
	if (!public_tools())
		return;
	struct group g;
	if (group_start_pair(&g, "theirs") < 0)
		return;
	char pid[16], *out, *env[] = {pub_ld, NULL};
	snprintf(pid, sizeof(pid), "%d", g.root);
	for (int suspended = 0; suspended < 2; suspended++) {
		static const char *const cmds[] = {"suspend", "resume", "inspect"};
		for (int c = 0; c < 3; c++) {
			CHECK_EQ(tool(&out, env, AS_NOBODY, pub_cusnap, cmds[c], "--pid", pid, "--control-dir", g.ctl,
				      NULL),
				 64);
			CHECK_CONTAINS(out, "permission denied");
			CHECK_CONTAINS(out, "nothing done");
			free(out);
		}
		char *json = group_inspect(&g);
		CHECK_EQ(count_of(json, suspended ? "\"phase\":\"prepared\"" : "\"phase\":\"active\""), 2);
		free(json);
		if (!suspended) {
			CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
			free(out);
		}
	}
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	group_done(&g, 2);
}

/* A group run by nobody (its control directory nobody's). */
static int nobody_group_start(struct group *g, const char *name)
{
	static char group_bin[PATH_MAX + 32], ctl[PATH_MAX + 64];
	static int runs;
	snprintf(group_bin, sizeof(group_bin), "%s/examples/vmm_group", e2e_pub);
	snprintf(ctl, sizeof(ctl), "%s/%s-%d-ctl", e2e_pub, name, ++runs);
	if (mkdir(ctl, 0700) != 0 || chown(ctl, 65534, 65534) != 0) {
		test_fail(__FILE__, __LINE__, "cannot make %s for nobody", ctl);
		return -1;
	}
	const char *argv[] = {AS_NOBODY, pub_cusnap, "run", "--",        group_bin, "--workers",
			      "1",       "--allocs", "2",   "--timeout", "60",      NULL};
	char *env[] = {pub_ld, NULL};
	return group_start_argv(g, name, argv, false, env, ctl);
}

/* Root and the tree's owner exclude each other (their run directories differ:
 * /run/cusnap and /tmp/cusnap-UID): while root's suspend of nobody's group is
 * under way (stopped after QUIESCE), nobody's suspend and resume are refused
 * with 75 naming root; while nobody's is, root's are refused naming the
 * owner. Each held suspend then completes, is resumed by whoever ran it, and
 * the group passes. */
static void root_and_owner_exclude(void)
{
	if (!public_tools())
		return;
	struct group g;
	if (nobody_group_start(&g, "owner") < 0)
		return;
	char pid[16], log[PATH_MAX + 32], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(log, sizeof(log), "%s/held.out", e2e_root);
	char *stop_env[] = {pub_ld, "CUSNAP_FAULT=kill-after-quiesce:stop", NULL}, *env[] = {pub_ld, NULL};
	for (int holder_is_root = 1; holder_is_root >= 0; holder_is_root--) {
		char *as_root[] = {pub_cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL};
		char *as_nobody[] = {AS_NOBODY, pub_cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL};
		unlink(log);
		pid_t first = test_spawn(holder_is_root ? as_root : as_nobody, stop_env, log);
		if (!wait_stopped(first, 20000)) {
			char *text = test_read_file(log);
			test_fail(__FILE__, __LINE__, "the held suspend did not stop after QUIESCE:\n%s",
				  text ? text : "");
			free(text);
		}
		static const char *const cmds[] = {"suspend", "resume"};
		for (int c = 0; c < 2; c++) {
			int rc = holder_is_root ? tool(&out, env, AS_NOBODY, pub_cusnap, cmds[c], "--pid", pid,
						       "--control-dir", g.ctl, NULL)
						: tool(&out, env, pub_cusnap, cmds[c], "--pid", pid, "--control-dir",
						       g.ctl, NULL);
			CHECK_EQ(rc, 75);
			CHECK_CONTAINS(out, holder_is_root ? "a command of root" : "a command of the tree's owner");
			free(out);
		}
		kill(first, SIGCONT);
		int status = test_wait_child(first, 60000);
		char *text = test_read_file(log);
		if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			test_fail(__FILE__, __LINE__, "the held suspend ended with status %#x:\n%s", status,
				  text ? text : "");
		free(text);
		int rc = holder_is_root
				 ? tool(&out, env, pub_cusnap, "resume", "--pid", pid, "--control-dir", g.ctl, NULL)
				 : tool(&out, env, AS_NOBODY, pub_cusnap, "resume", "--pid", pid, "--control-dir",
					g.ctl, NULL);
		CHECK_EQ(rc, 0);
		free(out);
	}
	/* Root resumes what the owner suspended (the owner's state directory is
	 * not root's to read): the participants are rebuilt from their records. */
	CHECK_EQ(tool(&out, env, AS_NOBODY, pub_cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL), 0);
	free(out);
	CHECK_SAYS(out, tool(&out, env, pub_cusnap, "resume", "--pid", pid, "--control-dir", g.ctl, NULL), 0,
		   "rebuilding in place");
	/* The owner's checkpoint: CRIU needs root, said before anything is done. */
	char ckpt[PATH_MAX + 32];
	snprintf(ckpt, sizeof(ckpt), "%s/nobody-ckpt", g.ctl);
	CHECK_EQ(tool(&out, env, AS_NOBODY, pub_cusnap, "checkpoint", "--pid", pid, "--dir", ckpt, "--control-dir",
		      g.ctl, NULL),
		 64);
	CHECK_CONTAINS(out, "CRIU needs root or CAP_CHECKPOINT_RESTORE");
	free(out);
	CHECK(access(ckpt, F_OK) != 0);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"phase\":\"active\""), 2);
	free(json);
	group_done(&g, 2);
}

/* A process whose endpoint cannot start (its control directory cannot be
 * made): its exports are the driver's own FDs, so its peer still imports and
 * shares its memory (no capability naming a dead endpoint); the tree is
 * refused at suspend (partial interposition), nothing changed. */
static void endpoint_cannot_start(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], script[5 * PATH_MAX], blocker[PATH_MAX + 16], *out;
	e2e_scratch("noendpoint", dir, ctl);
	snprintf(blocker, sizeof(blocker), "%s/a-file", dir);
	test_write_file(blocker, "not a directory");
	snprintf(script, sizeof(script),
		 "L=%s/snapshot-cuda-vmm-launch H=%s/emu/target_helper; SNAPSHOT_CONTROL_DIR=%s/ctl $L $H %s a --serve "
		 "--dev 0 & sleep 0.3; $L $H %s b --import a --dev 1 & wait",
		 bin_dir, tests_dir, blocker, dir, dir);
	pid_t sh = helpers_start(dir, ctl, script);
	TARGET_EXPECT_DIR(dir, "a", "fill 7", "OK");
	TARGET_EXPECT_DIR(dir, "b", "check 7", "PASS");
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", sh);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 1,
		   "partial interposition");
	TARGET_EXPECT_DIR(dir, "b", "check 7", "PASS");
	tree_kill(sh);
	reap_all();
}

int main(void)
{
	e2e_init("safety");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	test_run("two commands on one tree: the second refused (75), the holder named, nothing changed",
		 one_command_per_tree);
	test_run("a stopped participant: inspect and suspend return by themselves, naming it", stopped_participant);
	test_run("directories others control refused (64); no symlink followed in the run directory", foreign_dirs);
	test_run("another user's tree: permission denied (64), running or suspended, nothing changed",
		 another_users_tree);
	test_run("an endpoint that cannot start: exports are the driver's FDs, sharing works, suspend refused",
		 endpoint_cannot_start);
	test_run("root and the tree's owner exclude each other (75), whichever holds it", root_and_owner_exclude);
	return e2e_done();
}
