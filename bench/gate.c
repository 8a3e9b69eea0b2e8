/* SPDX-License-Identifier: MIT */
/* bench/gate: what the gate on the application's copies, sets and launches
 * costs (DESIGN.md §6.1): nanoseconds per call of a kernel launch, a
 * stream-ordered copy and set, a synchronous copy and a host function, made
 * directly on cuemu and through the shim (under the launcher), in turns, R
 * rounds each; prints the medians and the shim's share. Asserts nothing.
 *
 * The calls go to the legacy default stream, which cuemu runs at the call: a
 * stream of its own would time the wakeups of cuemu's stream thread, which
 * vary by more than the gate costs. The process stays on one CPU.
 *
 *   build/bench/gate            R = 7 rounds (BENCH_ROUNDS=R)
 *   build/bench/gate --one      one process's figures (what the rounds run) */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "cu_check.h"

enum { OPS = 5, CALLS = 20000, BATCH = 256 };
static const char *const op_names[OPS] = {"cuLaunchKernel", "cuMemcpyHtoDAsync 256 B", "cuMemsetD32Async 256 B",
					  "cuMemcpyHtoD 256 B", "cuLaunchHostFunc"};

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry nothing()\n{\n\tret;\n}\n";

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void host_fn(void *arg)
{
	(void)arg;
}

/* One call of op i. */
static void call(int op, CUfunction f, CUstream s, CUdeviceptr d, const void *src)
{
	switch (op) {
	case 0: CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL)); break;
	case 1: CU(cuMemcpyHtoDAsync(d, src, 256, s)); break;
	case 2: CU(cuMemsetD32Async(d, 7, 64, s)); break;
	case 3: CU(cuMemcpyHtoD(d, src, 256)); break;
	default: CU(cuLaunchHostFunc(s, host_fn, NULL)); break;
	}
}

/* --one: ns per call of each op, on one line. */
static int one(void)
{
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUstream s;
	CUdeviceptr d;
	static char src[256];
	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	CU(cuModuleLoadData(&mod, ptx));
	CU(cuModuleGetFunction(&f, mod, "nothing"));
	s = NULL; /* (the legacy default stream: see the top) */
	cpu_set_t one_cpu;
	CPU_ZERO(&one_cpu);
	CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one_cpu);
	sched_setaffinity(0, sizeof(one_cpu), &one_cpu);
	CU(cuMemAlloc(&d, 1 << 20));
	for (int op = 0; op < OPS; op++) {
		for (int i = 0; i < BATCH; i++) /* (warm) */
			call(op, f, s, d, src);
		CU(cuStreamSynchronize(s));
		double spent = 0;
		for (int done = 0; done < CALLS; done += BATCH) {
			double t0 = now_ns();
			for (int i = 0; i < BATCH; i++)
				call(op, f, s, d, src);
			spent += now_ns() - t0;
			CU(cuStreamSynchronize(s)); /* (the queue kept short; not timed) */
		}
		printf("%.1f ", spent / CALLS);
	}
	printf("\n");
	return 0;
}

/* The figures of one "--one" run, under the launcher when launcher. */
static int run(const char *self, const char *launcher, double *ns)
{
	int pipefd[2];
	if (pipe(pipefd) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		if (launcher)
			execl(launcher, launcher, self, "--one", (char *)NULL);
		else
			execl(self, self, "--one", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	char buf[512] = "";
	ssize_t len = read(pipefd[0], buf, sizeof(buf) - 1);
	close(pipefd[0]);
	int status;
	waitpid(pid, &status, 0);
	if (len <= 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	buf[len] = '\0';
	char *p = buf;
	for (int op = 0; op < OPS; op++)
		ns[op] = strtod(p, &p);
	return 0;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--one"))
		return one();
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	snprintf(launcher, sizeof(launcher), "%.*s/../bin/snapshot-cuda-vmm-launch", (int)(strrchr(self, '/') - self),
		 self);
	const char *r = getenv("BENCH_ROUNDS");
	int rounds = r && atoi(r) > 0 ? atoi(r) : 7;
	if (rounds > 64)
		rounds = 64;
	double direct[OPS][64], shim[OPS][64], one_run[OPS];
	for (int i = 0; i < rounds; i++) {
		for (int w = 0; w < 2; w++) { /* (in turns: drift on a shared machine hits both) */
			if (run(self, w ? launcher : NULL, one_run) < 0) {
				fprintf(stderr, "gate: a run failed\n");
				return 1;
			}
			for (int op = 0; op < OPS; op++)
				(w ? shim : direct)[op][i] = one_run[op];
		}
	}
	printf("the gate on the application's calls: ns per call on cuemu, medians of %d rounds, %d calls each\n",
	       rounds, CALLS);
	printf("  %-28s %10s %10s %8s\n", "call", "direct", "shim", "shim");
	for (int op = 0; op < OPS; op++) {
		qsort(direct[op], (size_t)rounds, sizeof(double), by_value);
		qsort(shim[op], (size_t)rounds, sizeof(double), by_value);
		double d = direct[op][rounds / 2], s = shim[op][rounds / 2];
		printf("  %-28s %10.1f %10.1f %+7.1f%%\n", op_names[op], d, s, (s - d) / d * 100);
	}
	return 0;
}
