/* SPDX-License-Identifier: MIT */
/* Kernels: the registration entry points nvcc's host stubs call (declared in
 * the toolkit's crt/host_runtime.h and crt/device_functions.h), the call
 * configuration of <<<...>>>, launches, and function attributes. A registered
 * fat binary is loaded as a driver library (context-independent) when one of
 * its kernels is first asked for; a kernel is launched in the current context. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <fatbinary_section.h>

#include "cusnap/hmap.h"
#include "rt.h"

/* What crt/host_runtime.h and crt/device_functions.h declare (C++ only there). */
RT_API void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
RT_API void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
RT_API void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
RT_API void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
					     const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
					     dim3 *bDim, dim3 *gDim, int *wSize);
RT_API void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
					const char *deviceName, int ext, size_t size, int constant, int global);
RT_API void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
					       const char *deviceName, int ext, size_t size, int constant, int global);
RT_API char CUDARTAPI __cudaInitModule(void **fatCubinHandle);
RT_API unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
						      struct CUstream_st *stream);
RT_API cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
RT_API cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
RT_API cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
						size_t sharedMem, cudaStream_t stream);
RT_API cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
						     size_t sharedMem, cudaStream_t stream);

struct rt_module {
	const __fatBinC_Wrapper_t *wrapper;
	CUlibrary lib; /* loaded when a kernel of it is first needed */
	bool unloaded;
};

struct rt_kernel {
	struct rt_module *mod;
	char *name;      /* the device function's (mangled) name */
	CUkernel kernel; /* looked up when first needed */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hmap kernels; /* host stub -> struct rt_kernel */

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
	struct rt_module *m = calloc(1, sizeof(*m));
	if (!m)
		abort(); /* a static initialiser cannot report it: as the real runtime would */
	m->wrapper = fatCubin;
	return (void **)m;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	(void)fatCubinHandle; /* loaded lazily, as CUDA_MODULE_LOADING=LAZY does */
}

void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct rt_module *m = (struct rt_module *)fatCubinHandle;
	pthread_mutex_lock(&mu);
	if (m->lib && drv.cuLibraryUnload)
		drv.cuLibraryUnload(m->lib);
	m->lib = NULL;
	m->unloaded = true; /* (its kernels' entries stay: they are never looked up again at exit) */
	pthread_mutex_unlock(&mu);
}

void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
				      const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
				      dim3 *gDim, int *wSize)
{
	(void)deviceName, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
	struct rt_kernel *k = calloc(1, sizeof(*k));
	if (!k || !(k->name = strdup(deviceFun)))
		abort();
	k->mod = (struct rt_module *)fatCubinHandle;
	pthread_mutex_lock(&mu);
	if (hmap_put(&kernels, (uint64_t)(uintptr_t)hostFun, k) < 0)
		abort();
	pthread_mutex_unlock(&mu);
}

/* Device variables: cuemu runs no device code, so none is ever read; the
 * registration is accepted (cudaMemcpyToSymbol is not provided). */
void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName,
				 int ext, size_t size, int constant, int global)
{
	(void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size;
	(void)constant, (void)global;
}

void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
					const char *deviceName, int ext, size_t size, int constant, int global)
{
	(void)fatCubinHandle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName, (void)ext, (void)size;
	(void)constant, (void)global;
}

char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
	(void)fatCubinHandle;
	return 1;
}

/* The driver kernel of host stub host_fun (its library loaded first). */
static cudaError_t kernel_of(const void *host_fun, CUkernel *out)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	pthread_mutex_lock(&mu);
	struct rt_kernel *k = hmap_get(&kernels, (uint64_t)(uintptr_t)host_fun);
	CUresult rc = !k || k->mod->unloaded ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
	if (!rc && !k->mod->lib) {
		const void *image = k->mod->wrapper->magic == FATBINC_MAGIC ? (const void *)k->mod->wrapper->data
									    : (const void *)k->mod->wrapper;
		rc = drv.cuLibraryLoadData(&k->mod->lib, image, NULL, NULL, 0, NULL, NULL, 0);
	}
	if (!rc && !k->kernel)
		rc = drv.cuLibraryGetKernel(&k->kernel, k->mod->lib, k->name);
	if (!rc)
		*out = k->kernel;
	pthread_mutex_unlock(&mu);
	/* (a host pointer that is no registered kernel: cudaErrorInvalidDeviceFunction) */
	return rc == CUDA_ERROR_INVALID_HANDLE ? rt_result(cudaErrorInvalidDeviceFunction) : rt_cu(rc);
}

cudaError_t rt_function(const void *host_fun, CUfunction *out, CUkernel *kernel)
{
	CUkernel k;
	cudaError_t e = kernel_of(host_fun, &k);
	if (!e)
		e = rt_context();
	if (!e && out)
		e = rt_cu(drv.cuKernelGetFunction(out, k));
	if (!e && kernel)
		*kernel = k;
	return e;
}

/* ---- <<<...>>> ---- */

struct config {
	dim3 grid, block;
	size_t shared;
	cudaStream_t stream;
};
#define CONFIG_DEPTH 16 /* nested launches in argument expressions */
static __thread struct config configs[CONFIG_DEPTH];
static __thread unsigned nconfigs;

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					       struct CUstream_st *stream)
{
	if (nconfigs == CONFIG_DEPTH)
		return 1; /* (the stub then launches nothing) */
	configs[nconfigs++] = (struct config){gridDim, blockDim, sharedMem, stream};
	return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	if (!nconfigs)
		return rt_result(cudaErrorMissingConfiguration);
	struct config c = configs[--nconfigs];
	*gridDim = c.grid;
	*blockDim = c.block;
	*sharedMem = c.shared;
	*(cudaStream_t *)stream = c.stream;
	return cudaSuccess;
}

cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	if (!kernel)
		return rt_result(cudaErrorInvalidValue);
	return kernel_of(hostFun, (CUkernel *)kernel);
}

/* A kernel (CUkernel) launches in the current context as a function does. */
static cudaError_t launch(CUfunction f, dim3 g, dim3 b, void **args, size_t shared, cudaStream_t stream)
{
	cudaError_t e = rt_context();
	if (e)
		return e;
	return rt_cu(drv.cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)shared, stream, args, NULL));
}

cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	return launch((CUfunction)(void *)kernel, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					      size_t sharedMem, cudaStream_t stream)
{
	return launch((CUfunction)(void *)kernel, gridDim, blockDim, args, sharedMem,
		      stream ? stream : cudaStreamPerThread);
}

RT_API cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					      size_t sharedMem, cudaStream_t stream)
{
	CUfunction f;
	cudaError_t e = rt_function(func, &f, NULL);
	return e ? e : launch(f, gridDim, blockDim, args, sharedMem, stream);
}

/* The driver function of func for a call that answers into out
 * (cudaErrorInvalidValue without it). */
static cudaError_t function_for(const void *out, const void *func, CUfunction *f)
{
	return out ? rt_function(func, f, NULL) : rt_result(cudaErrorInvalidValue);
}

/* cudaLaunchConfig_t's attributes are CUlaunchAttribute's (same ids, same layout). */
RT_API cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	CUfunction f;
	cudaError_t e = function_for(config, func, &f);
	if (e)
		return e;
	CUlaunchConfig c = {.gridDimX = config->gridDim.x,
			    .gridDimY = config->gridDim.y,
			    .gridDimZ = config->gridDim.z,
			    .blockDimX = config->blockDim.x,
			    .blockDimY = config->blockDim.y,
			    .blockDimZ = config->blockDim.z,
			    .sharedMemBytes = (unsigned)config->dynamicSmemBytes,
			    .hStream = config->stream,
			    .attrs = (CUlaunchAttribute *)config->attrs,
			    .numAttrs = config->numAttrs};
	return rt_cu(drv.cuLaunchKernelEx(&c, f, args, NULL));
}

RT_API cudaError_t CUDARTAPI cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
	if (!functionPtr)
		return rt_result(cudaErrorInvalidValue);
	return rt_function(symbolPtr, (CUfunction *)functionPtr, NULL);
}

RT_API cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	CUfunction f;
	cudaError_t e = function_for(attr, func, &f);
	if (e)
		return e;
	memset(attr, 0, sizeof(*attr));
	int v;
	struct {
		CUfunction_attribute a;
		void *out;
		bool size;
	} map[] = {
		{CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &attr->sharedSizeBytes, true},
		{CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &attr->constSizeBytes, true},
		{CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &attr->localSizeBytes, true},
		{CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &attr->maxThreadsPerBlock, false},
		{CU_FUNC_ATTRIBUTE_NUM_REGS, &attr->numRegs, false},
		{CU_FUNC_ATTRIBUTE_PTX_VERSION, &attr->ptxVersion, false},
		{CU_FUNC_ATTRIBUTE_BINARY_VERSION, &attr->binaryVersion, false},
		{CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, &attr->cacheModeCA, false},
		{CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &attr->maxDynamicSharedSizeBytes, false},
		{CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, &attr->preferredShmemCarveout, false},
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		CUresult rc = drv.cuFuncGetAttribute(&v, map[i].a, f);
		if (rc)
			return rt_cu(rc);
		if (map[i].size)
			*(size_t *)map[i].out = (size_t)v;
		else
			*(int *)map[i].out = v;
	}
	return cudaSuccess;
}

/* Set on the kernel for the current device (cudaFuncAttribute values are the
 * driver's CUfunction_attribute values). */
RT_API cudaError_t CUDARTAPI cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	CUkernel k;
	cudaError_t e = rt_function(func, NULL, &k);
	if (e)
		return e;
	return rt_cu(drv.cuKernelSetAttribute((CUfunction_attribute)attr, value, k, rt_device()));
}
