/* SPDX-License-Identifier: MIT */
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
	/* cuda.h: the same handle value that was mapped; each retain one more reference. */
	CHECK_EQ(r1, a);
	CHECK_EQ(r2, a);
	CUmemAllocationProp got;
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, r2));
	CHECK_EQ(got.location.id, 0);
	CHECK_CU(cuMemRelease(a));
	CHECK_CU(cuMemRelease(r1));
	CHECK_VIEWS_EQUAL();
	struct topo_participant t;
	if (shim_inspect(0, &t) == 0) {
		CHECK_EQ(t.nallocs, 1);
		CHECK_EQ(t.allocs[0].handles, 1); /* one reference left */
		topo_free(&t);
	}
	CHECK_CU(cuMemRelease(r2));                              /* the last reference */
	CHECK_CU_EQ(cuMemRelease(r2), CUDA_ERROR_INVALID_VALUE); /* released: unknown to shim and driver */
	/* No handle left, the mapping keeps the allocation (in both views). */
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 1);
	CHECK_CU(cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)va)); /* a reference again */
	CHECK_EQ(r1, a);                                                   /* still the value that was mapped */
	CHECK_CU(cuMemUnmap(va, 4 * MiB));
	CHECK_VIEWS_EQUAL();
	CHECK_EQ(emu_live_allocs(), 1);
	CHECK_CU(cuMemMap(va + 4 * MiB, 4 * MiB, 0, r1, 0));
	CUmemAccessDesc d0 = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
			d1 = emu_access(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
	CHECK_CU(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &d0, 1));
	CHECK_CU(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &d1, 1));
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

/* NCCL's free path (ncclCuMemFree): retain the handle from the pointer, release
 * it, unmap, release the same value again, free the reservation. Every call
 * succeeds and nothing stays behind, in the shim or in the driver. */
static void nccl_free_path(void)
{
	CUmemAllocationProp p = emu_prop(0);
	size_t free0, total;
	CHECK_CU(cuMemGetInfo(&free0, &total));
	for (int round = 0; round < 3; round++) {
		CUmemGenericAllocationHandle h, r;
		CUdeviceptr va;
		CHECK_CU(cuMemCreate(&h, 4 * MiB, &p, 0));
		CHECK_CU(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
		CHECK_CU(cuMemMap(va, 4 * MiB, 0, h, 0));
		CUmemAccessDesc d = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
		CHECK_CU(cuMemSetAccess(va, 4 * MiB, &d, 1));
		/* free */
		CHECK_CU(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va));
		CHECK_EQ(r, h);
		CHECK_CU(cuMemRelease(r));
		emu_unmap_free(va, 4 * MiB, r);
		CHECK_VIEWS_EQUAL();
		CHECK_EQ(emu_live_allocs(), 0);
	}
	size_t free1;
	CHECK_CU(cuMemGetInfo(&free1, &total));
	CHECK_EQ(free1, free0); /* nothing leaked */
}

/* In a child: the stale value given to call (arg). */
static void stale_call(void *arg)
{
	const char *call = arg;
	setenv("SNAPSHOT_CUDA_VMM_LOG", "0", 1);
	setup();
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h = 0, mc = 0, stale = 0;
	CUdeviceptr va = 0;
	CHECK_CU(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
	CUmulticastObjectProp mp = {.numDevices = 1,
				    .size = 2 * MiB,
				    .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	if (strncmp(call, "cuMulticast", 11) == 0) {
		CHECK_CU(cuMemCreate(&h, 2 * MiB, &p, 0));
		CHECK_CU(cuMulticastCreate(&mc, &mp));
	}
	/* The stale value: a tracked allocation's handle after its last release. */
	CHECK_CU(cuMemCreate(&stale, 2 * MiB, &p, 0));
	CHECK_CU(cuMemRelease(stale));
	int fd = -1;
	CUresult rc = CUDA_ERROR_UNKNOWN;
	if (!strcmp(call, "cuMemRelease"))
		rc = cuMemRelease(stale);
	else if (!strcmp(call, "cuMemMap"))
		rc = cuMemMap(va, 2 * MiB, 0, stale, 0);
	else if (!strcmp(call, "cuMemExportToShareableHandle"))
		rc = cuMemExportToShareableHandle(&fd, stale, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	else if (!strcmp(call, "cuMemGetAllocationPropertiesFromHandle"))
		rc = cuMemGetAllocationPropertiesFromHandle(&p, stale);
	else if (!strcmp(call, "cuMulticastAddDevice"))
		rc = cuMulticastAddDevice(stale, 0);
	else if (!strcmp(call, "cuMulticastBindMem")) {
		rc = cuMulticastBindMem(stale, 0, h, 0, 2 * MiB, 0);
		CHECK_CU_EQ(rc, CUDA_ERROR_INVALID_VALUE);
		rc = cuMulticastBindMem(mc, 0, stale, 0, 2 * MiB, 0); /* a stale member */
	} else if (!strcmp(call, "cuMulticastUnbind")) {
		rc = cuMulticastUnbind(stale, 0, 0, 2 * MiB);
	}
	CHECK_CU_EQ(rc, CUDA_ERROR_INVALID_VALUE);
	/* A live handle of the wrong kind is refused the same way. */
	if (mc && strcmp(call, "cuMulticastBindMem") != 0)
		CHECK_CU_EQ(strcmp(call, "cuMulticastAddDevice") == 0 ? cuMulticastAddDevice(h, 0)
								      : cuMulticastUnbind(h, 0, 0, 2 * MiB),
			    CUDA_ERROR_INVALID_VALUE);
	if (fd >= 0)
		close(fd);
	CHECK_VIEWS_EQUAL();
}

/* A released (stale) logical value given to every wrapped call that takes a
 * handle: CUDA_ERROR_INVALID_VALUE from the shim, and the driver never sees it
 * (each call runs in a child where the driver's first call of that name fails
 * with CUDA_ERROR_UNKNOWN: reaching it would change the answer). */
static void stale_handles(void)
{
	/* name, and how many driver calls of that name the set-up makes first */
	static const struct {
		const char *call;
		int before;
	} calls[] = {{"cuMemRelease", 1},
		     {"cuMemMap", 0},
		     {"cuMemExportToShareableHandle", 0},
		     {"cuMemGetAllocationPropertiesFromHandle", 0},
		     {"cuMulticastAddDevice", 0},
		     {"cuMulticastBindMem", 0},
		     {"cuMulticastUnbind", 0}};
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		const char *call = calls[i].call;
		char spec[96];
		snprintf(spec, sizeof(spec), "%s:%d:CUDA_ERROR_UNKNOWN", call, calls[i].before + 1);
		if (!test_child_passes(spec, stale_call, (void *)call))
			test_fail(__FILE__, __LINE__, "stale handle given to %s: not refused by the shim alone", call);
	}
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
		if (cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap,
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
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

/* Every driver call the shim tracks (its own list; each name once). The gated
 * calls change nothing the shim tracks: nothing to compare. */
static const char *const wrapped[] = {
#define DRV(sym, name, since) #name,
#define DRV_PTDS(sym, name, since)
#define RT(sym)
#define GATED(sym, name, since, params, args)
#define GATED_PTDS(sym, name, since, params, args)
#include "../../src/shim/wrapped.def"
#undef DRV
#undef DRV_PTDS
#undef RT
};

/* Is wrapped[w] the first entry of its name (a name with several ABIs is
 * listed once per ABI)? */
static bool first_of_name(size_t w)
{
	for (size_t v = 0; v < w; v++)
		if (!strcmp(wrapped[v], wrapped[w]))
			return false;
	return true;
}

static void set_up_scenario(void *unused)
{
	(void)unused;
	setup();
	scenario();
}

/* Each wrapped call failing at its first, second and third use; under TSan
 * (the scenario is one thread) the first use only. The sanitizer passes share
 * the calls out (test_share); the plain pass sweeps them all. */
static void fault_sweep(void)
{
	int runs = 0, names = 0, swept = 0, uses = getenv("TSAN_OPTIONS") ? 1 : 3;
	for (size_t w = 0; w < sizeof(wrapped) / sizeof(wrapped[0]); w++) {
		if (!first_of_name(w) || !strcmp(wrapped[w], "cuInit"))
			continue; /* (cuInit is the set-up's: failing it leaves no scenario to compare) */
		if (!test_share((size_t)names++))
			continue;
		swept++;
		for (int n = 1; n <= uses; n++) {
			char spec[128];
			snprintf(spec, sizeof(spec), "%s:%d:CUDA_ERROR_OUT_OF_MEMORY", wrapped[w], n);
			/* A child forked before CUDA init: its own identity and endpoint. */
			if (!test_child_passes(spec, set_up_scenario, NULL))
				test_fail(__FILE__, __LINE__, "views differ after CUEMU_FAULT=%s", spec);
			runs++;
		}
	}
	CHECK_EQ(runs, uses * swept);
	CHECK(names >= 30); /* (the list is read: the VMM, multicast, IPC and pool calls) */
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	test_run("fault sweep over every wrapped call: shim and driver agree", fault_sweep);
	test_run("stale logical handles: CUDA_ERROR_INVALID_VALUE, never the driver", stale_handles);
	setup();
	test_run("retain/release/map/unmap: shim and driver agree", sequences);
	test_run("NCCL's free path: retain, release, unmap, release the same value", nccl_free_path);
	return shim_done();
}
