/* SPDX-License-Identifier: MIT */
/* Memory: device memory (cudaMalloc is the driver's cuMemAlloc, so an
 * interposer that adapts cuMemAlloc sees the runtime's allocations too), copies
 * and sets (unified addressing: one driver copy for every direction), host
 * memory, legacy IPC, pointer attributes, memory pools and stream-ordered
 * allocation. */
#include <string.h>

#include "rt.h"

RT_API cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	CTX_FOR_OR_RETURN(devPtr);
	if (!size) {
		*devPtr = NULL; /* documented: a size of 0 gives NULL and success */
		return cudaSuccess;
	}
	CUdeviceptr p = 0;
	CUresult rc = drv.cuMemAlloc_v2(&p, size);
	*devPtr = rc ? NULL : (void *)(uintptr_t)p;
	return rt_cu(rc);
}

/* cudaFree(NULL) initialises the context, a well-known idiom. */
RT_API cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	CTX_OR_RETURN();
	return devPtr ? rt_cu(drv.cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr)) : cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	if ((unsigned)kind > cudaMemcpyDefault)
		return rt_result(cudaErrorInvalidMemcpyDirection);
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, count));
}

RT_API cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
					     cudaStream_t stream)
{
	if ((unsigned)kind > cudaMemcpyDefault)
		return rt_result(cudaErrorInvalidMemcpyDirection);
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, count, stream));
}

/* One copy after another, in stream order (the attributes only hint). */
RT_API cudaError_t CUDARTAPI cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes,
						  size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
						  size_t numAttrs, cudaStream_t stream)
{
	if (!count || !dsts || !srcs || !sizes || (numAttrs && (!attrs || !attrsIdxs)))
		return rt_result(cudaErrorInvalidValue);
	CTX_OR_RETURN();
	for (size_t i = 0; i < count; i++) {
		CUresult rc = drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dsts[i], (CUdeviceptr)(uintptr_t)srcs[i],
						sizes[i], stream);
		if (rc)
			return rt_cu(rc);
	}
	return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemsetD8_v2((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count));
}

RT_API cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemsetD8Async((CUdeviceptr)(uintptr_t)devPtr, (unsigned char)value, count, stream));
}

/* cudaHostAlloc's flags are cuMemHostAlloc's (cudaHostAllocMapped is DEVICEMAP...). */
RT_API cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemHostAlloc(pHost, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

RT_FORWARD(cudaFreeHost, void *, cuMemFreeHost)

RT_API cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemHostRegister_v2(ptr, size, flags));
}

RT_FORWARD(cudaHostUnregister, void *, cuMemHostUnregister)

RT_API cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	CTX_FOR_OR_RETURN(pDevice);
	CUdeviceptr d = 0;
	CUresult rc = drv.cuMemHostGetDevicePointer_v2(&d, pHost, flags);
	*pDevice = (void *)(uintptr_t)d;
	return rt_cu(rc);
}

/* cudaIpcMemHandle_t and CUipcMemHandle are the same 64 bytes. */
RT_API cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	CTX_FOR_OR_RETURN(handle);
	CUipcMemHandle h;
	CUresult rc = drv.cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)devPtr);
	if (!rc)
		memcpy(handle, &h, sizeof(h));
	return rt_cu(rc);
}

RT_API cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
	CTX_FOR_OR_RETURN(devPtr);
	CUipcMemHandle h;
	memcpy(&h, &handle, sizeof(h));
	CUdeviceptr p = 0;
	CUresult rc = drv.cuIpcOpenMemHandle_v2(&p, h, flags);
	*devPtr = (void *)(uintptr_t)p;
	return rt_cu(rc);
}

RT_API cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void *devPtr)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)devPtr));
}

/* Memory the driver does not know is unregistered host memory (documented:
 * cudaMemoryTypeUnregistered, success). */
RT_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	CTX_FOR_OR_RETURN(attributes);
	CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				       CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER};
	unsigned type = 0;
	int device = -2;
	CUdeviceptr dptr = 0;
	void *hptr = NULL;
	void *data[] = {&type, &device, &dptr, &hptr};
	CUresult rc = drv.cuPointerGetAttributes(4, which, data, (CUdeviceptr)(uintptr_t)ptr);
	memset(attributes, 0, sizeof(*attributes));
	if (rc || !type) {
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = rt_device();
		attributes->hostPointer = (void *)ptr;
		return rc == CUDA_SUCCESS || rc == CUDA_ERROR_INVALID_VALUE ? cudaSuccess : rt_cu(rc);
	}
	attributes->type = type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
	attributes->device = device >= 0 ? device : rt_device();
	attributes->devicePointer = (void *)(uintptr_t)dptr;
	attributes->hostPointer = hptr;
	return cudaSuccess;
}

/* ---- memory pools (cudaMemPoolProps and cudaMemPoolAttr are the driver's) ---- */

RT_API cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemPoolCreate((CUmemoryPool *)memPool, (const CUmemPoolProps *)poolProps));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemPoolDestroy((CUmemoryPool)memPool));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemPoolSetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemPoolGetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
						     cudaStream_t stream)
{
	CTX_FOR_OR_RETURN(ptr);
	CUdeviceptr p = 0;
	CUresult rc = drv.cuMemAllocFromPoolAsync(&p, size, (CUmemoryPool)memPool, stream);
	*ptr = (void *)(uintptr_t)p;
	return rt_cu(rc);
}

RT_API cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	CTX_FOR_OR_RETURN(devPtr);
	CUdeviceptr p = 0;
	CUresult rc = drv.cuMemAllocAsync(&p, size, hStream);
	*devPtr = (void *)(uintptr_t)p;
	return rt_cu(rc);
}

RT_API cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	CTX_OR_RETURN();
	return rt_cu(drv.cuMemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, hStream));
}
