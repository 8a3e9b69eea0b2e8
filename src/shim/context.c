/* SPDX-License-Identifier: MIT */
/* Contexts for the driver calls the shim makes on its own threads (serving
 * EXPORT, every lifecycle step): DESIGN.md §4.1. The shim enters the primary
 * context of the object's device, which it retains itself for the length of one
 * operation, so that a context the application may destroy meanwhile is never
 * made current. Objects without a device of their own (HOST_NUMA memory,
 * multicast objects) use the device of the context that was current when the
 * application created them, else device 0. */
#include "shim.h"

static __thread bool retained[PROTO_MAX_DEVICES];
static __thread CUcontext contexts[PROTO_MAX_DEVICES];
static __thread int current = -1;

CUresult ctx_enter_device(int dev)
{
	if (dev < 0 || dev >= PROTO_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!retained[dev]) {
		CUresult rc = aux.cuDevicePrimaryCtxRetain(&contexts[dev], dev);
		if (rc)
			return rc;
		retained[dev] = true;
	}
	if (current == dev)
		return CUDA_SUCCESS;
	CUresult rc = aux.cuCtxSetCurrent(contexts[dev]);
	current = rc == CUDA_SUCCESS ? dev : -1;
	return rc;
}

int ctx_device_of(const struct shim_alloc *a)
{
	if (!a->mc && a->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		return a->prop.location.id;
	return a->ctx_device >= 0 ? a->ctx_device : 0;
}

int ctx_by_device(const void *x, const void *y)
{
	int a = ctx_device_of(*(struct shim_alloc *const *)x), b = ctx_device_of(*(struct shim_alloc *const *)y);
	return (a > b) - (a < b);
}

int ctx_current_device(void)
{
	CUdevice dev = -1;
	CUcontext ctx = NULL;
	if (aux.cuCtxGetCurrent && aux.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && aux.cuCtxGetDevice &&
	    aux.cuCtxGetDevice(&dev) == CUDA_SUCCESS)
		return dev;
	return -1;
}

CUresult ctx_synchronize_devices(const bool *used, int n, int *failed_dev, const char **failed_call)
{
	for (int d = 0; d < n && d < PROTO_MAX_DEVICES; d++) {
		if (!used[d])
			continue;
		*failed_dev = d;
		*failed_call = "cuDevicePrimaryCtxRetain/cuCtxSetCurrent";
		CUresult rc = ctx_enter_device(d);
		if (rc)
			return rc;
		*failed_call = "cuCtxSynchronize";
		rc = aux.cuCtxSynchronize ? aux.cuCtxSynchronize() : CUDA_SUCCESS;
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

void ctx_leave_all(void)
{
	if (current >= 0)
		aux.cuCtxSetCurrent(NULL);
	current = -1;
	for (int d = 0; d < PROTO_MAX_DEVICES; d++) {
		if (retained[d])
			aux.cuDevicePrimaryCtxRelease_v2(d);
		retained[d] = false;
	}
}
