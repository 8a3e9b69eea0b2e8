/* SPDX-License-Identifier: MIT */
/* probe: facts about the CUDA driver that cuemu and the interposer assume, for
 * tests/gpu/run.sh. Loads libcuda.so.1 with dlopen (built on a CPU machine, run
 * on the GPU host). Each subcommand prints "key value" lines.
 *
 *   probe info             device 0's name, driver version, device count, multicast support
 *   probe resolvers        for every name the shim wraps: is cuGetProcAddress(name, 13000)
 *                          the pointer dlsym(libcuda, name) gives? (flags 0 and per-thread)
 *   probe noctx            export, import, map and set-access from a thread with no
 *                          current context (each call's result)
 *   probe handles          retain returns the mapped value; a second import of one
 *                          exported FD in one process: same handle or a new one;
 *                          width of a boolean pointer attribute
 *   probe ipc              legacy IPC: a handle of an interior pointer, opening in the
 *                          exporting process, then (probe ipc-open HEX, another process)
 *                          flags 0, a second open, the opened range's size
 *   probe initonly         cuInit and nothing else, then sleep (for the restore-TID check)
 *   probe tid PID          cuCheckpointProcessGetRestoreThreadId(PID)
 *   probe noinit PID       the same and cuCheckpointProcessGetState(PID), never calling cuInit
 *   probe lockfail PID     cuCheckpointProcessLock(PID) with a 1 ms timeout (PID busy), then its state;
 *                          unlocked again if it was left LOCKED */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#undef cuGetProcAddress
/* clang-format off */
#define DRV(F) \
	F(cuInit) \
	F(cuDriverGetVersion) \
	F(cuDeviceGet) \
	F(cuDeviceGetCount) \
	F(cuDeviceGetName) \
	F(cuDeviceGetAttribute) \
	F(cuDevicePrimaryCtxRetain) \
	F(cuCtxSetCurrent) \
	F(cuGetErrorName) \
	F(cuMemCreate) \
	F(cuMemRelease) \
	F(cuMemMap) \
	F(cuMemUnmap) \
	F(cuMemSetAccess) \
	F(cuMemAddressReserve) \
	F(cuMemAddressFree) \
	F(cuMemRetainAllocationHandle) \
	F(cuMemExportToShareableHandle) \
	F(cuMemImportFromShareableHandle) \
	F(cuMemGetAllocationGranularity) \
	F(cuMemGetAllocationPropertiesFromHandle) \
	F(cuPointerGetAttribute) \
	F(cuPointerGetAttributes) \
	F(cuMemAllocAsync) \
	F(cuMemFreeAsync) \
	F(cuCtxSynchronize) \
	F(cuMemAlloc_v2) \
	F(cuMemFree_v2) \
	F(cuMemGetAddressRange_v2) \
	F(cuIpcGetMemHandle) \
	F(cuIpcOpenMemHandle_v2) \
	F(cuIpcCloseMemHandle) \
	F(cuCheckpointProcessGetRestoreThreadId) \
	F(cuCheckpointProcessGetState) \
	F(cuCheckpointProcessLock) \
	F(cuCheckpointProcessUnlock) \
	F(cuGetProcAddress_v2)
/* clang-format on */

static struct {
#define FIELD(n) __typeof__(&n) n;
	DRV(FIELD)
#undef FIELD
} d;
static void *lib;

static const char *name_of(CUresult r)
{
	const char *s = "?";
	if (d.cuGetErrorName)
		d.cuGetErrorName(r, &s);
	return s;
}

static int load(bool init)
{
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		printf("error no_libcuda %s\n", dlerror());
		return 69;
	}
#define LOAD(n) *(void **)&d.n = dlsym(lib, #n);
	DRV(LOAD)
#undef LOAD
	if (init && (!d.cuInit || d.cuInit(0) != CUDA_SUCCESS)) {
		printf("error cuInit_failed\n");
		return 69;
	}
	return 0;
}

static CUcontext ctx0;
static size_t gran;
static CUmemAllocationProp prop0 = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};

static int context(void)
{
	CUdevice dev;
	if (d.cuDeviceGet(&dev, 0) || d.cuDevicePrimaryCtxRetain(&ctx0, dev) || d.cuCtxSetCurrent(ctx0) ||
	    d.cuMemGetAllocationGranularity(&gran, &prop0, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) {
		printf("error no_context\n");
		return 1;
	}
	return 0;
}

static int info(void)
{
	int v = 0, n = 0, mc = 0;
	char name[256] = "";
	CUdevice dev;
	d.cuDriverGetVersion(&v);
	d.cuDeviceGetCount(&n);
	if (n > 0 && d.cuDeviceGet(&dev, 0) == CUDA_SUCCESS) {
		d.cuDeviceGetName(name, sizeof(name), dev);
		d.cuDeviceGetAttribute(&mc, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev);
	}
	printf("name %s\ndriver_version %d\ndevices %d\nmulticast_supported %d\n", name, v, n, mc);
	return 0;
}

/* Every driver entry the shim wraps (its own list): the symbol, the name
 * cuGetProcAddress knows it by, and the CUDA version it is handed out from. */
static const struct {
	const char *sym, *name;
	int since;
} wrapped[] = {
#undef DRV /* (the loader's list above) */
#define DRV(sym, name, since) {#sym, #name, since},
#define DRV_PTDS(sym, name, since)
#define RT(sym)
#define GATED(sym, name, since, params, args) {#sym, #name, since},
#define GATED_PTDS(sym, name, since, params, args)
#include "../../src/shim/wrapped.def"
#undef DRV
#undef DRV_PTDS
#undef RT
};

/* Is entry i what cuGetProcAddress hands out for its name at version v (the
 * latest of that name's entries up to v)? */
static bool current_at(size_t i, int v)
{
	if (wrapped[i].since > v)
		return false;
	for (size_t j = 0; j < sizeof(wrapped) / sizeof(wrapped[0]); j++)
		if (j != i && !strcmp(wrapped[j].name, wrapped[i].name) && wrapped[j].since > wrapped[i].since &&
		    wrapped[j].since <= v)
			return false;
	return true;
}

static int resolvers(void)
{
	int differ = 0;
	for (size_t i = 0; i < sizeof(wrapped) / sizeof(wrapped[0]); i++) {
		if (!current_at(i, 13000))
			continue;
		for (int f = 0; f < 2; f++) {
			void *p = NULL;
			CUdriverProcAddressQueryResult st;
			cuuint64_t flags = f ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
			CUresult rc = d.cuGetProcAddress_v2(wrapped[i].name, &p, 13000, flags, &st);
			void *q = dlsym(lib, wrapped[i].sym);
			const char *verdict = rc ? name_of(rc) : p == q ? "same" : "differs";
			differ += !rc && p != q;
			printf("resolver %s%s %s\n", wrapped[i].name, f ? "/ptds" : "", verdict);
		}
	}
	printf("resolver_pointers_differ %d\n", differ);
	/* An old ABI version asked for with the per-thread flag (examples/clients did
	 * this: the driver refused it here once): the answer and the query's status. */
	for (int f = 0; f < 2; f++) {
		void *p = NULL;
		CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
		CUresult rc = d.cuGetProcAddress_v2("cuMemcpyHtoD", &p, 3020,
						    f ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &st);
		printf("resolver_3020%s %s status %d\n", f ? "_ptds" : "", name_of(rc), (int)st);
	}
	return 0;
}

struct noctx {
	CUmemGenericAllocationHandle h;
	CUresult export_rc, import_rc, reserve_rc, map_rc, access_rc, unmap_rc, release_rc;
};

static void *noctx_thread(void *arg)
{
	struct noctx *n = arg;
	int fd = -1;
	CUmemGenericAllocationHandle imp = 0;
	CUdeviceptr va = 0;
	n->export_rc = d.cuMemExportToShareableHandle(&fd, n->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	n->import_rc = n->export_rc ? CUDA_ERROR_UNKNOWN
				    : d.cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
								       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	n->reserve_rc = d.cuMemAddressReserve(&va, gran, 0, 0, 0);
	n->map_rc = n->import_rc || n->reserve_rc ? CUDA_ERROR_UNKNOWN : d.cuMemMap(va, gran, 0, imp, 0);
	CUmemAccessDesc a = {.location = prop0.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	n->access_rc = n->map_rc ? CUDA_ERROR_UNKNOWN : d.cuMemSetAccess(va, gran, &a, 1);
	n->unmap_rc = n->map_rc ? CUDA_ERROR_UNKNOWN : d.cuMemUnmap(va, gran);
	n->release_rc = n->import_rc ? CUDA_ERROR_UNKNOWN : d.cuMemRelease(imp);
	if (va)
		d.cuMemAddressFree(va, gran);
	if (fd >= 0)
		close(fd);
	return NULL;
}

static int noctx(void)
{
	if (context())
		return 1;
	struct noctx n = {0};
	CUresult rc = d.cuMemCreate(&n.h, gran, &prop0, 0);
	if (rc) {
		printf("error cuMemCreate %s\n", name_of(rc));
		return 1;
	}
	pthread_t t;
	pthread_create(&t, NULL, noctx_thread, &n);
	pthread_join(t, NULL);
	printf("noctx export %s\nnoctx import %s\nnoctx reserve %s\nnoctx map %s\nnoctx set_access %s\nnoctx unmap %s\n"
	       "noctx release %s\n",
	       name_of(n.export_rc), name_of(n.import_rc), name_of(n.reserve_rc), name_of(n.map_rc),
	       name_of(n.access_rc), name_of(n.unmap_rc), name_of(n.release_rc));
	d.cuMemRelease(n.h);
	return 0;
}

static int handles(void)
{
	if (context())
		return 1;
	CUmemGenericAllocationHandle h, r = 0, i1 = 0, i2 = 0;
	CUdeviceptr va;
	CUmemAccessDesc a = {.location = prop0.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if (d.cuMemCreate(&h, gran, &prop0, 0) || d.cuMemAddressReserve(&va, gran, 0, 0, 0) ||
	    d.cuMemMap(va, gran, 0, h, 0) || d.cuMemSetAccess(va, gran, &a, 1)) {
		printf("error setup\n");
		return 1;
	}
	CUresult rc = d.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)va);
	printf("retain_same_value %s\n", rc ? name_of(rc) : r == h ? "yes" : "no");
	if (!rc)
		d.cuMemRelease(r);
	int fd = -1;
	rc = d.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	CUresult r1 = rc ? rc
			 : d.cuMemImportFromShareableHandle(&i1, (void *)(intptr_t)fd,
							    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CUresult r2 = rc ? rc
			 : d.cuMemImportFromShareableHandle(&i2, (void *)(intptr_t)fd,
							    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	/* What the driver reports of an import: the rebuild recreates from records. */
	CUmemAllocationProp ip = {0};
	CUresult rp = r1 ? r1 : d.cuMemGetAllocationPropertiesFromHandle(&ip, i1);
	if (rp)
		printf("import_handle_types %s\n", name_of(rp));
	else
		printf("import_handle_types %#x\nimport_location %d:%d\n", (unsigned)ip.requestedHandleTypes,
		       (int)ip.location.type, ip.location.id);
	printf("own_import_same_as_created %s\n", r1 ? name_of(r1) : i1 == h ? "yes" : "no");
	printf("second_import_same_handle %s\n", r1 || r2 ? name_of(r1 ? r1 : r2) : i1 == i2 ? "yes" : "no");
	/* An imported allocation exported again (a holder's rebuild, DESIGN.md
	 * §6.2): the driver's answer, and whether the new FD imports. */
	int again = -1;
	CUresult re = r1 ? r1 : d.cuMemExportToShareableHandle(&again, i1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	CUmemGenericAllocationHandle i3 = 0;
	CUresult ri = re ? re
			 : d.cuMemImportFromShareableHandle(&i3, (void *)(intptr_t)again,
							    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	printf("reexport_import %s\n", name_of(ri));
	if (again >= 0)
		close(again);
	if (!ri)
		d.cuMemRelease(i3);
	/* How many bytes the driver writes for a boolean attribute. */
	unsigned char buf[8];
	memset(buf, 0xee, sizeof(buf));
	rc = d.cuPointerGetAttribute(buf, CU_POINTER_ATTRIBUTE_MAPPED, va);
	int width = 0;
	for (int i = 0; i < 8; i++)
		width += buf[i] != 0xee;
	printf("bool_attribute_bytes %s%d\n", rc ? name_of(rc) : "", rc ? 0 : width);
	/* The host address of device memory through cuPointerGetAttributes (the
	 * runtime's cudaPointerGetAttributes asks for it): an error, or NULL? */
	{
		CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_HOST_POINTER};
		unsigned type = 0;
		void *host = (void *)1;
		void *data[] = {&type, &host};
		CUresult pr = d.cuPointerGetAttributes(2, which, data, va);
		printf("pointer_attributes_host_of_device %s\n", pr ? name_of(pr) : host ? "non-NULL" : "NULL");
	}
	/* Legacy IPC of stream-ordered (pool) memory: refused? */
	{
		CUdeviceptr pool_mem = 0;
		CUresult ar = d.cuMemAllocAsync(&pool_mem, 1 << 20, NULL);
		if (!ar)
			ar = d.cuCtxSynchronize();
		CUipcMemHandle ih;
		CUresult ir = ar ? ar : d.cuIpcGetMemHandle(&ih, pool_mem);
		printf("ipc_of_pool_memory %s\n", ar ? "unknown" : ir ? "refused" : "allowed");
		if (!ar)
			d.cuMemFreeAsync(pool_mem, NULL), d.cuCtxSynchronize();
	}
	/* One cuMemSetAccess over two adjacent mappings of two allocations (the
	 * driver documents "a fully mapped address range containing all
	 * allocations"): what a rebuild would batch per contiguous range. */
	CUmemGenericAllocationHandle h1 = 0, h2 = 0;
	CUdeviceptr two = 0;
	rc = d.cuMemCreate(&h1, gran, &prop0, 0);
	if (!rc)
		rc = d.cuMemCreate(&h2, gran, &prop0, 0);
	if (!rc)
		rc = d.cuMemAddressReserve(&two, 2 * gran, 0, 0, 0);
	if (!rc)
		rc = d.cuMemMap(two, gran, 0, h1, 0);
	if (!rc)
		rc = d.cuMemMap(two + gran, gran, 0, h2, 0);
	CUresult range = rc ? rc : d.cuMemSetAccess(two, 2 * gran, &a, 1);
	printf("set_access_over_two_mappings %s\n", name_of(range));
	return 0;
}

enum { IPC_BYTES = 1 << 20 };

/* In a process of its own: open the handle (hex) twice, with flags 0 then the lazy flag. */
static int ipc_open(const char *hex)
{
	if (context())
		return 1;
	CUipcMemHandle h;
	for (size_t i = 0; i < sizeof(h.reserved); i++) {
		unsigned v = 0;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return 1;
		h.reserved[i] = (char)v;
	}
	CUdeviceptr z = 0, a = 0, b = 0, base = 0;
	size_t size = 0;
	CUresult r0 = d.cuIpcOpenMemHandle_v2(&z, h, 0);
	printf("ipc_open_flags0 %s\n", name_of(r0));
	if (!r0)
		d.cuIpcCloseMemHandle(z);
	CUresult r1 = d.cuIpcOpenMemHandle_v2(&a, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	CUresult r2 = r1 ? r1 : d.cuIpcOpenMemHandle_v2(&b, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("ipc_open_twice_same %s\n", r1 || r2 ? name_of(r1 ? r1 : r2) : a == b ? "yes" : "no");
	CUresult r3 = r1 ? r1 : d.cuMemGetAddressRange_v2(&base, &size, a + 100);
	printf("ipc_opened_range %s\n", r3 ? name_of(r3) : base == a && size == IPC_BYTES ? "as_allocated" : "other");
	if (!r1 && !r2)
		d.cuIpcCloseMemHandle(b);
	if (!r1)
		d.cuIpcCloseMemHandle(a);
	return 0;
}

static int ipc(const char *self)
{
	if (context())
		return 1;
	CUdeviceptr p = 0, own = 0;
	CUipcMemHandle h, inner;
	CUresult rc = d.cuMemAlloc_v2(&p, IPC_BYTES);
	if (!rc)
		rc = d.cuIpcGetMemHandle(&h, p);
	if (rc) {
		printf("error ipc_setup %s\n", name_of(rc));
		return 1;
	}
	rc = d.cuIpcGetMemHandle(&inner, p + 4096);
	printf("ipc_interior_handle %s\n", rc ? name_of(rc) : memcmp(&h, &inner, sizeof(h)) ? "differs" : "same");
	rc = d.cuIpcOpenMemHandle_v2(&own, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("ipc_open_own %s\n", name_of(rc));
	if (!rc)
		d.cuIpcCloseMemHandle(own);
	char hex[2 * sizeof(h.reserved) + 1];
	for (size_t i = 0; i < sizeof(h.reserved); i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "ipc-open", hex, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	d.cuMemFree_v2(p);
	return 0;
}

int main(int argc, char **argv)
{
	/* noinit PID: the checkpoint API from a process that never called cuInit
	 * (as NVIDIA's cuda-checkpoint and the agent's native helper do). */
	bool noinit = argc >= 3 && !strcmp(argv[1], "noinit");
	int rc = load(!noinit);
	if (rc)
		return rc;
	if (noinit) {
		int tid = 0;
		CUprocessState st = CU_PROCESS_STATE_FAILED;
		CUresult t = d.cuCheckpointProcessGetRestoreThreadId
				     ? d.cuCheckpointProcessGetRestoreThreadId(atoi(argv[2]), &tid)
				     : CUDA_ERROR_NOT_FOUND;
		CUresult g = d.cuCheckpointProcessGetState ? d.cuCheckpointProcessGetState(atoi(argv[2]), &st)
							   : CUDA_ERROR_NOT_FOUND;
		printf("noinit_restore_tid %s\nnoinit_state %s %d\n", name_of(t), name_of(g), (int)st);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "info"))
		return info();
	if (argc >= 2 && !strcmp(argv[1], "resolvers"))
		return resolvers();
	if (argc >= 2 && !strcmp(argv[1], "noctx"))
		return noctx();
	if (argc >= 2 && !strcmp(argv[1], "handles"))
		return handles();
	if (argc >= 2 && !strcmp(argv[1], "ipc"))
		return ipc(argv[0]);
	if (argc >= 3 && !strcmp(argv[1], "ipc-open"))
		return ipc_open(argv[2]);
	if (argc >= 2 && !strcmp(argv[1], "initonly")) {
		printf("ready\n");
		fflush(stdout);
		sleep(argc >= 3 ? (unsigned)atoi(argv[2]) : 30);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "lockfail")) {
		/* The state a lock that failed leaves (CRIU's plugin reads it back). */
		int pid = atoi(argv[2]);
		CUcheckpointLockArgs la;
		memset(&la, 0, sizeof(la));
		la.timeoutMs = 1;
		CUprocessState st = CU_PROCESS_STATE_FAILED;
		CUresult l = d.cuCheckpointProcessLock ? d.cuCheckpointProcessLock(pid, &la) : CUDA_ERROR_NOT_FOUND;
		CUresult g = d.cuCheckpointProcessGetState ? d.cuCheckpointProcessGetState(pid, &st)
							   : CUDA_ERROR_NOT_FOUND;
		printf("lockfail_rc %s\nlockfail_state %s %d\n", name_of(l), name_of(g), (int)st);
		if (!g && st == CU_PROCESS_STATE_LOCKED && d.cuCheckpointProcessUnlock)
			d.cuCheckpointProcessUnlock(pid, NULL);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "tid")) {
		int tid = 0;
		CUresult r = d.cuCheckpointProcessGetRestoreThreadId
				     ? d.cuCheckpointProcessGetRestoreThreadId(atoi(argv[2]), &tid)
				     : CUDA_ERROR_NOT_FOUND;
		printf("restore_tid %s %d\n", name_of(r), tid);
		return 0;
	}
	fprintf(stderr, "usage: probe info|resolvers|noctx|handles|ipc|ipc-open HEX|initonly [S]|tid PID|noinit "
			"PID|lockfail PID\n");
	return 64;
}
