/* SPDX-License-Identifier: MIT */
/* cuMemAlloc/cuMemFree (the route cudaMalloc takes), cuMemGetAddressRange and
 * cuPointerGetAttribute(s), over the emulator's own VMM: each cuMemAlloc is one
 * allocation of the current context's device, rounded up to the granularity,
 * mapped read-write for that device. */
#include <stdlib.h>
#include <string.h>

#include "emu.h"

struct emu_legacy {
	struct itree_node node; /* [base, base + rounded size) */
	size_t bytes;           /* what was asked for */
	struct emu_ctx *ctx;    /* the context it was allocated in */
};

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytes)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT; /* cuMemAlloc allocates in the current context */
	int dev = emu_current->device;
	size_t size = (bytes + emu.granularity - 1) & ~(emu.granularity - 1);
	struct emu_legacy *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr va = 0;
	CUresult rc = emu_address_reserve(&va, size, 0, 0);
	if (rc)
		goto fail;
	rc = emu_mem_create(&h, size, &prop, 0);
	if (rc)
		goto fail_va;
	rc = emu_mem_map(va, size, 0, h, 0);
	emu_mem_release(h); /* the mapping holds it from here on */
	if (rc)
		goto fail_va;
	CUmemAccessDesc d = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	rc = emu_set_access(va, size, &d, 1);
	if (rc)
		goto fail_map;
	l->node.start = va;
	l->node.end = va + size;
	l->bytes = bytes;
	l->ctx = emu_current;
	pthread_mutex_lock(&emu.lock);
	int in = itree_insert(&emu.legacy, &l->node);
	pthread_mutex_unlock(&emu.lock);
	if (in < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto fail_map;
	}
	*dptr = va;
	return CUDA_SUCCESS;
fail_map:
	emu_mem_unmap(va, size);
fail_va:
	emu_address_free(va, size);
fail:
	free(l);
	return rc;
}

EMU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	EMU_CALL(cuMemAlloc_v2, mem_alloc(dptr, bytesize));
}

static CUresult mem_free(CUdeviceptr ptr)
{
	if (!ptr)
		return CUDA_SUCCESS; /* cudaFree(NULL) is a no-op, and so is this */
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	if (!l || l->node.start != ptr) {
		pthread_mutex_unlock(&emu.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	itree_remove(&emu.legacy, &l->node);
	pthread_mutex_unlock(&emu.lock);
	size_t size = l->node.end - l->node.start;
	CUresult rc = emu_mem_unmap(ptr, size);
	if (!rc)
		rc = emu_address_free(ptr, size);
	free(l);
	return rc;
}

EMU_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	EMU_CALL(cuMemFree_v2, mem_free(dptr));
}

/* What the emulator knows of a pointer. */
struct ptr_info {
	bool valid;
	bool legacy;
	CUdeviceptr start, base; /* range start (the allocation's), mapping base */
	size_t range, mapped;    /* bytes */
	const struct emu_alloc *alloc;
	const struct emu_mapping *map;
	const struct emu_ctx *ctx;
};

static struct ptr_info lookup(CUdeviceptr ptr)
{
	struct ptr_info pi = {0};
	pthread_mutex_lock(&emu.lock);
	struct emu_mapping *m = emu_mapping_at(ptr);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	if (m) {
		pi.valid = true;
		pi.map = m;
		pi.alloc = m->alloc;
		pi.base = m->node.start;
		pi.mapped = m->node.end - m->node.start;
		pi.start = pi.base;
		pi.range = pi.mapped;
	}
	if (l && ptr < l->node.start + l->bytes) {
		pi.legacy = true;
		pi.start = l->node.start;
		pi.range = l->bytes;
		pi.ctx = l->ctx;
	} else if (l) {
		pi.valid = false; /* the rounding past what cuMemAlloc was asked for */
	}
	pthread_mutex_unlock(&emu.lock);
	return pi;
}

static CUresult address_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
	struct ptr_info pi = lookup(ptr);
	if (!pi.valid)
		return CUDA_ERROR_NOT_FOUND;
	if (base)
		*base = pi.start;
	if (size)
		*size = pi.range;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	EMU_CALL(cuMemGetAddressRange_v2, address_range(pbase, psize, dptr));
}

/* One attribute of a known pointer (pi valid) into data. */
static CUresult attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, const struct ptr_info *pi)
{
	const CUmemAllocationProp *p = &pi->alloc->prop;
	bool host = emu_on_host(p);
	int dev = host ? -1 : p->location.id;
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)pi->ctx; /* VMM memory belongs to no context */
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host)
			return CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = pi->alloc->handle; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = dev; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = pi->legacy; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = pi->start; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = pi->range; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = (unsigned long long)p->requestedHandleTypes;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
		unsigned char f = !emu_current ? 0 : pi->map->access[emu_current->device];
		*(unsigned *)data = f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
				    : f == CU_MEM_ACCESS_FLAGS_PROT_READ    ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
									    : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
		return CUDA_SUCCESS;
	}
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data = NULL; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = pi->mapped; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(void **)data = (void *)(uintptr_t)pi->base; return CUDA_SUCCESS;
	default: return CUDA_ERROR_INVALID_VALUE; /* not emulated (P2P tokens, decompression) */
	}
}

static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	struct ptr_info pi = lookup(ptr);
	if (!pi.valid)
		return CUDA_ERROR_INVALID_VALUE;
	return attribute(data, attr, ptr, &pi);
}

EMU_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
	EMU_CALL(cuPointerGetAttribute, pointer_attribute(data, attribute_, ptr));
}

/* Bytes an attribute's value takes: pointers, addresses, sizes and ids 8;
 * enumerations, ordinals and booleans 4 (written as int: the driver's width for
 * booleans is not documented, an assumption the GPU script checks). */
static size_t attribute_size(CUpointer_attribute attr)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return 8;
	default: return 4;
	}
}

/* cuda.h: unlike cuPointerGetAttribute, an unknown pointer is no error here:
 * every attribute reads as zero (NULL, false) and CUDA_SUCCESS is returned. */
static CUresult pointer_attributes(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr)
{
	if (!n || !attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	struct ptr_info pi = lookup(ptr);
	for (unsigned i = 0; i < n; i++) {
		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
		if (!pi.valid) {
			memset(data[i], 0, attribute_size(attrs[i]));
			continue;
		}
		CUresult rc = attribute(data[i], attrs[i], ptr, &pi);
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
					CUdeviceptr ptr)
{
	EMU_CALL(cuPointerGetAttributes, pointer_attributes(numAttributes, attributes, data, ptr));
}
