/* SPDX-License-Identifier: MIT */
/* Two processes share an allocation through cuemu: export a POSIX FD, pass it
 * with SCM_RIGHTS, import and map it; each sees the other's writes. And legacy
 * IPC: cuMemAlloc memory through cuIpcGetMemHandle/cuIpcOpenMemHandle, which
 * the native checkpoint of the opener refuses. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

#define SIZE (4 * MiB)

static void put(int sock, char c)
{
	if (write(sock, &c, 1) != 1)
		test_fail(__FILE__, __LINE__, "write to peer failed");
}

static char get(int sock)
{
	char c = 0;
	if (read(sock, &c, 1) != 1)
		test_fail(__FILE__, __LINE__, "peer closed early");
	return c;
}

static volatile unsigned char *map_handle(CUmemGenericAllocationHandle h, int dev)
{
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, SIZE, 0, 0, 0));
	CHECK_CU(cuMemMap(va, SIZE, 0, h, 0));
	CUmemAccessDesc a = emu_access(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, SIZE, &a, 1));
	return (volatile unsigned char *)(uintptr_t)va;
}

/* The importer: its own device and its own address. */
static int importer(int sock)
{
	CHECK_CU(emu_use_device(1));
	int fd = test_recv_fd(sock);
	CHECK(fd >= 0);
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CUmemAllocationProp p;
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&p, h));
	CHECK_EQ(p.location.id, 0); /* the exporter's device */
	volatile unsigned char *b = map_handle(h, 1);
	CHECK(emu_pattern_ok((const unsigned char *)b, SIZE, 5)); /* the creator's bytes */
	b[SIZE - 1] = 0xa5;                                       /* a write the creator must see */
	put(sock, 'w');
	CHECK_EQ(get(sock), 'c');
	CHECK_EQ(b[0], 0x3c); /* and the creator's later write */
	unsigned char out[8];
	CHECK_CU(cuMemcpyDtoH(out, (CUdeviceptr)(uintptr_t)b, sizeof(out)));
	CHECK_EQ(out[0], 0x3c);
	CHECK_CU(cuMemUnmap((CUdeviceptr)(uintptr_t)b, SIZE));
	CHECK_CU(cuMemRelease(h));
	put(sock, 'd');
	return test_done();
}

static void two_processes(void)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	/* Fork before CUDA is initialised, as vLLM does. */
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(importer(sv[1]));
	}
	close(sv[1]);
	int sock = sv[0];
	CHECK_CU(emu_use_device(0));
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemCreate(&h, SIZE, &p, 0));
	volatile unsigned char *b = map_handle(h, 0);
	emu_pattern((unsigned char *)b, SIZE, 5);
	int fd = -1;
	CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK_EQ(test_send_fd(sock, fd), 0);
	close(fd);
	CHECK_EQ(get(sock), 'w');
	CHECK_EQ(b[SIZE - 1], 0xa5); /* the importer's write */
	b[0] = 0x3c;
	put(sock, 'c');
	CHECK_EQ(get(sock), 'd');
	int status = test_wait_child(pid, 10000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The importer is gone; the creator's bytes are intact. */
	CHECK_EQ(b[SIZE - 1], 0xa5);
	CHECK_CU(cuMemUnmap((CUdeviceptr)(uintptr_t)b, SIZE));
	CHECK_CU(cuMemRelease(h));
	close(sock);
}

/* The opener (a fresh process, exec'd): device 1, the exporter's bytes. */
static int ipc_opener(int sock)
{
	CHECK_CU(emu_use_device(1));
	CUipcMemHandle h;
	CUipcEventHandle eh;
	CHECK_EQ(read(sock, &h, sizeof(h)), (ssize_t)sizeof(h));
	CHECK_EQ(read(sock, &eh, sizeof(eh)), (ssize_t)sizeof(eh));
	CUdeviceptr p = 0, again = 0;
	CHECK_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CHECK_CU_EQ(cuIpcOpenMemHandle(&again, h, 0x4), CUDA_ERROR_INVALID_VALUE); /* unknown flag */
	CHECK_CU_EQ(cuIpcOpenMemHandle(&again, h, 0), CUDA_ERROR_INVALID_VALUE);   /* cuda.h: must be lazy */
	CHECK_CU(cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	CHECK_EQ(again, p); /* opened already: the same pointer, one more reference */
	CHECK(emu_pattern_ok((const unsigned char *)(uintptr_t)p, SIZE - 100, 7));
	CUdeviceptr base;
	size_t size;
	CHECK_CU(cuMemGetAddressRange(&base, &size, p + 100));
	CHECK_EQ(base, p);
	CHECK_EQ(size, (size_t)(SIZE - 100));                /* what was asked for */
	CHECK_CU_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* closed, not freed */
	unsigned char one = 0xa5;
	CHECK_CU(cuMemcpyHtoD(p + 5, &one, 1));
	CUevent ev;
	CHECK_CU(cuIpcOpenEventHandle(&ev, eh));
	CHECK_CU(cuEventDestroy(ev));
	put(sock, 'w');
	CHECK_EQ(get(sock), 'c');
	CHECK_CU(cuIpcCloseMemHandle(p));
	CHECK_CU(cuIpcCloseMemHandle(p));
	CHECK_CU_EQ(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
	/* Opened once more, for the exporter's native checkpoint of this process. */
	CHECK_CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	put(sock, 'd');
	CHECK_EQ(get(sock), 'x'); /* (killed before: its restore is refused) */
	return test_done();
}

static char self[PATH_MAX];

static void legacy_ipc(void)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	char fdarg[16];
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	pid_t pid = fork(); /* and exec: a fresh process (its failures on our stderr) */
	if (pid == 0) {
		close(sv[0]);
		execl(self, self, "ipc-opener", fdarg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	int sock = sv[0];
	CHECK_CU(emu_use_device(0));
	CUdeviceptr d;
	CHECK_CU(cuMemAlloc(&d, SIZE - 100));
	unsigned char *pat = malloc(SIZE);
	emu_pattern(pat, SIZE - 100, 7);
	CHECK_CU(cuMemcpyHtoD(d, pat, SIZE - 100));
	CUipcMemHandle h;
	CHECK_CU(cuIpcGetMemHandle(&h, d));
	CUevent plain, shared;
	CUipcEventHandle eh;
	CHECK_CU(cuEventCreate(&plain, 0));
	CHECK_CU_EQ(cuIpcGetEventHandle(&eh, plain), CUDA_ERROR_INVALID_VALUE); /* not interprocess */
	CHECK_CU(cuEventCreate(&shared, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
	CHECK_CU(cuIpcGetEventHandle(&eh, shared));
	CUdeviceptr own;
	CHECK_CU_EQ(cuIpcOpenMemHandle(&own, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		    CUDA_ERROR_INVALID_CONTEXT); /* the exporter itself (r580) */
	CHECK_EQ(write(sock, &h, sizeof(h)), (ssize_t)sizeof(h));
	CHECK_EQ(write(sock, &eh, sizeof(eh)), (ssize_t)sizeof(eh));
	CHECK_EQ(get(sock), 'w');
	unsigned char got = 0;
	CHECK_CU(cuMemcpyDtoH(&got, d + 5, 1));
	CHECK_EQ(got, 0xa5); /* the opener's write */
	put(sock, 'c');
	CHECK_EQ(get(sock), 'd');
	/* r580 (seen on an H200): a process holding an opened IPC mapping is
	 * checkpointed, and its restore refused before anything changes; it
	 * stays CHECKPOINTED, lost (as on a GPU). */
	CHECK_CU(cuCheckpointProcessLock(pid, &(CUcheckpointLockArgs){.timeoutMs = 10000}));
	CHECK_CU(cuCheckpointProcessCheckpoint(pid, NULL));
	CHECK_CU_EQ(cuCheckpointProcessRestore(pid, NULL), CUDA_ERROR_INVALID_VALUE);
	CUprocessState st = CU_PROCESS_STATE_RUNNING;
	CHECK_CU(cuCheckpointProcessGetState(pid, &st));
	CHECK_EQ(st, CU_PROCESS_STATE_CHECKPOINTED);
	kill(pid, SIGKILL);
	test_wait_child(pid, 10000);
	CHECK_CU(cuEventDestroy(plain));
	CHECK_CU(cuEventDestroy(shared));
	CHECK_CU(cuMemFree(d));
	free(pat);
	close(sock);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "ipc-opener"))
		return ipc_opener(atoi(argv[2]));
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	test_run("export, SCM_RIGHTS, import, map: writes shared both ways", two_processes);
	test_run("legacy IPC: cuMemAlloc memory opened in another process; its native restore refused", legacy_ipc);
	return test_done();
}
