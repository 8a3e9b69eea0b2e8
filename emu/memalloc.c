/* SPDX-License-Identifier: MIT */
/* cuMemAlloc/cuMemFree (the route cudaMalloc takes), legacy IPC over that
 * memory (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle),
 * cuMemGetAddressRange and cuPointerGetAttribute(s), over the emulator's own
 * VMM: each cuMemAlloc is one allocation of the current context's device,
 * rounded up to the granularity, mapped read-write for that device. An IPC
 * handle names the exporting process and the memfd behind the allocation; the
 * opener opens that memfd through /proc, imports it and maps it read-write for
 * its current device. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu.h"

struct emu_legacy {
	struct itree_node node; /* [base, base + rounded size) */
	size_t bytes;           /* what was asked for */
	struct emu_ctx *ctx;    /* the context it was allocated in (opened in) */
	/* opened by cuIpcOpenMemHandle: */
	unsigned ipc_refs; /* opens not yet closed (0: a cuMemAlloc of this process) */
	int32_t ipc_pid;
	uint64_t ipc_ino;
	void *pool; /* the memory pool it came from (cuMemAllocFromPoolAsync), or NULL */
};

/* Peer access, per device pair as the primary contexts have it:
 * peer[a][o] when device a may access device o's cuMemAlloc memory
 * (cuCtxEnablePeerAccess). Under emu.lock. */
static bool peer[EMU_MAX_DEVICES][EMU_MAX_DEVICES];

/* Read-write access to [va, va + size) on device owner for every device that
 * enabled peer access to it. */
static CUresult grant_peers(CUdeviceptr va, size_t size, int owner)
{
	bool to[EMU_MAX_DEVICES];
	pthread_mutex_lock(&emu.lock);
	for (int d = 0; d < EMU_MAX_DEVICES; d++)
		to[d] = peer[d][owner];
	pthread_mutex_unlock(&emu.lock);
	for (int d = 0; d < EMU_MAX_DEVICES; d++) {
		CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
				     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		CUresult rc = to[d] ? emu_set_access(va, size, &a, 1) : CUDA_SUCCESS;
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

CUresult emu_legacy_alloc(CUdeviceptr *dptr, size_t bytes, int dev, void *pool)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	size_t size = (bytes + emu.granularity - 1) & ~(emu.granularity - 1);
	struct emu_legacy *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
				    .allocFlags = {.gpuDirectRDMACapable = 1}}; /* as ordinary device memory is */
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
	l->ctx = pool || !emu_current ? emu.dev[dev].primary : emu_current;
	l->pool = pool;
	rc = grant_peers(va, size, dev);
	if (rc)
		goto fail_map;
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

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytes)
{
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT; /* cuMemAlloc allocates in the current context */
	return emu_legacy_alloc(dptr, bytes, emu_current->device, NULL);
}

EMU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	EMU_CALL(cuMemAlloc_v2, mem_alloc(dptr, bytesize));
}

/* Unmap and forget l (out of the tree already). */
static CUresult legacy_drop(struct emu_legacy *l)
{
	size_t size = l->node.end - l->node.start;
	CUresult rc = emu_mem_unmap(l->node.start, size);
	if (!rc)
		rc = emu_address_free(l->node.start, size);
	free(l);
	return rc;
}

bool emu_legacy_info(CUdeviceptr ptr, void **pool, size_t *bytes)
{
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	bool base = l && l->node.start == ptr && !l->ipc_refs;
	if (base) {
		*pool = l->pool;
		*bytes = l->bytes;
	}
	pthread_mutex_unlock(&emu.lock);
	return base;
}

CUresult emu_legacy_free(CUdeviceptr ptr)
{
	if (!ptr)
		return CUDA_SUCCESS; /* cudaFree(NULL) is a no-op, and so is this */
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	if (!l || l->node.start != ptr || l->ipc_refs) {
		pthread_mutex_unlock(&emu.lock); /* (an opened IPC mapping is closed, not freed) */
		return CUDA_ERROR_INVALID_VALUE;
	}
	itree_remove(&emu.legacy, &l->node);
	pthread_mutex_unlock(&emu.lock);
	void *pool = l->pool;
	size_t bytes = l->bytes;
	CUresult rc = legacy_drop(l);
	if (pool)
		emu_pool_released(pool, bytes);
	return rc;
}

EMU_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	EMU_CALL(cuMemFree_v2, emu_legacy_free(dptr));
}

/* ---- legacy IPC ---- */

enum { IPC_MAGIC = 0x43504963 }; /* "cIPC" */

/* The 64 bytes, packed field by field: magic, pid, memfd number in that
 * process, a tag of the memfd's name (a closed and reused descriptor is told
 * apart; unlike the inode, the name survives a CRIU restore), the rounded size
 * and what was asked for. */
struct ipc_wire {
	uint32_t magic;
	int32_t pid, fd;
	uint64_t ino, size, bytes; /* ino: the name's tag */
};

/* The tag of the memfd behind /proc/PID/fd/FD (FNV-1a of its name), 0 when none. */
static uint64_t memfd_tag(int pid, int fd)
{
	char link[64], target[256];
	snprintf(link, sizeof(link), "/proc/%d/fd/%d", pid, fd);
	ssize_t len = readlink(link, target, sizeof(target) - 1);
	if (len <= 0)
		return 0;
	target[len] = '\0';
	char *deleted = strstr(target, " (deleted)");
	if (deleted)
		*deleted = '\0';
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = target; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	return h;
}

static void ipc_pack(CUipcMemHandle *h, const struct ipc_wire *w)
{
	memset(h, 0, sizeof(*h));
	char *p = h->reserved;
	memcpy(p, &w->magic, 4);
	memcpy(p + 4, &w->pid, 4);
	memcpy(p + 8, &w->fd, 4);
	memcpy(p + 12, &w->ino, 8);
	memcpy(p + 20, &w->size, 8);
	memcpy(p + 28, &w->bytes, 8);
}

static bool ipc_unpack(const CUipcMemHandle *h, struct ipc_wire *w)
{
	const char *p = h->reserved;
	memcpy(&w->magic, p, 4);
	memcpy(&w->pid, p + 4, 4);
	memcpy(&w->fd, p + 8, 4);
	memcpy(&w->ino, p + 12, 8);
	memcpy(&w->size, p + 20, 8);
	memcpy(&w->bytes, p + 28, 8);
	return w->magic == IPC_MAGIC && w->pid > 0 && w->fd >= 0 && w->size && w->bytes && w->bytes <= w->size;
}

static CUresult ipc_get(CUipcMemHandle *h, CUdeviceptr ptr)
{
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	/* (memory from a pool has no legacy IPC handle: pools share by their own export) */
	struct emu_mapping *m = l && !l->ipc_refs && !l->pool ? emu_mapping_at(l->node.start) : NULL;
	/* Any address inside a cuMemAlloc allocation names it (an assumption: the
	 * driver documents the base). VMM memory has no legacy IPC handle. */
	uint64_t tag = m && m->alloc->fd >= 0 ? memfd_tag(getpid(), m->alloc->fd) : 0;
	CUresult rc = tag ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!rc) {
		ipc_pack(h, &(struct ipc_wire){.magic = IPC_MAGIC,
					       .pid = getpid(),
					       .fd = m->alloc->fd,
					       .ino = tag,
					       .size = l->node.end - l->node.start,
					       .bytes = l->bytes});
		m->alloc->ipc_exported = true;
		emu.ipc_exported = true;
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	EMU_CALL(cuIpcGetMemHandle, ipc_get(pHandle, dptr));
}

/* The open mapping of (pid, ino) in this process, if any. Caller holds emu.lock. */
static struct emu_legacy *ipc_find(int32_t pid, uint64_t ino)
{
	for (struct itree_node *n = itree_first_from(&emu.legacy, 0); n; n = itree_next(&emu.legacy, n)) {
		struct emu_legacy *l = (struct emu_legacy *)n;
		if (l->ipc_refs && l->ipc_pid == pid && l->ipc_ino == ino)
			return l;
	}
	return NULL;
}

static CUresult ipc_open(CUdeviceptr *out, const CUipcMemHandle *h, unsigned flags)
{
	struct ipc_wire w;
	/* cuda.h: Flags "must be specified as CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS"
	 * (r580 refuses 0 with CUDA_ERROR_INVALID_VALUE). */
	if (!out || !ipc_unpack(h, &w) || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (w.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT; /* the exporter itself: r580's answer */
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *known = ipc_find(w.pid, w.ino);
	if (known) {
		/* Opened already in this process: one more reference, the same pointer. */
		known->ipc_refs++;
		*out = known->node.start;
		pthread_mutex_unlock(&emu.lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&emu.lock);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || memfd_tag(w.pid, w.fd) != w.ino || (uint64_t)st.st_size != w.size) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_INVALID_VALUE; /* gone, or not what the handle named */
	}
	struct emu_legacy *l = calloc(1, sizeof(*l));
	CUmemGenericAllocationHandle mh = 0;
	CUdeviceptr va = 0;
	CUresult rc = l ? emu_import_fd(&mh, fd) : CUDA_ERROR_OUT_OF_MEMORY;
	close(fd);
	if (rc)
		goto fail;
	rc = emu_address_reserve(&va, w.size, 0, 0);
	if (rc)
		goto fail_release;
	rc = emu_mem_map(va, w.size, 0, mh, 0);
	if (rc)
		goto fail_va;
	CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = emu_current->device},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	rc = emu_set_access(va, w.size, &d, 1);
	if (rc)
		goto fail_map;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *opened = emu_alloc_get(mh);
	if (opened)
		opened->ipc_peer = true; /* inside a job, the checkpoint leaves it to its exporter */
	pthread_mutex_unlock(&emu.lock);
	emu_mem_release(mh); /* the mapping holds it */
	l->node.start = va;
	l->node.end = va + w.size;
	l->bytes = w.bytes;
	l->ctx = emu_current;
	l->ipc_refs = 1;
	l->ipc_pid = w.pid;
	l->ipc_ino = w.ino;
	pthread_mutex_lock(&emu.lock);
	int in = itree_insert(&emu.legacy, &l->node);
	emu.ipc_opened += in == 0;
	pthread_mutex_unlock(&emu.lock);
	if (in < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		emu_mem_unmap(va, w.size);
		emu_address_free(va, w.size);
		free(l);
		return rc;
	}
	*out = va;
	return CUDA_SUCCESS;
fail_map:
	emu_mem_unmap(va, w.size);
fail_va:
	emu_address_free(va, w.size);
fail_release:
	emu_mem_release(mh);
fail:
	free(l);
	return rc;
}

EMU_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	EMU_CALL(cuIpcOpenMemHandle_v2, ipc_open(pdptr, &handle, Flags));
}

static CUresult ipc_close(CUdeviceptr ptr)
{
	pthread_mutex_lock(&emu.lock);
	struct emu_legacy *l = (struct emu_legacy *)itree_find(&emu.legacy, ptr);
	if (!l || l->node.start != ptr || !l->ipc_refs) {
		pthread_mutex_unlock(&emu.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--l->ipc_refs) {
		pthread_mutex_unlock(&emu.lock);
		return CUDA_SUCCESS;
	}
	itree_remove(&emu.legacy, &l->node);
	emu.ipc_opened--;
	pthread_mutex_unlock(&emu.lock);
	return legacy_drop(l);
}

EMU_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	EMU_CALL(cuIpcCloseMemHandle, ipc_close(dptr));
}

/* ---- peer access ---- */

static CUresult peer_access(CUcontext peer_ctx, unsigned flags, bool enable)
{
	struct emu_ctx *p = (struct emu_ctx *)peer_ctx;
	if (enable && flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!p || !p->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	int from = emu_current->device, owner = p->device;
	if (from == owner)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&emu.lock);
	bool was = peer[from][owner];
	peer[from][owner] = enable;
	size_t n = 0, cap = 0;
	struct itree_node *list = NULL; /* copies of the ranges */
	bool oom = false;
	/* The owner's cuMemAlloc memory so far gets the access (a disable leaves
	 * the access granted: not modelled). */
	for (struct itree_node *i = itree_first_from(&emu.legacy, 0); enable && !was && i && !oom;
	     i = itree_next(&emu.legacy, i)) {
		struct emu_legacy *l = (struct emu_legacy *)i;
		struct emu_mapping *m = l->ipc_refs ? NULL : emu_mapping_at(l->node.start);
		if (!m || m->alloc->prop.location.id != owner)
			continue;
		if (n == cap) {
			struct itree_node *more = realloc(list, (cap = cap ? 2 * cap : 16) * sizeof(*list));
			oom = !more;
			list = more ? more : list;
		}
		if (!oom)
			list[n++] = *i;
	}
	if (oom)
		peer[from][owner] = was;
	pthread_mutex_unlock(&emu.lock);
	CUresult rc = oom               ? CUDA_ERROR_OUT_OF_MEMORY
		      : enable && was   ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
		      : !enable && !was ? CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
					: CUDA_SUCCESS;
	CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = from},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	for (size_t i = 0; !rc && i < n; i++)
		rc = emu_set_access(list[i].start, list[i].end - list[i].start, &a, 1);
	free(list);
	return rc;
}

EMU_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	EMU_CALL(cuCtxEnablePeerAccess, peer_access(peerContext, Flags, true));
}

EMU_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
	EMU_CALL(cuCtxDisablePeerAccess, peer_access(peerContext, 0, false));
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
	case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = 0; return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
		*(int *)data = p->allocFlags.gpuDirectRDMACapable;
		return CUDA_SUCCESS;
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
		/* A host address of device memory reads as NULL here (the runtime's
		 * cudaPointerGetAttributes asks for both; an assumption tests/gpu checks). */
		if (rc == CUDA_ERROR_INVALID_VALUE && attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
			*(void **)data[i] = NULL;
			rc = CUDA_SUCCESS;
		}
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
