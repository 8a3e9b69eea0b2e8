/* SPDX-License-Identifier: MIT */
/* The native freeze (lock, then checkpoint) and thaw (restore, then unlock) of
 * the CUDA processes of a tree, each step concurrent (native_run). A failed
 * freeze is undone by the caller's finish (finish.c), never here.
 *
 * The order: unlocks complete children before parents. In a checkpoint job
 * (job.c) every step goes one process at a time in that same order, so that
 * restores and unlocks follow the checkpoints' order, as a job requires. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/fault.h"
#include "internal.h"

/* Why the native call on target i failed: the driver's error, or that the
 * process is gone (the driver answers a process that no longer exists with an
 * error that would mislead: CUDA_ERROR_NOT_INITIALIZED, say). */
static const char *failure_of(const struct tree *t, size_t i, CUresult r)
{
	return proc_gone(t->targets[i].obs) ? "the process is gone (it exited, or was killed)"
					    : native_error(&t->nat, r);
}

/* Step over the processes i with want[i], one at a time, from the end of the
 * tree's list (root first, every child after its parent) back to the root:
 * children before their parents. rc[i] for each wanted i; 0, -ETIMEDOUT
 * (*stuck) or -ENOMEM. */
static int one_by_one(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
		      unsigned npairs, CUresult *rc, size_t *stuck)
{
	size_t n = t->ncuda;
	bool *one = calloc(n + 1, sizeof(*one));
	CUresult *got = calloc(n + 1, sizeof(*got));
	int ret = one && got ? 0 : -ENOMEM;
	for (size_t i = 0; i < n; i++) /* what is not reached reads as not done */
		rc[i] = !want || want[i] ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	for (size_t i = n; ret == 0 && i-- > 0;) {
		if (want && !want[i])
			continue;
		one[i] = true;
		ret = native_run(t, step, one, pairs, npairs, got, stuck);
		one[i] = false;
		rc[i] = got[i];
		if (t->job.path[0] && rc[i] != CUDA_SUCCESS)
			break; /* a job's order is broken: no one after it */
	}
	free(one);
	free(got);
	return ret;
}

/* A step over the processes with want[i] (NULL: all): concurrently, or in a
 * job one by one (an unlock always). */
static int ordered_run(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
		       unsigned npairs, CUresult *rc, size_t *stuck)
{
	if (t->job.path[0] || step == NATIVE_UNLOCK)
		return one_by_one(t, step, want, pairs, npairs, rc, stuck);
	return native_run(t, step, want, pairs, npairs, rc, stuck);
}

/* One step of a freeze over every CUDA process. Returns 0, or -1 with what
 * failed in err (rec->stuck set when a call did not return). */
static int freeze_step(struct tree *t, enum native_step step, struct record *rec, char *err, size_t errlen)
{
	size_t n = t->ncuda, stuck = 0;
	CUresult *rc = calloc(n + 1, sizeof(*rc));
	if (!rc) {
		snprintf(err, errlen, "%s: out of memory", native_step_name(step));
		return -1;
	}
	int run = ordered_run(t, step, NULL, NULL, 0, rc, &stuck);
	int ret = 0;
	if (run == -ETIMEDOUT) {
		rec->stuck = true;
		snprintf(err, errlen, "process %d: %s did not return within %d ms (it cannot be cancelled)",
			 t->targets[stuck].obs, native_step_name(step), native_watchdog_ms(t->s, step));
		ret = -1;
	} else if (run < 0) {
		snprintf(err, errlen, "%s: out of memory", native_step_name(step));
		ret = -1;
	}
	/* From the end: in a job the process whose step failed is the last reached. */
	for (size_t i = n; !ret && i-- > 0;) {
		if (rc[i] == CUDA_SUCCESS)
			continue;
		/* What r580 drivers are known not to checkpoint, named (the driver does not say). */
		const char *hint = step == NATIVE_CHECKPOINT && rc[i] == CUDA_ERROR_NOT_SUPPORTED
					   ? (t->job.path[0]
						      ? " (in a checkpoint job: see the driver's log for the "
							"job's rule it refused)"
						      : " (the driver cannot checkpoint a process holding legacy "
							"CUDA IPC mappings (cuIpcOpenMemHandle) or multicast "
							"objects: run the workload under the interposer, which "
							"rebuilds them, or from driver 610 in a checkpoint job: "
							"cusnap run --launch-job)")
					   : "";
		snprintf(err, errlen, "%s of process %d failed: %s%s",
			 step == NATIVE_LOCK ? "lock" : "native checkpoint", t->targets[i].obs, failure_of(t, i, rc[i]),
			 hint);
		ret = -1;
	}
	free(rc);
	return ret;
}

int native_lock(struct tree *t, struct record *rec, char *err, size_t errlen)
{
	job_forget(rec->dirfd, rec->dir);
	rec->changed = true;
	double t0 = now_ms();
	if (freeze_step(t, NATIVE_LOCK, rec, err, errlen) < 0)
		return -1;
	if (t->ncuda)
		progress("lock", now_ms() - t0, "%zu processes, %s", t->ncuda,
			 t->job.path[0] ? "one at a time (a checkpoint job)" : "concurrently");
	fault_point(FAULT_KILL_AFTER_LOCK);
	return 0;
}

uint64_t cuda_resident(const struct tree *t)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < t->ncuda; i++) {
		long kib = proc_status_field("/proc", t->targets[i].obs, "RssAnon");
		sum += kib > 0 ? (uint64_t)kib << 10 : 0;
	}
	return sum;
}

int native_checkpoint(struct tree *t, struct record *rec, char *err, size_t errlen)
{
	double t0 = now_ms();
	uint64_t before = cuda_resident(t);
	if (freeze_step(t, NATIVE_CHECKPOINT, rec, err, errlen) < 0)
		return -1;
	uint64_t after = cuda_resident(t), moved = after > before ? after - before : 0;
	if (t->ncuda) {
		progress("native checkpoint", now_ms() - t0, "GPU memory released, %.1f MiB of it into the processes",
			 (double)moved / (1 << 20));
		progress_bytes("native checkpoint", moved);
	}
	/* Every process CHECKPOINTED: the job file as the driver left it. */
	if (job_save(&t->job, rec->dirfd, rec->dir, err, errlen) < 0)
		return -1;
	fault_point(FAULT_KILL_AFTER_CHECKPOINT);
	return 0;
}

/* One thaw step over the processes in state from; 0, or -1 with err. */
static int thaw_step(struct tree *t, enum native_step step, CUprocessState from, const CUcheckpointGpuPair *pairs,
		     unsigned npairs, char *err, size_t errlen)
{
	size_t n = t->ncuda, stuck = 0, any = 0;
	bool *want = calloc(n + 1, sizeof(*want));
	CUresult *rc = calloc(n + 1, sizeof(*rc));
	int ret = 0;
	if (!want || !rc) {
		snprintf(err, errlen, "out of memory");
		ret = -1;
		goto out;
	}
	if (tree_states(t, err, errlen) < 0) {
		ret = -1;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		want[i] = t->procs[t->cuda_index[i]].state == (int)from;
		any += want[i];
	}
	if (!any)
		goto out;
	int ran = ordered_run(t, step, want, pairs, npairs, rc, &stuck);
	if (ran == -ETIMEDOUT) {
		snprintf(err, errlen, "process %d: %s did not return within %d ms (it cannot be cancelled)",
			 t->targets[stuck].obs, native_step_name(step), native_watchdog_ms(t->s, step));
		ret = -1;
		goto out;
	}
	/* The state read back after the transition (CRIU's CUDA plugin does the
	 * same): a call that reported an error but left the process where the step
	 * leads (a restore LOCKED, an unlock RUNNING) did its work. */
	bool failed = false;
	for (size_t i = 0; i < n; i++)
		failed |= rc[i] != CUDA_SUCCESS;
	if (failed && tree_states(t, err, errlen) < 0) {
		ret = -1;
		goto out;
	}
	int done = step == NATIVE_RESTORE ? CU_PROCESS_STATE_LOCKED : CU_PROCESS_STATE_RUNNING;
	for (size_t i = 0; i < n; i++) {
		if (rc[i] == CUDA_SUCCESS)
			continue;
		if (t->procs[t->cuda_index[i]].state == done) {
			voice(VOICE_WARN, "%s of process %d returned %s, but the process is %s: taken as done",
			      native_step_name(step), t->targets[i].obs, native_error(&t->nat, rc[i]),
			      state_name(done));
			continue;
		}
		snprintf(err, errlen, "%s of process %d failed: %s",
			 step == NATIVE_RESTORE ? "native restore" : "unlock", t->targets[i].obs,
			 failure_of(t, i, rc[i]));
		ret = -1;
		break;
	}
out:
	free(want);
	free(rc);
	return ret;
}

int native_thaw(struct tree *t, int dirfd, const char *dir, const CUcheckpointGpuPair *pairs, unsigned npairs,
		char *err, size_t errlen)
{
	if (job_put_back(&t->job, dirfd, dir, err, errlen) < 0)
		return -1;
	if (thaw_step(t, NATIVE_RESTORE, CU_PROCESS_STATE_CHECKPOINTED, pairs, npairs, err, errlen) < 0)
		return -1;
	return thaw_step(t, NATIVE_UNLOCK, CU_PROCESS_STATE_LOCKED, NULL, 0, err, errlen);
}
