/* SPDX-License-Identifier: MIT */
/* A stand-in for libcudart's driver entry point API: enough for the shim's
 * resolver tests (the real libcudart needs a GPU driver to initialise). It
 * reaches the driver as the real runtime does: dlopen("libcuda.so.1"), dlsym
 * "cuGetProcAddress_v2", then every name through that resolver. Without a
 * version, cudaGetDriverEntryPoint asks at the runtime's own CUDA version; the
 * runtime's flag values (cudaEnableDefault 0, cudaEnableLegacyStream 1,
 * cudaEnablePerThreadDefaultStream 2) are the driver's and pass through. */
#include <dlfcn.h>

#include <cuda.h>

typedef int cudaError_t;

#define FAKE_CUDART_VERSION 13000
#define API __attribute__((visibility("default")))

API cudaError_t cudaRuntimeGetVersion(int *version);
API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						 unsigned long long flags, int *status);
API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, int *status);

cudaError_t cudaRuntimeGetVersion(int *version)
{
	if (!version)
		return 1; /* cudaErrorInvalidValue */
	*version = FAKE_CUDART_VERSION;
	return 0;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
					     unsigned long long flags, int *status)
{
	if (flags > 2)
		return 1; /* cudaErrorInvalidValue */
	void *drv = dlopen("libcuda.so.1", RTLD_NOW);
	CUresult (*get)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
	if (drv)
		*(void **)&get = dlsym(drv, "cuGetProcAddress_v2");
	if (!get)
		return 34; /* cudaErrorStubLibrary */
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult rc = get(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (status)
		*status = (int)st;           /* cudaDriverEntryPointQueryResult has the driver's values */
	return rc == CUDA_SUCCESS ? 0 : 500; /* cudaErrorSymbolNotFound */
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, int *status)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, FAKE_CUDART_VERSION, flags, status);
}
