/* SPDX-License-Identifier: MIT */
/* The lifecycle (DESIGN.md §6): QUIESCE, PREPARE in host, file or native content mode,
 * RESTORE_CREATORS, RESTORE_IMPORTERS and RESUME, run on an endpoint
 * thread for the coordinator.
 *
 * PREPARE detaches every *shared* allocation from the driver while keeping its
 * records: mappings are unmapped (their reservations stay), importers drop their
 * imports, and a creator either keeps one driver reference (native: the
 * reference the native checkpoint saves, native_ref) or copies its bytes into memory of this
 * process (host) or the file the coordinator gave (file) and releases the allocation. RESTORE_* re-attaches at the
 * recorded addresses with the recorded access, and the application's logical
 * handles follow their records to the new driver handles. Each allocation and
 * each mapping carries its own detached mark, so a rebuild after a failure half
 * way (the coordinator's abort) restores exactly what was taken down. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "cusnap/proto.h"
#include "cusnap/request.h"
#include "cusnap/usock.h"
#include "shim.h"

void life_fail(struct life_result *r, const struct shim_alloc *a, const char *fmt, ...)
{
	const struct shim_identity *me = shim_self();
	char what[400], hex[ID_HEX_LEN + 1];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	int pid = me ? (int)me->pid : getpid(), nspid = me ? (int)me->nspid : getpid();
	if (!a) {
		snprintf(r->msg, sizeof(r->msg), "participant %d (ns %d): %s", pid, nspid, what);
		return;
	}
	id_hex(&a->id, hex);
	snprintf(r->msg, sizeof(r->msg), "participant %d (ns %d): %s %s: %s", pid, nspid,
		 a->mc ? "multicast object" : "allocation", hex, what);
}

/* ---- driver helpers (caller holds tbl.lock) ---- */

CUresult life_enter(const struct shim_alloc *a, struct life_result *r)
{
	int dev = ctx_device_of(a);
	CUresult rc = ctx_enter_device(dev);
	if (rc)
		life_fail(r, a, CTX_ENTER_CALLS " (device %d) failed: %s", dev, shim_cu_name(rc));
	return rc;
}

/* Drop the driver reference the shim holds, if it holds one. A failure is
 * reported in r (when given) and leaves the reference held. */
CUresult life_release_ref(struct shim_alloc *a, struct life_result *r)
{
	CUresult rc = alloc_release_driver(a);
	if (rc && r)
		life_fail(r, a, "cuMemRelease failed: %s", shim_cu_name(rc));
	return rc;
}

/* A driver reference the shim holds only while it needs one (no logical handle
 * left: the mappings anchor the allocation). */
void life_drop_spare_ref(struct shim_alloc *a)
{
	if (!a->handles && !a->mc_binds)
		life_release_ref(a, NULL);
}

/* ---- PREPARE ---- */

/* A driver reference to a creator's allocation, taken if only mappings anchor it. */
static CUresult anchor(struct shim_alloc *a, struct life_result *r)
{
	CUresult rc = life_enter(a, r);
	if (rc || a->driver_ref)
		return rc;
	struct shim_mapping *any = NULL;
	for (struct shim_mapping *m = a->maps; m && !any; m = m->sibling)
		if (!m->detached)
			any = m;
	if (!any) {
		life_fail(r, a, "neither a handle nor a mapping anchors it");
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUmemGenericAllocationHandle h;
	rc = real.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)any->node.start);
	if (rc) {
		life_fail(r, a, "cuMemRetainAllocationHandle(%#llx) failed: %s", (unsigned long long)any->node.start,
			  shim_cu_name(rc));
		return rc;
	}
	alloc_set_driver(a, h); /* its entry, if any, exists: cannot fail */
	return CUDA_SUCCESS;
}

/* Unmap a creator's mappings; then keep its one reference (native) or, its
 * bytes saved, release it (host). */
static CUresult take_down_creator(struct shim_alloc *a, enum proto_content mode, struct life_result *r)
{
	CUresult rc = life_detach_mappings(a, r);
	if (rc)
		return rc;
	if (mode == PROTO_CONTENT_NATIVE) {
		a->native_ref = true; /* the one driver reference the native checkpoint saves */
		return CUDA_SUCCESS;
	}
	rc = life_release_ref(a, r);
	if (rc)
		return rc;
	a->detached = true;
	return CUDA_SUCCESS;
}

/* A creator, or an importer holding the allocation in its creator's place
 * (holder): prepared and rebuilt as the creator is. */
static bool acts_as_creator(const struct shim_alloc *a)
{
	return a->role == SHIM_ROLE_CREATOR || a->holder;
}

static bool untouched(const struct shim_alloc *a)
{
	bool touched = a->detached || a->native_ref;
	for (struct shim_mapping *m = a->maps; !touched && m; m = m->sibling)
		touched = m->detached;
	return !touched;
}

/* The allocations (not multicast objects) that act as their creator (or the
 * other importers), shared only when asked, in device order; NULL (out of
 * memory, said in r). */
static struct shim_alloc **collect(bool creators, bool shared_only, size_t *n, struct life_result *r)
{
	struct shim_alloc **list = malloc((tbl.allocs.len ? tbl.allocs.len : 1) * sizeof(*list));
	*n = 0;
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (!list)
			break;
		if (!a->mc && acts_as_creator(a) == creators && (a->shared || !shared_only))
			list[(*n)++] = a;
	}
	if (list)
		qsort(list, *n, sizeof(*list), ctx_by_device); /* one context switch per device */
	else
		life_fail(r, NULL, "out of memory");
	return list;
}

/* How an allocation this process carries goes through the checkpoint. A holder
 * that imported it carries its bytes in host content (or file) whatever was
 * asked: the driver restores no import natively (r580: CUDA_ERROR_NOT_SUPPORTED,
 * GPU script E3 and G7), and an import cannot be exported again. */
static enum proto_content content_of(const struct shim_alloc *a, enum proto_content mode)
{
	return a->role == SHIM_ROLE_CREATOR || mode != PROTO_CONTENT_NATIVE ? mode : PROTO_CONTENT_HOST;
}

/* Every allocation this process created or carries: anchored, its bytes copied out
 * together (host: to the arena; file: to fd), then taken down. Native content
 * takes the shared ones alone (the driver's checkpoint saves the others); host
 * and file content every one, private too (an engine's weights and KV cache:
 * cusnap moves them faster than the driver's checkpoint does, and out of
 * CRIU's images). On a failure, what was taken down stays so for the abort; an
 * allocation left untouched gives back the reference taken for it and its copy. */
static CUresult prepare_creators(enum proto_content mode, int fd, struct life_result *r)
{
	size_t n, nhost = 0;
	struct shim_alloc **list = collect(true, mode == PROTO_CONTENT_NATIVE, &n, r);
	if (!list)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) { /* those copied out first, in device order still */
		if (content_of(list[i], mode) != PROTO_CONTENT_NATIVE) {
			struct shim_alloc *t = list[i];
			memmove(list + nhost + 1, list + nhost, (i - nhost) * sizeof(*list));
			list[nhost++] = t;
		}
	}
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; !rc && i < n; i++)
		rc = anchor(list[i], r);
	if (!rc && nhost)
		rc = mode == PROTO_CONTENT_FILE ? hostfile_save(list, nhost, fd, r) : hostcopy_save(list, nhost, r);
	if (!rc && mode == PROTO_CONTENT_FILE)
		hostcopy_release_idle(); /* (an arena kept from an earlier suspend: CRIU would save it) */
	for (size_t i = 0; !rc && i < n; i++) {
		rc = take_down_creator(list[i], content_of(list[i], mode), r);
		r->count += !rc;
	}
	for (size_t i = 0; rc && i < n; i++) {
		if (untouched(list[i])) {
			hostcopy_forget(list[i]);
			life_drop_spare_ref(list[i]);
		}
	}
	free(list);
	return rc;
}

static CUresult prepare_importer(struct shim_alloc *a, struct life_result *r)
{
	CUresult rc = life_enter(a, r);
	if (!rc)
		rc = life_detach_mappings(a, r);
	if (!rc)
		rc = life_release_ref(a, r);
	if (rc)
		return rc;
	a->detached = true;
	return CUDA_SUCCESS;
}

static CUresult for_each_shared_import(CUresult (*fn)(struct shim_alloc *, struct life_result *), struct life_result *r)
{
	size_t n;
	struct shim_alloc **list = collect(false, true, &n, r);
	if (!list)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; !rc && i < n; i++) {
		rc = fn(list[i], r);
		r->count += !rc;
	}
	free(list);
	return rc;
}

/* The importer records that carry their allocation this time: the first
 * record of each allocation the holds name this process for; and the
 * forwarding entries of what this process created and another carries.
 * Caller holds tbl.lock. */
static int apply_holds(const struct req_hold *holds, size_t n, struct life_result *r)
{
	const struct shim_identity *me = shim_self();
	struct hmap mine = {0};
	for (size_t i = 0; me && i < n; i++) {
		if (id_equal(&holds[i].holder, &me->id) &&
		    hmap_put(&mine, id_hash(&holds[i].alloc), (void *)&holds[i]) < 0) {
			hmap_free(&mine);
			life_fail(r, NULL, "out of memory");
			return PROTO_E_INTERNAL;
		}
	}
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (a->mc || a->role != SHIM_ROLE_IMPORTER)
			continue;
		const struct req_hold *h = hmap_get(&mine, id_hash(&a->id));
		bool wanted = h && id_equal(&h->alloc, &a->id);
		if (wanted)
			hmap_del(&mine, id_hash(&a->id)); /* one record carries it */
		a->holder = wanted;
	}
	int rc = PROTO_OK;
	const struct req_hold *h;
	hmap_for_each(&mine, h) {
		/* (what is left: named, but not an import of this process) */
		char hex[ID_HEX_LEN + 1];
		id_hex(&h->alloc, hex);
		life_fail(r, NULL, "named the holder of allocation %s, which it does not hold", hex);
		rc = PROTO_E_NOT_FOUND;
		break;
	}
	hmap_free(&mine);
	if (rc == PROTO_OK && me && exports_set_forwards(holds, n, &me->id, me->endpoint) < 0) {
		life_fail(r, NULL, "out of memory recording who carries its allocations");
		rc = PROTO_E_INTERNAL;
	}
	return rc;
}

/* The descriptor PREPARE came with: a regular file for file content, none
 * for the others. PROTO_OK, or why not in r. */
static int prepare_fd(enum proto_content mode, int fd, struct life_result *r)
{
	struct stat st;
	if (mode != PROTO_CONTENT_FILE && fd >= 0) {
		life_fail(r, NULL, "PREPARE of %s content came with a descriptor", proto_content_name(mode));
		return PROTO_E_FD;
	}
	if (mode == PROTO_CONTENT_FILE && fd < 0) {
		life_fail(r, NULL, "PREPARE of file content came without the file's descriptor");
		return PROTO_E_FD;
	}
	if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
		life_fail(r, NULL, "the descriptor for file content is not a regular file");
		return PROTO_E_FD;
	}
	return PROTO_OK;
}

static int op_prepare(const uint8_t *payload, size_t len, int fd, struct life_result *r)
{
	enum proto_content mode;
	struct req_hold *holds;
	size_t nholds;
	int st = req_prepare_decode(payload, len, &mode, &holds, &nholds, r->msg, sizeof(r->msg));
	if (st == PROTO_OK)
		st = prepare_fd(mode, fd, r);
	if (st == PROTO_OK)
		st = apply_holds(holds, nholds, r);
	free(holds);
	if (st != PROTO_OK)
		return st;
	if (shim_phase() == PROTO_PHASE_QUIESCED) {
		/* Only a coordinator that skips PREPARE_MULTICAST gets here. */
		struct shim_alloc *a;
		hmap_for_each(&tbl.allocs, a) {
			if (a->mc) {
				life_fail(r, a,
					  "PREPARE before PREPARE_MULTICAST: multicast objects must be taken down "
					  "first");
				return PROTO_E_PHASE;
			}
		}
	}
	/* Importers first: a creator's (or holder's) allocation then has no importer left. */
	CUresult rc = for_each_shared_import(prepare_importer, r);
	if (!rc)
		rc = prepare_creators(mode, fd, r);
	if (rc)
		return shim_step_failed(r, PROTO_E_DRIVER);
	return PROTO_OK;
}

/* ---- RESTORE ---- */

/* A creator's allocation made anew (host content) for its saved bytes. */
static CUresult recreate(struct shim_alloc *a, struct life_result *r)
{
	if (!a->saved && !a->in_file) {
		life_fail(r, a, "released without a copy of its bytes");
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUresult rc = life_enter(a, r);
	if (rc)
		return rc;
	CUmemGenericAllocationHandle h;
	rc = real.cuMemCreate(&h, a->size, &a->prop, 0);
	if (rc) {
		life_fail(r, a, "cuMemCreate(%zu bytes, device %d) failed: %s", a->size, a->prop.location.id,
			  shim_cu_name(rc));
		return rc;
	}
	alloc_set_driver(a, h); /* its entry, if any, exists: cannot fail */
	return CUDA_SUCCESS;
}

/* A creator's allocation, holding its bytes again, mapped where it was (its
 * access granted): its native reference dropped, its export entry current. */
static CUresult creator_attached(struct shim_alloc *a, struct life_result *r)
{
	a->native_ref = false;
	hostcopy_forget(a);
	life_drop_spare_ref(a);
	/* Its device may have changed (a device map): the entry follows. */
	if (exports_publish(a) < 0) {
		life_fail(r, a, "out of memory registering its export");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* Copy back what list[0..n) saved: those in the file first (fd), then those
 * in the arena. */
static CUresult load_saved(struct shim_alloc **list, size_t n, int fd, struct life_result *r)
{
	size_t infile = 0;
	while (infile < n && list[infile]->in_file)
		infile++;
	CUresult rc = infile ? hostfile_load(list, infile, fd, r) : CUDA_SUCCESS;
	return rc ? rc : hostcopy_load(list + infile, n - infile, r);
}

/* Every creator's allocation prepare touched: those released (host or file
 * content) made anew, mapped again and their bytes copied back together; then
 * the others mapped again. Bytes in a file (fd) are checked to be there before
 * anything is made. A failure before the copies are done takes down what this step
 * made (the saved bytes stay, for another try); after, an allocation holds its
 * bytes and only its mappings are left to redo. */
static CUresult restore_creators(int fd, struct life_result *r)
{
	size_t n, k = 0, fresh = 0;
	struct shim_alloc **list = collect(true, false, &n, r);
	if (!list)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n; i++) {
		if (!untouched(list[i]))
			list[k++] = list[i];
		else
			hostcopy_forget(list[i]); /* (never kept past its prepare) */
	}
	n = k;
	size_t infile = 0;
	for (int pass = 0; pass < 2; pass++) { /* the released ones first, those in the file first of them */
		for (size_t i = fresh; i < n; i++) {
			if (list[i]->detached && (pass || list[i]->in_file)) {
				struct shim_alloc *t = list[fresh];
				list[fresh++] = list[i];
				list[i] = t;
			}
		}
		if (!pass)
			infile = fresh;
	}
	CUresult rc = infile ? hostfile_check(list, infile, fd, r) : CUDA_SUCCESS;
	size_t made = 0;
	while (!rc && made < fresh)
		if (!(rc = recreate(list[made], r)))
			made++;
	/* Mapped where they were first, their access granted together: the copies
	 * can go through those mappings. */
	struct grants g = {0};
	for (size_t i = 0; !rc && i < fresh; i++)
		rc = life_attach_mappings(list[i], &g, r);
	if (!rc)
		rc = life_grant(&g, r);
	if (!rc)
		rc = load_saved(list, fresh, fd, r);
	if (rc) {
		grants_free(&g);
		for (size_t i = 0; i < made; i++) {
			life_detach_mappings(list[i], &(struct life_result){0});
			life_release_ref(list[i], NULL);
		}
		free(list);
		return rc;
	}
	for (size_t i = 0; i < fresh; i++)
		list[i]->detached = false;
	/* The others mapped again too; each lets go of its spare reference only
	 * once its mappings hold it (a failed grant unmaps them). */
	for (size_t i = 0; !rc && i < n; i++)
		rc = life_attach_mappings(list[i], &g, r);
	if (!rc)
		rc = life_grant(&g, r);
	for (size_t i = 0; !rc && i < n; i++) {
		rc = creator_attached(list[i], r);
		r->count += !rc;
	}
	grants_free(&g);
	free(list);
	return rc;
}

/* An importer to rebuild, copied out so that redemption runs without the lock. */
/* One connection per creator, one context switch per device within it. */
static int by_creator_then_device(const void *x, const void *y)
{
	const struct redeem *a = x, *b = y;
	int c = strcmp(a->endpoint, b->endpoint);
	return c ? c : (a->dev > b->dev) - (a->dev < b->dev);
}

/* Import one redeemed capability and map it where it was. */
static CUresult import_again(const struct redeem *p, struct grants *g, struct life_result *r)
{
	pthread_mutex_lock(&tbl.lock);
	struct shim_alloc *a = hmap_get(&tbl.allocs, p->key);
	CUresult rc = CUDA_SUCCESS;
	if (!a) {
		/* gone meanwhile: nothing to rebuild */
	} else if (p->fd < 0) {
		life_fail(r, a, "redeeming its capability failed: %s", p->err ? p->err : "(no memory to say why)");
		rc = CUDA_ERROR_INVALID_VALUE;
	} else if (!(rc = life_enter(a, r))) { /* (a failure is named there) */
		CUmemGenericAllocationHandle h;
		rc = real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)p->fd,
							 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (rc) {
			life_fail(r, a, "cuMemImportFromShareableHandle failed: %s", shim_cu_name(rc));
		} else {
			alloc_set_driver(a, h); /* an importer: no entry */
			rc = life_attach_mappings(a, g, r);
			if (rc) {
				life_detach_mappings(a, &(struct life_result){0});
				life_release_ref(a, NULL);
			} else {
				a->detached = false; /* its spare reference goes once its access is granted */
				r->count++;
			}
		}
	}
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

struct import_run {
	struct life_result *r;
	struct grants g; /* their mappings, granted once every import is in */
	CUresult rc;     /* the first failure: the rest are not imported */
};

static void import_each(struct redeem *it, void *arg)
{
	struct import_run *run = arg;
	if (!run->rc)
		run->rc = import_again(it, &run->g, run->r);
}

/* The creators' endpoints, each once: the redemption runs without the lock. */
struct endpoints {
	char **v;
	size_t n;
};

static const char *endpoint_intern(struct endpoints *e, const char *name)
{
	for (size_t i = 0; i < e->n; i++)
		if (!strcmp(e->v[i], name))
			return e->v[i];
	char **more = realloc(e->v, (e->n + 1) * sizeof(*more));
	if (!more)
		return NULL;
	e->v = more;
	return (e->v[e->n] = strdup(name)) ? e->v[e->n++] : NULL;
}

static void endpoints_free(struct endpoints *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
}

static int op_restore_importers(struct life_result *r)
{
	size_t n = 0;
	pthread_mutex_lock(&tbl.lock);
	/* An import a failed prepare left in place may name an allocation its
	 * creator has since made anew (host content): every import is taken down
	 * and redeemed again, so that all of them name what the creators hold now. */
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (a->mc || acts_as_creator(a) || a->detached)
			continue;
		CUresult rc = prepare_importer(a, r);
		if (rc) {
			pthread_mutex_unlock(&tbl.lock);
			return PROTO_E_DRIVER;
		}
	}
	hmap_for_each(&tbl.allocs, a)
		n += !a->mc && !acts_as_creator(a) && a->detached;
	struct redeem *list = calloc(n ? n : 1, sizeof(*list));
	struct endpoints names = {0};
	size_t k = 0;
	hmap_for_each(&tbl.allocs, a) {
		if (!list)
			break;
		if (a->mc || acts_as_creator(a) || !a->detached)
			continue;
		list[k] = (struct redeem){.key = a->key,
					  .dev = ctx_device_of(a),
					  .endpoint = endpoint_intern(&names,
								      a->creator_endpoint ? a->creator_endpoint : ""),
					  .alloc_id = a->id,
					  .token = a->token,
					  .fd = -1};
		if (!list[k].endpoint) {
			free(list);
			list = NULL;
			break;
		}
		k++;
	}
	pthread_mutex_unlock(&tbl.lock);
	if (!list) {
		endpoints_free(&names);
		snprintf(r->msg, sizeof(r->msg), "out of memory");
		return PROTO_E_INTERNAL;
	}
	qsort(list, n, sizeof(*list), by_creator_then_device);
	/* Redeem every capability at its creator (restored first); each FD is
	 * imported as it comes, while the creator exports the next batch. */
	struct import_run run = {.r = r};
	cap_redeem_all(list, n, import_each, &run);
	pthread_mutex_lock(&tbl.lock);
	if (!run.rc)
		run.rc = life_grant(&run.g, r);
	for (size_t i = 0; !run.rc && i < n; i++) {
		a = hmap_get(&tbl.allocs, list[i].key);
		if (a)
			life_drop_spare_ref(a);
	}
	grants_free(&run.g);
	pthread_mutex_unlock(&tbl.lock);
	free(list);
	endpoints_free(&names);
	return run.rc ? PROTO_E_DRIVER : PROTO_OK;
}

static bool all_attached(struct life_result *r)
{
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (a->detached) {
			life_fail(r, a, "still detached");
			return false;
		}
		for (size_t j = 0; a->mc && j < a->mc->nbinds; j++) {
			if (a->mc->binds[j].detached) {
				life_fail(r, a, "its bind at offset %zu is still undone", a->mc->binds[j].mc_offset);
				return false;
			}
		}
	}
	for (struct itree_node *n = itree_first_from(&tbl.mappings, 0); n; n = itree_next(&tbl.mappings, n)) {
		struct shim_mapping *m = (struct shim_mapping *)n;
		if (m->detached) {
			life_fail(r, m->alloc, "mapping %#llx still detached", (unsigned long long)n->start);
			return false;
		}
	}
	return true;
}

/* After a native restore onto other GPUs: translate every recorded device
 * ordinal (allocations' locations, mappings' access) by the F_DEVICE_MAP pairs
 * of the request. Caller holds tbl.lock. */
static int apply_device_map(const uint8_t *payload, size_t len, struct life_result *r)
{
	int map[PROTO_MAX_DEVICES];
	size_t pairs;
	int st = req_device_map_decode(payload, len, map, &pairs, r->msg, sizeof(r->msg));
	if (st != PROTO_OK || !pairs)
		return st;
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (a->mc)
			mc_apply_device_map(a, map);
		else if (a->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && a->prop.location.id >= 0 &&
			 a->prop.location.id < PROTO_MAX_DEVICES)
			a->prop.location.id = map[a->prop.location.id];
		for (struct shim_mapping *m = a->maps; m; m = m->sibling)
			for (size_t k = 0; k < m->naccess; k++)
				if (m->access[k].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
				    m->access[k].location.id >= 0 && m->access[k].location.id < PROTO_MAX_DEVICES)
					m->access[k].location.id = map[m->access[k].location.id];
	}
	return PROTO_OK;
}

/* ---- the steps (served through dispatch.c, ruled by ops.def) ---- */

/* A step's result: a failure leaves the process FAILED. */
static int step_result(struct op_call *c, int rc)
{
	return rc == PROTO_OK ? rc : shim_step_failed(&c->r, rc);
}

/* QUIESCE undone: the gate opens again, the step failed (why in c->r). */
static int quiesce_undone(int rc)
{
	shim_step_set_phase(PROTO_PHASE_ACTIVE);
	return rc;
}

int serve_QUIESCE(struct op_call *c)
{
	/* The gate closes first (with the table locked: no mutation slips in),
	 * then the application's copies, sets and launches under way are waited
	 * for, then the work they queued: on a GPU a copy into memory about to be
	 * unmapped would fault. Devices of the tracked objects and every device
	 * whose primary context is active (a stream of one may copy into another's
	 * memory through peer access). The waits are bounded: a call that never
	 * returns (a kernel waiting for a peer that is not running) fails the step
	 * and opens the gate again, never leaves the application shut out. */
	bool used[PROTO_MAX_DEVICES] = {false};
	int rc = PROTO_OK;
	char why[600];
	pthread_mutex_lock(&tbl.lock);
	if (unrestorable_refusal(why, sizeof(why))) {
		life_fail(&c->r, NULL, "%s", why);
		rc = PROTO_E_UNRESTORABLE;
	} else {
		shim_step_set_phase(PROTO_PHASE_QUIESCED);
	}
	struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		int dev = ctx_device_of(a);
		if (dev >= 0 && dev < PROTO_MAX_DEVICES)
			used[dev] = true;
	}
	pthread_mutex_unlock(&tbl.lock);
	if (rc != PROTO_OK)
		return rc;
	int budget = shim_deadline_ms();
	double t0 = now_ms();
	unsigned left = 0;
	int drained = shim_work_drain(budget, &left);
	if (drained < 0) {
		life_fail(&c->r, NULL,
			  "QUIESCE: %u CUDA call%s of the application (copies, sets, launches) still under way after "
			  "%d ms%s; nothing taken down",
			  left, left == 1 ? "" : "s", budget,
			  drained == -ENOSYS ? " (membarrier refused: the calls could not be counted)" : "");
		return quiesce_undone(PROTO_E_TIMEOUT);
	}
	ctx_mark_active_devices(used, PROTO_MAX_DEVICES);
	int bad = -1;
	const char *call = "";
	int rest = budget - (int)(now_ms() - t0);
	CUresult sync = ctx_synchronize_within(used, rest > 100 ? rest : 100, &bad, &call);
	if (sync) {
		life_fail(&c->r, NULL, "QUIESCE: %s (device %d) failed: %s%s", call, bad, shim_cu_name(sync),
			  sync == CUDA_ERROR_TIMEOUT ? " (the work queued before the gate closed did not finish)" : "");
		return quiesce_undone(sync == CUDA_ERROR_TIMEOUT ? PROTO_E_TIMEOUT : PROTO_E_DRIVER);
	}
	return PROTO_OK;
}

int serve_PREPARE_MULTICAST(struct op_call *c)
{
	return step_result(c, mc_prepare(&c->r));
}

int serve_PREPARE(struct op_call *c)
{
	pthread_mutex_lock(&tbl.lock);
	int rc = op_prepare(c->payload, c->len, c->in_fd, &c->r);
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

int serve_RESTORE_MULTICAST(struct op_call *c)
{
	return step_result(c, mc_restore_create(c->payload, c->len, &c->r));
}

int serve_RESTORE_MULTICAST_IMPORT(struct op_call *c)
{
	return step_result(c, mc_restore_import(c->payload, c->len, &c->r));
}

int serve_RESTORE_MULTICAST_BIND(struct op_call *c)
{
	return step_result(c, mc_restore_bind(c->payload, c->len, &c->r));
}

int serve_RESTORE_CREATORS(struct op_call *c)
{
	pthread_mutex_lock(&tbl.lock);
	int rc = apply_device_map(c->payload, c->len, &c->r);
	if (rc != PROTO_OK) {
		pthread_mutex_unlock(&tbl.lock);
		return rc;
	}
	CUresult cr = restore_creators(c->in_fd, &c->r);
	rc = step_result(c, cr ? PROTO_E_DRIVER : PROTO_OK);
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}

int serve_RESTORE_IMPORTERS(struct op_call *c)
{
	return step_result(c, op_restore_importers(&c->r));
}

int serve_RESUME(struct op_call *c)
{
	pthread_mutex_lock(&tbl.lock);
	int rc = all_attached(&c->r) ? PROTO_OK : PROTO_E_PHASE;
	pthread_mutex_unlock(&tbl.lock);
	return rc;
}
