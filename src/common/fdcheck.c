/* SPDX-License-Identifier: MIT */
/* CUSNAP_FD_CHECK=1: the tools count /proc/self/fd at their start and end. */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cusnap/exitcodes.h"
#include "cusnap/fdcheck.h"

#define FD_CHECK_MAX 4096

static uint64_t exempt[FD_CHECK_MAX / 64];
static bool checking;

/* Call fn for every open descriptor (not the one listing them). */
static void each_open(void (*fn)(int fd, void *arg), void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		if (*end || end == e->d_name || fd == self || fd < 0)
			continue;
		fn((int)fd, arg);
	}
	closedir(d);
}

static void mark(int fd, void *arg)
{
	(void)arg;
	if (fd < FD_CHECK_MAX)
		exempt[fd / 64] |= 1ull << (fd % 64);
}

void fd_check_start(void)
{
	const char *e = getenv("CUSNAP_FD_CHECK");
	checking = e && *e == '1';
	if (checking)
		each_open(mark, NULL);
}

void fd_check_exempt_open(void)
{
	if (checking)
		each_open(mark, NULL);
}

struct leaks {
	const char *tool;
	int n;
};

static void report(int fd, void *arg)
{
	struct leaks *l = arg;
	if (fd < FD_CHECK_MAX && (exempt[fd / 64] >> (fd % 64) & 1))
		return;
	char link[64], target[PATH_MAX] = "?";
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n > 0)
		target[n] = '\0';
	fprintf(stderr, "%s: CUSNAP_FD_CHECK: descriptor %d (%s) was opened and never closed\n", l->tool, fd, target);
	l->n++;
}

int fd_check_end(const char *tool, int rc)
{
	if (!checking)
		return rc;
	struct leaks l = {.tool = tool};
	fflush(stdout);
	each_open(report, &l);
	return l.n ? EX_SOFTWARE : rc;
}
