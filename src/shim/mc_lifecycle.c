/* SPDX-License-Identifier: MIT */
/* Multicast teardown and rebuild (DESIGN.md §8), the steps the coordinator
 * runs around the unicast ones:
 *
 *   PREPARE_MULTICAST         unbind every bind, unmap every multicast VA (the
 *                             reservation stays), release every multicast handle
 *   RESTORE_MULTICAST         the recorded creator of each object makes it anew
 *                             with the recorded properties
 *   RESTORE_MULTICAST_IMPORT  the others import it through the creator's
 *                             capability; everyone re-adds its own devices
 *   RESTORE_MULTICAST_BIND    (the team is complete) binds replayed, then the
 *                             multicast VAs mapped with their access
 *
 * Each step runs for the objects named by F_MC_REBUILD in the request (the
 * coordinator names every object taken down anywhere in the group), or, with
 * none named, for this process's objects with any part taken down. An object
 * still partly in place is taken down first, so that every participant of a
 * rebuilt object joins the same new object. Binds run without the table lock:
 * each waits for the whole team. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "cusnap/proto.h"
#include "cusnap/request.h"
#include "shim.h"

static bool any_part_detached(const struct shim_alloc *a)
{
	if (a->detached)
		return true;
	for (size_t i = 0; i < a->mc->nbinds; i++)
		if (a->mc->binds[i].detached)
			return true;
	for (const struct shim_mapping *m = a->maps; m; m = m->sibling)
		if (m->detached)
			return true;
	return false;
}

void mc_apply_device_map(struct shim_alloc *a, const int *map)
{
	struct shim_mc *mc = a->mc;
	for (size_t i = 0; i < mc->nadded; i++)
		if (mc->added[i] >= 0 && mc->added[i] < PROTO_MAX_DEVICES)
			mc->added[i] = map[mc->added[i]];
	for (size_t i = 0; i < mc->nbinds; i++)
		if (mc->binds[i].device >= 0 && mc->binds[i].device < PROTO_MAX_DEVICES)
			mc->binds[i].device = map[mc->binds[i].device];
}

/* Take down what is left of one object here, in the order both GPU-tested
 * peers use (DESIGN.md §8): unmap its VAs (reservations kept), unbind every
 * member, release the handle. */
static CUresult teardown(struct shim_alloc *a, struct life_result *r)
{
	struct shim_mc *mc = a->mc;
	CUresult rc = life_detach_mappings(a, r);
	if (rc)
		return rc;
	for (size_t i = 0; i < mc->nbinds; i++) {
		struct shim_mc_bind *b = &mc->binds[i];
		if (b->detached)
			continue;
		rc = a->detached ? CUDA_SUCCESS : real.cuMulticastUnbind(a->driver, b->device, b->mc_offset, b->size);
		if (rc) {
			life_fail(r, a, "cuMulticastUnbind(device %d, offset %zu, %zu bytes) failed: %s", b->device,
				  b->mc_offset, b->size, shim_cu_name(rc));
			return rc;
		}
		b->detached = true;
	}
	rc = life_release_ref(a, r);
	if (!rc)
		a->detached = true; /* the driver's object is gone from this process */
	return rc;
}

/* Does a step work on a? It does on the objects named in the request, or
 * with none named, on those with a part taken down (or made anew and not yet
 * joined). */
static bool selected(const struct cusnap_id *ids, size_t n, const struct shim_alloc *a)
{
	if (!n)
		return any_part_detached(a) || a->mc->fresh;
	for (size_t i = 0; i < n; i++)
		if (id_equal(&ids[i], &a->id))
			return true;
	return false;
}

/* The keys of the multicast records a step works on (malloc'ed, *n of them),
 * so that the work can go on without the lock. Returns a proto_status. */
static int selection(const uint8_t *payload, size_t len, uint64_t **keys, size_t *n, struct life_result *r)
{
	struct cusnap_id *ids;
	size_t nids;
	*keys = NULL;
	*n = 0;
	int st = req_mc_rebuild_decode(payload, len, &ids, &nids, r->msg, sizeof(r->msg));
	if (st != PROTO_OK)
		return st;
	pthread_mutex_lock(&tbl.lock);
	*keys = malloc((tbl.allocs.len ? tbl.allocs.len : 1) * sizeof(**keys));
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (!*keys)
			break;
		if (a->mc && selected(ids, nids, a))
			(*keys)[(*n)++] = a->key;
	}
	pthread_mutex_unlock(&tbl.lock);
	free(ids);
	if (!*keys) {
		snprintf(r->msg, sizeof(r->msg), "out of memory");
		return PROTO_E_INTERNAL;
	}
	return PROTO_OK;
}

int mc_prepare(struct life_result *r)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&tbl.lock);
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (rc)
			break;
		if (!a->mc)
			continue;
		rc = teardown(a, r);
		r->count += !rc;
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc ? PROTO_E_DRIVER : PROTO_OK;
}

/* Capacity to ask for: what the application asked, or what it used where the
 * driver had rounded the capacity up and it used more. */
static size_t capacity(const struct shim_alloc *a)
{
	const struct shim_mc *mc = a->mc;
	size_t want = mc->prop.size, g = a->granularity ? a->granularity : 1;
	if (mc->used > want)
		want = (mc->used + g - 1) / g * g;
	return want;
}

/* A rebuild step over the objects the request selects (body, on their keys):
 * PROTO_OK, PROTO_E_DRIVER when body failed (said in r), or the request's
 * refusal. */
static int over_selection(const uint8_t *payload, size_t len, struct life_result *r,
			  CUresult (*body)(const uint64_t *keys, size_t n, struct life_result *r))
{
	uint64_t *keys;
	size_t n;
	int prc = selection(payload, len, &keys, &n, r);
	if (prc)
		return prc;
	CUresult rc = body(keys, n, r);
	free(keys);
	return rc ? PROTO_E_DRIVER : PROTO_OK;
}

/* Each creator makes its objects anew (after taking down what is left of them). */
static CUresult create_selected(const uint64_t *keys, size_t n, struct life_result *r)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; !rc && i < n; i++) {
		struct shim_alloc *a = hmap_get(&tbl.allocs, keys[i]);
		if (!a)
			continue;
		rc = teardown(a, r);
		if (rc || a->role != SHIM_ROLE_CREATOR)
			continue;
		CUmulticastObjectProp prop = a->mc->prop;
		prop.size = capacity(a);
		CUmemGenericAllocationHandle h = 0;
		if ((rc = life_enter(a, r)))
			continue; /* (named there) */
		rc = real.cuMulticastCreate(&h, &prop);
		if (rc) {
			life_fail(r, a, "cuMulticastCreate(%u devices, %zu bytes) failed: %s", prop.numDevices,
				  prop.size, shim_cu_name(rc));
			continue;
		}
		a->detached = false;
		a->mc->fresh = true;
		if (alloc_set_driver(a, h) < 0) {
			life_fail(r, a, "out of memory registering its export");
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		r->count += !rc;
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

int mc_restore_create(const uint8_t *payload, size_t len, struct life_result *r)
{
	return over_selection(payload, len, r, create_selected);
}

/* Import one object again from its creator (the redemption runs unlocked). */
static CUresult reimport(uint64_t key, struct life_result *r)
{
	pthread_mutex_lock(&tbl.lock);
	struct shim_alloc *a = hmap_get(&tbl.allocs, key);
	struct shim_cap cap = {0};
	if (a) {
		cap.creator = a->creator;
		cap.alloc_id = a->id;
		cap.token = a->token;
		snprintf(cap.endpoint, sizeof(cap.endpoint), "%s", a->creator_endpoint ? a->creator_endpoint : "");
	}
	pthread_mutex_unlock(&tbl.lock);
	if (!a)
		return CUDA_SUCCESS;
	char err[700];
	struct shim_export_info info = {0};
	int fd = cap_redeem(&cap, &info, err, sizeof(err));
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&tbl.lock);
	a = hmap_get(&tbl.allocs, key);
	if (!a) {
		/* gone meanwhile: nothing to rebuild */
	} else if (fd < 0) {
		life_fail(r, a, "redeeming its capability failed: %s", err);
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (!info.mc_devices) {
		life_fail(r, a, "its creator exports memory under this id, not a multicast object");
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		CUmemGenericAllocationHandle h = 0;
		rc = life_enter(a, r);
		if (!rc) {
			rc = real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
								 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
			if (rc)
				life_fail(r, a, "cuMemImportFromShareableHandle failed: %s", shim_cu_name(rc));
		}
		if (!rc) {
			alloc_set_driver(a, h); /* an importer: no entry */
			a->detached = false;
			a->mc->fresh = true;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* The importers redeem the objects made anew; then everyone adds its devices. */
static CUresult import_selected(const uint64_t *keys, size_t n, struct life_result *r)
{
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; !rc && i < n; i++) {
		pthread_mutex_lock(&tbl.lock);
		struct shim_alloc *a = hmap_get(&tbl.allocs, keys[i]);
		bool importer = a && a->role == SHIM_ROLE_IMPORTER && a->detached;
		pthread_mutex_unlock(&tbl.lock);
		if (importer)
			rc = reimport(keys[i], r);
	}
	/* Every participant re-adds its own devices to the objects made anew. */
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; !rc && i < n; i++) {
		struct shim_alloc *a = hmap_get(&tbl.allocs, keys[i]);
		if (!a)
			continue;
		if (a->detached) {
			life_fail(r, a, "was not made anew by its creator");
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		if (a->mc->fresh && a->mc->nadded)
			rc = life_enter(a, r);
		for (size_t d = 0; !rc && a->mc->fresh && d < a->mc->nadded; d++) {
			rc = real.cuMulticastAddDevice(a->driver, a->mc->added[d]);
			if (rc)
				life_fail(r, a, "cuMulticastAddDevice(device %d) failed: %s", a->mc->added[d],
					  shim_cu_name(rc));
		}
		if (!rc) {
			a->mc->fresh = false;
			r->count++;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

int mc_restore_import(const uint8_t *payload, size_t len, struct life_result *r)
{
	return over_selection(payload, len, r, import_selected);
}

/* One bind to replay, copied out of the records. */
struct pending_bind {
	uint64_t key;
	size_t index;
	CUmemGenericAllocationHandle mc, member;
	CUdeviceptr member_va;
	size_t mc_offset, member_offset, size;
	CUdevice device;
};

int mc_restore_bind(const uint8_t *payload, size_t len, struct life_result *r)
{
	uint64_t *keys;
	size_t n, nb = 0, k = 0;
	int prc = selection(payload, len, &keys, &n, r);
	if (prc)
		return prc;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; i < n; i++) {
		struct shim_alloc *a = hmap_get(&tbl.allocs, keys[i]);
		nb += a ? a->mc->nbinds : 0;
	}
	struct pending_bind *list = calloc(nb ? nb : 1, sizeof(*list));
	for (size_t i = 0; list && i < n; i++) {
		struct shim_alloc *a = hmap_get(&tbl.allocs, keys[i]);
		if (!a)
			continue;
		for (size_t j = 0; j < a->mc->nbinds; j++) {
			struct shim_mc_bind *b = &a->mc->binds[j];
			if (!b->detached)
				continue;
			if (!b->member) {
				life_fail(r, a,
					  "a bind at offset %zu is of memory the shim does not track: it cannot be "
					  "replayed",
					  b->mc_offset);
				rc = CUDA_ERROR_NOT_SUPPORTED;
				break;
			}
			list[k++] = (struct pending_bind){.key = a->key,
							  .index = j,
							  .mc = a->driver,
							  .member = b->member->driver,
							  .member_va = b->member_va,
							  .mc_offset = b->mc_offset,
							  .member_offset = b->member_offset,
							  .size = b->size,
							  .device = b->device};
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	if (!list) {
		free(keys);
		snprintf(r->msg, sizeof(r->msg), "out of memory");
		return PROTO_E_INTERNAL;
	}
	/* The team is complete (every participant added its devices before this
	 * step began); each bind may still wait for the driver. No lock held. */
	size_t done = 0;
	for (; !rc && done < k; done++) {
		struct pending_bind *p = &list[done];
		const char *call = CTX_ENTER_CALLS;
		rc = ctx_enter_device(p->device);
		if (!rc) {
			call = p->member_va ? "cuMulticastBindAddr" : "cuMulticastBindMem";
			rc = p->member_va ? real.cuMulticastBindAddr(p->mc, p->mc_offset, p->member_va, p->size, 0)
					  : real.cuMulticastBindMem(p->mc, p->mc_offset, p->member, p->member_offset,
								    p->size, 0);
		}
		if (rc) {
			pthread_mutex_lock(&tbl.lock);
			life_fail(r, hmap_get(&tbl.allocs, p->key), "%s(offset %zu, %zu bytes, device %d) failed: %s",
				  call, p->mc_offset, p->size, p->device, shim_cu_name(rc));
			pthread_mutex_unlock(&tbl.lock);
			break;
		}
	}
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; i < done; i++) { /* the binds that were made */
		struct shim_alloc *a = hmap_get(&tbl.allocs, list[i].key);
		if (a)
			a->mc->binds[list[i].index].detached = false;
	}
	/* Then the multicast VAs, with their access. A cuMemMap of a multicast
	 * object may wait for its team (cuda.h): made without the table lock. The
	 * records cannot change meanwhile: tracked calls are refused outside ACTIVE
	 * and lifecycle steps run one at a time. */
	struct shim_alloc **objs = calloc(n ? n : 1, sizeof(*objs));
	for (size_t i = 0; objs && i < n; i++)
		objs[i] = hmap_get(&tbl.allocs, keys[i]);
	pthread_mutex_unlock(&tbl.lock);
	if (!objs && !rc) {
		snprintf(r->msg, sizeof(r->msg), "out of memory");
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; !rc && i < n; i++)
		if (objs[i])
			rc = life_attach_mappings(objs[i], NULL, r);
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; !rc && i < n; i++) {
		if (objs[i]) {
			life_drop_spare_ref(objs[i]);
			r->count++;
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	free(objs);
	free(keys);
	free(list);
	return rc ? PROTO_E_DRIVER : PROTO_OK;
}
