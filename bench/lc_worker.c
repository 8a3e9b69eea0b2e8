/* SPDX-License-Identifier: MIT */
/* A participant for bench/lifecycle: participant 0 creates N allocations, maps
 * them and sends their (capability) FDs to every other participant over a
 * socket in DIR; the others import and map all of them. Then it parks.
 * Each allocation is SIZE bytes (rounded up to the granularity; 0: one
 * granularity), on device 0 and 1 in turn.
 *   lc_worker DIR INDEX COUNT N [SIZE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cuda.h>

#include "cu_check.h"

static size_t size;

static CUdeviceptr map(CUmemGenericAllocationHandle h, int dev)
{
	CUdeviceptr va;
	CU(cuMemAddressReserve(&va, size, 0, 0, 0));
	CU(cuMemMap(va, size, 0, h, 0));
	CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cuMemSetAccess(va, size, &d, 1));
	return va;
}

static int send_fd(int s, int fd)
{
	char b = 'F';
	struct iovec iov = {&b, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr a;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
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
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr a;
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	if (recvmsg(s, &m, 0) != 1)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(int));
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 5 && argc != 6)
		return 64;
	const char *dir = argv[1];
	int index = atoi(argv[2]), count = atoi(argv[3]), n = atoi(argv[4]);
	CUcontext ctx;
	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t gran;
	CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size = argc == 6 ? strtoull(argv[5], NULL, 0) : 0;
	size = size ? (size + gran - 1) / gran * gran : gran;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s/share.sock", dir);
	if (index == 0) {
		int l = socket(AF_UNIX, SOCK_STREAM, 0);
		unlink(a.sun_path);
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 64) < 0)
			return 1;
		CUmemGenericAllocationHandle *h = malloc(sizeof(*h) * (size_t)n);
		for (int i = 0; i < n; i++) {
			p.location.id = i % 2;
			CU(cuMemCreate(&h[i], size, &p, 0));
			CU(cuMemsetD8_v2(map(h[i], i % 2), (unsigned char)(i + 1), size));
		}
		for (int peer = 1; peer < count; peer++) {
			int c = accept(l, NULL, NULL);
			for (int i = 0; i < n; i++) {
				int fd;
				CU(cuMemExportToShareableHandle(&fd, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
								0));
				send_fd(c, fd);
				close(fd);
			}
			close(c);
		}
	} else {
		int s = socket(AF_UNIX, SOCK_STREAM, 0);
		while (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
			usleep(2000);
		for (int i = 0; i < n; i++) {
			int fd = recv_fd(s);
			CUmemGenericAllocationHandle h;
			CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
			close(fd);
			map(h, index % 2);
		}
		close(s);
	}
	char ready[4200];
	snprintf(ready, sizeof(ready), "%s/ready-%d", dir, index);
	fclose(fopen(ready, "w"));
	for (;;)
		pause();
}
