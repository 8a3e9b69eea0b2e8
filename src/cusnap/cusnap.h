/* SPDX-License-Identifier: MIT */
/* cusnap internals: the process tree and the native checkpoint API. */
#ifndef CUSNAP_CUSNAP_CUSNAP_H
#define CUSNAP_CUSNAP_CUSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cuda.h>

#include "cusnap/exitcodes.h"

/* ---- proctree.c ---- */
struct proc {
	pid_t pid;   /* as seen here */
	pid_t nspid; /* in its innermost PID namespace */
	bool cuda;   /* holds a CUDA context (the native API answers for it) */
	bool shim;   /* its endpoint exists */
	bool marked; /* its environment carries the launcher's INTERPOSE_MARKER */
	int state;   /* CUprocessState, or -1 */
};

/* PID and all its descendants, root first. Returns the count or -errno. */
ssize_t proc_tree(pid_t root, struct proc **out);
/* The innermost-namespace PID of pid (the last NSpid field), or -1. */
pid_t proc_nspid(pid_t pid);
/* The process (thread group) of a thread id, or -1. */
pid_t proc_tgid(pid_t pid);
/* Is pid this process or one of its ancestors? */
bool proc_is_self_or_ancestor(pid_t pid);
/* Kill the tree of root, leaves first, and wait (at most 10 s) until none of
 * its processes exists any more; reap: reap our children meanwhile (cusnap is
 * the subreaper of the trees it restores, so that an immediate restore finds
 * their PIDs free). */
void proc_tree_kill(pid_t root, bool reap);
/* Kill (and reap) the trees of every child of this process: what a CRIU
 * restore killed part way had made (they come to cusnap, its subreaper). */
void proc_children_kill(void);
/* The state letter of pid (/proc/PID/stat: 'R', 'S', 'Z'...) and its parent
 * into *parent (when not NULL), or 0 when there is no such process. */
char proc_state(pid_t pid, pid_t *parent);
/* The same, and the kernel's flags of the process (PF_*) into *flags. */
char proc_stat(pid_t pid, pid_t *parent, unsigned long *flags);

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

/* Load libcuda.so.1 (no cuInit: the checkpoint API needs none). Returns 0, or
 * -1 with err naming the fix. */
int native_load(struct native *n, char *err, size_t errlen);
/* cuInit, for the device queries (GPU UUIDs): whether they can be made. */
bool native_devices(const struct native *n);
const char *native_error(const struct native *n, CUresult r);
/* Mark which processes hold a CUDA context, and their state, under the query
 * watchdog (native_run.c): 0, -ETIMEDOUT (*stuck: the index of a process that
 * did not answer) or -ENOMEM. */
int native_classify(const struct native *n, struct proc *p, size_t count, size_t *stuck);

/* ---- util.c: what every command shares ---- */
#include <stdio.h>

#include "cusnap/coord.h"
#include "cusnap/paths.h"
#include "cusnap/rundir.h"

/* What every command shares, set from the command line (main.c) before the
 * command runs, and read by the layers under it. */
struct settings {
	bool json;               /* --json: the summary, or the error, as JSON on stdout */
	bool require_interposer; /* --require-interposer */
	int timeout_ms;          /* --timeout: per participant and step, and per native state query */
	const char *control_dir; /* --control-dir, $SNAPSHOT_CONTROL_DIR or /snapshot-control */
	const char *job_file;    /* --job-file: the checkpoint job (NULL: the workload's environment says) */
};
extern struct settings settings;

/* One progress line on stderr: step, duration, details. */
void progress(const char *step, double ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* progress() for the coordinator's stages (coord_options.on_stage). */
void progress_stage(const char *stage, double ms, const char *note);
/* Print the error (stderr, and a JSON object on stdout with --json); returns code. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- job.c: checkpoint jobs (driver 590 and later; SYSTEM.md §9) ---- */
struct job {
	char path[4200]; /* the job file as cusnap opens it; "" when the tree is in no job */
	pid_t owner;     /* the process whose environment named it (0: --job-file) */
	long uid;        /* --job-file: the workload's user, who may own it besides the caller */
};
/* The copy of the job file in a checkpoint or state directory. */
#define JOB_COPY "cuda-checkpoint-job"
/* The job of the processes procs[0..n): given (--job-file), else the file
 * CUDA_CHECKPOINT_JOB_FILE names in the environment of the first that carries
 * it (none: j->path ""). cusnap joins it (its own environment) for its driver
 * calls. 0, or -1 with why (a job named that is not the workload's regular file). */
int job_find(struct job *j, const struct proc *procs, size_t n, const char *given, char *why, size_t len);
/* Once every process is CHECKPOINTED: the job file copied into dir/JOB_COPY. */
int job_save(const struct job *j, const char *dir, char *why, size_t len);
/* Before the native restore: dir/JOB_COPY (when there) written back into the job file. */
int job_put_back(const struct job *j, const char *dir, char *why, size_t len);
/* A freeze begins: an old copy in dir goes (it must never be written back). */
void job_forget(const char *dir);
/* cusnap run --launch-job: a new job file for the program about to be
 * executed, named in this process's environment. 0, or -1 with why. */
int job_launch(char *why, size_t len);

struct tree {
	struct native nat;
	struct job job;        /* its checkpoint job, if any */
	char job_error[1024];  /* tree_view: why its job file is unacceptable ("" when it is not) */
	struct tree_lock lock; /* held from tree_hold to tree_free */
	struct proc *procs;
	size_t nprocs;
	struct coord_target *targets; /* the CUDA processes, as coordinator participants */
	size_t ncuda, nshim;
	size_t *cuda_index; /* targets[i] is procs[cuda_index[i]] */
};

/* Load the driver (exit 69 on failure), the tree of pid, its CUDA processes and
 * which of them run under the interposer. Returns 0 or an exit code (reported). */
int tree_load(pid_t pid, struct tree *t);
/* The same for a command that only looks (inspect): an unacceptable job file
 * is noted in t->job_error instead of refused. */
int tree_view(pid_t pid, struct tree *t);
/* One command per tree: take the lock of every process of t for command what
 * (SYSTEM.md §9). 0, or an exit code (reported; EX_BUSY when another command
 * holds it) with nothing changed. tree_free releases it. */
int tree_hold(struct tree *t, const char *what);
/* Who holds the tree (a command working on it): true, and who into out. */
bool tree_held(const struct tree *t, char *out, size_t len);
void tree_free(struct tree *t);
/* CUDA processes without the interposer: refused with --require-interposer
 * (exit 1, reported), else a warning that what they share comes back as
 * private copies. 0 or the exit code. */
int check_interposer(const struct tree *t);
/* Partial interposition: refused (exit 1, reported). */
int check_interposition(const struct tree *t);
/* Every CUDA process running, and the interposition complete or absent:
 * 0, or an exit code (reported) before anything changed. */
int check_freezable(const struct tree *t);
/* A tree holding cusnap, its ancestors or PID 1 of this namespace: refused
 * (exit 64, reported); else 0. check_freezable runs it too. */
int check_guard_rails(const struct tree *t);
/* The same for the tree of pid, before anything else is looked up (no driver,
 * no CRIU needed to refuse); a pid that does not exist is refused too (64). */
int check_pid_guard(pid_t pid);
/* ---- control_files.c: the workload's control directory, safely ---- */
/* The control directory (settings.control_dir) inside process pid's root, resolved
 * within that root: a descriptor, or -errno with why. */
int control_dir_open(pid_t pid, char *why, size_t len);
/* A control directory given as a path here (no symlink on the way): a
 * descriptor, or -errno with why. */
int control_dir_open_here(const char *path, char *why, size_t len);
/* Does control file name of pid exist (never through a symlink)? */
bool control_exists(pid_t pid, const char *name);
/* Create (or replace) the empty control file name of pid, never through a
 * symlink: 0, or -1 with why. */
int control_write(pid_t pid, const char *name, char *why, size_t len);
/* The path here of pid's control directory (settings.control_dir when it cannot be
 * told), for the manifest. */
void control_host_path(pid_t pid, char *out, size_t len);
/* Remove endpoint socket name of directory dfd if nothing listens on it: 1
 * removed, 0 none there, -EBUSY one that answers, -EEXIST not a socket, or
 * another -errno. */
int control_endpoint_stale(int dfd, const char *name);
/* ---- native_run.c: the native steps, concurrent and watched ---- */
enum native_step { NATIVE_QUERY, NATIVE_LOCK, NATIVE_CHECKPOINT, NATIVE_RESTORE, NATIVE_UNLOCK };
const char *native_step_name(enum native_step s);
/* How long one native call may take before it is reported stuck, ms
 * (CUSNAP_NATIVE_TIMEOUT_MS, default 300000; a lock: at least --timeout + 5 s;
 * a state query: --timeout). */
int native_watchdog_ms(enum native_step s);
/* Run step on every CUDA process i of t with want[i] (NULL: all) concurrently;
 * results[i] gets each call's result (CUDA_SUCCESS for those not run). Returns
 * 0, -ETIMEDOUT when a call did not return within the watchdog (*stuck: its
 * index; its result reads CUDA_ERROR_TIMEOUT), or -ENOMEM. */
int native_run(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
	       unsigned npairs, CUresult *results, size_t *stuck);

/* The state of every CUDA process of t, read again (into t->procs[].state)
 * under the query watchdog: 0, or -1 with err naming a process that did not
 * answer. */
int tree_states(struct tree *t, char *err, size_t errlen);

/* ---- devmap.c: which GPU each GPU of a checkpoint is restored onto ---- */
struct devmap {
	CUcheckpointGpuPair pairs[PROTO_MAX_DEVICES]; /* for the native restore */
	unsigned npairs;                              /* 0: every GPU as it was */
	int ordinals[PROTO_MAX_DEVICES];              /* the checkpoint's device d is ordinals[d] here (the shims) */
	size_t nordinals;
};
/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void devmap_uuid_text(const CUuuid *u, char out[48]);
/* The driver's GPUs as a JSON array of such texts (a checkpoint's GPU list). */
json_t *devmap_gpus_json(const struct native *n);
/* spec ("auto", or OLD=NEW pairs of ordinals or UUIDs; NULL or "": none) for a
 * checkpoint made on the GPUs had, restored onto here: 0, or -1 with why. */
int devmap_parse(const char *spec, const CUuuid *had, size_t nhad, const CUuuid *here, size_t nhere, struct devmap *m,
		 char *why, size_t len);
/* spec against a checkpoint's GPU list (gpus, as devmap_gpus_json wrote it)
 * and this machine's GPUs (the driver loaded to ask): 0, -EINVAL (the map or
 * the list, why says), -ENODEV (no driver, why says). */
int devmap_for(const char *spec, const json_t *gpus, struct devmap *m, char *why, size_t len);

/* ---- finish.c: how far a command got, and the one way it ends ---- */
struct record {
	pid_t root;
	const char *dir; /* the state directory */
	bool changed;    /* prepare or a native step began: there may be something to undo */
	bool stuck;      /* a native call did not return: nothing can be undone until it does */
};
/* The command failed (fmt says what): undo what rec records (tree_recover),
 * check every process, and report. Exit 1 only when every CUDA process is
 * running and every participant active (or gone, not by us); else 2, with the
 * state named and the repair command. */
int finish(struct tree *t, const struct record *rec, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every live CUDA process running and every live participant active: 0, or -1
 * with the first that is not in why. *gone: processes that no longer exist. */
int tree_verify(struct tree *t, char *why, size_t len, size_t *gone);
/* Bring the tree back from whatever state a command left it in: thaw what is
 * LOCKED or CHECKPOINTED, then rebuild the shims (from the state file in dir
 * when there is one and not discard, else in place from each process's own
 * records). map (NULL: none): the GPUs a checkpoint is restored onto.
 * *nothing: it was running already. 0, or -1 with err. */
int tree_recover(struct tree *t, const char *dir, bool discard, const struct devmap *map, struct coord_report *r,
		 bool *nothing, char *err, size_t errlen);
/* SIGINT, SIGTERM and SIGHUP are caught from here on (the command stops at its
 * next phase boundary). */
void signals_arm(void);
/* The signal caught since signals_arm, or 0. */
int signal_caught(void);
/* At a phase boundary: when a signal was caught, finish (exit 1 or 2,
 * reported); else 0. */
int interrupted(struct tree *t, const struct record *rec, const char *after);
/* The private default state directory of the tree of pid. */
void state_dir_default(pid_t pid, char *out, size_t len);
/* The state directory of the tree of pid: given, or the one the last command
 * on it recorded, or the private default (derived from pid). */
void state_dir_of(pid_t pid, const char *given, char *out, size_t len);
/* A command on the tree of pid starts with dir as its state directory: any
 * old state file there is removed and dir recorded for state_dir_of. 0 or -errno. */
int state_dir_begin(pid_t pid, const char *dir);
/* The tree of pid has no state directory to find any more: the note goes, and
 * the default directory (its state file too when dir is it) when empty. */
void state_dir_end(pid_t pid, const char *dir);
/* A directory cusnap writes into or restores from as root (--dir, the state
 * directory): made 0700 (with its parents) when create and missing, then it
 * must follow ssh's StrictModes (owned by the caller or root, not writable by
 * group or others). With held, it is also locked for this command (another
 * command holding it: 75) and *held is the descriptor to close when done. 0,
 * or an exit code (reported: 64 for an untrusted one). */
int use_dir(const char *dir, bool create, int *held);

/* ---- freeze.c ---- */
/* suspend's steps, shared with checkpoint: record dir, prepare (when
 * interposed), lock, checkpoint; a failure or a signal finishes. 0 or the exit
 * code (reported). */
int tree_suspend(struct tree *t, struct record *rec, int content, struct coord_report *r);
/* Its first part (the CRIU plugin's at PAUSE_DEVICES): record dir, prepare
 * when interposed. 0 or the exit code (reported; a failed prepare undone). */
int tree_prepare(struct tree *t, struct record *rec, int content, struct coord_report *r);
/* Lock then checkpoint every CUDA process (native_lock, native_checkpoint:
 * the job file copied once all are CHECKPOINTED). 0, or -1 with what failed in
 * err (nothing undone: the caller finishes). */
int native_freeze(struct tree *t, struct record *rec, char *err, size_t errlen);
int native_lock(struct tree *t, struct record *rec, char *err, size_t errlen);
int native_checkpoint(struct tree *t, struct record *rec, char *err, size_t errlen);
/* Native restore (with device pairs) then unlock of every CUDA process that is
 * checkpointed or locked. Returns 0, or -1 with err (a stuck call named there). */
int native_thaw(struct tree *t, const char *dir, const CUcheckpointGpuPair *pairs, unsigned npairs, char *err,
		size_t errlen);
const char *state_name(int s);

/* ---- criu.c ---- */
/* The criu to run: --criu, $CRIU, PATH, or the project's provisioned one.
 * Returns 0, or -1 with err naming the fix (exit 69). */
int criu_find(const char *arg, char *out, size_t len, char *err, size_t errlen);
/* Its version string ("4.1.1"), or "". */
void criu_version(const char *criu, char *out, size_t len);
/* What bounds a CRIU run. */
struct criu_bounds {
	bool own_group;      /* in a process group of its own (terminal signals reach cusnap only) */
	bool stop_on_signal; /* a signal caught (signals_arm) kills CRIU at once */
	long long time_ms;   /* killed past this (CUSNAP_CRIU_TIMEOUT_MS; default 10 x --timeout, >= 120 s) */
	long long log_max;   /* killed when its log grows past this (CUSNAP_CRIU_LOG_MAX; default 1 GiB) */
};
struct criu_bounds criu_bounds_default(bool own_group, bool stop_on_signal);
/* Run criu with argv (argv[0] is ignored and replaced by criu), its log at
 * log_path, within bounds b. Returns its exit status; -ETIMEDOUT, -EFBIG or
 * -EINTR when it was killed at a bound or on a signal (said on stderr); -1
 * when it could not run. On failure the last error lines of the log's tail
 * are printed. */
int criu_run(const char *criu, char *const argv[], const char *log_path, const struct criu_bounds *b);
/* DIR/criu-plugins, made (empty) if absent: CRIU runs with it as --libdir so
 * that its CUDA plugin never loads (cusnap does the native steps). 0 or -1 (errno). */
int criu_plugin_dir(const char *dir, char *out, size_t len);

/* ---- commands: one file each (main.c parses the command line into struct args) ---- */
struct checkpoint_result {
	double ms_prepare, ms_lock, ms_checkpoint, ms_dump, ms_restore_in_place;
	double ms_criu_restore, ms_native_restore, ms_vmm_restore, ms_total;
	unsigned long long bytes_copied, image_bytes;
	size_t processes, cuda, shared;
	pid_t restored_root;
};
/* A command's own arguments, parsed; what a command does not take stays zero. */
struct args {
	pid_t pid;                        /* --pid */
	const char *dir;                  /* --dir */
	int content;                      /* --content: enum proto_content */
	const char *criu;                 /* --criu */
	const char *device_map;           /* --device-map */
	bool leave_running, wait_ready;   /* --leave-running, --wait-ready */
	bool discard_state;               /* --discard-state */
	bool launch_job;                  /* run: --launch-job */
	bool tcp_established;             /* checkpoint: --tcp-established (CRIU dumps live TCP connections) */
	const char *criu_config;          /* checkpoint, restore: --criu-config (more CRIU options, CRIU's --config) */
	int processes;                    /* demo: --processes */
	unsigned long long size;          /* demo: --size */
	bool in_place;                    /* demo: --in-place */
	const char *keep;                 /* demo: --keep */
	int argc;                         /* run: PROGRAM [ARG...] */
	char **argv;                      /* */
	struct checkpoint_result *result; /* checkpoint, restore: the figures for a caller (the
						  demo) instead of the summary; NULL: printed */
};
int cmd_suspend(const struct args *a); /* suspend.c */
int cmd_resume(const struct args *a);  /* suspend.c */
int cmd_inspect(const struct args *a); /* inspect.c */
int cmd_run(const struct args *a);     /* run.c */
int cmd_checkpoint(const struct args *a);
int cmd_restore(const struct args *a);
int cmd_demo(const struct args *a);
/* The tree of pid (0: none given, a usage error), loaded and held for command
 * what: the guard rails first (before the tree's processes are even asked
 * anything). 0, or an exit code (reported) with t freed. */
int tree_take(pid_t pid, const char *what, struct tree *t);
/* ---- images.c: the CRIU images' digests ---- */
/* Every image file of directory images (CRIU's logs excepted) as
 * {"NAME": {"size": BYTES, "crc32c": "HEX"}} (new reference), or NULL with err. */
json_t *images_digest(const char *images, char *err, size_t errlen);
/* Does every file of files (images_digest's form) have its recorded size and
 * CRC32C? 0, or -1 with why naming the first that does not. */
int images_verify(const char *images, const json_t *files, char *why, size_t len);
/* ---- manifest_write.c ---- */
/* DIR/manifest.json, atomically (include/cusnap/manifest.h reads it). 0 or -errno. */
/* images: the image digests (images_digest; NULL before the dump). */
int manifest_write(const char *dir, const struct tree *t, pid_t root, int content, bool prepared, bool leave_running,
		   const char *criu, char *const dump_argv[], const struct checkpoint_result *r, const json_t *images);

#endif
