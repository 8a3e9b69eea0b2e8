/* A stand-in for libcudart's driver entry point API: enough for the shim's
 * resolver tests (the real libcudart needs a GPU driver to initialise). */
#include <dlfcn.h>

#include <cuda.h>

typedef int cudaError_t;

__attribute__((visibility("default"))) cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
										     unsigned int cudaVersion,
										     unsigned long long flags, int *status);
__attribute__((visibility("default"))) cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
									    unsigned long long flags, int *status);

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
					     unsigned long long flags, int *status)
{
	/* As the real runtime does: the driver's resolver, found through dlsym. */
	void *drv = dlopen("libcuda.so.1", RTLD_NOW);
	CUresult (*get)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
	if (drv)
		*(void **)&get = dlsym(drv, "cuGetProcAddress_v2");
	if (!get)
		return 34; /* cudaErrorStubLibrary */
	CUdriverProcAddressQueryResult st;
	CUresult rc = get(symbol, funcPtr, (int)cudaVersion, flags, &st);
	if (status)
		*status = (int)st;
	return rc == CUDA_SUCCESS ? 0 : 500; /* cudaErrorSymbolNotFound */
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, int *status)
{
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, 13000, flags, status);
}
