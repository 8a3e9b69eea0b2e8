/* SPDX-License-Identifier: MIT */
/* vmm_group's churn: a workload that is not parked. Each process runs a thread
 * that works from the moment it is ready until it is told to verify:
 *   VMM_GROUP_CHURN=1     allocates, maps, grants, unmaps, frees and releases VMM
 *                         memory that can be shared (POSIX FD handle type, so the
 *                         interposer tracks it) in a loop, as an engine's
 *                         allocator does between requests;
 *   VMM_GROUP_CHURN=copy  copies into memory of its own that it exported (so
 *                         that a checkpoint takes it down) and reads it back:
 *                         synchronous and stream-ordered copies, sets, a host
 *                         function, every round's bytes checked, as an engine
 *                         serving requests does.
 * A suspend or checkpoint under way must make those calls wait, never fail them
 * (DESIGN.md §6.1): any call that fails, or bytes read back wrong, is a failure
 * of the group. */
#ifndef VMM_GROUP_CHURN_H
#define VMM_GROUP_CHURN_H

#include <pthread.h>

static struct {
	bool on, copy;
	volatile int stop;
	pthread_t thread;
	int device;
	unsigned long cycles, failed;
	char first[160]; /* the first failed call */
} churn;

static void churn_call(CUresult rc, const char *what)
{
	if (rc == CUDA_SUCCESS)
		return;
	if (!churn.failed++)
		snprintf(churn.first, sizeof(churn.first), "%s: %s", what, cuname(rc));
}

static void *churn_loop(void *arg)
{
	(void)arg;
	CUcontext ctx;
	if (cuDevicePrimaryCtxRetain(&ctx, churn.device) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		churn_call(CUDA_ERROR_INVALID_CONTEXT, "the churn thread's context");
		return NULL;
	}
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = churn.device},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t g = 0;
	churn_call(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
	CUmemAccessDesc rw = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	while (!__atomic_load_n(&churn.stop, __ATOMIC_ACQUIRE) && g) {
		CUmemGenericAllocationHandle h = 0;
		CUdeviceptr va = 0;
		CUresult rc = cuMemCreate(&h, g, &p, 0);
		churn_call(rc, "cuMemCreate");
		if (rc)
			break;
		churn_call(rc = cuMemAddressReserve(&va, g, 0, 0, 0), "cuMemAddressReserve");
		if (!rc) {
			churn_call(rc = cuMemMap(va, g, 0, h, 0), "cuMemMap");
			if (!rc) {
				churn_call(cuMemSetAccess(va, g, &rw, 1), "cuMemSetAccess");
				churn_call(cuMemUnmap(va, g), "cuMemUnmap");
			}
			churn_call(cuMemAddressFree(va, g), "cuMemAddressFree");
		}
		churn_call(cuMemRelease(h), "cuMemRelease");
		churn.cycles++;
		if (churn.failed)
			break;
	}
	return NULL;
}

static void churn_host_fn(void *arg)
{
	__atomic_add_fetch((unsigned long *)arg, 1, __ATOMIC_RELAXED);
}

/* One round of the copy churn over [va, va + n) with stream s: every byte set,
 * written and read back through another kind of call each time. */
static void churn_copy_round(CUdeviceptr va, size_t n, CUstream s, unsigned char *buf, unsigned long *hostfns)
{
	unsigned v = (unsigned)churn.cycles;
	unsigned char b = (unsigned char)(0x11 + v % 200);
	memset(buf, b, n);
	switch (v % 3) {
	case 0: churn_call(cuMemcpyHtoD(va, buf, n), "cuMemcpyHtoD"); break;
	case 1:
		churn_call(cuMemcpyHtoDAsync(va, buf, n, s), "cuMemcpyHtoDAsync");
		churn_call(cuStreamSynchronize(s), "cuStreamSynchronize");
		break;
	default:
		churn_call(cuMemsetD8Async(va, b, n, s), "cuMemsetD8Async");
		churn_call(cuMemcpyDtoDAsync(va + n / 2, va, n / 2, s), "cuMemcpyDtoDAsync");
		churn_call(cuLaunchHostFunc(s, churn_host_fn, hostfns), "cuLaunchHostFunc");
		churn_call(cuStreamSynchronize(s), "cuStreamSynchronize");
		break;
	}
	memset(buf, 0, n);
	churn_call(cuMemcpyDtoH(buf, va, n), "cuMemcpyDtoH");
	for (size_t i = 0; i < n && !churn.failed; i += 4093)
		if (buf[i] != b)
			churn_call(CUDA_ERROR_ILLEGAL_ADDRESS, "the bytes read back");
}

static void *churn_copy_loop(void *arg)
{
	(void)arg;
	CUcontext ctx;
	if (cuDevicePrimaryCtxRetain(&ctx, churn.device) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		churn_call(CUDA_ERROR_INVALID_CONTEXT, "the churn thread's context");
		return NULL;
	}
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = churn.device},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t n = 0;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	CUstream s = NULL;
	int fd = -1;
	unsigned long hostfns = 0;
	churn_call(cuMemGetAllocationGranularity(&n, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
	unsigned char *buf = n ? malloc(n) : NULL;
	CUmemAccessDesc rw = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	churn_call(buf ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY, "malloc");
	if (!churn.failed)
		churn_call(cuMemCreate(&h, n, &p, 0), "cuMemCreate");
	if (!churn.failed) /* exported: shared, so a checkpoint takes it down */
		churn_call(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
			   "cuMemExportToShareableHandle");
	if (fd >= 0)
		close(fd);
	if (!churn.failed)
		churn_call(cuMemAddressReserve(&va, n, 0, 0, 0), "cuMemAddressReserve");
	if (!churn.failed)
		churn_call(cuMemMap(va, n, 0, h, 0), "cuMemMap");
	if (!churn.failed)
		churn_call(cuMemSetAccess(va, n, &rw, 1), "cuMemSetAccess");
	if (!churn.failed)
		churn_call(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	/* 64 KiB a round, a round every 0.2 ms: copies always under way, without
	 * saturating a small machine's memory (the suspend must get the CPU). */
	size_t chunk = n < 65536 ? n : 65536;
	while (!__atomic_load_n(&churn.stop, __ATOMIC_ACQUIRE) && !churn.failed) {
		churn_copy_round(va, chunk, s, buf, &hostfns);
		churn.cycles++;
		usleep(200);
	}
	if (s)
		churn_call(cuStreamDestroy(s), "cuStreamDestroy");
	if (va) {
		cuMemUnmap(va, n);
		cuMemAddressFree(va, n);
	}
	if (h)
		churn_call(cuMemRelease(h), "cuMemRelease");
	free(buf);
	return NULL;
}

/* From here on the process churns (VMM_GROUP_CHURN=1 or copy), on device. */
static void churn_start(int device)
{
	const char *e = getenv("VMM_GROUP_CHURN");
	churn.copy = e && !strcmp(e, "copy");
	churn.on = churn.copy || (e && !strcmp(e, "1"));
	churn.device = device;
	if (churn.on && pthread_create(&churn.thread, NULL, churn.copy ? churn_copy_loop : churn_loop, NULL) != 0)
		churn.on = false, churn_call(CUDA_ERROR_OUT_OF_MEMORY, "pthread_create");
}

/* The churn stopped; every call it made succeeded (said; a failure otherwise). */
static void churn_stop(void)
{
	if (!churn.on)
		return;
	__atomic_store_n(&churn.stop, 1, __ATOMIC_RELEASE);
	pthread_join(churn.thread, NULL);
	printf("vmm_group %s: churn: %lu cycles, %lu failed calls\n", role, churn.cycles, churn.failed);
	check(churn.failed == 0, "a call of the churn failed while the group was not parked: %s", churn.first);
	check(churn.cycles > 0, "the churn made no cycle");
}

#endif
