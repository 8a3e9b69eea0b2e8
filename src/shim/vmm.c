/* SPDX-License-Identifier: MIT */
/* The wrapped VMM calls (DESIGN.md §4). Each tracked call runs the driver call
 * and the bookkeeping under tbl.lock, and prepares what bookkeeping needs before
 * calling the driver; where it still fails after the driver succeeded, the
 * driver call is undone: the tables never disagree with the driver. Calls on
 * objects the shim does not track go straight to the driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "shim.h"

CUresult tracking_begin(const char *call, const struct shim_identity **me)
{
	const char *why = NULL;
	*me = shim_identity(&why);
	if (!*me) {
		LOG_AT(LOG_ERROR, "%s refused: %s", call, why);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return shim_mutation_allowed(call);
}

bool refuse_in_fork_child(const char *call)
{
	if (!shim_forked_child)
		return false;
	LOG_AT(LOG_ERROR,
	       "%s on a tracked handle refused: this process was forked from a process that tracks "
	       "CUDA VMM state (exec or spawn the child instead)",
	       call);
	return true;
}

static size_t granularity_of(const CUmemAllocationProp *prop)
{
	size_t g = 0;
	if (!aux.cuMemGetAllocationGranularity ||
	    aux.cuMemGetAllocationGranularity(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
		g = 0;
	return g;
}

/* Refusals common to every call on a tracked object. Returns CUDA_SUCCESS to go on. */
CUresult tracked_call_allowed(const char *call)
{
	if (refuse_in_fork_child(call))
		return CUDA_ERROR_NOT_SUPPORTED;
	return shim_mutation_allowed(call);
}

void forget_alloc(struct shim_alloc *a)
{
	if (a->handles || a->mappings || a->mc_binds)
		return;
	exports_forget(a);
	/* Its kept capability goes, unless it names this process's own allocation
	 * and this is an import of it (the creator's record still exports it). */
	const struct shim_identity *me = shim_self();
	if (!id_is_zero(&a->token) && (a->role == SHIM_ROLE_CREATOR || !me || !id_equal(&a->creator, &me->id)))
		cap_forget(&a->id);
	struct shim_mc *mc = a->mc;
	hostcopy_forget(a); /* (a copy is only ever held between prepare and restore) */
	tbl_alloc_free(a);
	if (!mc)
		return;
	/* The object is gone, and with it its binds: their members may go too. */
	for (size_t i = 0; i < mc->nbinds; i++) {
		struct shim_alloc *m = mc->binds[i].member;
		if (m && !--m->mc_binds) {
			life_drop_spare_ref(m);
			forget_alloc(m);
		}
	}
	free(mc->binds);
	free(mc->added);
	free(mc);
}

struct shim_alloc *track_created(const struct shim_identity *me, CUmemGenericAllocationHandle drv, size_t size,
				 CUmemGenericAllocationHandle *handle)
{
	struct shim_alloc *a = tbl_alloc_new();
	struct shim_handle *h = a ? tbl_handle_new(a) : NULL;
	if (!h) {
		if (a)
			tbl_alloc_free(a);
		real.cuMemRelease(drv);
		return NULL;
	}
	id_random(&a->id);
	a->creator = me->id;
	a->role = SHIM_ROLE_CREATOR;
	a->size = size;
	a->ctx_device = ctx_current_device();
	alloc_set_driver(a, drv); /* no token yet: no entry to fail */
	*handle = h->value;
	return a;
}

SHIM_API CUresult cuInit(unsigned int flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	CUresult rc = real.cuInit(flags);
	/* Every CUDA process of an interposed tree is a participant, even one that
	 * never shares anything (DESIGN.md §4.1): identity and endpoint start here. */
	if (rc == CUDA_SUCCESS && !shim_forked_child && !shim_self()) {
		const char *why = NULL;
		if (!shim_identity(&why))
			LOG_AT(LOG_WARN, "cuInit: no participant identity: %s", why);
	}
	return rc;
}

static CUresult cuMemCreate_once(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	/* Only allocations that can be shared as POSIX FDs are tracked. */
	if (!handle || !prop || !(prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return real.cuMemCreate(handle, size, prop, flags);
	const struct shim_identity *me;
	CUresult allowed = tracking_begin("cuMemCreate", &me);
	if (allowed)
		return allowed;
	CUmemGenericAllocationHandle drv = 0;
	pthread_mutex_lock(&tbl.lock);
	CUresult rc = shim_mutation_allowed("cuMemCreate"); /* (a step may have begun since the gate) */
	if (rc) {
		pthread_mutex_unlock(&tbl.lock);
		return rc;
	}
	rc = real.cuMemCreate(&drv, size, prop, flags);
	if (rc == CUDA_SUCCESS) {
		struct shim_alloc *a = track_created(me, drv, size, handle);
		if (!a) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			a->prop = *prop;
			a->granularity = granularity_of(prop);
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			      unsigned long long flags)
{
	SHIM_GATED(cuMemCreate_once(handle, size, prop, flags));
}

static CUresult cuMemRelease_once(CUmemGenericAllocationHandle handle)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&tbl.lock);
	struct shim_handle *h = tbl_handle_get(handle);
	if (!h) {
		CUresult rc = tbl_refuse_tagged("cuMemRelease", handle);
		if (!rc)
			rc = real.cuMemRelease(handle);
		if (rc == CUDA_SUCCESS) {
			/* (a raw import can be both: memory, then used as a multicast object) */
			unrestorable_del(UNRESTORABLE_MULTICAST, handle);
			unrestorable_del(UNRESTORABLE_FOREIGN, handle);
		}
		pthread_mutex_unlock(&tbl.lock);
		return rc;
	}
	CUresult rc = tracked_call_allowed("cuMemRelease");
	if (rc) {
		pthread_mutex_unlock(&tbl.lock);
		return rc;
	}
	struct shim_alloc *a = h->alloc;
	if (a->handles == 1 && !a->mc_binds) {
		/* The last logical handle: drop the driver reference the shim holds
		 * (mappings keep the bytes, as in the driver). Memory bound into a
		 * multicast object keeps it: prepare needs a handle to save it by. */
		rc = alloc_release_driver(a);
	}
	if (rc == CUDA_SUCCESS) {
		tbl_handle_drop(h);
		forget_alloc(a);
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	SHIM_GATED(cuMemRelease_once(handle));
}

static CUresult cuMemRetainAllocationHandle_once(CUmemGenericAllocationHandle *handle, void *addr)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&tbl.lock);
	struct shim_mapping *m = handle ? tbl_mapping_at((uintptr_t)addr) : NULL;
	if (!m) {
		pthread_mutex_unlock(&tbl.lock);
		return real.cuMemRetainAllocationHandle(handle, addr);
	}
	CUresult rc = tracked_call_allowed("cuMemRetainAllocationHandle");
	if (rc) {
		pthread_mutex_unlock(&tbl.lock);
		return rc;
	}
	struct shim_alloc *a = m->alloc;
	CUmemGenericAllocationHandle drv = a->driver;
	bool need_ref = !a->driver_ref;
	if (need_ref)
		rc = real.cuMemRetainAllocationHandle(&drv, addr);
	if (rc == CUDA_SUCCESS) {
		/* A retain is a reference: one more logical handle, released on its own. */
		struct shim_handle *h = tbl_handle_new(a);
		if (!h) {
			if (need_ref)
				real.cuMemRelease(drv);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			if (need_ref)
				alloc_set_driver(a, drv); /* its entry exists: cannot fail */
			*handle = h->value;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	SHIM_GATED(cuMemRetainAllocationHandle_once(handle, addr));
}

static CUresult cuMemMap_once(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			      unsigned long long flags)
{
	struct shim_handle *h;
	CUresult rc = tbl_lock_tracked("cuMemMap", handle, false, &h);
	if (rc || !h)
		return rc ? rc : real.cuMemMap(ptr, size, offset, handle, flags);
	rc = tracked_call_allowed("cuMemMap");
	struct shim_mapping *m = rc ? NULL : calloc(1, sizeof(*m));
	if (!m) {
		pthread_mutex_unlock(&tbl.lock);
		return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct shim_alloc *a = h->alloc;
	if (a->mc) {
		/* Mapping a multicast object blocks until its whole team was added
		 * (cuda.h): never with the table lock held. The handle is checked again
		 * afterwards; gone meanwhile, the mapping is undone. */
		uint64_t key = a->key;
		CUmemGenericAllocationHandle drv = a->driver;
		pthread_mutex_unlock(&tbl.lock);
		rc = real.cuMemMap(ptr, size, offset, drv, flags);
		pthread_mutex_lock(&tbl.lock);
		h = tbl_handle_get(handle);
		if (rc == CUDA_SUCCESS && (!h || h->alloc->key != key)) {
			real.cuMemUnmap(ptr, size);
			rc = CUDA_ERROR_INVALID_VALUE;
		}
		a = h ? h->alloc : NULL;
	} else {
		rc = real.cuMemMap(ptr, size, offset, a->driver, flags);
	}
	if (rc == CUDA_SUCCESS) {
		m->node.start = ptr;
		m->node.end = ptr + size;
		m->alloc = a;
		m->offset = offset;
		m->flags = flags;
		if (itree_insert(&tbl.mappings, &m->node) < 0) {
			/* The driver mapped what our tables say is taken: undo. */
			real.cuMemUnmap(ptr, size);
			rc = CUDA_ERROR_INVALID_VALUE;
		} else {
			a->mappings++;
			tbl_mapping_link(m);
			if (a->mc && offset + size > a->mc->used)
				a->mc->used = offset + size;
			m = NULL;
		}
	}
	free(m);
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			   unsigned long long flags)
{
	SHIM_GATED(cuMemMap_once(ptr, size, offset, handle, flags));
}

/* The tracked mappings overlapping [ptr, ptr + size) into *out (malloc'ed).
 * Returns the count, or -1 when one is only partly covered (the caller refuses
 * with CUDA_ERROR_NOT_SUPPORTED) or -2 when out of memory. */
static ssize_t overlapping(CUdeviceptr ptr, size_t size, struct shim_mapping ***out)
{
	*out = NULL;
	size_t n = 0;
	uint64_t end = ptr + size < ptr ? UINT64_MAX : ptr + size;
	struct itree_node *first = itree_first_from(&tbl.mappings, ptr);
	for (struct itree_node *x = first; x && x->start < end; x = itree_next(&tbl.mappings, x)) {
		if (x->start < ptr || x->end > end)
			return -1;
		n++;
	}
	if (!n)
		return 0;
	struct shim_mapping **list = malloc(n * sizeof(*list));
	if (!list)
		return -2;
	size_t i = 0;
	for (struct itree_node *x = first; x && x->start < end; x = itree_next(&tbl.mappings, x))
		list[i++] = (struct shim_mapping *)x;
	*out = list;
	return (ssize_t)n;
}

static CUresult cuMemUnmap_once(CUdeviceptr ptr, size_t size)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct shim_mapping **list;
	pthread_mutex_lock(&tbl.lock);
	ssize_t n = overlapping(ptr, size, &list);
	if (n == 0) {
		pthread_mutex_unlock(&tbl.lock);
		return real.cuMemUnmap(ptr, size);
	}
	CUresult rc;
	if (n == -1) {
		LOG_AT(LOG_ERROR,
		       "cuMemUnmap(%#llx, %zu) covers part of a tracked mapping: partial unmaps of shared "
		       "VMM memory are not supported",
		       (unsigned long long)ptr, size);
		rc = CUDA_ERROR_NOT_SUPPORTED;
	} else if (n < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else if ((rc = tracked_call_allowed("cuMemUnmap")) != CUDA_SUCCESS) {
		/* refused */
	} else {
		rc = real.cuMemUnmap(ptr, size);
		for (ssize_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
			struct shim_mapping *m = list[i];
			struct shim_alloc *a = m->alloc;
			itree_remove(&tbl.mappings, &m->node);
			tbl_mapping_unlink(m);
			free(m->access);
			free(m);
			a->mappings--;
			forget_alloc(a);
		}
	}
	free(list);
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	SHIM_GATED(cuMemUnmap_once(ptr, size));
}

static bool same_location(const CUmemLocation *a, const CUmemLocation *b)
{
	return a->type == b->type && a->id == b->id;
}

static CUresult cuMemSetAccess_once(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct shim_mapping **list;
	pthread_mutex_lock(&tbl.lock);
	ssize_t n = desc && count ? overlapping(ptr, size, &list) : 0;
	if (n == 0) {
		pthread_mutex_unlock(&tbl.lock);
		return real.cuMemSetAccess(ptr, size, desc, count);
	}
	CUresult rc = CUDA_SUCCESS;
	if (n == -1) {
		LOG_AT(LOG_ERROR, "cuMemSetAccess(%#llx, %zu) covers part of a tracked mapping: not supported",
		       (unsigned long long)ptr, size);
		rc = CUDA_ERROR_NOT_SUPPORTED;
	} else if (n < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		rc = tracked_call_allowed("cuMemSetAccess");
	}
	/* Room for every location first, so that merging cannot fail after the driver call. */
	for (ssize_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
		struct shim_mapping *m = list[i];
		if (m->naccess + count <= m->access_cap)
			continue;
		size_t cap = m->naccess + count;
		struct shim_access *grown = realloc(m->access, cap * sizeof(*grown));
		if (!grown) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		m->access = grown;
		m->access_cap = cap;
	}
	if (rc == CUDA_SUCCESS)
		rc = real.cuMemSetAccess(ptr, size, desc, count);
	for (ssize_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
		struct shim_mapping *m = list[i];
		/* Per location: a grant to one location leaves the others as they were. */
		for (size_t d = 0; d < count; d++) {
			size_t j = 0;
			while (j < m->naccess && !same_location(&m->access[j].location, &desc[d].location))
				j++;
			if (j == m->naccess)
				m->access[m->naccess++].location = desc[d].location;
			m->access[j].flags = desc[d].flags;
		}
	}
	if (n > 0)
		free(list);
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	SHIM_GATED(cuMemSetAccess_once(ptr, size, desc, count));
}

SHIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&tbl.lock);
	struct shim_handle *h = tbl_handle_get(handle);
	CUresult rc = h ? CUDA_SUCCESS : tbl_refuse_tagged("cuMemGetAllocationPropertiesFromHandle", handle);
	if (rc) {
		/* refused */
	} else if (h && h->alloc->mc) {
		rc = CUDA_ERROR_INVALID_VALUE; /* a multicast object has no allocation properties */
	} else if (h && prop && (h->alloc->detached || !h->alloc->driver_ref)) {
		*prop = h->alloc->prop; /* what the driver said, while it holds none */
		rc = CUDA_SUCCESS;
	} else {
		/* A quick local call: made under the lock so the handle cannot go away. */
		rc = real.cuMemGetAllocationPropertiesFromHandle(prop, h ? h->alloc->driver : handle);
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

/* What exporting a as a POSIX FD takes: the driver's agreement that it is
 * exportable (its FD is not handed out) and, for a creator, a token and an
 * export entry. The capability that names it in *cap (an importer forwards the
 * creator's). Caller holds tbl.lock. */
static CUresult posix_capability(struct shim_alloc *a, unsigned long long flags, struct shim_cap *cap)
{
	int raw = -1;
	CUresult rc = real.cuMemExportToShareableHandle(&raw, a->driver, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
							flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	close(raw);
	const struct shim_identity *me = shim_self(); /* made when this allocation was first tracked */
	if (!me)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (id_is_zero(&a->token) && a->role == SHIM_ROLE_CREATOR) {
		id_random(&a->token);
		if (exports_publish(a) < 0) {
			memset(&a->token, 0, sizeof(a->token));
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	cap->creator = a->creator;
	cap->alloc_id = a->id;
	cap->token = a->token;
	snprintf(cap->endpoint, sizeof(cap->endpoint), "%s",
		 a->role == SHIM_ROLE_CREATOR ? me->endpoint : a->creator_endpoint);
	return CUDA_SUCCESS;
}

static CUresult shim_export_capability_once(const char *call, CUmemGenericAllocationHandle handle, struct shim_cap *cap)
{
	pthread_mutex_lock(&tbl.lock);
	struct shim_handle *h = tbl_handle_get(handle);
	CUresult rc = h ? tracked_call_allowed(call) : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = posix_capability(h->alloc, 0, cap);
	if (!rc) {
		h->alloc->shared = true;
		h->alloc->shared_types |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

CUresult shim_export_capability(const char *call, CUmemGenericAllocationHandle handle, struct shim_cap *cap)
{
	SHIM_GATED(shim_export_capability_once(call, handle, cap));
}

static CUresult cuMemExportToShareableHandle_once(void *shareable, CUmemGenericAllocationHandle handle,
						  CUmemAllocationHandleType type, unsigned long long flags)
{
	struct shim_handle *h;
	CUresult rc = tbl_lock_tracked("cuMemExportToShareableHandle", handle, false, &h);
	if (rc || !h)
		return rc ? rc : real.cuMemExportToShareableHandle(shareable, handle, type, flags);
	struct shim_alloc *a = h->alloc;
	rc = tracked_call_allowed("cuMemExportToShareableHandle");
	if (rc)
		goto out;
	const struct shim_identity *me = shim_self();
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || (a->role == SHIM_ROLE_CREATOR && me && !me->serving)) {
		/* Shared some other way (FABRIC...): recorded, and refused at prepare.
		 * Or this process has no endpoint to redeem a capability: the
		 * driver's own FD, so that the application still shares (its
		 * tree, partly interposed, is refused at checkpoint). */
		rc = real.cuMemExportToShareableHandle(shareable, a->driver, type, flags);
		if (rc == CUDA_SUCCESS) {
			a->shared = true;
			a->shared_types |= (unsigned)type;
		}
		goto out;
	}
	if (!shareable) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	struct shim_cap cap;
	rc = posix_capability(a, flags, &cap);
	if (rc)
		goto out;
	int fd = cap_get(&cap.creator, &cap.alloc_id, &cap.token, cap.endpoint);
	if (fd < 0) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	a->shared = true;
	a->shared_types |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	*(int *)shareable = fd;
out:
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

SHIM_API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
					       CUmemAllocationHandleType type, unsigned long long flags)
{
	SHIM_GATED(cuMemExportToShareableHandle_once(shareable, handle, type, flags));
}

static CUresult cuMemImportFromShareableHandle_once(CUmemGenericAllocationHandle *handle, void *os_handle,
						    CUmemAllocationHandleType type)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	struct shim_cap cap;
	if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && handle && cap_parse((int)(intptr_t)os_handle, &cap))
		return shim_import_cap("cuMemImportFromShareableHandle", &cap, handle, NULL);
	/* A raw FD (from a process without the interposer, a memory service): the
	 * driver's import, untracked, and remembered so that QUIESCE refuses while
	 * it is held (the driver would not restore it natively). */
	CUresult rc = real.cuMemImportFromShareableHandle(handle, os_handle, type);
	if (rc == CUDA_SUCCESS && handle)
		unrestorable_add(UNRESTORABLE_FOREIGN, *handle);
	return rc;
}

SHIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
						 CUmemAllocationHandleType type)
{
	SHIM_GATED(cuMemImportFromShareableHandle_once(handle, os_handle, type));
}

static CUresult shim_import_cap_once(const char *call, const struct shim_cap *capp,
				     CUmemGenericAllocationHandle *handle, size_t *size)
{
	const struct shim_cap cap = *capp;
	const CUmemAllocationHandleType type = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	const struct shim_identity *me;
	CUresult allowed = tracking_begin(call, &me);
	if (allowed)
		return allowed;
	/* Redeemed without the table lock: the creator may be busy. */
	char err[700];
	struct shim_export_info info = {0};
	int raw = cap_redeem(&cap, &info, err, sizeof(err));
	if (raw < 0) {
		char hex[ID_HEX_LEN + 1];
		id_hex(&cap.alloc_id, hex);
		LOG_AT(LOG_ERROR, "%s: capability for allocation %s could not be redeemed: %s", call, hex, err);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_lock(&tbl.lock);
	CUmemGenericAllocationHandle drv = 0;
	CUmemAllocationProp prop = {0};
	/* (a step may have begun while it was redeemed; and the change is counted
	 * under the lock it is made under, for INSPECT's generation) */
	CUresult rc = shim_mutation_allowed(call);
	if (rc == CUDA_SUCCESS)
		rc = real.cuMemImportFromShareableHandle(&drv, (void *)(intptr_t)raw, type);
	close(raw); /* the raw driver FD never reaches the application */
	if (rc == CUDA_SUCCESS) {
		/* A multicast object has no allocation properties; EXPORT said what it is. */
		struct shim_mc *mc = info.mc_devices ? mc_record_new(info.mc_devices, info.size) : NULL;
		if (!info.mc_devices)
			rc = real.cuMemGetAllocationPropertiesFromHandle(&prop, drv);
		else if (!mc)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		struct shim_alloc *a = rc == CUDA_SUCCESS ? tbl_alloc_new() : NULL;
		struct shim_handle *h = a ? tbl_handle_new(a) : NULL;
		char *endpoint = h ? strdup(cap.endpoint) : NULL;
		if (!endpoint) {
			if (h)
				tbl_handle_drop(h);
			if (a)
				tbl_alloc_free(a);
			free(mc);
			real.cuMemRelease(drv);
			if (rc == CUDA_SUCCESS)
				rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			a->id = cap.alloc_id;
			a->creator = cap.creator;
			a->token = cap.token;
			a->role = SHIM_ROLE_IMPORTER;
			a->shared = true;
			a->shared_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
			a->size = info.size;
			/* r580 reports no handle types for an import (it cannot be
			 * exported again); it came by file descriptor, so its creator
			 * asked for that, and a holder's rebuild needs it. */
			if (!mc)
				prop.requestedHandleTypes |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
			a->prop = prop;
			a->mc = mc;
			a->granularity = mc ? mc_granularity(&mc->prop) : granularity_of(&prop);
			a->creator_endpoint = endpoint;
			a->ctx_device = ctx_current_device();
			alloc_set_driver(a, drv); /* an importer: no entry */
			*handle = h->value;
			if (size)
				*size = info.size;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

CUresult shim_import_cap(const char *call, const struct shim_cap *capp, CUmemGenericAllocationHandle *handle,
			 size_t *size)
{
	SHIM_GATED(shim_import_cap_once(call, capp, handle, size));
}

SHIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&tbl.lock);
	struct itree_node *n = itree_first_from(&tbl.mappings, ptr);
	bool mapped = n && n->start < ptr + size;
	pthread_mutex_unlock(&tbl.lock);
	if (mapped)
		return CUDA_ERROR_INVALID_VALUE; /* tracked mappings still live in this range */
	return real.cuMemAddressFree(ptr, size);
}

/* Sparse array mapping is not tracked: a logical handle must never reach the
 * driver through it (undefined behaviour on a real driver). */
static CUresult map_array_refused(const CUarrayMapInfo *info, unsigned int count)
{
	for (unsigned i = 0; info && i < count; i++) {
		if (info[i].memHandleType != CU_MEM_HANDLE_TYPE_GENERIC ||
		    (info[i].memHandle.memHandle & SHIM_HANDLE_TAG_MASK) != SHIM_HANDLE_TAG)
			continue;
		LOG_AT(LOG_ERROR,
		       "cuMemMapArrayAsync: entry %u maps tracked (POSIX-shareable) VMM memory %#llx into a "
		       "sparse array: not supported by the interposer",
		       i, (unsigned long long)info[i].memHandle.memHandle);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuMemMapArrayAsync(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
	if (!shim_resolve_driver() || !real.cuMemMapArrayAsync)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult rc = map_array_refused(mapInfoList, count);
	return rc ? rc : real.cuMemMapArrayAsync(mapInfoList, count, hStream);
}

SHIM_API CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
	if (!shim_resolve_driver() || !real.cuMemMapArrayAsync_ptsz)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult rc = map_array_refused(mapInfoList, count);
	return rc ? rc : real.cuMemMapArrayAsync_ptsz(mapInfoList, count, hStream);
}
