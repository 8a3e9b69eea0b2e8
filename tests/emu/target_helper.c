/* SPDX-License-Identifier: MIT */
/* A CUDA workload for the checkpoint tests, driven through files so that it can
 * be checkpointed, dumped by CRIU and restored without pipes to its driver.
 *
 *   target_helper DIR NAME [--dev N] [--size BYTES] [--seed S] [--also DEV]
 *                 [--serve] [--import PEER] [--forward PEER] [--multicast] [--busy MS]
 *                 [--no-context] [--fabric] [--run-dir DIR]
 *
 * --serve sends each peer that connects to DIR/NAME.share a fresh export of the
 * allocation; --forward PEER takes one export from PEER, caches a dup of it and
 * sends that to each peer instead (no CUDA at all). --run-dir sets CUEMU_RUN_DIR
 * after exec, where /proc/PID/environ does not show it.
 *
 * Writes DIR/NAME.ready ("nspid va size") once set up, then executes each command
 * written to DIR/NAME.cmd and answers in DIR/NAME.out:
 *   check S | fill S | maps | export | device | drop | fabric | exit
 * (drop: unmap and release the allocation; fabric: export it as a FABRIC handle) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

static const char *dir, *name;
static size_t size = 4 * MiB;
static int dev;
static CUmemGenericAllocationHandle handle;
static CUdeviceptr va;
static int listen_fd = -1;
static int forward_fd = -1; /* a cached export from another process */

static void die(const char *what, CUresult rc)
{
	const char *s = "?";
	cuGetErrorName(rc, &s);
	fprintf(stderr, "target %s: %s failed: %s\n", name, what, s);
	exit(3);
}

#define CU(call)                         \
	do {                             \
		CUresult rc_ = (call);   \
		if (rc_ != CUDA_SUCCESS) \
			die(#call, rc_); \
	} while (0)

static void path_of(char *buf, size_t len, const char *suffix)
{
	snprintf(buf, len, "%s/%s.%s", dir, name, suffix);
}

static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, int access_dev)
{
	CUdeviceptr p;
	CU(cuMemAddressReserve(&p, size, 0, 0, 0));
	CU(cuMemMap(p, size, 0, h, 0));
	CUmemAccessDesc a = emu_access(access_dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU(cuMemSetAccess(p, size, &a, 1));
	return p;
}

/* Serve a fresh export of the allocation to each peer that connects. */
static void *serve_exports(void *arg)
{
	(void)arg;
	/* A thread of its own: a GPU-correct program makes a context current on it. */
	CUcontext ctx;
	if (forward_fd < 0 && cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS)
		cuCtxSetCurrent(ctx);
	for (;;) {
		int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		int fd = -1;
		if (forward_fd >= 0) {
			test_send_fd(c, forward_fd);
		} else if (cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
			   CUDA_SUCCESS) {
			test_send_fd(c, fd);
			close(fd);
		}
		close(c);
	}
	return NULL;
}

static int connect_to(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(a.sun_path))
		return -1;
	memcpy(a.sun_path, path, strlen(path) + 1);
	for (int i = 0; i < 2000; i++) {
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
			return s;
		close(s);
		usleep(5000);
	}
	return -1;
}

/* The FD target peer hands out at DIR/peer.share (-1, said, when none came). */
static int fd_from(const char *peer)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s.share", dir, peer);
	int s = connect_to(path);
	int fd = s >= 0 ? test_recv_fd(s) : -1;
	if (s >= 0)
		close(s);
	if (fd < 0)
		fprintf(stderr, "target %s: no FD from %s\n", name, path);
	return fd;
}

static void CUDA_CB sleeper(void *arg)
{
	usleep((useconds_t)(uintptr_t)arg * 1000);
}

static void answer(const char *text)
{
	char out[4096];
	path_of(out, sizeof(out), "out");
	test_write_file(out, text);
}

static void run(const char *cmd)
{
	char reply[256];
	unsigned seed;
	unsigned char *buf = malloc(size);
	if (sscanf(cmd, "check %u", &seed) == 1) {
		CUresult rc = cuMemcpyDtoH(buf, va, size);
		const char *s = "?";
		cuGetErrorName(rc, &s);
		if (rc != CUDA_SUCCESS)
			snprintf(reply, sizeof(reply), "FAIL copy %s", s);
		else if (!emu_pattern_ok(buf, size, seed))
			snprintf(reply, sizeof(reply), "FAIL bytes differ from pattern %u", seed);
		else
			snprintf(reply, sizeof(reply), "PASS %#llx", (unsigned long long)va);
	} else if (sscanf(cmd, "fill %u", &seed) == 1) {
		emu_pattern(buf, size, seed);
		CUresult rc = cuMemcpyHtoD(va, buf, size);
		snprintf(reply, sizeof(reply), rc == CUDA_SUCCESS ? "OK" : "FAIL fill");
	} else if (strncmp(cmd, "maps", 4) == 0) {
		snprintf(reply, sizeof(reply), "%d", test_count_maps(getpid(), "memfd:cuemu"));
	} else if (strncmp(cmd, "export", 6) == 0) {
		int fd = -1;
		CUresult rc = cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (fd >= 0)
			close(fd);
		const char *s = "?";
		cuGetErrorName(rc, &s);
		snprintf(reply, sizeof(reply), "%s", s);
	} else if (strncmp(cmd, "device", 6) == 0) {
		CUmemAllocationProp p;
		CUresult rc = cuMemGetAllocationPropertiesFromHandle(&p, handle);
		snprintf(reply, sizeof(reply), "%d", rc == CUDA_SUCCESS ? p.location.id : -1);
	} else if (strncmp(cmd, "drop", 4) == 0) {
		CUresult rc = cuMemUnmap(va, size);
		if (rc == CUDA_SUCCESS)
			rc = cuMemRelease(handle);
		const char *s = "?";
		cuGetErrorName(rc, &s);
		snprintf(reply, sizeof(reply), "%s", s);
	} else if (strncmp(cmd, "fabric", 6) == 0) {
		CUmemFabricHandle fh;
		CUresult rc = cuMemExportToShareableHandle(&fh, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0);
		const char *s = "?";
		cuGetErrorName(rc, &s);
		snprintf(reply, sizeof(reply), "%s", s);
	} else if (strncmp(cmd, "exit", 4) == 0) {
		answer("BYE");
		exit(0);
	} else {
		snprintf(reply, sizeof(reply), "ERROR unknown command");
	}
	free(buf);
	answer(reply);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: target_helper DIR NAME [options]\n");
		return 64;
	}
	dir = argv[1];
	name = argv[2];
	const char *import = NULL, *forward = NULL;
	int serve = 0, multicast = 0, busy = 0, no_context = 0, also = -1, fabric = 0;
	unsigned seed = 1;
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "--dev") && i + 1 < argc)
			dev = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--also") && i + 1 < argc)
			also = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--import") && i + 1 < argc)
			import = argv[++i];
		else if (!strcmp(argv[i], "--forward") && i + 1 < argc)
			forward = argv[++i];
		else if (!strcmp(argv[i], "--busy") && i + 1 < argc)
			busy = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--serve"))
			serve = 1;
		else if (!strcmp(argv[i], "--fabric"))
			fabric = 1;
		else if (!strcmp(argv[i], "--multicast"))
			multicast = 1;
		else if (!strcmp(argv[i], "--no-context"))
			no_context = 1;
		else if (!strcmp(argv[i], "--run-dir") && i + 1 < argc)
			setenv("CUEMU_RUN_DIR", argv[++i], 1); /* (before cuInit starts the endpoint) */
		else {
			fprintf(stderr, "target_helper: unknown option %s\n", argv[i]);
			return 64;
		}
	}
	char path[4096];
	if (forward) {
		int fd = fd_from(forward);
		if (fd < 0)
			return 3;
		forward_fd = dup(fd); /* cached as an application would, under another number */
		close(fd);
		serve = 1;
		no_context = 1;
	}
	if (!forward)
		CU(cuInit(0));
	if (!no_context) {
		CUcontext ctx;
		CU(cuDevicePrimaryCtxRetain(&ctx, dev));
		CU(cuCtxSetCurrent(ctx));
		if (import) {
			int fd = fd_from(import);
			if (fd < 0)
				return 3;
			CU(cuMemImportFromShareableHandle(&handle, (void *)(intptr_t)fd,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
			close(fd);
			va = map_rw(handle, dev);
		} else {
			CUmemAllocationProp p = emu_prop(dev);
			if (fabric)
				p.requestedHandleTypes =
					(CUmemAllocationHandleType)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
								    CU_MEM_HANDLE_TYPE_FABRIC);
			CU(cuMemCreate(&handle, size, &p, 0));
			va = map_rw(handle, dev);
			unsigned char *buf = malloc(size);
			emu_pattern(buf, size, seed);
			CU(cuMemcpyHtoD(va, buf, size));
			free(buf);
		}
		if (also >= 0) {
			CUmemAllocationProp p = emu_prop(also);
			CUmemGenericAllocationHandle h2;
			CU(cuMemCreate(&h2, size, &p, 0));
			map_rw(h2, also);
		}
		if (multicast) {
			CUmulticastObjectProp mp = {.numDevices = 1,
						    .size = 2 * MiB,
						    .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
			CUmemGenericAllocationHandle mc;
			CU(cuMulticastCreate(&mc, &mp));
			CU(cuMulticastAddDevice(mc, dev));
		}
		if (busy) {
			CUstream s;
			CU(cuStreamCreate(&s, 0));
			CU(cuLaunchHostFunc(s, sleeper, (void *)(uintptr_t)busy));
		}
	}
	if (serve) {
		path_of(path, sizeof(path), "share");
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		if (strlen(path) >= sizeof(a.sun_path)) {
			fprintf(stderr, "target_helper: %s is too long for a socket\n", path);
			return 3;
		}
		memcpy(a.sun_path, path, strlen(path) + 1);
		unlink(path);
		listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(listen_fd, 8) < 0) {
			perror("target_helper: share socket");
			return 3;
		}
		pthread_t t;
		pthread_create(&t, NULL, serve_exports, NULL);
	}
	char ready[256];
	snprintf(ready, sizeof(ready), "%d %#llx %zu\n", getpid(), (unsigned long long)va, size);
	path_of(path, sizeof(path), "ready");
	test_write_file(path, ready);
	char cmd_path[4096];
	path_of(cmd_path, sizeof(cmd_path), "cmd");
	for (;;) {
		char *cmd = test_read_file(cmd_path);
		if (!cmd) {
			usleep(2000);
			continue;
		}
		unlink(cmd_path);
		run(cmd);
		free(cmd);
	}
}
