/* SPDX-License-Identifier: MIT */
/* cusnap's CRIU plugin (DESIGN.md §9.3): plain `criu dump` and
 * `criu restore` with build/lib/criu/cusnap_plugin.so, no cusnap command
 * involved: the example group (3 processes sharing 4 allocations) in its own
 * PID namespace in both content modes, a multicast group and a legacy-IPC
 * pair; a dump failing after the plugin prepared (the tree runs on and
 * verifies itself); --leave-running; a tree without the interposer (native
 * steps only) and a partly interposed one (refused, nothing changed); CRIU's
 * CUDA plugin (a stand-in that answers as it does) beside ours in either load
 * order; the settings from a configuration file with nothing in CRIU's
 * environment (as runc starts it), and a file that is refused; restores as
 * CRIU users run them (a stale restore-complete, no -d, a restore the plugin
 * must kill); what the plugin says in CRIU's own log. */
#include <dirent.h>
#include <sys/stat.h>

#include "sweep.h"
#include "cusnap/layout.h"

/* The plugin's record of the images' digests (src/node/node.h: IMAGES_DIGESTS). */
#define IMAGES_DIGESTS_NAME "cusnap-digests.json"

static char criu[PATH_MAX], plugins[PATH_MAX], libcuda[PATH_MAX + 32];

/* criu dump of the tree of root into dir/images with the plugins of libdir
 * (extra: more environment, NULL-ended; leave: -R). Its exit status. */
static int dump(pid_t root, const char *dir, const char *content, const char *libdir, bool leave, char *const *extra,
		char **out)
{
	char images[PATH_MAX + 16], pid[16], env_content[64];
	snprintf(images, sizeof(images), "%s/images", dir);
	mkdir(dir, 0700);
	mkdir(images, 0700);
	snprintf(pid, sizeof(pid), "%d", root);
	snprintf(env_content, sizeof(env_content), "CUSNAP_CONTENT=%s", content);
	char *env[12] = {libcuda, env_content, "CUSNAP_NATIVE_TIMEOUT_MS=60000"};
	for (int i = 0, n = 3; extra && extra[i] && n < 11; i++)
		env[n++] = extra[i];
	const char *shell = getsid(root) == root ? NULL : "--shell-job";
	if (leave)
		return tool(out, env, criu, "dump", "-t", pid, "-D", images, "-o", "dump.log", "-v4", "--libdir",
			    libdir, "-R", shell, NULL);
	return tool(out, env, criu, "dump", "-t", pid, "-D", images, "-o", "dump.log", "-v4", "--libdir", libdir, shell,
		    NULL);
}

/* criu restore of dir/images with the plugins of libdir (detach: -d, its
 * root in dir/restore.pid; extra: more environment, NULL-ended). */
static int restore_with(const char *dir, const char *libdir, bool shell, bool detach, char *const *extra, char **out)
{
	char images[PATH_MAX + 16], pidfile[PATH_MAX + 32];
	snprintf(images, sizeof(images), "%s/images", dir);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	unlink(pidfile);
	char *env[8] = {libcuda};
	for (int i = 0, n = 1; extra && extra[i] && n < 7; i++)
		env[n++] = extra[i];
	/* (-v4 twice rather than a hole in the list when not detached) */
	return tool(out, env, criu, "restore", detach ? "-d" : "-v4", "-D", images, "-o", "restore.log", "-v4",
		    "--libdir", libdir, "--pidfile", pidfile, shell ? "--shell-job" : NULL, NULL);
}

static int restore(const char *dir, bool shell, char **out)
{
	return restore_with(dir, plugins, shell, true, NULL, out);
}

/* CRIU's log of the dump (or restore) into dir/images. */
static char *criu_log(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/images/%s", dir, name);
	return test_read_file(path);
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/images/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* A group dumped by plain CRIU with the plugin, killed by the dump, restored:
 * it verifies bytes, addresses, handles and live sharing both ways itself.
 * plain: without the interposer (native steps only: no state file, no rebuild). */
static void dump_restore(const char *name, const char *content, int workers, int allocs, bool own_ns, bool plain,
			 char *const *env)
{
	const char *unshare[] = {"/usr/bin/unshare", "--pid", "--fork", "/usr/bin/setsid", NULL};
	struct group g;
	if (group_start(&g, name, workers, allocs, plain, own_ns ? unshare : NULL, env, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	bool shell = getsid(g.root) != g.root;
	int rc = dump(g.root, dir, content, plugins, false, NULL, &out);
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "native checkpoint");
	free(out);
	CHECK_EQ(exists(dir, "cuda-vmm.state"), !plain);
	CHECK(exists(dir, "cusnap-plugin.json"));
	char images[PATH_MAX + 48];
	snprintf(images, sizeof(images), "%s/images", dir);
	int files;
	long long bytes = e2e_content_files(images, &files);
	CHECK_EQ(files > 0, !strcmp(content, "file")); /* (file content: beside the images, digested with them) */
	if (files) {
		char digests[PATH_MAX + 80];
		snprintf(digests, sizeof(digests), "%s/cusnap-digests.json", images);
		char *text = test_read_file(digests);
		CHECK(bytes >= (long long)e2e_alloc_bytes() && text && contains(text, LAYOUT_CONTENT_PREFIX));
		free(text);
	}
	group_dumped(&g);
	if (rc)
		return;
	CHECK_EQ(restore(dir, shell, &out), 0);
	if (!plain)
		CHECK_CONTAINS(out, "topology identical");
	CHECK_CONTAINS(out, "restore-complete written");
	free(out);
	RESTORED_PASSES(&g, dir, workers + 1);
}

static void group_own_ns(void)
{
	if (access("/usr/bin/unshare", X_OK) || access("/usr/bin/setsid", X_OK))
		SKIP("unshare/setsid missing");
	dump_restore("plug-h", "host", 2, 4, true, false, NULL);
	dump_restore("plug-n", "native", 2, 4, true, false, NULL);
}

static void multicast_and_ipc(void)
{
	char *mc[] = {"VMM_GROUP_MULTICAST=1", NULL}, *ipc[] = {"VMM_GROUP_IPC=1", NULL};
	dump_restore("plug-mc", "file", 1, 1, false, false, mc); /* (file content: its bytes beside the images) */
	dump_restore("plug-ipc", "native", 1, 2, false, false, ipc);
}

/* One plugin binary in CRIU 4.1.x and 4.2.x (DESIGN.md §9.4): CRIU 4.2 knows 13
 * hooks, 4.1.1 refuses a descriptor that lists more than its 12 ("Corrupted
 * plugin"), so the plugin lists 12; each CRIU loads it (its own log says so),
 * dumps the example group and restores it, the group verifying itself. Images
 * the newer one wrote are refused by the older at its init, nothing made. The
 * older CRIU is what make test provisions beside the current one
 * (BUILD/criu-old-path). */
static void both_crius(void)
{
	char old[PATH_MAX], current[PATH_MAX];
	if (test_find_criu_old(old, sizeof(old)) != 0) {
		printf("  (skipped: no older CRIU provisioned; make test runs scripts/setup-criu.sh --suite trixie)\n");
		return;
	}
	long v_old = test_criu_version(old), v_cur = test_criu_version(criu);
	printf("  CRIU %ld.%ld.%ld and %ld.%ld.%ld\n", v_cur / 1000000, v_cur / 1000 % 1000, v_cur % 1000,
	       v_old / 1000000, v_old / 1000 % 1000, v_old % 1000);
	CHECK(v_old >= 4001000 && v_old < 4002000);
	if (v_cur < 4002000) {
		printf("  (skipped: the CRIU in use is older than 4.2; a kernel before 6.16 needs none newer)\n");
		return;
	}
	snprintf(current, sizeof(current), "%s", criu);
	const char *const which[] = {current, old};
	for (int i = 0; i < 2; i++) {
		snprintf(criu, sizeof(criu), "%s", which[i]);
		char name[16];
		snprintf(name, sizeof(name), "plug-v%d", i);
		struct group g;
		if (group_start(&g, name, 1, 2, false, NULL, NULL, NULL) < 0)
			break;
		char dir[PATH_MAX + 32], *out;
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		CHECK_SAYS(out, dump(g.root, dir, "host", plugins, false, NULL, &out), 0, "native checkpoint");
		group_dumped(&g);
		char *log = criu_log(dir, "dump.log");
		CHECK_CONTAINS(log, "Plugin \"cusnap\"");
		CHECK_CONTAINS(log, "cusnap: native checkpoint"); /* (the node library's voice, in CRIU's log) */
		free(log);
		CHECK_SAYS(out, restore(dir, getsid(g.root) != g.root, &out), 0, "topology identical");
		log = criu_log(dir, "restore.log");
		CHECK_CONTAINS(log, "Plugin \"cusnap\"");
		free(log);
		pid_t root = restored_root(dir);
		CHECK(root > 0);
		if (root > 0)
			CHECK_EQ(restored_passes(&g, root), 2);
	}
	/* Dumped by the newer, restored by the older: refused before anything is made. */
	snprintf(criu, sizeof(criu), "%s", current);
	struct group g;
	if (group_start(&g, "plug-newer", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, dump(g.root, dir, "host", plugins, false, NULL, &out), 0, "native checkpoint");
	group_dumped(&g);
	snprintf(criu, sizeof(criu), "%s", old);
	CHECK(restore(dir, getsid(g.root) != g.root, &out) != 0);
	CHECK_CONTAINS(out, "cannot read a newer CRIU's images");
	CHECK_CONTAINS(out, "restore refused, nothing made");
	free(out);
	CHECK(restored_root(dir) <= 0);
	snprintf(criu, sizeof(criu), "%s", current);
	CHECK_SAYS(out, restore(dir, getsid(g.root) != g.root, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
}

/* A dump that fails after the plugin prepared (at PAUSE_DEVICES, or once the
 * tree was checkpointed), with -R or without: when `criu dump` returns
 * (non-zero) the tree is put back already, told nothing (no snapshot-complete:
 * there is no checkpoint), and verifies itself; why is in CRIU's own log too. */
static void dump_failing(void)
{
	static const char *const points[] = {"CUSNAP_FAULT=plugin-pause:fail", "CUSNAP_FAULT=plugin-checkpoint:fail"};
	for (int k = 0; k < 4; k++) {
		int i = k % 2;
		struct group g;
		if (group_start(&g, "plug-fail", 2, 2, false, NULL, NULL, NULL) < 0)
			return;
		char dir[PATH_MAX + 32], *out, *extra[] = {(char *)points[i], NULL};
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		CHECK(dump(g.root, dir, "host", plugins, k >= 2, extra, &out) != 0);
		CHECK_NOTHING_SAID(g.ctl);
		char *json = group_inspect(&g); /* at once: no waiting for a helper */
		CHECK_EQ(count_of(json, "\"state\":\"running\""), 3);
		CHECK_EQ(count_of(json, "\"phase\":\"active\""), 3);
		free(json);
		char *log = criu_log(dir, "dump.log");
		CHECK_CONTAINS(out, "fail");
		CHECK_CONTAINS(log, i ? "cusnap-plugin: the plugin's checkpoint failed: the dump fails"
				      : "the plugin's pause failed");
		CHECK_CONTAINS(log, "Dumping FAILED");
		free(log);
		free(out);
		group_done(&g, 3);
	}
}

/* PAUSE_DEVICES and CHECKPOINT_DEVICES as lists of steps (plugin_dump.c):
 * each step failing in turn (CUSNAP_FAIL_STEP), the dump fails with the tree
 * as before, and CRIU's log has the undo of every step of its hook done before
 * it, the last first; a failure after the prepare is said once, by its undo
 * (everything undone), also for a tree without the interposer (whose prepare
 * changes nothing); one at CHECKPOINT_DEVICES fails the dump, whose end puts
 * the tree back; a name of no step fails the dump naming them, nothing
 * changed. */
static void pause_step_failing(void)
{
	static const struct {
		const char *seq, *name, *undone; /* the undo lines expected, in order */
		bool plain;                      /* no interposer */
	} steps[] = {
		{"pause", "check", "", false},
		{"pause", "group", "", false},
		{"pause", "prepare", "group", false},
		{"pause", "lock", "prepare group", false},
		{"pause", "lock", "prepare group", true},
		{"pause", "lokc", NULL, false}, /* (no such step) */
		{"checkpoint", "threads", "", false},
		{"checkpoint", "native checkpoint", "threads", false},
		{"checkpoint", "threads back", "threads", false},
		{"checkpoint", "image", "threads", false},
	};
	for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		struct group g;
		if (group_start(&g, "plug-steps", 2, 2, steps[k].plain, NULL, NULL, NULL) < 0)
			return;
		char dir[PATH_MAX + 32], *out, env0[64], *extra[] = {env0, NULL};
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		snprintf(env0, sizeof(env0), "CUSNAP_FAIL_STEP=plugin %s:%s", steps[k].seq, steps[k].name);
		CHECK(dump(g.root, dir, "host", plugins, false, extra, &out) != 0);
		free(out);
		char *log = criu_log(dir, "dump.log"), want[96];
		if (!steps[k].undone) {
			CHECK_CONTAINS(log, "names no step of plugin pause (its steps: check, group, prepare, "
					    "boundary, lock)");
		} else {
			snprintf(want, sizeof(want), "step %s failed on purpose", steps[k].name);
			CHECK_CONTAINS(log, want);
			const char *at = log ? log : "";
			char names[64];
			snprintf(names, sizeof(names), "%s", steps[k].undone);
			int undos = 0;
			for (char *save, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save), undos++) {
				snprintf(want, sizeof(want), "step %s: undoing", n);
				const char *found = strstr(at, want);
				if (!found)
					test_fail(__FILE__, __LINE__, "failing at %s: no '%s' after the one before",
						  steps[k].name, want);
				at = found ? found + strlen(want) : at;
			}
			CHECK_EQ(count_of(log, ": undoing"), undos);
			if (!strcmp(steps[k].seq, "checkpoint"))
				CHECK_CONTAINS(log, "the dump fails; the tree is put back");
			if (undos && strstr(steps[k].undone, "prepare")) { /* (said once, by the prepare's undo) */
				CHECK_CONTAINS(log, "everything undone");
				CHECK(!contains(log, "nothing changed"));
				CHECK(!contains(log, "the plugin's pause failed"));
			}
		}
		free(log);
		group_done(&g, 3);
	}
}

/* -R: the tree runs on after the dump, completed in place (snapshot-complete)
 * before `criu dump` returns. */
static void leave_running(void)
{
	struct group g;
	if (group_start_pair(&g, "plug-r") < 0)
		return;
	char dir[PATH_MAX + 32], *out, done[PATH_MAX + 32];
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(dump(g.root, dir, "host", plugins, true, NULL, &out), 0);
	free(out);
	snprintf(done, sizeof(done), "%s/snapshot-complete", g.ctl);
	CHECK(access(done, F_OK) == 0); /* when criu dump -R returns, the tree is complete */
	group_done(&g, 2);
}

/* No interposer: the native steps only; restored, the process verifies itself. */
static void without_interposer(void)
{
	dump_restore("plug-plain", "host", 0, 1, false, true, NULL);
}

/* Refused before anything changed: a partly interposed tree. */
static void refusals(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], ck[PATH_MAX + 16], *out, pid[16];
	e2e_scratch("plug-partial", dir, ctl);
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	pid_t sh = partial_tree_start(dir, ctl);
	char env_ctl[PATH_MAX + 32], *extra[] = {env_ctl, NULL};
	snprintf(env_ctl, sizeof(env_ctl), "CUSNAP_CONTROL_DIR=%s", ctl);
	CHECK(dump(sh, ck, "host", plugins, false, extra, &out) != 0);
	CHECK_CONTAINS(out, "partial interposition");
	free(out);
	char *log = criu_log(ck, "dump.log");
	CHECK_CONTAINS(log, "partial interposition"); /* in CRIU's log too */
	free(log);
	snprintf(pid, sizeof(pid), "%d", sh);
	char cusnap[PATH_MAX];
	cusnap_path(cusnap, sizeof(cusnap));
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--control-dir", ctl, "--json", NULL), 0);
	CHECK_EQ(count_of(out, "\"state\":\"running\""), 2);
	free(out);
	tree_kill(sh);
	reap_all();
}

/* A plugin directory e2e_root/name holding cusnap's plugin as mine (a link)
 * and the stand-in for CRIU's CUDA plugin (with standin), into out. Whether
 * CRIU, reading the directory in its order, loads the stand-in first. */
static bool libdir_make(char *out, size_t len, const char *name, const char *mine, bool standin)
{
	char link[PATH_MAX + 64], target[PATH_MAX + 64];
	snprintf(out, len, "%s/%s", e2e_root, name);
	mkdir(out, 0700);
	snprintf(link, sizeof(link), "%s/%s", out, mine);
	snprintf(target, sizeof(target), "%s/cusnap_plugin.so", plugins);
	CHECK(symlink(target, link) == 0 || errno == EEXIST);
	if (standin) {
		snprintf(link, sizeof(link), "%s/cuda_plugin.so", out);
		snprintf(target, sizeof(target), "%s/criu/cuda_plugin.so", tests_dir);
		CHECK(symlink(target, link) == 0 || errno == EEXIST);
	}
	DIR *d = opendir(out);
	struct dirent *e;
	bool first = false;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, "cuda_plugin.so") || !strcmp(e->d_name, mine)) {
			first = !strcmp(e->d_name, "cuda_plugin.so");
			break;
		}
	}
	if (d)
		closedir(d);
	return first;
}

/* Does the stand-in's log name pid for hook? */
static bool standin_saw(const char *log, const char *hook, pid_t pid)
{
	char *text = test_read_file(log), line[64];
	snprintf(line, sizeof(line), "%s %d\n", hook, (int)pid);
	bool saw = text && strstr(text, line);
	free(text);
	return saw;
}

/* One load order: each tree has one owner, and each of the stand-in's hooks
 * runs once per process it owns. */
static void coexist_in(const char *libdir, bool standin_first)
{
	char standin_log[PATH_MAX + 32], env_log[PATH_MAX + 64], dir[PATH_MAX + 32], *out;
	snprintf(standin_log, sizeof(standin_log), "%s/standin-%d.log", e2e_root, standin_first);
	snprintf(env_log, sizeof(env_log), "CUDA_STANDIN_LOG=%s", standin_log);
	char *with_log[] = {env_log, NULL}, *disabled[] = {env_log, "CUDA_STANDIN_DISABLED=1", NULL};
	unlink(standin_log);
	printf("     the stand-in for CRIU's CUDA plugin loaded %s\n", standin_first ? "first" : "second");

	/* An interposed tree is cusnap's, dump and restore: never the stand-in's. */
	struct group g;
	if (group_start_pair(&g, "plug-both") < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, dump(g.root, dir, "host", libdir, false, with_log, &out), 0, "native checkpoint");
	char *log = criu_log(dir, "dump.log");
	const char *a = log ? strstr(log, "Plugin \"cuda_plugin\"") : NULL,
		   *b = log ? strstr(log, "Plugin \"cusnap\"") : NULL;
	CHECK(a && b && (a < b) == standin_first); /* CRIU loaded them in the order expected */
	free(log);
	group_dumped(&g);
	CHECK_SAYS(out, restore_with(dir, libdir, getsid(g.root) != g.root, true, with_log, &out), 0,
		   "restore-complete written");
	pid_t root = restored_root(dir);
	CHECK(root > 0 && restored_passes(&g, root) == 2);
	CHECK(access(standin_log, F_OK) < 0);

	/* CUDA without the interposer: the stand-in's, each hook once. */
	if (group_start(&g, "plug-theirs", 0, 1, true, NULL, NULL, NULL) < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(dump(g.root, dir, "host", libdir, false, with_log, &out), 0);
	CHECK(!strstr(out, "native checkpoint"));
	free(out);
	CHECK(standin_saw(standin_log, "pause", g.root) && standin_saw(standin_log, "checkpoint", g.root));
	char *text = test_read_file(standin_log);
	CHECK_EQ(count_of(text, "pause"), 1);
	free(text);
	CHECK(access(dir, F_OK) == 0 && !exists(dir, "cusnap-plugin.json"));
	group_dumped(&g);

	/* The same with the stand-in disabled (no GPU): the native steps, by cusnap. */
	if (group_start(&g, "plug-off", 0, 1, true, NULL, NULL, NULL) < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, dump(g.root, dir, "host", libdir, false, disabled, &out), 0, "native checkpoint");
	CHECK(exists(dir, "cusnap-plugin.json"));
	group_dumped(&g);

	/* No CUDA at all: left to CRIU and the stand-in. */
	pid_t sleeper = fork();
	if (sleeper == 0) {
		setsid();
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	usleep(100000);
	snprintf(dir, sizeof(dir), "%s/sleep-%d", e2e_root, standin_first);
	CHECK_EQ(dump(sleeper, dir, "host", libdir, false, with_log, &out), 0);
	free(out);
	CHECK(standin_saw(standin_log, "pause", sleeper));
	CHECK(!exists(dir, "cusnap-plugin.json"));
	test_wait_child(sleeper, 10000);
}

/* CRIU's CUDA plugin beside cusnap's in one plugin directory, in either load
 * order (CRIU loads them in the directory's order: names are tried until the
 * directory gives each order). */
static void beside_cuda_plugin(void)
{
	static const char *const names[] = {"cusnap_plugin.so", "cusnap.so",      "libcusnap.so",   "zz_cusnap.so",
					    "a_cusnap.so",      "cusnap-criu.so", "criu_cusnap.so", "x.so"};
	bool done[2] = {false, false};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !(done[0] && done[1]); i++) {
		char libdir[PATH_MAX + 32], name[32];
		snprintf(name, sizeof(name), "both-%zu", i);
		bool first = libdir_make(libdir, sizeof(libdir), name, names[i], true);
		if (done[first])
			continue;
		done[first] = true;
		coexist_in(libdir, first);
	}
	if (!done[0] || !done[1])
		printf("     only one load order could be made in this file system's directories\n");
	CHECK(done[0] || done[1]);
}

/* Write text into path, mode mode. */
static void write_conf(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	if (fd >= 0)
		close(fd);
	CHECK(chmod(path, mode) == 0);
}

/* criu as runc starts it: PATH alone in its environment. */
static int bare_criu(char **out, const char *verb, pid_t root, const char *dir, const char *libdir, bool shell)
{
	char images[PATH_MAX + 16], pid[16], pidfile[PATH_MAX + 32];
	snprintf(images, sizeof(images), "%s/images", dir);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	mkdir(dir, 0700);
	mkdir(images, 0700);
	snprintf(pid, sizeof(pid), "%d", root);
	if (!strcmp(verb, "dump"))
		return tool(out, NULL, "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", criu, "dump", "-t",
			    pid, "-D", images, "-o", "dump.log", "-v4", "--libdir", libdir,
			    shell ? "--shell-job" : NULL, NULL);
	unlink(pidfile);
	return tool(out, NULL, "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", criu, "restore", "-d", "-D",
		    images, "-o", "restore.log", "-v4", "--libdir", libdir, "--pidfile", pidfile,
		    shell ? "--shell-job" : NULL, NULL);
}

/* The settings from cusnap.conf beside the plugin, nothing in CRIU's
 * environment: native content and the driver's path from the file. A file
 * others may write, or one with a line not understood, refuses the dump with
 * the reason in CRIU's log, nothing changed. */
static void settings_from_file(void)
{
	char libdir[PATH_MAX + 32], conf[PATH_MAX + 64], text[PATH_MAX + 128], dir[PATH_MAX + 32], *out;
	libdir_make(libdir, sizeof(libdir), "conf", "cusnap_plugin.so", false);
	snprintf(conf, sizeof(conf), "%s/cusnap.conf", libdir);
	snprintf(text, sizeof(text), "# as a user writes it\ncontent = native\nlibcuda = %s/libcuda.so.1  # cuemu\n",
		 emu_dir);
	write_conf(conf, text, 0644);
	struct group g;
	if (group_start_pair(&g, "plug-conf") < 0)
		return;
	bool shell = getsid(g.root) != g.root;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(bare_criu(&out, "dump", g.root, dir, libdir, shell), 0);
	free(out);
	char image[PATH_MAX + 64];
	snprintf(image, sizeof(image), "%s/images/cusnap-plugin.json", dir);
	char *json = test_read_file(image);
	CHECK_CONTAINS(json, "\"content\":\"native\"");
	free(json);
	group_dumped(&g);
	CHECK_SAYS(out, bare_criu(&out, "restore", 0, dir, libdir, shell), 0, "restore-complete written");
	pid_t root = restored_root(dir);
	CHECK(root > 0 && restored_passes(&g, root) == 2);

	static const struct {
		const char *text;
		mode_t mode;
		const char *says;
	} bad[] = {{"content = host\n", 0666, "writable by no one else"},
		   {"content = host\ncontents = native\n", 0644, "line 2: unknown setting \"contents\""},
		   {"timeout_ms = soon\n", 0644, "timeout_ms = soon"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_conf(conf, bad[i].text, bad[i].mode);
		if (group_start(&g, "plug-badconf", 1, 1, false, NULL, NULL, NULL) < 0)
			return;
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		CHECK(bare_criu(&out, "dump", g.root, dir, libdir, getsid(g.root) != g.root) != 0);
		CHECK_CONTAINS(out, bad[i].says);
		CHECK_CONTAINS(out, "nothing changed");
		free(out);
		char *log = criu_log(dir, "dump.log");
		CHECK_CONTAINS(log, bad[i].says);
		free(log);
		group_done(&g, 2);
	}
}

/* Restores as CRIU's users run them: a restore-complete a previous restore left
 * is removed before the workload runs; without -d, `criu restore` returns once
 * the workload (released after its rebuild) has ended, no deadlock; a restore
 * the plugin must kill fails `criu restore`. */
static void restore_as_users_do(void)
{
	struct group g;
	if (group_start_pair(&g, "plug-nod") < 0)
		return;
	bool shell = getsid(g.root) != g.root;
	char dir[PATH_MAX + 32], stale[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(dump(g.root, dir, "native", plugins, false, NULL, &out), 0);
	free(out);
	group_dumped(&g);
	snprintf(stale, sizeof(stale), "%s/restore-complete", g.ctl);
	write_conf(stale, "", 0644);
	CHECK_EQ(restore_with(dir, plugins, shell, false, NULL, &out), 0); /* no -d: returns when the tree ends */
	CHECK_CONTAINS(out, "restore-complete written");
	free(out);
	char *log = test_read_file(g.log);
	CHECK_EQ(count_of(log, "PASS vmm_group"), 2);
	free(log);

	if (group_start_pair(&g, "plug-kill") < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(dump(g.root, dir, "native", plugins, false, NULL, &out), 0);
	free(out);
	group_dumped(&g);
	char *fault[] = {"CUEMU_FAULT=cuCheckpointProcessRestore", NULL};
	CHECK(restore_with(dir, plugins, getsid(g.root) != g.root, true, fault, &out) != 0);
	CHECK_CONTAINS(out, "the restored tree is killed");
	free(out);
	pid_t root = restored_root(dir);
	for (int waited = 0; root > 0 && kill(root, 0) == 0 && waited < 5000; waited += 50) {
		reap_all(); /* (it is ours once CRIU has exited: we are a subreaper) */
		usleep(50000);
	}
	CHECK(root <= 0 || kill(root, 0) < 0);
	log = criu_log(dir, "restore.log");
	CHECK_CONTAINS(log, "the restored tree is killed");
	free(log);
}

/* Two `criu dump -R` of one tree at once, again and again (CUSNAP_PLUGIN_RACES
 * rounds, default 8; 200 found no crash): neither CRIU dies of a signal, and
 * when both have returned the tree is whole, runs on and is held by no one. */
static void concurrent_dumps(void)
{
	const char *env_rounds = getenv("CUSNAP_PLUGIN_RACES");
	int rounds = env_rounds && atoi(env_rounds) > 0 ? atoi(env_rounds) : 8, wins = 0;
	struct group g = {0};
	for (int round = 0; round < rounds && !test_failures; round++) {
		if (round % 40 == 0) { /* a fresh group now and then: it waits 60 s at most */
			if (round) {
				group_done(&g, 2);
			}
			if (group_start_pair(&g, "plug-race") < 0)
				return;
		}
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", g.root);
		const char *shell = getsid(g.root) != g.root ? "--shell-job" : NULL;
		pid_t racer[2];
		char images[2][PATH_MAX + 64], log[2][PATH_MAX + 64];
		for (int k = 0; k < 2; k++) {
			snprintf(images[k], sizeof(images[k]), "%s/race-%d-%d", g.ctl, round, k);
			snprintf(log[k], sizeof(log[k]), "%s.out", images[k]);
			mkdir(images[k], 0700);
			char *argv[] = {criu,       "dump", "-t",       pid,     "-D", images[k],     "-o",
					"dump.log", "-v4",  "--libdir", plugins, "-R", (char *)shell, NULL};
			char *env[] = {libcuda, NULL};
			racer[k] = test_spawn(argv, env, log[k]);
		}
		for (int k = 0; k < 2; k++) {
			int status = test_wait_child(racer[k], 120000);
			CHECK(status >= 0 && WIFEXITED(status));
			if (status >= 0 && WIFSIGNALED(status))
				printf("     round %d: criu %d died of signal %d (%s)\n", round, k, WTERMSIG(status),
				       log[k]);
			wins += status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
		}
		char *json = group_inspect(&g);
		CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
		CHECK_EQ(count_of(json, "\"phase\":\"active\""), 2);
		CHECK(!strstr(json, "held_by"));
		free(json);
	}
	printf("     %d rounds of two concurrent dumps: %d won\n", rounds, wins);
	group_done(&g, 2);
}

/* device_map at restore (here from CUSNAP_DEVICE_MAP; the file's device_map
 * takes the same text): two helpers on GPUs 0 and 1, swapped by ordinals, the
 * sharing rebuilt on the new ones; a map naming a GPU this machine lacks is
 * refused before CRIU makes any process. */
static void device_map(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], ck[PATH_MAX + 16], *out;
	e2e_scratch("plug-devmap", dir, ctl);
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	pid_t sh = gpu_pair_start(dir, ctl);
	char env_ctl[PATH_MAX + 32], *extra[] = {env_ctl, NULL};
	snprintf(env_ctl, sizeof(env_ctl), "CUSNAP_CONTROL_DIR=%s", ctl);
	CHECK_EQ(dump(sh, ck, "host", plugins, false, extra, &out), 0);
	free(out);
	test_wait_child(sh, 10000);
	reap_all();
	char *bad[] = {"CUSNAP_DEVICE_MAP=0=1,1=5", NULL}, *swap[] = {"CUSNAP_DEVICE_MAP=0=1,1=0", NULL};
	CHECK(restore_with(ck, plugins, true, true, bad, &out) != 0);
	CHECK_CONTAINS(out, "pair 2 names a GPU this machine does not have");
	CHECK_CONTAINS(out, "nothing made");
	free(out);
	CHECK(restored_root(ck) <= 0); /* no process was made */
	CHECK_SAYS(out, restore_with(ck, plugins, true, true, swap, &out), 0, "devices remapped");
	gpu_pair_swapped(dir, ck);
}

/* The gate at CRIU's init (DESIGN.md §9.5): a machine whose GPU is of
 * another model and whose driver is older than the dump's (cuemu told so in
 * CRIU's environment) is refused with both reasons, nothing made; the same
 * images then restore here and pass. The plugin's metrics_dir counts the
 * dump, the refused restore and the one that passed. */
static void restore_gate(void)
{
	struct group g;
	if (group_start(&g, "plug-gate", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], metrics[PATH_MAX + 32], env_metrics[PATH_MAX + 64], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	/* (its metrics too: metrics_dir, here through the environment) */
	snprintf(metrics, sizeof(metrics), "%s/metrics", g.ctl);
	CHECK_EQ(mkdir(metrics, 0700), 0);
	snprintf(env_metrics, sizeof(env_metrics), "CUSNAP_METRICS_DIR=%s", metrics);
	char *with_metrics[] = {env_metrics, NULL};
	CHECK_SAYS(out, dump(g.root, dir, "host", plugins, false, with_metrics, &out), 0, "native checkpoint");
	group_dumped(&g);
	bool shell = getsid(g.root) != g.root;
	char *other[] = {"CUEMU_MODEL=cuemu,H200", "CUEMU_DRIVER_VERSION=12080", env_metrics, NULL};
	CHECK(restore_with(dir, plugins, shell, true, other, &out) != 0);
	CHECK_CONTAINS(out, "cannot restore here: driver: CUDA 12.8 here, the checkpoint's was CUDA 13.0");
	CHECK_CONTAINS(out, "cannot restore here: GPU 1 of the checkpoint is a cuemu, GPU 1 here a H200");
	CHECK_CONTAINS(out, "(2 reasons above): restore refused, nothing made");
	free(out);
	CHECK(restored_root(dir) <= 0);
	CHECK_SAYS(out, restore_with(dir, plugins, shell, true, with_metrics, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
	char file[PATH_MAX + 48];
	snprintf(file, sizeof(file), "%s/cusnap.prom", metrics);
	char *text = test_read_file(file);
	CHECK_CONTAINS(text, "\ncusnap_operations_total{operation=\"checkpoint\",result=\"ok\"} 1\n");
	CHECK_CONTAINS(text, "\ncusnap_operations_total{operation=\"restore\",result=\"failed\"} 1\n");
	CHECK_CONTAINS(text, "\ncusnap_operations_total{operation=\"restore\",result=\"ok\"} 1\n");
	CHECK_CONTAINS(text, "\ncusnap_last_phase_bytes{operation=\"checkpoint\",phase=\"PREPARE\"} ");
	free(text);
}

static bool page_image(const char *name)
{
	return !strncmp(name, "pages-", 6);
}

/* A group TAG started and dumped by plain CRIU with the plugin in content
 * into its control directory's ckpt (dir, images); the largest image file
 * pick takes into file, a copy of it kept in saved (in dir, out of the
 * images): its size (0, a failure said: none, or no group). */
static off_t dumped_file(struct group *g, const char *tag, const char *content, bool (*pick)(const char *),
			 char dir[PATH_MAX + 32], char images[PATH_MAX + 48], char file[PATH_MAX + 320],
			 char saved[PATH_MAX + 340])
{
	if (group_start(g, tag, 1, 2, false, NULL, NULL, NULL) < 0)
		return 0;
	char *out;
	snprintf(dir, PATH_MAX + 32, "%s/ckpt", g->ctl);
	snprintf(images, PATH_MAX + 48, "%s/images", dir);
	CHECK_SAYS(out, dump(g->root, dir, content, plugins, false, NULL, &out), 0, "native checkpoint");
	group_dumped(g);
	off_t best = 0;
	DIR *d = opendir(images);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char p[PATH_MAX + 320];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", images, e->d_name);
		if (pick(e->d_name) && stat(p, &st) == 0 && st.st_size > best)
			best = st.st_size, snprintf(file, PATH_MAX + 320, "%s", p);
	}
	if (d)
		closedir(d);
	CHECK(best > 0);
	snprintf(saved, PATH_MAX + 340, "%s/saved", dir);
	char *cp[] = {"cp", file, saved, NULL};
	CHECK_EQ(test_run_cmd(cp, NULL, 30000), 0);
	return best;
}

/* The plugin's digests: a page image truncated after a plain criu dump is
 * refused at CRIU's restore init, naming it, nothing made (it used to restore
 * a task that spun); put back, the same images restore and pass. */
static void damaged_images(void)
{
	struct group g;
	char dir[PATH_MAX + 32], images[PATH_MAX + 48], pages[PATH_MAX + 320] = "", saved[PATH_MAX + 340], *out;
	off_t best = dumped_file(&g, "plug-dmg", "host", page_image, dir, images, pages, saved);
	if (best <= 0)
		return;
	CHECK(exists(dir, IMAGES_DIGESTS_NAME));
	CHECK_EQ(truncate(pages, best / 2), 0);
	bool shell = getsid(g.root) != g.root;
	CHECK(restore(dir, shell, &out) != 0);
	CHECK_CONTAINS(out, "truncated or grown");
	CHECK_CONTAINS(out, "restore refused, nothing made");
	free(out);
	CHECK(restored_root(dir) <= 0);
	CHECK_EQ(rename(saved, pages), 0);
	/* A core image a stranger owns (one could rewrite it and its digest): refused at init. */
	char core[PATH_MAX + 64];
	snprintf(core, sizeof(core), "%s/core-%d.img", images, g.root);
	CHECK_EQ(chown(core, 65534, 65534), 0);
	CHECK(restore(dir, shell, &out) != 0);
	CHECK_CONTAINS(out, "is owned by uid 65534");
	CHECK_CONTAINS(out, "restore refused, nothing made");
	free(out);
	CHECK(restored_root(dir) <= 0);
	CHECK_EQ(chown(core, 0, 0), 0);
	CHECK_SAYS(out, restore(dir, shell, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
}

/* File content's bytes damaged after a plain criu dump, the file's size
 * right: the restore finds it as the block comes back (not by reading the
 * file first), names the file and offset, and CRIU's restore fails, the
 * restored tree killed before it ran; put back, the same images restore. */
static void damaged_content(void)
{
	struct group g;
	char dir[PATH_MAX + 32], images[PATH_MAX + 48], file[PATH_MAX + 320] = "", saved[PATH_MAX + 340], *out;
	off_t size = dumped_file(&g, "plug-dmgc", "file", layout_content_name, dir, images, file, saved);
	if (size <= 0)
		return;
	int fd = open(file, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, "damage", 6, size / 2) == 6);
	close(fd);
	bool shell = getsid(g.root) != g.root;
	CHECK(restore(dir, shell, &out) != 0);
	CHECK_CONTAINS(out, "is damaged at");
	free(out);
	reap_all(); /* (the killed tree's, ours once CRIU has exited) */
	CHECK_EQ(rename(saved, file), 0);
	CHECK_SAYS(out, restore(dir, shell, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
}

/* The helper's restore as a list of steps (plugin_restore.c): each failing
 * in turn (CUSNAP_FAIL_STEP), the restore fails with the restored tree killed
 * and the undo of every step done before it, the last first; the same
 * checkpoint restores afterwards. */
static void restore_step_failing(void)
{
	static const struct {
		const char *name;
		int undos;
	} steps[] = {{"let go", 0}, {"group", 1}, {"load", 2}, {"release", 2}};
	struct group g;
	if (group_start_pair(&g, "plug-rsteps") < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	bool shell = getsid(g.root) != g.root;
	CHECK_EQ(dump(g.root, dir, "host", plugins, false, NULL, &out), 0);
	free(out);
	group_dumped(&g);
	for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		char env0[64], want[96], *extra[] = {env0, NULL};
		snprintf(env0, sizeof(env0), "CUSNAP_FAIL_STEP=plugin restore:%s", steps[k].name);
		CHECK(restore_with(dir, plugins, shell, true, extra, &out) != 0);
		snprintf(want, sizeof(want), "step %s failed on purpose", steps[k].name);
		CHECK_CONTAINS(out, want);
		CHECK_CONTAINS(out, "the restored tree is killed");
		if (count_of(out, ": undoing") != steps[k].undos)
			test_fail(__FILE__, __LINE__, "failing at %s: not %d undo(s):\n%s", steps[k].name,
				  steps[k].undos, out);
		free(out);
		pid_t root = restored_root(dir);
		reap_all(); /* (the killed tree's, ours once CRIU has exited) */
		CHECK(root <= 0 || kill(root, 0) != 0);
	}
	CHECK_SAYS(out, restore(dir, shell, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("criu-plugin");
	snprintf(plugins, sizeof(plugins), "%s/../lib/criu", bin_dir);
	snprintf(libcuda, sizeof(libcuda), "CUSNAP_LIBCUDA=%s/libcuda.so.1", emu_dir);
	test_run("criu dump/restore with the plugin: 3 processes, 4 allocations, own PID namespace, host and native",
		 group_own_ns);
	test_run("criu dump/restore with the plugin: a multicast group, a legacy-IPC pair", multicast_and_ipc);
	test_run("one plugin binary loaded by CRIU 4.1.x and 4.2.x: a dump and a restore under each; newer images "
		 "refused",
		 both_crius);
	test_run("a dump failing after the plugin prepared: the tree runs on and verifies itself", dump_failing);
	test_run("PAUSE_DEVICES failing at each of its steps: the steps done undone, the last first",
		 pause_step_failing);
	test_run("criu dump -R with the plugin: the tree runs on, snapshot-complete", leave_running);
	test_run("no interposer: native steps only, restored", without_interposer);
	test_run("refused, nothing changed: partial interposition", refusals);
	test_run("CRIU's CUDA plugin beside ours, either load order: each tree one owner", beside_cuda_plugin);
	test_run("settings from cusnap.conf beside the plugin with nothing in CRIU's environment; bad files refused",
		 settings_from_file);
	test_run("restores as CRIU users run them: stale restore-complete, no -d, a killed restore fails",
		 restore_as_users_do);
	test_run("device_map at restore: GPUs swapped by ordinals; a GPU not here refused, nothing made", device_map);
	test_run("file content damaged after the dump: found as it comes back, named, the restore fails; put back, "
		 "restored",
		 damaged_content);
	test_run("the gate at CRIU's init: another GPU model and an older driver refused, nothing made; restored "
		 "here",
		 restore_gate);
	test_run("a truncated page image, a core image a stranger owns: refused at the restore's init by the plugin, "
		 "nothing made",
		 damaged_images);
	test_run("two criu dumps of one tree at once: no crash, the tree whole after both", concurrent_dumps);
	test_run("the plugin's restore failing at each of its steps: the tree killed, the checkpoint restores after",
		 restore_step_failing);
	return e2e_done();
}
