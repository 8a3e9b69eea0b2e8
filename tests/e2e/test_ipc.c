/* SPDX-License-Identifier: MIT */
/* Legacy CUDA IPC made checkpointable (issue 14, SYSTEM.md §4.4): vLLM-style
 * custom all-reduce groups (vmm_group --ipc) suspended and resumed in both
 * content modes; without the interposer the native checkpoint refuses them and
 * cusnap says why; event IPC and raw driver handles refused before anything
 * changes. (The CRIU checkpoint and restore are in test_checkpoint, the fault
 * sweep in test_sweep_ipc.) */
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
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	CHECK_CONTAINS(out, "topology identical");
	free(out);
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
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

static void without_interposer(void)
{
	/* r580: the native checkpoint of a process holding an opened IPC mapping fails. */
	refused("ipc-plain", true, ipc_env, "legacy CUDA IPC");
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

int main(void)
{
	e2e_init("ipc");
	test_run("legacy IPC groups of 2 and 4: suspend/resume, host content", host_content);
	test_run("legacy IPC groups of 2 and 4: suspend/resume, native content", native_content);
	test_run("without the interposer: suspend refused naming legacy IPC, exit 1, the group unharmed",
		 without_interposer);
	test_run("event IPC refused at QUIESCE, naming the call", event_ipc);
	test_run("SNAPSHOT_CUDA_VMM_IPC=0: a raw IPC handle opened is refused at QUIESCE", adapter_off);
	e2e_done();
	return test_done();
}
