/* SPDX-License-Identifier: MIT */
/* cusnap suspend/resume in place, and the coordinator's contract (issue 4):
 * both content modes, r615, abort after an injected failure at each driver call
 * of prepare and after a participant dies, validation refusals, partial
 * interposition, the argv shapes of SYSTEM.md §3, long control directories and
 * PID namespaces. */
#include <dirent.h>

#include "sweep.h"
#include "cusnap/json.h"

static char cusnap[PATH_MAX], coord[PATH_MAX + 32];

static void round_trip(const char *content)
{
	struct group g;
	if (group_start(&g, content, 2, 4, false, NULL, NULL, NULL) < 0)
		return;
	CHECK(group_device_mappings(&g, "memfd:cuemu") > 0);
	char *out;
	CHECK_EQ(group_suspend(&g, content, &out, NULL), 0);
	free(out);
	/* Every process released all device memory. */
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"state\":\"checkpointed\""), 3);
	free(json);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	CHECK_CONTAINS(out, "topology identical");
	free(out);
	/* Same addresses, same bytes, old handles, sharing both ways: the workload checks. */
	CHECK_EQ(group_finish(&g), 3);
	group_kill(&g);
}

static void host_content(void)
{
	round_trip("host");
}

static void native_content(void)
{
	round_trip("native");
}

/* Anonymous memory of the tree's processes, in KiB (the arena lives there;
 * cuemu's device memory is shared memory). */
static long tree_rss_anon_kb(pid_t root)
{
	pid_t pids[16];
	int n = tree_pids(root, pids, 16);
	long kb = 0;
	for (int i = 0; i < n; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/status", pids[i]);
		char *text = test_read_file(path), *at = text ? strstr(text, "RssAnon:") : NULL;
		kb += at ? atol(at + strlen("RssAnon:")) : 0;
		free(text);
	}
	return kb;
}

/* Host content copies into one arena per process (SYSTEM.md §6.2): about the
 * shared bytes of host memory (at most 1.1x), and a second suspend writes into
 * the same pages instead of populating new ones. */
static void arena_reused(void)
{
	enum { ALLOCS = 16 };
	const long shared_kb = ALLOCS * 4096L; /* vmm_group's 4 MiB each */
	const long native_kb = 2 * 4096L;      /* each process's private 4 MiB, which cuemu's native checkpoint saves */
	struct group g;
	char *env[] = {"SNAPSHOT_CUDA_VMM_LOG=2", NULL};
	if (group_start(&g, "arena", 1, ALLOCS, false, NULL, env, NULL) < 0)
		return;
	char *out;
	long before = tree_rss_anon_kb(g.root);
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	long first = tree_rss_anon_kb(g.root) - before - native_kb;
	CHECK(first >= shared_kb * 95 / 100);
	CHECK(first <= shared_kb * 11 / 10);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	long resumed = tree_rss_anon_kb(g.root);
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	long second = tree_rss_anon_kb(g.root) - resumed - native_kb;
	CHECK(second < shared_kb / 10);
	char *log = test_read_file(g.log);
	CHECK_EQ(count_of(log, "arena of"), 1); /* made once, populated once */
	free(log);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

static void r615(void)
{
	char *env[] = {"CUEMU_PROFILE=r615", NULL};
	struct group g;
	if (group_start(&g, "r615n", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "native", &out, NULL), 0);
	free(out);
	/* Natively restored exportable allocations cannot be exported again. */
	CHECK_EQ(group_resume(&g, &out, NULL), 2);
	CHECK_CONTAINS(out, "CUDA_ERROR_INVALID_VALUE");
	CHECK_CONTAINS(out, "allocation ");
	free(out);
	group_kill(&g);
	if (group_start(&g, "r615h", 1, 2, false, NULL, env, NULL) < 0)
		return;
	group_suspend_resume(&g);
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

/* Did the group pass after an aborted or completed suspend? (rc: suspend's exit) */
static bool group_back_and_passing(struct group *g, int rc, const char *what)
{
	bool ok = true;
	if (rc == 0) {
		char *out;
		int r = group_resume(g, &out, NULL);
		if (r != 0) {
			test_fail(__FILE__, __LINE__, "%s: suspend succeeded, resume exited %d:\n%s", what, r, out);
			ok = false;
		}
		free(out);
	} else {
		char *json = group_inspect(g);
		/* Nothing half-prepared: every process active, running, sharing again. */
		if (count_of(json, "\"phase\":\"active\"") != 2 || count_of(json, "\"state\":\"running\"") != 2) {
			test_fail(__FILE__, __LINE__, "%s: after the abort:\n%s", what, json);
			ok = false;
		}
		free(json);
	}
	if (ok && group_finish(g) != 2) {
		test_fail(__FILE__, __LINE__, "%s: the workload did not pass afterwards", what);
		ok = false;
	}
	group_kill(g);
	return ok;
}

/* The countdown sweeps over suspend and resume (sweep.h): both content modes,
 * the creator and an importer. */
static void sweeps(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND}, SWEEP_RESUME, false, "");
}

/* A native call that does not return (the real driver hangs on what it cannot
 * checkpoint): the watchdog names the process and the step, suspend exits 2
 * instead of hanging, and once the call returned `cusnap resume` brings the
 * group back. */
static void native_watchdog(void)
{
	char *env[] = {"CUEMU_CKPT_STALL_MS=3000", NULL};
	struct group g;
	if (group_start(&g, "stall", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char *out, *tool_env[] = {"CUSNAP_NATIVE_TIMEOUT_MS=600", NULL};
	int rc = group_suspend(&g, "host", &out, tool_env);
	if (rc != 2)
		test_fail(__FILE__, __LINE__, "suspend exited %d, not 2:\n%s", rc, out);
	CHECK_CONTAINS(out, "cuCheckpointProcessCheckpoint did not return within 600 ms");
	CHECK_CONTAINS(out, "cusnap resume --pid");
	free(out);
	usleep(3500 * 1000); /* the stalled checkpoints complete */
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

/* Guard rails: a tree with cusnap's own ancestors or this namespace's init is
 * refused before anything changes; a thread id stands for its process. */
static void guard_rails(void)
{
	char tool_path[PATH_MAX], self[16], *out;
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(self, sizeof(self), "%d", getpid()); /* cusnap's parent: an ancestor */
	CHECK_EQ(tool(&out, NULL, tool_path, "suspend", "--pid", "1", NULL), 64);
	CHECK_CONTAINS(out, "PID 1");
	free(out);
	char dir[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/guard", e2e_root);
	CHECK_EQ(tool(&out, NULL, tool_path, "checkpoint", "--pid", "1", "--dir", dir, NULL), 64);
	CHECK_CONTAINS(out, "PID 1");
	free(out);
	CHECK_EQ(tool(&out, NULL, tool_path, "suspend", "--pid", self, NULL), 64);
	CHECK_CONTAINS(out, "an ancestor of cusnap");
	free(out);
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

/* The phase boundaries of suspend (include/cusnap/faults.def, less the
 * multicast one: these groups have no multicast object). */
static const char *const boundaries[] = {"kill-after-quiesce", "kill-after-prepare", "kill-after-state",
					 "kill-after-lock", "kill-after-checkpoint"};

/* A fresh group, then `cusnap suspend` of it with CUSNAP_FAULT=point:how.
 * Returns suspend's exit (-1: killed, -2: no group); its output in *out, the
 * group's SNAPSHOT_CONTROL_DIR=... (for the commands that follow) in envctl. */
static int faulted_suspend(struct group *g, const char *point, const char *how, const char *content,
			   char envctl[PATH_MAX + 32], char **out)
{
	if (group_start(g, how, 1, 2, false, NULL, NULL, NULL) < 0)
		return -2;
	char tool_path[PATH_MAX], pid[16], fault[96];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(fault, sizeof(fault), "CUSNAP_FAULT=%s:%s", point, how);
	snprintf(envctl, PATH_MAX + 32, "SNAPSHOT_CONTROL_DIR=%s", g->ctl);
	char *env[] = {fault, envctl, NULL};
	return tool(out, env, tool_path, "suspend", "--pid", pid, "--content", content, NULL);
}

/* cusnap suspend SIGKILLed at every phase boundary (CUSNAP_FAULT=...:self):
 * `cusnap resume --pid ROOT` alone brings the group back from wherever it was
 * left, and a running tree is answered "nothing to resume" with exit 0. */
static void recovery_after_sigkill(void)
{
	static const char *const contents[] = {"host", "native"};
	char tool_path[PATH_MAX];
	cusnap_path(tool_path, sizeof(tool_path));
	for (size_t i = 0; i < sizeof(boundaries) / sizeof(boundaries[0]); i++) {
		for (int c = 0; c < 2; c++) {
			struct group g;
			char envctl[PATH_MAX + 32], pid[16], *out;
			int rc = faulted_suspend(&g, boundaries[i], "self", contents[c], envctl, &out);
			if (rc == -2)
				return;
			if (rc != -1)
				test_fail(__FILE__, __LINE__, "%s: suspend was not killed (exit %d):\n%s",
					  boundaries[i], rc, out);
			free(out);
			snprintf(pid, sizeof(pid), "%d", g.root);
			char *env2[] = {envctl, NULL};
			if (i == 0) {
				/* inspect names the half-done tree and the command that repairs it */
				CHECK_EQ(tool(&out, env2, tool_path, "inspect", "--pid", pid, NULL), 0);
				CHECK_CONTAINS(out, "half-done");
				CHECK_CONTAINS(out, "cusnap resume --pid");
				free(out);
			}
			rc = tool(&out, env2, tool_path, "resume", "--pid", pid, NULL);
			if (rc != 0)
				test_fail(__FILE__, __LINE__, "%s (%s): resume --pid alone exited %d:\n%s",
					  boundaries[i], contents[c], rc, out);
			free(out);
			if (i == 0 && c == 0) {
				/* Already running: nothing to do, and said so. */
				CHECK_EQ(tool(&out, env2, tool_path, "resume", "--pid", pid, NULL), 0);
				CHECK_CONTAINS(out, "nothing to resume");
				free(out);
			}
			char what[128];
			snprintf(what, sizeof(what), "SIGKILL %s (%s), resume", boundaries[i], contents[c]);
			group_back_and_passing(&g, 1, what);
		}
	}
}

/* SIGTERM at each phase boundary of suspend (CUSNAP_FAULT=...:term): cusnap
 * undoes everything and exits 1, every participant active, the group passing. */
static void sigterm_undoes(void)
{
	for (size_t i = 0; i < sizeof(boundaries) / sizeof(boundaries[0]); i++) {
		struct group g;
		char envctl[PATH_MAX + 32], *out;
		int rc = faulted_suspend(&g, boundaries[i], "term", "host", envctl, &out);
		if (rc == -2)
			return;
		if (rc != 1 || !contains(out, "everything undone"))
			test_fail(__FILE__, __LINE__, "%s: SIGTERM: suspend exited %d:\n%s", boundaries[i], rc, out);
		free(out);
		char what[128];
		snprintf(what, sizeof(what), "SIGTERM %s", boundaries[i]);
		group_back_and_passing(&g, 1, what);
	}
	/* The same for the coordinator's --prepare (the agent's shape). */
	struct group g;
	if (group_start(&g, "sigterm-coord", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	pid_t pids[8];
	int n = tree_pids(g.root, pids, 8);
	CHECK_EQ(n, 2);
	char a[16], b[16], dir[PATH_MAX + 32], envctl[PATH_MAX + 32], *out;
	snprintf(a, sizeof(a), "%d", pids[0]);
	snprintf(b, sizeof(b), "%d", pids[n > 1 ? 1 : 0]);
	snprintf(dir, sizeof(dir), "%s/sigterm-coord-state", e2e_root);
	mkdir(dir, 0700);
	snprintf(envctl, sizeof(envctl), "SNAPSHOT_CONTROL_DIR=%s", g.ctl);
	char *env[] = {"CUSNAP_FAULT=kill-after-prepare:term", envctl, NULL};
	CHECK_EQ(tool(&out, env, coord, "--prepare", "--proc-root", "/proc", "--checkpoint-dir", dir, "--process", a, a,
		      "--process", b, b, NULL),
		 1);
	CHECK_CONTAINS(out, "during prepare: rebuilding every participant");
	free(out);
	group_back_and_passing(&g, 1, "SIGTERM to snapshot-cuda-vmm --prepare");
}

/* Every --json output is valid JSON whatever the paths hold: a state directory
 * named with a quote, a backslash, a newline and a tab. */
static void json_odd_paths(void)
{
	struct group g;
	if (group_start(&g, "json", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	char dir[PATH_MAX + 64], pid[16], *out;
	snprintf(dir, sizeof(dir), "%s/a \"quoted\" \\back\\slash\nnew\tline", e2e_root);
	snprintf(pid, sizeof(pid), "%d", g.root);
	struct {
		const char *what;
		int want;
		char *argv[12];
	} runs[] = {
		{"suspend", 0, {cusnap, "suspend", "--json", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, NULL}},
		{"inspect --dir", 0, {cusnap, "inspect", "--json", "--dir", dir, NULL}},
		{"snapshot-cuda-vmm --inspect-state", 0, {coord, "--inspect-state", dir, "--json", NULL}},
		/* --pid alone: the state directory recorded by suspend, newline and all */
		{"resume --pid alone", 0, {cusnap, "resume", "--json", "--pid", pid, "--control-dir", g.ctl, NULL}},
		{"a failure", 64, {cusnap, "suspend", "--json", "--pid", "1", "--dir", dir, NULL}},
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char *argv[12] = {0};
		memcpy(argv, runs[i].argv, sizeof(argv));
		char log[PATH_MAX];
		snprintf(log, sizeof(log), "%s/json.out", e2e_root);
		pid_t c = fork();
		if (c == 0) {
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			dup2(fd, 1);
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, 2);
			execv(argv[0], argv);
			_exit(127);
		}
		int status = test_wait_child(c, 60000);
		int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		out = test_read_file(log);
		char err[256] = "";
		json_error_t je;
		json_t *j = out ? json_loads(out, 0, &je) : NULL;
		if (!j)
			snprintf(err, sizeof(err), "%s", out ? je.text : "no output");
		if (rc != runs[i].want || !j)
			test_fail(__FILE__, __LINE__, "%s --json: exit %d, %s:\n%s", runs[i].what, rc,
				  j ? "valid" : err, out ? out : "");
		const char *d = json_member_string(j, "dir");
		if (j && d && strcmp(d, dir) != 0)
			test_fail(__FILE__, __LINE__, "%s --json: the dir read back differs", runs[i].what);
		json_decref(j);
		free(out);
	}
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

static void abort_on_dead_participant(void)
{
	struct group g;
	if (group_start(&g, "dead", 2, 2, false, NULL, NULL, NULL) < 0)
		return;
	pid_t pids[8];
	int n = tree_pids(g.root, pids, 8);
	CHECK_EQ(n, 3);
	char fault[64], *out;
	snprintf(fault, sizeof(fault), "CUSNAP_FAULT=kill-after-quiesce:%d", pids[2]);
	char *env[] = {fault, NULL};
	CHECK_EQ(group_suspend(&g, "host", &out, env), 1);
	CHECK_CONTAINS(out, "is gone");
	free(out);
	/* The survivors are rebuilt and running: their device memory is back. */
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"phase\":\"active\""), 2);
	CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
	CHECK_EQ(count_of(json, "\"detached\""), 0);
	free(json);
	CHECK_EQ(test_count_maps(pids[0], "memfd:cuemu-mem"), 2 + 1);
	CHECK_EQ(test_count_maps(pids[1], "memfd:cuemu-mem"), 2 + 1);
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
	CHECK_EQ(prepare(ctl, dir, &out, i, 0), 1);
	CHECK_CONTAINS(out, "partial group");
	free(out);
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
	/* The creator drops its handle and mapping: only capabilities remain. */
	TARGET_EXPECT_DIR(dir, "c", "drop", "CUDA_SUCCESS");
	CHECK_EQ(prepare(ctl, dir, &out, c, i), 1);
	CHECK_CONTAINS(out, "holds neither a handle nor a mapping");
	free(out);
	kill(c, SIGKILL);
	kill(i, SIGKILL);
	waitpid(c, NULL, 0);
	waitpid(i, NULL, 0);
	/* Shared as a FABRIC handle: refused, with the handle type named. */
	const char *fabric[] = {"--fabric", NULL};
	pid_t f = helper(dir, "f", ctl, fabric);
	TARGET_EXPECT_DIR(dir, "f", "fabric", "CUDA_SUCCESS");
	CHECK_EQ(prepare(ctl, dir, &out, f, 0), 1);
	CHECK_CONTAINS(out, "only POSIX file descriptor sharing");
	free(out);
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
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", ctl, NULL), 1);
	CHECK_CONTAINS(out, "partial interposition");
	free(out);
	/* Refused before anything changed. */
	CHECK_EQ(tool(&out, NULL, cusnap, "inspect", "--pid", pid, "--control-dir", ctl, "--json", NULL), 0);
	CHECK_EQ(count_of(out, "\"state\":\"running\""), 2);
	free(out);
	tree_kill(sh);
	waitpid(sh, NULL, 0);
}

/* The agent's exact argv shapes, with a workload in its own PID namespace. */
static void contract_shapes(void)
{
	if (geteuid() != 0) {
		printf("  (PID namespace part skipped: needs root)\n");
		return;
	}
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", NULL};
	struct group g;
	if (group_start(&g, "pidns", 2, 2, false, wrapper, NULL, NULL) < 0)
		return;
	pid_t pids[8];
	int n = tree_pids(g.root, pids, 8);
	CHECK_EQ(n, 3);
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
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0 + 3); /* only the private allocations remain */
	/* Restore, as it runs inside the container: empty proc-root, SNAPSHOT_CONTROL_DIR. */
	CHECK_EQ(tool(&out, env, coord, "--restore", "--proc-root", "", "--checkpoint-dir", dir, "--process", obs[0],
		      ns[0], "--process", obs[1], ns[1], "--process", obs[2], ns[2], NULL),
		 0);
	free(out);
	CHECK_EQ(group_finish(&g), 3);
	group_kill(&g);
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

static void long_control_dir(void)
{
	/* An endpoint path beyond the 107 bytes of a socket address. */
	char ctl[PATH_MAX];
	snprintf(ctl, sizeof(ctl),
		 "%s/a-control-directory-with-a-deliberately-long-name-to-push-the-socket-path-beyond-"
		 "one-hundred-and-seven-bytes",
		 e2e_root);
	struct group g;
	if (group_start(&g, "long", 1, 2, false, NULL, NULL, ctl) < 0)
		return;
	group_suspend_resume(&g);
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

static void native_only(void)
{
	/* Without the interposer: the native steps only (the memory comes back; the
	 * emulated driver gives each importer a private copy, so the workload's
	 * sharing checks fail, as they would on a GPU). */
	struct group g;
	if (group_start(&g, "plain", 1, 2, true, NULL, NULL, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	CHECK_CONTAINS(out, "native steps only");
	free(out);
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	CHECK(group_device_mappings(&g, "memfd:cuemu") > 0);
	group_kill(&g);
}

/* The rollback that fails: a lock fails after the prepare, and the creator's
 * rebuild (its cuMemCreate) fails too. Exit 2, the participant and the call
 * named, the tree said to be half-done and parked (inspect says so too). */
static void failing_rollback(void)
{
	char arm[PATH_MAX + 16], env_arm[PATH_MAX + 32];
	snprintf(arm, sizeof(arm), "%s/arm-rollback", e2e_root);
	snprintf(env_arm, sizeof(env_arm), "CUEMU_FAULT_ARM=%s", arm);
	char *env[] = {"CUEMU_FAULT=cuMemCreate:1", env_arm, "VMM_GROUP_FAULT_ROLE=parent", NULL};
	struct group g;
	if (group_start(&g, "rollback", 1, 2, false, NULL, env, NULL) < 0)
		return;
	test_write_file(arm, "");
	char *out, *tool_env[] = {"CUEMU_FAULT=cuCheckpointProcessLock:1", NULL}, name[64];
	CHECK_EQ(group_suspend(&g, "host", &out, tool_env), 2);
	unlink(arm);
	CHECK_CONTAINS(out, "lock of process");
	CHECK_CONTAINS(out, "undoing it failed");
	snprintf(name, sizeof(name), "participant %d", g.root);
	CHECK_CONTAINS(out, name);
	CHECK_CONTAINS(out, "cuMemCreate");
	CHECK_CONTAINS(out, "half-done");
	free(out);
	char *json = group_inspect(&g);
	CHECK_CONTAINS(json, "\"phase\":\"failed\"");
	CHECK_CONTAINS(json, "\"half_done\":true");
	free(json);
	group_kill(&g);
}

int main(void)
{
	e2e_init("suspend");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	test_run("suspend/resume, host content: 3 processes, 4 shared allocations, 2 devices", host_content);
	test_run("suspend/resume, native content", native_content);
	test_run("host content: one arena of the shared bytes, reused by a second suspend", arena_reused);
	test_run("r615: native content fails at restore naming the error; host content works", r615);
	test_run("countdown sweeps over every driver call of suspend and resume", sweeps);
	test_run("a failing rollback: exit 2, the participant and the call named", failing_rollback);
	test_run("a participant killed after QUIESCE: exit 1, survivors rebuilt", abort_on_dead_participant);
	test_run("a native call that does not return: named, exit 2, resumable", native_watchdog);
	test_run("guard rails: cusnap's ancestors and PID 1 refused, a thread id is its process", guard_rails);
	test_run("suspend SIGKILLed at each phase boundary: resume --pid alone recovers", recovery_after_sigkill);
	test_run("SIGTERM at each phase boundary of suspend: everything undone, exit 1", sigterm_undoes);
	test_run("--json is valid for a directory named with a quote, a backslash and a newline", json_odd_paths);
	test_run("validation refusals: partial group, no anchor, FABRIC sharing", validation_refusals);
	test_run("partial interposition refused before anything changes", partial_interposition);
	test_run("the agent's argv shapes, in a PID namespace", contract_shapes);
	test_run("restore without a state file", missing_state);
	test_run("a control directory path longer than a socket address", long_control_dir);
	test_run("a workload without the interposer: native steps only", native_only);
	e2e_done();
	return test_done();
}
