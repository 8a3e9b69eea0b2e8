/* SPDX-License-Identifier: MIT */
/* The cusnap tool: its commands, over the node library (src/node/node.h). */
#ifndef CUSNAP_CUSNAP_CUSNAP_H
#define CUSNAP_CUSNAP_CUSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cuda.h>

#include "../node/group.h"
#include "../node/node.h"

/* ---- commands: one file each (main.c parses the command line into struct args) ---- */
struct checkpoint_result {
	double ms_prepare, ms_lock, ms_checkpoint, ms_dump, ms_restore_in_place;
	double ms_criu_restore, ms_native_restore, ms_vmm_restore, ms_total;
	unsigned long long bytes_copied, image_bytes;
	size_t processes, cuda, shared;
	uint64_t device_bytes[PROTO_MAX_DEVICES]; /* the tree's VMM memory on each GPU (prepare's count) */
	pid_t restored_root;
};
/* A command's own arguments, parsed; what a command does not take stays zero. */
struct args {
	const struct settings *s;         /* settings.def's rows: --timeout, --content, --criu, ... */
	bool json;                        /* --json: the summary, or the error, as JSON on stdout */
	bool control_dir_given;           /* --control-dir (run: passed on to the program) */
	pid_t pid;                        /* --pid */
	const char *dir;                  /* --dir */
	bool leave_running, wait_ready;   /* --leave-running, --wait-ready */
	bool discard_state;               /* --discard-state */
	bool launch_job;                  /* run: --launch-job */
	bool tcp_established;             /* checkpoint: --tcp-established (CRIU dumps live TCP connections) */
	bool tcp_close;                   /* checkpoint: --tcp-close (dumped closed, no lock) */
	bool unlock_network;              /* inspect --dir: remove the lock the checkpoint left */
	bool verify;                      /* inspect --dir: every byte against the manifest's digests */
	const char *criu_config;          /* checkpoint, restore: --criu-config (more CRIU options, CRIU's --config) */
	int processes;                    /* demo: --processes */
	unsigned long long size;          /* demo: --size */
	bool in_place;                    /* demo: --in-place */
	const char *keep;                 /* demo: --keep */
	bool quiet;                       /* --quiet: no progress lines */
	int argc;                         /* run: PROGRAM [ARG...] */
	char **argv;                      /* */
	struct checkpoint_result *result; /* checkpoint, restore: the figures for a caller (the
						  demo) instead of the summary; NULL: printed */
};
int cmd_suspend(const struct args *a); /* suspend.c */
int cmd_resume(const struct args *a);  /* suspend.c */
int cmd_inspect(const struct args *a); /* inspect.c */
int cmd_run(const struct args *a);     /* run.c */
/* restorable.c: can this machine restore a checkpoint (DESIGN.md §9.5)? */
struct manifest;
/* The reasons it cannot restore m with map (NULL: none) and CRIU criu (NULL:
 * not checked): an array of texts, empty when it can; NULL when the driver
 * cannot be asked (why says). */
json_t *restore_verdict(const struct settings *s, const struct manifest *m, const struct devmap *map, const char *criu,
			char *why, size_t len);
/* The same as restore's gate: 0, or exit 69 (reported) naming every reason. */
int restore_gate(const struct settings *s, const struct manifest *m, const struct devmap *map, const char *criu);
/* inspect --dir: DIR's verdict here (the default CRIU, no --device-map),
 * printed "restorable here: ..." unless json; the reasons (the caller frees),
 * or NULL when DIR has no readable manifest. */
json_t *restore_verdict_print(const struct settings *s, const char *dir, bool json);

int cmd_checkpoint(const struct args *a); /* checkpoint.c */
int cmd_restore(const struct args *a);    /* restore.c */
/* checkpoint.c, for restore.c too: CRIU's privileges here (0, or 64 reported:
 * what is the command); a --criu-config file it may trust (0, or 64 reported);
 * the bytes of the files under dir. */
int criu_privileged(const char *what);
int criu_config_trusted(const char *path);
unsigned long long dir_bytes(const char *dir);
/* summary.c: checkpoint's and restore's --json object, on stdout. */
void summary_checkpoint(const struct args *a, const struct tree *t, const struct checkpoint_result *r);
void summary_restore(const struct args *a, pid_t root, const struct tree *t, const struct checkpoint_result *r);
int cmd_demo(const struct args *a);
/* ---- group_cmd.c: a command as one member of a group (DESIGN.md §16; ../node/group.h) ---- */
/* Command op (run) as one member of a->group: the group met in etcd first
 * (69: not reached, 75: busy with another operation), every member ready
 * before any crosses its boundary, every member's result printed after. */
int group_run(int (*run)(const struct args *), const struct args *a, const struct group_spec *spec, const char *op);
/* inspect --group: every member's phase and every recent operation's results. */
int group_inspect(const struct args *a, const struct group_spec *spec);
/* ---- ckptdir.c: a checkpoint directory replaced only by a whole checkpoint ---- */
/* Each works through dfd, the directory dir held open (use_dir), never
 * following a link. */
/* Settle dir (ckptdir_settle), then a fresh dir/.partial to build in: 0 with
 * its path in out and *work open on it, or -errno. */
int ckptdir_begin(int dfd, const char *dir, char *out, size_t len, int *work);
/* dir/.partial put in place of dir's checkpoint, the manifest last: 0, or
 * -errno with why (taken again, it finishes what it began). */
int ckptdir_publish(int dfd, char *why, size_t len);
/* A failed attempt: dir/.partial removed. */
void ckptdir_discard(int dfd);
/* A failed dump's log kept where the attempt's removal leaves it:
 * dir/dump-failed.log (its path in out), or -errno. */
int ckptdir_keep_log(int dfd, const char *dir, char *out, size_t len);
/* Before a command uses dir: an attempt cut short after its dump finished put
 * in place, any other removed (the previous checkpoint kept). 0, or -errno
 * with why. */
int ckptdir_settle(int dfd, const char *dir, char *why, size_t len);
/* ---- network.c: a checkpoint's network sockets (DESIGN.md §9.4) ---- */
struct network {
	struct inet_sock *socks; /* the tree's, before the dump */
	size_t n;
	struct inet_sock *time_wait; /* after the dump: its own closed connections on its ports */
	size_t ntime_wait;
	/* What else of the tree's a restore must find as the dump left it: the
	 * regular files it writes (its logs), and the manifest's record of them. */
	struct written_files written;
	json_t *written_json;
	const char *lock;    /* CRIU's network lock of the connections (--tcp-established): its method, or NULL */
	char lock_table[64]; /* nftables: CRIU's table ("inet CRIU-..."), from its dump log */
};
/* Before anything changes: the tree's sockets into *net; refused (the exit
 * code, reported) when the CRIU at criu cannot dump them on this kernel, or
 * when a connection would need --tcp-established (unless a --criu-config may
 * give it). */
int network_check(const struct tree *t, const char *criu, bool tcp_established, bool config_given, struct network *net);
/* After the dump (its log at log): the TIME_WAIT entries on the tree's ports,
 * the files' sizes, CRIU's nftables table. */
void network_after_dump(struct network *net, const char *log);
void network_free(struct network *net);
/* The manifest's "network" object (new reference). */
json_t *network_json(const struct network *net);
struct manifest;
/* Before a restore creates anything: the ports the checkpoint's tree bound on
 * this host free again (its own TIME_WAIT entries cleared, others waited for);
 * 0, or the exit code (reported) with nothing done. */
int network_ports_free(const struct manifest *m);
/* Before a restore creates anything: the files the tree wrote as the dump left
 * them (written_files_ready: those set aside added to done, to put back if the
 * restore fails); 0, or the exit code (reported), nothing done. */
int network_files_ready(const struct manifest *m, struct set_aside *done);
/* After a restore: CRIU's lock of the dump, left in the dump's network
 * namespace when the tree was restored in another one, removed there (said). */
void network_lock_lifted(const struct manifest *m);
/* What `inspect --dir` says of the lock the checkpoint m recorded (NULL: none
 * recorded), removing it when unlock; the exit code when the removal failed. */
int network_lock_inspect(const struct manifest *m, bool unlock, FILE *out);
/* ---- manifest_write.c ---- */
/* manifest.json in dfd (a checkpoint being built), atomically (include/cusnap/manifest.h reads it). 0 or -errno. */
/* images: the image digests (images_digest; NULL before the dump); files:
 * those of file content's files (content_digest; NULL: none); net: the tree's
 * sockets (network_json); written: the files it writes (written_files_json). */
int manifest_write(int dfd, const struct tree *t, pid_t root, enum proto_content content, bool prepared,
		   bool leave_running, const char *criu, char *const dump_argv[], const struct checkpoint_result *r,
		   const struct file_digests *images, const struct file_digests *files, const json_t *net,
		   const json_t *written);

#endif
