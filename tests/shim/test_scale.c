/* SPDX-License-Identifier: MIT */
/* 100,000 live tracked allocations, each its own cuMemCreate (cuemu backs an
 * allocation with a memfd only once it is mapped or exported, so the process
 * stays under the open-file limit): tracking, INSPECT, NCCL's free path, the
 * handle rules, sharing and release all still work at that size. */
#include <dlfcn.h>

#include "shim_util.h"

#define ALLOCS 100000
#define GRAN ((size_t)64 << 10)

static CUmemGenericAllocationHandle *handles;

static void many_allocations(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CHECK_EQ(emu_granularity(&p), GRAN);
	handles = malloc(sizeof(*handles) * ALLOCS);
	size_t n = 0;
	for (; n < ALLOCS; n++) {
		CUmemAllocationProp q = emu_prop((int)(n % 2));
		if (cuMemCreate(&handles[n], GRAN, &q, 0) != CUDA_SUCCESS)
			break;
	}
	CHECK_EQ(n, ALLOCS);
	CHECK_EQ(emu_live_allocs(), ALLOCS);
	struct topo_participant t;
	if (shim_inspect(0, &t) == 0) {
		CHECK_EQ(t.nallocs, ALLOCS);
		topo_free(&t);
	}
	/* Map a few, with access; retains give the mapped value back. */
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	size_t pick[4] = {7, 12345, 54321, ALLOCS - 1};
	for (int i = 0; i < 4; i++)
		CHECK_CU(cuMemMap(va + (size_t)i * GRAN, GRAN, 0, handles[pick[i]], 0));
	CUmemAccessDesc d[2] = {emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
				emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
	CHECK_CU(cuMemSetAccess(va, 4 * GRAN, d, 2));
	CUmemGenericAllocationHandle r;
	CHECK_CU(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + GRAN + 100)));
	CHECK_EQ(r, handles[12345]);
	CHECK_CU(cuMemRelease(r));
	/* Through a resolved pointer, as NCCL reaches the driver. */
	void *fn = NULL;
	CUdriverProcAddressQueryResult st;
	CHECK_CU(cuGetProcAddress("cuMemCreate", &fn, 10020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CUmemGenericAllocationHandle extra;
	CHECK_CU(((CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			       unsigned long long))fn)(&extra, GRAN, &p, 0));
	CHECK_EQ(extra >> 48, 0x5ea1);
	/* Sharing: export one, import it, see the bytes. */
	int cap = -1;
	CHECK_CU(cuMemExportToShareableHandle(&cap, handles[12345], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUmemGenericAllocationHandle imp;
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(cap);
	CUdeviceptr vb;
	CHECK_CU(cuMemAddressReserve(&vb, GRAN, 0, 0, 0));
	CHECK_CU(cuMemMap(vb, GRAN, 0, imp, 0));
	CHECK_CU(cuMemSetAccess(vb, GRAN, d, 1));
	*(volatile int *)(uintptr_t)(va + GRAN) = 99;
	CHECK_EQ(*(volatile int *)(uintptr_t)vb, 99);
	CHECK_VIEWS_EQUAL();
	/* NCCL's free path on a mapped one, and a stale value refused. */
	CHECK_CU(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va));
	CHECK_CU(cuMemRelease(r));
	CHECK_CU(cuMemUnmap(va, GRAN));
	CHECK_CU(cuMemRelease(r));
	CHECK_CU_EQ(cuMemRelease(r), CUDA_ERROR_INVALID_VALUE);
	handles[pick[0]] = 0;
	/* Everything released. */
	size_t bad = 0;
	for (size_t i = 0; i < ALLOCS; i++)
		if (handles[i] && cuMemRelease(handles[i]) != CUDA_SUCCESS)
			bad++;
	CHECK_EQ(bad, 0);
	CHECK_CU(cuMemRelease(extra));
	CHECK_CU(cuMemUnmap(va + GRAN, 3 * GRAN));
	CHECK_CU(cuMemUnmap(vb, GRAN));
	CHECK_CU(cuMemRelease(imp));
	CHECK_CU(cuMemAddressFree(va, 4 * GRAN));
	CHECK_CU(cuMemAddressFree(vb, GRAN));
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 0);
	free(handles);
}

int main(int argc, char **argv)
{
	/* 100,000 x 64 KiB = 6.1 GiB of device memory, never populated. */
	setenv("CUEMU_GRANULARITY", "65536", 1);
	setenv("CUEMU_MEMORY", "16G", 1);
	/* An INSPECT of 100,000 records under TSan beside a busy suite took more
	 * than the endpoint's 10 s: the scale is tested here, not the deadline. */
	setenv("SNAPSHOT_CUDA_VMM_DEADLINE_MS", "120000", 0);
	shim_reexec(argc, argv);
	CHECK_CU(emu_use_device(0));
	test_run("100,000 live allocations, each its own cuMemCreate", many_allocations);
	return shim_done();
}
