/* SPDX-License-Identifier: MIT */
/* Multicast objects. Their shared state (device count, size, which devices were
 * added) lives in the object's memfd so that processes importing the object see
 * each other's cuMulticastAddDevice, and a bind waits until the team is complete.
 *
 * Data model (multimem semantics are not emulated): a mapping of a multicast
 * handle shows, at each offset, the member memory that this process bound there
 * (the most recent bind wins where several devices' bindings overlap); offsets
 * this process did not bind are inaccessible. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "emu.h"

#define MC_MAGIC 0x434d5543u /* "CUMC" */
#define MC_PAGE 4096
#define MC_ROUND_R615 ((size_t)512 << 20)

int emu_mc_attach(struct emu_alloc *a);

static bool aligned(uint64_t v)
{
	return (v & (emu.granularity - 1)) == 0;
}

int emu_mc_attach(struct emu_alloc *a)
{
	void *p = emu_mmap(NULL, MC_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (p == MAP_FAILED)
		return -1;
	struct emu_mc_shared *mc = p;
	if (mc->magic != MC_MAGIC || !mc->num_devices || !mc->size) {
		emu_munmap(p, MC_PAGE);
		return -1;
	}
	a->mc = mc;
	a->size = mc->size;
	emu.multicast_objects++;
	return 0;
}

void emu_mc_destroy(struct emu_alloc *a)
{
	for (size_t i = 0; i < a->nbindings; i++) {
		struct emu_alloc *member = a->bindings[i].member;
		member->map_refs--;
		emu_alloc_unref(member);
	}
	free(a->bindings);
	a->bindings = NULL;
	a->nbindings = 0;
	if (a->mc) {
		emu_munmap(a->mc, MC_PAGE);
		a->mc = NULL;
		emu.multicast_objects--;
	}
}

int emu_mc_layout(struct emu_mapping *m)
{
	size_t len = m->node.end - m->node.start;
	void *base = (void *)(uintptr_t)m->node.start;
	if (emu_mmap(base, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
	    MAP_FAILED)
		return -1;
	int prot = emu_mapping_prot(m);
	if (prot == PROT_NONE)
		return 0;
	struct emu_alloc *a = m->alloc;
	for (size_t i = 0; i < a->nbindings; i++) {
		struct emu_mc_binding *b = &a->bindings[i];
		size_t lo = b->mc_offset > m->offset ? b->mc_offset : m->offset;
		size_t hi_b = b->mc_offset + b->size, hi_m = m->offset + len;
		size_t hi = hi_b < hi_m ? hi_b : hi_m;
		if (lo >= hi || b->member->fd < 0)
			continue;
		void *at = (uint8_t *)base + (lo - m->offset);
		if (emu_mmap(at, hi - lo, prot, MAP_SHARED | MAP_FIXED, b->member->fd,
			     (off_t)(b->member_offset + (lo - b->mc_offset))) == MAP_FAILED)
			return -1;
	}
	return 0;
}

/* Lay out again every mapping of multicast object a. Caller holds emu.lock. */
static void relayout(struct emu_alloc *a)
{
	for (struct itree_node *n = itree_first_from(&emu.mappings, 0); n; n = itree_next(&emu.mappings, n)) {
		struct emu_mapping *m = (struct emu_mapping *)n;
		if (m->alloc == a && emu_mc_layout(m) < 0)
			LOG_AT(LOG_WARN, "multicast mapping at %#llx could not be laid out",
			       (unsigned long long)n->start);
	}
}

static struct emu_alloc *mc_get(CUmemGenericAllocationHandle h)
{
	struct emu_alloc *a = emu_alloc_get(h);
	return a && a->kind == EMU_OBJ_MULTICAST ? a : NULL;
}

static CUresult mc_create(CUmemGenericAllocationHandle *out, const CUmulticastObjectProp *prop)
{
	if (!out || !prop || !prop->numDevices || prop->numDevices > (unsigned)emu.ndev || !prop->size ||
	    !aligned(prop->size) || prop->flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->handleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	size_t size = prop->size;
	if (emu.profile == EMU_PROFILE_R615) /* r615 rounds the capacity up to 512 MiB */
		size = (size + MC_ROUND_R615 - 1) / MC_ROUND_R615 * MC_ROUND_R615;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	int fd = emu_memfd("mc", 0, (unsigned)prop->handleTypes, MC_PAGE);
	if (fd < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	struct emu_mc_shared init = {.magic = MC_MAGIC,
				     .num_devices = prop->numDevices,
				     .size = size,
				     .requested = prop->size};
	if (pwrite(fd, &init, sizeof(init), 0) != (ssize_t)sizeof(init)) {
		close(fd);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	CUmemAllocationProp ap = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = (CUmemAllocationHandleType)prop->handleTypes,
		.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
	};
	struct emu_alloc *a = calloc(1, sizeof(*a));
	if (!a) {
		close(fd);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->kind = EMU_OBJ_MULTICAST;
	a->fd = fd;
	a->prop = ap;
	a->handle_refs = 1;
	a->handle = emu.next_handle++;
	if (emu_mc_attach(a) < 0 || hmap_put(&emu.allocs, a->handle, a) < 0) {
		emu_mc_destroy(a);
		close(fd);
		free(a);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	emu_mark_cuda_process();
	*out = a->handle;
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop)
{
	EMU_CALL(cuMulticastCreate, mc_create(mcHandle, prop));
}

static CUresult mc_add_device(CUmemGenericAllocationHandle h, CUdevice dev)
{
	if (dev < 0 || dev >= emu.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = mc_get(h);
	if (!a) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	uint64_t bit = 1ull << dev, old = atomic_load(&a->mc->added_mask);
	do {
		if ((old & bit) || (unsigned)__builtin_popcountll(old) >= a->mc->num_devices) {
			rc = CUDA_ERROR_INVALID_VALUE; /* already added, or the team is full */
			goto out;
		}
	} while (!atomic_compare_exchange_weak(&a->mc->added_mask, &old, old | bit));
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev)
{
	EMU_CALL(cuMulticastAddDevice, mc_add_device(mcHandle, dev));
}

/* Validate a bind under emu.lock; returns the object. Whether the member's
 * device joined the team is only known once the team is complete (the driver
 * waits for that first): checked when team_complete. */
static CUresult bind_check(CUmemGenericAllocationHandle h, size_t mc_offset, struct emu_alloc *member,
			   size_t member_offset, size_t size, bool team_complete, struct emu_alloc **mc_out)
{
	struct emu_alloc *a = mc_get(h);
	if (!a || !member || member->kind != EMU_OBJ_MEMORY || !size || !aligned(mc_offset) ||
	    !aligned(member_offset) || !aligned(size) || mc_offset > a->size || size > a->size - mc_offset ||
	    member_offset > member->size || size > member->size - member_offset)
		return CUDA_ERROR_INVALID_VALUE;
	int dev = member->prop.location.id;
	if (team_complete && !(atomic_load(&a->mc->added_mask) & (1ull << dev)))
		return CUDA_ERROR_INVALID_DEVICE; /* the member's device was never added */
	for (size_t i = 0; i < a->nbindings; i++) {
		struct emu_mc_binding *b = &a->bindings[i];
		if (b->device == dev && mc_offset < b->mc_offset + b->size && b->mc_offset < mc_offset + size)
			return CUDA_ERROR_INVALID_VALUE; /* overlaps a binding of the same device */
	}
	*mc_out = a;
	return CUDA_SUCCESS;
}

/* Wait, without emu.lock, until every device of the team was added (the driver
 * blocks here; the emulator gives up after CUEMU_MULTICAST_TIMEOUT_MS). */
CUresult emu_mc_wait_team(struct emu_mc_shared *mc)
{
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if ((unsigned)__builtin_popcountll(atomic_load(&mc->added_mask)) >= mc->num_devices)
			return CUDA_SUCCESS;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (ms >= (long)emu.mc_timeout_ms) {
			LOG_AT(LOG_WARN, "multicast bind or map: only %d of %u devices were added after %u ms",
			       __builtin_popcountll(atomic_load(&mc->added_mask)), mc->num_devices, emu.mc_timeout_ms);
			return CUDA_ERROR_SYSTEM_NOT_READY;
		}
		usleep(1000);
	}
}

/* member is named by handle (BindMem) or found at member_va (BindAddr). */
static CUresult mc_bind(CUmemGenericAllocationHandle h, size_t mc_offset, CUmemGenericAllocationHandle mem,
			uint64_t member_va, size_t member_offset, size_t size, unsigned long long flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	for (int pass = 0; pass < 2; pass++) {
		pthread_mutex_lock(&emu.lock);
		struct emu_alloc *member, *a = NULL;
		size_t off = member_offset;
		if (member_va) {
			struct emu_mapping *m = emu_mapping_at(member_va);
			member = m && member_va + size <= m->node.end ? m->alloc : NULL;
			off = m ? m->offset + (member_va - m->node.start) : 0;
		} else {
			member = emu_alloc_get(mem);
		}
		CUresult rc = bind_check(h, mc_offset, member, off, size, pass == 1, &a);
		if (rc || pass == 0) {
			struct emu_mc_shared *mc = a ? a->mc : NULL;
			/* The shared page stays mapped while the handle lives; a concurrent
			 * release during the wait is caught by the second validation. */
			pthread_mutex_unlock(&emu.lock);
			if (rc)
				return rc;
			rc = emu_mc_wait_team(mc);
			if (rc)
				return rc;
			continue;
		}
		struct emu_mc_binding *grown = emu_backing(member) < 0
						       ? NULL
						       : realloc(a->bindings, (a->nbindings + 1) * sizeof(*grown));
		if (!grown) {
			pthread_mutex_unlock(&emu.lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		a->bindings = grown;
		a->bindings[a->nbindings++] = (struct emu_mc_binding){
			.device = member->prop.location.id,
			.mc_offset = mc_offset,
			.size = size,
			.member = member,
			.member_offset = off,
		};
		member->map_refs++;
		relayout(a);
		pthread_mutex_unlock(&emu.lock);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_UNKNOWN;
}

EMU_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
				    CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
				    unsigned long long flags)
{
	EMU_CALL(cuMulticastBindMem, mc_bind(mcHandle, mcOffset, memHandle, 0, memOffset, size, flags));
}

EMU_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
				     size_t size, unsigned long long flags)
{
	if (!memptr)
		return CUDA_ERROR_INVALID_VALUE;
	EMU_CALL(cuMulticastBindAddr, mc_bind(mcHandle, mcOffset, 0, memptr, 0, size, flags));
}

static CUresult mc_unbind(CUmemGenericAllocationHandle h, CUdevice dev, size_t mc_offset, size_t size)
{
	if (dev < 0 || dev >= emu.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = mc_get(h);
	for (size_t i = 0; a && i < a->nbindings; i++) {
		struct emu_mc_binding *b = &a->bindings[i];
		if (b->device != dev || b->mc_offset != mc_offset || b->size != size)
			continue;
		struct emu_alloc *member = b->member;
		a->bindings[i] = a->bindings[--a->nbindings];
		member->map_refs--;
		emu_alloc_unref(member);
		relayout(a);
		rc = CUDA_SUCCESS;
		break;
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size)
{
	EMU_CALL(cuMulticastUnbind, mc_unbind(mcHandle, dev, mcOffset, size));
}

static CUresult emu_mc_granularity(size_t *gran, const CUmulticastObjectProp *prop, CUmulticastGranularity_flags option)
{
	if (!gran || !prop || !prop->numDevices || prop->numDevices > (unsigned)emu.ndev)
		return CUDA_ERROR_INVALID_VALUE;
	if (option == CU_MULTICAST_GRANULARITY_MINIMUM)
		*gran = emu.granularity;
	else if (option == CU_MULTICAST_GRANULARITY_RECOMMENDED)
		*gran = MC_ROUND_R615;
	else
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
					   CUmulticastGranularity_flags option)
{
	EMU_CALL(cuMulticastGetGranularity, emu_mc_granularity(granularity, prop, option));
}
