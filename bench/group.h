/* SPDX-License-Identifier: MIT */
/* A group of lc_worker participants for the benchmarks: participant 0 creates
 * N allocations of SIZE bytes, the others import and map all of them. Started
 * under snapshot-cuda-vmm-launch; with tree, as the children of one root
 * process (what cusnap's commands take). */
#ifndef CUSNAP_BENCH_GROUP_H
#define CUSNAP_BENCH_GROUP_H

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/coordinator/coord.h"

enum { BENCH_MAX_PARTS = 64 };

struct bench_group {
	char dir[32];       /* scratch directory (removed by bench_group_stop) */
	char ctl[PATH_MAX]; /* its control directory */
	int parts;
	pid_t pids[BENCH_MAX_PARTS];
	pid_t root; /* the tree's root, or -1 */
	struct coord_target t[BENCH_MAX_PARTS];
};

/* The directory of the running benchmark binary. */
/* BENCH_VERBOSE: the coordinator's stages on stderr as they complete. */
static inline void bench_stage(const char *stage, double ms, const char *note)
{
	/* (ending at CLOCK_MONOTONIC's "at": `perf record -k CLOCK_MONOTONIC` and
	 * `perf script --time` profile a stage alone) */
	fprintf(stderr, "bench: %-24s %8.1f ms  at %.6f s  %s\n", stage, ms, now_ms() / 1000, note);
}

static inline const char *bench_bin(void)
{
	static char bin[PATH_MAX];
	if (!bin[0]) {
		ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
		bin[n > 0 ? n : 0] = '\0';
		if (strrchr(bin, '/'))
			*strrchr(bin, '/') = '\0';
	}
	return bin;
}

static inline void bench_group_stop(struct bench_group *g)
{
	for (int i = 0; i < g->parts; i++)
		if (g->pids[i] > 0)
			kill(g->pids[i], SIGKILL);
	if (g->root > 0) {
		kill(g->root, SIGKILL);
		waitpid(g->root, NULL, 0);
	}
	for (int i = 0; g->root < 0 && i < g->parts; i++)
		if (g->pids[i] > 0)
			waitpid(g->pids[i], NULL, 0);
	g->parts = 0;
	char *argv[] = {"rm", "-rf", g->dir, NULL};
	pid_t c = fork();
	if (c == 0) {
		execvp("rm", argv);
		_exit(127);
	}
	waitpid(c, NULL, 0);
}

/* Start the group and wait (up to 5 minutes) until every participant is ready.
 * With logs, participant i logs at level info into DIR/log-i. 0, or -1 with
 * the group stopped. */
static inline int bench_group_start(struct bench_group *g, int parts, int n, size_t size, bool tree, bool logs)
{
	memset(g, 0, sizeof(*g));
	g->root = -1;
	snprintf(g->dir, sizeof(g->dir), "/tmp/cusnap-bench-XXXXXX");
	if (parts > BENCH_MAX_PARTS || !mkdtemp(g->dir))
		return -1;
	char worker[PATH_MAX + 32], launcher[PATH_MAX + 32];
	snprintf(g->ctl, sizeof(g->ctl), "%s/ctl", g->dir);
	snprintf(worker, sizeof(worker), "%s/lc_worker", bench_bin());
	snprintf(launcher, sizeof(launcher), "%s/../bin/snapshot-cuda-vmm-launch", bench_bin());
	setenv("SNAPSHOT_CONTROL_DIR", g->ctl, 1);
	int link[2] = {-1, -1};
	if (tree) {
		if (pipe(link) < 0 || (g->root = fork()) < 0)
			return -1;
		if (g->root > 0) {
			close(link[1]);
			ssize_t want = (ssize_t)(sizeof(pid_t) * (size_t)parts);
			ssize_t got = read(link[0], g->pids, (size_t)want);
			close(link[0]);
			g->parts = parts;
			if (got != want) {
				bench_group_stop(g);
				return -1;
			}
		}
	}
	for (int i = 0; g->root <= 0 && i < parts; i++) {
		g->pids[i] = fork();
		if (g->pids[i] == 0) {
			char idx[16], cnt[16], num[16], bytes[32];
			snprintf(idx, sizeof(idx), "%d", i);
			snprintf(cnt, sizeof(cnt), "%d", parts);
			snprintf(num, sizeof(num), "%d", n);
			snprintf(bytes, sizeof(bytes), "%zu", size);
			if (logs) {
				char path[PATH_MAX];
				snprintf(path, sizeof(path), "%s/log-%d", g->dir, i);
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
				if (fd >= 0)
					dup2(fd, 2);
				setenv("SNAPSHOT_CUDA_VMM_LOG", "2", 1);
			}
			execl(launcher, launcher, worker, g->dir, idx, cnt, num, bytes, (char *)NULL);
			_exit(127);
		}
	}
	if (g->root == 0) {
		if (write(link[1], g->pids, sizeof(pid_t) * (size_t)parts) < 0)
			_exit(1);
		for (;;)
			pause();
	}
	g->parts = parts;
	int ready = 0;
	for (double t0 = now_ms(); ready < parts && now_ms() - t0 < 300000;) {
		ready = 0;
		for (int i = 0; i < parts; i++) {
			char path[PATH_MAX + 32];
			snprintf(path, sizeof(path), "%s/ready-%d", g->dir, i);
			ready += access(path, F_OK) == 0;
		}
		if (ready < parts)
			usleep(20000);
	}
	if (ready < parts) {
		fprintf(stderr, "the group of %d did not get ready in 5 minutes\n", parts);
		bench_group_stop(g);
		return -1;
	}
	for (int i = 0; i < parts; i++) {
		g->t[i].obs = g->t[i].ns = g->pids[i];
		coord_endpoint_path("", g->ctl, g->pids[i], g->pids[i], g->t[i].endpoint, sizeof(g->t[i].endpoint));
	}
	return 0;
}

#endif
