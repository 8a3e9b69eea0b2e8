/* SPDX-License-Identifier: MIT */
/* Two processes share an allocation through cuemu: export a POSIX FD, pass it
 * with SCM_RIGHTS, import and map it; each sees the other's writes. */
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

int main(void)
{
	test_run("export, SCM_RIGHTS, import, map: writes shared both ways", two_processes);
	return test_done();
}
