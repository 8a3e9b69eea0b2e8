/* SPDX-License-Identifier: MIT */
/* Trusted directories, the run directory and the per-process command lock
 * (include/cusnap/rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"
#include "cusnap/paths.h"
#include "cusnap/proc.h"
#include "cusnap/rundir.h"

int dir_open_trusted(const char *path, bool create, char *why, size_t len)
{
	if (create && mkdir(path, 0700) < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, len, "%s: %s", path,
			 errno == ELOOP || errno == ENOTDIR ? "not a directory (a symlink is refused)"
							    : strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
	} else if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(why, len, "%s is owned by uid %u, not by uid %u or root: refusing to use it", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, len, "%s is writable by %s (mode %04o): refusing to use it", path,
			 st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
	} else {
		return fd;
	}
	close(fd);
	return -1;
}

/* How deep dir_tree_trusted goes (a checkpoint directory is 2 deep). */
#define TREE_TRUST_DEPTH 16

static int tree_trusted_at(int dirfd, const char *path, int depth, char *why, size_t len)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	rewinddir(d);
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		struct stat st;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue; /* (gone meanwhile) */
			snprintf(why, len, "%s/%s: %s", path, e->d_name, strerror(errno));
			rc = -1;
		} else if (st.st_uid != geteuid() && st.st_uid != 0) {
			snprintf(why, len, "%s/%s is owned by uid %u, not by uid %u or root", path, e->d_name,
				 (unsigned)st.st_uid, (unsigned)geteuid());
			rc = -1;
		} else if (!S_ISLNK(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH))) {
			snprintf(why, len, "%s/%s is writable by %s (mode %04o)", path, e->d_name,
				 st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
			rc = -1;
		} else if (S_ISDIR(st.st_mode)) {
			char sub[PATH_MAX];
			int sfd = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
			if (sfd < 0)
				rc = (snprintf(why, len, "%s: %s", sub, strerror(errno)), -1);
			else if (depth >= TREE_TRUST_DEPTH)
				rc = (snprintf(why, len, "%s: deeper than %d directories", sub, TREE_TRUST_DEPTH), -1);
			else
				rc = tree_trusted_at(sfd, sub, depth + 1, why, len);
			if (sfd >= 0)
				close(sfd);
		}
	}
	closedir(d);
	return rc;
}

int dir_tree_trusted(int dirfd, const char *path, char *why, size_t len)
{
	return tree_trusted_at(dirfd, path, 0, why, len);
}

/* Root's run directory is 0711: the owner of a tree can look up (never list)
 * root's lock of its processes by name, so that root's and the owner's
 * commands exclude each other. */
static void run_dir_open_to_lookup(const char *dir)
{
	struct stat st;
	if (geteuid() == 0 && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
	    (st.st_mode & 07777) == 0700)
		chmod(dir, 0711);
}

/* One component on the way to a trusted directory: owned by the caller or
 * root (a symlink too), and a directory writable by others only with the
 * sticky bit (/tmp). 0, or -1 with why. */
static int component_trusted(const char *p, const struct stat *st, char *why, size_t len)
{
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(why, len, "%s (%s on the way) is owned by uid %u, not by uid %u or root: refusing to use it",
			 p, S_ISLNK(st->st_mode) ? "a symlink" : "a directory", (unsigned)st->st_uid,
			 (unsigned)geteuid());
		return -1;
	}
	if (S_ISDIR(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
		snprintf(why, len,
			 "%s (on the way) is writable by %s without the sticky bit (mode %04o): refusing to use it", p,
			 st->st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st->st_mode & 07777));
		return -1;
	}
	return 0;
}

/* Every existing component of path, as written (lstat: symlinks themselves). */
static int components_trusted(const char *path, char *why, size_t len)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		snprintf(why, len, "%.64s...: path too long", path);
		return -1;
	}
	size_t n = strlen(buf);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char c = buf[i];
		buf[i] = '\0';
		struct stat st;
		int r = lstat(buf, &st);
		if (r < 0 && errno == ENOENT)
			return 0; /* from here on cusnap makes it, 0700 */
		if (r < 0) {
			snprintf(why, len, "%s: %s", buf, strerror(errno));
			return -1;
		}
		if (component_trusted(buf, &st, why, len) < 0)
			return -1;
		buf[i] = c;
	}
	return 0;
}

int path_ancestors_trusted(const char *path, char *why, size_t len)
{
	if (components_trusted(path, why, len) < 0)
		return -1;
	/* And where the symlinks it went through (its owner's or root's) lead:
	 * the existing part resolved. */
	char part[PATH_MAX], real[PATH_MAX];
	snprintf(part, sizeof(part), "%s", path);
	while (!realpath(part, real)) {
		char *slash = strrchr(part, '/');
		if (errno != ENOENT || !slash || slash == part)
			return 0;
		*slash = '\0';
	}
	return components_trusted(real, why, len);
}

/* The default state directories in the run directory: made and parsed here only. */
#define STATE_DIR_PREFIX "suspend-"

void run_dir_state_path(pid_t pid, char *out, size_t len)
{
	char run[PATH_MAX - 32];
	run_dir_path(run, sizeof(run));
	snprintf(out, len, "%s/" STATE_DIR_PREFIX "%d", run, (int)pid);
}

/* This process's PID namespace as its link reads ("pid:[4026531836]"), or "". */
static void own_pidns(char *out, size_t len)
{
	ssize_t n = readlink("/proc/self/ns/pid", out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

int run_dir_tag_pidns(int dfd)
{
	char ns[64], text[80];
	own_pidns(ns, sizeof(ns));
	if (!ns[0])
		return -ENOENT;
	int n = snprintf(text, sizeof(text), "%s\n", ns);
	const char *step;
	return atomic_write_at(dfd, RUN_DIR_PIDNS_FILE, text, (size_t)n, 0600, &step);
}

/* Was state directory name of dirfd made in PID namespace ours (own_pidns)?
 * An untagged one is taken as ours (made before the tag existed). */
static bool same_pidns(int dirfd, const char *name, const char *ours)
{
	char path[NAME_MAX + sizeof("/" RUN_DIR_PIDNS_FILE) + 1], theirs[80];
	snprintf(path, sizeof(path), "%s/" RUN_DIR_PIDNS_FILE, name);
	int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	ssize_t n = read(fd, theirs, sizeof(theirs) - 1);
	close(fd);
	theirs[n > 0 ? n : 0] = '\0';
	theirs[strcspn(theirs, "\n")] = '\0';
	return ours[0] && !strcmp(theirs, ours);
}

void run_dir_path(char *out, size_t len)
{
	const char *env = getenv("CUSNAP_RUN_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
	if (env && *env)
		snprintf(out, len, "%s", env);
	else if (geteuid() == 0)
		snprintf(out, len, "/run/cusnap");
	else if (xdg && *xdg)
		snprintf(out, len, "%s/cusnap", xdg);
	else
		snprintf(out, len, "/tmp/cusnap-%u", (unsigned)geteuid());
}

/* "proc-PID-START.lock": a pid reused by another process names another file. */
static int lock_name(const char *proc, pid_t pid, char out[64])
{
	char path[PATH_MAX], buf[1024];
	snprintf(path, sizeof(path), "%s/%d/stat", proc, (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	/* After "(comm)": state is field 3, starttime field 22. */
	const char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -EINVAL;
	snprintf(out, 64, "proc-%d-%llu.lock", (int)pid, strtoull(p + 1, NULL, 10));
	return 0;
}

static void read_holder(int fd, char *out, size_t len)
{
	ssize_t n = pread(fd, out, len - 1, 0);
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	if (!out[0])
		snprintf(out, len, "another command");
}

/* A directory stream over descriptor fd (taken: closed on failure), or NULL. */
static DIR *dir_stream(int fd)
{
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d && fd >= 0)
		close(fd);
	return d;
}

/* Remove directory name of dirfd and the files in it (no deeper). */
static void remove_flat_dir(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dir_stream(fd);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(fd, e->d_name, 0);
	closedir(d);
	unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* Is an flock held on the file open at fd? (defined below) */
static bool flock_held(int fd);

/* What processes that no longer exist left behind (a holder killed before it
 * could remove its own lock, a suspended tree killed instead of resumed):
 * removed, so that nothing piles up. A live process's lock file is named after
 * its start time, so a dead one's is never locked again; the state of a tree
 * whose root is gone cannot be resumed. What a command in another PID
 * namespace made (the run directory shared with a container, a suite's
 * namespaces) names PIDs this /proc does not show: its state directory is
 * tagged with its namespace and left alone, and no lock still held is removed. */
static void sweep_stale(int dirfd, const char *proc)
{
	DIR *d = dir_stream(fcntl(dirfd, F_DUPFD_CLOEXEC, 0));
	if (!d)
		return;
	char ours[64];
	own_pidns(ours, sizeof(ours));
	struct dirent *e;
	while ((e = readdir(d))) {
		int pid;
		unsigned long long start;
		char now[64], tail;
		if (sscanf(e->d_name, STATE_DIR_PREFIX "%d%c", &pid, &tail) == 1 && pid > 0) {
			if (!proc_is_process(proc, pid) && same_pidns(dirfd, e->d_name, ours))
				remove_flat_dir(dirfd, e->d_name);
			continue;
		}
		if (sscanf(e->d_name, "proc-%d-%llu.loc%c", &pid, &start, &tail) != 3 || tail != 'k')
			continue;
		if (lock_name(proc, pid, now) == 0 && strcmp(now, e->d_name) == 0)
			continue;
		int fd = openat(dirfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		bool held = fd >= 0 && flock_held(fd);
		if (fd >= 0)
			close(fd);
		if (!held)
			unlinkat(dirfd, e->d_name, 0);
	}
	closedir(d);
}

/* The run directories of the other party that may hold a lock of pid: for
 * root, its owner's (/run/user/UID/cusnap, /tmp/cusnap-UID); for a user, root's
 * (/run/cusnap). Returns how many were written into dirs. */
static int peer_run_dirs(const char *proc, pid_t pid, char dirs[2][64])
{
	if (geteuid() != 0) {
		snprintf(dirs[0], 64, "/run/cusnap");
		return 1;
	}
	long uid = proc_status_field(proc, pid, "Uid");
	if (uid <= 0)
		return 0;
	snprintf(dirs[0], 64, "/run/user/%ld/cusnap", uid);
	snprintf(dirs[1], 64, "/tmp/cusnap-%ld", uid);
	return 2;
}

/* Does a command of the other party (root, or the tree's owner) hold the lock
 * of pid in its run directory? Then true, and who into out. Only looked up,
 * never created or written: the directory is not ours. */
static bool peer_holder(const char *proc, pid_t pid, char *out, size_t len)
{
	char dirs[2][64], name[64];
	int nd = peer_run_dirs(proc, pid, dirs);
	if (lock_name(proc, pid, name) < 0)
		return false;
	char own[PATH_MAX];
	run_dir_path(own, sizeof(own));
	for (int i = 0; i < nd; i++) {
		if (!strcmp(dirs[i], own))
			continue;
		int dfd = open(dirs[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int fd = dfd < 0 ? -1 : openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (dfd >= 0)
			close(dfd);
		struct stat st;
		bool held = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock_held(fd);
		if (fd >= 0)
			close(fd);
		if (held) {
			snprintf(out, len, "a command of %s (its lock %s/%s)", geteuid() ? "root" : "the tree's owner",
				 dirs[i], name);
			return true;
		}
	}
	return false;
}

int tree_lock_take(struct tree_lock *l, const char *proc, const pid_t *pids, size_t n, const char *holder, char *err,
		   size_t errlen)
{
	*l = (struct tree_lock){.dirfd = -1};
	char dir[PATH_MAX];
	run_dir_path(dir, sizeof(dir));
	l->dirfd = dir_open_trusted(dir, true, err, errlen);
	run_dir_open_to_lookup(dir);
	l->fds = calloc(n ? n : 1, sizeof(*l->fds));
	l->names = calloc(n ? n : 1, sizeof(*l->names));
	if (l->dirfd < 0) {
		tree_lock_release(l);
		return -EACCES;
	}
	if (!l->fds || !l->names) {
		snprintf(err, errlen, "out of memory");
		tree_lock_release(l);
		return -ENOMEM;
	}
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		char *name = l->names[l->n];
		if (lock_name(proc, pids[i], name) < 0)
			continue; /* gone: nothing to hold */
		for (;;) {
			int fd = openat(l->dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd < 0) {
				rc = -errno;
				snprintf(err, errlen, "cannot open the lock %s/%s: %s", dir, name, strerror(errno));
				break;
			}
			if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
				rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
				char who[256];
				read_holder(fd, who, sizeof(who));
				if (rc == -EBUSY)
					snprintf(err, errlen,
						 "process %d is held by %s: one command per tree at a time",
						 (int)pids[i], who);
				else
					snprintf(err, errlen, "cannot lock %s/%s: %s", dir, name, strerror(-rc));
				close(fd);
				break;
			}
			/* Still the file the name links? (Its last holder unlinks it on release.) */
			struct stat a, b;
			if (fstat(fd, &a) == 0 && fstatat(l->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
			    a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
				char text[512], since[32];
				time_t now = time(NULL);
				struct tm tm;
				strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
				int len = snprintf(text, sizeof(text), "%s (pid %d, since %s)\n", holder, (int)getpid(),
						   since);
				if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)len, 0) != len)
					(void)0; /* the text only names the holder */
				l->fds[l->n++] = fd;
				break;
			}
			close(fd);
		}
	}
	/* Root and the tree's owner keep their locks in different run directories:
	 * each takes its own, then looks for the other's (whichever of two racing
	 * commands looks second sees the first's lock). */
	for (size_t i = 0; i < n && rc == 0; i++) {
		char who[PATH_MAX + 128];
		if (peer_holder(proc, pids[i], who, sizeof(who))) {
			rc = -EBUSY;
			snprintf(err, errlen, "process %d is held by %s: one command per tree at a time", (int)pids[i],
				 who);
		}
	}
	if (rc)
		tree_lock_release(l);
	else
		sweep_stale(l->dirfd, proc);
	return rc;
}

void tree_lock_release(struct tree_lock *l)
{
	for (size_t i = 0; i < l->n; i++) {
		unlinkat(l->dirfd, l->names[i], 0);
		close(l->fds[i]);
	}
	if (l->dirfd >= 0)
		close(l->dirfd);
	free(l->fds);
	free(l->names);
	*l = (struct tree_lock){.dirfd = -1};
}

void tree_lock_hand_over(struct tree_lock *l)
{
	for (size_t i = 0; i < l->n; i++)
		close(l->fds[i]);
	l->n = 0;
	tree_lock_release(l);
}

/* Is an flock held on the file open at fd? (/proc/locks, read only: asking
 * with a lock of our own could make a command starting that instant refuse.) */
static bool flock_held(int fd)
{
	struct stat st;
	FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
	if (!f)
		return false;
	char line[256];
	bool held = false;
	while (!held && fgets(line, sizeof(line), f)) {
		char type[16];
		unsigned maj, min;
		unsigned long ino;
		/* "1: FLOCK  ADVISORY  WRITE 123 fd:01:4567 0 EOF" (waiters read "1: -> FLOCK ...") */
		if (sscanf(line, "%*d: %15s %*s %*s %*d %x:%x:%lu", type, &maj, &min, &ino) == 4)
			held = !strcmp(type, "FLOCK") && ino == (unsigned long)st.st_ino && maj == major(st.st_dev) &&
			       min == minor(st.st_dev);
	}
	fclose(f);
	return held;
}

bool tree_lock_holder(const char *proc, pid_t pid, char *out, size_t len)
{
	if (peer_holder(proc, pid, out, len))
		return true;
	char dir[PATH_MAX], name[64], why[PATH_MAX + 128];
	run_dir_path(dir, sizeof(dir));
	int dirfd = dir_open_trusted(dir, false, why, sizeof(why));
	if (dirfd < 0 || lock_name(proc, pid, name) < 0) {
		if (dirfd >= 0)
			close(dirfd);
		return false;
	}
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dirfd);
	if (fd < 0)
		return false;
	bool held = flock_held(fd);
	if (held)
		read_holder(fd, out, len);
	close(fd);
	return held;
}
