/* SPDX-License-Identifier: MIT */
/* The cuMemAlloc adapter (DESIGN.md §4.4): memory that cudaMalloc asks for is
 * served from tracked VMM memory that can be shared as POSIX FDs, so that
 * legacy IPC of it (ipc.c) is checkpointable like any shared allocation. Small
 * requests share chunks (at least 2 MiB, a multiple of the granularity), each
 * one tracked allocation mapped read-write for its device; a request over half
 * a chunk gets a chunk of its own. Every pointer is 256-byte aligned; a chunk
 * whose last block is freed is unmapped and released. cuMemGetAddressRange and
 * cuPointerGetAttribute(s) answer for a block (and for an opened IPC handle)
 * as the driver does for cuMemAlloc memory; cuCtxEnablePeerAccess grants the
 * peer's chunks to the current device. SNAPSHOT_CUDA_VMM_IPC=0 turns all of it
 * off. Lock order: legacy_lock, then what the wrappers take. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/log.h"
#include "shim.h"

bool shim_ipc_adapter = true;
pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;

enum { BLOCK_ALIGN = 256, CHUNK_MIN = 2 << 20 };

struct extent { /* free space in a chunk */
	size_t off, len;
	struct extent *next; /* by offset */
};

struct chunk {
	struct itree_node node; /* [va, va + size) */
	CUmemGenericAllocationHandle handle;
	int dev;
	size_t blocks;       /* live blocks */
	struct extent *free; /* by offset */
	struct legacy_export exp;
};

struct block {
	struct itree_node node; /* [start, start + rounded size) */
	size_t bytes;           /* what was asked for */
	uint64_t id;            /* its buffer id */
	CUcontext ctx;          /* current when it was allocated */
	struct chunk *chunk;
};

static struct itree chunks, blocks; /* by address */
static uint64_t next_id = 1;
static bool peer[PROTO_MAX_DEVICES][PROTO_MAX_DEVICES]; /* [accessor][owner] */

/* What the driver says of a device's memory, asked once: its granularity and
 * whether VMM memory there can be GPUDirect RDMA capable. */
static const struct device_info {
	bool known, rdma;
	size_t gran;
} * device_info(int dev)
{
	static struct device_info info[PROTO_MAX_DEVICES];
	struct device_info *d = &info[dev];
	if (!d->known) {
		CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
		int v = 0;
		d->rdma = aux.cuDeviceGetAttribute &&
			  aux.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
						   dev) == CUDA_SUCCESS &&
			  v;
		if (aux.cuMemGetAllocationGranularity(&d->gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) || !d->gran)
			d->gran = CHUNK_MIN;
		d->known = true;
	}
	return d;
}

/* What cuMemAlloc memory is: the device's, and GPUDirect RDMA capable (NCCL
 * registers such buffers with the network) where VMM memory can be. */
static CUmemAllocationProp chunk_prop(int dev)
{
	return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
				     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				     .allocFlags = {.gpuDirectRDMACapable = device_info(dev)->rdma}};
}

/* Read-write for its device and for every device with peer access to it:
 * the access descriptors into d, their count returned. */
static size_t chunk_access(int dev, CUmemAccessDesc d[PROTO_MAX_DEVICES])
{
	size_t n = 0;
	for (int a = 0; a < PROTO_MAX_DEVICES; a++)
		if (a == dev || peer[a][dev])
			d[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = a},
						   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return n;
}

CUresult legacy_map_new(CUmemGenericAllocationHandle h, size_t size, int dev, const CUmemAccessDesc *d, size_t n,
			CUdeviceptr *va)
{
	CUresult rc = aux.cuMemAddressReserve(va, size, device_info(dev)->gran, 0, 0);
	if (rc)
		return rc;
	if ((rc = cuMemMap(*va, size, 0, h, 0)) == CUDA_SUCCESS && (rc = cuMemSetAccess(*va, size, d, n)))
		cuMemUnmap(*va, size);
	if (rc)
		cuMemAddressFree(*va, size);
	return rc;
}

CUresult legacy_unmap(CUdeviceptr va, size_t size)
{
	CUresult rc = cuMemUnmap(va, size);
	if (rc == CUDA_SUCCESS)
		cuMemAddressFree(va, size);
	return rc;
}

static void chunk_free(struct chunk *c)
{
	while (c->free) {
		struct extent *e = c->free;
		c->free = e->next;
		free(e);
	}
	free(c);
}

/* Unmap and release an empty chunk. A chunk the driver (or a lifecycle phase)
 * will not unmap stays, empty and reusable: -1. */
static int chunk_destroy(struct chunk *c)
{
	CUresult rc = legacy_unmap(c->node.start, c->node.end - c->node.start);
	if (rc) {
		LOG_AT(LOG_WARN, "cuMemUnmap of an empty adapter chunk at %#llx failed: %s; it stays for reuse",
		       (unsigned long long)c->node.start, shim_cu_name(rc));
		return -1;
	}
	cuMemRelease(c->handle);
	itree_remove(&chunks, &c->node);
	chunk_free(c);
	return 0;
}

static struct chunk *chunk_new(size_t size, int dev, CUresult *rc)
{
	struct chunk *c = calloc(1, sizeof(*c));
	struct extent *e = calloc(1, sizeof(*e));
	CUmemAllocationProp p = chunk_prop(dev);
	CUdeviceptr va = 0;
	*rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!c || !e)
		goto fail;
	if ((*rc = cuMemCreate(&c->handle, size, &p, 0)))
		goto fail;
	CUmemAccessDesc d[PROTO_MAX_DEVICES];
	if ((*rc = legacy_map_new(c->handle, size, dev, d, chunk_access(dev, d), &va)))
		goto release;
	c->node.start = va;
	c->node.end = va + size;
	if (itree_insert(&chunks, &c->node) < 0) {
		*rc = CUDA_ERROR_OUT_OF_MEMORY;
		legacy_unmap(va, size);
		goto release;
	}
	c->dev = dev;
	e->len = size;
	c->free = e;
	return c;
release:
	cuMemRelease(c->handle);
fail:
	free(c);
	free(e);
	return NULL;
}

#define NONE ((size_t)-1)

/* First fit in c: the block's offset, or NONE. */
static size_t take(struct chunk *c, size_t len)
{
	for (struct extent **p = &c->free; *p; p = &(*p)->next) {
		struct extent *e = *p;
		if (e->len < len)
			continue;
		size_t off = e->off;
		e->off += len;
		e->len -= len;
		if (!e->len) {
			*p = e->next;
			free(e);
		}
		return off;
	}
	return NONE;
}

/* Give [off, off + len) back to c, merged with its neighbours. 0, or -1 when
 * out of memory (the space is then lost until the chunk goes). */
static int give(struct chunk *c, size_t off, size_t len)
{
	struct extent **p = &c->free;
	while (*p && (*p)->off < off)
		p = &(*p)->next;
	struct extent *next = *p, *prev = NULL;
	for (struct extent *e = c->free; e && e != next; e = e->next)
		prev = e;
	if (prev && prev->off + prev->len == off) {
		prev->len += len;
		if (next && prev->off + prev->len == next->off) {
			prev->len += next->len;
			prev->next = next->next;
			free(next);
		}
		return 0;
	}
	if (next && off + len == next->off) {
		next->off = off;
		next->len += len;
		return 0;
	}
	struct extent *e = malloc(sizeof(*e));
	if (!e)
		return -1;
	*e = (struct extent){.off = off, .len = len, .next = next};
	*p = e;
	return 0;
}

static CUresult adapter_alloc(CUdeviceptr *dptr, size_t bytes)
{
	int dev = ctx_current_device();
	if (dev < 0 || dev >= PROTO_MAX_DEVICES)
		return CUDA_ERROR_INVALID_CONTEXT; /* cuMemAlloc allocates in the current context */
	size_t gran = device_info(dev)->gran;
	if (bytes > SIZE_MAX - BLOCK_ALIGN)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t len = round_up(bytes, BLOCK_ALIGN), chunk_size = round_up(CHUNK_MIN, gran);
	struct block *b = calloc(1, sizeof(*b));
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct chunk *c = NULL;
	size_t off = NONE;
	CUresult rc = CUDA_SUCCESS;
	if (len > chunk_size / 2) {
		c = chunk_new(round_up(len, gran), dev, &rc); /* one of its own */
		off = c ? take(c, len) : NONE;
	} else {
		for (struct itree_node *n = itree_first_from(&chunks, 0); n && !c; n = itree_next(&chunks, n)) {
			struct chunk *k = (struct chunk *)n;
			if (k->dev == dev && n->end - n->start == chunk_size && (off = take(k, len)) != NONE)
				c = k;
		}
		if (!c && (c = chunk_new(chunk_size, dev, &rc)))
			off = take(c, len);
	}
	if (!c) {
		free(b);
		return rc;
	}
	b->node.start = c->node.start + off;
	b->node.end = b->node.start + len;
	b->bytes = bytes;
	b->id = next_id++;
	b->chunk = c;
	if (aux.cuCtxGetCurrent)
		aux.cuCtxGetCurrent(&b->ctx);
	if (itree_insert(&blocks, &b->node) < 0) {
		give(c, off, len);
		free(b);
		if (!c->blocks)
			chunk_destroy(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->blocks++;
	*dptr = b->node.start;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	if (!shim_ipc_adapter)
		return real.cuMemAlloc_v2(dptr, bytesize);
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&legacy_lock);
	CUresult rc = adapter_alloc(dptr, bytesize);
	pthread_mutex_unlock(&legacy_lock);
	return rc;
}

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	if (!shim_ipc_adapter || !dptr)
		return real.cuMemFree_v2(dptr);
	pthread_mutex_lock(&legacy_lock);
	struct block *b = (struct block *)itree_find(&blocks, dptr);
	if (!b && itree_find(&chunks, dptr)) {
		pthread_mutex_unlock(&legacy_lock);
		return CUDA_ERROR_INVALID_VALUE; /* free space of a chunk */
	}
	if (!b) {
		pthread_mutex_unlock(&legacy_lock);
		return real.cuMemFree_v2(dptr); /* not the adapter's */
	}
	if (b->node.start != dptr) {
		pthread_mutex_unlock(&legacy_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct chunk *c = b->chunk;
	itree_remove(&blocks, &b->node);
	size_t off = b->node.start - c->node.start, len = b->node.end - b->node.start;
	free(b);
	if (give(c, off, len) < 0)
		LOG_AT(LOG_WARN, "cuMemFree: out of memory: %zu bytes of an adapter chunk stay unused", len);
	if (--c->blocks == 0)
		chunk_destroy(c);
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

bool legacy_block_of(CUdeviceptr ptr, struct legacy_block *out)
{
	struct block *b = (struct block *)itree_find(&blocks, ptr);
	if (!b || ptr >= b->node.start + b->bytes)
		return false;
	*out = (struct legacy_block){.start = b->node.start,
				     .bytes = b->bytes,
				     .id = b->id,
				     .ctx = b->ctx,
				     .chunk_start = b->chunk->node.start,
				     .chunk_handle = b->chunk->handle,
				     .exp = &b->chunk->exp};
	return true;
}

/* ---- what the driver says of cuMemAlloc memory ---- */

/* The range the application sees around ptr: 1 for a block or an opened IPC
 * handle (in *out), -1 for a chunk's free space (no allocation there), 0 for
 * memory that is not the adapter's. */
static int app_range(CUdeviceptr ptr, struct legacy_block *out)
{
	pthread_mutex_lock(&legacy_lock);
	int r = (shim_ipc_adapter && legacy_block_of(ptr, out)) || ipc_range_of(ptr, out) ? 1
		: shim_ipc_adapter && itree_find(&chunks, ptr)                            ? -1
											  : 0;
	pthread_mutex_unlock(&legacy_lock);
	return r;
}

SHIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct legacy_block b;
	int r = app_range(dptr, &b);
	if (r == 0)
		return real.cuMemGetAddressRange_v2(pbase, psize, dptr);
	if (r < 0)
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = b.start;
	if (psize)
		*psize = b.bytes;
	return CUDA_SUCCESS;
}

/* The attributes that differ from the chunk's (VMM memory) for a block. */
static bool adapted(CUpointer_attribute attr, void *data, const struct legacy_block *b)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = b->ctx; return true;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = b->id; return true;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = 1; return true;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = b->start; return true;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = b->bytes; return true;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(unsigned long long *)data = 0; return true;
	default: return false;
	}
}

SHIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct legacy_block b;
	int r = data ? app_range(ptr, &b) : 0;
	if (r < 0)
		return CUDA_ERROR_INVALID_VALUE; /* no allocation there */
	if (r > 0 && adapted(attribute, data, &b))
		return CUDA_SUCCESS;
	return real.cuPointerGetAttribute(data, attribute, ptr);
}

SHIM_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	CUresult rc = real.cuPointerGetAttributes(n, attributes, data, ptr);
	struct legacy_block b;
	int r = rc == CUDA_SUCCESS ? app_range(ptr, &b) : 0;
	for (unsigned i = 0; r > 0 && i < n; i++)
		adapted(attributes[i], data[i], &b);
	if (r < 0) /* no allocation there: what the driver says of an unknown pointer */
		rc = real.cuPointerGetAttributes(n, attributes, data, 0);
	return rc;
}

/* ---- peer access ---- */

static int device_of_context(CUcontext ctx)
{
	CUcontext was = NULL;
	CUdevice dev = -1;
	if (!ctx || aux.cuCtxGetCurrent(&was) || aux.cuCtxSetCurrent(ctx))
		return -1;
	if (aux.cuCtxGetDevice(&dev))
		dev = -1;
	aux.cuCtxSetCurrent(was);
	return dev;
}

SHIM_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	CUresult rc = real.cuCtxEnablePeerAccess(peerContext, Flags);
	if (rc || !shim_ipc_adapter)
		return rc;
	int from = ctx_current_device(), owner = device_of_context(peerContext);
	if (from < 0 || owner < 0 || from >= PROTO_MAX_DEVICES || owner >= PROTO_MAX_DEVICES)
		return rc;
	/* What the driver grants for cuMemAlloc memory, granted on the chunks:
	 * those there are and those to come. */
	pthread_mutex_lock(&legacy_lock);
	peer[from][owner] = true;
	CUmemAccessDesc d[PROTO_MAX_DEVICES];
	size_t nd = chunk_access(owner, d);
	for (struct itree_node *n = itree_first_from(&chunks, 0); n && !rc; n = itree_next(&chunks, n))
		if (((struct chunk *)n)->dev == owner)
			rc = cuMemSetAccess(n->start, n->end - n->start, d, nd);
	pthread_mutex_unlock(&legacy_lock);
	if (rc)
		LOG_AT(LOG_ERROR,
		       "cuCtxEnablePeerAccess: granting device %d the adapter's memory of device %d failed: %s", from,
		       owner, shim_cu_name(rc));
	return rc;
}

void legacy_lock_for_fork(bool lock)
{
	shim_lock_for_fork(&legacy_lock, lock);
}
