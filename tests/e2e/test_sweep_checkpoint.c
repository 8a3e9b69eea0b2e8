/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over cusnap checkpoint and restore with CRIU (sweep.h): the driver calls
 * each makes (one in ten in `make test`), in the creator and in an importer,
 * both content modes; a sample under the sanitizers, all of it in `make sweep`.
 * And a failure at each of checkpoint's steps (CUSNAP_FAIL_STEP), undone in
 * reverse order. */
#include "sweep.h"

static char criu[PATH_MAX];

static void sweeps(void)
{
	/* checkpoint's driver calls are suspend's (swept there): one role per mode */
	sweep_pair(&(struct sweep){.op = SWEEP_CHECKPOINT, .criu = criu}, SWEEP_RESTORE, true, "");
}

/* checkpoint's steps in order (src/cusnap/checkpoint.c): whether each has an
 * undo, and whether it applies only with --leave-running. */
static const struct {
	const char *name;
	bool undo, leave_only;
} steps[] = {
	{"find", false, false},    {"directory", true, false}, {"check", false, false},
	{"prepare", true, false},  {"manifest", false, false}, {"criu dump", false, false},
	{"digests", false, false}, {"release", false, true},   {"publish", false, false},
};
#define NSTEPS (sizeof(steps) / sizeof(steps[0]))

static size_t step_index(const char *name)
{
	size_t i = 0;
	while (i < NSTEPS && strcmp(steps[i].name, name))
		i++;
	return i;
}

/* The undo lines of out are those of the steps done before step k that
 * have one, the last done first, and no others. */
static bool undone_in_reverse(const char *out, size_t k, bool leave, const char *what)
{
	const char *at = out;
	int want = 0;
	for (size_t i = k; i-- > 0;) {
		if (!steps[i].undo || (steps[i].leave_only && !leave))
			continue;
		char line[64];
		snprintf(line, sizeof(line), "step %s: undoing", steps[i].name);
		const char *found = strstr(at, line);
		if (!found) {
			test_fail(__FILE__, __LINE__, "%s: no '%s' after the undo before it:\n%s", what, line, out);
			return false;
		}
		at = found + strlen(line);
		want++;
	}
	if (count_of(out, ": undoing") != want) {
		test_fail(__FILE__, __LINE__, "%s: %d undo lines, not %d:\n%s", what, count_of(out, ": undoing"), want,
			  out);
		return false;
	}
	return true;
}

/* checkpoint with step k failing: before the dump everything is undone and
 * the workload runs as before (exit 1), nothing left in the directory; once
 * the dump has ended the tree (no --leave-running), the checkpoint is whole
 * but not in place (exit 2) and a restore puts it there; with
 * --leave-running the tree runs on (exit 1). */
static void failed_step(size_t k, bool leave)
{
	struct group g;
	char what[96], env0[64], pid[16], dir[PATH_MAX + 32], partial[PATH_MAX + 48], *out;
	snprintf(what, sizeof(what), "step %s failing%s", steps[k].name, leave ? " (--leave-running)" : "");
	if (group_start(&g, "steps", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	snprintf(env0, sizeof(env0), "CUSNAP_FAIL_STEP=checkpoint:%s", steps[k].name);
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	snprintf(partial, sizeof(partial), "%s/.partial", dir);
	char *env[] = {env0, NULL}, tool_path[PATH_MAX];
	cusnap_path(tool_path, sizeof(tool_path));
	if (k == 0 && !leave) {
		/* A misspelt step would never fail: refused before any step,
		 * the steps named (this list is checkpoint's whole list). */
		char *misspelt[] = {"CUSNAP_FAIL_STEP=checkpoint:criu-dump", NULL}, list[512] = "its steps: ";
		for (size_t i = 0; i < NSTEPS; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
				 steps[i].name);
		strcat(list, ")");
		CHECK_SAYS(out,
			   tool(&out, misspelt, tool_path, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir",
				g.ctl, "--criu", criu, NULL),
			   64, list);
	}
	int rc = tool(&out, env, tool_path, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, "--criu",
		      criu, leave ? "--leave-running" : NULL, NULL);
	bool dumped = k >= step_index(leave ? "publish" : "digests");
	bool prepared = k > step_index("prepare");
	const char *says = dumped ? "is whole but not in place" : prepared ? "everything undone" : "nothing done";
	int want = dumped && !leave ? 2 : 1;
	if (rc != want || !contains(out, says) || !contains(out, "failed on purpose"))
		test_fail(__FILE__, __LINE__, "%s: exit %d (want %d, saying '%s'):\n%s", what, rc, want, says, out);
	undone_in_reverse(out, k, leave, what);
	free(out);
	if (dumped != (access(partial, F_OK) == 0))
		test_fail(__FILE__, __LINE__, "%s: %s is %s", what, partial, dumped ? "gone" : "left");
	if (dumped && !leave) {
		group_dumped(&g);
		rc = tool(&out, NULL, tool_path, "restore", "--dir", dir, "--criu", criu, NULL);
		if (rc != 0)
			test_fail(__FILE__, __LINE__, "%s: restore exited %d:\n%s", what, rc, out);
		free(out);
		pid_t root = restored_root(dir);
		if (rc == 0 && root > 0 && restored_passes(&g, root) != 2)
			test_fail(__FILE__, __LINE__, "%s: the restored workload did not pass", what);
	} else {
		sweep_group_whole(&g, 2, what);
		group_kill(&g);
	}
	reap_all();
}

static void every_step_failing(void)
{
	for (size_t k = 0; k < NSTEPS; k++)
		if (!steps[k].leave_only)
			failed_step(k, false);
	for (size_t k = step_index("digests"); k < NSTEPS; k++)
		failed_step(k, true);
}

/* restore's steps in order (src/cusnap/restore.c). */
static const char *const restore_steps[] = {"check", "files", "criu restore", "find", "release"};

/* One checkpoint, restored with each of restore's steps failing in turn:
 * before CRIU has made a process nothing is done (exit 1); after, the
 * restored tree is killed (exit 2, CRIU's restore undone); the checkpoint
 * unchanged each time: the last restore, with no step failing, passes. */
static void restore_step_failing(void)
{
	struct group g;
	char pid[16], dir[PATH_MAX + 32], tool_path[PATH_MAX], *out;
	if (group_start(&g, "rsteps", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	cusnap_path(tool_path, sizeof(tool_path));
	int rc = tool(&out, NULL, tool_path, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, "--criu",
		      criu, NULL);
	if (!group_dump_ok(&g, rc, out))
		return;
	size_t n = sizeof(restore_steps) / sizeof(restore_steps[0]);
	for (size_t k = 0; k < n; k++) {
		char env0[64], what[64];
		snprintf(env0, sizeof(env0), "CUSNAP_FAIL_STEP=restore:%s", restore_steps[k]);
		snprintf(what, sizeof(what), "restore step %s failing", restore_steps[k]);
		char *env[] = {env0, NULL};
		rc = tool(&out, env, tool_path, "restore", "--dir", dir, "--criu", criu, NULL);
		bool made = k > 2, set_aside = k > 1; /* (past criu restore; past files) */
		const char *says = made ? "(restored tree killed)" : "nothing done";
		if (rc != (made ? 2 : 1) || !contains(out, says) ||
		    count_of(out, "step criu restore: undoing") != (made ? 1 : 0) ||
		    count_of(out, "step files: undoing") != (set_aside ? 1 : 0) ||
		    count_of(out, ": undoing") != made + set_aside)
			test_fail(__FILE__, __LINE__, "%s: exit %d, want %d saying '%s' and %d undo(s):\n%s", what, rc,
				  made ? 2 : 1, says, made + set_aside, out);
		free(out);
		reap_all();
	}
	rc = tool(&out, NULL, tool_path, "restore", "--dir", dir, "--criu", criu, NULL);
	if (rc != 0)
		test_fail(__FILE__, __LINE__, "the restore after the failed ones exited %d:\n%s", rc, out);
	free(out);
	pid_t root = restored_root(dir);
	if (rc == 0 && root > 0 && restored_passes(&g, root) != 2)
		test_fail(__FILE__, __LINE__, "the restored workload did not pass");
	reap_all();
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("sweep-ckpt");
	/* One fault case in ten in `make test` (each case is a CRIU dump and
	 * restore); `make sweep` takes them all. */
	setenv("CUSNAP_SWEEP_STRIDE", "10", 0);
	test_run("countdown sweeps over every driver call of checkpoint and restore", sweeps);
	test_run("a failure at each step of checkpoint, undone in reverse order", every_step_failing);
	test_run("a failure at each step of restore: what CRIU made killed, the checkpoint kept", restore_step_failing);
	return e2e_done();
}
