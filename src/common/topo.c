/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "cusnap/proto.h"
#include "cusnap/topo.h"
#include "cusnap/wire.h"

const char *topo_role_name(uint32_t role)
{
	return role == PROTO_ROLE_CREATOR ? "creator" : role == PROTO_ROLE_IMPORTER ? "importer" : "unknown";
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
		case F_MAJOR_MIN: rc = prec_u32(&f, &p->major_min); break;
		case F_MAJOR_MAX: rc = prec_u32(&f, &p->major_max); break;
		case F_MINOR: rc = prec_u32(&f, &p->minor); break;
		case F_CAPS: rc = prec_u64(&f, &p->caps); break;
		case F_GENERATION: rc = prec_u64(&f, &p->generation); break;
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
		case F_HOLDER: rc = prec_u32(&f, &a->holder); break;
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
			if (f.len != WIRE_ACCESS_LEN) {
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
			struct topo_access *x = &m->access[m->naccess++];
			wire_get_access(f.value, &x->loc_type, &x->loc_id, &x->flags);
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

/* ---- encoders ---- */

void topo_encode_identity(struct proto_buf *b, uint16_t type, const struct topo_participant *p)
{
	size_t at = pbuf_begin(b, type);
	pbuf_put_id(b, F_ID, &p->id);
	pbuf_put_u32(b, F_NSPID, p->nspid);
	pbuf_put_u32(b, F_PID, p->pid);
	pbuf_put_u32(b, F_PHASE, p->phase);
	pbuf_put_u32(b, F_MAJOR_MIN, p->major_min);
	pbuf_put_u32(b, F_MAJOR_MAX, p->major_max);
	pbuf_put_u32(b, F_MINOR, p->minor);
	pbuf_put_u64(b, F_CAPS, p->caps);
	if (p->generation)
		pbuf_put_u64(b, F_GENERATION, p->generation);
	pbuf_put_str(b, F_ENDPOINT, p->endpoint);
	pbuf_end(b, at);
}

void topo_encode_alloc(struct proto_buf *b, const struct topo_alloc *a)
{
	size_t at = pbuf_begin(b, REC_ALLOCATION);
	pbuf_put_u64(b, F_KEY, a->key);
	pbuf_put_id(b, F_ALLOC_ID, &a->id);
	pbuf_put_id(b, F_CREATOR, &a->creator);
	pbuf_put_u32(b, F_ROLE, a->role);
	pbuf_put_u32(b, F_SHARED, a->shared);
	pbuf_put_u32(b, F_SHARED_TYPES, a->shared_types);
	pbuf_put_u64(b, F_SIZE, a->size);
	pbuf_put_u32(b, F_ALLOC_TYPE, a->alloc_type);
	pbuf_put_u32(b, F_LOC_TYPE, a->loc_type);
	pbuf_put_u32(b, F_DEVICE, (uint32_t)a->device);
	pbuf_put_u32(b, F_HANDLE_TYPES, a->handle_types);
	pbuf_put_u32(b, F_ALLOC_FLAGS, a->alloc_flags);
	pbuf_put_u32(b, F_HANDLES, a->handles);
	pbuf_put_u32(b, F_MAPPINGS, a->mappings);
	pbuf_put_u64(b, F_GRANULARITY, a->granularity);
	pbuf_put_u32(b, F_DETACHED, a->detached);
	pbuf_put_u32(b, F_BINDS, a->binds);
	if (a->holder)
		pbuf_put_u32(b, F_HOLDER, a->holder);
	pbuf_end(b, at);
}

void topo_encode_mapping(struct proto_buf *b, const struct topo_mapping *m)
{
	size_t at = pbuf_begin(b, REC_MAPPING);
	pbuf_put_u64(b, F_KEY, m->key);
	pbuf_put_id(b, F_ALLOC_ID, &m->alloc_id);
	pbuf_put_u64(b, F_ADDRESS, m->address);
	pbuf_put_u64(b, F_SIZE, m->size);
	pbuf_put_u64(b, F_OFFSET, m->offset);
	pbuf_put_u64(b, F_MAP_FLAGS, m->flags);
	pbuf_put_u32(b, F_DETACHED, m->detached);
	for (size_t i = 0; i < m->naccess; i++) {
		uint8_t acc[WIRE_ACCESS_LEN];
		wire_put_access(acc, m->access[i].loc_type, m->access[i].loc_id, m->access[i].flags);
		pbuf_put(b, F_ACCESS, acc, sizeof(acc));
	}
	pbuf_end(b, at);
}

void topo_encode_mc(struct proto_buf *b, const struct topo_mc *m)
{
	size_t at = pbuf_begin(b, REC_MULTICAST);
	pbuf_put_u64(b, F_KEY, m->key);
	pbuf_put_id(b, F_ALLOC_ID, &m->id);
	pbuf_put_id(b, F_CREATOR, &m->creator);
	pbuf_put_u32(b, F_ROLE, m->role);
	pbuf_put_u64(b, F_SIZE, m->size);
	pbuf_put_u64(b, F_MC_USED, m->used);
	pbuf_put_u32(b, F_MC_DEVICES, m->num_devices);
	pbuf_put_u32(b, F_HANDLE_TYPES, m->handle_types);
	pbuf_put_u32(b, F_SHARED_TYPES, m->shared_types);
	pbuf_put_u64(b, F_GRANULARITY, m->granularity);
	pbuf_put_u32(b, F_HANDLES, m->handles);
	pbuf_put_u32(b, F_MAPPINGS, m->mappings);
	pbuf_put_u32(b, F_DETACHED, m->detached);
	for (size_t i = 0; i < m->nadded; i++)
		pbuf_put_u32(b, F_MC_ADDED, (uint32_t)m->added[i]);
	for (size_t i = 0; i < m->nimporters; i++)
		pbuf_put_id(b, F_MC_IMPORTER, &m->importers[i]);
	pbuf_end(b, at);
}

void topo_encode_bind(struct proto_buf *b, const struct topo_mc_bind *x)
{
	size_t at = pbuf_begin(b, REC_MC_BIND);
	pbuf_put_u64(b, F_KEY, x->key);
	pbuf_put_id(b, F_ALLOC_ID, &x->mc_id);
	pbuf_put_u32(b, F_DEVICE, (uint32_t)x->device);
	pbuf_put_u64(b, F_MC_OFFSET, x->mc_offset);
	pbuf_put_u64(b, F_SIZE, x->size);
	if (!id_is_zero(&x->member))
		pbuf_put_id(b, F_MEMBER, &x->member);
	pbuf_put_u64(b, F_MEMBER_OFFSET, x->member_offset);
	pbuf_put_u64(b, F_ADDRESS, x->member_va);
	pbuf_put_u32(b, F_DETACHED, x->detached);
	pbuf_end(b, at);
}

void topo_encode(struct proto_buf *b, const struct topo_participant *p)
{
	topo_encode_identity(b, REC_PARTICIPANT, p);
	for (size_t i = 0; i < p->nallocs; i++)
		topo_encode_alloc(b, &p->allocs[i]);
	for (size_t i = 0; i < p->nmcs; i++)
		topo_encode_mc(b, &p->mcs[i]);
	for (size_t i = 0; i < p->nbinds; i++)
		topo_encode_bind(b, &p->binds[i]);
	for (size_t i = 0; i < p->nmaps; i++)
		topo_encode_mapping(b, &p->maps[i]);
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
