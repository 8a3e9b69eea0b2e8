/* SPDX-License-Identifier: MIT */
/* cuemu: host memory through cuMemCreate (HOST_NUMA, HOST), cuMemAlloc/cuMemFree,
 * cuMemGetAddressRange and cuPointerGetAttribute(s); copies between the host and
 * device memory. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

static size_t gran;

static void host_numa(void)
{
	CUmemAllocationProp p = emu_host_prop();
	CHECK_EQ(emu_granularity(&p), gran);
	size_t free0, total;
	CHECK_CU(cuMemGetInfo(&free0, &total));
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemCreate(&h, 2 * gran, &p, 0));
	size_t free1;
	CHECK_CU(cuMemGetInfo(&free1, &total));
	CHECK_EQ(free1, free0); /* host memory is not device memory */
	CUmemAllocationProp got;
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
	CHECK_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
	CHECK_CU(cuMemMap(va, 2 * gran, 0, h, 0));
	/* The CPU gets access as a location of its own; device access is separate. */
	CUmemAccessDesc d[2] = {emu_host_access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
				emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READ)};
	CHECK_CU(cuMemSetAccess(va, 2 * gran, d, 2));
	unsigned long long f = 0;
	CHECK_CU(cuMemGetAccess(&f, &d[0].location, va));
	CHECK_EQ(f, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemGetAccess(&f, &d[1].location, va));
	CHECK_EQ(f, CU_MEM_ACCESS_FLAGS_PROT_READ);
	memset((void *)(uintptr_t)va, 0x5a, 2 * gran); /* plain CPU stores */
	/* Exported as a POSIX FD and imported by another process: the same bytes. */
	int fd = -1;
	CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* (a fork child of an initialised process: CUDA is unusable, so it
		 * maps the FD as the emulator's import would, through exec) */
		char fdarg[16];
		fcntl(fd, F_SETFD, 0); /* inherited across exec */
		snprintf(fdarg, sizeof(fdarg), "%d", fd);
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
		execl(self, self, "--import", fdarg, (char *)NULL);
		_exit(127);
	}
	int status = test_wait_child(pid, 20000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(((unsigned char *)(uintptr_t)va)[17], 0xa5); /* written by the importer */
	close(fd);
	CUmemorytype mt = 0;
	CHECK_CU(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
	CHECK_EQ(mt, CU_MEMORYTYPE_HOST);
	emu_unmap_free(va, 2 * gran, h);
	/* HOST (any node) too; an out-of-range node is refused. */
	p.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CHECK_CU(cuMemCreate(&h, gran, &p, 0));
	CHECK_CU(cuMemRelease(h));
	p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	p.location.id = 1000;
	CHECK_CU_EQ(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
}

/* The importer of host_numa(): maps the FD, checks the bytes, writes one. */
static int importer(int fd)
{
	if (emu_use_device(0))
		return 2;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CUmemAccessDesc d = emu_host_access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	if (cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0) || cuMemMap(va, 2 * MiB, 0, h, 0) ||
	    cuMemSetAccess(va, 2 * MiB, &d, 1))
		return 3;
	CUmemAllocationProp got;
	if (cuMemGetAllocationPropertiesFromHandle(&got, h) || got.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA)
		return 4;
	unsigned char *p = (unsigned char *)(uintptr_t)va;
	if (p[0] != 0x5a || p[2 * MiB - 1] != 0x5a)
		return 5;
	p[17] = 0xa5;
	return 0;
}

/* Registration keeps books as the driver documents them. */
static void host_register(void)
{
	size_t len = 4 * 4096;
	char *buf = aligned_alloc(4096, len);
	CHECK_CU(cuMemHostRegister(buf, len, CU_MEMHOSTREGISTER_PORTABLE));
	CHECK_CU_EQ(cuMemHostRegister(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CHECK_CU_EQ(cuMemHostUnregister(buf + 4096), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CHECK_CU(cuMemHostUnregister(buf));
	CHECK_CU_EQ(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CHECK_CU(cuMemHostRegister(buf + 4096, 4096, 0)); /* free again */
	CHECK_CU(cuMemHostUnregister(buf + 4096));
	CHECK_CU_EQ(cuMemHostRegister(NULL, len, 0), CUDA_ERROR_INVALID_VALUE);
	free(buf);
}

static void mem_alloc(void)
{
	size_t free0, free1, total;
	CHECK_CU(cuMemGetInfo(&free0, &total));
	CUdeviceptr p = 0, q = 0;
	CHECK_CU(cuMemAlloc(&p, 1000));
	CHECK_CU(cuMemAlloc(&q, 3 * gran + 5));
	CHECK(p && (p & 255) == 0 && (q & 255) == 0);
	CHECK_CU(cuMemGetInfo(&free1, &total));
	CHECK(free1 < free0);
	CHECK_CU(cuMemsetD8(p, 0x11, 1000));
	unsigned char b[1000];
	CHECK_CU(cuMemcpyDtoH(b, p, sizeof(b)));
	CHECK_EQ(b[999], 0x11);
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK_CU(cuMemGetAddressRange(&base, &size, q + gran + 7));
	CHECK_EQ(base, q);
	CHECK_EQ(size, 3 * gran + 5);
	CHECK_CU_EQ(cuMemGetAddressRange(&base, &size, 0x1000), CUDA_ERROR_NOT_FOUND);
	/* Attributes, one at a time and together. */
	CUcontext ctx = NULL, cur = NULL;
	CHECK_CU(cuCtxGetCurrent(&cur));
	CHECK_CU(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p + 10));
	CHECK(ctx == cur);
	int ordinal = -1, ipc = 0, mapped = 0;
	CUmemorytype mt = 0;
	CUdeviceptr start = 0;
	size_t range = 0;
	CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				       CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
				       CU_POINTER_ATTRIBUTE_MAPPED,
				       CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
				       CU_POINTER_ATTRIBUTE_RANGE_SIZE};
	void *data[] = {&ordinal, &mt, &ipc, &mapped, &start, &range};
	CHECK_CU(cuPointerGetAttributes(6, attrs, data, q + 100));
	CHECK_EQ(ordinal, 1);
	CHECK_EQ(mt, CU_MEMORYTYPE_DEVICE);
	CHECK_EQ(ipc, 1);
	CHECK_EQ(mapped, 1);
	CHECK_EQ(start, q);
	CHECK_EQ(range, 3 * gran + 5);
	/* An unknown pointer: an error alone, zeros together. */
	CHECK_CU_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 0x1000),
		    CUDA_ERROR_INVALID_VALUE);
	mapped = 7;
	CHECK_CU(cuPointerGetAttributes(6, attrs, data, 0x1000));
	CHECK_EQ(mapped, 0);
	CHECK_EQ(start, 0);
	/* A VMM mapping is no legacy-IPC memory and belongs to no context. */
	CUmemAllocationProp vp = emu_prop(1);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	va = emu_map_new(gran, &vp, &h);
	CHECK_CU(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va));
	CHECK_EQ(ipc, 0);
	CHECK_CU(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, va));
	CHECK(ctx == NULL);
	CHECK_CU(cuMemGetAddressRange(&base, &size, va + 5));
	CHECK(base == va && size == gran);
	emu_unmap_free(va, gran, h);
	/* Free: only what cuMemAlloc returned, once. */
	CHECK_CU_EQ(cuMemFree(q + 256), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemFree(p));
	CHECK_CU(cuMemFree(q));
	CHECK_CU_EQ(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemGetInfo(&free1, &total));
	CHECK_EQ(free1, free0);
	/* No context, no cuMemAlloc. */
	CHECK_CU(cuCtxSetCurrent(NULL));
	CHECK_CU_EQ(cuMemAlloc(&p, 1000), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_CU(cuCtxSetCurrent(cur));
}

/* The bytes of device memory this process's cuemu memfds hold (their pages). */
static long long device_pages_bytes(void)
{
	DIR *d = opendir("/proc/self/fd");
	long long total = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char link[64], target[256];
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		struct stat st;
		if (n > 0 && (target[n] = '\0', strstr(target, "memfd:cuemu-mem")) && stat(link, &st) == 0)
			total += (long long)st.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return total;
}

/* A copy between the host and device memory reads and writes the memory's own
 * pages: across two mappings of one allocation at other offsets, unaligned;
 * and reading memory never written makes none of its pages (on a GPU, memory
 * is there; here a page made is a fault and a page cleared). */
static void copies(void)
{
	size_t size = 4 * gran, half = 2 * gran;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_create_reserve(size, size, &h);
	CHECK_CU(cuMemMap(va, half, half, h, 0)); /* the allocation's second half first */
	CHECK_CU(cuMemMap(va + half, half, 0, h, 0));
	CUmemAccessDesc a = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, size, &a, 1));
	CHECK_CU(cuMemsetD8(va, 0, size)); /* (zeros, as fresh memory is) */
	unsigned char *out = malloc(size), *in = malloc(size);
	memset(out, 0xee, size);
	CHECK_CU(cuMemcpyDtoH(out, va, size));
	for (size_t i = 0; i < size; i++)
		if (out[i]) {
			CHECK_EQ(out[i], 0);
			break;
		}
	CHECK_EQ(device_pages_bytes(), 0);
	emu_pattern(in, size - 3, 7);
	CHECK_CU(cuMemcpyHtoD(va + 1, in, size - 3));
	CHECK(emu_pattern_ok((unsigned char *)(uintptr_t)va + 1, size - 3, 7)); /* the mapped pages */
	memset(out, 0, size);
	CHECK_CU(cuMemcpyDtoH(out, va + 1, size - 3));
	CHECK(emu_pattern_ok(out, size - 3, 7));
	CHECK_CU(cuMemcpyDtoD(va, va + half, half)); /* device to device */
	CHECK(!memcmp((void *)(uintptr_t)va, (void *)(uintptr_t)(va + half), half));
	CHECK_CU(cuMemUnmap(va, size));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemAddressFree(va, size));
	free(in);
	free(out);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--import") == 0)
		return importer(atoi(argv[2]));
	CHECK_CU(emu_use_device(1));
	gran = emu_granularity(NULL);
	static const struct {
		const char *name;
		void (*run)(void);
	} cases[] = {
		{"host memory: HOST_NUMA and HOST, CPU access, export and import", host_numa},
		{"cuMemAlloc/cuMemFree, cuMemGetAddressRange, cuPointerGetAttribute(s)", mem_alloc},
		{"cuMemHostRegister/Unregister: overlaps and unknown ranges refused", host_register},
		{"copies between the host and device memory: its own pages, none made to be read", copies},
	};
	int fds = test_count_fds();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		test_run(cases[i].name, cases[i].run);
	CHECK_EQ(test_count_fds(), fds);
	return test_done();
}
