/* SPDX-License-Identifier: MIT */
/* The node library's own declarations, beside its public node.h: the native
 * steps run concurrently and watched (native_run.c), the job file's moves, and
 * what the tree's loading and recovery share. */
#ifndef CUSNAP_NODE_INTERNAL_H
#define CUSNAP_NODE_INTERNAL_H

#include "node.h"

/* ---- proctree.c ---- */
/* The process (thread group) of a thread id, or -1. */
pid_t proc_tgid(pid_t pid);
/* Is pid this process or one of its ancestors? */
bool proc_is_self_or_ancestor(pid_t pid);

/* ---- native.c ---- */
/* cuInit, for the device queries (GPU UUIDs): whether they can be made. */
bool native_devices(const struct native *n);

/* ---- native_run.c: the native steps, concurrent and watched ---- */
enum native_step { NATIVE_QUERY, NATIVE_LOCK, NATIVE_CHECKPOINT, NATIVE_RESTORE, NATIVE_UNLOCK };
const char *native_step_name(enum native_step s);
/* How long one native call may take before it is reported stuck, ms
 * (native_timeout_ms, default 300000; a lock: at least timeout_ms + 5 s;
 * a state query: timeout_ms). */
int native_watchdog_ms(const struct settings *set, enum native_step s);
/* Run step on every CUDA process i of t with want[i] (NULL: all) concurrently;
 * results[i] gets each call's result (CUDA_SUCCESS for those not run). Returns
 * 0, -ETIMEDOUT when a call did not return within the watchdog (*stuck: its
 * index; its result reads CUDA_ERROR_TIMEOUT), or -ENOMEM. */
int native_run(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
	       unsigned npairs, CUresult *results, size_t *stuck);
/* Mark which processes hold a CUDA context, and their state, under the query
 * watchdog: 0, -ETIMEDOUT (*stuck: the index of a process that did not
 * answer) or -ENOMEM. */
int native_classify(const struct native *n, struct proc *p, size_t count, const struct settings *set, size_t *stuck);
/* The state of every CUDA process of t, read again (into t->procs[].state)
 * under the query watchdog: 0, or -1 with err naming a process that did not
 * answer. */
int tree_states(struct tree *t, char *err, size_t errlen);

/* ---- native_steps.c ---- */
/* Native restore (with device pairs) then unlock of every CUDA process that is
 * checkpointed or locked. Returns 0, or -1 with err (a stuck call named there). */
int native_thaw(struct tree *t, int dirfd, const char *dir, const CUcheckpointGpuPair *pairs, unsigned npairs,
		char *err, size_t errlen);

/* ---- job.c ---- */
/* The job of the processes procs[0..n): given (--job-file), else the file
 * CUDA_CHECKPOINT_JOB_FILE names in the environment of the first that carries
 * it (none: j->path ""). cusnap joins it (its own environment) for its driver
 * calls. 0, or -1 with why (a job named that is not the workload's regular file). */
int job_find(struct job *j, const struct proc *procs, size_t n, const char *given, char *why, size_t len);
/* Once every process is CHECKPOINTED: the job file copied into dir/JOB_COPY
 * (through dirfd when it is dir open, > 0). */
int job_save(const struct job *j, int dirfd, const char *dir, char *why, size_t len);
/* Before the native restore: dir/JOB_COPY (through dirfd when > 0; when
 * there) written back into the job file. */
int job_put_back(const struct job *j, int dirfd, const char *dir, char *why, size_t len);
/* A freeze begins: an old copy in dir (dirfd when > 0) goes (it must never be written back). */
void job_forget(int dirfd, const char *dir);

/* ---- devmap.c ---- */
/* A GPU as the driver lists it (model "" and memory 0 when it does not say). */
struct gpu_here {
	CUuuid uuid;
	char model[128];
	size_t memory;
};
/* The driver's GPUs, by ordinal, into g (at most max): how many, or -1 when
 * it cannot be asked (cuInit failed). */
int native_gpus(const struct native *n, struct gpu_here *g, int max);

/* ---- the rest ---- */
/* progress() for the coordinator's stages (coord_options.on_stage). */
void progress_stage(const char *stage, double ms, const char *note);
/* A warning line (coord_options.on_warning). */
void progress_warning(const char *what);
/* A tree holding cusnap, its ancestors or PID 1 of this namespace: refused
 * (exit 64, reported); else 0. check_freezable runs it too. */
int check_guard_rails(const struct tree *t);
/* A command on the tree of pid starts with dir as its state directory: any
 * old state file there is removed and dir recorded for state_dir_of. 0 or -errno. */
int state_dir_begin(pid_t pid, const char *dir);
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void devmap_uuid_text(const CUuuid *u, char out[48]);

/* The anonymous resident memory of the tree's CUDA processes (native_steps.c):
 * what the driver's checkpoint moves out of the GPU lands there, and leaves it
 * at the native restore (on cuemu too: its device memory is shared memory). */
uint64_t cuda_resident(const struct tree *t);

#endif
