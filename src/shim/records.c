/* SPDX-License-Identifier: MIT */
/* HELLO and INSPECT (DESIGN.md §5): the shim's tables as records. Each record
 * is filled in as its struct topo_* and written by the common encoder, the
 * inverse of the decoder the tools use, so the codec lives in one place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/proto.h"
#include "cusnap/topo.h"
#include "shim.h"

_Static_assert((int)PROTO_HANDLE_POSIX_FD == (int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
		       (int)PROTO_HANDLE_WIN32 == (int)CU_MEM_HANDLE_TYPE_WIN32 &&
		       (int)PROTO_HANDLE_WIN32_KMT == (int)CU_MEM_HANDLE_TYPE_WIN32_KMT &&
		       (int)PROTO_HANDLE_FABRIC == (int)CU_MEM_HANDLE_TYPE_FABRIC,
	       "handle types travel as cuda.h numbers them");

/* This participant's identity record; generation: the count of tracked
 * changes (INSPECT: read under tbl.lock before the records are, so that a
 * change between the two moves the count a later step answers). */
static void put_identity(struct proto_buf *b, uint16_t type, uint64_t generation)
{
	const struct shim_identity *me = shim_self();
	struct topo_participant *p = calloc(1, sizeof(*p)); /* 4 KiB of endpoint: not on these stacks */
	if (!p || !me) {
		b->failed = true;
		free(p);
		return;
	}
	p->id = me->id;
	p->nspid = (uint32_t)me->nspid;
	p->pid = (uint32_t)me->pid;
	p->phase = (uint32_t)shim_phase();
	p->major_min = p->major_max = PROTO_MAJOR;
	p->minor = PROTO_MINOR;
	p->caps = PROTO_CAPS_SHIM;
	p->generation = generation;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", me->endpoint);
	topo_encode_identity(b, type, p);
	free(p);
}

static void put_alloc(struct proto_buf *b, const struct shim_alloc *a)
{
	const CUmemAllocationProp *prop = &a->prop;
	struct topo_alloc t = {
		.key = a->key,
		.id = a->id,
		.creator = a->creator,
		.role = (uint32_t)a->role,
		.shared = a->shared,
		.shared_types = a->shared_types,
		.size = a->size,
		.alloc_type = (uint32_t)prop->type,
		.loc_type = (uint32_t)prop->location.type,
		.device = prop->location.id,
		.handle_types = (uint32_t)prop->requestedHandleTypes,
		.alloc_flags = (uint32_t)prop->allocFlags.compressionType |
			       (uint32_t)prop->allocFlags.gpuDirectRDMACapable << 8 |
			       (uint32_t)prop->allocFlags.usage << 16,
		.handles = (uint32_t)a->handles,
		.mappings = (uint32_t)a->mappings,
		.granularity = a->granularity,
		.detached = a->detached,
		.binds = (uint32_t)a->mc_binds,
		.holder = a->holder,
	};
	topo_encode_alloc(b, &t);
}

static void put_multicast(struct proto_buf *b, const struct shim_alloc *a)
{
	const struct shim_mc *mc = a->mc;
	_Static_assert(sizeof(CUdevice) == sizeof(int32_t), "CUdevice is an int");
	struct topo_mc t = {
		.key = a->key,
		.id = a->id,
		.creator = a->creator,
		.role = (uint32_t)a->role,
		.size = mc->prop.size,
		.used = mc->used,
		.num_devices = mc->prop.numDevices,
		.handle_types = (uint32_t)mc->prop.handleTypes,
		.shared_types = a->shared_types,
		.granularity = a->granularity,
		.handles = (uint32_t)a->handles,
		.mappings = (uint32_t)a->mappings,
		.detached = a->detached,
		.added = (int32_t *)mc->added,
		.nadded = mc->nadded,
	};
	if (a->role == SHIM_ROLE_CREATOR && !id_is_zero(&a->token))
		t.nimporters = exports_importers(&a->id, &t.importers);
	topo_encode_mc(b, &t);
	free(t.importers);
	for (size_t i = 0; i < mc->nbinds; i++) {
		const struct shim_mc_bind *x = &mc->binds[i];
		struct topo_mc_bind tb = {
			.key = a->key,
			.mc_id = a->id,
			.device = x->device,
			.mc_offset = x->mc_offset,
			.size = x->size,
			.member_offset = x->member_offset,
			.member_va = x->member_va,
			.detached = x->detached,
		};
		if (x->member)
			tb.member = x->member->id;
		topo_encode_bind(b, &tb);
	}
}

static void put_mapping(struct proto_buf *b, const struct shim_mapping *m)
{
	struct topo_access access[16], *acc = access;
	if (m->naccess > sizeof(access) / sizeof(access[0]) && !(acc = malloc(m->naccess * sizeof(*acc)))) {
		b->failed = true;
		return;
	}
	struct topo_mapping t = {
		.key = m->alloc->key,
		.alloc_id = m->alloc->id,
		.address = m->node.start,
		.size = m->node.end - m->node.start,
		.offset = m->offset,
		.flags = m->flags,
		.access = acc,
		.naccess = m->naccess,
		.detached = m->detached,
	};
	for (size_t i = 0; i < m->naccess; i++)
		acc[i] = (struct topo_access){.loc_type = (uint32_t)m->access[i].location.type,
					      .loc_id = m->access[i].location.id,
					      .flags = (uint32_t)m->access[i].flags};
	topo_encode_mapping(b, &t);
	if (acc != access)
		free(acc);
}

int serve_HELLO(struct op_call *c)
{
	put_identity(c->out, REC_HELLO, 0);
	return c->out->failed ? PROTO_E_INTERNAL : PROTO_OK;
}

int serve_INSPECT(struct op_call *c)
{
	struct proto_buf *out = c->out;
	pthread_mutex_lock(&tbl.lock);
	uint64_t generation = shim_generation();
	pthread_mutex_unlock(&tbl.lock);
	put_identity(out, REC_PARTICIPANT, generation);
	pthread_mutex_lock(&tbl.lock);
	const struct shim_alloc *a;
	hmap_for_each(&tbl.allocs, a) {
		if (a->mc)
			put_multicast(out, a);
		else
			put_alloc(out, a);
	}
	for (struct itree_node *n = itree_first_from(&tbl.mappings, 0); n; n = itree_next(&tbl.mappings, n))
		put_mapping(out, (struct shim_mapping *)n);
	pthread_mutex_unlock(&tbl.lock);
	return out->failed ? PROTO_E_INTERNAL : PROTO_OK;
}
