/* SPDX-License-Identifier: MIT */
/* Devices and contexts: the thread's device, primary contexts as the real
 * runtime uses them (retained once per device, made current on the calling
 * thread), attributes and properties, peers, PCI bus ids, limits. */
#include <pthread.h>
#include <string.h>

#include "rt.h"

#define RT_MAX_DEVICES 64

static __thread int thread_device; /* cudaSetDevice's (0 until set) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[RT_MAX_DEVICES]; /* retained once, kept for the process's life */

static cudaError_t primary_of(int dev, CUcontext *out)
{
	int n = 0;
	CUresult rc = drv.cuDeviceGetCount(&n);
	if (rc)
		return rt_cu(rc);
	if (dev < 0 || dev >= n || dev >= RT_MAX_DEVICES)
		return rt_result(cudaErrorInvalidDevice);
	pthread_mutex_lock(&mu);
	if (!primary[dev]) {
		CUdevice d;
		rc = drv.cuDeviceGet(&d, dev);
		if (!rc)
			rc = drv.cuDevicePrimaryCtxRetain(&primary[dev], d);
	}
	*out = primary[dev];
	pthread_mutex_unlock(&mu);
	return rt_cu(rc);
}

cudaError_t rt_context(void)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUcontext cur = NULL;
	drv.cuCtxGetCurrent(&cur);
	if (cur)
		return cudaSuccess; /* the application's, or ours from an earlier call */
	CUcontext ctx;
	if ((e = primary_of(thread_device, &ctx)))
		return e;
	return rt_cu(drv.cuCtxSetCurrent(ctx));
}

int rt_device(void)
{
	CUdevice d;
	return drv.cuCtxGetDevice && drv.cuCtxGetDevice(&d) == CUDA_SUCCESS ? (int)d : thread_device;
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	if (!count)
		return rt_result(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e) {
		*count = 0;
		return rt_result(e);
	}
	return rt_cu(drv.cuDeviceGetCount(count));
}

RT_API cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	cudaError_t e = rt_init();
	CUcontext ctx;
	if (e || (e = primary_of(device, &ctx)))
		return rt_result(e);
	thread_device = device;
	return rt_cu(drv.cuCtxSetCurrent(ctx));
}

RT_API cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	cudaError_t e = rt_init_for(device);
	if (e)
		return e;
	*device = rt_device();
	return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	cudaError_t e = rt_context();
	return e ? e : rt_cu(drv.cuCtxSynchronize());
}

/* cudaDeviceAttr values are CUdevice_attribute's. */
RT_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUdevice d;
	CUresult rc = drv.cuDeviceGet(&d, device);
	return rt_cu(rc ? rc : drv.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, d));
}

static int attr(CUdevice d, CUdevice_attribute a)
{
	int v = 0;
	drv.cuDeviceGetAttribute(&v, a, d);
	return v;
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	cudaError_t e = rt_init_for(prop);
	if (e)
		return e;
	CUdevice d;
	CUresult rc = drv.cuDeviceGet(&d, device);
	if (rc)
		return rt_cu(rc == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_INVALID_DEVICE : rc);
	memset(prop, 0, sizeof(*prop));
	drv.cuDeviceGetName(prop->name, sizeof(prop->name), d);
	drv.cuDeviceGetUuid_v2((CUuuid *)&prop->uuid, d);
	drv.cuDeviceTotalMem_v2(&prop->totalGlobalMem, d);
	prop->sharedMemPerBlock = (size_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
	prop->sharedMemPerBlockOptin = (size_t)attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
	prop->regsPerBlock = attr(d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
	prop->warpSize = attr(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
	prop->maxThreadsPerBlock = attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
	prop->major = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	prop->minor = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
	prop->multiProcessorCount = attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
	prop->canMapHostMemory = attr(d, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
	prop->pciBusID = attr(d, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
	prop->pciDeviceID = attr(d, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
	prop->pciDomainID = attr(d, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
	prop->unifiedAddressing = attr(d, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
	prop->memoryPoolsSupported = attr(d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
	prop->hostNativeAtomicSupported = attr(d, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED);
	prop->gpuDirectRDMASupported = attr(d, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED);
	for (int i = 0; i < 3; i++) {
		prop->maxThreadsDim[i] = attr(d, (CUdevice_attribute)(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i));
		prop->maxGridSize[i] = attr(d, (CUdevice_attribute)(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i));
	}
	return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUdevice a, b;
	CUresult rc = drv.cuDeviceGet(&a, device);
	if (!rc)
		rc = drv.cuDeviceGet(&b, peerDevice);
	return rt_cu(rc ? CUDA_ERROR_INVALID_DEVICE : drv.cuDeviceCanAccessPeer(canAccessPeer, a, b));
}

/* Peer access from the current device's context to the peer's primary context. */
static cudaError_t peer_access(int peer, unsigned flags, bool enable)
{
	cudaError_t e = rt_context();
	CUcontext ctx;
	if (e || (e = primary_of(peer, &ctx)))
		return e;
	return rt_cu(enable ? drv.cuCtxEnablePeerAccess(ctx, flags) : drv.cuCtxDisablePeerAccess(ctx));
}

RT_API cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	return peer_access(peerDevice, flags, true);
}

RT_API cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice)
{
	return peer_access(peerDevice, 0, false);
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUdevice d;
	CUresult rc = drv.cuDeviceGet(&d, device);
	return rt_cu(rc ? CUDA_ERROR_INVALID_DEVICE : drv.cuDeviceGetPCIBusId(pciBusId, len, d));
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
	cudaError_t e = rt_init();
	if (e)
		return rt_result(e);
	CUdevice d;
	CUresult rc = drv.cuDeviceGetByPCIBusId(&d, pciBusId);
	if (!rc && device)
		*device = (int)d;
	return rt_cu(rc ? rc : device ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

RT_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total)
{
	cudaError_t e = rt_context();
	return e ? e : rt_cu(drv.cuMemGetInfo_v2(free, total));
}

/* Limits are accepted and remembered (the emulator has no stack or heap to size). */
static size_t limits[cudaLimitPersistingL2CacheSize + 1];

RT_API cudaError_t CUDARTAPI cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
	if ((unsigned)limit > cudaLimitPersistingL2CacheSize)
		return rt_result(cudaErrorUnsupportedLimit);
	cudaError_t e = rt_context();
	if (e)
		return e;
	pthread_mutex_lock(&mu);
	limits[limit] = value;
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
	if (!pValue || (unsigned)limit > cudaLimitPersistingL2CacheSize)
		return rt_result(cudaErrorUnsupportedLimit);
	pthread_mutex_lock(&mu);
	*pValue = limits[limit];
	pthread_mutex_unlock(&mu);
	return cudaSuccess;
}
