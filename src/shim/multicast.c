/* SPDX-License-Identifier: MIT */
/* The wrapped multicast calls (DESIGN.md §8). A multicast object the
 * application creates, or imports through a capability, is a record of the
 * allocation table with a shim_mc part: the application holds logical handles
 * to it, and the record keeps what a rebuild replays: the properties asked for,
 * the devices this process added, its binds, and (as for memory) its mappings
 * and their access.
 *
 * Multicast handles the shim does not track (imported from a raw FD) are only
 * noticed when used; QUIESCE refuses while any is held, since a native
 * checkpoint would hang on it. */
#include <stdlib.h>

#include "cusnap/log.h"
#include "shim.h"

size_t mc_granularity(const CUmulticastObjectProp *prop)
{
	size_t g = 0;
	if (!aux.cuMulticastGetGranularity ||
	    aux.cuMulticastGetGranularity(&g, prop, CU_MULTICAST_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		g = 0;
	return g;
}

struct shim_mc *mc_record_new(unsigned num_devices, size_t size)
{
	struct shim_mc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return NULL;
	mc->prop.numDevices = num_devices;
	mc->prop.size = size;
	mc->prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return mc;
}

/* The multicast record behind a logical handle, or NULL. Caller holds tbl.lock. */
static struct shim_alloc *mc_of(CUmemGenericAllocationHandle handle)
{
	struct shim_handle *h = tbl_handle_get(handle);
	return h && h->alloc->mc ? h->alloc : NULL;
}

/* A raw multicast handle the driver accepted: noted (once) so that QUIESCE refuses. */
static void note_untracked(CUmemGenericAllocationHandle handle)
{
	pthread_mutex_lock(&tbl.lock);
	if (!unrestorable_has(UNRESTORABLE_MULTICAST, handle))
		unrestorable_add(UNRESTORABLE_MULTICAST, handle);
	pthread_mutex_unlock(&tbl.lock);
}

static CUresult cuMulticastCreate_once(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	if (!mcHandle || !prop)
		return real.cuMulticastCreate(mcHandle, prop);
	/* Every multicast object is tracked: a native checkpoint hangs on any. */
	const struct shim_identity *me;
	CUresult rc = tracking_begin("cuMulticastCreate", &me);
	if (rc)
		return rc;
	struct shim_mc *mc = mc_record_new(prop->numDevices, prop->size);
	if (!mc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mc->prop = *prop;
	size_t granularity = mc_granularity(prop);
	CUmemGenericAllocationHandle drv = 0;
	pthread_mutex_lock(&tbl.lock);
	rc = shim_mutation_allowed("cuMulticastCreate"); /* (a step may have begun since the gate) */
	if (rc) {
		pthread_mutex_unlock(&tbl.lock);
		free(mc);
		return rc;
	}
	rc = real.cuMulticastCreate(&drv, prop);
	if (rc == CUDA_SUCCESS) {
		struct shim_alloc *a = track_created(me, drv, prop->size, mcHandle);
		if (!a) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			a->granularity = granularity;
			a->mc = mc;
			mc = NULL;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	free(mc);
	return rc;
}

SHIM_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop)
{
	SHIM_GATED(cuMulticastCreate_once(mcHandle, prop));
}

static CUresult cuMulticastAddDevice_once(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
	struct shim_handle *h;
	CUresult rc = tbl_lock_tracked("cuMulticastAddDevice", mcHandle, true, &h);
	if (rc || !h) {
		if (!rc && (rc = real.cuMulticastAddDevice(mcHandle, dev)) == CUDA_SUCCESS)
			note_untracked(mcHandle);
		return rc;
	}
	struct shim_alloc *a = h->alloc;
	struct shim_mc *mc = a->mc;
	rc = tracked_call_allowed("cuMulticastAddDevice");
	CUdevice *grown = rc ? NULL : realloc(mc->added, (mc->nadded + 1) * sizeof(*grown));
	if (!rc && !grown)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (grown)
		mc->added = grown;
	if (!rc)
		rc = real.cuMulticastAddDevice(a->driver, dev);
	if (!rc)
		mc->added[mc->nadded++] = dev;
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
	SHIM_GATED(cuMulticastAddDevice_once(mcHandle, dev));
}

/* The device of memory the shim does not track, from the driver. */
static CUdevice untracked_device(CUmemGenericAllocationHandle mem, CUdeviceptr va)
{
	CUmemAllocationProp p = {0};
	CUmemGenericAllocationHandle h = mem;
	if (va && real.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)va) != CUDA_SUCCESS)
		return -1;
	CUresult rc = real.cuMemGetAllocationPropertiesFromHandle(&p, h);
	if (va)
		real.cuMemRelease(h);
	return rc == CUDA_SUCCESS ? p.location.id : -1;
}

/* A bind of member memory named by handle (BindMem, va 0) or by address
 * (BindAddr). The driver call runs without the table lock: it waits until
 * every device of the team was added, which other threads and processes do. */
static CUresult bind(const char *call, CUmemGenericAllocationHandle mcHandle, size_t mc_offset,
		     CUmemGenericAllocationHandle mem, CUdeviceptr va, size_t mem_offset, size_t size,
		     unsigned long long flags)
{
	pthread_mutex_lock(&tbl.lock);
	struct shim_alloc *a = mc_of(mcHandle);
	struct shim_alloc *member = NULL;
	if (va) {
		struct shim_mapping *m = tbl_mapping_at(va);
		if (m && va + size <= m->node.end && !m->alloc->mc) {
			member = m->alloc;
			mem_offset = m->offset + (va - m->node.start);
		}
	} else {
		struct shim_handle *h = tbl_handle_get(mem);
		member = h && !h->alloc->mc ? h->alloc : NULL;
	}
	uint64_t mc_key = a ? a->key : 0, member_key = member ? member->key : 0;
	CUmemGenericAllocationHandle mc_drv = a ? a->driver : mcHandle;
	CUmemGenericAllocationHandle mem_drv = member && !va ? member->driver : mem;
	CUdevice device = member ? member->prop.location.id : -1;
	CUresult rc = a ? CUDA_SUCCESS : tbl_refuse_tagged(call, mcHandle);
	if (!rc && !va && !member)
		rc = tbl_refuse_tagged(call, mem);
	if (!rc && (a || member))
		rc = tracked_call_allowed(call);
	pthread_mutex_unlock(&tbl.lock);
	if (rc)
		return rc;
	if (a && !member)
		device = untracked_device(mem, va);
	rc = va ? real.cuMulticastBindAddr(mc_drv, mc_offset, va, size, flags)
		: real.cuMulticastBindMem(mc_drv, mc_offset, mem_drv, mem_offset, size, flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!a) {
		note_untracked(mcHandle);
		return rc;
	}
	pthread_mutex_lock(&tbl.lock);
	a = hmap_get(&tbl.allocs, mc_key);
	member = member_key ? hmap_get(&tbl.allocs, member_key) : NULL;
	struct shim_mc_bind *grown = a ? realloc(a->mc->binds, (a->mc->nbinds + 1) * sizeof(*grown)) : NULL;
	if (!grown) {
		/* Released meanwhile (nothing to record), or no memory to record it: undo. */
		if (a) {
			real.cuMulticastUnbind(mc_drv, device, mc_offset, size);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
	} else {
		struct shim_mc *mc = a->mc;
		mc->binds = grown;
		mc->binds[mc->nbinds++] = (struct shim_mc_bind){
			.mc_offset = mc_offset,
			.size = size,
			.device = device,
			.member = member,
			.member_offset = mem_offset,
			.member_va = va,
		};
		if (mc_offset + size > mc->used)
			mc->used = mc_offset + size;
		if (member) {
			member->mc_binds++;
			member->shared = true; /* a multicast member is shared memory */
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

static CUresult cuMulticastBindMem_once(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
					CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
					unsigned long long flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	return bind("cuMulticastBindMem", mcHandle, mcOffset, memHandle, 0, memOffset, size, flags);
}

SHIM_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
				     CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
				     unsigned long long flags)
{
	SHIM_GATED(cuMulticastBindMem_once(mcHandle, mcOffset, memHandle, memOffset, size, flags));
}

static CUresult cuMulticastBindAddr_once(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
					 size_t size, unsigned long long flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	if (!memptr)
		return real.cuMulticastBindAddr(mcHandle, mcOffset, memptr, size, flags);
	return bind("cuMulticastBindAddr", mcHandle, mcOffset, 0, memptr, 0, size, flags);
}

SHIM_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
				      size_t size, unsigned long long flags)
{
	SHIM_GATED(cuMulticastBindAddr_once(mcHandle, mcOffset, memptr, size, flags));
}

static CUresult cuMulticastUnbind_once(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
				       size_t size)
{
	struct shim_handle *h;
	CUresult rc = tbl_lock_tracked("cuMulticastUnbind", mcHandle, true, &h);
	if (rc || !h)
		return rc ? rc : real.cuMulticastUnbind(mcHandle, dev, mcOffset, size);
	struct shim_alloc *a = h->alloc;
	rc = tracked_call_allowed("cuMulticastUnbind");
	if (!rc)
		rc = real.cuMulticastUnbind(a->driver, dev, mcOffset, size);
	struct shim_mc *mc = a->mc;
	for (size_t i = 0; !rc && i < mc->nbinds;) {
		struct shim_mc_bind *b = &mc->binds[i];
		if (b->device != dev || b->mc_offset >= mcOffset + size || mcOffset >= b->mc_offset + b->size) {
			i++;
			continue;
		}
		struct shim_alloc *member = b->member;
		*b = mc->binds[--mc->nbinds];
		if (member && !--member->mc_binds) {
			life_drop_spare_ref(member);
			forget_alloc(member);
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size)
{
	SHIM_GATED(cuMulticastUnbind_once(mcHandle, dev, mcOffset, size));
}
