/* SPDX-License-Identifier: MIT */
/* vmm_group's churn (VMM_GROUP_CHURN=1): a workload that is not parked. Each
 * process runs a thread that, from the moment it is ready until it is told to
 * verify, allocates, maps, grants, unmaps, frees and releases VMM memory that
 * can be shared (POSIX FD handle type, so the interposer tracks it) in a loop,
 * as an engine's allocator does between requests. A suspend or checkpoint under
 * way must make those calls wait, never fail them (DESIGN.md §6.1): any call
 * that fails is a failure of the group. */
#ifndef VMM_GROUP_CHURN_H
#define VMM_GROUP_CHURN_H

#include <pthread.h>

static struct {
	bool on;
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

/* From here on the process churns (VMM_GROUP_CHURN=1), on device. */
static void churn_start(int device)
{
	const char *e = getenv("VMM_GROUP_CHURN");
	churn.on = e && !strcmp(e, "1");
	churn.device = device;
	if (churn.on && pthread_create(&churn.thread, NULL, churn_loop, NULL) != 0)
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
