/* SPDX-License-Identifier: MIT */
/* Work CRIU must not return before, done where CRIU cannot see it: CRIU lets a
 * tree go only after its plugins' exit (a dump) or after RESUME_DEVICES_LATE (a
 * restore), so what needs the tree running is done by a helper process, whose
 * exit code CRIU waits for on a pipe. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../node/node.h"
#include "plugin.h"

/* Start a helper: 0 in the helper (report with helper_report), 1 in CRIU, -1
 * when it cannot be made. It is no child of CRIU (which counts its children:
 * after a dump, one it did not make is a BUG), but a grandchild whose parent
 * has exited. */
int helper_start(struct helper *h)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(stderr);
	pid_t c = fork();
	if (c == 0) {
		close(p[0]);
		pid_t g = fork();
		if (g != 0)
			_exit(g > 0 ? 0 : 1);
		*h = (struct helper){.pid = 0, .fd = p[1]};
		return 0;
	}
	close(p[1]);
	int status = 0;
	if (c < 0 || waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		close(p[0]);
		return -1;
	}
	*h = (struct helper){.pid = c, .fd = p[0]};
	return 1;
}

/* In the helper: code to CRIU, and the helper ends. */
void helper_report(struct helper *h, int code)
{
	unsigned char b = (unsigned char)code;
	fflush(stderr);
	if (write(h->fd, &b, 1) != 1)
		_exit(code);
	_exit(code);
}

/* The helper's exit code, waiting up to timeout_ms; -1 when it did not say. */
int helper_wait(struct helper *h, int timeout_ms)
{
	if (!h->pid)
		return 0;
	struct pollfd pfd = {.fd = h->fd, .events = POLLIN};
	unsigned char b = 0;
	int rc = -1;
	for (double end = now_ms() + timeout_ms, left; rc < 0 && (left = end - now_ms()) > 0;) {
		int r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && read(h->fd, &b, 1) == 1)
			rc = b;
		break;
	}
	close(h->fd);
	*h = (struct helper){0};
	return rc;
}

/* Is pid gone, a zombie, or on its way out (PF_EXITING: killed by the dump)? */
bool proc_ending(pid_t pid)
{
	unsigned long flags = 0;
	char state = proc_stat(pid, NULL, &flags);
	return !state || state == 'Z' || state == 'X' || (flags & 0x4 /* PF_EXITING */);
}

/* Every process of the tree let go by CRIU (no tracer) or ending, within
 * timeout_ms: how many live on, or -1 on a timeout. */
int wait_released(const struct tree *t, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 20) {
		int alive = 0, held = 0;
		for (size_t i = 0; i < t->nprocs; i++) {
			bool ending = proc_ending(t->procs[i].pid);
			alive += !ending;
			held += !ending && proc_status_field("/proc", t->procs[i].pid, "TracerPid") > 0;
		}
		if (!held)
			return alive;
		usleep(20000);
	}
	return -1;
}

unsigned criu_alarm_hold(void)
{
	return alarm(0);
}

void criu_alarm_resume(unsigned left)
{
	if (left)
		alarm(left);
}
