/* SPDX-License-Identifier: MIT */
/* cusnap checkpoint / restore with CRIU: the example group dumped,
 * killed and restored in both content modes, in the host PID namespace and in
 * its own; --leave-running; no interposer; partial interposition; CRIU failing;
 * the VMM rebuild failing after the CRIU restore; inspect of the directory;
 * multicast groups. */
#include <dirent.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/mount.h>

#include "cusnap/fault.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"
#include "../../src/coordinator/coord.h"
#include "sweep.h"

static char cusnap[PATH_MAX], criu[PATH_MAX];

static int checkpoint(struct group *g, const char *dir, const char *content, bool leave_running, const char *criu_arg,
		      char **out)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", g->root);
	if (leave_running)
		return tool(out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--content", content,
			    "--control-dir", g->ctl, "--criu", criu_arg, "--leave-running", "--wait-ready", NULL);
	return tool(out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--content", content, "--control-dir",
		    g->ctl, "--criu", criu_arg, "--wait-ready", NULL);
}

static int restore(const char *dir, char **out)
{
	return tool(out, NULL, cusnap, "restore", "--dir", dir, "--criu", criu, NULL);
}

/* Every file of the checkpoint (the images hold the tree's memory, the GPU
 * bytes of the host arena too) readable by its owner alone, in 0700
 * directories. */
static void images_private(const char *dir)
{
	char images[PATH_MAX + 16];
	snprintf(images, sizeof(images), "%s/images", dir);
	const char *dirs[] = {dir, images};
	for (int d = 0; d < 2; d++) {
		struct stat st;
		CHECK(stat(dirs[d], &st) == 0 && (st.st_mode & 07777) == 0700);
		DIR *dp = opendir(dirs[d]);
		struct dirent *e;
		int files = 0;
		while (dp && (e = readdir(dp))) {
			char path[PATH_MAX + 300];
			snprintf(path, sizeof(path), "%s/%s", dirs[d], e->d_name);
			if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
				continue;
			files++;
			if (st.st_mode & 077)
				test_fail(__FILE__, __LINE__, "%s has mode %04o: others can read the checkpoint", path,
					  (unsigned)(st.st_mode & 07777));
		}
		if (dp)
			closedir(dp);
		CHECK(files > 0);
	}
}

static void dump_kill_restore_group(const char *content, const char *const *wrapper, const char *name, int workers,
				    char *const *env)
{
	struct group g;
	bool mc = env && strstr(env[0], "MULTICAST");
	if (group_start(&g, name, workers, 3, false, wrapper, env, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	pid_t before[8];
	int n = tree_pids(g.root, before, 8);
	CHECK_EQ(n, workers + 1);
	int rc = checkpoint(&g, dir, content, false, criu, &out);
	CHECK_EQ(rc, 0);
	if (rc)
		printf("%s\n", out);
	if (mc) /* the multicast groups: taken down before the native checkpoint */
		CHECK_CONTAINS(out, "PREPARE_MULTICAST");
	free(out);
	images_private(dir);
	/* The dump killed the tree. */
	group_dumped(&g);
	CHECK(kill(before[0], 0) < 0 || wrapper);
	rc = restore(dir, &out);
	CHECK_EQ(rc, 0);
	if (rc)
		printf("%s\n", out);
	CHECK_CONTAINS(out, "topology identical");
	if (mc)
		CHECK_CONTAINS(out, "RESTORE_MULTICAST_BIND");
	free(out);
	pid_t root = restored_root(dir);
	CHECK(root > 0);
	if (root <= 0)
		return;
	if (!wrapper)
		CHECK_EQ(root, before[0]); /* same PIDs in the host namespace */
	else
		CHECK(root != before[0]); /* a new PID namespace, new observed PIDs */
	CHECK_EQ(restored_passes(&g, root), workers + 1);
}

static void dump_kill_restore(const char *content, const char *const *wrapper, const char *name)
{
	dump_kill_restore_group(content, wrapper, name, 2, NULL);
}

/* NVLS-style groups: the multicast object is taken down before the native
 * checkpoint (cuemu's would fail otherwise) and rebuilt after the restore. */
static void multicast(void)
{
	char *env[] = {"VMM_GROUP_MULTICAST=1", NULL};
	dump_kill_restore_group("host", NULL, "mc2", 1, env);
	dump_kill_restore_group("host", NULL, "mc4", 3, env);
	dump_kill_restore_group("native", NULL, "mc4n", 3, env);
}

/* vLLM-style custom all-reduce over legacy IPC (cuMemAlloc memory through the
 * adapter): checkpoint, kill, restore in the workload's own PID namespace; the
 * group then opens the same handle bytes again. */
static void legacy_ipc(void)
{
	if (access("/usr/bin/unshare", X_OK) || access("/usr/bin/setsid", X_OK))
		SKIP("unshare/setsid missing");
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", "/usr/bin/setsid", NULL};
	char *env[] = {"VMM_GROUP_IPC=1", NULL};
	dump_kill_restore_group("host", wrapper, "ipc2", 1, env);
	dump_kill_restore_group("native", wrapper, "ipc4n", 3, env);
}

/* A creator that let go of what it shared: the first worker carries it
 * through the dump and the restore, the other is rebuilt as its importer, and
 * the parent's cached exports resolve after it (DESIGN.md §6.2). */
static void creator_let_go(void)
{
	char *env[] = {"VMM_GROUP_RELEASE=1", NULL};
	dump_kill_restore_group("host", NULL, "letgo-h", 2, env);
	if (access("/usr/bin/unshare", X_OK) || access("/usr/bin/setsid", X_OK))
		SKIP("unshare/setsid missing");
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", "/usr/bin/setsid", NULL};
	dump_kill_restore_group("native", wrapper, "letgo-n", 2, env);
}

/* r610, native legacy IPC in a checkpoint job (cusnap run --launch-job):
 * dumped in the job's order with the job file copied, killed, restored (the
 * copy written back first), and the pair verifies itself, its IPC handles
 * opened again after the restore. */
static void launch_job(void)
{
	static const char *const contents[] = {"host", "native"};
	for (int c = 0; c < 2; c++) {
		struct group g;
		char log[PATH_MAX], name[32];
		snprintf(name, sizeof(name), "job-%s", contents[c]);
		if (group_start_r610(&g, name, true, log, sizeof(log)) < 0)
			return;
		char dir[PATH_MAX + 32], *out;
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		int rc = checkpoint(&g, dir, contents[c], false, criu, &out);
		CHECK_EQ(rc, 0);
		CHECK_CONTAINS(out, "one at a time (a checkpoint job)");
		free(out);
		char copy[PATH_MAX + 64];
		snprintf(copy, sizeof(copy), "%s/cuda-checkpoint-job", dir);
		CHECK_EQ(access(copy, R_OK), 0);
		group_dumped(&g);
		if (rc)
			return;
		rc = restore(dir, &out);
		CHECK_EQ(rc, 0);
		if (rc)
			printf("%s\n", out);
		free(out);
		pid_t root = restored_root(dir);
		CHECK(root > 0);
		if (root > 0)
			CHECK_EQ(restored_passes(&g, root), 2);
	}
}

static void host_pidns_host_content(void)
{
	dump_kill_restore("host", NULL, "hh");
}

static void host_pidns_native_content(void)
{
	dump_kill_restore("native", NULL, "hn");
}

static void own_pidns(void)
{
	if (access("/usr/bin/unshare", X_OK) || access("/usr/bin/setsid", X_OK))
		SKIP("unshare/setsid missing");
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", "/usr/bin/setsid", NULL};
	dump_kill_restore("host", wrapper, "nsh");
	dump_kill_restore("native", wrapper, "nsn");
}

/* A tree whose session leader lies outside its PID namespace (started under
 * `unshare --pid --fork` without setsid, as some sandboxes run everything):
 * through cusnap run it gets a session of its own and is dumped and restored;
 * started without it, its checkpoint is refused before anything is done (CRIU
 * would refuse it after the prepare), and it runs on. */
static void session_outside(void)
{
	if (access("/usr/bin/unshare", X_OK))
		SKIP("unshare missing");
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", NULL};
	dump_kill_restore("host", wrapper, "sess");
	struct group g;
	if (group_start(&g, "sess-plain", 1, 2, true, wrapper, NULL, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], manifest[PATH_MAX + 64], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(checkpoint(&g, dir, "host", false, criu, &out), 64);
	CHECK_CONTAINS(out, "outside the tree's PID namespace");
	CHECK(!contains(out, "QUIESCE") && !contains(out, "lock"));
	free(out);
	snprintf(manifest, sizeof(manifest), "%s/" MANIFEST_FILE, dir);
	CHECK(access(manifest, F_OK) < 0);
	CHECK_EQ(group_finish(&g), 2);
}

/* A group started and checkpointed (host content) into ctl/ckpt, the dump
 * having ended it and its processes reaped: 0, or -1 (reported). */
static int group_checkpointed(struct group *g, const char *name, char *const *env, char dir[PATH_MAX + 32])
{
	if (group_start(g, name, 1, 2, false, NULL, env, NULL) < 0)
		return -1;
	char *out;
	snprintf(dir, PATH_MAX + 32, "%s/ckpt", g->ctl);
	int rc = checkpoint(g, dir, "host", false, criu, &out);
	CHECK_EQ(rc, 0);
	free(out);
	group_dumped(g);
	return rc == 0 ? 0 : -1;
}

/* A victim file outside the control directory, and a symlink to it planted at
 * name in ctl (a workload's trap for a root tool that follows links). */
static void plant_symlink(const char *ctl, const char *name, char *victim, size_t len)
{
	char link[PATH_MAX + 64];
	snprintf(victim, len, "%s/../victim-%s", ctl, name);
	test_write_file(victim, "keep");
	snprintf(link, sizeof(link), "%s/%s", ctl, name);
	unlink(link);
	CHECK_EQ(symlink(victim, link), 0);
}

/* The victim still reads "keep", and name in ctl is a regular file now. */
static void symlink_not_followed(const char *ctl, const char *name, const char *victim)
{
	char *text = test_read_file(victim), link[PATH_MAX + 64];
	CHECK_STR(text, "keep");
	free(text);
	snprintf(link, sizeof(link), "%s/%s", ctl, name);
	struct stat st;
	CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode));
}

/* --leave-running: snapshot-complete written (never through the symlink the
 * workload planted), the group keeps running and sharing; a restore while it
 * still runs is refused (its endpoints answer) and takes nothing from it; once
 * it has exited the same directory restores, the restore-complete left behind
 * (a symlink, planted) removed before CRIU runs and written anew. */
static void leave_running(void)
{
	struct group g;
	if (group_start_pair(&g, "lr") < 0)
		return;
	char dir[PATH_MAX + 32], victim[PATH_MAX + 64], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	plant_symlink(g.ctl, "snapshot-complete", victim, sizeof(victim));
	CHECK_EQ(checkpoint(&g, dir, "host", true, criu, &out), 0);
	free(out);
	symlink_not_followed(g.ctl, "snapshot-complete", victim);
	/* Still running: a restore over it is refused, its endpoints left alone. */
	CHECK_SAYS(out, restore(dir, &out), 1, "still runs there");
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu") > 0, 1);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"interposed\":true"), 2);
	free(json);
	/* Still sharing: let it verify and finish (restore-complete stays behind). */
	CHECK_EQ(group_finish(&g), 2);
	reap_all();
	plant_symlink(g.ctl, "restore-complete", victim, sizeof(victim));
	CHECK_EQ(restore(dir, &out), 0);
	free(out);
	symlink_not_followed(g.ctl, "restore-complete", victim);
	pid_t root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2 + 2); /* the log holds both runs' PASS lines */
}

/* Two restores of one checkpoint. While the first is under way (held after
 * RESTORE_CREATORS) a second is refused with 75, its directory in use; the
 * first completes. The second, afterwards, finds the restore-complete the
 * first left removed before CRIU runs, so the workload waits for its rebuilt
 * memory. */
static void restore_twice(void)
{
	struct group g;
	char dir[PATH_MAX + 32], *out;
	if (group_checkpointed(&g, "twice", NULL, dir) < 0)
		return;
	char log[PATH_MAX + 32];
	snprintf(log, sizeof(log), "%s/first-restore.out", g.ctl);
	char *argv[] = {cusnap, "restore", "--dir", dir, "--criu", criu, NULL};
	char *env[] = {"CUSNAP_FAULT=kill-after-restore-creators:stop", NULL};
	pid_t first = test_spawn(argv, env, log);
	CHECK(wait_stopped(first, 30000));
	CHECK_SAYS(out, restore(dir, &out), 75, "in use by another command");
	kill(first, SIGCONT);
	int status = test_wait_child(first, 60000);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	pid_t root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	reap_all();
	CHECK_EQ(restore(dir, &out), 0);
	free(out);
	root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 4);
	reap_all();
}

static void without_interposer(void)
{
	struct group g;
	if (group_start(&g, "plain", 1, 2, true, NULL, NULL, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, checkpoint(&g, dir, "host", false, criu, &out), 0, "native steps only");
	group_dumped(&g);
	/* Native only: the driver refuses the importer's restore (r580, as cuemu
	 * models it); the restored tree is killed, never left half-restored. */
	CHECK_EQ(restore(dir, &out), 2);
	CHECK_CONTAINS(out, "CUDA_ERROR_NOT_SUPPORTED");
	CHECK_CONTAINS(out, "restored tree killed");
	free(out);
	pid_t root = restored_root(dir);
	if (root > 0) {
		test_wait_child(root, 10000);
		CHECK(kill(root, 0) != 0);
	}
	reap_all();
}

static void criu_failing(void)
{
	struct group g;
	if (group_start_pair(&g, "badcriu") < 0)
		return;
	char fake[PATH_MAX + 32], dir[PATH_MAX + 32], *out;
	snprintf(fake, sizeof(fake), "%s/fake-criu", e2e_root);
	test_write_file(fake, "#!/bin/sh\necho 'Error (fake): refusing to dump' | tee \"$5/dump.log\" >&2\nexit 1\n");
	chmod(fake, 0755);
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, checkpoint(&g, dir, "host", false, fake, &out), 1, "CRIU dump failed");
	CHECK_NOTHING_SAID(g.ctl);
	/* (the log it names outlives the attempt's directory; --leave-running
	 * undone says nothing either) */
	char log[PATH_MAX + 64], said[PATH_MAX + 80];
	snprintf(log, sizeof(log), "%s/dump-failed.log", dir);
	snprintf(said, sizeof(said), "log: %s)", log);
	CHECK_SAYS(out, checkpoint(&g, dir, "host", true, fake, &out), 1, said);
	CHECK_NOTHING_SAID(g.ctl);
	char *kept = test_read_file(log);
	CHECK(kept && strstr(kept, "refusing to dump"));
	free(kept);
	/* Still running and healthy: it verifies itself. */
	CHECK_EQ(group_finish(&g), 2);
	reap_all();
}

/* The checkpoint id of dir's manifest (malloc'ed), or NULL. */
static char *checkpoint_id(const char *dir)
{
	struct manifest m;
	char err[512];
	if (manifest_load(dir, &m, err, sizeof(err)) < 0)
		return NULL;
	const char *id = json_member_string(m.root, "checkpoint_id");
	char *copy = id ? strdup(id) : NULL;
	manifest_free(&m);
	return copy;
}

/* A checkpoint that fails (its CRIU writes part of an image, then fails) into
 * a directory holding a good one: the good one stands whole (the same
 * manifest, nothing of the failed attempt left but its CRIU log, which inspect
 * names), the workload runs on, and the good checkpoint restores and passes. */
static void failed_over_good(void)
{
	struct group good, g;
	char dir[PATH_MAX + 32], fake[PATH_MAX + 32], partial[PATH_MAX + 48], *out;
	if (group_checkpointed(&good, "good", NULL, dir) < 0)
		return;
	char *id = checkpoint_id(dir);
	CHECK(id != NULL);
	snprintf(fake, sizeof(fake), "%s/fake-criu-partial", e2e_root);
	test_write_file(fake, "#!/bin/sh\n[ \"$1\" = dump ] && head -c 1048576 /dev/zero > \"$5/pages-1.img\"\n"
			      "echo 'Error (fake): no space left on device' | tee \"$5/dump.log\" >&2\nexit 1\n");
	chmod(fake, 0755);
	if (group_start_pair(&g, "over-good") == 0) {
		CHECK_SAYS(out, checkpoint(&g, dir, "host", false, fake, &out), 1, "CRIU dump failed");
		CHECK_EQ(group_finish(&g), 2); /* running and healthy */
		group_kill(&g);
	}
	char *after = checkpoint_id(dir);
	CHECK(id && after && !strcmp(id, after));
	free(after);
	free(id);
	snprintf(partial, sizeof(partial), "%s/.partial", dir);
	CHECK(access(partial, F_OK) != 0);
	/* inspect --dir names what a restore will meet: the failed attempt's log,
	 * an attempt cut short (one made here), and later no digests. */
	CHECK_EQ(mkdir(partial, 0700), 0);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0, "dump-failed.log: CRIU's log");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0, ".partial: an attempt cut short");
	CHECK_SAYS(out, restore(dir, &out), 0, "verify images");
	RESTORED_PASSES(&good, dir, 2);
	char manifest[PATH_MAX + 48];
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	json_t *m = json_load_file(manifest, 0, NULL);
	CHECK(m && json_object_del(m, "image_files") == 0 && json_dump_file(m, manifest, JSON_INDENT(2)) == 0);
	json_decref(m);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0, "digests: none recorded");
	reap_all();
}

/* A workload that is not parked (VMM_GROUP_CHURN: every process allocates,
 * maps and releases in a loop) checkpointed and restored: its calls wait
 * across the dump and the restore, none fails, and it passes. */
static void churning(void)
{
	char *env[] = {"VMM_GROUP_CHURN=1", NULL}, dir[PATH_MAX + 32], *out;
	struct group g;
	if (group_checkpointed(&g, "churn", env, dir) < 0)
		return;
	CHECK_SAYS(out, restore(dir, &out), 0, "restore complete");
	RESTORED_PASSES(&g, dir, 2);
	char *log = e2e_log_all(g.log);
	CHECK_EQ(count_of(log, " 0 failed calls"), 2);
	free(log);
	reap_all();
}

static void vmm_restore_failing(void)
{
	/* The parent re-creates its shared allocations at restore (host content):
	 * its 4th cuMemCreate (after 2 shared and 1 private) fails. */
	char *env[] = {"CUEMU_FAULT=cuMemCreate:4", "VMM_GROUP_FAULT_ROLE=parent", NULL};
	struct group g;
	char dir[PATH_MAX + 32], *out;
	if (group_checkpointed(&g, "vmmfail", env, dir) < 0)
		return;
	/* Twice: the first restore's killed tree is gone (reaped, not a zombie)
	 * when it exits, so the second finds its PIDs free. */
	for (int run = 0; run < 2; run++) {
		CHECK_EQ(restore(dir, &out), 2);
		CHECK_CONTAINS(out, "restored tree killed");
		CHECK_CONTAINS(out, "cuMemCreate");
		free(out);
		char done[PATH_MAX + 32];
		snprintf(done, sizeof(done), "%s/restore-complete", g.ctl);
		CHECK(access(done, F_OK) != 0);
		pid_t root = restored_root(dir);
		CHECK(root > 0 && kill(root, 0) < 0 && errno == ESRCH);
	}
	reap_all();
	/* Manifest and state are readable. */
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0);
	CHECK_CONTAINS(out, "manifest");
	CHECK_CONTAINS(out, "prepare ran");
	CHECK_CONTAINS(out, "creator");
	CHECK_CONTAINS(out, "importer");
	free(out);
}

/* The largest page image of checkpoint dir (the workload's memory, the host
 * arena's GPU bytes among it) into path. */
static void largest_pages(const char *dir, char *path, size_t len)
{
	char images[PATH_MAX + 16];
	snprintf(images, sizeof(images), "%s/images", dir);
	DIR *d = opendir(images);
	struct dirent *e;
	off_t best = -1;
	path[0] = '\0';
	while (d && (e = readdir(d))) {
		char p[PATH_MAX + 300];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", images, e->d_name);
		if (!strncmp(e->d_name, "pages-", 6) && stat(p, &st) == 0 && st.st_size > best) {
			best = st.st_size;
			snprintf(path, len, "%s", p);
		}
	}
	if (d)
		closedir(d);
	CHECK(best > 97 * 4096);
}

/* Damaged images are refused before CRIU runs, the file named, nothing made:
 * 64 bytes overwritten every 97 pages of the largest page image, then the
 * image truncated, then a record of the images emptied. Put back as written,
 * the same checkpoint restores and passes (the digests do not refuse a whole
 * checkpoint). */
static void damaged_images(void)
{
	struct group g;
	char dir[PATH_MAX + 32], pages[PATH_MAX + 64], saved[PATH_MAX + 80], *out;
	if (group_checkpointed(&g, "damaged", NULL, dir) < 0)
		return;
	largest_pages(dir, pages, sizeof(pages));
	snprintf(saved, sizeof(saved), "%s.saved", pages);
	char *cp[] = {"cp", pages, saved, NULL};
	CHECK_EQ(test_run_cmd(cp, NULL, 30000), 0);
	int fd = open(pages, O_WRONLY);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	char junk[64];
	memset(junk, 0x5a, sizeof(junk));
	for (off_t off = 4096; off + 64 <= st.st_size; off += 97 * 4096)
		CHECK_EQ(pwrite(fd, junk, sizeof(junk), off), 64);
	close(fd);
	CHECK_EQ(restore(dir, &out), 1);
	CHECK_CONTAINS(out, "is damaged");
	CHECK_CONTAINS(out, strrchr(pages, '/') + 1);
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	CHECK_EQ(restored_root(dir), 0); /* CRIU never ran */
	CHECK_EQ(truncate(pages, st.st_size / 2), 0);
	CHECK_SAYS(out, restore(dir, &out), 1, "truncated");
	CHECK_EQ(rename(saved, pages), 0);
	/* A record emptied ("image_files": {}) covers nothing: refused, the first file named. */
	char manifest[PATH_MAX + 32], kept[PATH_MAX + 48];
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	snprintf(kept, sizeof(kept), "%s.kept", manifest);
	char *keep[] = {"cp", manifest, kept, NULL};
	CHECK_EQ(test_run_cmd(keep, NULL, 30000), 0);
	json_t *m = json_load_file(manifest, 0, NULL);
	CHECK(m && json_object_set_new(m, "image_files", json_object()) == 0 && json_dump_file(m, manifest, 0) == 0);
	json_decref(m);
	CHECK_EQ(restore(dir, &out), 1);
	CHECK_CONTAINS(out, "has no digest");
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	CHECK_EQ(rename(kept, manifest), 0);
	CHECK_SAYS(out, restore(dir, &out), 0, "verify images");
	pid_t root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	reap_all();
}

/* How many of CRIU's page images hold a page (4 KiB) of the private memory's
 * mark (examples/vmm_group_private.h). A page, not less: cuemu's memsets run
 * on the CPU, whose vector registers hold the pattern, and a signal frame
 * saved on a thread's stack keeps up to 2 KiB of them (seen: 576 bytes);
 * memory that a checkpoint copies comes in whole pages. */
static int images_with_mark(const char *dir)
{
	char images[PATH_MAX + 16];
	snprintf(images, sizeof(images), "%s/images", dir);
	static uint32_t needle[1024];
	for (int i = 0; i < 1024; i++)
		needle[i] = 0x5ec0de77u;
	DIR *d = opendir(images);
	struct dirent *e;
	int found = 0;
	while (d && (e = readdir(d))) {
		char p[PATH_MAX + 300];
		snprintf(p, sizeof(p), "%s/%s", images, e->d_name);
		int fd = strncmp(e->d_name, "pages-", 6) ? -1 : open(p, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		if (m != MAP_FAILED) {
			found += memmem(m, (size_t)st.st_size, needle, sizeof(needle)) != NULL;
			munmap(m, (size_t)st.st_size);
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* Private memory through a checkpoint (DESIGN.md §6.2, §11.1): weights from
 * cuMemAlloc, an expandable segment, a KV cache barely used, in each process.
 * In file content (the default: no --content) none of its bytes is in CRIU's
 * images (looked for, page image by page image); in host content they are (the
 * arena CRIU dumps: the look finds them when they are there). Restored, each
 * process checks its bytes, pointers, handles and access. */
static void private_memory(void)
{
	char *env[] = {"VMM_GROUP_PRIVATE=1", NULL}, *out, pid[16], dir[PATH_MAX + 32];
	for (int c = 0; c < 2; c++) {
		struct group g;
		if (group_start(&g, c ? "private-host" : "private-file", 1, 2, false, NULL, env, NULL) < 0)
			return;
		snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
		snprintf(pid, sizeof(pid), "%d", g.root);
		int rc = c ? checkpoint(&g, dir, "host", false, criu, &out)
			   : tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl,
				  "--criu", criu, "--wait-ready", NULL);
		CHECK_EQ(rc, 0);
		if (!c)
			CHECK_CONTAINS(out, "(file content)");
		free(out);
		group_dumped(&g);
		int marked = images_with_mark(dir);
		if (c == 0 && marked)
			test_fail(__FILE__, __LINE__, "file content: %d of CRIU's page images hold private GPU bytes",
				  marked);
		if (c == 1)
			CHECK(marked > 0);
		CHECK_SAYS(out, restore(dir, &out), 0, "topology identical");
		pid_t root = restored_root(dir);
		if (root > 0)
			CHECK_EQ(restored_passes(&g, root), 2);
		char *log = e2e_log_all(g.log);
		CHECK_EQ(count_of(log, "private memory (weights, an expandable segment, a KV cache) intact"), 2);
		free(log);
		reap_all();
	}
}

/* A file system that fills while file content writes (a 12 MiB tmpfs of this
 * test's mount namespace, for some 40 MiB of the group's memory): the
 * checkpoint fails at PREPARE naming the full file system, is undone (exit 1,
 * nothing left in the directory), and the group runs on and passes. */
static void disk_full(void)
{
	char small[PATH_MAX], dir[PATH_MAX + 32], pid[16], *out, *env[] = {"VMM_GROUP_PRIVATE=1", NULL};
	snprintf(small, sizeof(small), "%s/small", e2e_root);
	CHECK_EQ(mkdir(small, 0700), 0);
	if (mount("tmpfs", small, "tmpfs", 0, "size=12m,mode=0700") != 0) {
		printf("  (skipped: cannot mount a small tmpfs here: %s)\n", strerror(errno));
		return;
	}
	struct group g;
	if (group_start(&g, "full", 1, 2, false, NULL, env, NULL) == 0) {
		snprintf(dir, sizeof(dir), "%s/ckpt", small);
		snprintf(pid, sizeof(pid), "%d", g.root);
		CHECK_EQ(tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl,
			      "--criu", criu, "--wait-ready", NULL),
			 1);
		CHECK_CONTAINS(out, "No space left on device");
		CHECK_CONTAINS(out, "runs as before");
		free(out);
		DIR *d = opendir(dir);
		int left = 0;
		for (struct dirent *e; d && (e = readdir(d));)
			left += e->d_name[0] != '.' || strcmp(e->d_name, ".partial") == 0;
		if (d)
			closedir(d);
		CHECK_EQ(left, 0);
		CHECK_EQ(group_finish(&g), 2);
		char *log = e2e_log_all(g.log);
		CHECK_EQ(count_of(log, "private memory (weights, an expandable segment, a KV cache) intact"), 2);
		free(log);
		group_kill(&g);
	}
	CHECK_EQ(umount(small), 0);
}

/* One checkpoint restored ten times in a row by a group that writes its log
 * (opened for appending, as every engine's): each restore finds the log grown
 * by the last restored group, sets it aside whole and makes it again as the
 * dump left it, so that CRIU takes it (before: "File ... has bad size", exit 2,
 * from the second restore on); each restored group passes. A log shorter than
 * the dump's is named, nothing made. */
static void restored_ten_times(void)
{
	struct group g;
	char dir[PATH_MAX + 32], *out;
	if (group_checkpointed(&g, "ten", NULL, dir) < 0)
		return;
	for (int i = 0; i < 10; i++) {
		int rc = restore(dir, &out);
		CHECK_EQ(rc, 0);
		if (i > 0)
			CHECK_CONTAINS(out, "had grown since the checkpoint: set aside");
		free(out);
		pid_t root = restored_root(dir);
		if (rc != 0 || root <= 0)
			break;
		CHECK_EQ(restored_passes(&g, root), 2 * (i + 1)); /* (this run's and those of the logs set aside) */
		reap_all();
	}
	char pidfile[PATH_MAX + 48];
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	unlink(pidfile); /* (the last restore's) */
	CHECK_EQ(truncate(g.log, 10), 0);
	CHECK_SAYS(out, restore(dir, &out), 1, "is shorter than it was");
	CHECK_EQ(restored_root(dir), 0);
}

/* Nothing in a checkpoint directory may be a stranger's (DESIGN.md §9): a
 * core image (whose credentials CRIU gives the process it makes) owned by
 * another user, the images directory owned by another user, or the manifest
 * writable by its group, and the restore is refused before anything is made,
 * the entry named; as written, the same checkpoint restores and passes. (A
 * stranger could otherwise rewrite both an image and its digest in the
 * manifest.) */
static void foreign_owned(void)
{
	struct group g;
	char dir[PATH_MAX + 32], core[PATH_MAX + 64], images[PATH_MAX + 48], manifest[PATH_MAX + 48], *out;
	if (group_checkpointed(&g, "foreign", NULL, dir) < 0)
		return;
	snprintf(core, sizeof(core), "%s/images/core-%d.img", dir, g.root);
	snprintf(images, sizeof(images), "%s/images", dir);
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	struct stat st;
	CHECK_EQ(stat(manifest, &st), 0);
	const char *const victims[] = {core, images};
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(chown(victims[i], 65534, 65534), 0);
		CHECK_EQ(restore(dir, &out), 64);
		CHECK_CONTAINS(out, "is owned by uid 65534");
		CHECK_CONTAINS(out, strrchr(victims[i], '/') + 1);
		CHECK_CONTAINS(out, "nothing done");
		free(out);
		CHECK_EQ(restored_root(dir), 0); /* CRIU never ran */
		CHECK_EQ(chown(victims[i], 0, 0), 0);
	}
	CHECK_EQ(chmod(manifest, 0660), 0);
	CHECK_SAYS(out, restore(dir, &out), 64, "manifest.json is writable by its group");
	CHECK_EQ(chmod(manifest, st.st_mode & 07777), 0);
	CHECK_SAYS(out, restore(dir, &out), 0, "verify images");
	pid_t root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	reap_all();
}

/* File content through a checkpoint (DESIGN.md §6.2): the shared bytes in a
 * file of their own in the checkpoint directory, its digest in the manifest. A damaged or
 * truncated file is refused before CRIU runs, the file named; put back as
 * written, the checkpoint restores and the workload checks every byte. */
static void file_content(void)
{
	struct group g;
	char dir[PATH_MAX + 32], *out;
	if (group_start(&g, "fc", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = checkpoint(&g, dir, "file", false, criu, &out);
	CHECK_EQ(rc, 0);
	/* (its digest the one its process took as it wrote: the file not read again) */
	CHECK_CONTAINS(out, "CRC32C of 1 files (1 from the CRCs their processes took as they wrote)");
	free(out);
	group_dumped(&g);
	int files;
	long long bytes = e2e_content_files(dir, &files);
	CHECK_EQ(files, 1);
	CHECK(bytes >= 2LL * (long long)e2e_alloc_bytes());
	char manifest[PATH_MAX + 32];
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	json_t *m = json_load_file(manifest, 0, NULL);
	json_t *record = m ? json_object_get(m, "content_files") : NULL;
	CHECK_EQ(record ? json_object_size(record) : 0, 1);
	const char *name = record ? json_object_iter_key(json_object_iter(record)) : NULL;
	char path[PATH_MAX + 64], saved[PATH_MAX + 80];
	snprintf(path, sizeof(path), "%s/%s", dir, name ? name : "?");
	snprintf(saved, sizeof(saved), "%s.saved", path);
	json_decref(m);
	char *cp[] = {"cp", path, saved, NULL};
	CHECK_EQ(test_run_cmd(cp, NULL, 30000), 0);
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "damage", 6, bytes / 2), 6);
	close(fd);
	/* inspect --verify reads every byte: the damage named. */
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--dir", dir, "--verify", NULL), 1);
	CHECK_CONTAINS(out, "is damaged: CRC32C");
	CHECK_CONTAINS(out, name ? name : "?");
	free(out);
	/* Damaged: found as its block is copied back (not by reading the file
	 * before), the file and offset named, the restored tree killed before it
	 * ran; truncated: refused before CRIU runs. */
	/* The log grew since the checkpoint: the restore sets it aside and makes
	 * it again as it was; failing, it puts the grown one back. */
	FILE *lf = fopen(g.log, "a");
	CHECK(lf != NULL);
	if (lf)
		fputs("written after the checkpoint\n", lf), fclose(lf);
	char *log_before = test_read_file(g.log);
	CHECK_EQ(restore(dir, &out), 2);
	CHECK_CONTAINS(out, "is damaged at");
	CHECK_CONTAINS(out, name ? name : "?");
	CHECK_CONTAINS(out, "nothing of it released to the workload (restored tree killed)");
	CHECK_CONTAINS(out, "set aside as");
	CHECK_CONTAINS(out, "put back as it had grown (the restore failed)");
	free(out);
	char *log_after = test_read_file(g.log), *log_all = e2e_log_all(g.log);
	CHECK(log_before && log_after && !strcmp(log_before, log_after)); /* the grown log back in its place */
	CHECK(log_after && log_all && !strcmp(log_after, log_all));       /* and nothing left aside */
	free(log_before);
	free(log_after);
	free(log_all);
	CHECK_EQ(truncate(path, bytes / 2), 0);
	char pidfile[PATH_MAX + 48];
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	unlink(pidfile); /* (the killed tree's) */
	CHECK_SAYS(out, restore(dir, &out), 1, "truncated or grown");
	CHECK_EQ(restored_root(dir), 0); /* CRIU never ran */
	CHECK_EQ(rename(saved, path), 0);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, "--verify", NULL), 0, "every byte of");
	CHECK_SAYS(out, restore(dir, &out), 0, "verify content files");
	pid_t root = restored_root(dir);
	CHECK(root > 0);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	reap_all();
}

/* A checkpoint without digests (an older cusnap's) whose page image is cut in
 * half: CRIU runs, and however it goes wrong the restore ends by itself, within
 * CRIU's bounds (here: its log may not pass 8 MiB), exit 2, with a bounded log
 * and nothing of what CRIU made left running; and a SIGTERM ends it at once. */
static void runaway_criu(void)
{
	struct group g;
	char dir[PATH_MAX + 32], pages[PATH_MAX + 64], manifest[PATH_MAX + 32], *out;
	if (group_checkpointed(&g, "runaway", NULL, dir) < 0)
		return;
	pid_t was = g.root;
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	json_t *m = json_load_file(manifest, 0, NULL);
	CHECK(m != NULL);
	if (!m)
		return;
	CHECK_EQ(json_object_del(m, "image_files"), 0);
	CHECK_EQ(json_dump_file(m, manifest, 0), 0);
	json_decref(m);
	largest_pages(dir, pages, sizeof(pages));
	struct stat st;
	CHECK_EQ(stat(pages, &st), 0);
	CHECK_EQ(truncate(pages, st.st_size / 2), 0);
	char *env[] = {"CUSNAP_CRIU_LOG_MAX=8388608", "CUSNAP_CRIU_TIMEOUT_MS=60000", NULL};
	CHECK_EQ(tool(&out, env, cusnap, "restore", "--dir", dir, "--criu", criu, NULL), 2);
	CHECK_CONTAINS(out, "unverified");
	CHECK_CONTAINS(out, "killed at its log bound");
	free(out);
	char log[PATH_MAX + 48];
	snprintf(log, sizeof(log), "%s/images/restore.log", dir);
	CHECK(stat(log, &st) == 0 && st.st_size < 64 * 1048576);
	reap_all();
	CHECK(kill(was, 0) < 0 && errno == ESRCH); /* nothing restored runs */
	/* The same runaway with no near bound: SIGTERM to cusnap ends it at once
	 * (CRIU killed, with what it made), exit 2. */
	char out_path[PATH_MAX + 32];
	snprintf(out_path, sizeof(out_path), "%s/sigterm-restore.out", g.ctl);
	char *argv[] = {cusnap, "restore", "--dir", dir, "--criu", criu, NULL};
	char *far[] = {"CUSNAP_CRIU_LOG_MAX=4294967296", "CUSNAP_CRIU_TIMEOUT_MS=120000", NULL};
	pid_t p = test_spawn(argv, far, out_path);
	usleep(700 * 1000);
	kill(p, SIGTERM);
	int status = test_wait_child(p, 30000); /* (without the signal path: 120 s or 4 GiB of log) */
	char *text = test_read_file(out_path);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 2);
	CHECK_CONTAINS(text ? text : "", "CRIU killed");
	free(text);
	reap_all();
	CHECK(kill(was, 0) < 0 && errno == ESRCH);
	unlink(log);
}

/* The dumped root reaped by its parent only 1.5 s after the checkpoint (a
 * slow parent): a restore started at once waits for its PID, says so, and
 * restores; a live process on a PID is named and nothing is done. */
struct late_reap {
	pid_t pids[8];
	int n;
};

static void *reap_late(void *arg)
{
	struct late_reap *l = arg;
	usleep(1500 * 1000);
	for (int i = 0; i < l->n; i++)
		waitpid(l->pids[i], NULL, 0);
	return NULL;
}

static void restore_at_once(void)
{
	struct group g;
	if (group_start_pair(&g, "atonce") < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	struct late_reap l;
	l.n = tree_pids(g.root, l.pids, 8);
	CHECK_SAYS(out, checkpoint(&g, dir, "host", false, criu, &out), 0, "zombie");
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, reap_late, &l), 0);
	CHECK_SAYS(out, restore(dir, &out), 0, "held by a zombie");
	pthread_join(th, NULL);
	g.child = 0;
	pid_t root = restored_root(dir);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	reap_all();
	/* A live process on the PID: named, nothing done. */
	pid_t squatter = fork();
	if (squatter == 0) {
		pause();
		_exit(0);
	}
	char pidfile[PATH_MAX + 32], manifest[PATH_MAX + 32];
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", dir);
	json_t *m = json_load_file(manifest, 0, NULL);
	CHECK(m != NULL);
	if (!m)
		return;
	json_t *p0 = json_array_get(json_object_get(m, "processes"), 0);
	json_object_set_new(p0, "pid", json_integer(squatter));
	json_object_set_new(p0, "nspid", json_integer(squatter));
	CHECK_EQ(json_object_del(m, "image_files"), 0);
	CHECK_EQ(json_dump_file(m, manifest, 0), 0);
	json_decref(m);
	unlink(pidfile);
	CHECK_EQ(restore(dir, &out), 1);
	char want[64];
	snprintf(want, sizeof(want), "is taken by process %d", squatter);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	CHECK(access(pidfile, F_OK) != 0);
	kill(squatter, SIGKILL);
	waitpid(squatter, NULL, 0);
}

/* cusnap checkpoint of the tree of root into dir/ckpt (ck): its exit code,
 * what it printed in *out. */
static int checkpoint_into_ckpt(pid_t root, const char *dir, const char *ctl, char ck[PATH_MAX + 16], char **out)
{
	char pid[16];
	snprintf(pid, 16, "%d", (int)root);
	snprintf(ck, PATH_MAX + 16, "%s/ckpt", dir);
	return tool(out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", ck, "--control-dir", ctl, "--criu", criu,
		    NULL);
}

static void partial_interposition(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], ck[PATH_MAX + 16], pid[16], *out;
	e2e_scratch("partial", dir, ctl);
	pid_t sh = partial_tree_start(dir, ctl);
	snprintf(pid, sizeof(pid), "%d", sh);
	CHECK_SAYS(out, checkpoint_into_ckpt(sh, dir, ctl, ck, &out), 1, "partial interposition");
	/* Refused before anything changed: both still running, nothing dumped. */
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--control-dir", ctl, "--json", NULL), 0);
	CHECK_EQ(count_of(out, "\"state\":\"running\""), 2);
	free(out);
	char manifest[PATH_MAX + 32];
	snprintf(manifest, sizeof(manifest), "%s/manifest.json", ck);
	CHECK(access(manifest, F_OK) != 0);
	tree_kill(sh);
	reap_all();
}

static void device_map(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], ck[PATH_MAX + 16], *out;
	e2e_scratch("devmap", dir, ctl);
	pid_t sh = gpu_pair_start(dir, ctl);
	CHECK_EQ(checkpoint_into_ckpt(sh, dir, ctl, ck, &out), 0);
	free(out);
	test_wait_child(sh, 10000);
	reap_all();
	/* Swap the two GPUs: their UUIDs are in the manifest. */
	char mpath[PATH_MAX + 32], err[256], map[256];
	snprintf(mpath, sizeof(mpath), "%s/manifest.json", ck);
	char *text = test_read_file(mpath);
	struct manifest m = {0};
	CHECK_EQ(text ? manifest_parse(text, strlen(text), &m, err, sizeof(err)) : -1, 0);
	const json_t *gpus = json_object_get(m.root, "gpus");
	const char *g0 = json_string_value(json_array_get(gpus, 0)), *g1 = json_string_value(json_array_get(gpus, 1));
	CHECK(g0 && g1);
	/* CRIU ran with an empty plugin directory: its CUDA plugin never loaded. */
	const json_t *criu_rec = json_object_get(m.root, "criu");
	CHECK(criu_rec && !json_member_bool(criu_rec, "cuda_plugin", true));
	CHECK_CONTAINS(text, "\"--libdir\"");
	if (!g0 || !g1) {
		manifest_free(&m);
		free(text);
		return;
	}
	/* A partial map is refused before CRIU creates anything. */
	snprintf(map, sizeof(map), "%s=%s", g0, g1);
	CHECK_EQ(tool(&out, NULL, cusnap, "restore", "--dir", ck, "--criu", criu, "--device-map", map, NULL), 64);
	CHECK_CONTAINS(out, "not mapped");
	CHECK(!contains(out, "criu restore"));
	free(out);
	snprintf(map, sizeof(map), "%s=%s,%s=%s", g0, g1, g1, g0);
	manifest_free(&m);
	free(text);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "restore", "--dir", ck, "--criu", criu, "--device-map", map, NULL), 0,
		   "devices remapped");
	gpu_pair_swapped(dir, ck);
}

/* The phase boundaries of checkpoint (include/cusnap/faults.def). */
static const enum fault boundaries[] = {FAULT_KILL_AFTER_QUIESCE, FAULT_KILL_AFTER_PREPARE,    FAULT_KILL_AFTER_STATE,
					FAULT_KILL_AFTER_LOCK,    FAULT_KILL_AFTER_CHECKPOINT, FAULT_KILL_AFTER_DUMP};

/* cusnap checkpoint with CUSNAP_FAULT=point:how ("term": SIGTERM to cusnap,
 * "self": SIGKILL). Returns its exit (-1: killed). */
static int faulted_checkpoint(struct group *g, const char *point, const char *how, bool leave_running, char **out)
{
	char pid[16], fault[96], dir[PATH_MAX + 32];
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(fault, sizeof(fault), "CUSNAP_FAULT=%s:%s", point, how);
	snprintf(dir, sizeof(dir), "%s/ckpt", g->ctl);
	char *env[] = {fault, NULL};
	return tool(out, env, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g->ctl, "--criu", criu,
		    leave_running ? "--leave-running" : NULL, NULL);
}

/* The tree the dump killed, restored from g's checkpoint, passes. */
static void restores_and_passes(struct group *g, const char *what)
{
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g->ctl);
	group_dumped(g);
	int rc = restore(dir, &out);
	if (rc != 0)
		test_fail(__FILE__, __LINE__, "%s: restore exited %d:\n%s", what, rc, out);
	free(out);
	pid_t root = restored_root(dir);
	if (rc == 0 && root > 0 && restored_passes(g, root) != 2)
		test_fail(__FILE__, __LINE__, "%s: the restored workload did not pass", what);
	reap_all();
}

/* SIGTERM at each boundary of checkpoint: before the dump everything is undone
 * (exit 1, the group passes); after the dump (the tree has exited) the
 * checkpoint is complete: exit 2, and it restores. SIGKILL at each boundary:
 * `cusnap resume --pid ROOT` alone brings the group back; after the dump the
 * checkpoint restores. With --leave-running, SIGKILL after the dump leaves the
 * tree natively checkpointed: resume --pid alone again. */
static void interrupted_checkpoint(void)
{
	size_t nb = sizeof(boundaries) / sizeof(boundaries[0]);
	for (size_t i = 0; i < nb * 3; i++) {
		const char *point = fault_name(boundaries[i % nb]);
		int mode = (int)(i / nb); /* 0: SIGTERM, 1: SIGKILL, 2: SIGKILL with --leave-running */
		bool after_dump = !strcmp(point, "kill-after-dump"), leave = mode == 2;
		if (leave && !after_dump)
			continue; /* the same as without --leave-running */
		struct group g;
		if (group_start(&g, mode ? "ckkill" : "ckterm", 1, 2, false, NULL, NULL, NULL) < 0)
			return;
		char *out, what[128], pid[16];
		snprintf(what, sizeof(what), "%s at %s%s", mode ? "SIGKILL" : "SIGTERM", point,
			 leave ? " (--leave-running)" : "");
		snprintf(pid, sizeof(pid), "%d", g.root);
		int rc = faulted_checkpoint(&g, point, mode ? "self" : "term", leave, &out);
		int want = mode ? -1 : after_dump ? 2 : 1;
		if (rc != want || (!mode && !contains(out, after_dump ? "checkpoint in" : "everything undone")))
			test_fail(__FILE__, __LINE__, "%s: checkpoint exited %d (want %d):\n%s", what, rc, want, out);
		free(out);
		if (after_dump && !leave) {
			restores_and_passes(&g, what);
			continue;
		}
		if (mode) {
			rc = tool(&out, NULL, cusnap, "resume", "--pid", pid, "--control-dir", g.ctl, NULL);
			if (rc != 0)
				test_fail(__FILE__, __LINE__, "%s: resume --pid alone exited %d:\n%s", what, rc, out);
			free(out);
		}
		sweep_group_whole(&g, 2, what);
		group_kill(&g);
		reap_all();
	}
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("ckpt");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	test_run("checkpoint, kill, restore: host content, host PID namespace", host_pidns_host_content);
	test_run("checkpoint, kill, restore: native content, host PID namespace", host_pidns_native_content);
	test_run("checkpoint, kill, restore in the workload's own PID namespace, both contents", own_pidns);
	test_run("a session led from outside the PID namespace: cusnap run gives its own; else refused, nothing done",
		 session_outside);
	test_run("--leave-running: keeps running, snapshot-complete, a restore over it refused, restorable later",
		 leave_running);
	test_run("two restores of one checkpoint: one at a time; the stale restore-complete removed first",
		 restore_twice);
	test_run("a CUDA workload without the interposer: native steps only", without_interposer);
	test_run("CRIU failing: exit 1, the workload keeps running and healthy", criu_failing);
	test_run("a churning workload (not parked) checkpointed and restored: its calls wait, none fails", churning);
	test_run("a checkpoint failing into a directory with a good one: the good one stands and restores",
		 failed_over_good);
	test_run("private memory through a checkpoint: none of it in CRIU's images in file content (the default)",
		 private_memory);
	test_run("the file system full while file content is written: undone, nothing left, the group runs on",
		 disk_full);
	test_run("one checkpoint restored ten times by a group writing its log: each restore sets the grown log aside",
		 restored_ten_times);
	test_run("damaged or truncated images: refused before CRIU runs, the file named", damaged_images);
	test_run("an image, the images directory or the manifest a stranger could write: refused before CRIU runs",
		 foreign_owned);
	test_run("file content: the shared bytes in a file of the checkpoint; damaged or truncated, refused",
		 file_content);
	test_run("a runaway CRIU restore (a cut page image, no digests): ended at its log bound, exit 2", runaway_criu);
	test_run("restore at once after checkpoint: zombie PIDs waited for; a live process on a PID named",
		 restore_at_once);
	test_run("partial interposition: refused before anything changes", partial_interposition);
	test_run("--device-map: GPUs swapped at restore, sharing rebuilt on the new ones", device_map);
	test_run("multicast groups of 2 and 4 processes over 2 devices: checkpoint, kill, restore", multicast);
	test_run("legacy IPC groups of 2 and 4 (host, native): checkpoint, kill, restore in their own PID namespace",
		 legacy_ipc);
	test_run("a creator that let go: an importer carries it through dump and restore (host; native in a PID "
		 "namespace)",
		 creator_let_go);
	test_run("r610: native legacy IPC in a checkpoint job: checkpoint, kill, restore (host, native)", launch_job);
	test_run("the VMM rebuild failing after CRIU restore: tree killed, exit 2; inspect --dir", vmm_restore_failing);
	test_run("SIGTERM and SIGKILL at each phase boundary of checkpoint", interrupted_checkpoint);
	return e2e_done();
}
