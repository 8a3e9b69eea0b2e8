/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "cusnap/proto.h"
#include "cusnap/topo.h"
#include "cusnap/wire.h"

const char *topo_role_name(uint32_t role)
{
	return role == 1 ? "creator" : role == 2 ? "importer" : "unknown";
}

const char *topo_access_name(uint32_t flags)
{
	return flags == 3 ? "rw" : flags == 1 ? "r" : "none";
}

static int decode_identity(const struct proto_rec *r, struct topo_participant *p)
{
	struct proto_iter it;
	struct proto_rec f;
	piter_init(&it, r->value, r->len);
	int rc = 0;
	while (!rc && piter_next(&it, &f)) {
		switch (f.type) {
		case F_ID: rc = prec_id(&f, &p->id); break;
		case F_NSPID: rc = prec_u32(&f, &p->nspid); break;
		case F_PID: rc = prec_u32(&f, &p->pid); break;
		case F_PHASE: rc = prec_u32(&f, &p->phase); break;
		case F_ENDPOINT: rc = prec_str(&f, p->endpoint, sizeof(p->endpoint)); break;
		default: break;
		}
	}
	return rc ? rc : it.error;
}

static int decode_alloc(const struct proto_rec *r, struct topo_alloc *a)
{
	struct proto_iter it;
	struct proto_rec f;
	uint32_t dev = 0;
	memset(a, 0, sizeof(*a));
	piter_init(&it, r->value, r->len);
	int rc = 0;
	while (!rc && piter_next(&it, &f)) {
		switch (f.type) {
		case F_KEY: rc = prec_u64(&f, &a->key); break;
		case F_ALLOC_ID: rc = prec_id(&f, &a->id); break;
		case F_CREATOR: rc = prec_id(&f, &a->creator); break;
		case F_ROLE: rc = prec_u32(&f, &a->role); break;
		case F_SHARED: rc = prec_u32(&f, &a->shared); break;
		case F_SHARED_TYPES: rc = prec_u32(&f, &a->shared_types); break;
		case F_SIZE: rc = prec_u64(&f, &a->size); break;
		case F_ALLOC_TYPE: rc = prec_u32(&f, &a->alloc_type); break;
		case F_LOC_TYPE: rc = prec_u32(&f, &a->loc_type); break;
		case F_DEVICE: rc = prec_u32(&f, &dev); break;
		case F_HANDLE_TYPES: rc = prec_u32(&f, &a->handle_types); break;
		case F_ALLOC_FLAGS: rc = prec_u32(&f, &a->alloc_flags); break;
		case F_HANDLES: rc = prec_u32(&f, &a->handles); break;
		case F_MAPPINGS: rc = prec_u32(&f, &a->mappings); break;
		case F_GRANULARITY: rc = prec_u64(&f, &a->granularity); break;
		case F_DETACHED: rc = prec_u32(&f, &a->detached); break;
		case F_BINDS: rc = prec_u32(&f, &a->binds); break;
		default: break;
		}
	}
	a->device = (int32_t)dev;
	return rc ? rc : it.error;
}

static int decode_mapping(const struct proto_rec *r, struct topo_mapping *m)
{
	struct proto_iter it;
	struct proto_rec f;
	memset(m, 0, sizeof(*m));
	piter_init(&it, r->value, r->len);
	size_t cap = 0;
	int rc = 0;
	while (!rc && piter_next(&it, &f)) {
		switch (f.type) {
		case F_KEY: rc = prec_u64(&f, &m->key); break;
		case F_ALLOC_ID: rc = prec_id(&f, &m->alloc_id); break;
		case F_ADDRESS: rc = prec_u64(&f, &m->address); break;
		case F_SIZE: rc = prec_u64(&f, &m->size); break;
		case F_OFFSET: rc = prec_u64(&f, &m->offset); break;
		case F_MAP_FLAGS: rc = prec_u64(&f, &m->flags); break;
		case F_DETACHED: rc = prec_u32(&f, &m->detached); break;
		case F_ACCESS:
			if (f.len != 12) {
				rc = PROTO_E_LENGTH;
				break;
			}
			if (m->naccess == cap) {
				cap = cap ? cap * 2 : 4;
				struct topo_access *grown = realloc(m->access, cap * sizeof(*grown));
				if (!grown) {
					rc = PROTO_E_INTERNAL;
					break;
				}
				m->access = grown;
			}
			m->access[m->naccess].loc_type = wire_get_u32(f.value);
			m->access[m->naccess].loc_id = (int32_t)wire_get_u32(f.value + 4);
			m->access[m->naccess].flags = wire_get_u32(f.value + 8);
			m->naccess++;
			break;
		default: break;
		}
	}
	if (!rc)
		rc = it.error;
	if (rc) {
		free(m->access);
		m->access = NULL;
	}
	return rc;
}

static int decode_mc(const struct proto_rec *r, struct topo_mc *m)
{
	struct proto_iter it;
	struct proto_rec f;
	memset(m, 0, sizeof(*m));
	piter_init(&it, r->value, r->len);
	size_t cap = 0, icap = 0;
	uint32_t dev;
	int rc = 0;
	while (!rc && piter_next(&it, &f)) {
		switch (f.type) {
		case F_KEY: rc = prec_u64(&f, &m->key); break;
		case F_ALLOC_ID: rc = prec_id(&f, &m->id); break;
		case F_CREATOR: rc = prec_id(&f, &m->creator); break;
		case F_ROLE: rc = prec_u32(&f, &m->role); break;
		case F_SIZE: rc = prec_u64(&f, &m->size); break;
		case F_MC_USED: rc = prec_u64(&f, &m->used); break;
		case F_MC_DEVICES: rc = prec_u32(&f, &m->num_devices); break;
		case F_HANDLE_TYPES: rc = prec_u32(&f, &m->handle_types); break;
		case F_SHARED_TYPES: rc = prec_u32(&f, &m->shared_types); break;
		case F_GRANULARITY: rc = prec_u64(&f, &m->granularity); break;
		case F_HANDLES: rc = prec_u32(&f, &m->handles); break;
		case F_MAPPINGS: rc = prec_u32(&f, &m->mappings); break;
		case F_DETACHED: rc = prec_u32(&f, &m->detached); break;
		case F_MC_ADDED:
			rc = prec_u32(&f, &dev);
			if (!rc && m->nadded == cap) {
				cap = cap ? cap * 2 : 4;
				int32_t *grown = realloc(m->added, cap * sizeof(*grown));
				if (!grown)
					rc = PROTO_E_INTERNAL;
				else
					m->added = grown;
			}
			if (!rc)
				m->added[m->nadded++] = (int32_t)dev;
			break;
		case F_MC_IMPORTER:
			if (m->nimporters == icap) {
				icap = icap ? icap * 2 : 4;
				struct cusnap_id *grown = realloc(m->importers, icap * sizeof(*grown));
				if (!grown) {
					rc = PROTO_E_INTERNAL;
					break;
				}
				m->importers = grown;
			}
			rc = prec_id(&f, &m->importers[m->nimporters]);
			m->nimporters += !rc;
			break;
		default: break;
		}
	}
	if (!rc)
		rc = it.error;
	if (rc) {
		free(m->added);
		free(m->importers);
		m->added = NULL;
		m->importers = NULL;
	}
	return rc;
}

static int decode_bind(const struct proto_rec *r, struct topo_mc_bind *b)
{
	struct proto_iter it;
	struct proto_rec f;
	uint32_t dev = 0;
	memset(b, 0, sizeof(*b));
	piter_init(&it, r->value, r->len);
	int rc = 0;
	while (!rc && piter_next(&it, &f)) {
		switch (f.type) {
		case F_KEY: rc = prec_u64(&f, &b->key); break;
		case F_ALLOC_ID: rc = prec_id(&f, &b->mc_id); break;
		case F_DEVICE: rc = prec_u32(&f, &dev); break;
		case F_MC_OFFSET: rc = prec_u64(&f, &b->mc_offset); break;
		case F_SIZE: rc = prec_u64(&f, &b->size); break;
		case F_MEMBER: rc = prec_id(&f, &b->member); break;
		case F_MEMBER_OFFSET: rc = prec_u64(&f, &b->member_offset); break;
		case F_ADDRESS: rc = prec_u64(&f, &b->member_va); break;
		case F_DETACHED: rc = prec_u32(&f, &b->detached); break;
		default: break;
		}
	}
	b->device = (int32_t)dev;
	return rc ? rc : it.error;
}

/* Append one element of size sz to *arr (count *n, capacity *cap). */
static void *grow(void **arr, size_t *n, size_t *cap, size_t sz)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *g = realloc(*arr, c * sz);
		if (!g)
			return NULL;
		*arr = g;
		*cap = c;
	}
	return (uint8_t *)*arr + (*n)++ * sz;
}

int topo_decode(const uint8_t *payload, size_t len, struct topo_participant *p)
{
	memset(p, 0, sizeof(*p));
	struct proto_iter it;
	struct proto_rec r;
	size_t acap = 0, mcap = 0, ccap = 0, bcap = 0;
	int rc = 0;
	piter_init(&it, payload, len);
	while (!rc && piter_next(&it, &r)) {
		if (r.type == REC_PARTICIPANT || r.type == REC_HELLO) {
			rc = decode_identity(&r, p);
		} else if (r.type == REC_ALLOCATION) {
			struct topo_alloc *a = grow((void **)&p->allocs, &p->nallocs, &acap, sizeof(*a));
			rc = a ? decode_alloc(&r, a) : PROTO_E_INTERNAL;
		} else if (r.type == REC_MAPPING) {
			struct topo_mapping *m = grow((void **)&p->maps, &p->nmaps, &mcap, sizeof(*m));
			rc = m ? decode_mapping(&r, m) : PROTO_E_INTERNAL;
			if (rc && m)
				p->nmaps--;
		} else if (r.type == REC_MULTICAST) {
			struct topo_mc *m = grow((void **)&p->mcs, &p->nmcs, &ccap, sizeof(*m));
			rc = m ? decode_mc(&r, m) : PROTO_E_INTERNAL;
			if (rc && m)
				p->nmcs--;
		} else if (r.type == REC_MC_BIND) {
			struct topo_mc_bind *b = grow((void **)&p->binds, &p->nbinds, &bcap, sizeof(*b));
			rc = b ? decode_bind(&r, b) : PROTO_E_INTERNAL;
		}
	}
	if (!rc)
		rc = it.error;
	if (rc)
		topo_free(p);
	return rc;
}

void topo_free(struct topo_participant *p)
{
	for (size_t i = 0; i < p->nmaps; i++)
		free(p->maps[i].access);
	for (size_t i = 0; i < p->nmcs; i++) {
		free(p->mcs[i].added);
		free(p->mcs[i].importers);
	}
	free(p->maps);
	free(p->allocs);
	free(p->mcs);
	free(p->binds);
	p->maps = NULL;
	p->allocs = NULL;
	p->mcs = NULL;
	p->binds = NULL;
	p->nmaps = p->nallocs = p->nmcs = p->nbinds = 0;
}
