/* SPDX-License-Identifier: MIT */
/* The checkpoint API driven from a third process: states and transitions,
 * lock timeout, gpuPairs, documented driver behaviours. */
#include <dirent.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "ckpt_util.h"
#include "cusnap/usock.h"

static void transitions(void)
{
	struct target t;
	if (target_start(&t, "a", NULL, NULL) < 0)
		return;
	CHECK_EQ(test_count_maps(t.pid, "memfd:cuemu"), 1);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	CHECK_CU_EQ(cuCheckpointProcessUnlock(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(ck_restore(t.pid, NULL, 0), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU(ck_lock(t.pid, 0));
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_LOCKED);
	CHECK_CU_EQ(ck_lock(t.pid, 0), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(ck_restore(t.pid, NULL, 0), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU(cuCheckpointProcessCheckpoint(t.pid, NULL));
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_CHECKPOINTED);
	/* All device backing is gone; the reservation is still there. */
	CHECK_EQ(test_count_maps(t.pid, "memfd:cuemu"), 0);
	CHECK_CU_EQ(cuCheckpointProcessUnlock(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(ck_lock(t.pid, 0), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU(ck_restore(t.pid, NULL, 0));
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_LOCKED);
	CHECK_EQ(test_count_maps(t.pid, "memfd:cuemu"), 1);
	CHECK_CU(cuCheckpointProcessUnlock(t.pid, NULL));
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	char want[64];
	snprintf(want, sizeof(want), "PASS %#llx", t.va); /* same bytes at the same address */
	TARGET_EXPECT(&t, "check 1", want);
	int tid = 0;
	CHECK_CU(cuCheckpointProcessGetRestoreThreadId(t.pid, &tid));
	char task[64];
	snprintf(task, sizeof(task), "/proc/%d/task/%d", t.pid, tid);
	CHECK(tid > 0 && tid != t.pid && access(task, F_OK) == 0);
	target_stop(&t);
}

static void lock_blocks_calls(void)
{
	struct target t;
	if (target_start(&t, "b", NULL, NULL) < 0)
		return;
	CHECK_CU(ck_lock(t.pid, 0));
	char cmd_path[4096], out_path[4096];
	snprintf(cmd_path, sizeof(cmd_path), "%s/b.cmd", target_dir);
	snprintf(out_path, sizeof(out_path), "%s/b.out", target_dir);
	test_write_file(cmd_path, "fill 2");
	/* The target's cuMemcpyHtoD waits behind the lock. */
	CHECK(!test_wait_file(out_path, 300));
	CHECK_CU(cuCheckpointProcessUnlock(t.pid, NULL));
	CHECK(test_wait_file(out_path, 10000));
	unlink(out_path);
	TARGET_EXPECT(&t, "check 2", "PASS");
	target_stop(&t);
}

static void lock_timeout(void)
{
	struct target t;
	const char *opts[] = {"--busy", "1500", NULL};
	if (target_start(&t, "c", opts, NULL) < 0)
		return;
	/* Work is pending on a stream for 1.5 s: a 100 ms lock gives up. */
	CHECK_CU_EQ(ck_lock(t.pid, 100), CUDA_ERROR_NOT_READY);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	TARGET_EXPECT(&t, "maps", "1"); /* and the process still runs CUDA calls */
	CHECK_CU(ck_lock(t.pid, 20000));
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_LOCKED);
	CHECK_CU(cuCheckpointProcessUnlock(t.pid, NULL));
	target_stop(&t);
}

static void gpu_pairs(void)
{
	struct target t;
	const char *opts[] = {"--dev", "0", NULL};
	if (target_start(&t, "d", opts, NULL) < 0)
		return;
	CUuuid u0, u1, nowhere;
	CHECK_CU(cuDeviceGetUuid(&u0, 0));
	CHECK_CU(cuDeviceGetUuid(&u1, 1));
	memset(&nowhere, 0x42, sizeof(nowhere));
	ck_suspend(&t);
	CUcheckpointGpuPair missing = {.oldUuid = u1, .newUuid = u0};
	CHECK_CU_EQ(ck_restore(t.pid, &missing, 1), CUDA_ERROR_INVALID_VALUE); /* device 0 not listed */
	CUcheckpointGpuPair absent = {.oldUuid = u0, .newUuid = nowhere};
	CHECK_CU_EQ(ck_restore(t.pid, &absent, 1), CUDA_ERROR_INVALID_VALUE); /* no such GPU */
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_CHECKPOINTED);             /* refused, nothing changed */
	CUcheckpointGpuPair move = {.oldUuid = u0, .newUuid = u1};
	CHECK_CU(ck_restore(t.pid, &move, 1));
	CHECK_CU(cuCheckpointProcessUnlock(t.pid, NULL));
	TARGET_EXPECT(&t, "device", "1");
	TARGET_EXPECT(&t, "check 1", "PASS");
	CHECK_EQ(test_count_maps(t.pid, "memfd:cuemu-mem-d1"), 1);
	target_stop(&t);
}

static void failed_restore_is_final(void)
{
	struct target t;
	const char *opts[] = {"--dev", "0", "--also", "1", NULL};
	char *env[] = {"CUEMU_MEMORY=6M", NULL};
	if (target_start(&t, "e", opts, env) < 0)
		return;
	CUuuid u0, u1;
	CHECK_CU(cuDeviceGetUuid(&u0, 0));
	CHECK_CU(cuDeviceGetUuid(&u1, 1));
	ck_suspend(&t);
	/* Both 4 MiB allocations onto device 1 (6 MiB): out of memory. */
	CUcheckpointGpuPair pairs[] = {{.oldUuid = u0, .newUuid = u1}, {.oldUuid = u1, .newUuid = u1}};
	CHECK_CU_EQ(ck_restore(t.pid, pairs, 2), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_FAILED);
	CHECK_CU_EQ(ck_restore(t.pid, NULL, 0), CUDA_ERROR_ILLEGAL_STATE);
	CHECK_CU_EQ(cuCheckpointProcessUnlock(t.pid, NULL), CUDA_ERROR_ILLEGAL_STATE);
	target_stop(&t);
}

static void not_a_cuda_process(void)
{
	struct target t;
	const char *opts[] = {"--no-context", NULL};
	if (target_start(&t, "f", opts, NULL) < 0)
		return;
	int tid;
	CHECK_EQ(ck_state(t.pid), -CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU_EQ(ck_lock(t.pid, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU_EQ(cuCheckpointProcessGetRestoreThreadId(t.pid, &tid), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_EQ(ck_state(0), -CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(ck_state(-5), -CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(ck_state(4194305), -CUDA_ERROR_INVALID_VALUE); /* beyond pid_max */
	CHECK_CU_EQ(cuCheckpointProcessGetState(getpid(), NULL), CUDA_ERROR_INVALID_VALUE);
	target_stop(&t);
	/* A thread id is not a process. */
	struct target u;
	if (target_start(&u, "g", NULL, NULL) < 0)
		return;
	CHECK_CU(cuCheckpointProcessGetRestoreThreadId(u.pid, &tid));
	CHECK_EQ(ck_state(tid), -CUDA_ERROR_INVALID_VALUE);
	CUcheckpointLockArgs bad;
	memset(&bad, 0, sizeof(bad));
	bad.reserved0 = 1;
	CHECK_CU_EQ(cuCheckpointProcessLock(u.pid, &bad), CUDA_ERROR_INVALID_VALUE);
	target_stop(&u);
}

/* r580 (seen on an H200): a process holding an import is checkpointed, and
 * its restore refused with CUDA_ERROR_NOT_SUPPORTED before anything changes
 * (still CHECKPOINTED, asked again the same); its creator restores. */
static void import_restore_refused(void)
{
	struct target a, b;
	const char *serve[] = {"--serve", "--dev", "0", NULL};
	const char *import[] = {"--import", "h", "--dev", "1", NULL};
	if (target_start(&a, "h", serve, NULL) < 0 || target_start(&b, "i", import, NULL) < 0)
		return;
	TARGET_EXPECT(&b, "check 1", "PASS"); /* the importer sees the creator's bytes */
	TARGET_EXPECT(&b, "fill 4", "OK");
	TARGET_EXPECT(&a, "check 4", "PASS"); /* and the creator the importer's */
	ck_suspend(&a);
	ck_suspend(&b);
	ck_resume(&a);
	for (int i = 0; i < 2; i++) {
		CHECK_CU_EQ(ck_restore(b.pid, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
		CHECK_EQ(ck_state(b.pid), CU_PROCESS_STATE_CHECKPOINTED);
	}
	TARGET_EXPECT(&a, "check 4", "PASS");
	target_stop(&b);
	target_stop(&a);
}

static void reexport_by_profile(void)
{
	struct target a, b;
	char *r615[] = {"CUEMU_PROFILE=r615", NULL};
	char *r580[] = {"CUEMU_PROFILE=r580", NULL};
	if (target_start(&a, "j", NULL, r615) < 0 || target_start(&b, "k", NULL, r580) < 0)
		return;
	TARGET_EXPECT(&a, "export", "CUDA_SUCCESS");
	TARGET_EXPECT(&b, "export", "CUDA_SUCCESS");
	ck_suspend(&a);
	ck_suspend(&b);
	ck_resume(&a);
	ck_resume(&b);
	TARGET_EXPECT(&a, "export", "CUDA_ERROR_INVALID_VALUE"); /* r615 */
	TARGET_EXPECT(&b, "export", "CUDA_SUCCESS");             /* r580 */
	TARGET_EXPECT(&a, "check 1", "PASS");
	target_stop(&a);
	target_stop(&b);
}

static void multicast_blocks_checkpoint(void)
{
	struct target t;
	const char *opts[] = {"--multicast", NULL};
	if (target_start(&t, "l", opts, NULL) < 0)
		return;
	CHECK_CU(ck_lock(t.pid, 0));
	CHECK_CU_EQ(cuCheckpointProcessCheckpoint(t.pid, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_LOCKED);
	CHECK_CU(cuCheckpointProcessUnlock(t.pid, NULL));
	TARGET_EXPECT(&t, "check 1", "PASS");
	target_stop(&t);
}

/* As NVIDIA's cuda-checkpoint utility and the agent's native helper call it:
 * the checkpoint API from a process that never called cuInit (runs first). */
static void without_cuinit(void)
{
	int version = 0;
	CHECK_CU(cuDriverGetVersion(&version));
	CHECK(version >= 12080);
	struct target t;
	if (target_start(&t, "noinit", NULL, NULL) < 0)
		return;
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	ck_suspend(&t);
	ck_resume(&t);
	TARGET_EXPECT(&t, "check 1", "PASS");
	target_stop(&t);
	int n = -1;
	CHECK_CU_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED); /* the rest of the API still needs it */
}

/* How many checkpoint sockets directory dir holds. */
static int sockets_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)))
		n += strncmp(e->d_name, "cuemu-ckpt-", 11) == 0;
	if (d)
		closedir(d);
	return n;
}

/* A CUDA process killed (its exit handler never ran) leaves its checkpoint
 * socket; the next CUDA process to start removes it, and its own goes at its
 * exit: nothing piles up in the run directory. */
static void stale_sockets_swept(void)
{
	char run[4200], env_run[4300];
	snprintf(run, sizeof(run), "%s/run", target_dir);
	CHECK_EQ(mkdir(run, 0700), 0);
	snprintf(env_run, sizeof(env_run), "CUEMU_RUN_DIR=%s", run);
	char *env[] = {env_run, NULL};
	struct target a, b;
	if (target_start(&a, "killed", NULL, env) < 0)
		return;
	kill(a.pid, SIGKILL);
	waitpid(a.child, NULL, 0);
	a.child = 0;
	CHECK_EQ(sockets_in(run), 1);
	if (target_start(&b, "next", NULL, env) < 0)
		return;
	CHECK_EQ(sockets_in(run), 1); /* its own only */
	target_stop(&b);
	CHECK_EQ(sockets_in(run), 0);
}

/* A process that listens at path and hangs up on whoever connects, until killed. */
static pid_t impostor_at(const char *path)
{
	int fd = usock_listen(path, 16);
	if (fd < 0) {
		CHECK(!"impostor: usock_listen");
		return -1;
	}
	pid_t p = fork();
	if (p == 0) {
		for (int c;;)
			if ((c = accept(fd, NULL, NULL)) >= 0)
				close(c);
	}
	close(fd);
	return p;
}

/* The endpoint is looked for where the target's server binds it (its run
 * directory as /proc/PID/environ shows it), and taken only when the socket
 * listening there is the target's own: one bound there by another process is
 * passed over, and the target's real one, bound elsewhere (CUEMU_RUN_DIR set
 * after exec), found among its descriptors. */
static void endpoint_is_the_targets(void)
{
	char run[4200], elsewhere[4200], env_run[4300];
	snprintf(run, sizeof(run), "%s/conv", target_dir);
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", target_dir);
	CHECK_EQ(mkdir(run, 0700), 0);
	CHECK_EQ(mkdir(elsewhere, 0700), 0);
	snprintf(env_run, sizeof(env_run), "CUEMU_RUN_DIR=%s", run);
	char *env[] = {env_run, NULL};
	const char *opts[] = {"--run-dir", elsewhere, NULL};
	struct target t;
	if (target_start(&t, "moved", opts, env) < 0)
		return;
	CHECK_EQ(sockets_in(run), 0);
	CHECK_EQ(sockets_in(elsewhere), 1);
	struct stat ns;
	CHECK_EQ(stat("/proc/self/ns/pid", &ns), 0);
	char conventional[4400];
	snprintf(conventional, sizeof(conventional), "%s/cuemu-ckpt-%lu-%d.sock", run, (unsigned long)ns.st_ino,
		 t.nspid);
	pid_t imp = impostor_at(conventional);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	ck_suspend(&t);
	ck_resume(&t);
	TARGET_EXPECT(&t, "check 1", "PASS");
	if (imp > 0) {
		kill(imp, SIGKILL);
		waitpid(imp, NULL, 0);
	}
	unlink(conventional);
	target_stop(&t);
}

int main(void)
{
	target_dir_make("ckpt");
	test_run("the checkpoint API from a process that never called cuInit", without_cuinit);
	/* The driver side: no context here, just the checkpoint API. */
	CHECK_CU(cuInit(0));
	test_run("RUNNING -> LOCKED -> CHECKPOINTED -> LOCKED -> RUNNING; illegal transitions", transitions);
	test_run("a lock holds back the target's CUDA calls", lock_blocks_calls);
	test_run("lock timeout leaves the target RUNNING", lock_timeout);
	test_run("gpuPairs restore onto another device; missing pair refused", gpu_pairs);
	test_run("a failed restore leaves the process unrestorable", failed_restore_is_final);
	test_run("not a CUDA process, not a process, bad arguments", not_a_cuda_process);
	test_run("a process holding an import: checkpointed, its restore refused", import_restore_refused);
	test_run("r615: no re-export after native restore; r580: re-export works", reexport_by_profile);
	test_run("a live multicast object makes the checkpoint fail", multicast_blocks_checkpoint);
	test_run("a killed CUDA process's checkpoint socket is swept by the next", stale_sockets_swept);
	test_run("the endpoint where the server binds it, only when it is the target's own", endpoint_is_the_targets);
	target_dir_remove();
	return test_done();
}
