/* SPDX-License-Identifier: MIT */
/* The real NCCL (2.28.9, built from its source against the project's runtime:
 * `make nccl`) checkpointed in place (DESIGN.md §15): examples/nccl/nccl_group's
 * ranks join one communicator over P2P (cuMem buffers shared as POSIX FDs
 * through NCCL's proxy), NVLS (multicast objects on an NVSwitch topology) or SHM
 * (host memory), register buffers and enqueue collectives; cusnap suspends and
 * resumes them in both content modes; the memory the ranks share is shared again
 * afterwards (the same memory objects mapped by several ranks), and every rank
 * then checks its bytes, enqueues again and tears down through NCCL with no
 * allocation left. Without the interposer the driver refuses to restore a
 * rank that imported (r580): the negative control. */
#include <dirent.h>
#include <sys/prctl.h>

#include "e2e_util.h"

static char cusnap[PATH_MAX], group_bin[PATH_MAX + 32], ld_path[2 * PATH_MAX + 32], topo_env[PATH_MAX + 48],
	devices_env[32];

struct mode {
	const char *name;
	const char *kind; /* cuemu-topo --kind */
	const char *env[4];
	bool multicast; /* NVLS: multicast objects expected */
};

static const struct mode modes[] = {
	{"P2P", "pcie", {"NCCL_NVLS_ENABLE=0", NULL}, false},
	{"NVLS", "nvswitch", {"NCCL_NVLS_ENABLE=1", "CUEMU_TOPO=nvswitch", NULL}, true},
	{"SHM", "pcie", {"NCCL_NVLS_ENABLE=0", "NCCL_P2P_DISABLE=1", NULL}, false},
};

/* NCCL_TOPO_FILE=... for cuemu-topo --kind kind with devices GPUs into topo_env. */
static int topology(const char *kind, int devices)
{
	char file[PATH_MAX + 32], topo_bin[PATH_MAX + 32], n[16];
	snprintf(file, sizeof(file), "%s/topo-%s-%d.xml", e2e_root, kind, devices);
	snprintf(topo_bin, sizeof(topo_bin), "%s/cuemu-topo", bin_dir);
	snprintf(n, sizeof(n), "%d", devices);
	snprintf(topo_env, sizeof(topo_env), "NCCL_TOPO_FILE=%s", file);
	if (access(file, F_OK) == 0)
		return 0;
	char *argv[] = {topo_bin, "--kind", (char *)kind, "--devices", n, NULL};
	return test_run_cmd(argv, file, 10000);
}

/* Start nccl_group with ranks ranks in mode m, one cuemu device each (NCCL puts
 * one rank on a GPU), under the interposer unless plain, and wait (at most
 * 120 s) until it is ready for a snapshot. */
static int nccl_launch(struct group *g, const char *name, int ranks, const struct mode *m, bool plain, bool wait);
/* The ranks nccl_launch starts work on after their set-up (NCCL_GROUP_BUSY). */
static bool busy;

static int nccl_start(struct group *g, const char *name, int ranks, const struct mode *m, bool plain)
{
	return nccl_launch(g, name, ranks, m, plain, true);
}

/* The same; wait: until it is ready for a snapshot, else not at all. */
static int nccl_launch(struct group *g, const char *name, int ranks, const struct mode *m, bool plain, bool wait)
{
	static char n[16];
	snprintf(n, sizeof(n), "%d", ranks);
	snprintf(devices_env, sizeof(devices_env), "CUEMU_DEVICES=%d", ranks);
	if (topology(m->kind, ranks) != 0) {
		test_fail(__FILE__, __LINE__, "cuemu-topo --kind %s --devices %d failed", m->kind, ranks);
		return -1;
	}
	const char *wrapped[] = {cusnap, "run", "--", group_bin, "--ranks", n, "--timeout", "180", NULL};
	const char *const *argv = plain ? wrapped + 3 : wrapped;
	char *env[12];
	int e = 0;
	env[e++] = ld_path;
	env[e++] = topo_env;
	env[e++] = devices_env;
	env[e++] = "NCCL_HOSTID=cusnap-e2e"; /* one host, whatever the hostname */
	/* Two channels of 256 KiB buffers (NVLS's too) rather than NCCL's 16 of
	 * 4 MiB: the same objects shared the same ways, in a tenth of the bytes
	 * each rank allocates, clears and has checkpointed (most of this
	 * program's time otherwise). */
	env[e++] = "NCCL_MAX_NCHANNELS=2";
	env[e++] = "NCCL_NVLS_NCHANNELS=2";
	env[e++] = "NCCL_BUFFSIZE=262144";
	for (int i = 0; m->env[i]; i++)
		env[e++] = (char *)m->env[i];
	if (busy)
		env[e++] = "NCCL_GROUP_BUSY=1";
	env[e] = NULL;
	memset(g, 0, sizeof(*g));
	static int runs;
	snprintf(g->ctl, sizeof(g->ctl), "%s/%s-%d-ctl", e2e_root, name, ++runs);
	snprintf(g->log, sizeof(g->log), "%s/%s-%d.log", e2e_root, name, runs);
	snprintf(g->env_ctl, sizeof(g->env_ctl), "SNAPSHOT_CONTROL_DIR=%s", g->ctl);
	char *full[16];
	int f = 0;
	full[f++] = g->env_ctl;
	for (int i = 0; env[i]; i++)
		full[f++] = env[i];
	full[f] = NULL;
	g->child = g->root = test_spawn((char *const *)argv, full, g->log);
	if (!wait)
		return 0;
	char ready[PATH_MAX + 32];
	snprintf(ready, sizeof(ready), "%s/ready-for-snapshot", g->ctl);
	if (test_wait_file(ready, 120000))
		return 0;
	char *text = test_read_file(g->log);
	test_fail(__FILE__, __LINE__, "nccl_group (%s, %d ranks) did not get ready; its log:\n%s", m->name, ranks,
		  text ? text : "");
	free(text);
	group_kill(g);
	return -1;
}

/* Memory objects (cuemu's memfds, by inode) mapped by more than one process of
 * the tree: the memory its processes share. */
static int shared_objects(pid_t root)
{
	pid_t pids[80];
	int n = tree_pids(root, pids, 80);
	unsigned long inodes[4096];
	int owners[4096], count = 0;
	for (int i = 0; i < n; i++) {
		char path[64], line[1024];
		snprintf(path, sizeof(path), "/proc/%d/maps", pids[i]);
		FILE *fp = fopen(path, "re");
		unsigned long seen[1024];
		int nseen = 0;
		while (fp && fgets(line, sizeof(line), fp)) {
			unsigned long inode;
			if (!strstr(line, "memfd:cuemu-") || sscanf(line, "%*s %*s %*s %*s %lu", &inode) != 1)
				continue;
			bool dup = false;
			for (int k = 0; k < nseen && !dup; k++)
				dup = seen[k] == inode;
			if (dup || nseen == 1024)
				continue;
			seen[nseen++] = inode;
			int k = 0;
			while (k < count && inodes[k] != inode)
				k++;
			if (k == count && count < 4096) {
				inodes[count] = inode;
				owners[count++] = 0;
			}
			if (k < count)
				owners[k]++;
		}
		if (fp)
			fclose(fp);
	}
	int shared = 0;
	for (int k = 0; k < count; k++)
		shared += owners[k] > 1;
	return shared;
}

static int nccl_tool(struct group *g, const char *cmd, const char *content, char **out)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", g->root);
	if (content)
		return tool(out, NULL, cusnap, cmd, "--pid", pid, "--content", content, "--control-dir", g->ctl,
			    "--timeout", "60000", NULL);
	return tool(out, NULL, cusnap, cmd, "--pid", pid, "--control-dir", g->ctl, "--timeout", "60000", NULL);
}

/* A group of ranks in mode m started under the interposer, named PREFIX
 * MODE-RANKS (into name): how many memory objects its ranks share (a failure
 * when none), or -1 (not started). */
static int nccl_begin(struct group *g, const char *prefix, const struct mode *m, int ranks, char name[32])
{
	snprintf(name, 32, "%s%s-%d", prefix, m->name, ranks);
	if (nccl_start(g, name, ranks, m, false) < 0)
		return -1;
	int before = shared_objects(g->root);
	if (before <= 0)
		test_fail(__FILE__, __LINE__, "%s: the ranks share no memory object before the snapshot", name);
	return before;
}

/* One group: shared memory and (NVLS) multicast objects seen through the
 * interposer, suspended and resumed in both contents, sharing the same memory
 * objects afterwards, every rank passing. */
static void suspend_resume(const struct mode *m, int ranks)
{
	struct group g;
	char name[32];
	int before = nccl_begin(&g, "", m, ranks, name);
	if (before < 0)
		return;
	char *json = group_inspect(&g), *out;
	CHECK_EQ(count_of(json, "\"interposed\":true"), ranks);
	CHECK(count_of(json, "\"role\":\"importer\"") > 0);
	if (m->multicast)
		CHECK(count_of(json, "\"multicast\":[]") == 0);
	else
		CHECK_EQ(count_of(json, "\"multicast\":[]"), ranks);
	free(json);
	static const char *const contents[] = {"host", "native"};
	for (int c = 0; c < 2; c++) {
		CHECK_EQ(nccl_tool(&g, "suspend", contents[c], &out), 0);
		free(out);
		CHECK_SAYS(out, nccl_tool(&g, "resume", NULL, &out), 0, "topology identical");
		int after = shared_objects(g.root);
		if (after != before)
			test_fail(__FILE__, __LINE__, "%s (%s): %d shared memory objects before the suspend, %d after",
				  name, contents[c], before, after);
	}
	CHECK_EQ(group_finish_counting(&g, "PASS nccl_group rank"), ranks);
	group_kill(&g);
}

static void p2p(void)
{
	suspend_resume(&modes[0], 2);
	suspend_resume(&modes[0], 4);
}

static void nvls(void)
{
	suspend_resume(&modes[1], 2);
	suspend_resume(&modes[1], 4);
}

static void shm(void)
{
	suspend_resume(&modes[2], 2);
	suspend_resume(&modes[2], 4);
}

/* 8 ranks take a quarter of the program's time: one mode per run (each mode
 * has 2 and 4 ranks every run), all three in make sweep. */
static void eight_ranks(void)
{
	size_t n = sizeof(modes) / sizeof(modes[0]);
	for (size_t m = 0; m < n; m++)
		if (test_picked("8 ranks", m, n))
			suspend_resume(&modes[m], 8);
}

/* 4 ranks suspended at any moment and resumed, CUSNAP_NCCL_RUNS times (4 by
 * default): the suspend lands 50-1200 ms after the start, in ncclCommInitRank
 * (cuMem allocations, exports, imports, proxy connections and the copies that
 * set up device structures), in the set-up after it, or in the collectives and
 * copies the ranks keep making once ready (NCCL_GROUP_BUSY). Their calls wait
 * while the tree is suspended, QUIESCE drains those under way, and every rank
 * completes and passes: no call fails, no rank dies (3 of 57 died before the
 * copies were gated, a memcpy into a range PREPARE had unmapped). A suspend
 * made before any rank holds CUDA is refused and tried again 20 ms later. */
static void suspended_anywhere(void)
{
	const char *e = getenv("CUSNAP_NCCL_RUNS");
	int runs = e && atoi(e) > 0 ? atoi(e) : 4, survived = 0;
	static const char *const contents[] = {"host", "native", "file"};
	unsigned seed = (unsigned)getpid();
	busy = true;
	for (int run = 0; run < runs; run++) {
		struct group g;
		if (nccl_launch(&g, "anywhere", 4, &modes[0], false, false) < 0)
			break;
		int delay = 50 + (int)(rand_r(&seed) % 1151);
		usleep((useconds_t)delay * 1000);
		char *out = NULL;
		int rc = -1;
		for (int tries = 0; rc != 0 && tries < 100; tries++) {
			free(out);
			out = NULL;
			rc = nccl_tool(&g, "suspend", contents[run % 3], &out);
			if (rc != 0 && out && strstr(out, "no CUDA process"))
				usleep(20000);
			else if (rc != 0)
				break;
		}
		if (rc != 0)
			test_fail(__FILE__, __LINE__,
				  "run %d: suspend %d ms after the start (%s content) exited %d:\n%s", run, delay,
				  contents[run % 3], rc, out ? out : "");
		free(out);
		out = NULL;
		usleep(100000);
		if (rc == 0 && (rc = nccl_tool(&g, "resume", NULL, &out)) != 0)
			test_fail(__FILE__, __LINE__, "run %d: resume exited %d:\n%s", run, rc, out ? out : "");
		free(out);
		char ready[PATH_MAX + 32];
		snprintf(ready, sizeof(ready), "%s/ready-for-snapshot", g.ctl);
		CHECK(test_wait_file(ready, 120000));
		int passed = group_finish_counting(&g, "PASS nccl_group rank");
		if (passed != 4)
			test_fail(__FILE__, __LINE__, "run %d (suspended %d ms after the start): %d of 4 ranks passed",
				  run, delay, passed);
		survived += rc == 0 && passed == 4;
		group_kill(&g);
	}
	busy = false;
	printf("  %d of %d runs suspended and resumed, every rank passing\n", survived, runs);
	CHECK_EQ(survived, runs);
}

/* Without the interposer: the native steps alone checkpoint every rank, and
 * the driver then refuses to restore a rank holding an import of its
 * neighbour's buffer (r580 on an H200: CUDA_ERROR_NOT_SUPPORTED, as cuemu
 * models it). The resume says so, naming the rank and leaving the tree
 * half-done: the negative control of what the interposer is for. */
static void without_interposer(void)
{
	struct group g;
	if (nccl_start(&g, "plain", 2, &modes[0], true) < 0)
		return;
	CHECK(shared_objects(g.root) > 0);
	char *out;
	CHECK_EQ(nccl_tool(&g, "suspend", NULL, &out), 0);
	CHECK_CONTAINS(out, "refuses to restore the importer");
	free(out);
	CHECK_EQ(nccl_tool(&g, "resume", NULL, &out), 2);
	CHECK_CONTAINS(out, "failed: CUDA_ERROR_NOT_SUPPORTED");
	CHECK_CONTAINS(out, "half-done");
	free(out);
	group_kill(&g);
}

static char criu[PATH_MAX];

/* CRIU at hand and root: true, else said. */
static bool criu_here(void)
{
	if (geteuid() == 0 && test_find_criu(criu, sizeof(criu)) == 0 && test_criu_version(criu) >= 4002000) {
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		return true;
	}
	printf("  (skipped: CRIU needs root, and CRIU 4.2 or later for NCCL's sockets: make test provisions one)\n");
	return false;
}

/* The restored group of g (root: its restored root): its memory shared as
 * before the dump (before objects), every rank checks its bytes, the marks
 * through its imports, splits a communicator off the restored one over NCCL's
 * bootstrap connections, and tears down. */
static void restored_ranks_pass(struct group *g, pid_t root, int ranks, int before)
{
	CHECK(root > 0);
	if (root <= 0)
		return;
	/* At least as shared as before: the ranks go on past restore-complete at
	 * once, and the split communicator's NVLS buffers are shared memory of
	 * its own (7 of 6 seen once); memory that came back as copies is fewer. */
	int after = shared_objects(root);
	if (after < before)
		test_fail(__FILE__, __LINE__, "%d memory objects shared after the restore, %d before", after, before);
	int status = test_wait_child(root, 180000);
	char *log = test_read_file(g->log);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(count_of(log, "after release: bytes, marks through imports, ncclCommSplit and collectives"), ranks);
	CHECK_EQ(count_of(log, "PASS nccl_group rank"), ranks);
	if (status < 0)
		tree_kill(root);
	free(log);
	reap_all();
}

/* cusnap checkpoint --tcp-established (NCCL's bootstrap and proxy keep TCP
 * connections between ranks) in content mode, the group killed by the dump,
 * restored at once on this host. */
static void checkpoint_restore(const struct mode *m, int ranks, const char *content)
{
	struct group g;
	char name[32];
	int before = nccl_begin(&g, "criu-", m, ranks, name);
	if (before < 0)
		return;
	char pid[16], dir[PATH_MAX + 32], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, "--criu",
		      criu, "--tcp-established", "--content", content, "--timeout", "60000", NULL);
	if (!group_dump_ok(&g, rc, out))
		return;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "restore", "--dir", dir, "--criu", criu, "--timeout", "60000", NULL),
		   0, "topology identical");
	restored_ranks_pass(&g, restored_root(dir), ranks, before);
}

static void criu_cusnap(void)
{
	if (!criu_here())
		return;
	checkpoint_restore(&modes[0], 2, "host");   /* P2P */
	checkpoint_restore(&modes[2], 2, "native"); /* SHM */
	/* One of the two with 8 ranks per run (make sweep: both). */
	if (test_picked("checkpoint of 8 ranks", 0, 2))
		checkpoint_restore(&modes[1], 8, "native"); /* NVLS, 8 ranks */
	if (test_picked("checkpoint of 8 ranks", 1, 2))
		checkpoint_restore(&modes[0], 8, "host"); /* P2P, 8 ranks */
}

/* The same through plain `criu dump` and `criu restore` with cusnap's plugin
 * (as runc and Podman run CRIU): NVLS, 2 ranks, host content. */
static void criu_plugin(void)
{
	if (!criu_here())
		return;
	struct group g;
	if (nccl_start(&g, "plugin", 2, &modes[1], false) < 0)
		return;
	int before = shared_objects(g.root);
	char pid[16], dir[PATH_MAX + 32], images[PATH_MAX + 48], pidfile[PATH_MAX + 48], plugins[PATH_MAX + 32],
		libcuda[PATH_MAX + 48], ctl[PATH_MAX + 32], *out;
	snprintf(pid, sizeof(pid), "%d", g.root);
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	snprintf(images, sizeof(images), "%s/images", dir);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	snprintf(plugins, sizeof(plugins), "%s/../lib/criu", bin_dir);
	snprintf(libcuda, sizeof(libcuda), "CUSNAP_LIBCUDA=%s/libcuda.so.1", emu_dir);
	snprintf(ctl, sizeof(ctl), "CUSNAP_CONTROL_DIR=%s", g.ctl);
	mkdir(dir, 0700);
	mkdir(images, 0700);
	char *env[] = {libcuda, ctl, "CUSNAP_CONTENT=host", "CUSNAP_NATIVE_TIMEOUT_MS=60000", NULL};
	int rc = tool(&out, env, criu, "dump", "-t", pid, "-D", images, "-o", "dump.log", "-v4", "--libdir", plugins,
		      "--tcp-established", "--network-lock", "nftables", "--shell-job", NULL);
	CHECK_EQ(rc, 0);
	free(out);
	if (rc != 0) {
		group_kill(&g);
		return;
	}
	group_dumped(&g);
	CHECK_SAYS(out,
		   tool(&out, env, criu, "restore", "-d", "-D", images, "-o", "restore.log", "-v4", "--libdir", plugins,
			"--pidfile", pidfile, "--tcp-established", "--network-lock", "nftables", "--shell-job", NULL),
		   0, "restore-complete written");
	restored_ranks_pass(&g, restored_root(dir), 2, before);
}

/* A 2-rank group in a Podman container, checkpointed and restored with
 * --tcp-established (tests/criu/check_podman.sh --nccl, as make test runs it
 * for the example group). */
static void podman(void)
{
	if (!criu_here())
		return;
	char script[PATH_MAX + 32], log[PATH_MAX + 32];
	snprintf(script, sizeof(script), "%s/../criu/check_podman", test_exe_dir());
	snprintf(log, sizeof(log), "%s/podman-nccl.log", e2e_root);
	char *argv[] = {script, "--nccl", NULL};
	int rc = test_run_cmd(argv, log, 600000);
	char *text = test_read_file(log);
	if (rc == 77)
		printf("  (skipped: %s)", text ? text : "");
	else if (rc != 0)
		test_fail(__FILE__, __LINE__, "check_podman.sh --nccl exited %d:\n%s", rc, text ? text : "");
	else
		printf("%s", text ? text : "");
	free(text);
}

int main(void)
{
	e2e_init("nccl");
	if (getenv("CUSNAP_SANITIZER"))
		SKIP("NCCL and the example are not built with the sanitizers");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	snprintf(group_bin, sizeof(group_bin), "%s/nccl_group", examples_dir);
	/* make test records how its NCCL build went: 69 unavailable (no nvcc, no
	 * source), anything else but 0 a build that failed. */
	char status_path[PATH_MAX + 32];
	snprintf(status_path, sizeof(status_path), "%s/../../nccl-status", test_exe_dir());
	char *status = test_read_file(status_path);
	int built = status ? atoi(status) : -1;
	free(status);
	if (built != 0 && built != 69 && built != -1) {
		test_fail(__FILE__, __LINE__, "the NCCL build failed (exit %d): see build/nccl-build.log", built);
		return test_done();
	}
	if (access(group_bin, X_OK) != 0 && built == 0) {
		test_fail(__FILE__, __LINE__, "NCCL was built but %s was not (make nccl)", group_bin);
		return test_done();
	}
	if (access(group_bin, X_OK) != 0)
		SKIP("no %s: `make nccl` builds NCCL from its source (needs nvcc and the NCCL source)", group_bin);
	/* The project's runtime and NVML first, cuemu as libcuda.so.1. */
	snprintf(ld_path, sizeof(ld_path), "LD_LIBRARY_PATH=%s:%s/../lib", emu_dir, bin_dir);
	test_run("P2P (cuMem over POSIX FDs), 2 and 4 ranks: suspend/resume, both contents", p2p);
	test_run("NVLS (multicast on an NVSwitch), 2 and 4 ranks: suspend/resume, both contents", nvls);
	test_run("SHM (host memory), 2 and 4 ranks: suspend/resume, both contents", shm);
	test_run("P2P, NVLS or SHM (one per run), 8 ranks: suspend/resume, both contents", eight_ranks);
	test_run("4 ranks suspended anywhere in init, set-up or collectives and resumed (CUSNAP_NCCL_RUNS): every rank "
		 "passes",
		 suspended_anywhere);
	test_run("without the interposer: checkpointed, then the driver refuses to restore a rank that imported",
		 without_interposer);
	test_run("cusnap checkpoint --tcp-established, kill, restore at once: P2P and SHM with 2 ranks, NVLS or P2P "
		 "with 8 (one per run); both contents",
		 criu_cusnap);
	test_run("plain criu dump/restore --tcp-established with the plugin: NVLS, 2 ranks", criu_plugin);
	test_run("podman container checkpoint/restore --tcp-established: a 2-rank group in a container", podman);
	return e2e_done();
}
