/* SPDX-License-Identifier: MIT */
/* Topology validation (DESIGN.md §6.5) and the post-restore comparison, both
 * O(records) with hash maps. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "cusnap/hmap.h"
#include "cusnap/request.h"

struct creator_ref {
	size_t part;
	const struct topo_alloc *alloc;
};

/* The allocation whose id is a's in map m, or NULL. */
static struct creator_ref *ref_of(const struct hmap *m, const struct topo_alloc *a)
{
	struct creator_ref *c = hmap_get(m, id_hash(&a->id));
	return c && id_equal(&c->alloc->id, &a->id) ? c : NULL;
}

/* (ns pid, pid) order: the holder is the importer first in it (DESIGN.md §6.2). */
static bool before(const struct coord_target *t, size_t i, size_t j)
{
	return t[i].ns != t[j].ns ? t[i].ns < t[j].ns : t[i].obs < t[j].obs;
}

/* Every shared allocation that no participant holds as its creator: the
 * importer that carries it (its creator must be in the group), into holders
 * and, when wanted, the request's list. */
static int pick_holders(const struct coord_target *t, const struct topo_participant *p, size_t n,
			const struct hmap *ids, const struct hmap *creators, struct hmap *holders,
			struct creator_ref *refs, size_t *nrefs, struct coord_holds *out, char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1], hex2[ID_HEX_LEN + 1];
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < p[i].nallocs; j++) {
			const struct topo_alloc *a = &p[i].allocs[j];
			if (!a->shared || a->role != PROTO_ROLE_IMPORTER || ref_of(creators, a))
				continue;
			const struct topo_participant *cp = hmap_get(ids, id_hash(&a->creator));
			if (!cp || !id_equal(&cp->id, &a->creator)) {
				id_hex(&a->id, hex);
				id_hex(&a->creator, hex2);
				snprintf(err, errlen,
					 "participant %d (ns %d): allocation %s is imported from participant %s, which "
					 "is not in the group (partial group)",
					 t[i].obs, t[i].ns, hex, hex2);
				return -1;
			}
			struct creator_ref *h = ref_of(holders, a);
			if (h && (h->part == i || before(t, h->part, i)))
				continue;
			if (h) {
				*h = (struct creator_ref){i, a};
				continue;
			}
			refs[*nrefs] = (struct creator_ref){i, a};
			if (hmap_put(holders, id_hash(&a->id), &refs[(*nrefs)++]) < 0) {
				snprintf(err, errlen, "out of memory");
				return -1;
			}
		}
	}
	size_t want = holders->len;
	if (!want)
		return 0;
	if (out && !(out->v = calloc(want, sizeof(*out->v)))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	const struct creator_ref *h;
	hmap_for_each(holders, h) {
		const struct topo_participant *hp = &p[h->part];
		const struct topo_participant *cp = hmap_get(ids, id_hash(&h->alloc->creator));
		size_t ci = (size_t)(cp - p);
		const struct topo_participant *old = !(hp->caps & PROTO_CAP_HOLDERS)   ? hp
						     : !(cp->caps & PROTO_CAP_HOLDERS) ? cp
										       : NULL;
		if (old) {
			size_t oi = (size_t)(old - p);
			id_hex(&h->alloc->id, hex);
			snprintf(err, errlen,
				 "participant %d (ns %d): allocation %s: its creator, participant %d (ns %d), holds "
				 "neither a handle nor a mapping of it, and the interposer of participant %d (ns %d) "
				 "is too old to let an importer carry it (protocol 1.%u)",
				 t[h->part].obs, t[h->part].ns, hex, t[ci].obs, t[ci].ns, t[oi].obs, t[oi].ns,
				 old->minor);
			free(out ? out->v : NULL);
			if (out)
				out->v = NULL;
			return -1;
		}
		if (out)
			out->v[out->n++] = (struct req_hold){.alloc = h->alloc->id,
							     .creator = h->alloc->creator,
							     .holder = hp->id,
							     .endpoint = hp->endpoint,
							     .endpoint_len = strlen(hp->endpoint)};
	}
	return 0;
}

/* One participant's own records: shared only by file descriptor, importers
 * agreeing with their creator (or holder), every mapping inside an
 * allocation or multicast object of its own. 0, or -1 with err. */
static int check_participant(const struct coord_target *ti, const struct topo_participant *pi,
			     const struct hmap *creators, const struct hmap *holders, char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1];
	int rc = -1;
	struct hmap keys = {0}, mckeys = {0};
	for (size_t j = 0; j < pi->nallocs; j++) {
		const struct topo_alloc *a = &pi->allocs[j];
		id_hex(&a->id, hex);
		if (a->shared && (a->shared_types & ~(uint32_t)PROTO_HANDLE_POSIX_FD)) {
			snprintf(err, errlen,
				 "participant %d (ns %d): allocation %s was shared as handle type %#x: only "
				 "POSIX file "
				 "descriptor sharing can be checkpointed (FABRIC and others are not)",
				 ti->obs, ti->ns, hex, a->shared_types);
			goto done;
		}
		if (a->role == PROTO_ROLE_IMPORTER) {
			const struct creator_ref *c = ref_of(creators, a);
			c = c ? c : ref_of(holders, a);
			/* Handle types: an import's are what came through (POSIX FD), a subset. */
			if (c && (c->alloc->size != a->size || c->alloc->device != a->device ||
				  (a->handle_types & ~c->alloc->handle_types))) {
				snprintf(err, errlen,
					 "participant %d (ns %d): allocation %s: importer and %s disagree "
					 "(size %" PRIu64 "/%" PRIu64 ", device %d/%d)",
					 ti->obs, ti->ns, hex, ref_of(creators, a) ? "creator" : "holder", a->size,
					 c->alloc->size, a->device, c->alloc->device);
				goto done;
			}
		}
		if (a->key && hmap_put(&keys, a->key, (void *)a) < 0)
			goto oom;
	}
	for (size_t j = 0; j < pi->nmcs; j++)
		if (hmap_put(&mckeys, pi->mcs[j].key, (void *)&pi->mcs[j]) < 0)
			goto oom;
	for (size_t j = 0; j < pi->nmaps; j++) {
		const struct topo_mapping *m = &pi->maps[j];
		const struct topo_alloc *a = hmap_get(&keys, m->key);
		const struct topo_mc *mc = a ? NULL : hmap_get(&mckeys, m->key);
		id_hex(&m->alloc_id, hex);
		if (!a && !mc) {
			snprintf(err, errlen,
				 "participant %d (ns %d): mapping %#" PRIx64 " names no allocation of its own", ti->obs,
				 ti->ns, m->address);
			goto done;
		}
		/* A multicast object's capacity: what was asked, or what was used of a rounded one. */
		uint64_t size = a ? a->size : mc->used > mc->size ? mc->used : mc->size;
		uint64_t g = a ? a->granularity : mc->granularity;
		g = g ? g : 1;
		if (!m->address || !m->size || m->address % g || m->size % g || m->offset % g || m->offset > size ||
		    m->size > size - m->offset) {
			snprintf(err, errlen,
				 "participant %d (ns %d): %s %s: mapping %#" PRIx64 "+%" PRIu64 " at offset %" PRIu64
				 " is not inside its %" PRIu64 " bytes or not aligned to %" PRIu64 " bytes",
				 ti->obs, ti->ns, a ? "allocation" : "multicast object", hex, m->address, m->size,
				 m->offset, size, g);
			goto done;
		}
	}
	rc = 0;
	goto done;
oom:
	snprintf(err, errlen, "out of memory");
done:
	hmap_free(&keys);
	hmap_free(&mckeys);
	return rc;
}

int coord_validate(const struct coord_target *t, const struct topo_participant *p, size_t n, struct coord_holds *holds,
		   char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1];
	int rc = -1;
	struct hmap ids = {0}, creators = {0}, holders = {0};
	struct creator_ref *refs = NULL;
	size_t total = 0;
	if (holds)
		*holds = (struct coord_holds){0};
	if (!n) {
		snprintf(err, errlen, "no participants");
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		total += p[i].nallocs;
	refs = calloc(total ? total : 1, sizeof(*refs));
	if (!refs) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	size_t nrefs = 0;
	/* Participants: well-formed, unique ids. */
	for (size_t i = 0; i < n; i++) {
		id_hex(&p[i].id, hex);
		if (id_is_zero(&p[i].id)) {
			snprintf(err, errlen, "participant %d (ns %d): no participant id", t[i].obs, t[i].ns);
			goto out;
		}
		const struct topo_participant *dup = hmap_get(&ids, id_hash(&p[i].id));
		if (dup && id_equal(&dup->id, &p[i].id)) {
			snprintf(err, errlen, "participant %d (ns %d): participant id %s is used twice", t[i].obs,
				 t[i].ns, hex);
			goto out;
		}
		if (hmap_put(&ids, id_hash(&p[i].id), (void *)&p[i]) < 0)
			goto oom;
	}
	/* Shared allocations: at most one creator among the participants, anchored. */
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < p[i].nallocs; j++) {
			const struct topo_alloc *a = &p[i].allocs[j];
			if (!a->shared || a->role != PROTO_ROLE_CREATOR)
				continue;
			id_hex(&a->id, hex);
			struct creator_ref *prev = ref_of(&creators, a);
			if (prev) {
				snprintf(err, errlen,
					 "allocation %s has two creators: participant %d (ns %d) and %d (ns %d)", hex,
					 t[prev->part].obs, t[prev->part].ns, t[i].obs, t[i].ns);
				goto out;
			}
			if (!id_equal(&a->creator, &p[i].id)) {
				snprintf(err, errlen,
					 "participant %d (ns %d): allocation %s: creator record names another "
					 "participant",
					 t[i].obs, t[i].ns, hex);
				goto out;
			}
			if (!a->handles && !a->mappings && !a->binds) {
				/* (the shim forgets such a record: it cannot be prepared) */
				snprintf(err, errlen,
					 "participant %d (ns %d): allocation %s: the creator's record holds neither a "
					 "handle nor a mapping",
					 t[i].obs, t[i].ns, hex);
				goto out;
			}
			refs[nrefs] = (struct creator_ref){i, a};
			if (hmap_put(&creators, id_hash(&a->id), &refs[nrefs++]) < 0)
				goto oom;
		}
	}
	/* The others: an importer carries each (or the group is partial). */
	if (pick_holders(t, p, n, &ids, &creators, &holders, refs, &nrefs, holds, err, errlen) < 0)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (check_participant(&t[i], &p[i], &creators, &holders, err, errlen) < 0)
			goto out;
	rc = coord_validate_multicast(t, p, n, err, errlen);
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	if (rc < 0 && holds) {
		free(holds->v);
		*holds = (struct coord_holds){0};
	}
	hmap_free(&ids);
	hmap_free(&creators);
	hmap_free(&holders);
	free(refs);
	return rc;
}

int coord_remap_device(int dev, const int *map, size_t nmap)
{
	return map && dev >= 0 && (size_t)dev < nmap && map[dev] >= 0 ? map[dev] : dev;
}

static bool same_access(const struct topo_mapping *a, const struct topo_mapping *b, const int *map, size_t nmap)
{
	if (a->naccess != b->naccess)
		return false;
	for (size_t i = 0; i < a->naccess; i++) {
		bool found = false;
		for (size_t j = 0; j < b->naccess && !found; j++)
			found = a->access[i].loc_type == b->access[j].loc_type &&
				coord_remap_device(a->access[i].loc_id, map, nmap) == b->access[j].loc_id &&
				a->access[i].flags == b->access[j].flags;
		if (!found)
			return false;
	}
	return true;
}

int coord_compare(const struct topo_participant *rec, const struct topo_participant *cur, const int *map, size_t nmap,
		  char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1];
	if (!id_equal(&rec->id, &cur->id) || rec->nallocs != cur->nallocs || rec->nmaps != cur->nmaps) {
		snprintf(err, errlen, "%zu allocations and %zu mappings recorded, %zu and %zu now", rec->nallocs,
			 rec->nmaps, cur->nallocs, cur->nmaps);
		return -1;
	}
	struct hmap allocs = {0}, maps = {0};
	int rc = 0;
	for (size_t i = 0; i < cur->nallocs && !rc; i++)
		rc = hmap_put(&allocs, cur->allocs[i].key, &cur->allocs[i]);
	for (size_t i = 0; i < cur->nmaps && !rc; i++)
		rc = hmap_put(&maps, cur->maps[i].address, &cur->maps[i]);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < rec->nallocs; i++) {
		const struct topo_alloc *r = &rec->allocs[i], *c = hmap_get(&allocs, r->key);
		id_hex(&r->id, hex);
		if (!c || !id_equal(&c->id, &r->id) || c->role != r->role || c->size != r->size ||
		    c->device != coord_remap_device(r->device, map, nmap) || c->handles != r->handles) {
			snprintf(err, errlen, "allocation %s differs after restore (or is missing)", hex);
			rc = -1;
			goto out;
		}
		if (c->detached) {
			snprintf(err, errlen, "allocation %s is still detached", hex);
			rc = -1;
			goto out;
		}
	}
	for (size_t i = 0; i < rec->nmaps; i++) {
		const struct topo_mapping *r = &rec->maps[i], *c = hmap_get(&maps, r->address);
		id_hex(&r->alloc_id, hex);
		if (!c || c->size != r->size || c->offset != r->offset || !id_equal(&c->alloc_id, &r->alloc_id) ||
		    c->flags != r->flags || c->detached || !same_access(r, c, map, nmap)) {
			snprintf(err, errlen,
				 "allocation %s: mapping %#" PRIx64
				 " differs after restore (address, size, offset or access)",
				 hex, r->address);
			rc = -1;
			goto out;
		}
	}
	rc = coord_compare_multicast(rec, cur, map, nmap, err, errlen);
out:
	hmap_free(&allocs);
	hmap_free(&maps);
	return rc;
}
