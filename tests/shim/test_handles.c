/* The shim's tables against the driver's: retain/release/map/unmap sequences,
 * then a CUEMU_FAULT sweep over every wrapped call, comparing after each run the
 * allocations and mapped bytes the shim reports with what cuemu holds. */
#include <sys/wait.h>

#include "shim_util.h"

static void setup(void)
{
	CHECK_CU(emu_use_device(0));
}

static void sequences(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle a, r1, r2;
	CUdeviceptr va;
	CHECK_CU(cuMemCreate(&a, 4 * MiB, &p, 0));
	CHECK_CU(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
	CHECK_CU(cuMemMap(va, 4 * MiB, 0, a, 0));
	CHECK_VIEWS_EQUAL();
	CHECK_CU(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)va));
	CHECK_CU(cuMemRetainAllocationHandle(&r2, (void *)(uintptr_t)(va + MiB)));
	CHECK(r1 != a && r2 != r1); /* each retain is a handle of its own */
	CUmemAllocationProp got;
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, r2));
	CHECK_EQ(got.location.id, 0);
	CHECK_CU(cuMemRelease(a));
	CHECK_CU(cuMemRelease(r1));
	CHECK_VIEWS_EQUAL();
	CHECK_CU_EQ(cuMemRelease(r1), CUDA_ERROR_INVALID_VALUE); /* released: unknown to shim and driver */
	CHECK_CU(cuMemRelease(r2));
	/* No handle left, the mapping keeps the allocation (in both views). */
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 1);
	CHECK_CU(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)va)); /* a reference again */
	CHECK_CU(cuMemUnmap(va, 4 * MiB));
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 1);
	CHECK_CU(cuMemMap(va + 4 * MiB, 4 * MiB, 0, r1, 0));
	CUmemAccessDesc d0 = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE), d1 = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK_CU(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &d0, 1));
	CHECK_CU(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &d1, 1));
	struct topo_participant t;
	if (shim_inspect(0, &t) == 0) {
		CHECK_EQ(t.nmaps, 1);
		CHECK_EQ(t.maps[0].naccess, 2); /* merged per location */
		CHECK_EQ(t.allocs[0].handles, 1);
		topo_free(&t);
	}
	/* Partial unmap of a tracked mapping: refused, nothing changed. */
	CHECK_CU_EQ(cuMemUnmap(va + 4 * MiB, 2 * MiB), CUDA_ERROR_NOT_SUPPORTED);
	CHECK_VIEWS_EQUAL();
	CHECK_CU(cuMemRelease(r1));
	CHECK_CU(cuMemUnmap(va + 4 * MiB, 4 * MiB));
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 0);
	CHECK_CU(cuMemAddressFree(va, 8 * MiB));
}

/* A scenario touching every wrapped call; results are ignored, views compared. */
static void scenario(void)
{
	CUmemAllocationProp p0 = emu_prop(0), p1 = emu_prop(1);
	CUmemGenericAllocationHandle a = 0, b = 0, r = 0, imp = 0;
	CUdeviceptr va = 0, vb = 0;
	cuMemCreate(&a, 2 * MiB, &p0, 0);
	cuMemCreate(&b, 4 * MiB, &p1, 0);
	cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0);
	cuMemAddressReserve(&vb, 8 * MiB, 0, 0, 0);
	cuMemMap(va, 2 * MiB, 0, a, 0);
	cuMemMap(va + 4 * MiB, 4 * MiB, 0, b, 0);
	CUmemAccessDesc d[2] = {emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
				emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
	cuMemSetAccess(va, 2 * MiB, d, 2);
	cuMemSetAccess(va + 4 * MiB, 4 * MiB, d, 1);
	cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va);
	int cap = -1;
	if (cuMemExportToShareableHandle(&cap, a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS) {
		if (cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
			imp = 0;
		close(cap);
	}
	CUmemAllocationProp got;
	cuMemGetAllocationPropertiesFromHandle(&got, imp);
	cuMemMap(vb, 2 * MiB, 0, imp, 0);
	cuMemRelease(r);
	cuMemUnmap(va, 2 * MiB);
	cuMemRelease(a);
	cuMemAddressFree(va, 8 * MiB);
	CHECK_VIEWS_EQUAL();
	/* Everything back, whatever failed above: both views empty. */
	cuMemUnmap(va + 4 * MiB, 4 * MiB);
	cuMemUnmap(vb, 2 * MiB);
	cuMemRelease(b);
	cuMemRelease(imp);
	while (cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va) == CUDA_SUCCESS) {
		/* a failed unmap left a mapping: take it down */
		cuMemRelease(r);
		cuMemUnmap(va, 2 * MiB);
	}
	CHECK_VIEWS_EQUAL();
}

static const char *const wrapped[] = {
	"cuMemCreate", "cuMemRelease", "cuMemRetainAllocationHandle", "cuMemMap", "cuMemUnmap", "cuMemSetAccess",
	"cuMemExportToShareableHandle", "cuMemImportFromShareableHandle", "cuMemGetAllocationPropertiesFromHandle",
	"cuMemAddressFree",
};

static void fault_sweep(void)
{
	int runs = 0;
	for (size_t w = 0; w < sizeof(wrapped) / sizeof(wrapped[0]); w++) {
		for (int n = 1; n <= 3; n++) {
			char spec[128];
			snprintf(spec, sizeof(spec), "%s:%d:CUDA_ERROR_OUT_OF_MEMORY", wrapped[w], n);
			fflush(stdout);
			/* A child forked before CUDA init: its own identity and endpoint. */
			pid_t pid = fork();
			if (pid == 0) {
				setenv("CUEMU_FAULT", spec, 1);
				setup();
				scenario();
				fflush(stdout);
				_exit(test_failures ? 1 : 0);
			}
			int status = test_wait_child(pid, 30000);
			if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
				test_fail(__FILE__, __LINE__, "views differ after CUEMU_FAULT=%s", spec);
			runs++;
		}
	}
	CHECK_EQ(runs, 30);
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	test_run("fault sweep over every wrapped call: shim and driver agree", fault_sweep);
	setup();
	test_run("retain/release/map/unmap: shim and driver agree", sequences);
	return shim_done();
}
