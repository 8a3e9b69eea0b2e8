/* SPDX-License-Identifier: MIT */
/* Every resolver path hands out the shim's wrappers, and allocations made
 * through each are tracked (seen by snapshot-cuda-vmm --inspect). */
#include <errno.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>

#include "shim_util.h"

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);

/* cudaGetDriverEntryPoint, cudaGetDriverEntryPointByVersion */
typedef int (*entry_fn)(const char *, void **, unsigned long long, int *);
typedef int (*entry_v_fn)(const char *, void **, unsigned int, unsigned long long, int *);

static void *shim_sym(const char *name)
{
	/* The preloaded shim comes first in the global scope. */
	return dlsym(RTLD_DEFAULT, name);
}

/* The path of the project's runtime, and the runtime opened privately. */
static const char *runtime_path(void)
{
	static char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/../../lib/libcudart.so.13", test_exe_dir());
	return path;
}

static void *runtime_open(void)
{
	void *rt = dlopen(runtime_path(), RTLD_NOW | RTLD_LOCAL);
	CHECK(rt != NULL);
	return rt;
}

/* Create through fn; the handle must be a tracked (logical) one. */
static CUmemGenericAllocationHandle create_with(create_fn fn, int dev)
{
	CUmemAllocationProp p = emu_prop(dev);
	CUmemGenericAllocationHandle h = 0;
	CHECK_CU(fn(&h, 2 * MiB, &p, 0));
	CHECK_EQ(h >> 48, 0x5ea1); /* a logical handle */
	return h;
}

/* How many tracked creators the CLI reports for this process. */
static int cli_creators(void)
{
	char out[PATH_MAX + 32], cli[PATH_MAX + 32], pid[16];
	snprintf(out, sizeof(out), "%s/inspect.json", shim_ctl);
	snprintf(cli, sizeof(cli), "%s/../../bin/snapshot-cuda-vmm", test_exe_dir());
	snprintf(pid, sizeof(pid), "%d", getpid());
	unlink(out);
	char *argv[] = {cli, "--inspect", "--json", "--proc-root", "", "--process", pid, pid, NULL};
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	pid_t c = fork();
	if (c == 0) {
		dup2(fd, 1);
		execv(cli, argv);
		dprintf(2, "cannot execute %s: %s\n", cli, strerror(errno));
		_exit(127);
	}
	close(fd);
	int status = test_wait_child(c, 10000);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[160];
		test_describe_status(status, 10000, why, sizeof(why));
		test_fail(__FILE__, __LINE__, "snapshot-cuda-vmm --inspect %s", why);
	}
	char *json = test_read_file(out);
	int n = 0;
	for (const char *p = json; p && (p = strstr(p, "\"role\":\"creator\"")); p++)
		n++;
	free(json);
	return n;
}

static void direct(void)
{
	CUmemGenericAllocationHandle h = create_with(cuMemCreate, 0);
	CHECK_EQ(cli_creators(), 1);
	CHECK_CU(cuMemRelease(h));
	CHECK_EQ(cli_creators(), 0);
}

static void dlsym_on_libcuda(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	CHECK(lib != NULL);
	create_fn c = (create_fn)dlsym(lib, "cuMemCreate");
	CHECK(c == (create_fn)shim_sym("cuMemCreate"));
	/* An unwrapped call is the driver's own function: no added cost. */
	void *sync = dlsym(lib, "cuCtxSynchronize");
	Dl_info info;
	CHECK(sync && dladdr(sync, &info) && strstr(info.dli_fname, "libcuda.so"));
	CUmemGenericAllocationHandle h = create_with(c, 1);
	CHECK_EQ(cli_creators(), 1);
	release_fn r = (release_fn)dlsym(lib, "cuMemRelease");
	CHECK_CU(r(h));
	dlclose(lib);
}

static void get_proc_address(void)
{
	int versions[] = {12000, 13000};
	for (int i = 0; i < 2; i++) {
		void *fn = NULL;
		CUdriverProcAddressQueryResult st;
		CHECK_CU(cuGetProcAddress("cuMemCreate", &fn, versions[i], 0, &st));
		CHECK(fn == shim_sym("cuMemCreate"));
		CUmemGenericAllocationHandle h = create_with((create_fn)fn, 0);
		CHECK_EQ(cli_creators(), 1);
		CHECK_CU(cuMemRelease(h));
		/* Unwrapped: the driver's pointer. */
		CHECK_CU(cuGetProcAddress("cuMemAddressReserve", &fn, versions[i], 0, &st));
		Dl_info info;
		CHECK(fn && dladdr(fn, &info) && strstr(info.dli_fname, "libcuda.so"));
	}
	/* The resolver itself resolves to the shim's, per ABI version. */
	void *gpa = NULL;
	CUdriverProcAddressQueryResult st;
	CHECK_CU(cuGetProcAddress("cuGetProcAddress", &gpa, 12000, 0, &st));
	CHECK(gpa == shim_sym("cuGetProcAddress_v2"));
	CHECK_CU(cuGetProcAddress("cuGetProcAddress", &gpa, 11030, 0, &st));
	CHECK(gpa == shim_sym("cuGetProcAddress"));
}

static void driver_entry_point(void)
{
	void *rt = runtime_open();
	if (!rt)
		return;
	entry_fn get = (entry_fn)dlsym(rt, "cudaGetDriverEntryPoint");
	entry_v_fn getv = (entry_v_fn)dlsym(rt, "cudaGetDriverEntryPointByVersion");
	CHECK(get == (entry_fn)shim_sym("cudaGetDriverEntryPoint"));
	void *fn = NULL;
	int st = -1;
	CHECK_EQ(get("cuMemCreate", &fn, 0, &st), 0);
	CHECK(fn == shim_sym("cuMemCreate"));
	CUmemGenericAllocationHandle h = create_with((create_fn)fn, 1);
	fn = NULL;
	CHECK_EQ(getv("cuMemRelease", &fn, 12080, 0, &st), 0);
	CHECK(fn == shim_sym("cuMemRelease"));
	CHECK_EQ(cli_creators(), 1);
	CHECK_CU(((release_fn)fn)(h));
	CHECK_EQ(cli_creators(), 0);
	dlclose(rt);
}

static void untracked_passes_through(void)
{
	/* Without the POSIX handle type an allocation is not tracked: a driver handle. */
	CUmemAllocationProp p = emu_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemCreate(&h, 2 * MiB, &p, 0));
	CHECK(h >> 48 != 0x5ea1);
	CHECK_EQ(cli_creators(), 0);
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
	CHECK_CU(cuMemMap(va, 2 * MiB, 0, h, 0));
	emu_unmap_free(va, 2 * MiB, h);
	CHECK_CU_EQ(cuMemRelease(0x1234), CUDA_ERROR_INVALID_VALUE);
}

/* The resolvers a program can reach a wrapper through: dlsym on libcuda,
 * cuGetProcAddress, and a libcudart's cudaGetDriverEntryPointByVersion. */
struct resolvers {
	void *lib, *rt;
	entry_v_fn getv;
};

static bool resolvers_open(struct resolvers *r)
{
	r->lib = dlopen("libcuda.so.1", RTLD_NOW);
	r->rt = runtime_open();
	r->getv = r->rt ? (entry_v_fn)dlsym(r->rt, "cudaGetDriverEntryPointByVersion") : NULL;
	CHECK(r->lib && r->rt && r->getv);
	return r->lib && r->rt && r->getv;
}

static void resolvers_close(struct resolvers *r)
{
	dlclose(r->rt);
	dlclose(r->lib);
}

/* Every entry of wrapped.def (the list itself, included) through every
 * resolver: dlsym and cuGetProcAddress at the version it names (with the
 * per-thread stream flag for a DRV_PTDS entry) hand out the shim's wrapper, and
 * a 12.8 runtime's cudaGetDriverEntryPointByVersion too where the entry is the
 * ABI it asks for (the newest of its name at 12080). */
static const struct wrapped_entry {
	const char *sym, *name;
	int since;
	bool ptds;
} wrapped[] = {
#define DRV(sym, name, since) {#sym, #name, since, false},
#define DRV_PTDS(sym, name, since) {#sym, #name, since, true},
#define RT(sym)
#define GATED(sym, name, since, params, args) {#sym, #name, since, false},
#define GATED_PTDS(sym, name, since, params, args) {#sym, #name, since, true},
#include "../../src/shim/wrapped.def"
#undef DRV
#undef RT
};
#define NWRAPPED (sizeof(wrapped) / sizeof(wrapped[0]))

static bool runtime_asks_for(const struct wrapped_entry *w)
{
	if (w->ptds || w->since > 12080)
		return false;
	for (size_t i = 0; i < NWRAPPED; i++)
		if (!wrapped[i].ptds && !strcmp(wrapped[i].name, w->name) && wrapped[i].since > w->since &&
		    wrapped[i].since <= 12080)
			return false;
	return true;
}

/* A name the driver itself lacks (cuemu has no memory pools nor arrays) is
 * absent through every resolver; never the driver's or a stale pointer. */
static void every_wrapped_resolves(void)
{
	struct resolvers r;
	if (!resolvers_open(&r))
		return;
	size_t runtime = 0, absent = 0;
	for (size_t i = 0; i < NWRAPPED; i++) {
		const struct wrapped_entry *w = &wrapped[i];
		void *want = shim_sym(w->sym), *fn = NULL;
		CUdriverProcAddressQueryResult st;
		cuuint64_t flags = w->ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
		void *by_dlsym = dlsym(r.lib, w->sym);
		CUresult rc = cuGetProcAddress(w->name, &fn, w->since, flags, &st);
		if (!by_dlsym && rc == CUDA_ERROR_NOT_FOUND && !fn) {
			absent++; /* not in this driver: not handed out */
			continue;
		}
		if (!want || by_dlsym != want)
			test_fail(__FILE__, __LINE__, "%s: dlsym does not give the shim's wrapper", w->sym);
		if (rc != CUDA_SUCCESS || fn != want)
			test_fail(__FILE__, __LINE__, "%s at %d%s: cuGetProcAddress does not give the shim's %s",
				  w->name, w->since, w->ptds ? " (per-thread stream)" : "", w->sym);
		if (!runtime_asks_for(w))
			continue;
		int rst = -1;
		fn = NULL;
		if (r.getv(w->name, &fn, 12080, 0, &rst) != 0 || fn != want)
			test_fail(__FILE__, __LINE__,
				  "%s: cudaGetDriverEntryPointByVersion does not give the shim's %s", w->name, w->sym);
		runtime++;
	}
	printf("     %zu wrapped entries: %zu through the runtime too, %zu not in this driver\n", NWRAPPED, runtime,
	       absent);
	CHECK(NWRAPPED - absent >= 28 && runtime >= 25);
	resolvers_close(&r);
}

/* A multicast object created through a resolved pointer is tracked;
 * cuMulticastGetGranularity is not wrapped. */
static void multicast_resolvers(void)
{
	struct resolvers r;
	if (!resolvers_open(&r))
		return;
	void *gran = NULL;
	CUdriverProcAddressQueryResult st;
	CHECK_CU(cuGetProcAddress("cuMulticastGetGranularity", &gran, 13000, 0, &st));
	Dl_info info;
	CHECK(gran && dladdr(gran, &info) && strstr(info.dli_fname, "libcuda.so"));
	/* Created through a resolved pointer: a logical, tracked handle. */
	void *fn = NULL;
	CHECK_CU(cuGetProcAddress("cuMulticastCreate", &fn, 12010, 0, &st));
	CUmulticastObjectProp p = {.numDevices = 1,
				   .size = 2 * MiB,
				   .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CUmemGenericAllocationHandle mc = 0;
	CHECK_CU(((CUresult(*)(CUmemGenericAllocationHandle *, const CUmulticastObjectProp *))fn)(&mc, &p));
	CHECK_EQ(mc >> 48, 0x5ea1);
	CHECK_EQ(cli_creators(), 1); /* the multicast record is its creator's */
	CHECK_CU(cuMemRelease(mc));
	CHECK_EQ(cli_creators(), 0);
	resolvers_close(&r);
}

/* The route cudaMalloc takes and legacy IPC: the first ABI of
 * cuIpcOpenMemHandle never gets the second's wrapper; memory from a resolved
 * cuMemAlloc is a tracked chunk. */
static void adapter_resolvers(void)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st;
	CHECK(cuGetProcAddress("cuIpcOpenMemHandle", &fn, 10000, 0, &st) != CUDA_SUCCESS ||
	      fn != shim_sym("cuIpcOpenMemHandle_v2"));
	CHECK_CU(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &st));
	CUdeviceptr p = 0;
	CHECK_CU(((CUresult(*)(CUdeviceptr *, size_t))fn)(&p, 4096));
	CHECK_EQ(cli_creators(), 1); /* the adapter's chunk */
	CHECK_CU(cuMemFree(p));
	CHECK_EQ(cli_creators(), 0);
}

/* The ABI and stream mode asked select the wrapper; ABIs the shim does not wrap
 * are refused; unwrapped calls that take allocation handles never see logical
 * ones. */
static void versions_and_flags(void)
{
	CUdriverProcAddressQueryResult st;
	/* Asked as static cudart asks: each name at the version of its ABI, stream
	 * calls with the per-thread flag. */
	static const struct {
		const char *name;
		int version;
		cuuint64_t flags;
		const char *want;
	} asks[] = {
		{"cuMemCreate", 10020, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemCreate"},
		{"cuMemCreate", 10020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemCreate"},
		{"cuMemRelease", 10020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemRelease"},
		{"cuMemMap", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemMap"},
		{"cuMemRetainAllocationHandle", 11000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemRetainAllocationHandle"},
		{"cuInit", 2000, CU_GET_PROC_ADDRESS_DEFAULT, "cuInit"},
		{"cuMulticastBindMem", 13000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMulticastBindMem"},
	};
	for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		void *fn = NULL;
		CHECK_CU(cuGetProcAddress(asks[i].name, &fn, asks[i].version, asks[i].flags, &st));
		if (fn != shim_sym(asks[i].want))
			test_fail(__FILE__, __LINE__, "%s at %d flags %llu: not the shim's wrapper", asks[i].name,
				  asks[i].version, (unsigned long long)asks[i].flags);
	}
	/* Created through a pointer asked at 10020 with the per-thread flag: tracked. */
	void *fn = NULL;
	CHECK_CU(cuGetProcAddress("cuMemCreate", &fn, 10020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	CUmemGenericAllocationHandle h = create_with((create_fn)fn, 0);
	CHECK_EQ(cli_creators(), 1);
	CHECK_CU(cuMemRelease(h));
	/* Too old an ABI: the driver's answer stands. */
	CHECK_CU_EQ(cuGetProcAddress("cuMemCreate", &fn, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	/* Bad flags: the driver's refusal stands. */
	CHECK_CU_EQ(cuGetProcAddress("cuMemCreate", &fn, 13000, 8, &st), CUDA_ERROR_INVALID_VALUE);
	/* CUDA 13.1's device-explicit binds are not wrapped: not handed out. */
	fn = (void *)1;
	CHECK_CU_EQ(cuGetProcAddress("cuMulticastBindMem", &fn, 13010, 0, &st), CUDA_ERROR_NOT_FOUND);
	CHECK(fn == NULL);
	CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	CHECK_CU_EQ(cuGetProcAddress("cuMulticastBindAddr", &fn, 13020, 0, &st), CUDA_ERROR_NOT_FOUND);
	/* The same through the runtime, without a version (its own, 13.0) and with. */
	void *rt = runtime_open();
	if (rt) {
		entry_fn get = (entry_fn)dlsym(rt, "cudaGetDriverEntryPoint");
		entry_v_fn getv = (entry_v_fn)dlsym(rt, "cudaGetDriverEntryPointByVersion");
		int rst = -1;
		fn = NULL;
		CHECK_EQ(get("cuMemMap", &fn, 2 /* cudaEnablePerThreadDefaultStream */, &rst), 0);
		CHECK(fn == shim_sym("cuMemMap"));
		CHECK_EQ(get("cuMulticastBindMem", &fn, 0, &rst), 0);
		CHECK(fn == shim_sym("cuMulticastBindMem"));
		/* (documented: success, a NULL pointer and the status say "not found") */
		fn = (void *)1;
		CHECK_EQ(getv("cuMulticastBindMem", &fn, 13010, 0, &rst), 0);
		CHECK(fn == NULL);
		CHECK_EQ(rst, 1 /* cudaDriverEntryPointSymbolNotFound */);
		dlclose(rt);
	}
	/* cuMemMapArrayAsync takes allocation handles: a logical one is refused
	 * before it can reach the driver; both stream ABIs. */
	CUmemAllocationProp p = emu_prop(0);
	CHECK_CU(cuMemCreate(&h, 2 * MiB, &p, 0));
	CUarrayMapInfo mi;
	memset(&mi, 0, sizeof(mi));
	mi.memHandleType = CU_MEM_HANDLE_TYPE_GENERIC;
	mi.memHandle.memHandle = h;
	/* (cuemu has no sparse arrays: the shim's symbols are called directly.) */
	typedef CUresult (*map_array_fn)(CUarrayMapInfo *, unsigned int, CUstream);
	static const char *const abis[] = {"cuMemMapArrayAsync", "cuMemMapArrayAsync_ptsz"};
	for (int i = 0; i < 2; i++) {
		map_array_fn map_array = (map_array_fn)shim_sym(abis[i]);
		CHECK(map_array != NULL);
		if (map_array)
			CHECK_CU_EQ(map_array(&mi, 1, 0), CUDA_ERROR_NOT_SUPPORTED);
	}
	CHECK_CU(cuMemRelease(h));
}

/* The span [*lo, *hi) of the mappings of the file at path, from /proc/self/maps. */
static void mapped_span(const char *path, uintptr_t *lo, uintptr_t *hi)
{
	char real[PATH_MAX], line[PATH_MAX + 128];
	*lo = UINTPTR_MAX, *hi = 0;
	FILE *f = fopen("/proc/self/maps", "re");
	CHECK(f != NULL && realpath(path, real) != NULL);
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		char *file = strchr(line, '/');
		if (!file || sscanf(line, "%lx-%lx", &a, &b) != 2)
			continue;
		file[strcspn(file, "\n")] = '\0';
		if (strcmp(file, real) == 0)
			*lo = a < *lo ? a : *lo, *hi = b > *hi ? b : *hi;
	}
	if (f)
		fclose(f);
}

static uintptr_t load_base(void *handle)
{
	struct link_map *map = NULL;
	CHECK_EQ(dlinfo(handle, RTLD_DI_LINKMAP, &map), 0);
	return map ? map->l_addr : 0;
}

/* A runtime closed and loaded again at another address: the shim's wrappers
 * reach the new one, through dlsym's pointers and through the runtime's own
 * call from cudaGetDriverEntryPoint to cudaGetDriverEntryPointByVersion (a
 * pointer noted of the first would be called unmapped). */
static void runtime_loaded_again(void)
{
	void *rt = runtime_open();
	if (!rt)
		return;
	entry_v_fn getv = (entry_v_fn)dlsym(rt, "cudaGetDriverEntryPointByVersion");
	void *fn = NULL;
	int st = -1;
	CHECK_EQ(getv("cuMemCreate", &fn, 12080, 0, &st), 0);
	uintptr_t lo, hi, first = load_base(rt);
	mapped_span(runtime_path(), &lo, &hi);
	CHECK(lo < hi);
	dlclose(rt);
	/* Where it was stays taken: the next load lands elsewhere. */
	void *hold = mmap((void *)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	CHECK(hold == (void *)lo);
	rt = runtime_open();
	if (rt) {
		CHECK(load_base(rt) != first);
		entry_fn get = (entry_fn)dlsym(rt, "cudaGetDriverEntryPoint");
		getv = (entry_v_fn)dlsym(rt, "cudaGetDriverEntryPointByVersion");
		fn = NULL;
		CHECK_EQ(getv("cuMemCreate", &fn, 12080, 0, &st), 0);
		CHECK(fn == shim_sym("cuMemCreate"));
		fn = NULL;
		CHECK_EQ(get("cuMemRelease", &fn, 0, &st), 0);
		CHECK(fn == shim_sym("cuMemRelease"));
		dlclose(rt);
	}
	if (hold != MAP_FAILED)
		munmap(hold, hi - lo);
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	CHECK_CU(emu_use_device(0));
	test_run("direct symbols", direct);
	test_run("dlsym on a dlopen(\"libcuda.so.1\") handle", dlsym_on_libcuda);
	test_run("cuGetProcAddress_v2 at CUDA 12.0 and 13.0", get_proc_address);
	test_run("cudaGetDriverEntryPoint(ByVersion) through a libcudart", driver_entry_point);
	test_run("untracked allocations and unknown handles pass through", untracked_passes_through);
	test_run("every wrapped.def entry through dlsym, cuGetProcAddress and the runtime", every_wrapped_resolves);
	test_run("a multicast object made through a resolved pointer is tracked", multicast_resolvers);
	test_run("cuMemAlloc and legacy IPC through the resolvers: the adapter's", adapter_resolvers);
	test_run("cuGetProcAddress by ABI version and stream flags", versions_and_flags);
	test_run("a runtime closed and loaded again elsewhere", runtime_loaded_again);
	return shim_done();
}
