/* SPDX-License-Identifier: MIT */
/* The coordinator's and cusnap's contract (DESIGN.md §3): guard rails, the
 * validation refusals, partial interposition, the agent's argv shapes in a PID
 * namespace, and a restore with nothing prepared. */
#include <dirent.h>

#include "sweep.h"

static char cusnap[PATH_MAX], coord[PATH_MAX + 32];

/* Guard rails: a tree with cusnap's own ancestors or this namespace's init is
 * refused (by suspend, resume and checkpoint) before anything changes; a thread id stands for its process. */
static void guard_rails(void)
{
	char tool_path[PATH_MAX], self[16], *out;
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(self, sizeof(self), "%d", getpid()); /* cusnap's parent: an ancestor */
	CHECK_SAYS(out, tool(&out, NULL, tool_path, "suspend", "--pid", "1", NULL), 64, "PID 1");
	CHECK_SAYS(out, tool(&out, NULL, tool_path, "resume", "--pid", "1", NULL), 64, "PID 1");
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/guard", e2e_root);
	CHECK_SAYS(out, tool(&out, NULL, tool_path, "checkpoint", "--pid", "1", "--dir", dir, NULL), 64, "PID 1");
	CHECK_SAYS(out, tool(&out, NULL, tool_path, "suspend", "--pid", self, NULL), 64, "an ancestor of cusnap");
	struct group g;
	if (group_start(&g, "guard", 1, 1, false, NULL, NULL, NULL) < 0)
		return;
	/* A thread of the workload's root (the shim's endpoint thread) names the process. */
	char task[64], tid[16] = "";
	snprintf(task, sizeof(task), "/proc/%d/task", g.root);
	DIR *d = opendir(task);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' && atoi(e->d_name) != g.root)
			snprintf(tid, sizeof(tid), "%s", e->d_name);
	if (d)
		closedir(d);
	CHECK(tid[0]);
	CHECK_EQ(tool(&out, NULL, tool_path, "inspect", "--pid", tid, "--control-dir", g.ctl, NULL), 0);
	char note[64];
	snprintf(note, sizeof(note), "is a thread of process %d", g.root);
	CHECK_CONTAINS(out, note);
	free(out);
	group_kill(&g);
}

/* A target_helper under the launcher, for the refusals. */
static pid_t helper(const char *dir, const char *name, const char *ctl, const char *const *opts)
{
	static char launcher[PATH_MAX + 32], h[PATH_MAX + 32], envctl[PATH_MAX + 32];
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", bin_dir);
	snprintf(h, sizeof(h), "%s/emu/target_helper", tests_dir);
	snprintf(envctl, sizeof(envctl), "SNAPSHOT_CONTROL_DIR=%s", ctl);
	const char *argv[16] = {launcher, h, dir, name};
	int n = 4;
	for (int i = 0; opts && opts[i]; i++)
		argv[n++] = opts[i];
	argv[n] = NULL;
	char *env[] = {envctl, NULL};
	char log[PATH_MAX + 32];
	snprintf(log, sizeof(log), "%s/%s.log", dir, name);
	pid_t pid = test_spawn((char *const *)argv, env, log);
	int ns;
	unsigned long long va;
	if (test_wait_ready(dir, name, 20000, &ns, &va) < 0)
		test_fail(__FILE__, __LINE__, "helper %s did not get ready", name);
	return pid;
}

static int prepare(const char *ctl, const char *dir, char **out, pid_t a, pid_t b)
{
	char pa[16], pb[16], cd[PATH_MAX + 32];
	snprintf(pa, sizeof(pa), "%d", a);
	snprintf(pb, sizeof(pb), "%d", b);
	snprintf(cd, sizeof(cd), "--control-dir=%s", ctl);
	if (b > 0)
		return tool(out, NULL, coord, "--prepare", cd, "--checkpoint-dir", dir, "--process", pa, pa,
			    "--process", pb, pb, NULL);
	return tool(out, NULL, coord, "--prepare", cd, "--checkpoint-dir", dir, "--process", pa, pa, NULL);
}

static void validation_refusals(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], *out;
	e2e_scratch("refusals", dir, ctl);
	const char *serve[] = {"--serve", NULL}, *import[] = {"--import", "c", "--dev", "1", NULL};
	pid_t c = helper(dir, "c", ctl, serve), i = helper(dir, "i", ctl, import);
	/* A partial group: the importer without its creator. */
	CHECK_SAYS(out, prepare(ctl, dir, &out, i, 0), 1, "partial group");
	/* Nothing changed: the full group prepares (and is rebuilt by a restore). */
	CHECK_EQ(prepare(ctl, dir, &out, c, i), 0);
	free(out);
	char pc[16], pi[16], cd[PATH_MAX + 32];
	snprintf(pc, sizeof(pc), "%d", c);
	snprintf(pi, sizeof(pi), "%d", i);
	snprintf(cd, sizeof(cd), "--control-dir=%s", ctl);
	CHECK_EQ(tool(&out, NULL, coord, "--restore", cd, "--checkpoint-dir", dir, "--process", pc, pc, "--process", pi,
		      pi, NULL),
		 0);
	free(out);
	TARGET_EXPECT_DIR(dir, "i", "check 1", "PASS");
	/* The creator drops its handle and mapping: the importer carries the
	 * memory (DESIGN.md §6.2), and its bytes come back. */
	TARGET_EXPECT_DIR(dir, "c", "drop", "CUDA_SUCCESS");
	CHECK_SAYS(out, prepare(ctl, dir, &out, c, i), 0, "importers carry what their creators let go");
	CHECK_EQ(tool(&out, NULL, coord, "--restore", cd, "--checkpoint-dir", dir, "--process", pc, pc, "--process", pi,
		      pi, NULL),
		 0);
	free(out);
	TARGET_EXPECT_DIR(dir, "i", "check 1", "PASS");
	/* Without its creator's process it is still a partial group. */
	CHECK_SAYS(out, prepare(ctl, dir, &out, i, 0), 1, "partial group");
	kill(c, SIGKILL);
	kill(i, SIGKILL);
	waitpid(c, NULL, 0);
	waitpid(i, NULL, 0);
	/* Shared as a FABRIC handle: refused, with the handle type named. */
	const char *fabric[] = {"--fabric", NULL};
	pid_t f = helper(dir, "f", ctl, fabric);
	TARGET_EXPECT_DIR(dir, "f", "fabric", "CUDA_SUCCESS");
	CHECK_SAYS(out, prepare(ctl, dir, &out, f, 0), 1, "only POSIX file descriptor sharing");
	kill(f, SIGKILL);
	waitpid(f, NULL, 0);
}

static void partial_interposition(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], *out;
	e2e_scratch("partial", dir, ctl);
	pid_t sh = partial_tree_start(dir, ctl);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", sh);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 1,
		   "partial interposition");
	/* Refused before anything changed. */
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--control-dir", ctl, "--json", NULL), 0);
	CHECK_EQ(count_of(out, "\"state\":\"running\""), 2);
	free(out);
	tree_kill(sh);
	waitpid(sh, NULL, 0);
	/* A process launched under the interposer (it carries the launcher's
	 * marker) whose endpoint is gone: interposed and broken, not "not
	 * interposed" (fail closed). */
	const char *serve[] = {"--serve", NULL};
	pid_t c = helper(dir, "c", ctl, serve);
	char endpoint[PATH_MAX + 64];
	snprintf(pid, sizeof(pid), "%d", c);
	snprintf(endpoint, sizeof(endpoint), "%s/cuda-vmm-%d.sock", ctl, c);
	CHECK_EQ(unlink(endpoint), 0);
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 1);
	CHECK_CONTAINS(out, "partial interposition");
	CHECK_CONTAINS(out, "launched under the interposer");
	free(out);
	kill(c, SIGKILL);
	waitpid(c, NULL, 0);
}

/* The agent's exact argv shapes, with a workload in its own PID namespace. */
static void contract_shapes(void)
{
	if (geteuid() != 0) {
		printf("  (PID namespace part skipped: needs root)\n");
		return;
	}
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", NULL};
	static char *private[] = {"VMM_GROUP_PRIVATE=1", NULL}; /* (weights, a segment, a KV cache: carried too) */
	struct group g;
	if (group_start(&g, "pidns", 2, 2, false, wrapper, private, NULL) < 0)
		return;
	pid_t pids[8];
	group_pids(&g, pids, 3);
	char obs[3][16], ns[3][16], dir[PATH_MAX + 32], *out;
	for (int i = 0; i < 3; i++) {
		snprintf(obs[i], sizeof(obs[i]), "%d", pids[i]);
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/status", pids[i]);
		char *st = test_read_file(path), *line = st ? strstr(st, "NSpid:") : NULL;
		char *nl = line ? strchr(line, '\n') : NULL;
		if (nl)
			*nl = '\0';
		char *last = line ? strrchr(line, '\t') : NULL;
		snprintf(ns[i], sizeof(ns[i]), "%s", last ? last + 1 : "0");
		free(st);
		CHECK(strcmp(obs[i], ns[i]) != 0); /* observed PID != namespace PID */
	}
	snprintf(dir, sizeof(dir), "%s/state", g.ctl);
	mkdir(dir, 0700);
	char *env[] = {g.env_ctl, NULL};
	/* Prepare, as the agent runs it in the host namespaces. */
	CHECK_EQ(tool(&out, env, coord, "--prepare", "--proc-root", "/proc", "--checkpoint-dir", dir, "--process",
		      obs[0], ns[0], "--process", obs[1], ns[1], "--process", obs[2], ns[2], NULL),
		 0);
	free(out);
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0 + 3); /* every tracked one released, private too */
	/* Restore, as it runs inside the container: empty proc-root, SNAPSHOT_CONTROL_DIR. */
	CHECK_EQ(tool(&out, env, coord, "--restore", "--proc-root", "", "--checkpoint-dir", dir, "--process", obs[0],
		      ns[0], "--process", obs[1], ns[1], "--process", obs[2], ns[2], NULL),
		 0);
	free(out);
	group_done(&g, 3);
}

static void missing_state(void)
{
	char dir[PATH_MAX], *out;
	snprintf(dir, sizeof(dir), "%s/empty", e2e_root);
	mkdir(dir, 0700);
	CHECK_EQ(tool(&out, NULL, coord, "--restore", "--proc-root", "", "--checkpoint-dir", dir, "--process", "1", "1",
		      NULL),
		 0);
	CHECK_CONTAINS(out, "nothing was prepared");
	free(out);
	CHECK(tool(&out, NULL, coord, "--restore", "--require-state", "--proc-root", "", "--checkpoint-dir", dir,
		   "--process", "1", "1", NULL) != 0);
	CHECK_CONTAINS(out, "cuda-vmm.state");
	free(out);
}

/* An import the shim did not broker: a raw FD from a process outside the
 * interposer (a memory service). suspend refuses at QUIESCE, naming it, with
 * nothing changed; once the application released it, suspend succeeds. */
static void foreign_import(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], h[PATH_MAX + 32], log[PATH_MAX + 32], *out;
	e2e_scratch("foreign", dir, ctl);
	snprintf(h, sizeof(h), "%s/emu/target_helper", tests_dir);
	snprintf(log, sizeof(log), "%s/service.log", dir);
	char *argv[] = {h, dir, "service", "--serve", NULL};
	pid_t service = test_spawn(argv, NULL, log);
	int ns;
	unsigned long long va;
	CHECK_EQ(test_wait_ready(dir, "service", 20000, &ns, &va), 0);
	const char *import[] = {"--import", "service", NULL};
	pid_t i = helper(dir, "i", ctl, import);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", i);
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 1);
	CHECK_CONTAINS(out, "imported from raw file descriptors");
	CHECK_CONTAINS(out, "everything undone");
	free(out);
	TARGET_EXPECT_DIR(dir, "i", "check 1", "PASS"); /* untouched */
	TARGET_EXPECT_DIR(dir, "i", "drop", "CUDA_SUCCESS");
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 0);
	free(out);
	CHECK_EQ(tool(&out, NULL, cusnap, "resume", "--pid", pid, "--control-dir", ctl, NULL), 0);
	free(out);
	kill(i, SIGKILL);
	kill(service, SIGKILL);
	waitpid(i, NULL, 0);
	waitpid(service, NULL, 0);
}

/* Every process of the tree killed during suspend (not by cusnap): exit 2,
 * never "runs as before", and each death named with how it ended (it is a
 * zombie of the test's until reaped). */
static void all_gone(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], *out;
	e2e_scratch("gone", dir, ctl);
	const char *serve[] = {"--serve", NULL};
	pid_t c = helper(dir, "c", ctl, serve);
	char pid[16], fault[64];
	snprintf(pid, sizeof(pid), "%d", c);
	snprintf(fault, sizeof(fault), "CUSNAP_FAULT=kill-after-quiesce:%d", c);
	char *env[] = {fault, NULL};
	CHECK_EQ(tool(&out, env, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 2);
	CHECK_CONTAINS(out, "every CUDA process of the tree died meanwhile");
	char dead[64];
	snprintf(dead, sizeof(dead), "%d killed by SIGKILL", c);
	CHECK_CONTAINS(out, dead);
	CHECK(!contains(out, "runs as before"));
	free(out);
	waitpid(c, NULL, 0);
}

/* cusnap run where the loader finds no libcuda.so.1 (no driver, cuemu not on
 * LD_LIBRARY_PATH): it says what is missing and how to give it, before the
 * program's loader fails with its own message alone (exit 127). */
static void run_without_driver(void)
{
	if (access("/usr/lib/x86_64-linux-gnu/libcuda.so.1", F_OK) == 0 ||
	    access("/usr/lib64/libcuda.so.1", F_OK) == 0) {
		printf("  (skipped: this machine has a driver)\n");
		return;
	}
	char *env[] = {"LD_LIBRARY_PATH=/nonexistent", NULL}, *out;
	CHECK_SAYS(out, tool(&out, env, cusnap, "run", "--", "/bin/true", NULL), 0,
		   "no libcuda.so.1 where the loader looks");
	char *with[] = {"LD_LIBRARY_PATH=", NULL};
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "LD_LIBRARY_PATH=%s", emu_dir);
	with[0] = path;
	CHECK_EQ(tool(&out, with, cusnap, "run", "--", "/bin/true", NULL), 0);
	CHECK(!contains(out, "no libcuda.so.1"));
	free(out);
}

/* A worker killed once every process is natively checkpointed (not by
 * cusnap), then one killed once locked: the suspend names it and exits 1 (the
 * rest put back running) with a message that does not say "as before" (it used
 * to exit 0 over a tree it no longer had), nor a driver error for a process
 * that is gone (CUDA_ERROR_NOT_INITIALIZED). */
static void one_gone(void)
{
	for (int after_lock = 0; after_lock < 2; after_lock++) {
		struct group g;
		if (group_start_pair(&g, "one-gone") < 0)
			return;
		pid_t pids[8];
		if (group_pids(&g, pids, 2) != 2)
			return;
		pid_t worker = pids[0] == g.root ? pids[1] : pids[0];
		char fault[64], *out;
		snprintf(fault, sizeof(fault), "CUSNAP_FAULT=%s:%d",
			 after_lock ? "kill-after-lock" : "kill-after-checkpoint", (int)worker);
		char *env[] = {fault, NULL};
		CHECK_EQ(group_suspend(&g, "host", &out, env), 1);
		char named[64];
		snprintf(named, sizeof(named),
			 after_lock ? "native checkpoint of process %d failed: the process is gone"
				    : "CUDA process %d (namespace PID",
			 (int)worker);
		CHECK_CONTAINS(out, named);
		CHECK_CONTAINS(out, after_lock ? "not as before" : "died during the operation");
		CHECK(!contains(out, "runs as before"));
		CHECK(!contains(out, "CUDA_ERROR_NOT_INITIALIZED"));
		free(out);
		char *json = group_inspect(&g);
		CHECK_EQ(count_of(json, "\"state\":\"running\""), 1);
		CHECK_CONTAINS(json, "\"half_done\":false");
		free(json);
		group_kill(&g);
	}
}

/* cusnap run over a control directory an earlier restore left its
 * restore-complete in (no workload uses it): the file is removed and said, so
 * the new workload parks until it is released (it ran straight through). */
static void stale_restore_complete(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], done[PATH_MAX + 48];
	e2e_scratch("stale-done", dir, ctl);
	mkdir(ctl, 0700);
	snprintf(done, sizeof(done), "%s/restore-complete", ctl);
	test_write_file(done, "");
	struct group g;
	if (group_start(&g, "stale-done", 1, 2, false, NULL, NULL, ctl) < 0)
		return;
	CHECK(access(done, F_OK) != 0);
	char *log = test_read_file(g.log);
	CHECK_CONTAINS(log, "removed the stale");
	CHECK(!contains(log, "PASS vmm_group")); /* parked, not run through */
	free(log);
	group_round_trip(&g);
}

/* Usage errors (64) before anything is looked at or made: an option the
 * command does not take, a --timeout that is not a number, a pid that is no
 * process, an unknown command. */
static void usage_errors(void)
{
	char *out;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "suspend", "--pid", "1", "--criu", "/bin/true", NULL), 64,
		   "suspend does not take --criu");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "restore", "--dir", "/nonexistent", "--leave-running", NULL), 64,
		   "restore does not take --leave-running");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--pid", "1", "--content", "host", NULL), 64,
		   "inspect does not take --content");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "run", "--json", "--", "/bin/true", NULL), 64,
		   "run does not take --json");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--pid", "1", "stray", NULL), 64,
		   "unexpected argument 'stray'");
	/* Every command's usage line is in --help, made from the same table. */
	CHECK_EQ(tool(&out, NULL, cusnap, "--help", NULL), 0);
	static const char *const names[] = {"run", "checkpoint", "restore", "suspend", "resume", "inspect", "demo"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "cusnap %s ", names[i]);
		CHECK_CONTAINS(out, line);
	}
	free(out);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "resume", "--pid", "1", "--timeout", "10abc", NULL), 64,
		   "--timeout 10abc");
	/* A pid that is no process: refused before anything is made. */
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/never-made", e2e_root);
	CHECK_EQ(tool(&out, NULL, cusnap, "checkpoint", "--pid", "1073741823", "--dir", dir, NULL), 64);
	CHECK_CONTAINS(out, "no process 1073741823");
	CHECK(access(dir, F_OK) != 0);
	free(out);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "frobnicate", NULL), 64, "unknown command");
	/* settings.def's variables are checked as its options are, before anything is done;
	 * --help shows each row's spellings. */
	char *bad_env[] = {"CUSNAP_NATIVE_PARALLEL=many", NULL};
	CHECK_SAYS(out, tool(&out, bad_env, cusnap, "resume", "--pid", "1", NULL), 64,
		   "CUSNAP_NATIVE_PARALLEL=many: use a whole number, 0 to 4096");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "--help", NULL), 0,
		   "criu_log_max  plugin: criu_log_max = BYTES  env: CUSNAP_CRIU_LOG_MAX");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "--help", NULL), 0, "--discard-state");
}

int main(void)
{
	e2e_init("contracts");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	test_run("guard rails: cusnap's ancestors and PID 1 refused, a thread id is its process", guard_rails);
	test_run("validation: partial group refused, an importer carries what its creator let go, FABRIC refused",
		 validation_refusals);
	test_run("partial interposition refused before anything changes (the launcher's marker too)",
		 partial_interposition);
	test_run("the agent's argv shapes, in a PID namespace", contract_shapes);
	test_run("restore without a state file", missing_state);
	test_run("an import from a raw FD (not brokered) refused at QUIESCE until released", foreign_import);
	test_run("every process gone during suspend: exit 2, not \"runs as before\"", all_gone);
	test_run("cusnap run without a driver the loader finds: said, with the fix", run_without_driver);
	test_run("cusnap run over a stale restore-complete: removed, the workload parks", stale_restore_complete);
	test_run("a worker gone after the native checkpoint: named, the rest undone and running, exit 1", one_gone);
	test_run("usage errors: an option a command does not take, a bad --timeout or variable, an unknown command",
		 usage_errors);
	return e2e_done();
}
