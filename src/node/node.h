/* SPDX-License-Identifier: MIT */
/* The node library: a process tree on this node, the driver's checkpoint API
 * run over it, freeze and recovery, checkpoint jobs, control files and CRIU.
 * Linked by the cusnap tool (src/cusnap) and the CRIU plugin (src/criu). */
#ifndef CUSNAP_NODE_NODE_H
#define CUSNAP_NODE_NODE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cuda.h>

#include "cusnap/digests.h"
#include "cusnap/exitcodes.h"
#include "cusnap/layout.h"
#include "cusnap/log.h"
#include "cusnap/proc.h"

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
/* Kill the tree of root, leaves first, and wait (at most 10 s) until none of
 * its processes exists any more; reap: reap our children meanwhile (cusnap is
 * the subreaper of the trees it restores, so that an immediate restore finds
 * their PIDs free). */
void proc_tree_kill(pid_t root, bool reap);
/* Kill (and reap) the trees of every child of this process: what a CRIU
 * restore killed part way had made (they come to cusnap, its subreaper). */
void proc_children_kill(void);
/* A restore needs pid free (CRIU makes each process at its old PID): a zombie
 * holding it (a dumped process its parent has not reaped yet) is waited for,
 * at most wait_ms, said once (information). 0 when free; -1 with why
 * naming the zombie's parent or the live process that holds it. */
int pid_free_wait(pid_t pid, int wait_ms, char *why, size_t len);
#define PID_ZOMBIE_WAIT_MS 10000

/* ---- inet.c: a tree's network sockets (DESIGN.md §9.4) ---- */
struct inet_sock {
	int family, proto;                   /* AF_INET or AF_INET6; IPPROTO_TCP or IPPROTO_UDP */
	int state;                           /* the kernel's TCP state (UDP: 1 connected, 7 not) */
	unsigned char local[16], remote[16]; /* network order; IPv4 in the first 4 bytes */
	unsigned lport, rport;
	unsigned long inode; /* 0: no socket file any more (TIME_WAIT) */
	unsigned uid;
	pid_t pid;           /* the tree's process that holds it */
	bool netns_here;     /* in cusnap's own network namespace (a restore here binds it again) */
	unsigned long netns; /* the inode of its network namespace (0: not known) */
	bool reuseport;      /* a listener or bound UDP socket with SO_REUSEPORT set */
};
/* The TCP and UDP sockets the processes hold, into *out (to free): the count,
 * or -errno. */
ssize_t inet_of_tree(const struct proc *procs, size_t nprocs, struct inet_sock **out);
/* A connected TCP socket: CRIU dumps it only with --tcp-established. */
bool inet_needs_tcp_established(const struct inet_sock *s);
/* "127.0.0.1:4242" or "[::1]:4242": s's local (or remote) endpoint. */
void inet_endpoint_text(const struct inet_sock *s, bool remote, char *out, size_t len);
/* The reverse: 0, or -EINVAL. */
int inet_endpoint_parse(const char *text, int *family, unsigned char addr[16], unsigned *port);
const char *inet_state_name(int proto, int state);
/* Can CRIU of version (its --version text) dump inet sockets on this kernel?
 * false, with why naming the fix, for CRIU before 4.2 on kernels >= 6.16. */
bool criu_dumps_inet(const char *version, char *why, size_t len);
/* The TIME_WAIT entries on this host whose local endpoint collides with a
 * port the tree listened on (tree[0..n), as inet_of_tree read them): after a
 * dump, the tree's own closed connections. The count into *out, or -errno. */
ssize_t inet_time_wait_of(const struct inet_sock *tree, size_t n, struct inet_sock **out);
/* Before a restore here: every port the tree listened on (TCP) or was bound to
 * (UDP) bindable again. A TIME_WAIT entry in ours (inet_time_wait_of, at the
 * dump) or with the four-tuple of one of the tree's connections is destroyed; another closing entry is waited for, at most wait_ms
 * (said as a warning); a live socket of another process is named. 0, or
 * -EADDRINUSE with why. */
int inet_ports_free(const struct inet_sock *tree, size_t n, const struct inet_sock *ours, size_t nours, int wait_ms,
		    char *why, size_t len);
/* How long a restore waits for a closing connection on one of its ports that
 * is not the tree's own: a TIME_WAIT lasts 60 s on Linux. */
#define INET_PORT_WAIT_MS 65000
typedef struct json_t json_t;
/* ---- images.c: the CRIU images' digests ---- */
/* The plugin's record of them, in the images directory (never digested itself). */
#define IMAGES_DIGESTS "cusnap-digests.json"
/* What a digest cost: the files whose digest was taken from known, and the
 * bytes of the others, read. */
struct digest_count {
	size_t given;
	uint64_t read_bytes;
};
/* Every image file of the directory name in at ("." for at itself; images:
 * its path, for messages) (CRIU's logs and statistics excepted), its size and
 * CRC32C, into out: 0, or -1 with err. known (NULL: none): digests of some of
 * them, taken as they are for each file of the size recorded there (file
 * content's, from the CRCs its process took while it wrote the file), the
 * others read (count). The directory is opened never through a link. */
int images_digest(int at, const char *name, const char *images, const struct file_digests *known,
		  struct file_digests *out, struct digest_count *count, char *err, size_t errlen);
/* Does every file of files have its recorded size and CRC32C, and is every
 * image file recorded? 0, or -1 with why naming the first that is not. */
int images_verify(int at, const char *name, const char *images, const struct file_digests *files, char *why,
		  size_t len);
/* The same for the files of file content in a state directory (nothing else
 * there); content_verify checks their sizes only unless bytes (a restore
 * checks each block's CRC32C as it copies it back). */
int content_digest(int at, const char *name, const char *dir, const struct file_digests *known,
		   struct file_digests *out, struct digest_count *count, char *err, size_t errlen);
int content_verify(int at, const char *name, const char *dir, const struct file_digests *files, bool bytes, char *why,
		   size_t len);
/* ---- inet_record.c: the record of a checkpoint's sockets ---- */
/* {"sockets": [...], "time_wait": [...]} of socks and tw (new reference). */
json_t *inet_record(const struct inet_sock *socks, size_t n, const struct inet_sock *tw, size_t ntw);
/* A record decoded, once, for its readers: the sockets, the TIME_WAIT
 * entries, and the network lock the dump left ("lock", which network_json
 * adds: lock_method "" when none). */
struct inet_rec {
	struct inet_sock *socks, *tw;
	size_t n, ntw;
	char lock_method[16], lock_table[64];
	unsigned long lock_netns;
};
/* rec into r: 0, or -EINVAL (malformed) or -ENOMEM, with why (r freed). */
int inet_record_decode(const json_t *rec, struct inet_rec *r, char *why, size_t len);
void inet_record_free(struct inet_rec *r);
/* inet_ports_free over a record: 0 or -EADDRINUSE, with why. */
int inet_record_ports_free(const struct inet_rec *r, int wait_ms, char *why, size_t len);
/* The connections the lock holds (r's connected TCP sockets) into *conns (to
 * free): their count, or -ENOMEM. */
ssize_t inet_record_locked(const struct inet_rec *r, struct inet_sock **conns);
/* ---- netlock.c: CRIU's network lock, found and lifted (DESIGN.md §9.4) ---- */
/* This process's network namespace (its inode). */
unsigned long netlock_netns_here(void);
/* CRIU's iptables rules in network namespace netns that lock one of conns,
 * one "iptables RULE" line each into rules (at most len), their number in
 * *count: 0, or -ENOENT when no process is in that namespace any more. */
int netlock_rules(unsigned long netns, const struct inet_sock *conns, size_t n, char *rules, size_t len, size_t *count);
/* Those rules (netlock_rules' lines) deleted in netns: 0, or -errno; *removed. */
int netlock_remove(unsigned long netns, const char *rules, size_t *removed);
/* CRIU's nftables lock, table ("inet CRIU-..."), in netns: there (1) or not
 * (0), deleted first when del (then 1: it was deleted); -ENOENT no such
 * namespace any more, -EIO it could not be asked. */
int netlock_nft_table(unsigned long netns, const char *table, bool del);

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
	CUresult (*device_memory)(size_t *, CUdevice); /* cuDeviceTotalMem */
	CUresult (*driver_version)(int *);
};

/* Load libcuda.so.1 (no cuInit: the checkpoint API needs none). Returns 0, or
 * -1 with err naming the fix. */
int native_load(struct native *n, const char *libcuda, char *err, size_t errlen);
const char *native_error(const struct native *n, CUresult r);

/* ---- what the caller decides: built once (the tool from its command line,
 * the plugin from its settings file) and passed down; a tree keeps a pointer ---- */
#include <limits.h>
#include <stdio.h>

#include "../coordinator/coord.h"
#include "cusnap/paths.h"
#include "cusnap/proto.h"
#include "cusnap/rundir.h"

/* Where a command meets the other members of a group (one worker over several
 * nodes, each running its own command on its own tree) before its destructive
 * boundary: suspend and checkpoint after the prepare, before the native
 * checkpoint; restore after the rebuild, before restore-complete. */
struct boundary {
	/* This tree is ready to cross: 0 when every member is (go on), or -1 with
	 * why (a member failed, went away or never came: the caller undoes). */
	int (*ready)(struct boundary *b, char *why, size_t len);
};

#define SETTING_TYPE_MS int
#define SETTING_TYPE_COUNT int
#define SETTING_TYPE_BYTES long long
#define SETTING_TYPE_FLAG bool
#define SETTING_TYPE_CONTENT enum proto_content
#define SETTING_DIM_MS
#define SETTING_DIM_COUNT
#define SETTING_DIM_BYTES
#define SETTING_DIM_FLAG
#define SETTING_DIM_CONTENT
#define SETTING_TYPE_PATH char
#define SETTING_DIM_PATH [PATH_MAX]
#define SETTING_TYPE_DEVMAP char
#define SETTING_DIM_DEVMAP [2048]
#define SETTING_TYPE_TEXT char
#define SETTING_DIM_TEXT [2048]
struct settings {
#define SETTING(field, kind, min, max, def, option, key, alias, env, help) SETTING_TYPE_##kind field SETTING_DIM_##kind;
#include "settings.def"
#undef SETTING
	struct boundary *boundary; /* NULL: no group */
};
/* The content a command saves shared and private memory in: the one set, else
 * file for a checkpoint (cusnap checkpoint, the CRIU plugin, a group's
 * checkpoint: the GPU bytes stay out of CRIU's images) and host for a suspend
 * in place (DESIGN.md §6.2). */
static inline enum proto_content settings_content(const struct settings *s, bool checkpoint)
{
	return s->content ? s->content : checkpoint ? PROTO_CONTENT_FILE : PROTO_CONTENT_HOST;
}
/* ---- written.c: the regular files a tree has open for writing (DESIGN.md §9.2) ---- */
struct written_file {
	char path[PATH_MAX];
	unsigned uid, gid;       /* the file's owner */
	unsigned long long size; /* bytes at the dump */
};
struct written_files {
	struct written_file *f;
	size_t n;
};
/* Those the processes hold open for writing, in cusnap's own mount namespace
 * (a container's are its runtime's): 0, or -ENOMEM. Before the dump. */
int written_files_of(const struct proc *procs, size_t nprocs, struct written_files *w);
/* Each one's size now (after the dump: what CRIU recorded). */
void written_files_sized(struct written_files *w);
/* The manifest's record (an array; the caller owns it). */
json_t *written_files_json(const struct written_files *w);
void written_files_free(struct written_files *w);
/* The grown files a restore set aside, to put back if it fails. */
struct set_aside {
	struct set_aside_file {
		char path[PATH_MAX], aside[PATH_MAX + 64];
		unsigned uid, gid;
	} * f;
	size_t n;
};
/* Before CRIU restores: each recorded file as the dump left it, a grown one set
 * aside and made again (as its owner), added to done. 0, or -1 with why naming
 * the file (those this call set aside put back). */
int written_files_ready(const json_t *rec, struct set_aside *done, char *why, size_t len);
/* A restore failed: each file it set aside back in its place, whole as it had
 * grown (as its owner; said); done emptied. */
void written_files_put_back(struct set_aside *done);

/* ---- settings.c: the rows of settings.def ---- */
struct setting;
/* Each row's defaults (a path's is "": not set). */
struct settings settings_default(void);
/* The row the tool's --option or the plugin's key names; NULL when none does. */
const struct setting *setting_by_option(const char *option);
const struct setting *setting_by_key(const char *key);
/* Row i's --option (NULL past the last row, "" for a row without one), and
 * whether it is a FLAG (an option that takes no value). */
const char *settings_option_at(size_t i, bool *flag);
/* Whether it takes no value as an option (a FLAG), and whether it is a path. */
bool setting_is_flag(const struct setting *d);
bool setting_is_path(const struct setting *d);
/* value into d's field of s, checked against its kind and bounds: 0, or -1
 * with why ("use milliseconds, 1 to 86400000"; the caller names the spelling). */
int setting_set(struct settings *s, const struct setting *d, const char *value, char *why, size_t len);
/* The rows' environment variables found in env (NAME=VALUE strings, NULL
 * ended; the caller's environment or any other), over s: 0, or -1 with why
 * naming the variable. */
int settings_environment(struct settings *s, char *const *env, char *why, size_t len);
/* One row per setting, for --help: its spellings, bounds, default and help. */
void settings_help(FILE *out);

/* ---- report.c: what a step tells its user ---- */
/* Every line the library says has a level: the project's one numbering
 * (include/cusnap/log.h's, which the shim, cuemu and the coordinator's
 * command line log with); the plugin turns it into CRIU's where it hands a
 * line to CRIU's log. */
enum voice_level { VOICE_ERROR = LOG_ERROR, VOICE_WARN = LOG_WARN, VOICE_INFO = LOG_INFO };
/* The caller's voice: each line, whole (prefix, "warning: " for a warning,
 * the text; no newline), goes to sink instead of stderr; prefix (NULL:
 * "cusnap: ") begins every line. The tool keeps the default; the plugin hands
 * its lines to CRIU's log as well. */
void voice_set(void (*sink)(enum voice_level level, const char *line), const char *prefix);
/* One line in that voice; information is not said when quiet. voice_v: the
 * same after who instead of the prefix (NULL: the prefix), for a caller's own
 * lines in its own name. */
void voice(enum voice_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void voice_v(const char *who, enum voice_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));
/* One progress line (information): step, duration, details; the step is kept
 * as one of this command's phases. */
void progress(const char *step, double ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* No information from now on (--quiet): errors and warnings only. */
void progress_quiet(bool quiet);
/* 1.50 GiB, 8.0 MiB: bytes as an operator reads them (into out, returned). */
const char *bytes_text(uint64_t b, char out[32]);
/* The bytes the last phase named step moved (its rate in --json and the metrics). */
void progress_bytes(const char *step, uint64_t bytes);
struct phase {
	char name[48];
	double ms;
	uint64_t bytes; /* 0: none counted */
};
/* This command's phases so far, in order: how many, into *out. */
size_t progress_phases(const struct phase **out);
/* The same as JSON: [{"phase", "seconds", "bytes", "gib_per_s"}, ...]. */
json_t *progress_json(void);
/* While a long step waits: one line that moves on a terminal (5 times a
 * second), a plain line each second elsewhere (none in the first), nothing
 * when quiet: the time so far, and done(arg) bytes of ~total (either may be
 * absent: NULL, 0) with the rate. ticker_stop clears it; NULL is a no-op. */
struct ticker *ticker_start(const char *step, uint64_t total, uint64_t (*done)(void *arg), void *arg);
void ticker_stop(struct ticker *k);
/* Say the error (VOICE_ERROR) and keep it as this command's (report_error);
 * returns code. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last error fail() printed ("" when none): what the tool repeats as JSON. */
const char *report_error(void);
const char *state_name(int s);

/* ---- steps.c: a sequence as data (DESIGN.md §9) ---- */
/* One step of a checkpoint or a restore over the sequence's context: its name
 * (what CUSNAP_FAIL_STEP and the undo's lines call it), whether it applies
 * (when: NULL, always), its work (0, or the exit code: a step that fails
 * undoes its own part and fails through the sequence's failed()) and the
 * undo of that work (NULL: none), given the exit code so far and returning
 * the one to end with (finish() decides it from what the undo saw). */
struct step {
	const char *name;
	bool (*when)(void *ctx);
	int (*run)(void *ctx);
	int (*undo)(void *ctx, int code);
};
struct sequence {
	const char *name; /* "checkpoint" */
	const struct step *steps;
	size_t n;
	/* A step's failure, why: said, or kept for the undo that says it
	 * (finish()); the exit code. */
	int (*failed)(void *ctx, const char *why);
};
/* The steps in order; on the first failure the undo of every step done before
 * it, the last done first. *at: the index of the failing step (n: none).
 * 0, or the exit code. CUSNAP_FAIL_STEP=SEQUENCE:NAME fails the step NAME of
 * the sequence of that name before its work (a name of no step of it:
 * refused, EX_USAGE, nothing done; another sequence's: not this one's concern). */
int steps_run(const struct sequence *seq, void *ctx, size_t *at);

/* ---- job.c: checkpoint jobs (driver 590 and later; DESIGN.md §9) ---- */
struct job {
	char path[4200]; /* the job file as cusnap opens it; "" when the tree is in no job */
	pid_t owner;     /* the process whose environment named it (0: --job-file) */
	long uid;        /* --job-file: the workload's user, who may own it besides the caller */
};
/* The copy of the job file in a checkpoint or state directory. */
#define JOB_COPY LAYOUT_JOB
/* cusnap run --launch-job: a new job file for the program about to be
 * executed, named in this process's environment. 0, or -1 with why. */
int job_launch(char *why, size_t len);

struct tree {
	const struct settings *s; /* the caller's, for the tree's life */
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
int tree_load(pid_t pid, const struct settings *s, struct tree *t);
/* The same for a command that only looks (inspect): an unacceptable job file
 * is noted in t->job_error instead of refused. */
int tree_view(pid_t pid, const struct settings *s, struct tree *t);
/* The tree of pid (0: none given, a usage error), loaded and held for command
 * what: the guard rails first (before the tree's processes are even asked
 * anything). 0, or an exit code (reported) with t freed. */
int tree_take(pid_t pid, const struct settings *s, const char *what, struct tree *t);
/* One command per tree: take the lock of every process of t for command what
 * (DESIGN.md §9). 0, or an exit code (reported; EX_BUSY when another command
 * holds it) with nothing changed. tree_free releases it. */
int tree_hold(struct tree *t, const char *what);
/* Who holds the tree (a command working on it): true, and who into out. */
bool tree_held(const struct tree *t, char *out, size_t len);
void tree_free(struct tree *t);
/* CUDA processes without the interposer: refused with --require-interposer
 * (exit 1, reported), else a warning that the driver will not restore a
 * process that imported what another shares. 0 or the exit code. */
int check_interposer(const struct tree *t);
/* Partial interposition: refused (exit 1, reported). */
int check_interposition(const struct tree *t);
/* Every CUDA process running, and the interposition complete or absent:
 * 0, or an exit code (reported) before anything changed. */
int check_freezable(const struct tree *t);
/* The same for the tree of pid, before anything else is looked up (no driver,
 * no CRIU needed to refuse); a pid that does not exist is refused too (64). */
int check_pid_guard(pid_t pid);
/* ---- control_files.c: the workload's control directory, safely ---- */
/* Control directory dir (as the workload sees it) inside process pid's root,
 * resolved within that root: a descriptor, or -errno with why. */
int control_dir_open(pid_t pid, const char *dir, char *why, size_t len);
/* A control directory given as a path here (no symlink on the way): a
 * descriptor, or -errno with why. */
int control_dir_open_here(const char *path, char *why, size_t len);
/* Does control file name of pid exist (never through a symlink)? */
bool control_exists(pid_t pid, const char *dir, const char *name);
/* Create (or replace) the empty control file name of pid, never through a
 * symlink: 0, or -1 with why. */
int control_write(pid_t pid, const char *dir, const char *name, char *why, size_t len);
/* The path here of pid's control directory dir (dir itself when it cannot be
 * told), for the manifest. */
void control_host_path(pid_t pid, const char *dir, char *out, size_t len);
/* Remove endpoint socket name of directory dfd if nothing listens on it: 1
 * removed, 0 none there, -EBUSY one that answers, -EEXIST not a socket, or
 * another -errno. */
int control_endpoint_stale(int dfd, const char *name);

/* ---- devmap.c: which GPU each GPU of a checkpoint is restored onto ---- */
struct devmap {
	CUcheckpointGpuPair pairs[PROTO_MAX_DEVICES]; /* for the native restore */
	unsigned npairs;                              /* 0: every GPU as it was */
	int ordinals[PROTO_MAX_DEVICES];              /* the checkpoint's device d is ordinals[d] here (the shims) */
	size_t nordinals;
};
/* The driver's GPUs as a JSON array of such texts (a checkpoint's GPU list). */
json_t *devmap_gpus_json(const struct native *n);
/* spec ("auto", or OLD=NEW pairs of ordinals or UUIDs; NULL or "": none) for a
 * checkpoint made on the GPUs had, restored onto here: 0, or -1 with why. */
int devmap_parse(const char *spec, const CUuuid *had, size_t nhad, const CUuuid *here, size_t nhere, struct devmap *m,
		 char *why, size_t len);
/* s->device_map against a checkpoint's GPU list (gpus, as devmap_gpus_json
 * wrote it) and this machine's GPUs (s->libcuda loaded to ask): 0, -EINVAL
 * (the map or the list, why says), -ENODEV (no driver, why says). */
int devmap_for(const struct settings *s, const json_t *gpus, struct devmap *m, char *why, size_t len);

/* ---- metrics.c: what node_exporter's textfile collector reads (DESIGN.md §12.1) ---- */
/* After operation op ("checkpoint", ...) ended with exit status code after
 * seconds, on target (the tree's root PID or the checkpoint directory; NULL:
 * none): DIR/cusnap.prom rewritten with the counters carried on, this
 * operation's phases (progress_phases) and, on success, the target's time.
 * DIR must follow ssh's StrictModes. 0, or -1 with why. */
int metrics_write(const char *dir, const char *op, int code, double seconds, const char *target, char *why, size_t len);

/* ---- compat.c: what a restore needs of a machine (DESIGN.md §9.5) ---- */
/* The record a checkpoint keeps: the driver's version, cusnap's state format,
 * and each GPU of this machine (UUID, model, memory) with, when used is not
 * NULL, the tree's VMM bytes on it (used[ordinal]). */
json_t *compat_record(const struct native *n, const uint64_t *used);
/* Every reason this machine cannot restore a checkpoint that recorded needs
 * (NULL: a checkpoint from before the gate, CRIU's version alone checked),
 * its GPUs put where map says (NULL or empty: each onto the GPU of its UUID),
 * its images written by CRIU criu_had for CRIU criu_here (either NULL or "":
 * not checked): an array of texts, empty when there is none; NULL when the
 * driver (libcuda, NULL: the loader's) cannot be asked (why says). */
json_t *compat_check(const char *libcuda, const json_t *needs, const struct devmap *map, const char *criu_had,
		     const char *criu_here, char *why, size_t len);

/* ---- finish.c: how far a command got, and the one way it ends ---- */
struct record {
	pid_t root;
	const char *dir; /* the state directory */
	int dirfd;       /* dir, open: the caller's handle on it (0: none; dir opened where needed) */
	bool changed;    /* prepare or a native step began: there may be something to undo */
	bool stuck;      /* a native call did not return: nothing can be undone until it does */
	/* file content: where prepare puts the digests of the files their shims
	 * gave (content_digest's known); NULL: not wanted */
	struct file_digests *content_digests;
};
/* The command failed (fmt says what): undo what rec records (tree_recover),
 * check every process, and report. Exit 1 only when every CUDA process is
 * running and every participant active (or died meanwhile, each named); else 2, with the
 * state named and the repair command. */
int finish(struct tree *t, const struct record *rec, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every live CUDA process running and every live participant active: 0, or -1
 * with the first that is not in why. *gone: processes that no longer exist. */
int tree_verify(struct tree *t, char *why, size_t len, size_t *gone);
/* Where a tree's shared memory is rebuilt from. */
enum recover_from {
	RECOVER_ANY,     /* the state file in the state directory when there, else each process's own records */
	RECOVER_RECORDS, /* each process's own records (the state file is not read: resume --discard-state) */
	RECOVER_STATE,   /* the state file, which must be there (a restore of a prepared checkpoint) */
};
/* What a recovery did. */
struct recovery {
	struct coord_report report; /* the rebuild's */
	double ms_thaw, ms_rebuild; /* native restore and unlock; the rebuild */
	bool nothing;               /* it was running already */
};
/* Bring the tree back from whatever state a command left it in: thaw what is
 * LOCKED or CHECKPOINTED (onto map's GPUs; NULL: as they were), then rebuild
 * the shims as from says, from the state directory dir (held open as dirfd
 * when > 0: everything in it read through that). 0, or -1 with err. */
int tree_recover(struct tree *t, int dirfd, const char *dir, enum recover_from from, const struct devmap *map,
		 struct recovery *out, char *err, size_t errlen);
/* How a checkpointed tree runs again. */
enum release_kind {
	RELEASE_RESTORED, /* restored by CRIU: restore-complete once whole; on a failure the tree is killed */
	RELEASE_IN_PLACE, /* left running by the dump: snapshot-complete (a warning when it cannot be
			     written); a failure is the caller's to finish */
};
/* The one end of a checkpoint or restore that lets the workload run:
 * tree_recover, then the control file of kind written in the root's control
 * directory. 0, or -1 with err (RELEASE_RESTORED: the tree killed). */
int tree_release(struct tree *t, int dirfd, const char *dir, enum recover_from from, const struct devmap *map,
		 enum release_kind kind, struct recovery *out, char *err, size_t errlen);
/* SIGINT, SIGTERM and SIGHUP are caught from here on (the command stops at its
 * next phase boundary). */
void signals_arm(void);
/* The signal caught since signals_arm, or 0. */
int signal_caught(void);
/* How many were caught so far (a new one: the count moved). */
int signals_caught(void);
/* At a phase boundary: when a signal was caught, finish (exit 1 or 2,
 * reported); else 0. */
int interrupted(struct tree *t, const struct record *rec, const char *after);
/* The same, said and its why into why, for a step that undoes by walking back
 * (true), or false: no signal caught. */
bool interrupted_why(const char *after, char *why, size_t len);
/* The state directory of the tree of pid: given, or the one the last command
 * on it recorded, or the private default (derived from pid). */
void state_dir_of(pid_t pid, const char *given, char *out, size_t len);
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

/* ---- freeze.c, native_steps.c ---- */
/* suspend's steps as rows over one context, which `cusnap suspend`, its
 * checkpoint and the CRIU plugin's hooks share (each its own sequence of
 * them, with rows of its own around). A row that fails calls failed (the
 * sequence's), which keeps why for freeze_undo once prepared. */
struct freeze {
	struct tree *t;
	struct record *rec;
	enum proto_content content;
	struct boundary *boundary; /* a group's (NULL: none; the row is skipped) */
	bool tickers;              /* each row under a ticker of its own (not inside CRIU) */
	int (*failed)(void *ctx, const char *why);
	bool prepared;         /* the prepare done: a failure after it is said by its undo */
	struct coord_report r; /* the prepare's */
	char why[2000];        /* a failure after the prepare, for its undo to say */
};
int freeze_prepare(void *ctx);        /* record dir, prepare when interposed (undone on failure) */
int freeze_undo(void *ctx, int code); /* the prepare's undo: finish, saying why */
bool freeze_in_group(void *ctx);      /* the boundary row's when */
int freeze_boundary(void *ctx);       /* every member prepared before any locks */
int freeze_lock(void *ctx);           /* native lock */
int freeze_checkpoint(void *ctx);     /* native checkpoint */
/* `cusnap suspend`'s sequence (and checkpoint's prepare step): prepare,
 * boundary, lock, native checkpoint, the tree alive and no signal caught; a
 * failure or a signal finishes. 0 or the exit code (reported). */
int tree_suspend(struct tree *t, struct record *rec, enum proto_content content, struct coord_report *r);
/* Its first part (the CRIU plugin's at PAUSE_DEVICES): record dir, prepare
 * when interposed. 0 or the exit code (reported; a failed prepare undone). */
int tree_prepare(struct tree *t, struct record *rec, enum proto_content content, struct coord_report *r);
int native_lock(struct tree *t, struct record *rec, char *err, size_t errlen);
int native_checkpoint(struct tree *t, struct record *rec, char *err, size_t errlen);

/* ---- criu.c ---- */
/* The criu to run: s->criu (--criu, $CRIU), the project's provisioned one, or
 * PATH. Returns 0, or -1 with err naming the fix (exit 69). */
int criu_find(const struct settings *s, char *out, size_t len, char *err, size_t errlen);
/* Its version string ("4.2.1"), or "". */
void criu_version(const char *criu, char *out, size_t len);
/* Inside CRIU (the plugin): the version of the CRIU this process runs, asked
 * of the same program (through its loader when it runs through one), or "". */
void criu_self_version(char *out, size_t len);
/* Compare CRIU versions ("4.2.1"): <0, 0 or >0 as a is older, the same, newer. */
int criu_version_cmp(const char *a, const char *b);
/* The network lock CRIU is told to use while it dumps or restores TCP
 * connections: NULL for its default (iptables) when iptables-restore is on
 * PATH, else "nftables" (CRIU's own libnftables; nothing to install). */
const char *criu_network_lock(void);
/* What bounds a CRIU run. */
struct criu_bounds {
	bool own_group;      /* in a process group of its own (terminal signals reach cusnap only) */
	bool stop_on_signal; /* a signal caught (signals_arm) kills CRIU at once */
	long long time_ms;   /* killed past this (criu_timeout_ms; default 10 x timeout_ms, >= 120 s) */
	long long log_max;   /* killed when its log grows past this (criu_log_max) */
	int dirfd;           /* the checkpoint directory CRIU inherits (criu_dir_path; -1: none) */
};
struct criu_bounds criu_bounds_default(bool own_group, bool stop_on_signal, const struct settings *s);
/* Run criu with argv (argv[0] is ignored and replaced by criu), its log at
 * log_path, within bounds b. Returns its exit status; -ETIMEDOUT, -EFBIG or
 * -EINTR when it was killed at a bound or on a signal (said as an error); -1
 * when it could not run. On failure the last error lines of the log's tail
 * are printed. */
int criu_run(const char *criu, char *const argv[], const char *log_path, const struct criu_bounds *b);
/* CRIU's name for name (or dirfd itself: "") in the checkpoint directory held
 * open as dirfd, which it inherits (bounds.dirfd): every path CRIU is given
 * (-D, --libdir, --pidfile) goes through the directory cusnap checked, never
 * through a path that could be swapped between cusnap's checks and CRIU's open. */
void criu_dir_path(int dirfd, const char *name, char *out, size_t len);
/* criu-plugins in the directory held as dirfd, made (empty) if absent, and
 * CRIU's name for it into out: CRIU runs with it as --libdir so that its CUDA
 * plugin never loads (cusnap does the native steps). 0 or -1 (errno). */
int criu_plugin_dir(int dirfd, char *out, size_t len);

#endif
