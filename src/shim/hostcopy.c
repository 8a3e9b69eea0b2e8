/* SPDX-License-Identifier: MIT */
/* The host-mode data path (DESIGN.md §6.2): a creator's shared bytes are copied
 * into one arena of this process, registered with the driver (pinned) for the
 * length of a step, by asynchronous copies on one stream per device with one
 * synchronisation per device per step. A copy goes through the application's
 * own mapping of the whole allocation when its device has the access the copy
 * needs; the others of a device are mapped side by side in one temporary
 * reservation. The arena stays after a restore, so that a second suspend of
 * the same shape writes into pages that are already there. HOST_NUMA memory is
 * copied by the CPU through a temporary mapping. All of it runs under tbl.lock. */
#include <stdlib.h>
#include <string.h>

#include "cusnap/counters.h"
#include "cusnap/hostmem.h"
#include "cusnap/log.h"
#include "cusnap/proto.h"
#include "shim.h"

/* The arena: normally one segment; a save while bytes of an earlier, unfinished
 * one are still held adds another. Slots are taken in order and all given back
 * together (live counts the slots held; every segment's used is 0 when live is). */
struct segment {
	uint8_t *base;
	size_t cap, used;
	struct segment *next;
};

static struct segment *arena;
static size_t live;

enum { SLOT_ALIGN = 4096 };

static struct segment *segment_new(size_t cap)
{
	struct segment *s = calloc(1, sizeof(*s));
	void *p = s ? hostmem_alloc(cap, COUNT_SHIM_MAP) : NULL;
	if (!p) {
		free(s);
		return NULL;
	}
	s->base = p;
	s->cap = cap;
	return s;
}

static void arena_drop(void)
{
	while (arena) {
		struct segment *s = arena;
		arena = s->next;
		hostmem_free(s->base, s->cap, COUNT_SHIM_MAP);
		free(s);
	}
}

static size_t slot_size(const struct shim_alloc *a)
{
	return round_up(a->size, SLOT_ALIGN);
}

/* Make room for need bytes of slots. An idle arena of about the right size is
 * kept as it is (its pages are populated); one too small or far too large is
 * replaced, the old one unmapped first so that the peak stays at need. */
static int arena_fit(size_t need)
{
	if (live == 0) {
		if (arena && !arena->next && arena->cap >= need && arena->cap - need <= need / 10)
			return 0;
		arena_drop();
		double t0 = now_ms();
		if (need && !(arena = segment_new(need)))
			return -1;
		LOG_AT(LOG_INFO, "host-mode arena of %zu bytes at %p made and populated in %.1f ms", need,
		       need ? (void *)arena->base : NULL, now_ms() - t0);
		return 0;
	}
	size_t room = 0;
	for (struct segment *s = arena; s; s = s->next)
		room = s->cap - s->used > room ? s->cap - s->used : room;
	if (room >= need)
		return 0;
	struct segment *s = segment_new(need);
	if (!s)
		return -1;
	LOG_AT(LOG_INFO, "host-mode arena: another %zu bytes at %p made and populated (%zu copies still held)", need,
	       (void *)s->base, live);
	s->next = arena;
	arena = s;
	return 0;
}

static void *slot_take(size_t size)
{
	for (struct segment *s = arena; s; s = s->next) {
		if (s->cap - s->used >= size) {
			void *p = s->base + s->used;
			s->used += size;
			live++;
			return p;
		}
	}
	return NULL;
}

void hostcopy_forget(struct shim_alloc *a)
{
	hostfile_forget(a);
	if (!a->saved)
		return;
	a->saved = NULL;
	if (--live == 0)
		for (struct segment *s = arena; s; s = s->next)
			s->used = 0;
}

/* ---- one batch of copies ---- */

struct lane { /* one device's part of a batch */
	int dev;
	CUstream stream;
	CUdeviceptr va;
	size_t span;         /* the temporary reservation's bytes (0: none needed) */
	size_t first, count; /* its allocations: list[first .. first + count) */
};

struct item {           /* one allocation of a batch */
	CUdeviceptr va; /* where it is copied through */
	bool temp;      /* va is a temporary mapping in its lane's reservation */
	bool mapped;    /* ... and it is mapped */
};

static bool on_host(const struct shim_alloc *a)
{
	return a->prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
	       a->prop.location.type == CU_MEM_LOCATION_TYPE_HOST;
}

/* An attached mapping of the whole of a that its own device may read (and,
 * for a copy to it, write): the copy goes through it. */
static CUdeviceptr own_mapping(const struct shim_alloc *a, bool write)
{
	if (on_host(a))
		return 0; /* the CPU copies it: a mapping of its own with host access */
	unsigned long long want = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
	for (const struct shim_mapping *m = a->maps; m; m = m->sibling) {
		if (m->detached || m->offset != 0 || m->node.end - m->node.start != a->size)
			continue;
		for (size_t i = 0; i < m->naccess; i++)
			if (m->access[i].location.type == a->prop.location.type &&
			    m->access[i].location.id == a->prop.location.id && (m->access[i].flags & want) == want)
				return m->node.start;
	}
	return 0;
}

/* Where each of the lane's allocations is copied through: its own mapping, or
 * a place in one temporary reservation, each at its own granularity. */
static void lane_layout(struct shim_alloc **list, struct lane *l, struct item *items, bool to_device, size_t *align)
{
	*align = 0;
	for (size_t i = l->first; i < l->first + l->count; i++) {
		items[i].va = own_mapping(list[i], to_device);
		if (items[i].va)
			continue;
		size_t g = list[i]->granularity ? list[i]->granularity : 1;
		l->span = round_up(l->span, g);
		items[i].temp = true;
		items[i].va = l->span; /* an offset until the reservation is made */
		l->span += list[i]->size;
		*align = g > *align ? g : *align;
	}
}

static CUresult map_temp(struct shim_alloc *a, struct item *it, struct life_result *r)
{
	CUresult rc = real.cuMemMap(it->va, a->size, 0, a->driver, 0);
	if (rc) {
		life_fail(r, a, "cuMemMap(%#llx, %zu) for the copy failed: %s", (unsigned long long)it->va, a->size,
			  shim_cu_name(rc));
		return rc;
	}
	it->mapped = true;
	CUmemAccessDesc d = {.location = a->prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	rc = real.cuMemSetAccess(it->va, a->size, &d, 1);
	if (rc)
		life_fail(r, a, "cuMemSetAccess(%#llx, %zu) for the copy failed: %s", (unsigned long long)it->va,
			  a->size, shim_cu_name(rc));
	return rc;
}

/* Map what the lane needs and run its part of the job: each allocation's
 * copies queued on the lane's stream (or done, job by job). */
static CUresult lane_start(struct shim_alloc **list, struct lane *l, struct item *items, struct copy_job *j,
			   struct life_result *r)
{
	CUresult rc = life_enter(list[l->first], r);
	if (rc)
		return rc;
	rc = aux.cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING);
	if (rc) {
		l->stream = NULL;
		life_fail(r, list[l->first], "cuStreamCreate (device %d) failed: %s", l->dev, shim_cu_name(rc));
		return rc;
	}
	size_t align;
	lane_layout(list, l, items, j->to_device, &align);
	if (l->span && (rc = aux.cuMemAddressReserve(&l->va, l->span, align, 0, 0))) {
		l->va = 0;
		life_fail(r, list[l->first], "cuMemAddressReserve(%zu) for the copies failed: %s", l->span,
			  shim_cu_name(rc));
		return rc;
	}
	for (size_t i = l->first; i < l->first + l->count; i++) {
		struct shim_alloc *a = list[i];
		if (items[i].temp) {
			items[i].va += l->va;
			if ((rc = map_temp(a, &items[i], r)))
				return rc;
		}
		if (j->copy && (rc = j->copy(j, a, items[i].va, l->stream, r)))
			return rc;
	}
	return CUDA_SUCCESS;
}

bool hostcopy_on_host(const struct shim_alloc *a)
{
	return on_host(a);
}

/* The arena's job: one copy of the whole allocation, queued; memory on the
 * host copied by the CPU (the access just granted makes it host-accessible). */
static CUresult arena_copy(struct copy_job *j, struct shim_alloc *a, CUdeviceptr va, CUstream s, struct life_result *r)
{
	void *dev = (void *)(uintptr_t)va;
	if (on_host(a)) {
		memcpy(j->to_device ? dev : a->saved, j->to_device ? a->saved : dev, a->size);
		return CUDA_SUCCESS;
	}
	CUresult rc = j->to_device ? aux.cuMemcpyHtoDAsync_v2(va, a->saved, a->size, s)
				   : aux.cuMemcpyDtoHAsync_v2(a->saved, va, a->size, s);
	if (rc)
		life_fail(r, a, "%s(%#llx, %zu) failed: %s", j->to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync",
			  (unsigned long long)va, a->size, shim_cu_name(rc));
	return rc;
}

/* Wait for the lane's copies, then take its temporary mappings, reservation and
 * stream down (always, after a failure too). Returns the first failure; rc is
 * the batch's so far (a failure already named is not overwritten). */
static CUresult lane_finish(struct shim_alloc **list, struct lane *l, const struct item *items, CUresult rc,
			    struct life_result *r)
{
	CUresult entered = life_enter(list[l->first], rc ? &(struct life_result){0} : r);
	if (entered) {
		/* Without the context nothing of the lane can be undone: leaked. */
		LOG_AT(LOG_WARN, "device %d: the copy mappings at %#llx could not be taken down", l->dev,
		       (unsigned long long)l->va);
		return rc ? rc : entered;
	}
	if (l->stream) {
		CUresult s = aux.cuStreamSynchronize(l->stream);
		if (s && !rc) {
			life_fail(r, list[l->first], "cuStreamSynchronize (device %d) failed: %s", l->dev,
				  shim_cu_name(s));
			rc = s;
		}
		if (s && aux.cuStreamSynchronize(l->stream) != CUDA_SUCCESS) {
			/* Copies may still be running: their mappings stay (leaked),
			 * never taken away under them. */
			LOG_AT(LOG_WARN, "device %d: the copies cannot be waited for; their mappings at %#llx stay",
			       l->dev, (unsigned long long)l->va);
			aux.cuStreamDestroy_v2(l->stream); /* (queued work still completes) */
			return rc;
		}
	}
	for (size_t i = l->first; i < l->first + l->count; i++) {
		if (!items[i].mapped)
			continue;
		CUresult u = real.cuMemUnmap(items[i].va, list[i]->size);
		if (u)
			u = real.cuMemUnmap(items[i].va, list[i]->size); /* once more: it is ours and must not stay */
		if (u && !rc) {
			life_fail(r, list[i], "cuMemUnmap(%#llx, %zu) of the copy mapping failed: %s",
				  (unsigned long long)items[i].va, list[i]->size, shim_cu_name(u));
			rc = u;
		}
	}
	if (l->va && real.cuMemAddressFree(l->va, l->span) != CUDA_SUCCESS)
		LOG_AT(LOG_WARN, "cuMemAddressFree of the copy reservation %#llx failed: address space leaked",
		       (unsigned long long)l->va);
	if (l->stream && aux.cuStreamDestroy_v2(l->stream) != CUDA_SUCCESS)
		LOG_AT(LOG_WARN, "cuStreamDestroy of the copy stream (device %d) failed: stream leaked", l->dev);
	return rc;
}

/* Pin the arena for the copies; an arena the driver will not pin is copied
 * pageable (slower, still correct). */
static bool arena_register(const struct shim_alloc *a)
{
	if (!aux.cuMemHostRegister_v2 || !aux.cuMemHostUnregister || life_enter(a, &(struct life_result){0}))
		return false;
	for (struct segment *s = arena; s; s = s->next) {
		CUresult rc = aux.cuMemHostRegister_v2(s->base, s->cap, CU_MEMHOSTREGISTER_PORTABLE);
		if (rc == CUDA_SUCCESS)
			continue;
		LOG_AT(LOG_INFO, "cuMemHostRegister of the copy arena (%zu bytes) failed: %s; copying unpinned", s->cap,
		       shim_cu_name(rc));
		for (struct segment *t = arena; t != s; t = t->next)
			aux.cuMemHostUnregister(t->base);
		return false;
	}
	return true;
}

static void arena_unregister(const struct shim_alloc *a)
{
	if (life_enter(a, &(struct life_result){0}))
		return;
	for (struct segment *s = arena; s; s = s->next) {
		CUresult rc = aux.cuMemHostUnregister(s->base);
		if (rc)
			rc = aux.cuMemHostUnregister(s->base);
		if (rc)
			LOG_AT(LOG_WARN, "cuMemHostUnregister of the copy arena failed: %s; it stays pinned",
			       shim_cu_name(rc));
	}
}

/* One lane's part of a job that runs lanes at once (run_lane), on a thread of its own. */
struct lane_run {
	struct copy_job *job;
	struct shim_alloc **list;
	CUdeviceptr *va;
	size_t n;
	int dev;
	pthread_t thread;
	bool started;
	CUresult rc;
	struct life_result r;
};

static void *lane_thread(void *arg)
{
	struct lane_run *x = arg;
	x->rc = life_enter(x->list[0], &x->r);
	if (!x->rc)
		x->rc = x->job->run_lane(x->job, x->dev, x->list, x->va, x->n, &x->r);
	ctx_leave_all();
	return NULL;
}

/* Every started lane's part run at once, each on a thread of its own (its
 * device's context current there); the first failure into r. */
static CUresult lanes_run(struct shim_alloc **list, struct lane *lanes, size_t nlanes, const struct item *items,
			  struct copy_job *j, struct life_result *r)
{
	size_t n = lanes[nlanes - 1].first + lanes[nlanes - 1].count;
	struct lane_run *runs = calloc(nlanes, sizeof(*runs));
	CUdeviceptr *va = calloc(n, sizeof(*va));
	if (!runs || !va) {
		free(runs);
		free(va);
		life_fail(r, NULL, "out of memory for %zu lanes of copies", nlanes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++)
		va[i] = items[i].va;
	CUresult rc = CUDA_SUCCESS;
	for (size_t k = 0; k < nlanes; k++) {
		runs[k] = (struct lane_run){.job = j,
					    .list = list + lanes[k].first,
					    .va = va + lanes[k].first,
					    .n = lanes[k].count,
					    .dev = lanes[k].dev};
		runs[k].started = shim_thread_start(&runs[k].thread, lane_thread, &runs[k], false) == 0;
		if (!runs[k].started && !rc) { /* (run here, after the others started) */
			lane_thread(&runs[k]);
			runs[k].rc ? (*r = runs[k].r, rc = runs[k].rc) : 0;
		}
	}
	for (size_t k = 0; k < nlanes; k++) {
		if (runs[k].started)
			pthread_join(runs[k].thread, NULL);
		if (runs[k].rc && !rc)
			*r = runs[k].r, rc = runs[k].rc;
	}
	free(runs);
	free(va);
	return rc;
}

CUresult hostcopy_batch(struct shim_alloc **list, size_t n, struct copy_job *j, struct life_result *r)
{
	qsort(list, n, sizeof(*list), ctx_by_device);
	struct item *items = calloc(n, sizeof(*items));
	struct lane *lanes = calloc(n, sizeof(*lanes));
	if (!items || !lanes) {
		free(items);
		free(lanes);
		life_fail(r, NULL, "out of memory for %zu host-mode copies", n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t nlanes = 0;
	for (size_t i = 0; i < n; i++) {
		int dev = ctx_device_of(list[i]);
		if (!nlanes || lanes[nlanes - 1].dev != dev)
			lanes[nlanes++] = (struct lane){.dev = dev, .first = i};
		lanes[nlanes - 1].count++;
	}
	double t_reg = now_ms();
	bool pinned = j->pin_arena && arena_register(list[0]);
	double t0 = now_ms(); /* the copies' rate is apart from the pinning's cost */
	CUresult rc = CUDA_SUCCESS;
	size_t started = 0;
	while (!rc && started < nlanes)
		rc = lane_start(list, &lanes[started++], items, j, r);
	if (!rc && j->run_lane)
		rc = lanes_run(list, lanes, nlanes, items, j, r);
	for (size_t i = 0; i < started; i++)
		rc = lane_finish(list, &lanes[i], items, rc, r);
	double t1 = now_ms();
	if (pinned)
		arena_unregister(list[0]);
	double t_unreg = now_ms() - t1;
	size_t bytes = 0;
	for (size_t i = 0; i < n; i++)
		bytes += list[i]->size;
	if (!rc) {
		r->bytes += bytes;
		double ms = t1 - t0;
		LOG_AT(LOG_INFO,
		       "host-mode copy %s: %zu bytes of %zu allocations on %zu device(s)%s%s in %.1f ms (%.2f GB/s; "
		       "pinning the arena took %.1f ms more, unpinning it %.1f ms)",
		       j->to_device ? "back" : "out", bytes, n, nlanes, pinned ? ", pinned" : "",
		       j->run_lane ? ", through the file, devices at once" : "", ms,
		       ms > 0 ? (double)bytes / (ms * 1e6) : 0.0, t0 - t_reg, t_unreg);
	}
	free(items);
	free(lanes);
	return rc;
}

CUresult hostcopy_save(struct shim_alloc **list, size_t n, struct life_result *r)
{
	if (!n)
		return CUDA_SUCCESS;
	size_t need = 0;
	for (size_t i = 0; i < n; i++) {
		hostcopy_forget(list[i]); /* (a copy left from before is stale) */
		need += slot_size(list[i]);
	}
	bool fits = arena_fit(need) == 0;
	for (size_t i = 0; fits && i < n; i++)
		fits = (list[i]->saved = slot_take(slot_size(list[i]))) != NULL;
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	struct copy_job j = {.to_device = false, .pin_arena = true, .copy = arena_copy};
	if (fits)
		rc = hostcopy_batch(list, n, &j, r);
	else
		life_fail(r, NULL, "no host memory for the %zu bytes of %zu shared allocations", need, n);
	if (rc)
		for (size_t i = 0; i < n; i++)
			hostcopy_forget(list[i]);
	return rc;
}

CUresult hostcopy_load(struct shim_alloc **list, size_t n, struct life_result *r)
{
	struct copy_job j = {.to_device = true, .pin_arena = true, .copy = arena_copy};
	return n ? hostcopy_batch(list, n, &j, r) : CUDA_SUCCESS;
}

void hostcopy_release_idle(void)
{
	if (live == 0 && arena) {
		LOG_AT(LOG_INFO, "host-mode arena of %zu bytes given back (file content keeps no copy)", arena->cap);
		arena_drop();
	}
}
