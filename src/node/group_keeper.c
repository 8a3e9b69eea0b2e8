/* SPDX-License-Identifier: MIT */
/* A group member's lease kept alive while it takes part (DESIGN.md §16): on a
 * thread of the command, or, in the CRIU plugin, by a process of its own, for
 * CRIU must stay one thread (setns into a container's mount namespace, to dump
 * its cgroup file system, refuses a process of several: EINVAL). That process
 * is a grandchild, never CRIU's child (CRIU counts its children), and ends when
 * the pipe it watches closes: the member left, or its process died. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "group.h"

struct keeper_state {
	atomic_bool stop, lost;
};

struct keeper {
	struct keeper_state *st; /* shared with the process, when one keeps it */
	const char *etcd;
	struct etcd_auth auth;
	int64_t lease;
	pthread_t thread;
	bool on_thread;
	int pipe_w; /* the process's lifeline (-1: none) */
};

/* Keep the lease alive until told to stop (stop, or poll_fd readable or
 * closed): every second, etcd's answer that it is gone setting lost. */
static void keep(struct keeper *k, int poll_fd)
{
	struct etcd e; /* its own handle: one per thread or process */
	char why[512];
	if (etcd_init(&e, k->etcd, &k->auth, 5000, why, sizeof(why)) < 0)
		e.curl = NULL;
	for (;;) {
		if (poll_fd >= 0) {
			struct pollfd f = {.fd = poll_fd, .events = POLLIN};
			if (poll(&f, 1, 1000) != 0)
				break;
		} else {
			for (int i = 0; i < 10 && !atomic_load(&k->st->stop); i++)
				usleep(100000);
		}
		if (atomic_load(&k->st->stop))
			break;
		if (e.curl && etcd_lease_keepalive(&e, k->lease, why, sizeof(why)) == 1)
			atomic_store(&k->st->lost, true);
	}
	etcd_free(&e);
}

static void *keep_thread(void *arg)
{
	keep(arg, -1);
	return NULL;
}

/* A grandchild keeps it: true, or false (nothing left running). */
static bool keep_in_process(struct keeper *k)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	pid_t c = fork();
	if (c == 0) {
		close(p[1]);
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL); /* (CRIU's handlers: not run here) */
		if (fork() != 0)
			_exit(0);
		keep(k, p[0]);
		_exit(0);
	}
	close(p[0]);
	int status = 0;
	if (c < 0 || waitpid(c, &status, 0) != c) {
		close(p[1]);
		return false;
	}
	k->pipe_w = p[1];
	return true;
}

struct keeper *keeper_start(const char *etcd, const struct etcd_auth *auth, int64_t lease, bool in_process)
{
	struct keeper *k = calloc(1, sizeof(*k));
	struct keeper_state *st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!k || st == MAP_FAILED) {
		free(k);
		if (st != MAP_FAILED)
			munmap(st, sizeof(*st));
		return NULL;
	}
	*k = (struct keeper){.st = st, .etcd = etcd, .auth = *auth, .lease = lease, .pipe_w = -1};
	bool started;
	if (in_process) {
		started = keep_in_process(k);
	} else {
		/* Every signal blocked in the thread: a signal meant for the command
		 * must never run on it. */
		sigset_t all, was;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &was);
		started = k->on_thread = pthread_create(&k->thread, NULL, keep_thread, k) == 0;
		pthread_sigmask(SIG_SETMASK, &was, NULL);
	}
	if (!started) {
		munmap(st, sizeof(*st));
		free(k);
		return NULL;
	}
	return k;
}

bool keeper_lost(const struct keeper *k)
{
	return k && atomic_load(&k->st->lost);
}

void keeper_stop(struct keeper *k)
{
	if (!k)
		return;
	atomic_store(&k->st->stop, true);
	if (k->on_thread)
		pthread_join(k->thread, NULL);
	if (k->pipe_w >= 0)
		close(k->pipe_w); /* (the process ends at its next look) */
	munmap(k->st, sizeof(*k->st));
	free(k);
}
