/* SPDX-License-Identifier: MIT */
/* Checkpoint jobs (DESIGN.md §9; driver 590 and later, `cuda-checkpoint
 * --launch-job`; driver 610 checkpoints native legacy IPC only inside one).
 * A workload in a job carries CUDA_CHECKPOINT_JOB_FILE in its environment;
 * cusnap names the same file in its own environment for its driver calls (it
 * joins the job), takes the job's order (freeze.c), copies the file into
 * the checkpoint once every process is CHECKPOINTED (the driver writes to it
 * while it checkpoints) and writes that copy back before the native restore.
 *
 * The file belongs to the workload: it is opened only as the workload named
 * it (its /proc/self/fd/N through /proc/PID/fd/N, a path inside its own root),
 * must be a regular file of the workload's user, and is only ever rewritten in
 * place through a descriptor, never created or replaced. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"

#define JOB_MAX (64u << 20) /* bytes: a job file larger than this is not one */

/* What process pid's CONTROL_JOB_ENV value names, as a path from here. 0, or -1 with why. */
static int resolve(pid_t pid, const char *value, char *out, size_t len, char *why, size_t wlen)
{
	unsigned fd;
	char tail;
	int w;
	if (sscanf(value, "/proc/self/fd/%u%c", &fd, &tail) == 1)
		w = snprintf(out, len, "/proc/%d/fd/%u", (int)pid, fd);
	else if (value[0] == '/')
		w = snprintf(out, len, "/proc/%d/root%s", (int)pid, value);
	else
		w = -1;
	if (w < 0 || (size_t)w >= len) {
		snprintf(why, wlen, "%s=%s of process %d is not an absolute path", CONTROL_JOB_ENV, value, (int)pid);
		return -1;
	}
	return 0;
}

/* The job file open for mode (O_RDONLY or O_WRONLY): a regular file, of the
 * user of the process that named it (any when the caller named it). A
 * descriptor, or -1 with why. */
static int job_open(const struct job *j, int mode, char *why, size_t len)
{
	/* A descriptor link (/proc/PID/fd/N) must be followed; a path in the
	 * workload's root must not end in a symlink. */
	bool link = !strncmp(j->path, "/proc/", 6) && strstr(j->path, "/fd/");
	int fd = open(j->path, mode | O_CLOEXEC | O_NONBLOCK | (link ? 0 : O_NOFOLLOW));
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, len, "job file %s: %s", j->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* Named by the workload: its user's file. Named on the command line: the
	 * caller's or the workload's user's, never a third user's (cusnap writes
	 * the copy back into it). */
	long uid = j->owner ? proc_status_field("/proc", j->owner, "Uid") : j->uid;
	bool owner_ok = (long)st.st_uid == uid || (!j->owner && st.st_uid == geteuid());
	const char *bad = !S_ISREG(st.st_mode)          ? "is not a regular file"
			  : !owner_ok && j->owner       ? "is not owned by the workload's user"
			  : !owner_ok                   ? "is owned by neither you nor the workload's user"
			  : st.st_size > (off_t)JOB_MAX ? "is too large to be a job file"
							: NULL;
	if (bad) {
		snprintf(why, len, "job file %s %s", j->path, bad);
		close(fd);
		return -1;
	}
	return fd;
}

int job_find(struct job *j, const struct proc *procs, size_t n, const char *given, char *why, size_t len)
{
	memset(j, 0, sizeof(*j));
	char value[4096] = "";
	if (given) {
		if (given[0] != '/') {
			snprintf(why, len, "--job-file %s: give an absolute path", given);
			return -1;
		}
		snprintf(j->path, sizeof(j->path), "%s", given);
		j->uid = n ? proc_status_field("/proc", procs[0].pid, "Uid") : -1;
	} else {
		for (size_t i = 0; i < n && !j->owner; i++)
			if (proc_environ_get(procs[i].pid, CONTROL_JOB_ENV, value, sizeof(value)) && value[0])
				j->owner = procs[i].pid;
		if (!j->owner)
			return 0; /* no job */
		if (resolve(j->owner, value, j->path, sizeof(j->path), why, len) < 0)
			return -1;
	}
	int fd = job_open(j, O_RDONLY, why, len);
	if (fd < 0) {
		j->path[0] = '\0';
		return -1;
	}
	close(fd);
	/* Joined: the driver sees the job in cusnap's own environment. */
	setenv(CONTROL_JOB_ENV, j->path, 1);
	char from[64] = "";
	if (j->owner)
		snprintf(from, sizeof(from), " (named in the environment of process %d)", (int)j->owner);
	voice(VOICE_INFO, "checkpoint job %s%s: one process at a time, in the job's order", j->path, from);
	return 0;
}

/* The whole of fd (at most JOB_MAX bytes): malloc'ed, its length in *n; NULL on error. */
static char *slurp(int fd, size_t *n)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return NULL;
	size_t cap = (size_t)st.st_size + 1;
	char *buf = malloc(cap);
	*n = 0;
	for (ssize_t got = 1; buf && got > 0 && *n < cap;) {
		got = pread(fd, buf + *n, cap - *n, (off_t)*n);
		*n += got > 0 ? (size_t)got : 0;
		if (got < 0) {
			free(buf);
			buf = NULL;
		}
	}
	return buf;
}

int job_save(const struct job *j, int dirfd, const char *dir, char *why, size_t len)
{
	if (!j->path[0])
		return 0;
	int fd = job_open(j, O_RDONLY, why, len);
	if (fd < 0)
		return -1;
	size_t n;
	char *data = slurp(fd, &n);
	close(fd);
	const char *step = "read";
	int rc = !data       ? -EIO
		 : dirfd > 0 ? atomic_write_at(dirfd, JOB_COPY, data, n, 0600, &step)
			     : atomic_write(dir, JOB_COPY, data, n, 0600, &step);
	free(data);
	if (rc < 0) {
		snprintf(why, len, "copying the job file %s into %s: %s failed: %s", j->path, dir, step, strerror(-rc));
		return -1;
	}
	progress("job file", 0, "%zu bytes copied into %s/" JOB_COPY, n, dir);
	return 0;
}

int job_put_back(const struct job *j, int dirfd, const char *dir, char *why, size_t len)
{
	if (!j->path[0] || !dir)
		return 0;
	char copy[4200];
	snprintf(copy, sizeof(copy), "%s/" JOB_COPY, dir);
	int in = dirfd > 0 ? openat(dirfd, JOB_COPY, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
			   : open(copy, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return 0; /* none saved (a tree never checkpointed with its job) */
	size_t n;
	char *data = slurp(in, &n);
	close(in);
	int out = data ? job_open(j, O_WRONLY, why, len) : -1;
	int rc = out < 0 ? -1 : 0;
	if (out >= 0 && (ftruncate(out, 0) < 0 || io_write_all(out, data, n) < 0)) {
		snprintf(why, len, "writing the job file %s back: %s", j->path, strerror(errno));
		rc = -1;
	}
	if (!data)
		snprintf(why, len, "reading %s: %s", copy, strerror(errno));
	if (out >= 0)
		close(out);
	free(data);
	return data ? rc : -1;
}

void job_forget(int dirfd, const char *dir)
{
	if (dirfd > 0) {
		unlinkat(dirfd, JOB_COPY, 0);
		return;
	}
	int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (dfd >= 0) {
		unlinkat(dfd, JOB_COPY, 0);
		close(dfd);
	}
}

int job_launch(char *why, size_t len)
{
	/* Inherited by the program and everything it starts (no close-on-exec). */
	int fd = memfd_create("cuda-checkpoint-job", 0);
	if (fd < 0) {
		snprintf(why, len, "cannot make a job file: memfd_create: %s", strerror(errno));
		return -1;
	}
	char value[64];
	snprintf(value, sizeof(value), "/proc/self/fd/%d", fd);
	setenv(CONTROL_JOB_ENV, value, 1);
	return 0;
}
