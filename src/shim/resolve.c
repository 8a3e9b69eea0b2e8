/* SPDX-License-Identifier: MIT */
/* Finding the real driver and runtime, and handing out wrappers through every
 * resolver a program may use: direct symbols, dlsym on libcuda/libcudart handles,
 * cuGetProcAddress(_v2) and cudaGetDriverEntryPoint(ByVersion)(_ptsz). Calls the
 * shim does not wrap get the driver's own pointer: zero added cost. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/log.h"
#include "shim.h"

struct shim_real real;
struct shim_aux aux;

/* The real dlsym, from glibc through dlvsym (our own dlsym shadows it). */
void *(*shim_real_dlsym)(void *, const char *);
/* Read by the dlsym trampoline: RTLD_NEXT goes straight to glibc. */
void *(*shim_dlsym_next)(void *, const char *);

/* What each wrapped symbol is, from wrapped.def. */
static const struct wrapped {
	const char *sym;  /* the exported symbol (what dlsym is asked) */
	const char *name; /* what cuGetProcAddress is asked */
	int since;        /* first CUDA version whose ABI of name this is */
	bool ptds;        /* the per-thread default stream variant */
	void *wrapper;
	bool runtime;
} wrapped[SHIM_FN_COUNT] = {
#define DRV(s, n, v) [SHIM_FN_##s] = {#s, #n, v, false, (void *)s, false},
#define DRV_PTDS(s, n, v) [SHIM_FN_##s] = {#s, #n, v, true, (void *)s, false},
#define RT(s) [SHIM_FN_##s] = {#s, #s, 0, false, (void *)s, true},
#define GATED(s, n, v, params, args) [SHIM_FN_##s] = {#s, #n, v, false, (void *)s, false},
#define GATED_PTDS(s, n, v, params, args) [SHIM_FN_##s] = {#s, #n, v, true, (void *)s, false},
#include "wrapped.def"
#undef DRV
#undef RT
};

/* Driver ABIs the shim does not wrap (wrapped.def UNWRAPPED). */
static const struct unwrapped {
	const char *sym, *name;
	int since;
} unwrapped[] = {
#define DRV(s, n, v)
#define RT(s)
#define GATED(s, n, v, params, args)
#define GATED_PTDS(s, n, v, params, args)
#define UNWRAPPED(s, n, v) {#s, #n, v},
#include "wrapped.def"
#undef DRV
#undef RT
};

/* SNAPSHOT_CUDA_VMM_TEST_NO_SUBSTITUTE=1: resolvers hand out the driver's own
 * pointers. A test-only mutation switch: the resolver tests must fail under it. */
static int no_substitute = -1;

static bool substitution_off(void)
{
	int v = __atomic_load_n(&no_substitute, __ATOMIC_RELAXED);
	if (v < 0) {
		const char *e = getenv("SNAPSHOT_CUDA_VMM_TEST_NO_SUBSTITUTE");
		v = e && *e == '1';
		__atomic_store_n(&no_substitute, v, __ATOMIC_RELAXED);
	}
	return v;
}

void *shim_wrapper_for(const char *name, int version, unsigned long long flags)
{
	if (!name || name[0] != 'c' || name[1] != 'u')
		return NULL;
	for (size_t i = 0; i < sizeof(unwrapped) / sizeof(unwrapped[0]); i++)
		if (version >= unwrapped[i].since && strcmp(unwrapped[i].name, name) == 0)
			return SHIM_REFUSED;
	/* The newest ABI of name not newer than version, of the stream mode asked
	 * (a call without a per-thread variant has one ABI for both modes). */
	bool ptds = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	const struct wrapped *best[2] = {NULL, NULL}; /* [0] legacy, [1] per-thread */
	for (int i = 0; i < SHIM_FN_COUNT; i++) {
		const struct wrapped *w = &wrapped[i];
		if (w->runtime || w->since > version || strcmp(w->name, name) != 0)
			continue;
		if (!best[w->ptds] || w->since > best[w->ptds]->since)
			best[w->ptds] = w;
	}
	const struct wrapped *w = ptds && best[1] ? best[1] : best[0];
	return w ? w->wrapper : NULL;
}

static void *real_ptr(enum shim_fn fn)
{
	void **slots = (void **)&real;
	return slots[fn];
}

static void set_real(enum shim_fn fn, void *p)
{
	void **slots = (void **)&real;
	__atomic_store_n(&slots[fn], p, __ATOMIC_RELEASE);
}

/* Lazily, without pthread_once: sanitizer runtimes intercept that and call
 * dlsym before they are ready. Racing callers store the same pointer. */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) static void find_dlsym(void)
{
	if (__atomic_load_n((void **)&shim_real_dlsym, __ATOMIC_ACQUIRE))
		return;
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n((void **)&shim_dlsym_next, p, __ATOMIC_RELEASE);
	__atomic_store_n((void **)&shim_real_dlsym, p, __ATOMIC_RELEASE);
}

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static bool driver_ok;

static void load_driver(void)
{
	find_dlsym();
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		LOG_AT(LOG_ERROR, "cannot load the CUDA driver (libcuda.so.1): %s", dlerror());
		return;
	}
	void *gpa = shim_real_dlsym(h, "cuGetProcAddress_v2");
	for (int i = 0; i < SHIM_FN_COUNT; i++) {
		if (wrapped[i].runtime)
			continue;
		void *p = shim_real_dlsym(h, wrapped[i].sym);
		if (!p && wrapped[i].ptds && gpa) {
			/* A driver that exports no per-thread symbols (cuemu) still hands
			 * the per-thread ABI out by name. */
			CUresult (*get)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = gpa;
			if (get(wrapped[i].name, &p, wrapped[i].since, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
				NULL) != CUDA_SUCCESS)
				p = NULL;
		}
		set_real((enum shim_fn)i, p);
	}
	driver_ok = real.cuMemCreate != NULL;
#define AUX(sym, required)                                                                                   \
	*(void **)&aux.sym = shim_real_dlsym(h, #sym);                                                       \
	if ((required) && !aux.sym) {                                                                        \
		LOG_AT(LOG_ERROR, "the CUDA driver has no %s: the shim cannot work (its calls fail)", #sym); \
		driver_ok = false;                                                                           \
	}
#include "aux.def"
#undef AUX
}

const char *shim_cu_name(CUresult r)
{
	const char *s = NULL;
	if (!aux.cuGetErrorName || aux.cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
		return "CUDA_ERROR_UNKNOWN_CODE";
	return s;
}

bool shim_resolve_driver(void)
{
	pthread_once(&driver_once, load_driver);
	return driver_ok;
}

/* The file name (without its directory) of the library that holds p, its
 * path in info->dli_fname; NULL when p is in none. */
static const char *library_of(const void *p, Dl_info *info)
{
	if (!p || !dladdr(p, info) || !info->dli_fname)
		return NULL;
	const char *base = strrchr(info->dli_fname, '/');
	return base ? base + 1 : info->dli_fname;
}

/* The library that holds p, when it is a libcudart: its handle (to dlclose), or NULL. */
static void *runtime_library_of(const void *p)
{
	Dl_info info;
	const char *base = library_of(p, &info);
	if (!base || strncmp(base, "libcudart.so", 12) != 0)
		return NULL;
	return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

/* sym as the libcudart that holds p defines it, or NULL. */
static void *runtime_sym_beside(const void *p, const char *sym)
{
	void *h = runtime_library_of(p);
	if (!h)
		return NULL;
	void *q = shim_real_dlsym(h, sym);
	dlclose(h);
	return q;
}

/* p is still sym of a mapped libcudart: a runtime that was closed (and perhaps
 * loaded again elsewhere) leaves what the shim noted of it pointing nowhere. */
static bool still_runtime_sym(void *p, const char *sym)
{
	return p && runtime_sym_beside(p, sym) == p;
}

/* The real runtime function fn for a call from caller: a libcudart's own calls
 * (cudaGetDriverEntryPoint reaches our cudaGetDriverEntryPointByVersion
 * through its PLT) go back to that library; others to the one the program
 * last looked fn up in through dlsym, while it is loaded, else the one after
 * the shim in the global scope. */
static void *resolve_runtime(enum shim_fn fn, const void *caller)
{
	const char *sym = wrapped[fn].sym;
	find_dlsym();
	void *p = runtime_sym_beside(caller, sym);
	if (p)
		return p;
	p = real_ptr(fn);
	if (still_runtime_sym(p, sym))
		return p;
	/* From here RTLD_NEXT means "after the shim": the program's libcudart. */
	p = shim_real_dlsym(RTLD_NEXT, sym);
	set_real(fn, p);
	return p;
}

/* What a resolver hands out for name (asked at version with flags) when the
 * driver answered *pfn with rc: the shim's wrapper of exactly that ABI, chosen by
 * name and version, never by comparing pointers (a driver may hand out internal
 * entry points). Returns the result to give the caller. */
static CUresult substitute(const char *name, int version, unsigned long long flags, void **pfn, CUresult rc)
{
	if (rc != CUDA_SUCCESS || !pfn || !*pfn || substitution_off())
		return rc;
	void *w = shim_wrapper_for(name, version, flags);
	if (w == SHIM_REFUSED) {
		LOG_AT(LOG_WARN, "%s at CUDA %d is an ABI the interposer does not wrap: answered CUDA_ERROR_NOT_FOUND",
		       name, version);
		*pfn = NULL;
		return CUDA_ERROR_NOT_FOUND;
	}
	if (w)
		*pfn = w;
	return rc;
}

static bool from_cuda_library(void *p)
{
	Dl_info info;
	const char *base = library_of(p, &info);
	return base && (strncmp(base, "libcuda.so", 10) == 0 || strncmp(base, "libcudart.so", 12) == 0);
}

/* Sanitizer runtimes call dlsym while they initialise, before any instrumented
 * code may run: the dlsym paths are never instrumented. */
#define NO_SANITIZE __attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined))

/* The real dlsym for the trampoline's RTLD_NEXT path (which may run before our
 * constructor). */
__attribute__((visibility("hidden"))) void *shim_dlsym_init(void);
NO_SANITIZE void *shim_dlsym_init(void)
{
	find_dlsym();
	return (void *)shim_dlsym_next;
}

/* dlsym for every handle but RTLD_NEXT (the trampoline below sends that one to
 * glibc untouched, so that glibc sees the caller's return address). */
__attribute__((visibility("hidden"))) void *shim_dlsym_impl(void *handle, const char *name);
NO_SANITIZE void *shim_dlsym_impl(void *handle, const char *name)
{
	find_dlsym();
	void *p = shim_real_dlsym(handle, name);
	if (!p || !name || name[0] != 'c' || name[1] != 'u' || handle == RTLD_DEFAULT)
		return p; /* RTLD_DEFAULT already finds our exported wrappers first */
	for (size_t i = 0; i < sizeof(unwrapped) / sizeof(unwrapped[0]); i++)
		if (strcmp(unwrapped[i].sym, name) == 0 && from_cuda_library(p))
			return NULL; /* an ABI the shim does not wrap: not handed out */
	for (int i = 0; i < SHIM_FN_COUNT; i++) {
		if (strcmp(wrapped[i].sym, name) != 0)
			continue;
		if (!from_cuda_library(p))
			return p;
		if (wrapped[i].runtime)
			set_real((enum shim_fn)i, p); /* perhaps a locally loaded cudart */
		return substitution_off() ? p : wrapped[i].wrapper;
	}
	return p;
}

#if defined(__x86_64__)
/* dlsym(RTLD_NEXT, ...) must reach glibc with the caller's return address, so
 * it is a tail jump; everything else goes through shim_dlsym_impl. */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"
	"	jne 2f\n"
	"	movq shim_dlsym_next(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jne 1f\n"
	"	pushq %rdi\n" /* first use: find glibc's dlsym, keeping the arguments */
	"	pushq %rsi\n"
	"	subq $8, %rsp\n"
	"	call shim_dlsym_init\n"
	"	addq $8, %rsp\n"
	"	popq %rsi\n"
	"	popq %rdi\n"
	"1:	jmp *%rax\n"
	"2:	jmp shim_dlsym_impl\n"
	".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT is resolved relative to the shim, which is preloaded
 * first: the same answer unless a later preload asks for its own symbols. */
SHIM_API void *dlsym(void *handle, const char *name)
{
	return shim_dlsym_impl(handle, name);
}
#endif

__attribute__((constructor)) static void shim_init_dlsym(void)
{
	find_dlsym();
}

/* ---- cuGetProcAddress ---- */

SHIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolStatus)
{
	if (!shim_resolve_driver() || !real.cuGetProcAddress_v2)
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	CUresult found = real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
	CUresult rc = substitute(symbol, cudaVersion, flags, pfn, found);
	if (rc != found && symbolStatus)
		*symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; /* refused by the shim */
	return rc;
}

SHIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	if (!shim_resolve_driver() || !real.cuGetProcAddress)
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	CUresult rc = real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
	return substitute(symbol, cudaVersion, flags, pfn, rc);
}

/* ---- cudaGetDriverEntryPoint (NCCL, PyTorch) ---- */

/* The CUDA version cudaGetDriverEntryPoint (without a version) resolves at: the
 * runtime's own (of the libcudart that holds entry), as the real libcudart does. */
static int runtime_version(const void *entry)
{
	cudaError_t (*get)(int *) = NULL;
	*(void **)&get = runtime_sym_beside(entry, "cudaRuntimeGetVersion");
	int v = 0;
	if (!get || get(&v) != cudaSuccess || v <= 0)
		v = CUDA_VERSION;
	return v;
}

/* cudaEnableDefault/LegacyStream/PerThreadDefaultStream are the driver's flag
 * values; the runtime passes them through. */
static cudaError_t runtime_substitute(const char *symbol, int version, unsigned long long flags, void **funcPtr,
				      cudaError_t rc, enum cudaDriverEntryPointQueryResult *driverStatus)
{
	if (rc != cudaSuccess || !funcPtr)
		return rc;
	if (substitute(symbol, version, flags, funcPtr, CUDA_SUCCESS) == CUDA_SUCCESS)
		return rc;
	if (driverStatus)
		*driverStatus = cudaDriverEntryPointSymbolNotFound;
	return cudaErrorSymbolNotFound;
}

/* r: the real fn, for version (which may name it). */
#define RUNTIME_CALL(fn, version, ...)                                                                           \
	do {                                                                                                     \
		__typeof__(&fn) r = (__typeof__(&fn))resolve_runtime(SHIM_FN_##fn, __builtin_return_address(0)); \
		if (!r)                                                                                          \
			return cudaErrorSharedObjectInitFailed;                                                  \
		cudaError_t rc = r(__VA_ARGS__);                                                                 \
		return runtime_substitute(symbol, version, flags, funcPtr, rc, driverStatus);                    \
	} while (0)

SHIM_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus)
{
	RUNTIME_CALL(cudaGetDriverEntryPoint, runtime_version((void *)r), symbol, funcPtr, flags, driverStatus);
}

SHIM_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
						  enum cudaDriverEntryPointQueryResult *driverStatus)
{
	RUNTIME_CALL(cudaGetDriverEntryPoint_ptsz, runtime_version((void *)r), symbol, funcPtr, flags, driverStatus);
}

SHIM_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						      unsigned long long flags,
						      enum cudaDriverEntryPointQueryResult *driverStatus)
{
	RUNTIME_CALL(cudaGetDriverEntryPointByVersion, (int)cudaVersion, symbol, funcPtr, cudaVersion, flags,
		     driverStatus);
}

SHIM_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
							   unsigned long long flags,
							   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	RUNTIME_CALL(cudaGetDriverEntryPointByVersion_ptsz, (int)cudaVersion, symbol, funcPtr, cudaVersion, flags,
		     driverStatus);
}
