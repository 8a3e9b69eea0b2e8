/* SPDX-License-Identifier: MIT */
// kernel_share: two processes share one VMM allocation (POSIX FD export and
// import, which the interposer turns into a capability) and prove it with GPU
// kernels: one process writes with a kernel, the other checks with a kernel,
// then the other way round. With --park it does one round, writes
// ready-for-snapshot, waits for restore-complete and does a second round, so a
// suspend/resume or checkpoint/restore in between is checked on the device.
// Prints PASS or FAIL per process; exit 0 only when both pass.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (64u << 20)
#define WORDS (SIZE / 4)

__global__ void fill(unsigned *p, unsigned v, unsigned n)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = v ^ i;
}

__global__ void check(const unsigned *p, unsigned v, unsigned n, unsigned *bad)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		if (p[i] != (v ^ i))
			atomicAdd(bad, 1u);
}

static const char *role = "parent";

#define CU(x)                                                                     \
	do {                                                                          \
		CUresult r_ = (x);                                                        \
		if (r_ != CUDA_SUCCESS) {                                                 \
			const char *s_ = "?";                                                 \
			cuGetErrorName(r_, &s_);                                              \
			fprintf(stderr, "kernel_share %s: %s failed: %s\n", role, #x, s_);   \
			exit(1);                                                              \
		}                                                                         \
	} while (0)

static void put(int s, char c) { if (write(s, &c, 1) != 1) exit(1); }
static char get(int s) { char c = 0; if (read(s, &c, 1) != 1) exit(1); return c; }

static int send_fd(int s, int fd)
{
	char b = 'F';
	struct iovec iov = {&b, 1};
	char buf[CMSG_SPACE(sizeof(int))];
	memset(buf, 0, sizeof(buf));
	struct msghdr m = {};
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = buf;
	m.msg_controllen = sizeof(buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(s, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int s)
{
	char b;
	struct iovec iov = {&b, 1};
	char buf[CMSG_SPACE(sizeof(int))];
	struct msghdr m = {};
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = buf;
	m.msg_controllen = sizeof(buf);
	if (recvmsg(s, &m, 0) != 1)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

static CUdeviceptr setup(int dev, CUmemGenericAllocationHandle *h, int fd)
{
	CU(cuInit(0));
	CUcontext ctx;
	CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(cuCtxSetCurrent(ctx));
	cudaSetDevice(dev);
	CUmemAllocationProp p = {};
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = 0;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	if (fd < 0)
		CU(cuMemCreate(h, SIZE, &p, 0));
	else
		CU(cuMemImportFromShareableHandle(h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CUdeviceptr va;
	CU(cuMemAddressReserve(&va, SIZE, 0, 0, 0));
	CU(cuMemMap(va, SIZE, 0, *h, 0));
	CUmemAccessDesc d = {};
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = dev;
	d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CU(cuMemSetAccess(va, SIZE, &d, 1));
	return va;
}

static void write_round(CUdeviceptr va, unsigned v)
{
	fill<<<256, 256>>>((unsigned *)va, v, WORDS);
	if (cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "kernel_share %s: fill kernel failed\n", role);
		exit(1);
	}
}

static unsigned check_round(CUdeviceptr va, unsigned v)
{
	unsigned *bad = NULL, host = 0;
	cudaMalloc(&bad, sizeof(unsigned));
	cudaMemset(bad, 0, sizeof(unsigned));
	check<<<256, 256>>>((const unsigned *)va, v, WORDS, bad);
	cudaMemcpy(&host, bad, sizeof(host), cudaMemcpyDeviceToHost);
	cudaFree(bad);
	return host;
}

static void wait_file(const char *name)
{
	const char *ctl = getenv("SNAPSHOT_CONTROL_DIR");
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", ctl ? ctl : "/snapshot-control", name);
	for (int i = 0; i < 60000 && access(path, F_OK) != 0; i++)
		usleep(10000);
}

int main(int argc, char **argv)
{
	bool park = argc > 1 && !strcmp(argv[1], "--park");
	int sv[2];
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	pid_t child = fork(); // before CUDA is initialised
	int failures = 0;
	if (child == 0) {
		role = "child";
		close(sv[0]);
		int s = sv[1];
		int fd = recv_fd(s);
		int ndev = 0;
		cuInit(0);
		cuDeviceGetCount(&ndev);
		CUmemGenericAllocationHandle h;
		CUdeviceptr va = setup(ndev > 1 ? 1 : 0, &h, fd);
		close(fd);
		for (int round = 0; round < (park ? 2 : 1); round++) {
			get(s);
			failures += check_round(va, 0x1000u + round) != 0; // the parent's kernel wrote
			write_round(va, 0x2000u + round);
			put(s, 'c');
		}
		printf("%s kernel_share child pid %d\n", failures ? "FAIL" : "PASS", getpid());
		return failures ? 1 : 0;
	}
	close(sv[1]);
	int s = sv[0];
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = setup(0, &h, -1);
	int fd = -1;
	CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	send_fd(s, fd);
	close(fd);
	for (int round = 0; round < (park ? 2 : 1); round++) {
		if (round == 1) {
			const char *ctl = getenv("SNAPSHOT_CONTROL_DIR");
			char path[4200];
			snprintf(path, sizeof(path), "%s/ready-for-snapshot", ctl ? ctl : "/snapshot-control");
			close(open(path, O_WRONLY | O_CREAT, 0644));
			printf("kernel_share: ready, parked until restore-complete\n");
			fflush(stdout);
			wait_file("restore-complete");
		}
		write_round(va, 0x1000u + round);
		put(s, 'p');
		get(s);
		failures += check_round(va, 0x2000u + round) != 0; // the child's kernel wrote
	}
	int status;
	waitpid(child, &status, 0);
	failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("%s kernel_share parent pid %d\n", failures ? "FAIL" : "PASS", getpid());
	return failures ? 1 : 0;
}
