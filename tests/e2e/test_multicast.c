/* SPDX-License-Identifier: MIT */
/* Multicast groups (DESIGN.md §8) under cusnap suspend/resume:
 * examples/vmm_group with VMM_GROUP_MULTICAST=1 (an NVLS-style object over the
 * devices, binds by handle and by address, mapped in every process).
 * Round trips of 2 and 4 processes; the teardown leaves no multicast object
 * for the native checkpoint; requested vs rounded capacity (r615); the
 * refusals (partial group, a device never added, a device with nothing bound).
 * (CRIU checkpoint + restore of the same groups: test_checkpoint; the fault
 * sweep: test_sweep_multicast.) */
#include "sweep.h"

static char *mc_env[] = {"VMM_GROUP_MULTICAST=1", NULL};

/* The "multicast" lists of an inspect --json, concatenated (malloc'ed). */
static char *multicast_part(const char *json)
{
	size_t len = json ? strlen(json) : 0, at = 0;
	char *out = calloc(1, len + 1);
	for (const char *p = json; out && p && (p = strstr(p, "\"multicast\":["));) {
		const char *end = strstr(p, "]}]}"); /* the end of the list that closes the participant */
		const char *next = strstr(p + 1, "\"multicast\":[");
		if (!end || (next && next < end))
			end = next ? next : p + strlen(p);
		memcpy(out + at, p, (size_t)(end - p));
		at += (size_t)(end - p);
		p = end;
	}
	return out;
}

static void round_trip(int workers, const char *content, char *const *env)
{
	struct group g;
	if (group_start(&g, "mc", workers, 1, false, NULL, env, NULL) < 0)
		return;
	char *before = group_inspect(&g);
	CHECK_EQ(count_of(before, "\"num_devices\":2"), workers + 1);
	CHECK_EQ(count_of(before, "\"by\":\"address\""), (workers + 1) / 2);
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu-mc"), workers + 1);
	char *out;
	CHECK_SAYS(out, group_suspend(&g, content, &out, NULL), 0, "PREPARE_MULTICAST");
	/* No process holds a multicast object (or any device memory) now. */
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	CHECK_CONTAINS(out, "RESTORE_MULTICAST_BIND");
	CHECK_CONTAINS(out, "topology identical");
	free(out);
	/* Topology identical, as the tool reports it: ids, devices, binds, mappings. */
	char *after = group_inspect(&g);
	char *mb = multicast_part(before), *ma = multicast_part(after);
	CHECK(mb && ma && strlen(mb) > 100);
	if (mb && ma && strcmp(mb, ma) != 0)
		test_fail(__FILE__, __LINE__, "multicast topology changed:\nbefore %s\nafter  %s", mb, ma);
	free(mb);
	free(ma);
	free(before);
	free(after);
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu-mc"), workers + 1);
	/* Bytes intact, members reachable through the multicast mappings, the old handles work. */
	CHECK_EQ(group_finish(&g), workers + 1);
	group_kill(&g);
}

static void two_processes(void)
{
	round_trip(1, "host", mc_env);
	round_trip(1, "native", mc_env);
}

static void four_processes(void)
{
	round_trip(3, "host", mc_env);
	round_trip(3, "native", mc_env);
}

/* The teardown is what lets the native checkpoint complete: without the
 * interposer, cuemu's native checkpoint fails on the multicast object. */
static void native_checkpoint_needs_teardown(void)
{
	struct group g;
	if (group_start(&g, "plain", 1, 1, true, NULL, mc_env, NULL) < 0)
		return;
	char *out;
	CHECK_SAYS(out, group_suspend(&g, "host", &out, NULL), 1, "CUDA_ERROR_NOT_SUPPORTED");
	char *log = test_read_file(g.log);
	CHECK_CONTAINS(log, "multicast");
	free(log);
	group_kill(&g);
	/* Interposed, the same group: cuemu's failure never triggers. */
	if (group_start(&g, "interposed", 1, 1, false, NULL, mc_env, NULL) < 0)
		return;
	group_suspend_resume(&g);
	log = test_read_file(g.log);
	CHECK(!contains(log, "does not complete"));
	free(log);
	group_done(&g, 2);
}

/* r615 rounds the capacity to 512 MiB: the application asks for one unit and
 * binds four; the record keeps both, and the rebuild asks for what was used. */
static void rounded_capacity(void)
{
	char *env[] = {"VMM_GROUP_MULTICAST=1",  "VMM_GROUP_MC_REQUEST=2097152", "CUEMU_PROFILE=r615",
		       "VMM_GROUP_SIZE=4194304", "CUEMU_GRANULARITY=2097152",    NULL};
	struct group g;
	if (group_start(&g, "r615", 3, 1, false, NULL, env, NULL) < 0)
		return;
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"size\":2097152,\"used\":8388608"), 4);
	free(json);
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"size\":2097152,\"used\":8388608"), 4);
	free(json);
	group_done(&g, 4);
}

/* A refused suspend changes nothing: the group still passes afterwards. */
static void refused(const char *name, char *const *env, const char *why, int workers)
{
	struct group g;
	if (group_start(&g, name, workers, 1, false, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 1);
	CHECK_CONTAINS(out, why);
	free(out);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"phase\":\"active\""), workers + 1);
	free(json);
	CHECK_EQ(group_finish(&g), workers + 1);
	group_kill(&g);
}

static void refusals(void)
{
	char *no_add[] = {"VMM_GROUP_MULTICAST=1", "VMM_GROUP_MC_DEFECT=no-add", NULL};
	refused("noadd", no_add, "added 1 of its 2 devices", 1);
	char *no_bind[] = {"VMM_GROUP_MULTICAST=1", "VMM_GROUP_MC_DEFECT=no-bind", NULL};
	refused("nobind", no_bind, "device 1 was added but nothing is bound on it", 1);
}

/* A partial group: the coordinator given every process but one importer. */
static void partial_group(void)
{
	struct group g;
	if (group_start(&g, "partial", 3, 1, false, NULL, mc_env, NULL) < 0)
		return;
	pid_t pids[8];
	CHECK_EQ(tree_pids(g.root, pids, 8), 4);
	char coord[PATH_MAX + 32], cd[PATH_MAX + 32], dir[PATH_MAX + 32], p[3][16], *out;
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	snprintf(cd, sizeof(cd), "--control-dir=%s", g.ctl);
	snprintf(dir, sizeof(dir), "%s/partial", g.ctl);
	mkdir(dir, 0700);
	for (int i = 0; i < 3; i++)
		snprintf(p[i], sizeof(p[i]), "%d", pids[i]);
	/* pids[3], the last worker, imported the object; it is left out. */
	CHECK_EQ(tool(&out, NULL, coord, "--prepare", cd, "--checkpoint-dir", dir, "--process", p[0], p[0], "--process",
		      p[1], p[1], "--process", p[2], p[2], NULL),
		 1);
	CHECK_CONTAINS(out, "is not in the group (partial group)");
	free(out);
	group_done(&g, 4);
}

int main(void)
{
	e2e_init("mc");
	test_run("2 processes over 2 devices: suspend, resume (host and native content)", two_processes);
	test_run("4 processes over 2 devices: suspend, resume (host and native content)", four_processes);
	test_run("the native checkpoint never meets a multicast object", native_checkpoint_needs_teardown);
	test_run("r615: requested and used capacity recorded and replayed", rounded_capacity);
	test_run("refused: a device never added, a device with nothing bound", refusals);
	test_run("refused: a partial group", partial_group);
	return e2e_done();
}
