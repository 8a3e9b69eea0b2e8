/* SPDX-License-Identifier: MIT */
/* CUEMU_FAULT makes the chosen nth call fail with the chosen result, and the
 * failed call changes nothing. Each case runs in a child forked before cuInit,
 * since the emulator reads its environment once per process. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

static void setup(void)
{
	CHECK_CU(emu_use_device(0));
}

static void (*child_body)(void);

static void set_up_and_run(void *unused)
{
	(void)unused;
	setup();
	child_body();
}

/* Run body in a child with CUEMU_FAULT=spec; its failures count here. */
static void with_fault(const char *spec, void (*body)(void))
{
	child_body = body;
	if (!test_child_passes(spec, set_up_and_run, NULL))
		test_fail(__FILE__, __LINE__, "with CUEMU_FAULT=%s the checks above failed", spec);
}

static void map_second_fails(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_create_reserve(2 * MiB, 6 * MiB, &h);
	CHECK_CU(cuMemMap(va, 2 * MiB, 0, h, 0));
	CHECK_CU_EQ(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY);
	/* The failed call left nothing behind: the same range maps now. */
	CHECK_CU(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0));
	CHECK_CU(cuMemMap(va + 4 * MiB, 2 * MiB, 0, h, 0));
	/* Placed at their first grant: three mappings of the memory. */
	CHECK_EQ(test_count_maps(getpid(), "memfd:cuemu"), 0);
	CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK_CU(cuMemSetAccess(va, 6 * MiB, &rw, 1));
	CHECK_EQ(test_count_maps(getpid(), "memfd:cuemu"), 3);
}

static void numeric_result(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_rw(0, 2 * MiB, &h);
	int x = 5;
	/* The fault names the unversioned name; the symbol is cuMemcpyHtoD_v2. */
	CHECK_CU_EQ(cuMemcpyHtoD(va, &x, sizeof(x)), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_EQ(*(int *)(uintptr_t)va, 0);
	CHECK_CU(cuMemcpyHtoD(va, &x, sizeof(x)));
	CHECK_EQ(*(int *)(uintptr_t)va, 5);
}

static void default_result_and_lists(void)
{
	CUmemAllocationProp p = emu_prop(1);
	CUmemGenericAllocationHandle h1, h2, h3;
	CHECK_CU(cuMemCreate(&h1, 2 * MiB, &p, 0));
	CHECK_CU_EQ(cuMemCreate(&h2, 2 * MiB, &p, 0), CUDA_ERROR_UNKNOWN);
	CHECK_CU(cuMemCreate(&h3, 2 * MiB, &p, 0));
	CHECK_CU_EQ(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemRelease(h1)); /* the injected failure did not drop the reference */
	CHECK_CU(cuMemRelease(h3));
	size_t freeb, total;
	CHECK_CU(cuCtxSetCurrent(NULL));
	CUcontext ctx;
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 1));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuMemGetInfo(&freeb, &total));
	CHECK_EQ(freeb, total); /* every byte accounted back */
}

static int calls;
static void sweep_body(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = emu_map_new(2 * MiB, &p, &h);
	CUmemAccessDesc a = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	const char *spec = getenv("CUEMU_FAULT");
	int nth = atoi(strchr(spec, ':') + 1);
	for (int i = 1; i <= calls; i++)
		CHECK_CU_EQ(cuMemSetAccess(va, 2 * MiB, &a, 1), i == nth ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS);
}

static void sweep(void)
{
	calls = 4;
	char spec[64];
	for (int n = 1; n <= calls; n++) {
		snprintf(spec, sizeof(spec), "cuMemSetAccess:%d:CUDA_ERROR_OUT_OF_MEMORY", n);
		with_fault(spec, sweep_body);
	}
}

static void checkpoint_call(void)
{
	/* The caller's own checkpoint API calls are fault points too. */
	CHECK_CU_EQ(cuCheckpointProcessLock(getpid(), NULL), CUDA_ERROR_OPERATING_SYSTEM);
	CUprocessState s;
	CHECK_CU(cuCheckpointProcessGetState(getpid(), &s));
	CHECK_EQ(s, CU_PROCESS_STATE_RUNNING);
}

static void cases(void)
{
	with_fault("cuMemMap:2:CUDA_ERROR_OUT_OF_MEMORY", map_second_fails);
	with_fault("cuMemcpyHtoD:1:700", numeric_result);
	with_fault("cuMemCreate:2,cuMemRelease:1:CUDA_ERROR_INVALID_VALUE", default_result_and_lists);
	with_fault("cuCheckpointProcessLock:1:CUDA_ERROR_OPERATING_SYSTEM", checkpoint_call);
}

int main(void)
{
	test_run("the nth call fails with the chosen result and changes nothing", cases);
	test_run("a sweep over N fails exactly the Nth call", sweep);
	return test_done();
}
