/* SPDX-License-Identifier: MIT */
/* The CRIU plugin's parts: plugin.c (its descriptor, init and exit, what every
 * hook needs), plugin_dump.c and plugin_restore.c (the hooks of each stage);
 * and
 *   plugin_conf.c: its settings, from a file where CRIU runs without our
 *     environment;
 *   plugin_log.c: what it and the node library say, into CRIU's own log as well as stderr;
 *   plugin_peer.c: CRIU's own CUDA plugin in the same plugin directory;
 *   plugin_helper.c: work CRIU must not return before, in a helper process;
 *   plugin_image.c: its image, what a restore needs besides the state file;
 *   plugin_group.c: a dump or restore as one member of a group. */
#ifndef CUSNAP_CRIU_PLUGIN_H
#define CUSNAP_CRIU_PLUGIN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "criu_abi.h"
#include "cusnap/proto.h"
#include "../node/node.h"

/* ---- plugin_conf.c ---- */

/* The system-wide file, when none is named and none lies beside the plugin. */
#define PLUGIN_CONF_SYSTEM "/etc/cusnap/criu-plugin.conf"
/* Its name beside the plugin, in the libdir CRIU's own configuration names. */
#define PLUGIN_CONF_BESIDE "cusnap.conf"

struct plugin_conf {
	char path[PATH_MAX]; /* the file read; "" when there was none */
	struct settings s;   /* settings.def's rows: the defaults, the file, the environment */
};

/* The first of $CUSNAP_PLUGIN_CONFIG, own_dir/cusnap.conf, PLUGIN_CONF_SYSTEM
 * that exists, read into c over the defaults, then the environment over it
 * (settings.def's variables). 0, or -1 with why (an untrusted or malformed
 * file: nothing of it is used). */
int plugin_conf_load(struct plugin_conf *c, const char *own_dir, char *why, size_t len);
/* One file's text over c->s (name: for messages). */
int plugin_conf_parse(struct plugin_conf *c, const char *name, const char *text, char *why, size_t len);

/* ---- plugin_image.c ---- */

#define PLUGIN_IMAGE "cusnap-plugin.json"

typedef struct json_t json_t;
struct plugin_image {
	enum proto_content content;
	bool vmm;                        /* the tree ran under the interposer: the sharing is rebuilt */
	char control_dir[4096];          /* the workload's, as it sees it */
	char control_dir_here[PATH_MAX]; /* the same seen from CRIU ("" when it could not be told) */
	size_t cuda_processes;
	json_t *gpus;          /* the GPUs of the dump (devmap_gpus_json's form) */
	json_t *network;       /* the tree's sockets (inet_record's form; NULL: none recorded) */
	char criu_version[64]; /* the CRIU that dumped ("" when it could not be told) */
	json_t *pids;          /* the tree's processes, [[PID, namespace PID], ...] (NULL: not recorded) */
	json_t *needs;         /* what a restore needs of its machine (compat_record's form; NULL: not recorded) */
};
/* dir/cusnap-plugin.json, atomically: 0, or -1 with why. */
int plugin_image_write(const char *dir, const struct plugin_image *im, char *why, size_t len);
/* dir/cusnap-plugin.json into im: 1, 0 when there is none (not dumped with
 * this plugin), -1 with why (unreadable, another form, a field missing).
 * plugin_image_free releases it. */
int plugin_image_read(const char *dir, struct plugin_image *im, char *why, size_t len);
void plugin_image_free(struct plugin_image *im);

/* ---- plugin_log.c ---- */

/* One line of the plugin's own ("cusnap-plugin: ", "warning: " for a
 * warning), to stderr and to CRIU's log at its level. */
void plugin_say(enum voice_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* From here on, the node library speaks the same way ("cusnap: "). */
void plugin_log_start(void);
/* Its voice as it was, stderr alone (before the plugin is unloaded). */
void plugin_log_stop(void);

/* ---- plugin_group.c ---- */

struct group;
/* The group s names (none: *g NULL) joined for op ("checkpoint", "restore"),
 * for the tree of pid or the checkpoint dir: 0, or -1 (said: refused, nothing
 * changed). */
int plugin_group_join(const struct settings *s, pid_t pid, const char *dir, const char *op, struct group **g);
/* This member's outcome (its exit code) written and every member's said, the
 * group left (*g NULL after): the code, 2 when the group may be split. */
int plugin_group_leave(struct group **g, int code);

/* ---- plugin_peer.c ---- */

/* CRIU's CUDA plugin (cuda_plugin.so) loaded in this CRIU, whichever order:
 * its device hooks are routed through mine, which claims the interposed trees
 * and hands it the rest (each of its hooks called once per process).
 * mine[h]: my hook h, or NULL. */
void peer_attach(void *const mine[CRIU_HOOKS_4_1]);
/* Is it loaded? (peer_attach ran and found it) */
bool peer_present(void);
/* Call its hook h for pid: what it returns, -ENOTSUP without it. */
int peer_call(enum criu_hook h, int pid);
/* Its table as it was. */
void peer_detach(void);

/* ---- plugin_helper.c ---- */

/* A helper process and the pipe it reports its exit code on. */
struct helper {
	pid_t pid; /* non-zero: one was started */
	int fd;    /* CRIU's end (the helper's, in the helper) */
};
/* Start one: 0 in the helper, 1 in CRIU, -1 (errno) when it cannot be made. */
int helper_start(struct helper *h);
/* In the helper: its exit code to CRIU; the helper ends. */
__attribute__((noreturn)) void helper_report(struct helper *h, int code);
/* In CRIU: the helper's exit code, waiting up to timeout_ms; -1 when it did
 * not say (0 when none was started). */
int helper_wait(struct helper *h, int timeout_ms);
/* CRIU's --timeout (its SIGALRM, 10 s by default) bounds CRIU's own seizing of
 * the tree; a hook's work (the prepare's copies, a group's boundary, the native
 * steps) is bounded by the plugin's own deadlines instead, so CRIU's alarm is
 * held while it runs (the seconds it had left, 0: none set) and re-armed after. */
unsigned criu_alarm_hold(void);
void criu_alarm_resume(unsigned left);
/* A hook that runs body with CRIU's alarm held. */
#define CRIU_UNTIMED_HOOK(name, body)               \
	static int name(int pid)                    \
	{                                           \
		unsigned left_ = criu_alarm_hold(); \
		int rc_ = body(pid);                \
		criu_alarm_resume(left_);           \
		return rc_;                         \
	}

struct tree;
/* Is pid gone, a zombie, or on its way out (killed by the dump)? */
bool proc_ending(pid_t pid);
/* Every process of t let go by CRIU (no tracer) or ending, within timeout_ms:
 * how many live on, or -1 on a timeout. */
int wait_released(const struct tree *t, int timeout_ms);

/* ---- plugin.c, plugin_dump.c, plugin_restore.c: the hooks ---- */

/* Who works on the tree CRIU was given. */

/* Who works on the tree CRIU was given. */
enum owner {
	OWNER_UNDECIDED,
	OWNER_NONE, /* no CUDA (or not dumped by this plugin): CRIU, and any other plugin */
	OWNER_MINE, /* this plugin */
	OWNER_PEER, /* CRIU's CUDA plugin: CUDA processes, none under the interposer */
};

struct tree_lock;
/* The plugin's state, over one stage of one CRIU (plugin_init clears it). */
struct plugin_state {
	int stage; /* enum criu_stage */
	enum owner owner;
	bool checkpointed; /* CHECKPOINT_DEVICES done */
	struct tree t;
	bool loaded; /* t holds the tree */
	struct record rec;
	char dir[PATH_MAX]; /* the images directory */
	struct plugin_conf conf;
	char conf_error[PATH_MAX + 600]; /* the configuration file is refused: why */
	pid_t root;
	int *restore_tid;        /* each CUDA process's restore thread, asked while it runs */
	struct devmap map;       /* restore: the GPUs the checkpoint's are restored onto */
	struct inet_sock *socks; /* dump: the tree's sockets, read while it runs */
	size_t nsocks;
	struct helper helper;
	bool criu_fails;                   /* CRIU's exit status becomes 1 (set once the plugin is kept loaded) */
	bool restoring;                    /* restore: the images are this plugin's */
	bool dump_failed;                  /* dump: CRIU's status was not 0 */
	double t0;                         /* when CRIU loaded the plugin (the operation's start, for the metrics) */
	struct group *group;               /* dump: the group this dump is one member of (plugin_group.c) */
	struct freeze fz;                  /* dump: the context of the pause's and checkpoint's steps (node.h) */
	struct file_digests content_known; /* dump: the content files' digests their shims gave */
	uint64_t *thread_mask;             /* dump: each running restore thread's signal mask, kept to put back */
	size_t threads_running;            /* dump: how many of the restore threads run alone */
};
extern struct plugin_state P;
extern struct criu_plugin_desc CR_PLUGIN_DESC __attribute__((visibility("default")));

/* plugin.c: what every hook needs. */
/* metrics_dir: the dump's or restore's result for node_exporter (a warning
 * when it cannot be written). */
void plugin_metrics(const char *op, int code);
/* CRIU's descriptor of the images directory (-1: none), which the plugin
 * reads and writes its files through. */
int criu_images_fd(void);
/* The images directory's path, from CRIU's descriptor of it: 0 or -1. */
int images_dir(char *out, size_t len);
/* The settings (P.conf.s, the one struct the node library is given): the
 * configuration file and the environment (plugin_conf.c), the control
 * directory the checkpoint recorded (at a restore), else the workload's own
 * (control.h's rule). */
void settings_for(pid_t root);
/* How long CRIU waits for a helper: the release (60 s), then an undo. */
int helper_bound_ms(void);
/* CRIU's images directory and everything in it its owner's or root's,
 * writable by no one else (DESIGN.md §9): 0, or -1 (said, with outcome). */
int images_trusted(const char *outcome);

/* plugin_dump.c: the dump's hooks (criu_abi.h's types) and its end. */
criu_pause_devices_fn pause_devices;
criu_checkpoint_devices_fn checkpoint_devices;
void dump_exit(int ret);
/* At CRIU's exit (atexit): the helper's work done (or its bound passed), and
 * CRIU's status 1 when the tree could not be put back. */
void criu_exit_waits(void);

/* plugin_restore.c: the restore's beginning (at init), its hook and its end. */
int restore_begin(void);
criu_resume_devices_late_fn resume_devices_late;
void restore_exit(int ret);

#endif
