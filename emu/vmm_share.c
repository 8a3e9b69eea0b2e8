/* SPDX-License-Identifier: MIT */
/* The VMM calls that share and describe allocations: POSIX FD export and
 * import, retain, properties, granularity, memory info, host registration
 * (the rest of the VMM calls: vmm.c). */
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

/* The name of the memfd behind fd ("cuemu-..."), NUL-terminated: its length,
 * or -1 when fd is no memfd. */
static ssize_t memfd_name(int fd, char *out, size_t len)
{
	ssize_t n = fgetxattr(fd, MEMFD_XATTR, out, len - 1);
	if (n > 0) {
		out[n] = '\0';
		return n;
	}
	char link[64], target[256];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n <= 0)
		return -1;
	target[n] = '\0';
	static const char prefix[] = "/memfd:";
	if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
		return -1;
	return snprintf(out, len, "%s", target + sizeof(prefix) - 1);
}

/* ---- sharing ---- */

static CUresult export_handle(void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
			      unsigned long long flags)
{
	if (!shareable || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && type != CU_MEM_HANDLE_TYPE_FABRIC)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* A slow driver, for races; read at each export, not with the other knobs
	 * (init.c): a test slows one export of its own process. */
	const char *stall = getenv("CUEMU_EXPORT_STALL_MS");
	if (stall)
		usleep((useconds_t)atoi(stall) * 1000u);
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = emu_alloc_get(h);
	if (!a || !(a->prop.requestedHandleTypes & type)) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
		/* An opaque fabric handle: exportable, never importable here (no IMEX). */
		CUmemFabricHandle fh;
		memset(&fh, 0, sizeof(fh));
		snprintf((char *)fh.data, sizeof(fh.data), "cuemu-fabric-%d-%llx", getpid(), (unsigned long long)h);
		memcpy(shareable, &fh, sizeof(fh));
		goto out;
	}
	if (a->native_restored && emu.profile == EMU_PROFILE_R615) {
		/* r615: an allocation brought back by the native restore is no longer exportable. */
		LOG_AT(LOG_INFO, "r615 profile: export of natively restored allocation %#llx refused",
		       (unsigned long long)h);
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	int fd = emu_backing(a) < 0 ? -1 : fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*(int *)shareable = fd;
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	EMU_CALL(cuMemExportToShareableHandle, export_handle(shareableHandle, handle, handleType, flags));
}

int emu_mc_attach(struct emu_alloc *a);

CUresult emu_import_fd(CUmemGenericAllocationHandle *handle, int fd)
{
	char name[256];
	if (fd < 0 || memfd_name(fd, name, sizeof(name)) <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	char kind[8];
	int dev;
	unsigned types;
	struct stat st;
	/* Only our own exports: "cuemu-<kind>-d<dev>-t<types>-..." */
	if (sscanf(name, "cuemu-%7[a-z]-d%d-t%u-", kind, &dev, &types) != 3 || fstat(fd, &st) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	bool mc = strcmp(kind, "mc") == 0;
	CUmemLocationType where = !strcmp(kind, "hnuma")  ? CU_MEM_LOCATION_TYPE_HOST_NUMA
				  : !strcmp(kind, "host") ? CU_MEM_LOCATION_TYPE_HOST
							  : CU_MEM_LOCATION_TYPE_DEVICE;
	bool known = mc || where != CU_MEM_LOCATION_TYPE_DEVICE || !strcmp(kind, "mem");
	if (!known || dev < 0 || (where == CU_MEM_LOCATION_TYPE_DEVICE && dev >= emu.ndev) || st.st_size <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (own < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* r580 reports no handle types for an imported allocation, and refuses
	 * to export it again (CUDA_ERROR_INVALID_VALUE): GPU script G1, E. */
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = (CUmemAllocationHandleType)(mc ? types : 0),
		.location = {.type = where, .id = dev},
	};
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = emu_alloc_new(mc ? EMU_OBJ_MULTICAST : EMU_OBJ_MEMORY, own, (size_t)st.st_size, &prop);
	if (!a) {
		close(own);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->imported = true;
	if (mc && emu_mc_attach(a) < 0) {
		a->handle_refs = 0;
		emu_alloc_free(a);
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	emu_mark_cuda_process();
	*handle = a->handle;
out:
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

static CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle, CUmemAllocationHandleType type)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED; /* FABRIC imports need an IMEX daemon: not emulated */
	return emu_import_fd(handle, (int)(intptr_t)os_handle);
}

EMU_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
						CUmemAllocationHandleType shHandleType)
{
	EMU_CALL(cuMemImportFromShareableHandle, import_handle(handle, osHandle, shHandleType));
}

static CUresult retain_handle(CUmemGenericAllocationHandle *handle, void *addr)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_mapping *m = emu_mapping_at((uintptr_t)addr);
	if (!m) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		/* Same handle value as the one mapped; one more reference to release. */
		m->alloc->handle_refs++;
		*handle = m->alloc->handle;
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	EMU_CALL(cuMemRetainAllocationHandle, retain_handle(handle, addr));
}

static CUresult get_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&emu.lock);
	struct emu_alloc *a = emu_alloc_get(h);
	if (!a || a->kind != EMU_OBJ_MEMORY)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		*prop = a->prop;
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	EMU_CALL(cuMemGetAllocationPropertiesFromHandle, get_props(prop, handle));
}

static CUresult granularity(size_t *gran, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)
{
	if (!gran)
		return CUDA_ERROR_INVALID_VALUE;
	if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_check_prop(prop);
	if (rc)
		return rc;
	*gran = emu.granularity;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	EMU_CALL(cuMemGetAllocationGranularity, granularity(gran, prop, option));
}

static CUresult mem_info(size_t *free_bytes, size_t *total)
{
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&emu.lock);
	struct emu_device *d = &emu.dev[emu_current->device];
	*total = d->capacity;
	*free_bytes = d->capacity - d->used;
	pthread_mutex_unlock(&emu.lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	EMU_CALL(cuMemGetInfo_v2, mem_info(free_bytes, total));
}

/* Host memory is already what a copy reads and writes, so pinning changes
 * nothing but the books: as documented, a range overlapping one registered
 * already fails with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, and unregistering
 * what is not the start of a registered range with
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED. */
static CUresult host_register(void *p, size_t size)
{
	if (!p || !size || (uintptr_t)p + size < (uintptr_t)p)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct itree_node *n = calloc(1, sizeof(*n));
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->start = (uintptr_t)p;
	n->end = (uintptr_t)p + size;
	pthread_mutex_lock(&emu.lock);
	struct itree_node *at = itree_first_from(&emu.pinned, n->start);
	CUresult rc = at && at->start < n->end ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_SUCCESS;
	if (!rc && itree_insert(&emu.pinned, n) < 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&emu.lock);
	if (rc)
		free(n);
	return rc;
}

static CUresult host_unregister(void *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&emu.lock);
	struct itree_node *n = itree_find(&emu.pinned, (uintptr_t)p);
	bool found = n && n->start == (uintptr_t)p;
	if (found)
		itree_remove(&emu.pinned, n);
	pthread_mutex_unlock(&emu.lock);
	if (found)
		free(n);
	return found ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

EMU_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	(void)Flags;
	EMU_CALL(cuMemHostRegister_v2, host_register(p, bytesize));
}

EMU_API CUresult cuMemHostUnregister(void *p)
{
	EMU_CALL(cuMemHostUnregister, host_unregister(p));
}
