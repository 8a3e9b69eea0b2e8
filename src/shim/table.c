/* SPDX-License-Identifier: MIT */
/* The shim's tables: allocation records, logical handles, tracked mappings.
 * Every function here expects tbl.lock held. Lookups are O(1) (hash maps) or
 * O(log n) (the mapping interval tree); records of released objects are freed. */
#include <stdlib.h>

#include "cusnap/log.h"
#include "shim.h"

struct shim_tables tbl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_value = 1,
	.next_key = 1,
};

struct shim_alloc *tbl_alloc_new(void)
{
	struct shim_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->key = tbl.next_key++;
	if (hmap_put(&tbl.allocs, a->key, a) < 0) {
		free(a);
		return NULL;
	}
	return a;
}

void tbl_alloc_free(struct shim_alloc *a)
{
	hmap_del(&tbl.allocs, a->key);
	free(a->creator_endpoint);
	free(a);
}

struct shim_handle *tbl_handle_new(struct shim_alloc *a)
{
	/* One value per allocation, as the driver's: a retain or a second reference
	 * is the same value, counted. */
	if (a->handle) {
		a->handles++;
		return a->handle;
	}
	struct shim_handle *h = malloc(sizeof(*h));
	if (!h)
		return NULL;
	/* The value is the allocation's for its record's life: a retain from an
	 * address after every handle was released gives it back. */
	if (!a->value)
		a->value = SHIM_HANDLE_TAG | tbl.next_value++;
	h->value = a->value;
	h->alloc = a;
	if (hmap_put(&tbl.handles, h->value, h) < 0) {
		free(h);
		return NULL;
	}
	a->handle = h;
	a->handles = 1;
	return h;
}

struct shim_handle *tbl_handle_get(CUmemGenericAllocationHandle value)
{
	if ((value & SHIM_HANDLE_TAG_MASK) != SHIM_HANDLE_TAG)
		return NULL;
	return hmap_get(&tbl.handles, value);
}

CUresult tbl_refuse_tagged(const char *call, CUmemGenericAllocationHandle value)
{
	if ((value & SHIM_HANDLE_TAG_MASK) != SHIM_HANDLE_TAG)
		return CUDA_SUCCESS;
	LOG_AT(LOG_WARN,
	       "%s: handle %#llx is not (or no longer) a live handle of the kind this call takes: "
	       "CUDA_ERROR_INVALID_VALUE",
	       call, (unsigned long long)value);
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult tbl_lock_tracked(const char *call, CUmemGenericAllocationHandle value, bool multicast, struct shim_handle **h)
{
	*h = NULL;
	if (!shim_resolve_driver())
		return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
	pthread_mutex_lock(&tbl.lock);
	struct shim_handle *got = tbl_handle_get(value);
	if (got && (!multicast || got->alloc->mc)) {
		*h = got;
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&tbl.lock);
	return tbl_refuse_tagged(call, value);
}

void tbl_handle_drop(struct shim_handle *h)
{
	struct shim_alloc *a = h->alloc;
	if (--a->handles)
		return;
	hmap_del(&tbl.handles, h->value);
	a->handle = NULL;
	free(h);
}

struct shim_mapping *tbl_mapping_at(uint64_t va)
{
	return (struct shim_mapping *)itree_find(&tbl.mappings, va);
}

void tbl_mapping_link(struct shim_mapping *m)
{
	m->sibling = m->alloc->maps;
	if (m->sibling)
		m->sibling->back = &m->sibling;
	m->alloc->maps = m;
	m->back = &m->alloc->maps;
}

void tbl_mapping_unlink(struct shim_mapping *m)
{
	*m->back = m->sibling;
	if (m->sibling)
		m->sibling->back = m->back;
	m->sibling = NULL;
	m->back = NULL;
}
