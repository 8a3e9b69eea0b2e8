/* SPDX-License-Identifier: MIT */
/* cuemu in one process: the VMM lifecycle, reference counting, access, errors,
 * copies, streams, multicast objects and the resolver. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <signal.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../harness/test.h"
#include "cusnap/counters.h"
#include "emu_util.h"

static CUcontext ctx;
static size_t gran;
static char counts_path[] = "/tmp/cuemu-counts-XXXXXX"; /* CUSNAP_COUNT */

/* This process's mappings whose line names needle, as the next driver call
 * finds them: cuemu revokes unmapped ranges on the host before it (revoke.c). */
static int maps_after_call(const char *needle)
{
	int ver;
	CHECK_CU(cuDriverGetVersion(&ver));
	return test_count_maps(getpid(), needle);
}

static void lifecycle(void)
{
	size_t size = 2 * gran;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_rw(0, size, &h);
	CHECK_EQ(test_count_maps(getpid(), "memfd:cuemu-mem-d0"), 1);
	unsigned char *in = malloc(size), *out = malloc(size);
	emu_pattern(in, size, 1);
	CHECK_CU(cuMemcpyHtoD(va, in, size));
	memset(out, 0, size);
	CHECK_CU(cuMemcpyDtoH(out, va, size));
	CHECK(emu_pattern_ok(out, size, 1));
	/* The device pointer is a real address of this process. */
	CHECK(emu_pattern_ok((unsigned char *)(uintptr_t)va, size, 1));
	CHECK_CU(cuMemUnmap(va, size));
	CHECK_EQ(maps_after_call("memfd:cuemu-mem-d0"), 0);
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemAddressFree(va, size));
	free(in);
	free(out);
}

static void release_while_mapped(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_rw(1, gran, &h);
	CHECK_CU(cuMemsetD32(va, 0xdeadbeef, gran / 4));
	CHECK_CU(cuMemRelease(h));
	/* The mapping keeps the bytes; the handle is gone. */
	CHECK_EQ(((uint32_t *)(uintptr_t)va)[gran / 4 - 1], 0xdeadbeef);
	CUmemAllocationProp p;
	CHECK_CU_EQ(cuMemGetAllocationPropertiesFromHandle(&p, h), CUDA_ERROR_INVALID_VALUE);
	/* Retain from the address gives a handle to the same allocation back. */
	CUmemGenericAllocationHandle again;
	CHECK_CU(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 4096)));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&p, again));
	CHECK_EQ(p.location.id, 1);
	CHECK_CU(cuMemRelease(again));
	CHECK_EQ(test_count_maps(getpid(), "memfd:cuemu-mem-d1"), 1);
	CHECK_CU(cuMemUnmap(va, gran));
	/* Last reference gone: the backing is freed. */
	CHECK_EQ(maps_after_call("memfd:cuemu-mem-d1"), 0);
	CHECK_CU_EQ(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemAddressFree(va, gran));
}

static void retain_counts(void)
{
	CUmemGenericAllocationHandle h, r1, r2;
	CUdeviceptr va = emu_map_rw(0, gran, &h);
	CHECK_CU(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)va));
	CHECK_CU(cuMemRetainAllocationHandle(&r2, (void *)(uintptr_t)va));
	CHECK_EQ(r1, h);
	CHECK_EQ(r2, h);
	CHECK_CU(cuMemUnmap(va, gran));
	/* Three references: the handle stays valid until the third release. */
	CUmemAllocationProp p;
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&p, h));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&p, h));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU_EQ(cuMemGetAllocationPropertiesFromHandle(&p, h), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemAddressFree(va, gran));
}

static void properties_and_granularity(void)
{
	CUmemAllocationProp p = emu_prop(1), got;
	size_t g = 0;
	CHECK_CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_EQ(g, 2 * MiB);
	CHECK_CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	CHECK_EQ(g, 2 * MiB);
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemCreate(&h, 3 * g, &p, 0));
	memset(&got, 0xff, sizeof(got));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
	CHECK_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
	CHECK_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
	CHECK_EQ(got.location.id, 1);
	CHECK_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CHECK_CU(cuMemRelease(h));
	p.location.id = 7;
	CHECK_CU_EQ(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_DEVICE);
	CHECK_CU_EQ(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_INVALID_DEVICE);
	p = emu_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32;
	CHECK_CU_EQ(cuMemCreate(&h, gran, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
	/* FABRIC: exportable (opaque bytes), never importable (no IMEX here). */
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
	CHECK_CU(cuMemCreate(&h, gran, &p, 0));
	CUmemFabricHandle fh;
	CHECK_CU(cuMemExportToShareableHandle(&fh, h, CU_MEM_HANDLE_TYPE_FABRIC, 0));
	CUmemGenericAllocationHandle imp;
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&imp, &fh, CU_MEM_HANDLE_TYPE_FABRIC), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_CU(cuMemRelease(h));
	char name[32];
	CHECK_CU(cuDeviceGetName(name, sizeof(name), 0));
	CHECK_STR(name, "cuemu");
	CUuuid u0, u1;
	CHECK_CU(cuDeviceGetUuid(&u0, 0));
	CHECK_CU(cuDeviceGetUuid(&u1, 1));
	CHECK(memcmp(&u0, &u1, sizeof(u0)) != 0);
}

static void unaligned_rejected(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CHECK_CU_EQ(cuMemCreate(&h, gran + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemAddressReserve(&va, gran / 2, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemCreate(&h, 2 * gran, &p, 0));
	CHECK_CU(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
	CHECK_CU_EQ(cuMemMap(va + 4096, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemMap(va, gran + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemMap(va, gran, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemMap(va, 2 * gran, gran, h, 0), CUDA_ERROR_INVALID_VALUE);         /* past the end */
	CHECK_CU_EQ(cuMemMap(va + 3 * gran, 2 * gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* out of reservation */
	CHECK_CU(cuMemMap(va, 2 * gran, 0, h, 0));
	CHECK_CU_EQ(cuMemMap(va + gran, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps */
	CHECK_CU_EQ(cuMemUnmap(va, gran), CUDA_ERROR_INVALID_VALUE);               /* partial */
	CHECK_CU_EQ(cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE);     /* still mapped */
	CHECK_CU(cuMemUnmap(va, 2 * gran));
	CHECK_CU_EQ(cuMemAddressFree(va, 2 * gran), CUDA_ERROR_INVALID_VALUE); /* not the whole reservation */
	CHECK_CU(cuMemAddressFree(va, 4 * gran));
	CHECK_CU(cuMemRelease(h));
}

static sigjmp_buf fault_jmp;
static void on_segv(int sig)
{
	(void)sig;
	siglongjmp(fault_jmp, 1);
}

/* 1 if a read (or write) of p faults. */
static int faults(volatile unsigned char *p, int write)
{
	struct sigaction sa = {.sa_handler = on_segv}, old;
	sigaction(SIGSEGV, &sa, &old);
	int faulted = 0;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		if (write)
			*p = *p;
		else
			(void)*p;
	} else {
		faulted = 1;
	}
	sigaction(SIGSEGV, &old, NULL);
	return faulted;
}

static void access_merged(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	va = emu_map_new(gran, &p, &h);
	volatile unsigned char *b = (unsigned char *)(uintptr_t)va;
	CHECK(faults(b, 0)); /* inaccessible until access is set */
	unsigned long long flags = 99;
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
	CHECK_CU(cuMemGetAccess(&flags, &loc, va));
	CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	CUmemAccessDesc d0 = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAccessDesc d1 = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK_CU(cuMemSetAccess(va, gran, &d0, 1));
	CHECK_CU(cuMemSetAccess(va, gran, &d1, 1));
	/* Granting device 1 did not revoke device 0. */
	CHECK_CU(cuMemGetAccess(&flags, &loc, va));
	CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	loc.id = 1;
	CHECK_CU(cuMemGetAccess(&flags, &loc, va));
	CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK(!faults(b, 1));
	/* Revoking device 0 leaves device 1's read access. */
	d0.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	CHECK_CU(cuMemSetAccess(va, gran, &d0, 1));
	CHECK(!faults(b, 0));
	CHECK(faults(b, 1));
	unsigned char tmp[16];
	CHECK_CU(cuMemcpyDtoH(tmp, va, sizeof(tmp)));
	CHECK_CU_EQ(cuMemcpyHtoD(va, tmp, sizeof(tmp)), CUDA_ERROR_INVALID_VALUE); /* read-only now */
	CUmemAccessDesc bad = emu_access(5, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK_CU_EQ(cuMemSetAccess(va, gran, &bad, 1), CUDA_ERROR_INVALID_DEVICE);
	CHECK_CU_EQ(cuMemSetAccess(va, gran / 2, &d1, 1), CUDA_ERROR_INVALID_VALUE); /* not whole mappings */
	emu_unmap_free(va, gran, h);
}

static void out_of_memory(void)
{
	/* CUEMU_MEMORY=64M for this process (set in main). */
	CUmemAllocationProp p = emu_prop(1);
	CUmemGenericAllocationHandle a, b;
	size_t freeb, total;
	CUdevice dev;
	CHECK_CU(cuCtxGetDevice(&dev));
	CHECK_CU(cuMemGetInfo(&freeb, &total));
	CHECK_EQ(total, 64 * MiB);
	CHECK_CU(cuMemCreate(&a, 48 * MiB, &p, 0));
	CHECK_CU_EQ(cuMemCreate(&b, 32 * MiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_CU(cuMemCreate(&b, 16 * MiB, &p, 0));
	CHECK_CU(cuMemRelease(a));
	CHECK_CU(cuMemCreate(&a, 32 * MiB, &p, 0));
	CHECK_CU(cuMemRelease(a));
	CHECK_CU(cuMemRelease(b));
	/* The accounting is per device: device 0 is untouched. */
	p.location.id = 0;
	CHECK_CU(cuMemCreate(&a, 64 * MiB, &p, 0));
	CHECK_CU(cuMemRelease(a));
}

static void null_and_unknown(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h = 0;
	CHECK_CU_EQ(cuMemCreate(NULL, gran, &p, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemCreate(&h, gran, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemRelease(0x123456789abcULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemMap(0, gran, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemMap(0x7f0000000000ULL, gran, 0, 0xdead, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemUnmap(0x7f0000000000ULL, gran), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemSetAccess(0x7f0000000000ULL, gran, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemAddressFree(0x7f0000000000ULL, gran), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemRetainAllocationHandle(&h, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemRetainAllocationHandle(NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemGetAllocationPropertiesFromHandle(NULL, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemGetAllocationPropertiesFromHandle(&p, 0xdead), CUDA_ERROR_INVALID_VALUE);
	int fd = -1;
	CHECK_CU_EQ(cuMemExportToShareableHandle(&fd, 0xdead, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemExportToShareableHandle(NULL, 0xdead, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)-1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	/* A descriptor that is not one of ours (stdin, a pipe) is refused. */
	int pipefd[2];
	CHECK_EQ(pipe(pipefd), 0);
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)pipefd[0],
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	close(pipefd[0]);
	close(pipefd[1]);
	CHECK_CU_EQ(cuMemcpyHtoD(0, &fd, 4), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuStreamSynchronize((CUstream)(uintptr_t)0xdead0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU_EQ(cuMulticastAddDevice(0xdead, 0), CUDA_ERROR_INVALID_VALUE);
	const char *s = NULL;
	CHECK_CU(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
	CHECK_STR(s, "CUDA_ERROR_INVALID_VALUE");
	CHECK_CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	CHECK_STR(s, "out of memory");
	CHECK_CU_EQ(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	CHECK(s == NULL);
}

static void export_import_same_process(void)
{
	int fds_before = test_count_fds();
	CUmemGenericAllocationHandle h, imp;
	CUdeviceptr va = emu_map_rw(0, gran, &h);
	int fd = -1;
	CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(fd >= 0);
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK(imp != h);
	CUdeviceptr va2;
	CHECK_CU(cuMemAddressReserve(&va2, gran, 0, 0, 0));
	CHECK_CU(cuMemMap(va2, gran, 0, imp, 0));
	CUmemAccessDesc a = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va2, gran, &a, 1));
	*(volatile int *)(uintptr_t)va = 4242;
	CHECK_EQ(*(volatile int *)(uintptr_t)va2, 4242);
	emu_unmap_free(va2, gran, imp);
	emu_unmap_free(va, gran, h);
	CHECK_EQ(test_count_fds(), fds_before);
	/* Without the POSIX handle type the allocation cannot be exported. */
	CUmemAllocationProp p = emu_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	CHECK_CU(cuMemCreate(&h, gran, &p, 0));
	CHECK_CU_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemRelease(h));
}

/* A memfd of one granule named name, with the attribute an import reads
 * first (attr) or none. */
static int named_memfd(const char *name, const char *attr)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(ftruncate(fd, (off_t)gran) == 0);
	if (attr && fsetxattr(fd, "user.cuemu.name", attr, strlen(attr), 0) < 0) {
		close(fd);
		return -1; /* (no user attributes on memfds here: before Linux 6.6) */
	}
	return fd;
}

/* Does importing fd succeed? */
static bool imports(int fd)
{
	CUmemGenericAllocationHandle h;
	CUresult rc = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (rc == CUDA_SUCCESS)
		CHECK_CU(cuMemRelease(h));
	close(fd);
	return rc == CUDA_SUCCESS;
}

/* An import knows cuemu's memfds by the attribute that carries their name,
 * and by the name itself where there is no attribute. */
static void import_by_name(void)
{
	CHECK(imports(named_memfd("cuemu-mem-d0-t1-1.1", NULL)));
	CHECK(!imports(named_memfd("something-else", NULL)));
	int fd = named_memfd("something-else", "cuemu-mem-d0-t1-1.1");
	if (fd >= 0)
		CHECK(imports(fd));
	fd = named_memfd("cuemu-mem-d0-t1-1.1", "something-else");
	if (fd >= 0)
		CHECK(!imports(fd));
}

static int host_fn_ran;
static void CUDA_CB host_fn(void *arg)
{
	usleep(20000);
	*(int *)arg = 1;
}

static void streams_and_events(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_rw(0, gran, &h);
	CUstream s;
	CUevent e;
	CHECK_CU(cuStreamCreate(&s, 0));
	CHECK_CU(cuEventCreate(&e, 0));
	unsigned char *src = malloc(gran), *dst = malloc(gran);
	emu_pattern(src, gran, 3);
	CHECK_CU(cuLaunchHostFunc(s, host_fn, &host_fn_ran));
	CHECK_CU(cuMemcpyHtoDAsync(va, src, gran, s));
	CHECK_CU(cuMemsetD8Async(va, 0x5a, 16, s));
	CHECK_CU(cuEventRecord(e, s));
	CHECK_CU(cuMemcpyDtoHAsync(dst, va, gran, s));
	CHECK_CU_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* the host function sleeps */
	CHECK_CU(cuEventSynchronize(e));
	CHECK_EQ(host_fn_ran, 1);
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU(cuStreamQuery(s));
	CHECK_CU(cuEventQuery(e));
	CHECK_EQ(dst[0], 0x5a);
	CHECK_EQ(dst[15], 0x5a);
	CHECK_EQ(dst[100], src[100]);
	CHECK_EQ(dst[gran - 1], src[gran - 1]);
	CHECK_CU(cuMemsetD16(va, 0xbeef, 8));
	CHECK_EQ(((uint16_t *)(uintptr_t)va)[7], 0xbeef);
	CHECK_CU_EQ(cuMemsetD32(va + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);                    /* misaligned */
	CHECK_CU_EQ(cuMemcpyHtoDAsync(va + gran - 8, src, 16, s), CUDA_ERROR_INVALID_VALUE); /* runs off the mapping */
	CHECK_CU(cuMemcpyDtoD(va + gran / 2, va, gran / 2));
	CHECK_CU(cuEventDestroy(e));
	CHECK_CU(cuStreamDestroy(s));
	emu_unmap_free(va, gran, h);
	free(src);
	free(dst);
}

/* A queued copy whose device range is unmapped before it runs fails (logged)
 * and writes nothing: the range is no longer device memory, and it is not host
 * memory the copy was given. (It wrote into the unmapped range and crashed.) */
static void unmapped_before_run(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_rw(0, gran, &h);
	CUstream s;
	CHECK_CU(cuStreamCreate(&s, 0));
	unsigned char *src = malloc(gran);
	emu_pattern(src, gran, 9);
	struct gate g = GATE_INIT;
	CHECK_CU(cuLaunchHostFunc(s, gate_fn, &g));
	CHECK_CU(cuMemcpyHtoDAsync(va, src, gran, s));
	CHECK_CU(cuMemUnmap(va, gran));
	gate_open(&g);
	CHECK_CU(cuStreamSynchronize(s));
	/* Map it again: the allocation never received the copy. */
	CHECK_CU(cuMemMap(va, gran, 0, h, 0));
	CUmemAccessDesc d = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, gran, &d, 1));
	CHECK(memcmp((void *)(uintptr_t)va, src, gran) != 0);
	CHECK_CU(cuStreamDestroy(s));
	emu_unmap_free(va, gran, h);
	free(src);
}

/* Adds device 1 to *arg after 50 ms, noting when. */
static struct timespec joined_at;
static void *add_device_later(void *arg)
{
	usleep(50000);
	CUcontext c;
	if (cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS)
		cuCtxSetCurrent(c);
	clock_gettime(CLOCK_MONOTONIC, &joined_at);
	CHECK_CU(cuMulticastAddDevice(*(CUmemGenericAllocationHandle *)arg, 1));
	return NULL;
}

static void multicast_local(void)
{
	CUmulticastObjectProp mp = {.numDevices = 2,
				    .size = 2 * gran,
				    .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t g;
	CHECK_CU(cuMulticastGetGranularity(&g, &mp, CU_MULTICAST_GRANULARITY_MINIMUM));
	CHECK_EQ(g, gran);
	CUmemGenericAllocationHandle mc, m0, m1;
	CHECK_CU(cuMulticastCreate(&mc, &mp));
	CUmemAllocationProp p0 = emu_prop(0), p1 = emu_prop(1);
	CHECK_CU(cuMemCreate(&m0, 2 * gran, &p0, 0));
	CHECK_CU(cuMemCreate(&m1, 2 * gran, &p1, 0));
	CHECK_CU(cuMulticastAddDevice(mc, 0));
	CHECK_CU_EQ(cuMulticastAddDevice(mc, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMulticastAddDevice(mc, 1));
	CHECK_CU_EQ(cuMulticastBindMem(mc, 0, m0, 0, 4 * gran, 0), CUDA_ERROR_INVALID_VALUE); /* out of bounds */
	CHECK_CU(cuMulticastBindMem(mc, 0, m0, 0, 2 * gran, 0));
	CHECK_CU_EQ(cuMulticastBindMem(mc, 0, m0, 0, gran, 0), CUDA_ERROR_INVALID_VALUE); /* overlap, same device */
	CHECK_CU(cuMulticastBindMem(mc, 0, m1, 0, 2 * gran, 0));
	/* Map the multicast object: it shows the memory bound here. */
	CUdeviceptr mva, uva;
	CHECK_CU(cuMemAddressReserve(&mva, 2 * gran, 0, 0, 0));
	CHECK_CU(cuMemMap(mva, 2 * gran, 0, mc, 0));
	CUmemAccessDesc a = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(mva, 2 * gran, &a, 1));
	CHECK_CU(cuMemAddressReserve(&uva, 2 * gran, 0, 0, 0));
	CHECK_CU(cuMemMap(uva, 2 * gran, 0, m1, 0));
	CHECK_CU(cuMemSetAccess(uva, 2 * gran, &a, 1));
	*(volatile int *)(uintptr_t)(mva + gran) = 77;
	CHECK_EQ(*(volatile int *)(uintptr_t)(uva + gran), 77);
	CHECK_CU(cuMulticastUnbind(mc, 1, 0, 2 * gran));
	CHECK_CU_EQ(cuMulticastUnbind(mc, 1, 0, 2 * gran), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemUnmap(mva, 2 * gran));
	CHECK_CU(cuMemUnmap(uva, 2 * gran));
	CHECK_CU(cuMemRelease(mc)); /* drops the remaining binding of m0 */
	CHECK_CU(cuMemRelease(m0));
	CHECK_CU(cuMemRelease(m1));
	CHECK_EQ(maps_after_call("memfd:cuemu"), 0);
	CHECK_CU(cuMemAddressFree(mva, 2 * gran));
	CHECK_CU(cuMemAddressFree(uva, 2 * gran));
	/* A bind before the team is complete waits, then gives up (bounded here). */
	mp.numDevices = 2;
	CHECK_CU(cuMulticastCreate(&mc, &mp));
	CHECK_CU(cuMemCreate(&m0, 2 * gran, &p0, 0));
	CHECK_CU(cuMulticastAddDevice(mc, 0));
	CHECK_CU_EQ(cuMulticastBindMem(mc, 0, m0, 0, 2 * gran, 0), CUDA_ERROR_SYSTEM_NOT_READY);
	/* So does a mapping of the object (cuda.h), until the last device joins. */
	CUdeviceptr wva;
	CHECK_CU(cuMemAddressReserve(&wva, 2 * gran, 0, 0, 0));
	CHECK_CU_EQ(cuMemMap(wva, 2 * gran, 0, mc, 0), CUDA_ERROR_SYSTEM_NOT_READY);
	pthread_t joiner;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_create(&joiner, NULL, add_device_later, &mc);
	CHECK_CU(cuMemMap(wva, 2 * gran, 0, mc, 0)); /* returns once device 1 was added */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	pthread_join(joiner, NULL);
	CHECK(joined_at.tv_sec != 0);
	CHECK(t1.tv_sec > joined_at.tv_sec || (t1.tv_sec == joined_at.tv_sec && t1.tv_nsec >= joined_at.tv_nsec));
	CHECK_CU(cuMemUnmap(wva, 2 * gran));
	CHECK_CU(cuMemAddressFree(wva, 2 * gran));
	CHECK_CU(cuMemRelease(mc));
	CHECK_CU(cuMemRelease(m0));
}

/* In cuemu's own library: the driver's internal entry points are not its exported
 * symbols, but they are its functions. */
static bool in_cuemu(void *fn)
{
	Dl_info info;
	return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libcuda.so");
}

static void proc_address(void)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st;
	CHECK_CU(cuGetProcAddress("cuMemMap", &fn, 12000, 0, &st));
	/* An internal entry point (as the driver's): not the exported symbol. */
	CHECK(fn != (void *)cuMemMap);
	CHECK(in_cuemu(fn));
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
	CHECK_CU_EQ(((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
				  unsigned long long))fn)(0, 0, 0, 0, 0),
		    CUDA_ERROR_INVALID_VALUE); /* and it is cuMemMap */
	void *htod = NULL;
	CHECK_CU(cuGetProcAddress("cuMemcpyHtoD", &htod, 13000, 0, &st));
	CHECK(in_cuemu(htod) && htod != fn);
	CHECK_CU_EQ(cuGetProcAddress("cuMemMap", &fn, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CHECK_CU_EQ(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	/* Version selects the ABI: cuDeviceGetUuid has two. */
	void *v1 = NULL, *v2 = NULL;
	CHECK_CU(cuGetProcAddress("cuDeviceGetUuid", &v1, 11000, 0, &st));
	CHECK_CU(cuGetProcAddress("cuDeviceGetUuid", &v2, 12000, 0, &st));
	CHECK(v1 && v2 && v1 != v2);
	/* Flags: per-thread default stream variants of stream-ordered calls only. */
	void *legacy = NULL, *ptds = NULL, *dflt = NULL;
	CHECK_CU(cuGetProcAddress("cuMemcpyAsync", &legacy, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
	CHECK_CU(cuGetProcAddress("cuMemcpyAsync", &ptds, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CHECK_CU(cuGetProcAddress("cuMemcpyAsync", &dflt, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	CHECK(legacy && ptds && legacy != ptds && dflt == legacy);
	CHECK(in_cuemu(ptds));
	void *m1 = NULL, *m2 = NULL;
	CHECK_CU(cuGetProcAddress("cuMemMap", &m1, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
	CHECK_CU(cuGetProcAddress("cuMemMap", &m2, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CHECK(m1 && m1 == m2);
	/* Unknown bits, or both stream modes at once, are refused. */
	CHECK_CU_EQ(cuGetProcAddress("cuMemMap", &fn, 13000, 4, &st), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuGetProcAddress("cuMemMap", &fn, 13000, 3, &st), CUDA_ERROR_INVALID_VALUE);
	int ver = 0;
	CHECK_CU(cuDriverGetVersion(&ver));
	CHECK_EQ(ver, 13000);
}

/* The counters so far (CUSNAP_COUNT). */
static void counts_read(uint64_t v[COUNT_SLOTS])
{
	memset(v, 0, COUNT_SLOTS * sizeof(*v));
	int fd = open(counts_path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && pread(fd, v, COUNT_SLOTS * sizeof(*v), 0) == (ssize_t)(COUNT_SLOTS * sizeof(*v)));
	if (fd >= 0)
		close(fd);
}

/* A slot of them. */
static uint64_t counter(unsigned slot)
{
	uint64_t v[COUNT_SLOTS];
	counts_read(v);
	return v[slot];
}

/* cuemu's mapping syscalls so far. */
static uint64_t emu_maps(void)
{
	uint64_t v[COUNT_SLOTS], n = 0;
	counts_read(v);
	for (unsigned s = COUNT_EMU_MMAP; s <= COUNT_EMU_MADVISE; s++)
		n += v[s];
	return n;
}

/* What a restore pays per mapping: cuMemMap leaves the reservation in place
 * (no call), its first cuMemSetAccess maps the allocation there populated with
 * its protection (one call, not a placement, a protection change and a
 * fault-in); a grant that changes nothing costs nothing, and a mapping never
 * granted is unmapped for nothing. */
static void mapping_syscalls(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_create_reserve(4 * gran, 4 * gran, &h);
	uint64_t before = emu_maps();
	CHECK_CU(cuMemMap(va, 4 * gran, 0, h, 0));
	CHECK_CU(cuMemUnmap(va, 4 * gran));
	int ver;
	CHECK_CU(cuDriverGetVersion(&ver)); /* (where a queued revocation would run) */
	CHECK_EQ(emu_maps() - before, 0u);
	CHECK_CU(cuMemMap(va, 4 * gran, 0, h, 0));
	CHECK_EQ(emu_maps() - before, 0u);
	CUmemAccessDesc d0 = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAccessDesc d1 = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK_CU(cuMemSetAccess(va, 4 * gran, &d0, 1));
	CHECK_EQ(emu_maps() - before, 1u);
	CHECK_CU(cuMemSetAccess(va, 4 * gran, &d1, 1)); /* still read-write for the CPU */
	CHECK_EQ(emu_maps() - before, 1u);
	/* Resident, and the bytes are the allocation's. */
	memset((void *)(uintptr_t)va, 0x5a, 4 * gran);
	unsigned char back[16];
	CHECK_CU(cuMemcpyDtoH(back, va + 4 * gran - sizeof(back), sizeof(back)));
	CHECK_EQ(back[0], 0x5a);
	CHECK_CU(cuMemUnmap(va, 4 * gran));
	CHECK_CU(cuMemAddressFree(va, 4 * gran));
	CHECK_CU(cuMemRelease(h));
}

/* Does any mapping of this process overlap [va, va + len)? */
static bool mapped_at(CUdeviceptr va, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[1024];
	bool hit = false;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && lo < va + len && va < hi)
			hit = true;
	}
	if (f)
		fclose(f);
	return hit;
}

/* Unmaps in a row are revoked on the host together, by the next call that
 * could touch memory: one batch (one madvise, one TLB flush) for all of them;
 * the ranges fault after it; a mapping at a just-unmapped address, and a
 * reservation freed straight after its unmap (cuMemFree), leave nothing queued
 * behind to land on the address later. */
static void unmaps_revoked_together(void)
{
	enum { N = 8 };
	CUmemGenericAllocationHandle h[N];
	CUdeviceptr va[N];
	for (int i = 0; i < N; i++) {
		va[i] = emu_map_rw(0, gran, &h[i]);
		CHECK(!faults((volatile unsigned char *)(uintptr_t)va[i], 0));
	}
	uint64_t batches = counter(COUNT_EMU_MADVISE);
	for (int i = 0; i < N; i++)
		CHECK_CU(cuMemUnmap(va[i], gran));
	CHECK_EQ(maps_after_call("memfd:cuemu-mem-d0"), 0);
	CHECK_EQ(counter(COUNT_EMU_MADVISE) - batches, 1u);
	for (int i = 0; i < N; i++)
		CHECK(faults((volatile unsigned char *)(uintptr_t)va[i], 0));
	/* Mapped again at once: the queued revocation cannot undo the new mapping. */
	CHECK_CU(cuMemMap(va[0], gran, 0, h[0], 0));
	CUmemAccessDesc d = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va[0], gran, &d, 1));
	CHECK_CU(cuMemUnmap(va[0], gran));
	CHECK_CU(cuMemMap(va[0], gran, 0, h[0], 0));
	CHECK_CU(cuMemSetAccess(va[0], gran, &d, 1));
	CHECK_EQ(maps_after_call("memfd:cuemu-mem-d0"), 1);
	CHECK(!faults((volatile unsigned char *)(uintptr_t)va[0], 1));
	emu_unmap_free(va[0], gran, h[0]);
	for (int i = 1; i < N; i++) {
		CHECK_CU(cuMemAddressFree(va[i], gran));
		CHECK_CU(cuMemRelease(h[i]));
	}
	/* cuMemFree unmaps and frees the reservation in one call. */
	CUdeviceptr p;
	CHECK_CU(cuMemAlloc(&p, gran));
	CHECK_CU(cuMemFree(p));
	int ver;
	CHECK_CU(cuDriverGetVersion(&ver));
	CHECK(!mapped_at(p, gran));
}

int main(void)
{
	setenv("CUEMU_MEMORY", "64M", 1);
	int cfd = mkstemp(counts_path); /* before the first call: cuemu maps the table once */
	CHECK(cfd >= 0);
	close(cfd);
	setenv("CUSNAP_COUNT", counts_path, 1);
	setenv("CUEMU_MULTICAST_TIMEOUT_MS", "200", 1);
	CUdevice dev;
	CHECK_CU_EQ(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuInit(0));
	int n = 0;
	CHECK_CU(cuDeviceGetCount(&n));
	CHECK_EQ(n, 2);
	CHECK_CU(cuDeviceGet(&dev, 1));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_CU(cuCtxSetCurrent(ctx));
	gran = emu_granularity(NULL);
	int fds = test_count_fds();
	test_run("reserve, create, map, access, copy, unmap, release", lifecycle);
	test_run("release while mapped keeps the bytes; retain from an address", release_while_mapped);
	test_run("retain counts mirror the driver", retain_counts);
	test_run("properties and granularity", properties_and_granularity);
	test_run("unaligned sizes and addresses rejected", unaligned_rejected);
	test_run("access is merged per location", access_merged);
	test_run("a mapping and its first grant: one mapping syscall", mapping_syscalls);
	test_run("an import reads the memfd's name from its attribute, or its link", import_by_name);
	test_run("unmaps in a row revoked together by the next call", unmaps_revoked_together);
	test_run("out of memory beyond CUEMU_MEMORY", out_of_memory);
	test_run("NULL and unknown handles", null_and_unknown);
	test_run("export and import in one process", export_import_same_process);
	test_run("streams, events, host functions, async copies", streams_and_events);
	test_run("a queued copy to a range unmapped before it runs writes nothing", unmapped_before_run);
	test_run("multicast objects, binds and mappings", multicast_local);
	test_run("cuGetProcAddress by version", proc_address);
	CHECK_EQ(test_count_fds(), fds); /* nothing leaked (the endpoint socket predates this count) */
	CHECK_CU(cuDevicePrimaryCtxRelease(dev));
	unlink(counts_path);
	return test_done();
}
