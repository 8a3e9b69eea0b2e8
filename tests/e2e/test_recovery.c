/* SPDX-License-Identifier: MIT */
/* What cusnap suspend and resume leave after a failure (DESIGN.md §6.1, §12):
 * a rollback that fails, a participant that dies, a native call that does not
 * return, cusnap itself SIGKILLed or SIGTERMed at each phase boundary. */
#include <pthread.h>

#include "cusnap/fault.h"
#include "../../src/coordinator/coord.h"
#include "sweep.h"

static char coord[PATH_MAX + 32];

/* Did the group pass after an aborted or completed suspend? (rc: suspend's
 * exit; the format names the case in failures) */
static bool __attribute__((format(printf, 3, 4))) group_back_and_passing(struct group *g, int rc, const char *fmt, ...)
{
	char what[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
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
	group_done(&g, 2);
}

/* The phase boundaries of suspend (include/cusnap/faults.def, less the
 * multicast one: these groups have no multicast object). */
static const enum fault boundaries[] = {FAULT_KILL_AFTER_QUIESCE, FAULT_KILL_AFTER_PREPARE, FAULT_KILL_AFTER_STATE,
					FAULT_KILL_AFTER_LOCK, FAULT_KILL_AFTER_CHECKPOINT};

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
 * left, and a running tree is answered "nothing to resume" with exit 0. Both
 * content modes at each boundary in the plain pass; the sanitizer passes share
 * the boundaries out (test_share), one content mode each, alternating. */
static void recovery_after_sigkill(void)
{
	static const char *const contents[] = {"host", "native"};
	bool sanitizer = getenv("CUSNAP_SANITIZER") != NULL;
	char tool_path[PATH_MAX];
	cusnap_path(tool_path, sizeof(tool_path));
	for (size_t i = 0; i < sizeof(boundaries) / sizeof(boundaries[0]); i++) {
		if (!test_share(i))
			continue;
		int first = sanitizer ? (int)(i / 2 % 2) : 0, last = sanitizer ? first : 1;
		for (int c = first; c <= last; c++) {
			struct group g;
			char envctl[PATH_MAX + 32], pid[16], *out;
			int rc = faulted_suspend(&g, fault_name(boundaries[i]), "self", contents[c], envctl, &out);
			if (rc == -2)
				return;
			if (rc != -1)
				test_fail(__FILE__, __LINE__, "%s: suspend was not killed (exit %d):\n%s",
					  fault_name(boundaries[i]), rc, out);
			free(out);
			snprintf(pid, sizeof(pid), "%d", g.root);
			char *env2[] = {envctl, NULL};
			if (i == 0 || boundaries[i] == FAULT_KILL_AFTER_LOCK) {
				/* inspect names the half-done tree and the command that repairs it
				 * (a tree left LOCKED too: its GPU memory is held, its calls block) */
				CHECK_EQ(tool(&out, env2, tool_path, "inspect", "--pid", pid, NULL), 0);
				CHECK_CONTAINS(out, "half-done");
				CHECK_CONTAINS(out, "cusnap resume --pid");
				free(out);
			}
			rc = tool(&out, env2, tool_path, "resume", "--pid", pid, NULL);
			if (rc != 0)
				test_fail(__FILE__, __LINE__, "%s (%s): resume --pid alone exited %d:\n%s",
					  fault_name(boundaries[i]), contents[c], rc, out);
			free(out);
			if (i == 0 && c == 0) {
				/* Already running: nothing to do, and said so. */
				CHECK_SAYS(out, tool(&out, env2, tool_path, "resume", "--pid", pid, NULL), 0,
					   "nothing to resume");
			}
			group_back_and_passing(&g, 1, "SIGKILL %s (%s), resume", fault_name(boundaries[i]),
					       contents[c]);
		}
	}
}

/* SIGTERM at each phase boundary of suspend (CUSNAP_FAULT=...:term): cusnap
 * undoes everything and exits 1, every participant active, the group passing. */
static void sigterm_undoes(void)
{
	for (size_t i = 0; i < sizeof(boundaries) / sizeof(boundaries[0]); i++) {
		if (!test_share(i))
			continue;
		struct group g;
		char envctl[PATH_MAX + 32], *out;
		int rc = faulted_suspend(&g, fault_name(boundaries[i]), "term", "host", envctl, &out);
		if (rc == -2)
			return;
		if (rc != 1 || !contains(out, "everything undone"))
			test_fail(__FILE__, __LINE__, "%s: SIGTERM: suspend exited %d:\n%s", fault_name(boundaries[i]),
				  rc, out);
		/* Undone: no state file left behind to resume from. */
		const char *at = out ? strstr(out, "state directory ") : NULL;
		char state[PATH_MAX + 48] = "";
		if (at)
			snprintf(state, sizeof(state), "%.*s/cuda-vmm.state", (int)strcspn(at + 16, "\n"), at + 16);
		if (!state[0] || access(state, F_OK) == 0)
			test_fail(__FILE__, __LINE__, "%s: SIGTERM: the undone suspend left %s",
				  fault_name(boundaries[i]), state[0] ? state : "(no state directory said)");
		free(out);
		group_back_and_passing(&g, 1, "SIGTERM %s", fault_name(boundaries[i]));
	}
	/* The same for the coordinator's --prepare (the agent's shape). */
	struct group g;
	if (group_start_pair(&g, "sigterm-coord") < 0)
		return;
	pid_t pids[8];
	int n = group_pids(&g, pids, 2);
	char a[16], b[16], dir[PATH_MAX + 32], envctl[PATH_MAX + 32], *out;
	snprintf(a, sizeof(a), "%d", pids[0]);
	snprintf(b, sizeof(b), "%d", pids[n > 1 ? 1 : 0]);
	snprintf(dir, sizeof(dir), "%s/sigterm-coord-state", e2e_root);
	mkdir(dir, 0700);
	snprintf(envctl, sizeof(envctl), "SNAPSHOT_CONTROL_DIR=%s", g.ctl);
	char *env[] = {"CUSNAP_FAULT=kill-after-prepare:term" /* (FAULT_KILL_AFTER_PREPARE) */, envctl, NULL};
	CHECK_EQ(tool(&out, env, coord, "--prepare", "--proc-root", "/proc", "--checkpoint-dir", dir, "--process", a, a,
		      "--process", b, b, NULL),
		 1);
	CHECK_CONTAINS(out, "during prepare: rebuilding every participant");
	free(out);
	group_back_and_passing(&g, 1, "SIGTERM to snapshot-cuda-vmm --prepare");
}

static void abort_on_dead_participant(void)
{
	struct group g;
	if (group_start(&g, "dead", 2, 2, false, NULL, NULL, NULL) < 0)
		return;
	pid_t pids[8];
	group_pids(&g, pids, 3);
	char fault[64], *out;
	snprintf(fault, sizeof(fault), "CUSNAP_FAULT=kill-after-quiesce:%d", pids[2]);
	char *env[] = {fault, NULL};
	CHECK_SAYS(out, group_suspend(&g, "host", &out, env), 1, "is gone");
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

/* Kills victim once its trace (CUEMU_TRACE, emptied first) shows the copy
 * that stalls begun. */
struct killer {
	char trace[PATH_MAX + 32];
	pid_t victim;
	bool fired;
};

static void *kill_when_stalled(void *arg)
{
	struct killer *k = arg;
	for (int i = 0; i < 800 && !k->fired; i++) {
		char *calls = test_read_file(k->trace);
		if (calls && strstr(calls, "cuMemcpyDtoHAsync"))
			k->fired = kill(k->victim, SIGKILL) == 0;
		else
			usleep(25000);
		free(calls);
	}
	return NULL;
}

/* A participant killed in the middle of its copy out (the worker's first
 * device-to-host copy stalled 4 s, SIGKILL meanwhile), in host and file
 * content: it is named, the parent is rebuilt, running, its memory back
 * (private too), exit 1. */
static void killed_mid_copy(void)
{
	static const char *const contents[] = {"host", "file"};
	for (size_t c = 0; c < 2; c++) {
		struct group g;
		struct killer k = {.fired = false};
		char name[32], trace[PATH_MAX + 64], *out;
		snprintf(name, sizeof(name), "midcopy-%s", contents[c]);
		snprintf(k.trace, sizeof(k.trace), "%s/trace-%s", e2e_root, name);
		snprintf(trace, sizeof(trace), "CUEMU_TRACE=%s", k.trace);
		char *env[] = {"CUEMU_FAULT=cuMemcpyDtoHAsync:1:stall=4000", trace, "VMM_GROUP_FAULT_ROLE=worker0",
			       "VMM_GROUP_PRIVATE=1", NULL};
		if (group_start(&g, name, 1, 2, false, NULL, env, NULL) < 0)
			return;
		pid_t pids[8];
		group_pids(&g, pids, 2);
		k.victim = pids[1];           /* (the worker: the parent's death ends its workers) */
		test_write_file(k.trace, ""); /* (what it called before) */
		pthread_t th;
		CHECK_EQ(pthread_create(&th, NULL, kill_when_stalled, &k), 0);
		CHECK_SAYS(out, group_suspend(&g, contents[c], &out, NULL), 1, "is gone");
		pthread_join(th, NULL);
		CHECK(k.fired);
		char *json = group_inspect(&g);
		CHECK_EQ(count_of(json, "\"phase\":\"active\""), 1);
		CHECK_EQ(count_of(json, "\"state\":\"running\""), 1);
		free(json);
		CHECK(test_count_maps(pids[0], "memfd:cuemu-mem") >= 2);
		group_kill(&g);
	}
}

/* A group of one worker whose parent fails the nth call named by fault (its
 * CUEMU_FAULT) once the file armed_path exists: 0, or -1. */
static char armed_path[PATH_MAX + 16];
static int start_armed(struct group *g, const char *name, const char *fault)
{
	char env_arm[PATH_MAX + 32], env_fault[128];
	snprintf(armed_path, sizeof(armed_path), "%s/arm-%s", e2e_root, name);
	snprintf(env_arm, sizeof(env_arm), "CUEMU_FAULT_ARM=%s", armed_path);
	snprintf(env_fault, sizeof(env_fault), "CUEMU_FAULT=%s", fault);
	char *env[] = {env_fault, env_arm, "VMM_GROUP_FAULT_ROLE=parent", NULL};
	return group_start(g, name, 1, 2, false, NULL, env, NULL);
}

/* The tree said half-done (out, freed here) and parked: inspect says so too. */
static void said_half_done(struct group *g, char *out)
{
	CHECK_CONTAINS(out, "half-done");
	free(out);
	char *json = group_inspect(g);
	CHECK_CONTAINS(json, "\"phase\":\"failed\"");
	CHECK_CONTAINS(json, "\"half_done\":true");
	free(json);
}

/* The rollback that fails: a lock fails after the prepare, and the creator's
 * rebuild (its cuMemCreate) fails too. Exit 2, the participant and the call
 * named, the tree said to be half-done and parked (inspect says so too). */
static void failing_rollback(void)
{
	struct group g;
	if (start_armed(&g, "rollback", "cuMemCreate:1") < 0)
		return;
	test_write_file(armed_path, "");
	char *out, *tool_env[] = {"CUEMU_FAULT=cuCheckpointProcessLock:1", NULL}, name[64];
	CHECK_EQ(group_suspend(&g, "host", &out, tool_env), 2);
	unlink(armed_path);
	CHECK_CONTAINS(out, "lock of process");
	CHECK_CONTAINS(out, "undoing it failed");
	snprintf(name, sizeof(name), "participant %d", g.root);
	CHECK_CONTAINS(out, name);
	CHECK_CONTAINS(out, "cuMemCreate");
	said_half_done(&g, out);
	group_kill(&g);
}

/* cusnap resume SIGKILLed after each rebuild step (every shim left in
 * CREATORS_RESTORED, then UNICAST_RESTORED): `cusnap resume --pid ROOT` alone
 * continues from there (a step already done answers done) and the group
 * passes. */
static void resume_killed_mid_rebuild(void)
{
	static const enum fault points[] = {FAULT_KILL_AFTER_RESTORE_CREATORS, FAULT_KILL_AFTER_RESTORE_IMPORTERS};
	char tool_path[PATH_MAX];
	cusnap_path(tool_path, sizeof(tool_path));
	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		struct group g;
		if (group_start_pair(&g, "rebuild") < 0)
			return;
		char pid[16], fault[96], *out;
		snprintf(pid, sizeof(pid), "%d", g.root);
		snprintf(fault, sizeof(fault), "CUSNAP_FAULT=%s:self", fault_name(points[i]));
		char *env[] = {g.env_ctl, NULL}, *faulted[] = {g.env_ctl, fault, NULL};
		CHECK_EQ(tool(&out, env, tool_path, "suspend", "--pid", pid, NULL), 0);
		free(out);
		int rc = tool(&out, faulted, tool_path, "resume", "--pid", pid, NULL);
		if (rc != -1)
			test_fail(__FILE__, __LINE__, "%s: resume was not killed (exit %d):\n%s", fault_name(points[i]),
				  rc, out);
		free(out);
		rc = tool(&out, env, tool_path, "resume", "--pid", pid, NULL);
		if (rc != 0)
			test_fail(__FILE__, __LINE__, "%s: resume --pid alone afterwards exited %d:\n%s",
				  fault_name(points[i]), rc, out);
		free(out);
		group_back_and_passing(&g, 1, "resume SIGKILLed at %s, then resume", fault_name(points[i]));
	}
}

/* A corrupt state file: resume exits 2 naming --discard-state; with it the
 * participants rebuild in place from their own records and the group passes. */
static void corrupt_state(void)
{
	struct group g;
	if (group_start_pair(&g, "corrupt") < 0)
		return;
	char *out, state[PATH_MAX + 48];
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	snprintf(state, sizeof(state), "%s/state/cuda-vmm.state", g.ctl);
	CHECK_EQ(test_write_file(state, "not a state file"), 0);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 2, "--discard-state");
	char tool_path[PATH_MAX], pid[16], dir[PATH_MAX + 32];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/state", g.ctl);
	CHECK_EQ(tool(&out, NULL, tool_path, "resume", "--pid", pid, "--dir", dir, "--control-dir", g.ctl,
		      "--discard-state", NULL),
		 0);
	CHECK_CONTAINS(out, "rebuilding in place");
	free(out);
	group_back_and_passing(&g, 1, "resume --discard-state after a corrupt state file");
}

/* A resume whose directory holds no state file (a mistyped --dir, the state
 * file gone): the participants know they are prepared, so the resume rebuilds
 * them in place from their own records and says so, both contents, and the
 * group passes; never "ok" over participants left prepared. */
static void resume_without_state(void)
{
	static const char *const contents[] = {"host", "native"};
	for (int c = 0; c < 2; c++) {
		struct group g;
		if (group_start(&g, contents[c], 1, 2, false, NULL, NULL, NULL) < 0)
			return;
		char *out, tool_path[PATH_MAX], pid[16], other[PATH_MAX + 32];
		cusnap_path(tool_path, sizeof(tool_path));
		snprintf(pid, sizeof(pid), "%d", g.root);
		snprintf(other, sizeof(other), "%s/mistyped", g.ctl);
		CHECK_EQ(mkdir(other, 0700), 0);
		CHECK_EQ(group_suspend(&g, contents[c], &out, NULL), 0);
		free(out);
		CHECK_EQ(tool(&out, NULL, tool_path, "resume", "--pid", pid, "--dir", other, "--control-dir", g.ctl,
			      NULL),
			 0);
		CHECK_CONTAINS(out, "no state file");
		CHECK_CONTAINS(out, "rebuilding in place");
		free(out);
		group_back_and_passing(&g, 1, "resume --dir with no state file (%s)", contents[c]);
	}
}

/* A step that fails only because it is slow (a busy machine: every PREPARE's
 * cuMemUnmap takes 2.5 s against --timeout 500): the undo has a deadline of
 * its own, longer, so it waits for the slow participants, rebuilds them, and
 * the suspend exits 1 with everything undone; the group passes. */
static void slow_step_undone(void)
{
	char arm[PATH_MAX + 16], env_arm[PATH_MAX + 32];
	snprintf(arm, sizeof(arm), "%s/arm-slow", e2e_root);
	snprintf(env_arm, sizeof(env_arm), "CUEMU_FAULT_ARM=%s", arm);
	char *env[] = {"CUEMU_FAULT=cuMemUnmap:1:stall=2500", env_arm, NULL};
	struct group g;
	if (group_start(&g, "slow", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char *out, tool_path[PATH_MAX], pid[16];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g.root);
	test_write_file(arm, "");
	int rc = tool(&out, NULL, tool_path, "suspend", "--pid", pid, "--timeout", "500", "--control-dir", g.ctl, NULL);
	unlink(arm);
	CHECK_EQ(rc, 1);
	CHECK_CONTAINS(out, "everything undone");
	free(out);
	group_back_and_passing(&g, 1, "a step too slow for --timeout, undone");
}

/* A driver that reports an error for a transition it made (CUEMU_FAULT ...:after):
 * the state is read back. A lock that "failed" but left the process LOCKED is
 * unlocked by the undo (exit 1, everything undone); a restore that "failed"
 * but left it LOCKED is taken as done and the resume completes. */
static void state_read_back(void)
{
	struct group g;
	if (group_start_pair(&g, "readback") < 0)
		return;
	char *out, *lock_env[] = {"CUEMU_FAULT=cuCheckpointProcessLock:1:CUDA_ERROR_UNKNOWN:after", NULL};
	CHECK_SAYS(out, group_suspend(&g, "host", &out, lock_env), 1, "everything undone");
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
	free(json);
	char *restore_env[] = {"CUEMU_FAULT=cuCheckpointProcessRestore:1:CUDA_ERROR_UNKNOWN:after", NULL};
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	CHECK_SAYS(out, group_resume(&g, &out, restore_env), 0, "taken as done");
	group_back_and_passing(&g, 1, "a restore reported failed that took effect");
}

/* A creator whose export fails while its importers redeem their capabilities
 * at a resume: exit 2, naming the importer, the redemption and the creator's
 * error, the tree half-done and parked; a second resume finishes it and the
 * group passes. */
static void redemption_fails(void)
{
	struct group g;
	if (start_armed(&g, "redeem", "cuMemExportToShareableHandle:1") < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	test_write_file(armed_path, "");
	int rc = group_resume(&g, &out, NULL);
	unlink(armed_path);
	CHECK_EQ(rc, 2);
	CHECK_CONTAINS(out, "RESTORE_IMPORTERS");
	CHECK_CONTAINS(out, "redeeming its capability failed");
	CHECK_CONTAINS(out, "cuMemExportToShareableHandle failed: CUDA_ERROR_UNKNOWN");
	said_half_done(&g, out);
	group_back_and_passing(&g, 0, "a redemption refused, then resumed again");
}

int main(void)
{
	e2e_init("recovery");
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	test_run("a failing rollback: exit 2, the participant and the call named", failing_rollback);
	test_run("a participant killed after QUIESCE: exit 1, survivors rebuilt", abort_on_dead_participant);
	test_run("a participant killed in the middle of its copy, host and file content: exit 1, the other rebuilt",
		 killed_mid_copy);
	test_run("a native call that does not return: named, exit 2, resumable", native_watchdog);
	test_run("suspend SIGKILLed at each phase boundary: resume --pid alone recovers", recovery_after_sigkill);
	test_run("SIGTERM at each phase boundary of suspend: everything undone, exit 1", sigterm_undoes);
	test_run("resume SIGKILLed after each rebuild step: resume --pid alone continues", resume_killed_mid_rebuild);
	test_run("a corrupt state file: resume names --discard-state, which rebuilds in place", corrupt_state);
	test_run("a resume with no state file rebuilds in place from the participants' records", resume_without_state);
	test_run("a step that failed by being slow is undone under a longer deadline", slow_step_undone);
	test_run("native steps that report an error but took effect: the state read back decides", state_read_back);
	test_run("a redemption refused at resume: the importer names it and the creator's error", redemption_fails);
	return e2e_done();
}
