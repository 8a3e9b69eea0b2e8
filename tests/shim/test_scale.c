/* 100,000 live tracked objects (logical handles from retains of a few
 * allocations): tracking, INSPECT, sharing and release all still work. */
#include "shim_util.h"

#define ALLOCS 4
#define RETAINS 25000

static CUmemGenericAllocationHandle *handles;

static void many_handles(void)
{
	CUmemGenericAllocationHandle base[ALLOCS];
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, ALLOCS * 2 * MiB, 0, 0, 0));
	for (int i = 0; i < ALLOCS; i++) {
		CUmemAllocationProp p = emu_prop(i % 2);
		CHECK_CU(cuMemCreate(&base[i], 2 * MiB, &p, 0));
		CHECK_CU(cuMemMap(va + (size_t)i * 2 * MiB, 2 * MiB, 0, base[i], 0));
	}
	handles = malloc(sizeof(*handles) * ALLOCS * RETAINS);
	size_t n = 0;
	for (int r = 0; r < RETAINS; r++)
		for (int i = 0; i < ALLOCS; i++)
			if (cuMemRetainAllocationHandle(&handles[n], (void *)(uintptr_t)(va + (size_t)i * 2 * MiB + 4096)) ==
			    CUDA_SUCCESS)
				n++;
	CHECK_EQ(n, ALLOCS * RETAINS);
	struct topo_participant t;
	if (shim_inspect(0, &t) == 0) {
		size_t total = 0;
		for (size_t i = 0; i < t.nallocs; i++)
			total += t.allocs[i].handles;
		CHECK_EQ(total, ALLOCS * RETAINS + ALLOCS);
		CHECK_EQ(t.nmaps, ALLOCS);
		topo_free(&t);
	}
	/* Everything else keeps working with that many objects live. */
	CUmemAccessDesc d = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, ALLOCS * 2 * MiB, &d, 1));
	int cap = -1;
	CHECK_CU(cuMemExportToShareableHandle(&cap, handles[12345], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUmemGenericAllocationHandle imp;
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(cap);
	CUdeviceptr vb;
	CHECK_CU(cuMemAddressReserve(&vb, 2 * MiB, 0, 0, 0));
	CHECK_CU(cuMemMap(vb, 2 * MiB, 0, imp, 0));
	CHECK_CU(cuMemSetAccess(vb, 2 * MiB, &d, 1));
	*(volatile int *)(uintptr_t)(va + 2 * MiB) = 99; /* handles[12345] is allocation 1 */
	CHECK_EQ(*(volatile int *)(uintptr_t)vb, 99);
	CHECK_VIEWS_EQUAL();
	for (size_t i = 0; i < n; i++)
		if (cuMemRelease(handles[i]) != CUDA_SUCCESS)
			test_fail(__FILE__, __LINE__, "release of handle %zu failed", i);
	for (int i = 0; i < ALLOCS; i++)
		CHECK_CU(cuMemRelease(base[i]));
	CHECK_CU(cuMemUnmap(vb, 2 * MiB));
	CHECK_CU(cuMemRelease(imp));
	CHECK_CU(cuMemUnmap(va, ALLOCS * 2 * MiB));
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 0);
	free(handles);
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	CHECK_CU(emu_use_device(0));
	test_run("100,000 live logical handles", many_handles);
	return shim_done();
}
