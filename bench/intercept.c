/* SPDX-License-Identifier: MIT */
/* bench/intercept: nanoseconds per wrapped VMM call through the shim against the
 * same call made directly on cuemu, with 10, 1,000 and 100,000 live tracked
 * allocations (each its own cuMemCreate of 64 KiB; cuemu's granularity is set to
 * that). Prints a table; asserts nothing.
 *
 * The last case imports, in another process, what this one exported: through
 * the shim a capability redeemed at this process's endpoint, directly the
 * driver's own FD. A second table: cuMemAlloc + cuMemFree of 4 KiB with 10 and
 * 10,000 live cuMemAllocs, through the shim's adapter against cuemu's own.
 *
 *   build/bench/intercept              run every case, directly and under the launcher
 *   build/bench/intercept --one N      one process's figures for N live objects
 *   build/bench/intercept --alloc N    one process's cuMemAlloc+Free figure, N live */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "cu_check.h"

#define MiB ((size_t)1 << 20)
enum { OPS = 8 };
static const char *const op_names[OPS] =
	{"map+unmap",     "set-access",          "retain+release",        "get-properties", "export+import+release",
	 "export (same)", "export (64 in turn)", "import+release (other)"};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void context(void)
{
	CUcontext ctx;
	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
}

/* --import-child FD ITERS: import FD ITERS times (each released), print ns each. */
static int import_child(int fd, int iters)
{
	context();
	double t0 = now_ns();
	for (int i = 0; i < iters; i++) {
		CUmemGenericAllocationHandle r;
		CU(cuMemImportFromShareableHandle(&r, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		CU(cuMemRelease(r));
	}
	printf("%.1f\n", (now_ns() - t0) / iters);
	return 0;
}

/* The other process's figure for importing what h exports (it inherits the FD). */
static double import_elsewhere(CUmemGenericAllocationHandle h, int iters)
{
	int fd, pipefd[2];
	CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	if (pipe(pipefd) < 0 || fcntl(fd, F_SETFD, 0) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char fds[16], its[16];
		snprintf(fds, sizeof(fds), "%d", fd);
		snprintf(its, sizeof(its), "%d", iters);
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		execl("/proc/self/exe", "intercept", "--import-child", fds, its, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	char buf[64] = "";
	ssize_t len = read(pipefd[0], buf, sizeof(buf) - 1);
	close(pipefd[0]);
	close(fd);
	int status;
	waitpid(pid, &status, 0);
	return len > 0 && WIFEXITED(status) && !WEXITSTATUS(status) ? strtod(buf, NULL) : -1;
}

static int one(long objects)
{
	context();
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, vb;
	CU(cuMemCreate(&h, 2 * MiB, &p, 0));
	CU(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
	CU(cuMemAddressReserve(&vb, 2 * MiB, 0, 0, 0));
	CU(cuMemMap(va, 2 * MiB, 0, h, 0));
	/* The live objects: allocations of their own, never mapped. */
	CUmemGenericAllocationHandle *live = malloc(sizeof(*live) * (size_t)objects);
	for (long i = 0; i < objects; i++)
		CU(cuMemCreate(&live[i], 64 << 10, &p, 0));
	CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	/* Exported in turn: more than the shim keeps capabilities for (16), so
	 * that each export makes one. */
	CUmemGenericAllocationHandle turn[64];
	for (int i = 0; i < 64; i++)
		CU(cuMemCreate(&turn[i], 64 << 10, &p, 0));
	const int iters[OPS] = {20000, 200000, 200000, 200000, 5000, 20000, 20000, 5000};
	double ns[OPS];
	for (int op = 0; op < OPS - 1; op++) {
		double t0 = now_ns();
		for (int i = 0; i < iters[op]; i++) {
			CUmemGenericAllocationHandle r;
			CUmemAllocationProp got;
			int fd;
			switch (op) {
			case 0:
				CU(cuMemMap(vb, 2 * MiB, 0, h, 0));
				CU(cuMemUnmap(vb, 2 * MiB));
				break;
			case 1: CU(cuMemSetAccess(va, 2 * MiB, &acc, 1)); break;
			case 2:
				CU(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va));
				CU(cuMemRelease(r));
				break;
			case 3: CU(cuMemGetAllocationPropertiesFromHandle(&got, h)); break;
			case 4:
				CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
				CU(cuMemImportFromShareableHandle(&r, (void *)(intptr_t)fd,
								  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
				CU(cuMemRelease(r));
				close(fd);
				break;
			case 5:
				CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
				close(fd);
				break;
			case 6:
				CU(cuMemExportToShareableHandle(&fd, turn[i % 64],
								CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
				close(fd);
				break;
			}
		}
		ns[op] = (now_ns() - t0) / iters[op];
	}
	ns[OPS - 1] = import_elsewhere(h, iters[OPS - 1]);
	for (int op = 0; op < OPS; op++)
		printf("%.1f%c", ns[op], op == OPS - 1 ? '\n' : ' ');
	return 0;
}

/* --alloc N: ns per cuMemAlloc(4 KiB) + cuMemFree with N cuMemAllocs live. */
static int alloc_free(long live)
{
	context();
	CUdeviceptr *keep = malloc(sizeof(*keep) * (size_t)live);
	for (long i = 0; i < live; i++)
		CU(cuMemAlloc(&keep[i], 4096));
	enum { ITERS = 20000 };
	double t0 = now_ns();
	for (int i = 0; i < ITERS; i++) {
		CUdeviceptr p;
		CU(cuMemAlloc(&p, 4096));
		CU(cuMemFree(p));
	}
	printf("%.1f\n", (now_ns() - t0) / ITERS);
	for (long i = 0; i < live; i++)
		CU(cuMemFree(keep[i]));
	free(keep);
	return 0;
}

/* The floor of any import from another process on this machine: one
 * connect, request and reply between two processes over a Unix socket. */
static double socket_round_trip(int iters)
{
	char path[] = "/tmp/cusnap-bench-rt-XXXXXX";
	int tmp = mkstemp(path);
	if (tmp < 0)
		return -1;
	close(tmp);
	unlink(path);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 64) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char buf[128];
		for (;;) {
			int c = accept(l, NULL, NULL);
			while (c >= 0 && read(c, buf, sizeof(buf)) > 0)
				if (write(c, buf, 64) != 64)
					break;
			close(c);
		}
	}
	char buf[128] = {0};
	double t0 = now_ns();
	for (int i = 0; i < iters; i++) {
		int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 || write(c, buf, 96) != 96 ||
		    read(c, buf, sizeof(buf)) <= 0)
			return -1;
		close(c);
	}
	double ns = (now_ns() - t0) / iters;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(l);
	unlink(path);
	return ns;
}

/* Run "--one N" (under the launcher when shim) and read its figures. */
static int run(const char *self, const char *launcher, const char *mode, long objects, double *ns, int nfigures)
{
	int pipefd[2];
	if (pipe(pipefd) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char n[32];
		snprintf(n, sizeof(n), "%ld", objects);
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		if (launcher)
			execl(launcher, launcher, self, mode, n, (char *)NULL);
		else
			execl(self, self, mode, n, (char *)NULL);
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
	for (int op = 0; op < nfigures; op++)
		ns[op] = strtod(p, &p);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--one"))
		return one(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "--alloc"))
		return alloc_free(atol(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "--import-child"))
		return import_child(atoi(argv[2]), atoi(argv[3]));
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	snprintf(launcher, sizeof(launcher), "%.*s/../bin/snapshot-cuda-vmm-launch", (int)(strrchr(self, '/') - self),
		 self);
	setenv("SNAPSHOT_CONTROL_DIR", "/tmp/cusnap-bench-ctl", 0);
	setenv("CUEMU_GRANULARITY", "65536", 1);
	setenv("CUEMU_MEMORY", "16G", 1);
	const long sizes[] = {10, 1000, 100000};
	printf("%-22s %10s %12s %12s %12s\n", "call", "objects", "direct ns", "shim ns", "overhead ns");
	for (size_t s = 0; s < 3; s++) {
		double direct[OPS], shim[OPS];
		if (run(self, NULL, "--one", sizes[s], direct, OPS) < 0 ||
		    run(self, launcher, "--one", sizes[s], shim, OPS) < 0) {
			fprintf(stderr, "intercept: a run with %ld objects failed\n", sizes[s]);
			return 1;
		}
		for (int op = 0; op < OPS; op++)
			printf("%-22s %10ld %12.1f %12.1f %12.1f\n", op_names[op], sizes[s], direct[op], shim[op],
			       shim[op] - direct[op]);
	}
	printf("\n%-22s %10s %12s %12s %12s\n", "cuMemAlloc+cuMemFree", "live", "cuemu ns", "adapter ns",
	       "cuemu/adapter");
	const long live[] = {10, 10000};
	for (size_t s = 0; s < 2; s++) {
		double direct, adapter;
		if (run(self, NULL, "--alloc", live[s], &direct, 1) < 0 ||
		    run(self, launcher, "--alloc", live[s], &adapter, 1) < 0) {
			fprintf(stderr, "intercept: a cuMemAlloc run with %ld live failed\n", live[s]);
			return 1;
		}
		printf("%-22s %10ld %12.1f %12.1f %12.1f\n", "4 KiB", live[s], direct, adapter,
		       adapter > 0 ? direct / adapter : 0);
	}
	printf("\nfloor of an import from another process here: a Unix socket connect + request + reply "
	       "between two processes takes %.1f ns\n",
	       socket_round_trip(20000));
	return 0;
}
