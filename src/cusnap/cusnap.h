/* cusnap internals: the process tree and the native checkpoint API. */
#ifndef CUSNAP_CUSNAP_CUSNAP_H
#define CUSNAP_CUSNAP_CUSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cuda.h>

#define EX_OK 0
#define EX_LEFT_RUNNING 1 /* failed; the workload runs as before */
#define EX_TERMINATED 2   /* failed; the workload was terminated or its state is unknown */
#define EX_USAGE 64
#define EX_UNAVAILABLE 69 /* a required component is missing */

/* ---- proctree.c ---- */
struct proc {
	pid_t pid;   /* as seen here */
	pid_t nspid; /* in its innermost PID namespace */
	bool cuda;   /* holds a CUDA context (the native API answers for it) */
	bool shim;   /* its endpoint exists */
	int state;   /* CUprocessState, or -1 */
};

/* PID and all its descendants, root first. Returns the count or -errno. */
ssize_t proc_tree(pid_t root, struct proc **out);
/* The innermost-namespace PID of pid (the last NSpid field), or -1. */
pid_t proc_nspid(pid_t pid);

/* ---- native.c: the driver's checkpoint API, loaded with dlopen ---- */
struct native {
	void *lib;
	CUresult (*init)(unsigned);
	CUresult (*get_error_name)(CUresult, const char **);
	CUresult (*restore_tid)(int, int *);
	CUresult (*get_state)(int, CUprocessState *);
	CUresult (*lock)(int, CUcheckpointLockArgs *);
	CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (*restore)(int, CUcheckpointRestoreArgs *);
	CUresult (*unlock)(int, CUcheckpointUnlockArgs *);
	CUresult (*device_count)(int *);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*device_uuid)(CUuuid *, CUdevice);
	CUresult (*device_name)(char *, int, CUdevice);
};

/* Load libcuda.so.1 and cuInit. Returns 0, or -1 with err naming the fix. */
int native_load(struct native *n, char *err, size_t errlen);
const char *native_error(const struct native *n, CUresult r);
/* Mark which processes hold a CUDA context, and their state. */
void native_classify(const struct native *n, struct proc *p, size_t count);

#endif
