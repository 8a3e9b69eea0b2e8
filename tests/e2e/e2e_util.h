/* SPDX-License-Identifier: MIT */
/* Driving the built tools and the example workload as a user would. */
#ifndef CUSNAP_TESTS_E2E_UTIL_H
#define CUSNAP_TESTS_E2E_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"

extern char e2e_root[PATH_MAX]; /* scratch for this test run */
extern char bin_dir[PATH_MAX], emu_dir[PATH_MAX], examples_dir[PATH_MAX], tests_dir[PATH_MAX];

/* Under a sanitizer (CUSNAP_SANITIZER) the example workload's shared
 * allocations are 256 KiB on a 64 KiB granularity unless a test says
 * otherwise (VMM_GROUP_SIZE, CUEMU_GRANULARITY in its environment), as the
 * sweeps' are: the sanitizers' work on every byte the workloads copy and check
 * was most of those passes' CPU time, and what they look for does not depend
 * on the size. */
void e2e_init(const char *tag);

/* The size of each of the example workload's shared allocations here. */
size_t e2e_alloc_bytes(void);

/* The bytes of the files of file content in dir, and how many there are. */
long long e2e_content_files(const char *dir, int *files);

/* A copy of the tools, the shim, cuemu and the example workload that another
 * user can run (the checkout may lie under a directory only root can enter,
 * as root's home does): <dir>/{bin,lib,emu,examples}, dir 0755 under /tmp.
 * Made once; removed by e2e_done. Returns dir, or NULL (reported). */
extern char e2e_pub[PATH_MAX];

const char *e2e_public_tree(void);

/* The end of an e2e test: its scratch removed unless something failed; main
 * returns this (test_done). */
int e2e_done(void);

void tool_last_show(void);

void tool_last_set(char *const argv[], int status, int timeout_ms, const char *out);

/* Run a tool; its stdout and stderr go to out (returned, malloc'ed). Exit
 * status, or -1 when it was killed, timed out or could not be waited for (a
 * check that fails afterwards shows how it ended and what it printed). */
int tool(char **out, char *const env[], const char *first, ...);

struct group {
	pid_t child; /* what we forked */
	pid_t root;  /* the workload's root process (observed PID) */
	char ctl[PATH_MAX];
	char log[PATH_MAX];
	char env_ctl[PATH_MAX + 32];
};

void cusnap_path(char *out, size_t len);

/* Wait until the workload of g wrote ready-for-snapshot: 0, or -1 (its log shown). */
int group_wait_ready(struct group *g, const char *name);

/* Start the workload argv (NULL-ended; its control directory and log made
 * fresh under name) with env_extra, not waiting for it. */
void group_spawn_argv(struct group *g, const char *name, const char *const *argv, char *const *env_extra,
		      const char *ctl_override);

/* The same, then wait until it is ready for a snapshot. wrapped: argv starts
 * with an unshare --fork wrapper (the workload is its child). */
int group_start_argv(struct group *g, const char *name, const char *const *argv, bool wrapped, char *const *env_extra,
		     const char *ctl_override);

/* A pair sharing native legacy IPC (the adapter off) and VMM memory under
 * cuemu's r610 profile, started with cusnap run, in a new checkpoint job when
 * job; the driver's transitions logged to log (CUEMU_CKPT_LOG, its path into log). */
int group_start_r610(struct group *g, const char *name, bool job, char *log, size_t loglen);

/* Start examples/vmm_group (under the interposer unless plain) and wait until it
 * is ready for a snapshot (wait), or not. wrapper: argv prefix such as unshare (NULL-ended). */
int group_launch(struct group *g, const char *name, int workers, int allocs, bool plain, const char *const *wrapper,
		 char *const *env_extra, const char *ctl_override, bool wait);

int group_start(struct group *g, const char *name, int workers, int allocs, bool plain, const char *const *wrapper,
		char *const *env_extra, const char *ctl_override);
/* The usual one: a parent and one worker sharing 2 allocations, under the interposer. */
int group_start_pair(struct group *g, const char *name);

/* Every process of the tree rooted at pid, into pids[] (at most max). */
int tree_pids(pid_t pid, pid_t *pids, int max);
/* The processes of g's tree into pids (at most 8): how many (a failure when
 * not want). */
int group_pids(struct group *g, pid_t pids[8], int want);

/* Kill every process of the tree rooted at root, leaves first. */
void tree_kill(pid_t root);

/* Run `/bin/sh -c script` (a new session, SNAPSHOT_CONTROL_DIR=ctl, its output
 * in dir/sh.log) whose target_helpers "a" and "b" in dir must get ready.
 * Returns the shell's PID, the root of the tree. */
pid_t helpers_start(const char *dir, const char *ctl, const char *script);

/* A scratch directory e2e_root/name, made, and its control directory name/ctl. */
void e2e_scratch(const char *name, char dir[PATH_MAX], char ctl[PATH_MAX + 16]);

/* A tree of two interposed target_helpers in dir: "a" serves an allocation on
 * GPU 0, "b" imports it and holds its own on GPU 1 (for device maps). Returns
 * the shell's PID, its root. */
pid_t gpu_pair_start(const char *dir, const char *ctl);

/* A tree of two target_helpers in dir, "a" under the interposer and "b"
 * without it (partial interposition). Returns the shell's PID, its root. */
pid_t partial_tree_start(const char *dir, const char *ctl);

/* Is pid stopped (state T in /proc/PID/stat)? Waits up to timeout_ms. */
bool wait_stopped(pid_t pid, int timeout_ms);

/* Let the workload verify (restore-complete) and wait for it; returns how many
 * of its lines hold marker (one PASS line per process), or -1 when it did not
 * exit 0. */
int group_finish_counting(struct group *g, const char *marker);

/* The same for examples/vmm_group, whose processes print "PASS vmm_group". */
int group_finish(struct group *g);

void group_kill(struct group *g);

/* ---- cusnap on a running group (in place) ---- */

int group_suspend(struct group *g, const char *content, char **out, char *const *env);

int group_resume(struct group *g, char **out, char *const *env);

/* Suspend (host content) and resume in place; both must succeed (a macro, so
 * that a failure names the calling line). */
#define group_suspend_resume(g)                                       \
	do {                                                          \
		char *out_;                                           \
		CHECK_EQ(group_suspend((g), "host", &out_, NULL), 0); \
		free(out_);                                           \
		CHECK_EQ(group_resume((g), &out_, NULL), 0);          \
		free(out_);                                           \
	} while (0)

/* The workload verifies itself (want processes pass), then it is ended. */
#define group_done(g, want)                          \
	do {                                         \
		CHECK_EQ(group_finish((g)), (want)); \
		group_kill((g));                     \
	} while (0)

/* Then the workload verifies itself (2 processes pass) and is ended. */
#define group_round_trip(g)                     \
	do {                                    \
		group_suspend_resume(g);        \
		CHECK_EQ(group_finish((g)), 2); \
		group_kill((g));                \
	} while (0)

/* JSON of `cusnap inspect --pid` for the group (malloc'ed). */
char *group_inspect(struct group *g);

/* How many cuemu device-memory objects the group's processes have mapped. */
int group_device_mappings(struct group *g, const char *what);

bool contains(const char *text, const char *needle);

int count_of(const char *text, const char *needle);

/* Command a target_helper in dir; its answer must start with want. */
#define TARGET_EXPECT_DIR(dir, name, cmd, want)                                                              \
	do {                                                                                                 \
		char *got_ = test_command((dir), (name), (cmd), 20000);                                      \
		if (!got_ || strncmp(got_, (want), strlen(want)) != 0)                                       \
			test_fail(__FILE__, __LINE__, "%s: '%s' answered '%s', want '%s...'", (name), (cmd), \
				  got_ ? got_ : "(nothing)", (want));                                        \
		free(got_);                                                                                  \
	} while (0)

/* The control files a command wrote for the workload in ctl (snapshot-complete,
 * restore-complete) named in out ("" when none). */
const char *control_said(const char *ctl, char out[64]);

/* After a checkpoint that was undone, through any door (DESIGN.md §3): the
 * workload is told nothing, as a failed checkpoint tells it nothing. */
#define CHECK_NOTHING_SAID(ctl)                                                                             \
	do {                                                                                                \
		char s_[64];                                                                                \
		if (*control_said((ctl), s_))                                                               \
			test_fail(__FILE__, __LINE__, "after an undone checkpoint %s holds %s", (ctl), s_); \
	} while (0)

/* ---- CRIU restores (test_checkpoint, test_criu_plugin) ---- */

/* Reap everything that died (the dumped tree's processes come to us). */
void reap_all(void);

/* The dump ended the group: its processes waited for and reaped, so that a
 * restore finds their PIDs free. */
void group_dumped(struct group *g);

/* A checkpoint of g that exited rc (what it printed in out, freed): true once
 * its dumped processes are reaped; else a failure (the command shown) and the
 * group killed. */
bool group_dump_ok(struct group *g, int rc, char *out);

/* The restored root, from the pidfile CRIU wrote. */
pid_t restored_root(const char *dir);

/* The restored workload verifies itself (restore-complete was written by
 * cusnap restore) and exits; it is our child now (we are a subreaper). */
/* The log at path with those restores set aside before it (path.before-restore-*,
 * oldest first): everything every run of the workload wrote (malloc'ed). */
char *e2e_log_all(const char *path);
int restored_passes(struct group *g, pid_t root);

/* The tree restored from dir (its pidfile) verifies itself: want PASS lines
 * in g's log (a macro, so that a failure names the calling line). */
#define RESTORED_PASSES(g, dir, want)                               \
	do {                                                        \
		pid_t r_ = restored_root(dir);                      \
		CHECK(r_ > 0);                                      \
		if (r_ > 0)                                         \
			CHECK_EQ(restored_passes((g), r_), (want)); \
	} while (0)

/* After a restore that swapped GPUs 0 and 1 of gpu_pair_start's tree (the
 * checkpoint in ck): the creator's allocation lives on GPU 1, still shared
 * both ways; then the restored tree is killed. */
void gpu_pair_swapped(const char *dir, const char *ck);

#endif
