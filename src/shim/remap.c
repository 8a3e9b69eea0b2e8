/* SPDX-License-Identifier: MIT */
/* Mappings taken down and put back by the lifecycle (DESIGN.md §6): unmapped at
 * PREPARE (the reservations stay), mapped again at their recorded addresses at
 * RESTORE with their recorded access. A step that rebuilds many collects them
 * (struct grants) and grants their access at its end, one cuMemSetAccess per
 * run of adjacent mappings with the same access and device (whose context the
 * call runs in): cuda.h lets one call cover "a
 * fully mapped address range containing all allocations", which is how
 * PyTorch's expandable segments grant a range of chunks at once. Caller holds
 * tbl.lock throughout. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

/* Every access of m granted again over [start, start + len) in one
 * cuMemSetAccess (one descriptor per location: a peer-heavy mapping costs one
 * driver call, not one per GPU). */
static CUresult set_recorded_access(const struct shim_mapping *m, CUdeviceptr start, size_t len)
{
	if (!m->naccess)
		return CUDA_SUCCESS;
	CUmemAccessDesc few[8] = {0}, *d = m->naccess <= 8 ? few : malloc(m->naccess * sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < m->naccess; i++)
		d[i] = (CUmemAccessDesc){.location = m->access[i].location,
					 .flags = (CUmemAccess_flags)m->access[i].flags};
	CUresult rc = real.cuMemSetAccess(start, len, d, m->naccess);
	if (d != few)
		free(d);
	return rc;
}

static bool same_access(const struct shim_mapping *x, const struct shim_mapping *y)
{
	if (x->naccess != y->naccess)
		return false;
	for (size_t i = 0; i < x->naccess; i++)
		if (x->access[i].location.type != y->access[i].location.type ||
		    x->access[i].location.id != y->access[i].location.id || x->access[i].flags != y->access[i].flags)
			return false;
	return true;
}

/* Device by device (one context switch each), then by address. */
static int by_device_then_address(const void *x, const void *y)
{
	const struct shim_mapping *a = *(struct shim_mapping *const *)x, *b = *(struct shim_mapping *const *)y;
	int da = ctx_device_of(a->alloc), db = ctx_device_of(b->alloc);
	if (da != db)
		return (da > db) - (da < db);
	return (a->node.start > b->node.start) - (a->node.start < b->node.start);
}

/* m's access granted alone (failure named in r). */
static CUresult grant_one(struct shim_mapping *m, struct life_result *r)
{
	struct itree_node *n = &m->node;
	CUresult rc = set_recorded_access(m, n->start, n->end - n->start);
	if (rc)
		life_fail(r, m->alloc, "cuMemSetAccess(%#llx, %llu, %zu location(s)) failed: %s",
			  (unsigned long long)n->start, (unsigned long long)(n->end - n->start), m->naccess,
			  shim_cu_name(rc));
	return rc;
}

CUresult life_attach_mappings(struct shim_alloc *a, struct grants *g, struct life_result *r)
{
	CUresult entered = life_enter(a, r);
	if (entered)
		return entered;
	for (struct shim_mapping *m = a->maps; m; m = m->sibling) {
		struct itree_node *n = &m->node;
		if (!m->detached || m->ungranted)
			continue;
		size_t len = n->end - n->start;
		if (g && g->n == g->cap) {
			size_t cap = g->cap ? 2 * g->cap : 64;
			struct shim_mapping **more = realloc(g->m, cap * sizeof(*more));
			if (!more) {
				life_fail(r, a, "out of memory collecting its mappings");
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			g->m = more;
			g->cap = cap;
		}
		CUresult rc = real.cuMemMap(n->start, len, m->offset, a->driver, m->flags);
		if (rc) {
			life_fail(r, a, "cuMemMap(%#llx, %zu) failed: %s", (unsigned long long)n->start, len,
				  shim_cu_name(rc));
			return rc;
		}
		if (g) {
			m->ungranted = true;
			g->m[g->n++] = m;
			continue;
		}
		rc = grant_one(m, r);
		if (rc) {
			real.cuMemUnmap(n->start, len);
			return rc;
		}
		m->detached = false;
	}
	return CUDA_SUCCESS;
}

/* Unmap what g still holds ungranted, and empty it. */
static void grants_undo(struct grants *g)
{
	for (size_t i = 0; i < g->n; i++) {
		struct shim_mapping *m = g->m[i];
		if (!m->ungranted)
			continue;
		if (life_enter(m->alloc, &(struct life_result){0}) == CUDA_SUCCESS)
			real.cuMemUnmap(m->node.start, m->node.end - m->node.start);
		m->ungranted = false; /* detached, as before it was mapped */
	}
	g->n = 0;
}

CUresult life_grant(struct grants *g, struct life_result *r)
{
	size_t k = 0;
	for (size_t i = 0; i < g->n; i++) /* what was unmapped since (a failed import) is gone */
		if (g->m[i]->ungranted)
			g->m[k++] = g->m[i];
	g->n = k;
	if (g->n > 1)
		qsort(g->m, g->n, sizeof(*g->m), by_device_then_address);
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0, end; !rc && i < g->n; i = end) {
		struct shim_mapping *first = g->m[i];
		for (end = i + 1; end < g->n; end++)
			if (g->m[end]->node.start != g->m[end - 1]->node.end || !same_access(g->m[end], first) ||
			    ctx_device_of(g->m[end]->alloc) != ctx_device_of(first->alloc))
				break;
		CUdeviceptr start = first->node.start;
		size_t len = g->m[end - 1]->node.end - start;
		if ((rc = life_enter(first->alloc, r)) != CUDA_SUCCESS)
			break;
		rc = set_recorded_access(first, start, len);
		if (rc && rc != CUDA_ERROR_OUT_OF_MEMORY && end - i > 1) {
			/* Refused over several (a driver that wants one allocation per
			 * call?): one call each, so that only a real failure fails. */
			rc = CUDA_SUCCESS;
			for (size_t j = i; !rc && j < end; j++)
				rc = grant_one(g->m[j], r);
		} else if (rc) {
			life_fail(r, first->alloc,
				  "cuMemSetAccess(%#llx, %zu, %zu location(s)) over %zu mapping(s) failed: %s",
				  (unsigned long long)start, len, first->naccess, end - i, shim_cu_name(rc));
		}
		for (size_t j = i; !rc && j < end; j++)
			g->m[j]->ungranted = g->m[j]->detached = false;
	}
	if (rc)
		grants_undo(g);
	g->n = 0;
	return rc;
}

void grants_free(struct grants *g)
{
	grants_undo(g);
	free(g->m);
	memset(g, 0, sizeof(*g));
}

CUresult life_detach_mappings(struct shim_alloc *a, struct life_result *r)
{
	CUresult entered = life_enter(a, r);
	if (entered)
		return entered;
	for (struct shim_mapping *m = a->maps; m; m = m->sibling) {
		struct itree_node *n = &m->node;
		if (m->detached && !m->ungranted)
			continue;
		CUresult rc = real.cuMemUnmap(n->start, n->end - n->start);
		if (rc) {
			life_fail(r, a, "cuMemUnmap(%#llx, %llu) failed: %s", (unsigned long long)n->start,
				  (unsigned long long)(n->end - n->start), shim_cu_name(rc));
			return rc;
		}
		m->detached = true;
		m->ungranted = false;
	}
	return CUDA_SUCCESS;
}
