/* SPDX-License-Identifier: MIT */
/* Where a tree's state is kept: its state directory (given, or the default in
 * cusnap's run directory, which a note there leads to), and the rule for any
 * directory cusnap writes into or restores from as root. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/atomicfile.h"
#include "cusnap/state.h"

/* The default directory holds "state-dir", naming the directory a command was
 * given, so that `cusnap resume --pid ROOT` alone finds the state file. */
#define NOTE "state-dir"

void state_dir_of(pid_t pid, const char *given, char *out, size_t len)
{
	if (given) {
		snprintf(out, len, "%s", given);
		return;
	}
	char def[PATH_MAX], why[PATH_MAX + 128];
	run_dir_state_path(pid, def, sizeof(def));
	snprintf(out, len, "%s", def);
	/* Read only from a directory nobody else can write. */
	int dfd = dir_open_trusted(def, false, why, sizeof(why));
	int fd = dfd < 0 ? -1 : openat(dfd, NOTE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0)
		close(dfd);
	if (fd < 0)
		return;
	/* The whole file less its final newline: a directory name may hold newlines. */
	char text[PATH_MAX + 2];
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n > 1 && text[0] == '/' && text[n - 1] == '\n') {
		text[n - 1] = '\0';
		snprintf(out, len, "%s", text);
	}
}

int state_dir_begin(pid_t pid, const char *dir)
{
	char def[PATH_MAX], state[PATH_MAX + 32], why[PATH_MAX + 128];
	run_dir_state_path(pid, def, sizeof(def));
	/* An old state file would be taken for this command's if it is cut short. */
	snprintf(state, sizeof(state), "%s/" STATE_FILE, dir);
	if (unlink(state) < 0 && errno != ENOENT)
		return -errno;
	int dfd = dir_open_trusted(def, true, why, sizeof(why));
	if (dfd < 0)
		return -EACCES;
	run_dir_tag_pidns(dfd); /* (untagged, it is taken as this namespace's) */
	int rc = 0;
	if (!strcmp(def, dir)) {
		unlinkat(dfd, NOTE, 0);
	} else {
		char abs[PATH_MAX], text[PATH_MAX + 2];
		const char *step;
		if (!realpath(dir, abs)) {
			rc = -errno;
		} else {
			int n = snprintf(text, sizeof(text), "%s\n", abs);
			rc = atomic_write_at(dfd, NOTE, text, (size_t)n, 0600, &step);
		}
	}
	close(dfd);
	return rc;
}

void state_dir_end(pid_t pid, const char *dir)
{
	char def[PATH_MAX], why[PATH_MAX + 128];
	run_dir_state_path(pid, def, sizeof(def));
	int dfd = dir_open_trusted(def, false, why, sizeof(why));
	if (dfd < 0)
		return;
	unlinkat(dfd, NOTE, 0);
	if (dir && !strcmp(def, dir))
		unlinkat(dfd, STATE_FILE, 0); /* the tree runs again: nothing to resume from */
	/* When nothing but the namespace tag is left, the directory goes: nothing
	 * piles up (and a directory still holding more keeps its tag). */
	unlinkat(dfd, RUN_DIR_PIDNS_FILE, 0);
	if (rmdir(def) < 0)
		run_dir_tag_pidns(dfd);
	close(dfd);
}

/* ---- the check ---- */

int use_dir(const char *dir, bool create, int *held)
{
	char why[PATH_MAX + 160];
	if (path_ancestors_trusted(dir, why, sizeof(why)) < 0)
		return fail(EX_USAGE,
			    "%s (as ssh's StrictModes: every directory on the way owned by you or root); "
			    "nothing done",
			    why);
	int rc = create ? path_mkdirs(dir) : 0;
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "cannot create %s: %s; nothing done", dir, strerror(-rc));
	int fd = dir_open_trusted(dir, false, why, sizeof(why));
	if (fd < 0)
		return fail(EX_USAGE,
			    "%s (as ssh's StrictModes: owned by you or root, writable by no one else); nothing done",
			    why);
	if (dir_tree_trusted(fd, dir, why, sizeof(why)) < 0) {
		close(fd);
		return fail(EX_USAGE,
			    "%s: refusing to use %s (everything in it must be yours or root's, writable by no one "
			    "else: a checkpoint steers what a restore makes); nothing done",
			    why, dir);
	}
	if (!held) {
		close(fd);
		return 0;
	}
	/* One command writing or reading a checkpoint directory at a time. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		return e == EWOULDBLOCK ? fail(EX_BUSY, "%s is in use by another command; nothing done", dir)
					: fail(EX_LEFT_RUNNING, "cannot lock %s: %s; nothing done", dir, strerror(e));
	}
	*held = fd;
	return 0;
}
