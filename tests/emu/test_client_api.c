/* SPDX-License-Identifier: MIT */
/* What real clients' host code (NCCL's, through a runtime) needs of cuemu, each
 * as cuda.h documents it: modules, libraries, kernels and their attributes;
 * launches checked and ordered on their stream; memory pools and stream-ordered
 * allocation; page-locked host memory; stream-capture queries; PCI bus ids; the
 * older ABIs clients ask for by version. */
#include <dlfcn.h>
#include <elf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cudaTypedefs.h>

#include "../harness/test.h"
#include "emu_util.h"

/* ---- images ---- */

static const char ptx[] = "//\n.version 8.0\n.target sm_90\n.address_size 64\n"
			  ".visible .entry first_kernel(\n.param .u64 p\n)\n{\nret;\n}\n"
			  ".visible .entry second_kernel()\n{\nret;\n}\n";

/* A minimal ELF64 image with a symbol table: two global functions and a local one. */
static size_t make_elf(unsigned char *buf, size_t cap)
{
	const char strtab[] = "\0kern_a\0kern_b\0local_c\0";
	Elf64_Sym syms[4] = {{0}};
	syms[1] = (Elf64_Sym){.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC)};
	syms[2] = (Elf64_Sym){.st_name = 8, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC)};
	syms[3] = (Elf64_Sym){.st_name = 15, .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC)};
	size_t off_syms = sizeof(Elf64_Ehdr), off_str = off_syms + sizeof(syms);
	size_t off_sh = (off_str + sizeof(strtab) + 7) & ~(size_t)7;
	size_t total = off_sh + 3 * sizeof(Elf64_Shdr);
	if (total > cap)
		return 0;
	memset(buf, 0, total);
	Elf64_Ehdr eh = {0};
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_type = ET_EXEC;
	eh.e_machine = 190; /* EM_CUDA */
	eh.e_version = EV_CURRENT;
	eh.e_ehsize = sizeof(eh);
	eh.e_shoff = off_sh;
	eh.e_shentsize = sizeof(Elf64_Shdr);
	eh.e_shnum = 3;
	memcpy(buf, &eh, sizeof(eh));
	memcpy(buf + off_syms, syms, sizeof(syms));
	memcpy(buf + off_str, strtab, sizeof(strtab));
	Elf64_Shdr sh[3] = {{0}};
	sh[1] = (Elf64_Shdr){.sh_type = SHT_SYMTAB,
			     .sh_offset = off_syms,
			     .sh_size = sizeof(syms),
			     .sh_link = 2,
			     .sh_entsize = sizeof(Elf64_Sym)};
	sh[2] = (Elf64_Shdr){.sh_type = SHT_STRTAB, .sh_offset = off_str, .sh_size = sizeof(strtab)};
	memcpy(buf + off_sh, sh, sizeof(sh));
	return total;
}

static void modules_and_libraries(void)
{
	CUmodule mod;
	CUfunction f, g;
	CHECK_CU(cuModuleLoadData(&mod, ptx));
	CHECK_CU(cuModuleGetFunction(&f, mod, "first_kernel"));
	CHECK_CU(cuModuleGetFunction(&g, mod, "first_kernel"));
	CHECK(f == g); /* one function object per name */
	CHECK_CU(cuModuleGetFunction(&g, mod, "second_kernel"));
	CHECK_CU_EQ(cuModuleGetFunction(&g, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	CHECK_CU(cuModuleUnload(mod));
	CHECK_CU_EQ(cuModuleGetFunction(&g, mod, "first_kernel"), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU_EQ(cuFuncGetAttribute(&(int){0}, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_ERROR_INVALID_HANDLE);

	unsigned char elf[1024];
	size_t n = make_elf(elf, sizeof(elf));
	CHECK(n > 0);
	CUlibrary lib;
	CUkernel k;
	CHECK_CU(cuLibraryLoadData(&lib, elf, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_CU(cuLibraryGetKernel(&k, lib, "kern_a"));
	CHECK_CU(cuLibraryGetKernel(&k, lib, "kern_b"));
	CHECK_CU_EQ(cuLibraryGetKernel(&k, lib, "local_c"), CUDA_ERROR_NOT_FOUND); /* not global */
	CHECK_CU_EQ(cuModuleGetFunction(&g, (CUmodule)lib, "kern_a"), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU(cuKernelGetFunction(&f, k));
	int v = 0;
	CHECK_CU(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
	CHECK_EQ(v, 48 * 1024);
	int optin = 0;
	CHECK_CU(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
	CHECK_EQ(optin, 227 * 1024);
	CHECK_CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin, k, 0));
	CHECK_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	CHECK_EQ(v, optin);
	CHECK_CU_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE); /* read-only */
	CHECK_CU_EQ(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
	CHECK_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, f));
	CHECK_EQ(v, 50);
	CHECK_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	CHECK_EQ(v, 1024);
	CHECK_CU_EQ(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 99), CUDA_ERROR_INVALID_DEVICE);
	CHECK_CU(cuLibraryUnload(lib));
	CHECK_CU_EQ(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);

	/* An ELF whose section table runs off its tables: refused. */
	Elf64_Ehdr bad;
	memcpy(&bad, elf, sizeof(bad));
	bad.e_shentsize = 7;
	unsigned char broken[1024];
	memcpy(broken, elf, n);
	memcpy(broken, &bad, sizeof(bad));
	CHECK_CU_EQ(cuLibraryLoadData(&lib, broken, NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_INVALID_IMAGE);
	/* An image cuemu cannot read (a fat binary, say): every name resolves. */
	static const unsigned char opaque[64] = {0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0};
	CHECK_CU(cuLibraryLoadData(&lib, opaque, NULL, NULL, 0, NULL, NULL, 0));
	CHECK_CU(cuLibraryGetKernel(&k, lib, "anything"));
	CHECK_CU(cuLibraryUnload(lib));
	CUmoduleLoadingMode mode;
	CHECK_CU(cuModuleGetLoadingMode(&mode));
	CHECK_EQ(mode, CU_MODULE_LAZY_LOADING);
}

/* ---- launches ---- */

static CUfunction some_kernel(CUmodule *mod)
{
	CUfunction f = NULL;
	CHECK_CU(cuModuleLoadData(mod, ptx));
	CHECK_CU(cuModuleGetFunction(&f, *mod, "first_kernel"));
	return f;
}

static void launches(void)
{
	CUmodule mod;
	CUfunction f = some_kernel(&mod);
	CUstream s;
	CUevent e;
	CHECK_CU(cuStreamCreate(&s, 0));
	CHECK_CU(cuEventCreate(&e, 0));
	struct gate g = GATE_INIT;
	void *args[] = {&(unsigned long long){0}};
	CHECK_CU(cuLaunchHostFunc(s, gate_fn, &g));
	CHECK_CU(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
	CHECK_CU(cuEventRecord(e, s));
	usleep(20000);
	CHECK_CU_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY); /* in order, behind the gate */
	gate_open(&g);
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU(cuEventQuery(e));
	/* The configuration is checked as the driver checks it. */
	CHECK_CU_EQ(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 64 * 1024, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024));
	CHECK_CU(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 64 * 1024, s, args, NULL));
	void *extra[] = {CU_LAUNCH_PARAM_END};
	CHECK_CU_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, extra), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuLaunchKernel((CUfunction)&g, 1, 1, 1, 32, 1, 1, 0, s, args, NULL), CUDA_ERROR_INVALID_HANDLE);
	CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
				  .value = {.clusterDim = {.x = 2, .y = 1, .z = 1}}};
	CUlaunchConfig cfg = {.gridDimX = 4,
			      .gridDimY = 1,
			      .gridDimZ = 1,
			      .blockDimX = 128,
			      .blockDimY = 1,
			      .blockDimZ = 1,
			      .hStream = s,
			      .attrs = &attr,
			      .numAttrs = 1};
	CHECK_CU(cuLaunchKernelEx(&cfg, f, args, NULL));
	cfg.gridDimX = 3; /* not a multiple of the cluster */
	CHECK_CU_EQ(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU(cuEventDestroy(e));
	CHECK_CU(cuStreamDestroy(s));
	CHECK_CU(cuModuleUnload(mod));
}

/* CUEMU_KERNELS=refuse (checked in a child: cuemu reads it at start). */
static void launches_refused(void)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n > 0 ? n : 0] = '\0';
	char *argv[] = {self, "refuse-child", NULL}, *env[] = {"CUEMU_KERNELS=refuse", NULL};
	pid_t pid = test_spawn(argv, env, NULL);
	int status = test_wait_child(pid, 20000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int refuse_child(void)
{
	CUmodule mod;
	if (emu_use_device(0) || cuModuleLoadData(&mod, ptx))
		return 2;
	CUfunction f;
	if (cuModuleGetFunction(&f, mod, "first_kernel"))
		return 3;
	return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_ERROR_NOT_SUPPORTED ? 0 : 4;
}

/* ---- stream-ordered memory ---- */

static void memory_pools(void)
{
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}};
	CUmemoryPool pool, def;
	CHECK_CU(cuMemPoolCreate(&pool, &props));
	props.location.id = 7;
	CHECK_CU_EQ(cuMemPoolCreate(&(CUmemoryPool){0}, &props), CUDA_ERROR_INVALID_DEVICE);
	props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	props.location.id = 0;
	CHECK_CU_EQ(cuMemPoolCreate(&(CUmemoryPool){0}, &props), CUDA_ERROR_NOT_SUPPORTED);
	cuuint64_t threshold = ~0ull, got = 0;
	CHECK_CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
	CHECK_EQ(got, threshold);
	CHECK_CU_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got), CUDA_ERROR_INVALID_VALUE);
	CUstream s;
	CHECK_CU(cuStreamCreate(&s, 0));
	CUdeviceptr p;
	CHECK_CU(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s));
	CHECK_CU(cuMemsetD8Async(p, 0x3c, 1 << 20, s));
	unsigned char byte = 0;
	CHECK_CU(cuMemcpyDtoHAsync(&byte, p + 12345, 1, s));
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_EQ(byte, 0x3c);
	CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
	CHECK_EQ(got, 1u << 20);
	int dev = -1;
	CHECK_CU(cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
	CHECK_EQ(dev, 1);
	CUipcMemHandle ipc;
	CHECK_CU_EQ(cuIpcGetMemHandle(&ipc, p), CUDA_ERROR_INVALID_VALUE); /* pool memory has no legacy IPC */
	/* The free happens when the stream reaches it. */
	struct gate g = GATE_INIT;
	CHECK_CU(cuLaunchHostFunc(s, gate_fn, &g));
	CHECK_CU(cuMemFreeAsync(p, s));
	CUdeviceptr base;
	size_t size;
	CHECK_CU(cuMemGetAddressRange(&base, &size, p)); /* still there, behind the gate */
	/* A destroy with an allocation outstanding returns at once. */
	CHECK_CU(cuMemPoolDestroy(pool));
	CHECK_CU_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got), CUDA_ERROR_INVALID_VALUE);
	gate_open(&g);
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU_EQ(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
	CHECK_CU_EQ(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
	/* The default pool: the current context's device, not to be destroyed. */
	CHECK_CU(cuDeviceGetDefaultMemPool(&def, 0));
	CUmemoryPool cur;
	CHECK_CU(cuDeviceGetMemPool(&cur, 0));
	CHECK(cur == def);
	CHECK_CU_EQ(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemAllocAsync(&p, 4096, s));
	CHECK_CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
	CHECK_EQ(got, 4096u);
	CHECK_CU(cuMemFree(p)); /* a synchronous free of stream-ordered memory is kept in the books too */
	CHECK_CU(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
	CHECK_EQ(got, 0u);
	CHECK_CU(cuStreamDestroy(s));
}

static void host_memory(void)
{
	void *h;
	CHECK_CU(cuMemHostAlloc(&h, 10000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	memset(h, 0x11, 10000);
	CUdeviceptr d;
	CHECK_CU(cuMemHostGetDevicePointer(&d, (char *)h + 100, 0));
	CHECK_EQ(d, (CUdeviceptr)(uintptr_t)h + 100);
	CHECK_CU_EQ(cuMemHostGetDevicePointer(&d, h, 1), CUDA_ERROR_INVALID_VALUE); /* flags must be 0 */
	CUdeviceptr dev;
	CHECK_CU(cuMemAlloc(&dev, 4096));
	CHECK_CU(cuMemsetD8(dev, 0x77, 4096));
	CHECK_CU(cuMemcpyDtoH(h, dev, 4096));
	CHECK_EQ(((unsigned char *)h)[4095], 0x77);
	CHECK_EQ(((unsigned char *)h)[4096], 0x11);
	CHECK_CU(cuMemFree(dev));
	CHECK_CU(cuMemFreeHost(h));
	CHECK_CU_EQ(cuMemHostGetDevicePointer(&d, h, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuMemHostAlloc(&h, 64, 0x80), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuMemAllocHost(&h, 64));
	CHECK_CU(cuMemFreeHost(h));
}

/* ---- queries ---- */

static void capture_queries(void)
{
	CUstream s;
	CHECK_CU(cuStreamCreate(&s, 0));
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	CHECK_CU(cuStreamIsCapturing(s, &st));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
	/* Every ABI a runtime asks for, by version: three entry points. */
	PFN_cuStreamGetCaptureInfo_v10010 v1;
	PFN_cuStreamGetCaptureInfo_v11030 v2;
	PFN_cuStreamGetCaptureInfo_v12030 v3;
	CHECK_CU(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v1, 10010, 0, NULL));
	CHECK_CU(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v2, 11030, 0, NULL));
	CHECK_CU(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v3, 12030, 0, NULL));
	CHECK((void *)v1 != (void *)v2 && (void *)v2 != (void *)v3);
	cuuint64_t id = 7;
	st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	CHECK_CU(v1(s, &st, &id));
	CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
	CUgraph graph = (CUgraph)&id;
	const CUgraphNode *deps = (const CUgraphNode *)&id;
	const CUgraphEdgeData *edges = (const CUgraphEdgeData *)&id;
	size_t ndeps = 9;
	CHECK_CU(v2(s, &st, &id, &graph, &deps, &ndeps));
	CHECK(graph == NULL && deps == NULL && ndeps == 0);
	CHECK_CU(v3(NULL, &st, NULL, NULL, NULL, &edges, NULL));
	CHECK(edges == NULL);
	CHECK_CU_EQ(v3((CUstream)&id, &st, NULL, NULL, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	/* The thread's capture mode, exchanged. */
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	CHECK_CU(cuThreadExchangeStreamCaptureMode(&m));
	CHECK_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
	CHECK_CU(cuThreadExchangeStreamCaptureMode(&m));
	CHECK_EQ(m, CU_STREAM_CAPTURE_MODE_RELAXED);
	m = (CUstreamCaptureMode)9;
	CHECK_CU_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuStreamDestroy(s));
}

static void pci_bus_ids(void)
{
	char id[32];
	CHECK_CU(cuDeviceGetPCIBusId(id, sizeof(id), 1));
	CHECK_STR(id, "0000:02:00.0");
	int bus = 0;
	CHECK_CU(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1));
	CHECK_EQ(bus, 2);
	CHECK_CU_EQ(cuDeviceGetPCIBusId(id, 8, 1), CUDA_ERROR_INVALID_VALUE);
	CUdevice d = -1;
	CHECK_CU(cuDeviceGetByPCIBusId(&d, "0000:02:00.0"));
	CHECK_EQ(d, 1);
	CHECK_CU(cuDeviceGetByPCIBusId(&d, "01:00.0"));
	CHECK_EQ(d, 0);
	CHECK_CU(cuDeviceGetByPCIBusId(&d, "0000:01:00"));
	CHECK_EQ(d, 0);
	CHECK_CU_EQ(cuDeviceGetByPCIBusId(&d, "0000:09:00.0"), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU_EQ(cuDeviceGetByPCIBusId(&d, "not a bus id"), CUDA_ERROR_INVALID_VALUE);
}

/* cuCtxCreate at the versions clients ask for: each its own ABI. */
static void older_abis(void)
{
	PFN_cuCtxCreate_v3020 v2;
	PFN_cuCtxCreate_v11040 v3;
	PFN_cuCtxCreate_v12050 v4;
	CHECK_CU(cuGetProcAddress("cuCtxCreate", (void **)&v2, 3020, 0, NULL));
	CHECK_CU(cuGetProcAddress("cuCtxCreate", (void **)&v3, 11040, 0, NULL));
	CHECK_CU(cuGetProcAddress("cuCtxCreate", (void **)&v4, 13000, 0, NULL));
	CHECK((void *)v2 != (void *)v3 && (void *)v3 != (void *)v4);
	CUcontext saved, c;
	CHECK_CU(cuCtxGetCurrent(&saved));
	CHECK_CU(v3(&c, NULL, 0, 0, 1));
	CUdevice dev = -1;
	CHECK_CU(cuCtxGetDevice(&dev));
	CHECK_EQ(dev, 1);
	CHECK_CU(cuCtxDestroy(c));
	CHECK_CU_EQ(v3(&c, NULL, 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* two parameters, none given */
	CHECK_CU(v2(&c, 0, 0));
	CHECK_CU(cuCtxDestroy(c));
	CHECK_CU(cuCtxSetCurrent(saved));
}

/* NVIDIA's runtime must never run on cuemu: beside a libcudart that is not the
 * project's (a stand-in here, nothing of NVIDIA's), cuInit refuses; beside the
 * project's own it succeeds. Each in a fresh child. */
static int runtime_child(const char *lib)
{
	if (!dlopen(lib, RTLD_NOW | RTLD_GLOBAL))
		return 5;
	CUresult rc = cuInit(0);
	return strstr(lib, "fake_runtime") ? (rc == CUDA_ERROR_NOT_SUPPORTED ? 0 : 6) : (rc == CUDA_SUCCESS ? 0 : 7);
}

static void foreign_runtime_refused(void)
{
	char self[4096], fake[4200], ours[4200];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	snprintf(fake, sizeof(fake), "%s/fake_runtime/libcudart.so.13", test_exe_dir());
	snprintf(ours, sizeof(ours), "%s/../../lib/libcudart.so.13", test_exe_dir());
	const char *libs[] = {fake, ours};
	for (int i = 0; i < 2; i++) {
		char *argv[] = {self, "runtime-child", (char *)libs[i], NULL};
		pid_t pid = test_spawn(argv, NULL, NULL);
		int status = test_wait_child(pid, 20000);
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			test_fail(__FILE__, __LINE__, "beside %s: child ended with %#x", libs[i], status);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "refuse-child"))
		return refuse_child();
	if (argc > 2 && !strcmp(argv[1], "runtime-child"))
		return runtime_child(argv[2]);
	CHECK_CU(emu_use_device(0));
	test_run("modules, libraries, kernels and their attributes", modules_and_libraries);
	test_run("launches checked as the driver does and ordered on their stream", launches);
	test_run("CUEMU_KERNELS=refuse: launches fail", launches_refused);
	test_run("memory pools, stream-ordered allocation and free", memory_pools);
	test_run("page-locked host memory", host_memory);
	test_run("stream-capture queries at every ABI; the thread's capture mode", capture_queries);
	test_run("PCI bus ids both ways", pci_bus_ids);
	test_run("cuCtxCreate's older ABIs by version", older_abis);
	test_run("a libcudart that is not the project's: cuInit refused", foreign_runtime_refused);
	return test_done();
}
