/* SPDX-License-Identifier: MIT */
/* Legacy CUDA IPC made checkpointable (DESIGN.md §4.4): vLLM-style
 * custom all-reduce groups (vmm_group --ipc) suspended and resumed in both
 * content modes; without the interposer the native checkpoint refuses them and
 * cusnap says why; event IPC and raw driver handles refused before anything
 * changes; native legacy IPC in a checkpoint job under cuemu's r610 profile.
 * (The CRIU checkpoint and restore are in test_checkpoint, the fault sweep in
 * test_sweep_ipc.) */
#include "sweep.h"

static char *ipc_env[] = {"VMM_GROUP_IPC=1", NULL};

static void round_trip(const char *content, int workers)
{
	struct group g;
	char name[32];
	snprintf(name, sizeof(name), "ipc-%s-%d", content, workers);
	if (group_start(&g, name, workers, 2, false, NULL, ipc_env, NULL) < 0)
		return;
	char *json = group_inspect(&g);
	/* Every process's chunk is shared with every other process. */
	CHECK(count_of(json, "\"role\":\"importer\"") >= workers * (workers + 1));
	free(json);
	char *out;
	CHECK_EQ(group_suspend(&g, content, &out, NULL), 0);
	free(out);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	/* Bytes, the addresses opened before, live writes both ways, the same
	 * handle bytes opened again: the workload checks. */
	CHECK_EQ(group_finish(&g), workers + 1);
	group_kill(&g);
}

/* Under TSan (races, not scale) the groups of 2 only. */
static bool fours(void)
{
	return !getenv("TSAN_OPTIONS");
}

static void host_content(void)
{
	round_trip("host", 1);
	if (fours())
		round_trip("host", 3);
}

static void native_content(void)
{
	round_trip("native", 1);
	if (fours())
		round_trip("native", 3);
}

/* A group that suspend must refuse before it changes anything: exit 1 with
 * the reason, and the group runs on unharmed. */
static void refused(const char *name, bool plain, char **env, const char *reason)
{
	struct group g;
	if (group_start(&g, name, 1, 1, plain, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 1);
	CHECK_CONTAINS(out, reason);
	CHECK_CONTAINS(out, "everything undone");
	free(out);
	group_done(&g, 2);
}

static void without_interposer(void)
{
	/* r580 (seen on an H200): a process holding an opened IPC mapping is
	 * checkpointed and its restore refused (CUDA_ERROR_INVALID_VALUE): the
	 * suspend warns, and the resume names the process and the error. */
	struct group g;
	if (group_start(&g, "ipc-plain", 1, 1, true, NULL, ipc_env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	CHECK_CONTAINS(out, "refuses to restore the importer");
	free(out);
	CHECK_EQ(group_resume(&g, &out, NULL), 2);
	CHECK_CONTAINS(out, "failed: CUDA_ERROR_INVALID_VALUE");
	CHECK_CONTAINS(out, "half-done");
	free(out);
	group_kill(&g);
}

static void event_ipc(void)
{
	char *env[] = {"VMM_GROUP_IPC=1", "VMM_GROUP_IPC_EVENT=1", NULL};
	refused("ipc-event", false, env, "cuIpcGetEventHandle");
}

static void adapter_off(void)
{
	char *env[] = {"VMM_GROUP_IPC=1", "SNAPSHOT_CUDA_VMM_IPC=0", NULL};
	refused("ipc-off", false, env, "not through the shim's adapter");
}

/* ---- checkpoint jobs (r610): native legacy IPC, the adapter off ---- */

static char job_log[PATH_MAX];

static int job_group(struct group *g, const char *name, bool job)
{
	return group_start_r610(g, name, job, job_log, sizeof(job_log));
}

/* The order the driver saw (CUEMU_CKPT_LOG): op's successful calls, by PID, into pids. */
static int job_order(const char *op, int *pids, int max)
{
	char *text = test_read_file(job_log);
	int n = 0;
	for (char *line = text; line && *line && n < max;) {
		int pid, rc;
		char what[16];
		if (sscanf(line, "%d %15s %d", &pid, what, &rc) == 3 && !strcmp(what, op) && rc == 0)
			pids[n++] = pid;
		char *next = strchr(line, '\n');
		line = next ? next + 1 : NULL;
	}
	free(text);
	return n;
}

/* Suspended and resumed in both contents: one process at a time, children
 * first, restores and unlocks in checkpoint order; the job file kept. */
static void job_round_trip(void)
{
	static const char *const contents[] = {"host", "native"};
	for (int c = 0; c < 2; c++) {
		struct group g;
		if (job_group(&g, contents[c], true) < 0)
			return;
		char *out;
		CHECK_EQ(group_suspend(&g, contents[c], &out, NULL), 0);
		CHECK_CONTAINS(out, "one at a time (a checkpoint job)");
		CHECK_CONTAINS(out, "copied into");
		free(out);
		char copy[PATH_MAX + 64];
		snprintf(copy, sizeof(copy), "%s/state/cuda-checkpoint-job", g.ctl);
		char *kept = test_read_file(copy);
		CHECK(kept && strstr(kept, "checkpoint "));
		free(kept);
		CHECK_EQ(group_resume(&g, &out, NULL), 0);
		free(out);
		int ck[4], rs[4], un[4];
		CHECK_EQ(job_order("checkpoint", ck, 4), 2);
		CHECK_EQ(job_order("restore", rs, 4), 2);
		CHECK_EQ(job_order("unlock", un, 4), 2);
		CHECK_EQ(ck[1], g.root); /* the worker first, its parent last */
		CHECK(ck[0] == rs[0] && ck[1] == rs[1] && ck[0] == un[0] && ck[1] == un[1]);
		/* Bytes, the addresses opened before, live writes both ways, the handles opened again. */
		group_done(&g, 2);
	}
}

/* Refused with nothing changed: outside a job (the interposer says so before
 * anything changes; without the interposer the driver's own error is named),
 * and a controller joined to another job (the driver refuses it). */
static void job_refusals(void)
{
	char *env[] = {"VMM_GROUP_IPC=1", "SNAPSHOT_CUDA_VMM_IPC=0", "CUEMU_PROFILE=r610", NULL};
	refused("r610-nojob", false, env, "cusnap run --launch-job");
	refused("r610-plain", true, env, "CUDA_ERROR_NOT_SUPPORTED");
	struct group g;
	if (job_group(&g, "r610-other", true) < 0)
		return;
	char other[PATH_MAX + 32], pid[16], dir[PATH_MAX + 32], tool_path[PATH_MAX], *out;
	snprintf(other, sizeof(other), "%s/another-job", e2e_root);
	test_write_file(other, "");
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/state", g.ctl);
	CHECK_EQ(tool(&out, NULL, tool_path, "suspend", "--pid", pid, "--dir", dir, "--control-dir", g.ctl,
		      "--job-file", other, NULL),
		 1);
	CHECK_CONTAINS(out, "CUDA_ERROR_NOT_SUPPORTED");
	CHECK_CONTAINS(out, "everything undone");
	free(out);
	/* A job file root names that a third user owns: refused, nothing done. */
	if (geteuid() == 0) {
		CHECK_EQ(chown(other, 65534, 65534), 0);
		CHECK_EQ(tool(&out, NULL, tool_path, "suspend", "--pid", pid, "--dir", dir, "--control-dir", g.ctl,
			      "--job-file", other, NULL),
			 64);
		CHECK_CONTAINS(out, "owned by neither you nor the workload's user");
		CHECK_CONTAINS(out, "nothing done");
		free(out);
	}
	group_done(&g, 2);
}

/* A workload whose environment names a job file cusnap cannot accept (here a
 * directory): suspend is refused (64), and inspect still shows the tree,
 * saying what is wrong with its job. */
static void unacceptable_job_shown(void)
{
	char env_job[PATH_MAX + 48];
	snprintf(env_job, sizeof(env_job), "CUDA_CHECKPOINT_JOB_FILE=%s", e2e_root);
	char *env[] = {env_job, NULL};
	struct group g;
	if (group_start(&g, "badjob", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char pid[16], tool_path[PATH_MAX], *out;
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g.root);
	CHECK_SAYS(out, tool(&out, NULL, tool_path, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL), 64,
		   "is not a regular file");
	CHECK_EQ(tool(&out, NULL, tool_path, "inspect", "--pid", pid, "--control-dir", g.ctl, "--json", NULL), 0);
	CHECK_CONTAINS(out, "\"job_error\"");
	CHECK_EQ(count_of(out, "\"phase\":\"active\""), 2);
	free(out);
	group_done(&g, 2);
}

int main(void)
{
	e2e_init("ipc");
	test_run("legacy IPC groups of 2 and 4: suspend/resume, host content", host_content);
	test_run("legacy IPC groups of 2 and 4: suspend/resume, native content", native_content);
	test_run("without the interposer: suspended with a warning, the resume refused by the driver, named",
		 without_interposer);
	test_run("event IPC refused at QUIESCE, naming the call", event_ipc);
	test_run("SNAPSHOT_CUDA_VMM_IPC=0: a raw IPC handle opened is refused at QUIESCE", adapter_off);
	test_run("r610: native legacy IPC in a checkpoint job (cusnap run --launch-job): suspend/resume in the job's "
		 "order, both contents",
		 job_round_trip);
	test_run("r610: outside a job refused (the interposer, or the driver's error), another job refused",
		 job_refusals);
	test_run("an unacceptable job file: suspend refused, inspect still shows the tree", unacceptable_job_shown);
	return e2e_done();
}
