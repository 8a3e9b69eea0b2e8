/* SPDX-License-Identifier: MIT */
/* Stream-ordered memory (memory pools, cuMemAllocAsync, cuMemFreeAsync) and
 * page-locked host memory (cuMemHostAlloc), as far as a client's host code
 * needs them. Pool memory is cuMemAlloc-style device memory (memalloc.c) that
 * names its pool; a free queued on a stream happens when the stream reaches it.
 * Host memory is this process's own pages (the native checkpoint has nothing
 * to move for it; CRIU carries it), recorded as pinned. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu.h"

/* cuda.h maps this name to its newest ABI. */
#undef cuMemHostGetDevicePointer
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);

struct emu_pool {
	CUmemPoolProps props;
	bool is_default;
	bool destroyed;     /* released once its last allocation is freed */
	size_t allocations; /* outstanding */
	uint64_t used, used_high, threshold;
	int reuse[3]; /* the three REUSE_* attributes */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hmap pools;                          /* pointer -> pool */
static struct emu_pool *defaults[EMU_MAX_DEVICES]; /* made when first asked for */
static struct hmap host_allocs;                    /* base -> size: cuMemHostAlloc's */

static struct emu_pool *pool_get(CUmemoryPool h)
{
	struct emu_pool *p = hmap_get(&pools, (uint64_t)(uintptr_t)h);
	return p && !p->destroyed ? p : NULL;
}

static CUresult pool_new(struct emu_pool **out, const CUmemPoolProps *props, bool is_default)
{
	struct emu_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->props = *props;
	p->is_default = is_default;
	p->reuse[0] = p->reuse[1] = p->reuse[2] = 1; /* the driver's defaults: reuse allowed */
	if (hmap_put(&pools, (uint64_t)(uintptr_t)p, p) < 0) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = p;
	return CUDA_SUCCESS;
}

/* Device pools only, of an existing device, pinned, shareable by POSIX FD or
 * not at all (the emulator has no fabric). */
static CUresult pool_create(CUmemoryPool *out, const CUmemPoolProps *props)
{
	if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->win32SecurityAttributes)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED; /* HOST_NUMA/HOST pools: not modelled (attributes say so) */
	if (props->location.id < 0 || props->location.id >= emu.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&mu);
	struct emu_pool *p;
	CUresult rc = pool_new(&p, props, false);
	pthread_mutex_unlock(&mu);
	if (!rc)
		*out = (CUmemoryPool)p;
	return rc;
}

static void pool_free_if_done(struct emu_pool *p)
{
	if (p->destroyed && !p->allocations) {
		hmap_del(&pools, (uint64_t)(uintptr_t)p);
		free(p);
	}
}

static CUresult pool_destroy(CUmemoryPool h)
{
	pthread_mutex_lock(&mu);
	struct emu_pool *p = pool_get(h);
	CUresult rc = !p ? CUDA_ERROR_INVALID_VALUE : p->is_default ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (!rc) {
		/* cuda.h: returns at once; released once no allocation is outstanding. */
		p->destroyed = true;
		pool_free_if_done(p);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static CUresult pool_attribute(CUmemoryPool h, CUmemPool_attribute attr, void *value, bool set)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct emu_pool *p = pool_get(h);
	CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	uint64_t *v64 = value;
	int *v = value;
	switch (rc ? 0 : (int)attr) {
	case 0: break;
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		if (set)
			p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *v != 0;
		else
			*v = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			p->threshold = *v64;
		else
			*v64 = p->threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			rc = CUDA_ERROR_INVALID_VALUE; /* read-only */
		else
			*v64 = p->used;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (set && *v64 != 0)
			rc = CUDA_ERROR_INVALID_VALUE; /* may only be reset, to 0 */
		else if (set)
			p->used_high = p->used;
		else
			*v64 = p->used_high;
		break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static CUresult default_pool(CUmemoryPool *out, CUdevice dev)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= emu.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	CUresult rc = CUDA_SUCCESS;
	if (!defaults[dev]) {
		CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
					.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
		rc = pool_new(&defaults[dev], &props, true);
	}
	if (!rc)
		*out = (CUmemoryPool)defaults[dev];
	pthread_mutex_unlock(&mu);
	return rc;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t bytes, CUmemoryPool h, CUstream stream)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!emu_stream_known(stream))
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	struct emu_pool *p = pool_get(h);
	if (p)
		p->allocations++; /* held while it allocates: a destroy now waits for it */
	pthread_mutex_unlock(&mu);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	/* Available at once (in stream order it is: the stream has not used it yet). */
	CUresult rc = emu_legacy_alloc(dptr, bytes, p->props.location.id, p);
	pthread_mutex_lock(&mu);
	if (rc) {
		p->allocations--;
		pool_free_if_done(p);
	} else {
		p->used += bytes;
		if (p->used > p->used_high)
			p->used_high = p->used;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUmemoryPool p;
	CUresult rc = default_pool(&p, emu_current->device);
	return rc ? rc : alloc_from(dptr, bytes, p, stream);
}

/* Run by the stream when it reaches the free (the pool's books are kept by
 * emu_pool_released, which cuMemFree of the same memory calls too). */
static void free_now(void *arg)
{
	emu_legacy_free((CUdeviceptr)(uintptr_t)arg);
}

static CUresult free_async(CUdeviceptr ptr, CUstream stream)
{
	void *pool;
	size_t bytes;
	if (!emu_legacy_info(ptr, &pool, &bytes) || !pool)
		return CUDA_ERROR_INVALID_VALUE; /* not the start of stream-ordered memory */
	return emu_stream_enqueue_call(stream, free_now, (void *)(uintptr_t)ptr);
}

void emu_pool_released(void *pool, size_t bytes)
{
	struct emu_pool *p = pool;
	pthread_mutex_lock(&mu);
	p->used -= bytes;
	p->allocations--;
	pool_free_if_done(p);
	pthread_mutex_unlock(&mu);
}

/* ---- page-locked host memory ---- */

static CUresult host_alloc(void **pp, size_t bytes, unsigned flags)
{
	if (!pp || !bytes ||
	    flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size = (bytes + page - 1) & ~(page - 1);
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct itree_node *n = calloc(1, sizeof(*n));
	if (!n) {
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->start = (uintptr_t)p;
	n->end = (uintptr_t)p + size;
	pthread_mutex_lock(&emu.lock);
	int in = itree_insert(&emu.pinned, n);
	pthread_mutex_unlock(&emu.lock);
	pthread_mutex_lock(&mu);
	int put = in < 0 ? -1 : hmap_put(&host_allocs, (uint64_t)(uintptr_t)p, n);
	pthread_mutex_unlock(&mu);
	if (put < 0) {
		if (in >= 0) {
			pthread_mutex_lock(&emu.lock);
			itree_remove(&emu.pinned, n);
			pthread_mutex_unlock(&emu.lock);
		}
		free(n);
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

static CUresult host_free(void *p)
{
	pthread_mutex_lock(&mu);
	struct itree_node *n = p ? hmap_get(&host_allocs, (uint64_t)(uintptr_t)p) : NULL;
	if (n)
		hmap_del(&host_allocs, (uint64_t)(uintptr_t)p);
	pthread_mutex_unlock(&mu);
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&emu.lock);
	itree_remove(&emu.pinned, n);
	pthread_mutex_unlock(&emu.lock);
	munmap(p, n->end - n->start);
	free(n);
	return CUDA_SUCCESS;
}

/* Unified addressing: the device pointer of page-locked host memory (from
 * cuMemHostAlloc or cuMemHostRegister) is the host pointer. */
static CUresult host_device_pointer(CUdeviceptr *out, void *p, unsigned flags)
{
	if (!out || !p || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&emu.lock);
	struct itree_node *n = itree_find(&emu.pinned, (uintptr_t)p);
	pthread_mutex_unlock(&emu.lock);
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* ---- entry points ---- */

EMU_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	EMU_CALL(cuMemPoolCreate, pool_create(pool, poolProps));
}

EMU_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	EMU_CALL(cuMemPoolDestroy, pool_destroy(pool));
}

EMU_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	EMU_CALL(cuMemPoolSetAttribute, pool_attribute(pool, attr, value, true));
}

EMU_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	EMU_CALL(cuMemPoolGetAttribute, pool_attribute(pool, attr, value, false));
}

EMU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	EMU_CALL(cuDeviceGetDefaultMemPool, default_pool(pool_out, dev));
}

/* (cuDeviceSetMemPool is not modelled: a device's current pool is its default.) */
EMU_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	EMU_CALL(cuDeviceGetMemPool, default_pool(pool, dev));
}

EMU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	EMU_CALL(cuMemAllocFromPoolAsync, alloc_from(dptr, bytesize, pool, hStream));
}

EMU_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	EMU_CALL(cuMemAllocAsync, alloc_async(dptr, bytesize, hStream));
}

EMU_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	EMU_CALL(cuMemFreeAsync, free_async(dptr, hStream));
}

EMU_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	EMU_CALL(cuMemHostAlloc, host_alloc(pp, bytesize, Flags));
}

EMU_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	EMU_CALL(cuMemAllocHost_v2, host_alloc(pp, bytesize, 0));
}

EMU_API CUresult cuMemFreeHost(void *p)
{
	EMU_CALL(cuMemFreeHost, host_free(p));
}

EMU_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	EMU_CALL(cuMemHostGetDevicePointer_v2, host_device_pointer(pdptr, p, Flags));
}
