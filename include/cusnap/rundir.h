/* SPDX-License-Identifier: MIT */
/* Directories cusnap writes into as root beside other users (DESIGN.md §9,
 * §12): the rule every directory it trusts follows (ssh's StrictModes), its own
 * run directory, and one command per tree (an flock per process there, which
 * the kernel drops when the holder dies). */
#ifndef CUSNAP_RUNDIR_H
#define CUSNAP_RUNDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Open directory path (made 0700 first when create and it is missing; its
 * parents must exist), refusing a symlink, a directory owned by another user
 * than the caller or root, and one writable by group or others. Returns the
 * descriptor, or -1 with why. */
int dir_open_trusted(const char *path, bool create, char *why, size_t len);

/* Everything inside the directory open at dirfd (path names it in why),
 * every file, directory and symlink at any depth, owned by the caller or root
 * and (but a symlink) writable by no one else: what a checkpoint directory
 * holds steers a restore run as root (CRIU's images name the credentials of
 * the processes it makes), so nothing in it may be a stranger's, as ssh
 * checks authorized_keys itself. 0, or -1 with why naming the first entry
 * that is not. */
int dir_tree_trusted(int dirfd, const char *path, char *why, size_t len);

/* ssh's StrictModes for every component on the way to path: each existing
 * one (a symlink too, and each where symlinks lead) owned by the caller or
 * root, a directory writable by others only with the sticky bit. 0, or -1
 * with why. */
int path_ancestors_trusted(const char *path, char *why, size_t len);

/* cusnap's run directory: /run/cusnap for root, else $XDG_RUNTIME_DIR/cusnap or
 * /tmp/cusnap-UID; CUSNAP_RUN_DIR names another (tests). */
void run_dir_path(char *out, size_t len);
/* The private default state directory of the tree of pid, in the run
 * directory (removed by its sweep once pid is gone). */
void run_dir_state_path(pid_t pid, char *out, size_t len);
/* The file in a default state directory naming the PID namespace its PID is
 * of (this process's: /proc/self/ns/pid's link), so that a command in another
 * PID namespace sharing the run directory never takes it for a dead tree's. */
#define RUN_DIR_PIDNS_FILE "pid-namespace"
/* Write it into the directory open at dfd. 0 or -errno. */
int run_dir_tag_pidns(int dfd);

/* The locks one command holds on the processes of a tree. */
struct tree_lock {
	int dirfd;
	size_t n;
	int *fds;
	char (*names)[64];
};

/* Take the lock of every process in pids (as seen in proc, the proc mount: "/proc"),
 * without waiting; holder says who takes it ("cusnap suspend --pid 12"), for
 * the refusal another command prints. Returns 0; -EBUSY when another command
 * holds one (err names it and the process); another -errno with err. On a
 * failure nothing is held. A process that is gone is skipped. */
int tree_lock_take(struct tree_lock *l, const char *proc, const pid_t *pids, size_t n, const char *holder, char *err,
		   size_t errlen);
void tree_lock_release(struct tree_lock *l);
/* The lock passes to a process forked while it was held (it shares the open
 * files, and the flocks with them): closed here, the files left in place. */
void tree_lock_hand_over(struct tree_lock *l);
/* Does a command hold the lock of pid? Then true, and who into out. */
bool tree_lock_holder(const char *proc, pid_t pid, char *out, size_t len);

#endif
