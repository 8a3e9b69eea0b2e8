/* SPDX-License-Identifier: MIT */
/* Replays of the real clients (examples/clients: NCCL through static cudart's
 * resolver path with a shared HOST_NUMA buffer and a context-only process beside
 * it, PyTorch expandable segments, PyTorch symmetric memory over pidfd_getfd,
 * vLLM sleep mode), each suspended and resumed in place by cusnap in both
 * content modes, its bytes, handles and live sharing checked by the workload. */
#include "e2e_util.h"

/* Start examples/clients --mode mode under the interposer; wait until ready. */
static int client_start(struct group *g, const char *mode, const char *extra)
{
	static int runs;
	memset(g, 0, sizeof(*g));
	runs++;
	snprintf(g->ctl, sizeof(g->ctl), "%s/%s-%d-ctl", e2e_root, mode, runs);
	snprintf(g->log, sizeof(g->log), "%s/%s-%d.log", e2e_root, mode, runs);
	snprintf(g->env_ctl, sizeof(g->env_ctl), "SNAPSHOT_CONTROL_DIR=%s", g->ctl);
	char cusnap[PATH_MAX], prog[PATH_MAX + 32];
	cusnap_path(cusnap, sizeof(cusnap));
	snprintf(prog, sizeof(prog), "%s/clients", examples_dir);
	const char *argv[] = {cusnap, "run", "--", prog, "--mode", mode, extra, NULL};
	char *env[] = {g->env_ctl, NULL};
	g->child = test_spawn((char *const *)argv, env, g->log);
	g->root = g->child;
	if (group_wait_ready(g, mode) < 0) {
		group_kill(g);
		return -1;
	}
	return 0;
}

static void replay(const char *mode, const char *extra, int processes, int creators)
{
	static const char *const contents[] = {"host", "native"};
	for (int c = 0; c < 2; c++) {
		struct group g;
		if (client_start(&g, mode, extra) < 0)
			return;
		char *json = group_inspect(&g);
		/* Every CUDA process is a participant, the context-only one too. */
		CHECK_EQ(count_of(json, "\"phase\":\"active\""), processes);
		CHECK_EQ(count_of(json, "\"role\":\"creator\""), creators);
		free(json);
		char *out;
		int rc = group_suspend(&g, contents[c], &out, NULL);
		if (rc != 0)
			test_fail(__FILE__, __LINE__, "%s (%s content): suspend exited %d:\n%s", mode, contents[c], rc,
				  out);
		free(out);
		rc = group_resume(&g, &out, NULL);
		if (rc != 0)
			test_fail(__FILE__, __LINE__, "%s (%s content): resume exited %d:\n%s", mode, contents[c], rc,
				  out);
		free(out);
		int pass = group_finish_counting(&g, "PASS clients");
		if (pass != processes)
			test_fail(__FILE__, __LINE__, "%s (%s content): %d of %d processes passed", mode, contents[c],
				  pass, processes);
		group_kill(&g);
	}
}

static void nccl(void)
{
	/* parent (2 creators: device and host buffer), worker, front-end */
	replay("nccl", "--front", 3, 2);
}

static void expandable(void)
{
	replay("expandable", "--timeout=60", 1, 4);
}

static void symmetric(void)
{
	replay("symmetric", "--timeout=60", 2, 1);
}

static void sleep_mode(void)
{
	replay("sleep", "--timeout=60", 1, 3);
}

int main(void)
{
	e2e_init("clients");
	test_run("NCCL: static cudart's resolvers, a HOST_NUMA buffer, the free path, a context-only process", nccl);
	test_run("PyTorch expandable segments: grown and shrunk, handles released while mapped", expandable);
	test_run("PyTorch symmetric memory: the FD fetched with pidfd_getfd", symmetric);
	test_run("vLLM sleep mode: released and recreated at the same addresses", sleep_mode);
	return e2e_done();
}
