/* SPDX-License-Identifier: MIT */
/* The regular files a tree has open for writing (its logs), so that one
 * checkpoint can be restored many times (DESIGN.md §9.2). CRIU records each
 * such file's size at the dump and refuses a restore where the file has another
 * size ("File ... has bad size"): a log the first restored tree wrote to stops
 * every later restore. The checkpoint records them (path, owner, size); before
 * CRIU restores anything, a file grown since is set aside whole (renamed
 * "NAME.before-restore-TIME") and NAME made again with the bytes it had at the
 * checkpoint, as its owner (never root in someone else's directory); a file
 * shorter than it was, or gone, is named and the restore refused. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"
#include "cusnap/json.h"
#include "internal.h"

static unsigned long mnt_ns(pid_t pid)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), pid ? "/proc/%d/ns/mnt" : "/proc/self/ns/mnt", (int)pid);
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* fd of pid open for writing? Its fdinfo flags' access mode. */
static bool open_to_write(pid_t pid, const char *fd)
{
	char path[320], line[128];
	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
	FILE *f = fopen(path, "re");
	unsigned long flags = 0;
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = sscanf(line, "flags: %lo", &flags) == 1;
	if (f)
		fclose(f);
	return found && (flags & O_ACCMODE) != O_RDONLY;
}

static int add(struct written_files *w, const char *path, const struct stat *st)
{
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->f[i].path, path))
			return 0;
	struct written_file *g = realloc(w->f, (w->n + 1) * sizeof(*g));
	if (!g)
		return -ENOMEM;
	w->f = g;
	struct written_file *f = &w->f[w->n++];
	snprintf(f->path, sizeof(f->path), "%s", path);
	f->uid = st->st_uid, f->gid = st->st_gid, f->size = (unsigned long long)st->st_size;
	return 0;
}

int written_files_of(const struct proc *procs, size_t nprocs, struct written_files *w)
{
	memset(w, 0, sizeof(*w));
	unsigned long here = mnt_ns(0);
	for (size_t p = 0; p < nprocs; p++) {
		if (mnt_ns(procs[p].pid) != here)
			continue; /* (a container's files: its own root, restored by its runtime) */
		char dir[64];
		snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)procs[p].pid);
		DIR *d = opendir(dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char link[320], target[PATH_MAX];
			struct stat st;
			snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0 || target[0] != '/' || stat(link, &st) != 0 || !S_ISREG(st.st_mode))
				continue;
			target[n] = '\0';
			if (strstr(target, " (deleted)") || !open_to_write(procs[p].pid, e->d_name))
				continue; /* (CRIU carries a deleted file's bytes itself) */
			if (add(w, target, &st) < 0) {
				closedir(d);
				return -ENOMEM;
			}
		}
		if (d)
			closedir(d);
	}
	return 0;
}

void written_files_sized(struct written_files *w)
{
	for (size_t i = 0; i < w->n; i++) {
		struct stat st;
		if (lstat(w->f[i].path, &st) == 0)
			w->f[i].size = (unsigned long long)st.st_size;
	}
}

json_t *written_files_json(const struct written_files *w)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < w->n; i++)
		json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:I}", "path", w->f[i].path, "uid",
						   (json_int_t)w->f[i].uid, "gid", (json_int_t)w->f[i].gid, "size",
						   (json_int_t)w->f[i].size));
	return a;
}

void written_files_free(struct written_files *w)
{
	free(w->f);
	memset(w, 0, sizeof(*w));
}

/* In a child with the file owner's credentials: path back to want bytes, the
 * grown file set aside whole as aside. Exit 0 done or nothing to do, 2 shorter
 * or gone, 1 failed (errno's text on stderr). */
static int put_back_as_owner(const char *path, unsigned long long want, const char *aside)
{
	int in = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (in < 0 || fstat(in, &st) != 0)
		return 2;
	if ((unsigned long long)st.st_size == want)
		return 0;
	if ((unsigned long long)st.st_size < want || !S_ISREG(st.st_mode))
		return 2;
	/* (never over an earlier restore's: NAME.before-restore-TIME, then -TIME.1, ...) */
	char name[PATH_MAX + 64];
	int rc = -1;
	for (int k = 0; rc != 0 && k < 1000; k++) {
		snprintf(name, sizeof(name), k ? "%s.%d" : "%s", aside, k);
		rc = renameat2(AT_FDCWD, path, AT_FDCWD, name, RENAME_NOREPLACE);
		if (rc != 0 && errno != EEXIST)
			return 1;
	}
	if (rc != 0)
		return 1;
	printf("%s\n", name);
	fflush(stdout);
	int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777);
	if (out < 0)
		return 1;
	static char buf[1 << 16];
	for (unsigned long long done = 0; done < want;) {
		size_t len = want - done < sizeof(buf) ? (size_t)(want - done) : sizeof(buf);
		ssize_t n = pread(in, buf, len, (off_t)done);
		if (n <= 0 || io_write_all(out, buf, (size_t)n) < 0)
			return 1;
		done += (unsigned long long)n;
	}
	return close(out) == 0 ? 0 : 1;
}

/* In a child with credentials uid and gid (when root), fn(arg) its exit
 * status, its stdout into out (len; "" when none). The exit status, or -1. */
static int as_owner(unsigned uid, unsigned gid, int (*fn)(const void *arg), const void *arg, char *out, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		if (dup2(p[1], STDOUT_FILENO) < 0 ||
		    (geteuid() == 0 &&
		     (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)))
			_exit(1);
		_exit(fn(arg));
	}
	close(p[1]);
	ssize_t got = pid > 0 ? read(p[0], out, len - 1) : -1;
	close(p[0]);
	out[got > 0 ? got : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

struct grown {
	const char *path, *aside;
	unsigned long long want;
};

static int put_back_child(const void *arg)
{
	const struct grown *g = arg;
	return put_back_as_owner(g->path, g->want, g->aside);
}

/* One recorded file made ready (set aside: added to done): 0, or -1 with why. */
static int file_ready(const char *path, unsigned uid, unsigned gid, unsigned long long want, struct set_aside *done,
		      char *why, size_t len)
{
	struct stat st;
	if (lstat(path, &st) == 0 && (unsigned long long)st.st_size == want)
		return 0;
	char base[PATH_MAX + 64], aside[PATH_MAX + 64];
	snprintf(base, sizeof(base), "%s.before-restore-%lld", path, (long long)time(NULL));
	struct grown g = {path, base, want};
	int status = as_owner(uid, gid, put_back_child, &g, aside, sizeof(aside));
	if (aside[0]) { /* (set aside, whatever came after: put back if the restore fails) */
		struct set_aside_file *f = realloc(done->f, (done->n + 1) * sizeof(*f));
		if (f) {
			done->f = f;
			f = &done->f[done->n++];
			snprintf(f->path, sizeof(f->path), "%s", path);
			snprintf(f->aside, sizeof(f->aside), "%s", aside);
			f->uid = uid;
			f->gid = gid;
		}
	}
	if (status < 0 || status == 1) {
		snprintf(why, len,
			 "%s, which the tree had open for writing, has grown since the checkpoint and could "
			 "not be set aside (as uid %u)",
			 path, uid);
		return -1;
	}
	if (status == 2) {
		snprintf(why, len,
			 "%s, which the tree had open for writing, is %s (the checkpoint's was %llu bytes): CRIU "
			 "restores only the file it dumped; put it back",
			 path, lstat(path, &st) != 0 ? "gone" : "shorter than it was", want);
		return -1;
	}
	if (aside[0])
		progress("written files", 0,
			 "%s had grown since the checkpoint: set aside as %s, made again with its %llu bytes of then",
			 path, aside, want);
	return 0;
}

static int rename_child(const void *arg)
{
	const struct set_aside_file *f = arg;
	return rename(f->aside, f->path) == 0 ? 0 : 1;
}

/* Those of done from first on put back, the last set aside first; done keeps
 * the ones before. */
static void put_back_from(struct set_aside *done, size_t first)
{
	char out[8];
	for (size_t i = done->n; i-- > first;) {
		const struct set_aside_file *f = &done->f[i];
		if (as_owner(f->uid, f->gid, rename_child, f, out, sizeof(out)) == 0)
			voice(VOICE_INFO, "%s put back as it had grown (the restore failed)", f->path);
		else
			voice(VOICE_WARN,
			      "%s could not be put back in its place: it stays %s, and %s holds the "
			      "checkpoint's bytes",
			      f->path, f->aside, f->path);
	}
	done->n = first;
}

int written_files_ready(const json_t *rec, struct set_aside *done, char *why, size_t len)
{
	size_t first = done->n;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < json_array_size(rec); i++) {
		const json_t *o = json_array_get(rec, i);
		const char *path = json_member_string(o, "path");
		double size = json_member_number(o, "size", -1), uid = json_member_number(o, "uid", -1),
		       gid = json_member_number(o, "gid", -1);
		if (!path || path[0] != '/' || size < 0 || uid < 0 || gid < 0)
			rc = -1, snprintf(why, len, "the manifest's record of the files the tree wrote is malformed");
		else
			rc = file_ready(path, (unsigned)uid, (unsigned)gid, (unsigned long long)size, done, why, len);
	}
	if (rc < 0)
		put_back_from(done, first); /* (this call's) */
	return rc;
}

void written_files_put_back(struct set_aside *done)
{
	put_back_from(done, 0);
	free(done->f);
	memset(done, 0, sizeof(*done));
}
