/* SPDX-License-Identifier: MIT */
/* Reaching the driver (dlopen + cuGetProcAddress_v2, every entry point by name
 * and version), errors and their names, versions, and the driver entry point
 * API the runtime hands to its clients. */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

struct rt_driver drv;

/* The mark of this runtime: cuemu hosts no other (it refuses cuInit beside a
 * libcudart that lacks it). */
RT_API const char cusnap_cudart_runtime[] = "cusnap CUDA runtime "
					    "13.0";

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cudaError_t init_error;
static PFN_cuGetProcAddress_v12000 get_proc;
static __thread cudaError_t last_error;

static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (lib)
		*(void **)&get_proc = dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc) {
		init_error = cudaErrorInsufficientDriver;
		return;
	}
	bool missing = false;
#define D(sym, name, ver)                                                                               \
	if (get_proc(#name, (void **)&drv.sym, ver, CU_GET_PROC_ADDRESS_DEFAULT, NULL) != CUDA_SUCCESS) \
		drv.sym = NULL, missing |= true;
#include "driver.def"
#undef D
	if (!drv.cuInit || !drv.cuDeviceGetCount || missing)
		fprintf(stderr, "cudart: the driver lacks entry points this runtime uses; those calls fail\n");
	if (!drv.cuInit) {
		init_error = cudaErrorInsufficientDriver;
		return;
	}
	CUresult rc = drv.cuInit(0);
	init_error = rc == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : rc ? cudaErrorInitializationError : cudaSuccess;
}

cudaError_t rt_init(void)
{
	pthread_once(&once, load);
	return init_error;
}

cudaError_t rt_init_for(const void *out)
{
	return rt_result(!out ? cudaErrorInvalidValue : rt_init());
}

cudaError_t rt_result(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		last_error = err;
	return err;
}

cudaError_t rt_cu(CUresult rc)
{
	return rt_result((cudaError_t)rc);
}

RT_API cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

RT_API cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
	return last_error;
}

static const char *const error_names[] = {
#define E(name) #name,
#include "cudart_errors.h"
#undef E
};
static const int error_values[] = {
#define E(name) name,
#include "cudart_errors.h"
#undef E
};

RT_API const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(error_values) / sizeof(error_values[0]); i++)
		if (error_values[i] == (int)error)
			return error_names[i];
	return "cudaErrorUnknown";
}

/* "cudaErrorInvalidValue" -> "invalid value": the name, in words. */
RT_API const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	static __thread char text[96];
	const char *name = cudaGetErrorName(error);
	if (error == cudaSuccess)
		return "no error";
	const char *p = strncmp(name, "cudaError", 9) == 0 ? name + 9 : name;
	size_t n = 0;
	for (; *p && n < sizeof(text) - 2; p++) {
		if (isupper((unsigned char)*p) && n)
			text[n++] = ' ';
		text[n++] = (char)tolower((unsigned char)*p);
	}
	text[n] = '\0';
	return text;
}

RT_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *version)
{
	if (!version)
		return rt_result(cudaErrorInvalidValue);
	*version = RT_VERSION;
	return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDriverGetVersion(int *version)
{
	if (!version)
		return rt_result(cudaErrorInvalidValue);
	pthread_once(&once, load);
	if (!drv.cuDriverGetVersion) {
		*version = 0; /* documented: 0 when no driver is installed */
		return cudaSuccess;
	}
	return rt_cu(drv.cuDriverGetVersion(version));
}

/* The runtime's flags (cudaEnableDefault 0, cudaEnableLegacyStream 1,
 * cudaEnablePerThreadDefaultStream 2) are the driver's; the query result too.
 * Without a version: this runtime's own. */
RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
							      unsigned int cudaVersion, unsigned long long flags,
							      enum cudaDriverEntryPointQueryResult *status)
{
	if (!symbol || !funcPtr || flags > cudaEnablePerThreadDefaultStream)
		return rt_result(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult rc = get_proc(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (status)
		*status = (enum cudaDriverEntryPointQueryResult)st;
	if (rc != CUDA_SUCCESS)
		*funcPtr = NULL;
	/* (an absent symbol is reported in status; the call itself succeeds) */
	return rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND ? cudaSuccess : rt_cu(rc);
}

RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
						     enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, RT_VERSION, flags, driverStatus);
}
