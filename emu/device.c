/* SPDX-License-Identifier: MIT */
/* Devices and contexts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

/* The older cuCtxCreate ABIs clients still ask for by version (NCCL: 11040);
 * cuda.h declares only the newest. */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
			CUdevice dev);

static CUresult check_dev(CUdevice dev)
{
	return dev >= 0 && dev < emu.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* An answer's place given, and a device that exists. */
static CUresult check_out_dev(const void *out, CUdevice dev)
{
	return out ? check_dev(dev) : CUDA_ERROR_INVALID_VALUE;
}

void emu_mark_cuda_process(void)
{
	if (!emu.has_context) {
		emu.has_context = true;
		emu_server_start();
		emu_job_join();
	}
}

static CUresult device_get(CUdevice *out, int ordinal)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= emu.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = ordinal;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	EMU_CALL(cuDeviceGet, device_get(device, ordinal));
}

EMU_ANSWER(cuDeviceGetCount, int, emu.ndev)

static CUresult device_name(char *name, int len, CUdevice dev)
{
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	/* Never to be mistaken for a GPU ("cuemu", or CUEMU_MODEL's name). */
	strncpy(name, emu.dev[dev].model, (size_t)len - 1);
	name[len - 1] = '\0';
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	EMU_CALL(cuDeviceGetName, device_name(name, len, dev));
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	CUresult rc = check_out_dev(uuid, dev);
	if (rc)
		return rc;
	*uuid = emu.dev[dev].uuid;
	return CUDA_SUCCESS;
}

/* The pre-11.4 ABI, still exported by the driver; cuda.h maps the name to _v2. */
#undef cuDeviceGetUuid
EMU_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
EMU_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	EMU_CALL(cuDeviceGetUuid, device_uuid(uuid, dev));
}

EMU_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	EMU_CALL(cuDeviceGetUuid_v2, device_uuid(uuid, dev));
}

static CUresult total_mem(size_t *bytes, CUdevice dev)
{
	CUresult rc = check_out_dev(bytes, dev);
	if (rc)
		return rc;
	*bytes = emu.dev[dev].capacity;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	EMU_CALL(cuDeviceTotalMem_v2, total_mem(bytes, dev));
}

static CUresult attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult rc = check_out_dev(pi, dev);
	if (rc)
		return rc;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: *pi = 0; break;
	case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = dev + 1; break; /* as cuDeviceGetPCIBusId says */
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = EMU_SHARED_PER_BLOCK; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = EMU_SHARED_OPTIN; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: *pi = 0; break;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
	default: *pi = 0; break;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	EMU_CALL(cuDeviceGetAttribute, attribute(pi, attrib, dev));
}

/* "0000:BB:00.0": domain 0, bus dev + 1 (CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), device 0. */
static CUresult pci_bus_id(char *out, int len, CUdevice dev)
{
	if (!out || len < 13)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	snprintf(out, (size_t)len, "%04x:%02x:%02x.0", 0, dev + 1, 0);
	return CUDA_SUCCESS;
}

/* The forms cuda.h names: [domain]:[bus]:[device].[function],
 * [domain]:[bus]:[device], [bus]:[device].[function], in hexadecimal. */
static CUresult by_pci_bus_id(CUdevice *out, const char *id)
{
	if (!out || !id)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned domain = 0, bus, device, function = 0;
	char tail;
	bool ok = sscanf(id, "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) == 4 ||
		  sscanf(id, "%x:%x:%x%c", &domain, &bus, &device, &tail) == 3;
	if (!ok) {
		domain = 0;
		ok = sscanf(id, "%x:%x.%x%c", &bus, &device, &function, &tail) == 3;
	}
	if (!ok || domain || device || function || bus < 1 || (int)bus > emu.ndev)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUdevice)(bus - 1);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	EMU_CALL(cuDeviceGetPCIBusId, pci_bus_id(pciBusId, len, dev));
}

EMU_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	EMU_CALL(cuDeviceGetByPCIBusId, by_pci_bus_id(dev, pciBusId));
}

static CUresult can_access_peer(int *can, CUdevice dev, CUdevice peer)
{
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (check_dev(dev) || check_dev(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	EMU_CALL(cuDeviceCanAccessPeer, can_access_peer(canAccessPeer, dev, peerDev));
}

/* ---- contexts ---- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = check_out_dev(pctx, dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&emu.lock);
	struct emu_device *d = &emu.dev[dev];
	if (!d->primary) {
		d->primary = calloc(1, sizeof(*d->primary));
		if (!d->primary) {
			pthread_mutex_unlock(&emu.lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		d->primary->device = dev;
		d->primary->primary = true;
	}
	d->primary->active = true;
	d->primary_refs++;
	emu_mark_cuda_process();
	*pctx = (CUcontext)d->primary;
	pthread_mutex_unlock(&emu.lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	EMU_CALL(cuDevicePrimaryCtxRetain, primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev)
{
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&emu.lock);
	struct emu_device *d = &emu.dev[dev];
	if (!d->primary_refs) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
	} else if (--d->primary_refs == 0) {
		/* The context object stays allocated: stale CUcontext values
		 * held by the application must not point at freed memory. */
		d->primary->active = false;
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	EMU_CALL(cuDevicePrimaryCtxRelease_v2, primary_release(dev));
}

static CUresult primary_reset(CUdevice dev)
{
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&emu.lock);
	struct emu_device *d = &emu.dev[dev];
	d->primary_refs = 0;
	if (d->primary)
		d->primary->active = false;
	pthread_mutex_unlock(&emu.lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	EMU_CALL(cuDevicePrimaryCtxReset_v2, primary_reset(dev));
}

static CUresult primary_state(CUdevice dev, unsigned *flags, int *active)
{
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = check_dev(dev);
	if (rc)
		return rc;
	pthread_mutex_lock(&emu.lock);
	*flags = 0;
	*active = emu.dev[dev].primary && emu.dev[dev].primary->active;
	pthread_mutex_unlock(&emu.lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	EMU_CALL(cuDevicePrimaryCtxGetState, primary_state(dev, flags, active));
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	(void)flags;
	CUresult rc = check_out_dev(pctx, dev);
	if (rc)
		return rc;
	struct emu_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->device = dev;
	c->active = true;
	pthread_mutex_lock(&emu.lock);
	emu_mark_cuda_process();
	pthread_mutex_unlock(&emu.lock);
	emu_current = c; /* cuCtxCreate makes the new context current */
	*pctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
	(void)params;
	EMU_CALL(cuCtxCreate_v4, ctx_create(pctx, flags, dev));
}

EMU_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	EMU_CALL(cuCtxCreate_v2, ctx_create(pctx, flags, dev));
}

/* Execution affinity (SM counts) is not modelled: a list given must be well formed. */
static CUresult ctx_create_affinity(CUcontext *pctx, const CUexecAffinityParam *params, int n, unsigned flags,
				    CUdevice dev)
{
	if (n < 0 || (n > 0 && !params))
		return CUDA_ERROR_INVALID_VALUE;
	return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
				CUdevice dev)
{
	EMU_CALL(cuCtxCreate_v3, ctx_create_affinity(pctx, paramsArray, numParams, flags, dev));
}

static CUresult ctx_destroy(CUcontext ctx)
{
	struct emu_ctx *c = (struct emu_ctx *)ctx;
	if (!c || c->primary || !c->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	emu_streams_sync_all();
	c->active = false; /* kept allocated: stale handles must fail, not crash */
	/* ... and listed, so that what stays allocated stays reachable. */
	static struct emu_ctx *destroyed;
	pthread_mutex_lock(&emu.lock);
	c->destroyed_next = destroyed;
	destroyed = c;
	pthread_mutex_unlock(&emu.lock);
	if (emu_current == c)
		emu_current = NULL;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	EMU_CALL(cuCtxDestroy_v2, ctx_destroy(ctx));
}

static CUresult ctx_set(CUcontext ctx)
{
	emu_current = (struct emu_ctx *)ctx;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	EMU_CALL(cuCtxSetCurrent, ctx_set(ctx));
}

EMU_ANSWER(cuCtxGetCurrent, CUcontext, (CUcontext)emu_current)

static CUresult ctx_device(CUdevice *dev)
{
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = emu_current->device;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetDevice(CUdevice *device)
{
	EMU_CALL(cuCtxGetDevice, ctx_device(device));
}

/* A short per-thread stack for push/pop; deeper nesting is refused. */
#define CTX_STACK 16
static __thread struct emu_ctx *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

static CUresult ctx_push(CUcontext ctx)
{
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = emu_current;
	emu_current = (struct emu_ctx *)ctx;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	EMU_CALL(cuCtxPushCurrent_v2, ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx)
{
	if (!emu_current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (pctx)
		*pctx = (CUcontext)emu_current;
	emu_current = ctx_depth ? ctx_stack[--ctx_depth] : NULL;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	EMU_CALL(cuCtxPopCurrent_v2, ctx_pop(pctx));
}

static CUresult ctx_sync(void)
{
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	emu_streams_sync_all();
	return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize(void)
{
	EMU_CALL(cuCtxSynchronize, ctx_sync());
}
