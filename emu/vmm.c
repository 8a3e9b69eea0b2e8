/* SPDX-License-Identifier: MIT */
/* The VMM calls: address reservations, allocations backed by memfds, mappings
 * with per-location access, POSIX FD export/import, retain and properties. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cusnap/hostmem.h"
#include "cusnap/log.h"
#include "emu.h"

static bool aligned(uint64_t v)
{
	return (v & (emu.granularity - 1)) == 0;
}

int emu_memfd(const char *kind, int device, unsigned types, size_t size)
{
	/* The name makes device backing visible in /proc/PID/maps as
	 * "memfd:cuemu-..." and carries what an importer needs to know. */
	char name[96];
	snprintf(name, sizeof(name), "cuemu-%s-d%d-t%u-%d.%llu", kind, device, types, getpid(),
		 (unsigned long long)++emu.next_memfd);
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	/* The name again where an importer reads it in one call on the
	 * descriptor (best effort: memfds have user attributes since Linux 6.6;
	 * without, it reads the name's link). */
	(void)fsetxattr(fd, MEMFD_XATTR, name, strlen(name), 0);
	return fd;
}

int emu_backing(struct emu_alloc *a)
{
	if (a->fd >= 0 || a->kind != EMU_OBJ_MEMORY)
		return 0;
	int dev = a->prop.location.type == CU_MEM_LOCATION_TYPE_HOST ? 0 : a->prop.location.id;
	int fd = emu_memfd(emu_mem_kind(&a->prop), dev, (unsigned)a->prop.requestedHandleTypes, a->size);
	if (fd < 0)
		return fd;
	a->fd = fd;
	return 0;
}

int emu_live_memory(void)
{
	int n = 0;
	pthread_mutex_lock(&emu.lock);
	const struct emu_alloc *a;
	hmap_for_each(&emu.allocs, a)
		n += a->kind == EMU_OBJ_MEMORY;
	pthread_mutex_unlock(&emu.lock);
	return n;
}

EMU_API int cuemu_live_allocations(void)
{
	return emu_live_memory();
}

EMU_API unsigned long long cuemu_mapped_bytes(int placed)
{
	unsigned long long total = 0;
	pthread_mutex_lock(&emu.lock);
	for (struct itree_node *n = itree_first_from(&emu.mappings, 0); n; n = itree_next(&emu.mappings, n)) {
		const struct emu_mapping *m = (const struct emu_mapping *)n;
		if (m->alloc->kind == EMU_OBJ_MEMORY && (!placed || m->placed))
			total += n->end - n->start;
	}
	pthread_mutex_unlock(&emu.lock);
	return total;
}

struct emu_alloc *emu_alloc_get(CUmemGenericAllocationHandle h)
{
	struct emu_alloc *a = hmap_get(&emu.allocs, h);
	return a && a->handle_refs ? a : NULL;
}

struct emu_mapping *emu_mapping_at(uint64_t va)
{
	struct itree_node *n = itree_find(&emu.mappings, va);
	return n ? (struct emu_mapping *)n : NULL;
}

void emu_alloc_free(struct emu_alloc *a)
{
	if (a->counted)
		emu.dev[a->prop.location.id].used -= a->size;
	if (a->kind == EMU_OBJ_MULTICAST)
		emu_mc_destroy(a);
	if (a->fd >= 0)
		close(a->fd);
	hostmem_free(a->saved, a->size, COUNT_EMU_MMAP);
	hmap_del(&emu.allocs, a->handle);
	free(a);
}

void emu_alloc_unref(struct emu_alloc *a)
{
	if (!a->handle_refs && !a->map_refs)
		emu_alloc_free(a);
}

/* A new allocation object holding fd; NULL when out of memory (fd not closed). */
struct emu_alloc *emu_alloc_new(enum emu_obj_kind kind, int fd, size_t size, const CUmemAllocationProp *prop)
{
	struct emu_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->kind = kind;
	a->fd = fd;
	a->size = size;
	a->prop = *prop;
	a->handle_refs = 1;
	a->handle = emu.next_handle++;
	if (hmap_put(&emu.allocs, a->handle, a) < 0) {
		free(a);
		return NULL;
	}
	return a;
}

/* ---- reservations ---- */

CUresult emu_address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr)
{
	if (!ptr || !size || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment & (alignment - 1))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < emu.granularity)
		alignment = emu.granularity;
	struct emu_reservation *r = calloc(1, sizeof(*r));
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *base = MAP_FAILED;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	if (addr && (addr & (alignment - 1)) == 0)
		base = emu_mmap((void *)addr, size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
	if (base == MAP_FAILED) {
		size_t span = size + alignment;
		uint8_t *raw = emu_mmap(NULL, span, PROT_NONE, flags, -1, 0);
		if (raw == MAP_FAILED) {
			free(r);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		uintptr_t start = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
		if (start > (uintptr_t)raw)
			emu_munmap(raw, start - (uintptr_t)raw);
		size_t tail = (uintptr_t)raw + span - (start + size);
		if (tail)
			emu_munmap((void *)(start + size), tail);
		base = (void *)start;
	}
	r->node.start = (uintptr_t)base;
	r->node.end = (uintptr_t)base + size;
	pthread_mutex_lock(&emu.lock);
	int rc = itree_insert(&emu.reservations, &r->node);
	pthread_mutex_unlock(&emu.lock);
	if (rc < 0) {
		emu_munmap(base, size);
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = (CUdeviceptr)(uintptr_t)base;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				     unsigned long long flags)
{
	(void)flags;
	EMU_CALL(cuMemAddressReserve, emu_address_reserve(ptr, size, alignment, addr));
}

CUresult emu_address_free(CUdeviceptr ptr, size_t size)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct itree_node *n = itree_find(&emu.reservations, ptr);
	struct emu_reservation *r = (struct emu_reservation *)n;
	if (!r || r->node.start != ptr || r->node.end - r->node.start != size || r->mappings) {
		/* Whole reservations only, and only once nothing is mapped in them. */
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	itree_remove(&emu.reservations, &r->node);
	emu_revoke_flush(); /* nothing queued may land on the range once it is free */
	emu_munmap((void *)(uintptr_t)ptr, size);
	free(r);
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	EMU_CALL(cuMemAddressFree, emu_address_free(ptr, size));
}

/* ---- allocations ---- */

/* Device memory, or host memory on a NUMA node (HOST_NUMA) or anywhere (HOST),
 * as NCCL allocates its host buffers. */
CUresult emu_check_prop(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
		if (prop->location.id < 0 || prop->location.id >= emu.ndev)
			return CUDA_ERROR_INVALID_DEVICE;
	} else if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
		if (prop->location.id < 0 || prop->location.id >= EMU_MAX_NUMA_NODES)
			return CUDA_ERROR_INVALID_VALUE;
	} else if (prop->location.type != CU_MEM_LOCATION_TYPE_HOST) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	unsigned types = (unsigned)prop->requestedHandleTypes;
	if (types & ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC))
		return CUDA_ERROR_NOT_SUPPORTED; /* Win32 handles are not emulated */
	return CUDA_SUCCESS;
}

CUresult emu_mem_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			unsigned long long flags)
{
	if (!handle || flags || !size || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_check_prop(prop);
	if (rc)
		return rc;
	int dev = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ? 0 : prop->location.id;
	bool host = emu_on_host(prop);
	pthread_mutex_lock(&emu.lock);
	struct emu_device *d = host ? NULL : &emu.dev[dev];
	if (d && size > d->capacity - d->used) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	/* Backed by a memfd only when first mapped, exported or bound (emu_backing):
	 * a process may hold far more allocations than it may hold open files. */
	struct emu_alloc *a = emu_alloc_new(EMU_OBJ_MEMORY, -1, size, prop);
	if (!a) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (d) {
		a->counted = true; /* host memory is not charged to a device */
		d->used += size;
	}
	emu_mark_cuda_process();
	*handle = a->handle;
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	EMU_CALL(cuMemCreate, emu_mem_create(handle, size, prop, flags));
}

CUresult emu_mem_release(CUmemGenericAllocationHandle h)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = emu_alloc_get(h);
	if (!a) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		/* Mappings keep the bytes alive until the last unmap. */
		a->handle_refs--;
		emu_alloc_unref(a);
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	EMU_CALL(cuMemRelease, emu_mem_release(handle));
}

/* ---- mappings ---- */

int emu_mapping_prot(const struct emu_mapping *m)
{
	int prot = PROT_NONE;
	if (m->host_access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
		return PROT_READ | PROT_WRITE;
	if (m->host_access == CU_MEM_ACCESS_FLAGS_PROT_READ)
		prot = PROT_READ;
	for (int d = 0; d < emu.ndev; d++) {
		if (m->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return PROT_READ | PROT_WRITE;
		if (m->access[d] == CU_MEM_ACCESS_FLAGS_PROT_READ)
			prot = PROT_READ;
	}
	return prot;
}

int emu_mapping_apply(struct emu_mapping *m, int prot_before)
{
	if (m->alloc->kind == EMU_OBJ_MULTICAST)
		return emu_mc_layout(m);
	size_t len = m->node.end - m->node.start;
	int prot = emu_mapping_prot(m);
	if (prot == prot_before || (prot == PROT_NONE && !m->placed))
		return 0;
	if (prot_before == PROT_NONE || !m->placed) {
		/* Access granted where there was none: nothing of the range was
		 * faulted in, so one mapping of the memory with its protection,
		 * populated, replaces the inaccessible one (the reservation's, until
		 * the first grant): one call where placing the memory, changing its
		 * protection and faulting it in took three. */
		void *p = emu_mmap((void *)(uintptr_t)m->node.start, len, prot, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
				   m->alloc->fd, (off_t)m->offset);
		if (p == MAP_FAILED)
			return -errno;
		m->placed = true;
		return 0;
	}
	if (emu_mprotect((void *)(uintptr_t)m->node.start, len, prot) < 0)
		return -errno;
	/* Device memory is resident once accessible: fault it in now, in one call,
	 * rather than a page at a time on first touch (best effort). */
	if (prot != PROT_NONE)
		emu_madvise((void *)(uintptr_t)m->node.start, len,
			    prot & PROT_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
	return 0;
}

CUresult emu_mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		     unsigned long long flags)
{
	if (flags || !ptr || !size || !aligned(ptr) || !aligned(size) || !aligned(offset))
		return CUDA_ERROR_INVALID_VALUE;
	/* cuda.h: mapping a multicast object blocks until every device of its team
	 * was added (bounded here). The shared page lives while the handle does. */
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *pre = emu_alloc_get(h);
	struct emu_mc_shared *team = pre && pre->kind == EMU_OBJ_MULTICAST ? pre->mc : NULL;
	pthread_mutex_unlock(&emu.lock);
	if (team) {
		CUresult w = emu_mc_wait_team(team);
		if (w)
			return w;
	}
	CUresult rc = CUDA_SUCCESS;
	struct emu_mapping *m = NULL;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = emu_alloc_get(h);
	if (!a || offset > a->size || size > a->size - offset) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	struct emu_reservation *r = (struct emu_reservation *)itree_find(&emu.reservations, ptr);
	if (!r || ptr + size > r->node.end || ptr + size < ptr) {
		rc = CUDA_ERROR_INVALID_VALUE; /* must lie inside one reservation */
		goto out;
	}
	struct itree_node *next = itree_first_from(&emu.mappings, ptr);
	if (next && next->start < ptr + size) {
		rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	m->node.start = ptr;
	m->node.end = ptr + size;
	m->alloc = a;
	m->offset = offset;
	if (a->kind == EMU_OBJ_MEMORY) {
		/* Inaccessible until cuMemSetAccess grants a location access: the
		 * range stays the reservation's until then (emu_mapping_apply). */
		if (emu_backing(a) < 0) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
	} else if (emu_mc_layout(m) < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	itree_insert(&emu.mappings, &m->node); /* cannot overlap: checked above */
	r->mappings++;
	a->map_refs++;
	m = NULL;
out:
	free(m);
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			  unsigned long long flags)
{
	EMU_CALL(cuMemMap, emu_mem_map(ptr, size, offset, handle, flags));
}

/* The mappings that exactly tile [ptr, ptr + size), in address order, in *out
 * (malloc'ed). Returns the count, or 0 when the range is not tiled by whole
 * mappings. Caller holds emu.lock. */
static size_t tile(CUdeviceptr ptr, size_t size, struct emu_mapping ***out)
{
	*out = NULL;
	if (!size || ptr + size < ptr)
		return 0;
	size_t n = 0, cap = 0;
	struct emu_mapping **list = NULL;
	uint64_t at = ptr;
	struct itree_node *node = itree_find(&emu.mappings, ptr);
	while (at < ptr + size) {
		if (!node || node->start != at || node->end > ptr + size)
			goto fail;
		if (n == cap) {
			cap = cap ? cap * 2 : 4;
			struct emu_mapping **grown = realloc(list, cap * sizeof(*list));
			if (!grown)
				goto fail;
			list = grown;
		}
		list[n++] = (struct emu_mapping *)node;
		at = node->end;
		node = itree_next(&emu.mappings, node);
	}
	*out = list;
	return n;
fail:
	free(list);
	return 0;
}

CUresult emu_mem_unmap(CUdeviceptr ptr, size_t size)
{
	if (!aligned(ptr) || !aligned(size))
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_mapping **list;
	pthread_mutex_lock(&emu.lock);
	size_t n = tile(ptr, size, &list);
	if (!n) {
		pthread_mutex_unlock(&emu.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < n; i++) {
		struct emu_mapping *m = list[i];
		size_t len = m->node.end - m->node.start;
		if (emu_mapping_holds_range(m))
			emu_revoke(m->node.start, len); /* back to an inaccessible part of the reservation */
		struct emu_reservation *r = (struct emu_reservation *)itree_find(&emu.reservations, m->node.start);
		if (r)
			r->mappings--;
		itree_remove(&emu.mappings, &m->node);
		m->alloc->map_refs--;
		emu_alloc_unref(m->alloc);
		free(m);
	}
	free(list);
	pthread_mutex_unlock(&emu.lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	EMU_CALL(cuMemUnmap, emu_mem_unmap(ptr, size));
}

CUresult emu_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		CUmemLocationType t = desc[i].location.type;
		if (t != CU_MEM_LOCATION_TYPE_DEVICE && t != CU_MEM_LOCATION_TYPE_HOST &&
		    t != CU_MEM_LOCATION_TYPE_HOST_NUMA)
			return CUDA_ERROR_INVALID_VALUE;
		if (t == CU_MEM_LOCATION_TYPE_DEVICE && (desc[i].location.id < 0 || desc[i].location.id >= emu.ndev))
			return CUDA_ERROR_INVALID_DEVICE;
		if (t == CU_MEM_LOCATION_TYPE_HOST_NUMA &&
		    (desc[i].location.id < 0 || desc[i].location.id >= EMU_MAX_NUMA_NODES))
			return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	struct emu_mapping **list;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	size_t n = tile(ptr, size, &list);
	if (!n) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct emu_mapping *m = list[i];
		unsigned char before[EMU_MAX_DEVICES], host_before = m->host_access;
		memcpy(before, m->access, sizeof(before));
		int prot_before = emu_mapping_prot(m);
		/* Per location: a grant to one device leaves the others as they were.
		 * The CPU is one location however it is named (HOST or a NUMA node). */
		for (size_t j = 0; j < count; j++) {
			if (desc[j].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
				m->access[desc[j].location.id] = (unsigned char)desc[j].flags;
			else
				m->host_access = (unsigned char)desc[j].flags;
		}
		if (emu_mapping_apply(m, prot_before) < 0) {
			m->host_access = host_before;
			memcpy(m->access, before, sizeof(before));
			emu_mapping_apply(m, -1); /* whatever it is now */
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
	}
	free(list);
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	EMU_CALL(cuMemSetAccess, emu_set_access(ptr, size, desc, count));
}

static CUresult get_access(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
	bool cpu = loc && (loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA);
	if (!flags || !loc || (!cpu && loc->type != CU_MEM_LOCATION_TYPE_DEVICE))
		return CUDA_ERROR_INVALID_VALUE;
	if (!cpu && (loc->id < 0 || loc->id >= emu.ndev))
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_mapping *m = emu_mapping_at(ptr);
	if (m)
		*flags = cpu ? m->host_access : m->access[loc->id];
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	EMU_CALL(cuMemGetAccess, get_access(flags, location, ptr));
}
