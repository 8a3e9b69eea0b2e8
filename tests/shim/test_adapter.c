/* SPDX-License-Identifier: MIT */
/* The cuMemAlloc adapter (DESIGN.md §4.4): small allocations share tracked VMM
 * chunks (device memory in use grows by at most 1.5x what was asked for, plus
 * one granularity, and comes back when all are freed); every pointer is
 * 256-byte aligned; cuMemGetAddressRange and cuPointerGetAttribute(s) answer as
 * for cuMemAlloc memory; cuMemFree refuses what it did not hand out; peer
 * access reaches the adapter's memory; the chunks are tracked allocations
 * (INSPECT). With SNAPSHOT_CUDA_VMM_IPC=0 cuMemAlloc is the driver's. */
#include "shim_util.h"

#define SMALL 1000

static size_t used(void)
{
	size_t free_b = 0, total = 0;
	CHECK_CU(cuMemGetInfo(&free_b, &total));
	return total - free_b;
}

static size_t granularity(void)
{
	CUmemAllocationProp p = emu_prop(0);
	return emu_granularity(&p);
}

static void small_allocations(void)
{
	static CUdeviceptr p[SMALL];
	static size_t len[SMALL];
	size_t before = used(), asked = 0;
	int misaligned = 0, wrong_range = 0, wrong_attr = 0;
	for (int i = 0; i < SMALL; i++) {
		len[i] = 4096 + (size_t)(i * 7919 % 61) * 1024; /* 4 KiB .. 64 KiB */
		asked += len[i];
		CHECK_CU(cuMemAlloc(&p[i], len[i]));
		misaligned += p[i] % 256 != 0;
		CHECK_CU(cuMemsetD8(p[i], (unsigned char)i, len[i]));
		CUdeviceptr base = 0;
		size_t size = 0;
		CHECK_CU(cuMemGetAddressRange(&base, &size, p[i] + len[i] - 1));
		wrong_range += base != p[i] || size != len[i];
		CUdeviceptr start = 0;
		size_t range = 0;
		int ipc = 0;
		int rdma = 0;
		CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
					       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
					       CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE};
		void *data[] = {&start, &range, &ipc, &rdma};
		CHECK_CU(cuPointerGetAttributes(4, attrs, data, p[i] + 1));
		wrong_attr += start != p[i] || range != len[i] || !ipc || !rdma; /* as the driver's cuMemAlloc memory */
	}
	CHECK_EQ(misaligned, 0);
	CHECK_EQ(wrong_range, 0);
	CHECK_EQ(wrong_attr, 0);
	size_t grew = used() - before;
	CHECK(grew <= asked + asked / 2 + granularity());
	/* Each keeps its bytes (no two overlap). */
	int bad = 0;
	for (int i = 0; i < SMALL; i++) {
		unsigned char first = 0, last = 0;
		CHECK_CU(cuMemcpyDtoH(&first, p[i], 1));
		CHECK_CU(cuMemcpyDtoH(&last, p[i] + len[i] - 1, 1));
		bad += first != (unsigned char)i || last != (unsigned char)i;
	}
	CHECK_EQ(bad, 0);
	/* They are chunks the shim tracks: far fewer allocations than pointers. */
	struct topo_participant t;
	CHECK_EQ(shim_inspect(getpid(), &t), 0);
	CHECK(t.nallocs > 0 && t.nallocs < SMALL / 10);
	topo_free(&t);
	CHECK_CU_EQ(cuMemFree(p[0] + 256), CUDA_ERROR_INVALID_VALUE); /* not what cuMemAlloc returned */
	/* Free space of a chunk is no allocation. */
	CUdeviceptr gap = p[SMALL - 1] + ((len[SMALL - 1] + 255) & ~(size_t)255);
	CUdeviceptr base;
	size_t size;
	CHECK_CU_EQ(cuMemGetAddressRange(&base, &size, gap), CUDA_ERROR_NOT_FOUND);
	for (int i = 0; i < SMALL; i++)
		CHECK_CU(cuMemFree(p[i]));
	CHECK_EQ(used(), before);                                       /* every chunk given back */
	CHECK_CU_EQ(cuMemFree(p[SMALL - 1]), CUDA_ERROR_INVALID_VALUE); /* freed twice */
	CHECK_CU(cuMemFree(0));
}

static void large_allocation(void)
{
	size_t g = granularity(), before = used();
	CUdeviceptr big;
	CHECK_CU(cuMemAlloc(&big, 3 * g + 1));
	CHECK(used() - before >= 3 * g + 1);
	CHECK(used() - before <= 4 * g);
	CHECK_CU(cuMemsetD8(big + 3 * g, 0x5a, 1));
	CHECK_CU(cuMemFree(big));
	CHECK_EQ(used(), before);
}

/* What device 0 may do with [p, ...) (its access, as a kernel there would have it). */
static unsigned long long access_of_device0(CUdeviceptr p)
{
	CUmemLocation d0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
	unsigned long long f = 99;
	CHECK_CU(cuMemGetAccess(&f, &d0, p));
	return f;
}

/* Device 0 reaches device 1's cuMemAlloc memory once it enabled peer access. */
static void peer_access(void)
{
	CUcontext c0, c1;
	CHECK_CU(cuDevicePrimaryCtxRetain(&c0, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&c1, 1));
	CHECK_CU(cuCtxSetCurrent(c1));
	CUdeviceptr on1, later;
	CHECK_CU(cuMemAlloc(&on1, 4096));
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_EQ(access_of_device0(on1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
	CHECK_CU(cuCtxEnablePeerAccess(c1, 0));
	CHECK_EQ(access_of_device0(on1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuCtxSetCurrent(c1));
	CHECK_CU(cuMemAlloc(&later, 4096)); /* made after: reachable too */
	CHECK_EQ(access_of_device0(later), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemFree(on1));
	CHECK_CU(cuMemFree(later));
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuDevicePrimaryCtxRelease(1));
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
}

/* Off: cuMemAlloc is the driver's, one granularity each, nothing tracked. */
static void adapter_off(void)
{
	if (!getenv("SNAPSHOT_CUDA_VMM_IPC"))
		SKIP("runs in its own process (SNAPSHOT_CUDA_VMM_IPC=0)");
	size_t before = used();
	CUdeviceptr a, b;
	CHECK_CU(cuMemAlloc(&a, 4096));
	CHECK_CU(cuMemAlloc(&b, 4096));
	CHECK_EQ(used() - before, 2 * granularity());
	struct topo_participant t;
	CHECK_EQ(shim_inspect(getpid(), &t), 0);
	CHECK_EQ(t.nallocs, 0);
	topo_free(&t);
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemFree(b));
}

/* One driver call of a chunk's making fails (CUEMU_FAULT, this process): the
 * cuMemAlloc fails with it, nothing is left behind, and the next one works. */
static void fault_in_chunk(void)
{
	const char *spec = getenv("CUEMU_FAULT");
	if (!spec)
		SKIP("runs in its own process (CUEMU_FAULT)");
	size_t before = used();
	CUdeviceptr p = 0;
	CHECK_CU_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_EQ(used(), before);
	struct topo_participant t;
	CHECK_EQ(shim_inspect(getpid(), &t), 0);
	CHECK_EQ(t.nallocs, 0);
	CHECK_EQ(t.nmaps, 0);
	topo_free(&t);
	CHECK_CU(cuMemAlloc(&p, 4096));
	CHECK_CU(cuMemFree(p));
	CHECK_EQ(used(), before);
}

/* This binary again in its own process with extra environment; its exit status. */
static int again(const char *self, const char *mode, const char *env)
{
	pid_t pid = fork();
	if (pid == 0) {
		unsetenv("CUSNAP_UNDER_SHIM");
		if (env)
			putenv((char *)env);
		execl(self, self, mode, (char *)NULL);
		_exit(127);
	}
	int status = test_wait_child(pid, 60000);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char self[PATH_MAX];

static void chunk_faults(void)
{
	static const char *const calls[] = {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"};
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		char env[128];
		snprintf(env, sizeof(env), "CUEMU_FAULT=%s:1:CUDA_ERROR_OUT_OF_MEMORY", calls[i]);
		if (again(self, "--fault", env) != 0)
			test_fail(__FILE__, __LINE__, "%s: the failed cuMemAlloc left something behind", env);
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "--off"))
		setenv("SNAPSHOT_CUDA_VMM_IPC", "0", 1);
	shim_reexec(argc, argv);
	CHECK_CU(emu_use_device(0));
	if (!strcmp(mode, "--off")) {
		test_run("SNAPSHOT_CUDA_VMM_IPC=0: cuMemAlloc is the driver's", adapter_off);
		return shim_done();
	}
	if (!strcmp(mode, "--fault")) {
		test_run(getenv("CUEMU_FAULT"), fault_in_chunk);
		return shim_done();
	}
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	test_run("1,000 small cuMemAllocs share chunks: <= 1.5x + one granularity, all given back", small_allocations);
	test_run("a large cuMemAlloc gets a chunk of its own, given back at cuMemFree", large_allocation);
	test_run("cuCtxEnablePeerAccess reaches the adapter's memory, present and to come", peer_access);
	test_run("a failing driver call while making a chunk: cuMemAlloc fails, nothing left behind", chunk_faults);
	/* The same binary with the adapter off, in its own process. */
	CHECK_EQ(again(self, "--off", NULL), 0);
	return shim_done();
}
