/* SPDX-License-Identifier: MIT */
/* Legacy CUDA IPC over the cuMemAlloc adapter's memory (DESIGN.md §4.4).
 * cuIpcGetMemHandle exports the block's chunk as a capability and returns 64
 * bytes naming the creator (its namespace PID, whose endpoint is in the shared
 * control directory), the chunk, its token, and the block's offset and size;
 * cuIpcOpenMemHandle redeems them at the creator's endpoint, imports the chunk
 * (once per process), maps it and returns the block's address there, counting
 * references as the driver does; cuIpcCloseMemHandle drops one. The chunks are
 * tracked allocations, so prepare and restore treat IPC-shared memory like any
 * shared allocation, and a handle kept from before a checkpoint opens after the
 * restore. What cannot be rebuilt is remembered for QUIESCE to refuse: a raw
 * driver handle opened (SNAPSHOT_CUDA_VMM_IPC=0, or one from a process without
 * the adapter) and event IPC. Under legacy_lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/control.h"
#include "cusnap/log.h"
#include "shim.h"

/* The 64 bytes, at fixed offsets (little-endian): */
enum {
	H_MAGIC = 0,    /* 2 bytes "cS" */
	H_VERSION = 2,  /* 1 */
	H_NSPID = 4,    /* 4: the creator's PID in its namespace */
	H_OFFSET = 8,   /* 4: the block's offset in its chunk, in 256-byte units */
	H_SIZE = 12,    /* 4: the block's size, in 256-byte units (rounded up) */
	H_CREATOR = 16, /* 16 */
	H_CHUNK = 32,   /* 16: the chunk's allocation id */
	H_TOKEN = 48,   /* 16 */
	HANDLE_VERSION = 1,
	UNIT = 256,
};

struct ipc_handle {
	int32_t nspid;
	uint64_t offset, size;
	struct cusnap_id creator, chunk, token;
};

static void put32(char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (char)(v >> (8 * i));
}

static uint32_t get32(const char *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)(uint8_t)p[i] << (8 * i);
	return v;
}

static bool unpack(const CUipcMemHandle *h, struct ipc_handle *out)
{
	const char *p = h->reserved;
	if (p[H_MAGIC] != 'c' || p[H_MAGIC + 1] != 'S' || p[H_VERSION] != HANDLE_VERSION)
		return false;
	out->nspid = (int32_t)get32(p + H_NSPID);
	out->offset = (uint64_t)get32(p + H_OFFSET) * UNIT;
	out->size = (uint64_t)get32(p + H_SIZE) * UNIT;
	memcpy(out->creator.b, p + H_CREATOR, sizeof(out->creator.b));
	memcpy(out->chunk.b, p + H_CHUNK, sizeof(out->chunk.b));
	memcpy(out->token.b, p + H_TOKEN, sizeof(out->token.b));
	return out->nspid > 0 && out->size > 0;
}

/* ---- the creator's side ---- */

/* The chunk exported once as a capability: what names it in a handle. */
static CUresult export_chunk(CUmemGenericAllocationHandle chunk, struct legacy_export *exp)
{
	if (exp->done)
		return CUDA_SUCCESS;
	struct shim_cap cap;
	CUresult rc = shim_export_capability("cuIpcGetMemHandle", chunk, &cap);
	if (rc)
		return rc;
	exp->creator = cap.creator;
	exp->alloc_id = cap.alloc_id;
	exp->token = cap.token;
	exp->done = true;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	if (!shim_ipc_adapter || !pHandle)
		return real.cuIpcGetMemHandle(pHandle, dptr);
	pthread_mutex_lock(&legacy_lock);
	struct legacy_block b;
	if (!legacy_block_of(dptr, &b)) {
		pthread_mutex_unlock(&legacy_lock);
		return real.cuIpcGetMemHandle(pHandle, dptr); /* not the adapter's */
	}
	const struct shim_identity *me = shim_self();
	uint64_t off = b.start - b.chunk_start, units = (b.bytes + UNIT - 1) / UNIT;
	CUresult rc = off / UNIT > UINT32_MAX || units > UINT32_MAX ? CUDA_ERROR_NOT_SUPPORTED
		      : !me                                         ? CUDA_ERROR_NOT_INITIALIZED
								    : export_chunk(b.chunk_handle, b.exp);
	if (rc == CUDA_SUCCESS) {
		char *p = pHandle->reserved;
		memset(pHandle, 0, sizeof(*pHandle));
		p[H_MAGIC] = 'c';
		p[H_MAGIC + 1] = 'S';
		p[H_VERSION] = HANDLE_VERSION;
		put32(p + H_NSPID, (uint32_t)me->nspid);
		put32(p + H_OFFSET, (uint32_t)(off / UNIT));
		put32(p + H_SIZE, (uint32_t)units);
		memcpy(p + H_CREATOR, b.exp->creator.b, 16);
		memcpy(p + H_CHUNK, b.exp->alloc_id.b, 16);
		memcpy(p + H_TOKEN, b.exp->token.b, 16);
	}
	pthread_mutex_unlock(&legacy_lock);
	if (rc)
		LOG_AT(LOG_ERROR, "cuIpcGetMemHandle(%#llx): exporting its chunk failed: %s", (unsigned long long)dptr,
		       shim_cu_name(rc));
	return rc;
}

/* ---- the opener's side ---- */

struct opened_chunk {
	struct cusnap_id id;
	CUmemGenericAllocationHandle handle;
	CUdeviceptr va;
	size_t size;
	size_t opens; /* struct opened in it */
	struct opened_chunk *next;
};

struct opened {
	struct itree_node node; /* [address, address + size) */
	size_t refs;
	struct opened_chunk *chunk;
};

static struct itree opens;
static struct opened_chunk *chunks_open;

static struct opened_chunk *chunk_open(const struct ipc_handle *h, const struct shim_identity *me, CUresult *rc)
{
	for (struct opened_chunk *c = chunks_open; c; c = c->next)
		if (id_equal(&c->id, &h->chunk))
			return c;
	struct opened_chunk *c = calloc(1, sizeof(*c));
	struct shim_cap *cap = calloc(1, sizeof(*cap));
	*rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!c || !cap)
		goto fail;
	cap->creator = h->creator;
	cap->alloc_id = h->chunk;
	cap->token = h->token;
	snprintf(cap->endpoint, sizeof(cap->endpoint), "%s/" CONTROL_ENDPOINT_FMT, me->control_dir, (int)h->nspid);
	if ((*rc = shim_import_cap("cuIpcOpenMemHandle", cap, &c->handle, &c->size)))
		goto fail;
	int dev = ctx_current_device();
	dev = dev < 0 || dev >= PROTO_MAX_DEVICES ? 0 : dev;
	/* Read-write for this process's device (what opening grants, peer or not). */
	CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if ((*rc = legacy_map_new(c->handle, c->size, dev, &d, 1, &c->va))) {
		cuMemRelease(c->handle);
		goto fail;
	}
	free(cap);
	c->id = h->chunk;
	c->next = chunks_open;
	chunks_open = c;
	return c;
fail:
	free(c);
	free(cap);
	return NULL;
}

static void chunk_close(struct opened_chunk *c)
{
	if (--c->opens)
		return;
	for (struct opened_chunk **p = &chunks_open; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	legacy_unmap(c->va, c->size);
	cuMemRelease(c->handle);
	free(c);
}

static CUresult open_ours(CUdeviceptr *out, const struct ipc_handle *h)
{
	const char *why = NULL;
	const struct shim_identity *me = shim_identity(&why);
	if (!me) {
		LOG_AT(LOG_ERROR, "cuIpcOpenMemHandle refused: %s", why);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (id_equal(&h->creator, &me->id))
		return CUDA_ERROR_INVALID_VALUE; /* as the driver: not in the exporting process */
	CUresult rc = CUDA_SUCCESS;
	struct opened_chunk *c = chunk_open(h, me, &rc);
	if (!c)
		return rc;
	if (h->offset > c->size || h->size > c->size - h->offset) {
		if (!c->opens) {
			c->opens = 1;
			chunk_close(c);
		}
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUdeviceptr at = c->va + h->offset;
	struct opened *o = (struct opened *)itree_find(&opens, at);
	if (o && o->node.start == at) {
		o->refs++; /* opened already: one more reference, the same pointer */
		*out = at;
		return CUDA_SUCCESS;
	}
	o = calloc(1, sizeof(*o));
	if (o) {
		o->node.start = at;
		o->node.end = at + h->size;
		o->refs = 1;
		o->chunk = c;
	}
	if (!o || itree_insert(&opens, &o->node) < 0) {
		free(o);
		if (!c->opens) {
			c->opens = 1;
			chunk_close(c);
		}
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->opens++;
	*out = at;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct ipc_handle h;
	if (!unpack(&handle, &h)) {
		/* A handle the driver made: it works, but nothing can rebuild it. */
		CUresult rc = real.cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
		if (rc == CUDA_SUCCESS)
			unrestorable_add(UNRESTORABLE_LEGACY_IPC, *pdptr);
		return rc;
	}
	if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return CUDA_ERROR_INVALID_VALUE; /* cuda.h: it must be the lazy flag; r580 refuses 0 */
	pthread_mutex_lock(&legacy_lock);
	CUresult rc = open_ours(pdptr, &h);
	pthread_mutex_unlock(&legacy_lock);
	return rc;
}

SHIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&legacy_lock);
	struct opened *o = (struct opened *)itree_find(&opens, dptr);
	if (!o) {
		pthread_mutex_unlock(&legacy_lock);
		CUresult rc = real.cuIpcCloseMemHandle(dptr);
		if (rc == CUDA_SUCCESS)
			unrestorable_del(UNRESTORABLE_LEGACY_IPC, dptr);
		return rc;
	}
	CUresult rc = CUDA_SUCCESS;
	if (o->node.start != dptr) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (!--o->refs) {
		itree_remove(&opens, &o->node);
		chunk_close(o->chunk);
		free(o);
	}
	pthread_mutex_unlock(&legacy_lock);
	return rc;
}

bool ipc_range_of(CUdeviceptr ptr, struct legacy_block *out)
{
	struct opened *o = (struct opened *)itree_find(&opens, ptr);
	if (!o)
		return false;
	*out = (struct legacy_block){.start = o->node.start, .bytes = o->node.end - o->node.start};
	return true;
}

/* ---- event and memory-pool IPC: passed on, and refused at QUIESCE ---- */

/* Each is the driver's call, noted when it succeeds. (A driver without memory
 * pools has none of those: not supported.) */
#define PASSED_ON(name, params, args)                                \
	SHIM_API CUresult name params                                \
	{                                                            \
		if (!shim_resolve_driver())                          \
			return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED; \
		if (!real.name)                                      \
			return CUDA_ERROR_NOT_SUPPORTED;             \
		CUresult rc = real.name args;                        \
		if (rc == CUDA_SUCCESS)                              \
			unrestorable_ipc_call(#name);                \
		return rc;                                           \
	}

PASSED_ON(cuIpcGetEventHandle, (CUipcEventHandle * pHandle, CUevent event), (pHandle, event))
PASSED_ON(cuIpcOpenEventHandle, (CUevent * phEvent, CUipcEventHandle handle), (phEvent, handle))
PASSED_ON(cuMemPoolExportToShareableHandle,
	  (void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType, unsigned long long flags),
	  (handle_out, pool, handleType, flags))
PASSED_ON(cuMemPoolImportFromShareableHandle,
	  (CUmemoryPool * pool_out, void *handle, CUmemAllocationHandleType handleType, unsigned long long flags),
	  (pool_out, handle, handleType, flags))
PASSED_ON(cuMemPoolExportPointer, (CUmemPoolPtrExportData * shareData_out, CUdeviceptr ptr), (shareData_out, ptr))
PASSED_ON(cuMemPoolImportPointer, (CUdeviceptr * ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData),
	  (ptr_out, pool, shareData))
