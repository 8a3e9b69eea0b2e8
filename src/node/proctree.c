/* SPDX-License-Identifier: MIT */
/* Process trees from /proc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

pid_t proc_nspid(pid_t pid)
{
	return (pid_t)proc_status_inner("/proc", pid, "NSpid");
}

pid_t proc_tgid(pid_t pid)
{
	return (pid_t)proc_status_field("/proc", pid, "Tgid");
}

bool proc_is_self_or_ancestor(pid_t pid)
{
	for (pid_t p = getpid(); p > 0;) {
		if (p == pid)
			return true;
		long pp = proc_status_field("/proc", p, "PPid");
		if (pp <= 0 || pp == p)
			break;
		p = (pid_t)pp;
	}
	return false;
}

/* Append the children of every thread of pid. */
static int children(pid_t pid, pid_t **list, size_t *n, size_t *cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char cpath[320];
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		FILE *f = fopen(cpath, "re");
		if (!f)
			continue;
		int c;
		while (fscanf(f, "%d", &c) == 1) {
			if (*n == *cap) {
				*cap = *cap ? *cap * 2 : 16;
				pid_t *g = realloc(*list, *cap * sizeof(**list));
				if (!g) {
					fclose(f);
					closedir(d);
					return -ENOMEM;
				}
				*list = g;
			}
			(*list)[(*n)++] = c;
		}
		fclose(f);
	}
	closedir(d);
	return 0;
}

ssize_t proc_tree(pid_t root, struct proc **out)
{
	if (!proc_state(root, NULL))
		return -ESRCH;
	pid_t *pids = malloc(16 * sizeof(*pids));
	size_t n = 0, cap = 16;
	if (!pids)
		return -ENOMEM;
	pids[n++] = root;
	/* Breadth first: pids[] is also the queue. */
	for (size_t i = 0; i < n; i++) {
		int rc = children(pids[i], &pids, &n, &cap);
		if (rc == -ENOMEM) {
			free(pids);
			return rc;
		}
	}
	struct proc *p = calloc(n, sizeof(*p));
	if (!p) {
		free(pids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		p[i].pid = pids[i];
		p[i].nspid = proc_nspid(pids[i]);
		p[i].state = -1;
	}
	free(pids);
	*out = p;
	return (ssize_t)n;
}

void proc_tree_kill(pid_t root, bool reap)
{
	struct proc *procs = NULL;
	ssize_t n = proc_tree(root, &procs);
	for (ssize_t i = n - 1; i >= 0; i--)
		kill(procs[i].pid, SIGKILL);
	for (int waited = 0; n > 0 && waited < 10000; waited += 5) {
		while (reap && waitpid(-1, NULL, WNOHANG) > 0)
			;
		bool left = false;
		for (ssize_t i = 0; i < n && !left; i++) {
			/* A zombie is dead, unless it is ours to reap (the next turn
			 * does): its parent may be waiting on us. */
			pid_t parent = 0;
			char st = proc_state(procs[i].pid, &parent);
			left = st && ((st != 'Z' && st != 'X') || (reap && parent == getpid()));
		}
		if (!left)
			break;
		usleep(5000);
	}
	free(procs);
}

void proc_children_kill(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	pid_t self = getpid(), kids[256];
	size_t n = 0;
	while (d && (e = readdir(d)) && n < sizeof(kids) / sizeof(kids[0])) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		if (proc_status_field("/proc", (pid_t)pid, "PPid") == self)
			kids[n++] = (pid_t)pid;
	}
	if (d)
		closedir(d);
	for (size_t i = 0; i < n; i++)
		proc_tree_kill(kids[i], true);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int pid_free_wait(pid_t pid, int wait_ms, char *why, size_t len)
{
	pid_t parent = 0;
	char st = proc_state(pid, &parent);
	for (int waited = 0; st == 'Z' && waited < wait_ms; waited += 20) {
		if (waited == 0)
			voice(VOICE_INFO, "PID %d is still held by a zombie (its parent %d has not reaped it): waiting",
			      (int)pid, (int)parent);
		usleep(20000);
		st = proc_state(pid, &parent);
	}
	if (!st)
		return 0;
	char comm[64];
	proc_comm(pid, comm, sizeof(comm));
	if (st == 'Z')
		snprintf(why, len,
			 "PID %d, which the checkpoint's process must have again, is held by a zombie that its parent "
			 "%d "
			 "has not reaped in %d s",
			 (int)pid, (int)parent, wait_ms / 1000);
	else
		snprintf(why, len,
			 "PID %d, which the checkpoint's process must have again, is taken by process %d (%s, parent "
			 "%d): CRIU restores every process at its old PID; is the checkpointed tree still running?",
			 (int)pid, (int)pid, comm, (int)parent);
	return -1;
}
