/* SPDX-License-Identifier: MIT */
/* Printing topologies: JSON for programs, text for people. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "coord_client.h"
#include "cusnap/json.h"
#include "cusnap/state.h"

#define JINT(x) json_integer((json_int_t)(x))

static json_t *access_json(const struct topo_mapping *m)
{
	json_t *a = json_array();
	for (size_t k = 0; k < m->naccess; k++)
		json_array_append_new(a, json_pack("{s:i, s:s}", "device", m->access[k].loc_id, "flags",
						   topo_access_name(m->access[k].flags)));
	return a;
}

/* One multicast object with its devices, binds and mappings. */
static json_t *multicast_json(const struct topo_participant *p, const struct topo_mc *m)
{
	json_t *devices = json_array(), *importers = json_array(), *binds = json_array(), *maps = json_array();
	for (size_t d = 0; d < m->nadded; d++)
		json_array_append_new(devices, json_integer(m->added[d]));
	for (size_t q = 0; q < m->nimporters; q++)
		json_array_append_new(importers, json_id(&m->importers[q]));
	for (size_t b = 0; b < p->nbinds; b++) {
		const struct topo_mc_bind *x = &p->binds[b];
		if (x->key != m->key)
			continue;
		json_array_append_new(binds,
				      json_pack("{s:i, s:o, s:o, s:o, s:o, s:s, s:o, s:b}", "device", x->device,
						"offset", JINT(x->mc_offset), "size", JINT(x->size), "member",
						id_is_zero(&x->member) ? json_string("untracked") : json_id(&x->member),
						"member_offset", JINT(x->member_offset), "by",
						x->member_va ? "address" : "handle", "address", JINT(x->member_va),
						"detached", x->detached));
	}
	for (size_t q = 0; q < p->nmaps; q++) {
		const struct topo_mapping *x = &p->maps[q];
		if (x->key == m->key)
			json_array_append_new(maps, json_pack("{s:o, s:o, s:o, s:o}", "address", JINT(x->address),
							      "size", JINT(x->size), "offset", JINT(x->offset),
							      "access", access_json(x)));
	}
	return json_pack("{s:o, s:o, s:s, s:o, s:o, s:o, s:i, s:i, s:b, s:o, s:o, s:o, s:o}", "id", json_id(&m->id),
			 "key", JINT(m->key), "role", topo_role_name(m->role), "creator", json_id(&m->creator), "size",
			 JINT(m->size), "used", JINT(m->used), "num_devices", (int)m->num_devices, "handles",
			 (int)m->handles, "detached", m->detached, "devices", devices, "importers", importers,
			 "bindings", binds, "mappings", maps);
}

static json_t *participant_json(const struct coord_target *t, const struct topo_participant *p)
{
	json_t *allocs = json_array(), *maps = json_array(), *mcs = json_array();
	for (size_t j = 0; j < p->nallocs; j++) {
		const struct topo_alloc *a = &p->allocs[j];
		json_array_append_new(allocs,
				      json_pack("{s:o, s:o, s:s, s:o, s:b, s:o, s:i, s:i, s:i, s:i, s:i, s:b}", "id",
						json_id(&a->id), "key", JINT(a->key), "role", topo_role_name(a->role),
						"creator", json_id(&a->creator), "shared", a->shared, "size",
						JINT(a->size), "device", a->device, "handle_types",
						(int)a->handle_types, "shared_types", (int)a->shared_types, "handles",
						(int)a->handles, "mappings", (int)a->mappings, "holder", a->holder));
	}
	for (size_t j = 0; j < p->nmaps; j++) {
		const struct topo_mapping *m = &p->maps[j];
		json_array_append_new(maps,
				      json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "allocation",
						json_id(&m->alloc_id), "key", JINT(m->key), "address", JINT(m->address),
						"size", JINT(m->size), "offset", JINT(m->offset), "flags",
						JINT(m->flags), "access", access_json(m)));
	}
	for (size_t j = 0; j < p->nmcs; j++)
		json_array_append_new(mcs, multicast_json(p, &p->mcs[j]));
	return json_pack("{s:i, s:i, s:o, s:s, s:o, s:o, s:o, s:o}", "pid", t->obs, "nspid", t->ns, "id",
			 json_id(&p->id), "phase", proto_phase_name(p->phase), "endpoint", json_text(p->endpoint),
			 "allocations", allocs, "mappings", maps, "multicast", mcs);
}

int coord_state_view(const struct state *st, struct coord_target **t, struct topo_participant **p)
{
	*t = calloc(st->n ? st->n : 1, sizeof(**t));
	*p = calloc(st->n ? st->n : 1, sizeof(**p));
	if (!*t || !*p) {
		free(*t);
		free(*p);
		*t = NULL;
		*p = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < st->n; i++) {
		(*t)[i].obs = (int)st->p[i].obs;
		(*t)[i].ns = (int)st->p[i].nspid;
		(*p)[i] = st->p[i].topo;
	}
	return 0;
}

json_t *coord_topology_json(const struct coord_target *t, const struct topo_participant *p, size_t n)
{
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, participant_json(&t[i], &p[i]));
	return json_pack("{s:o}", "participants", list);
}

void coord_print_text(FILE *f, const struct coord_target *t, const struct topo_participant *p, size_t n)
{
	char hex[ID_HEX_LEN + 1];
	for (size_t i = 0; i < n; i++) {
		id_hex(&p[i].id, hex);
		fprintf(f, "participant %d (ns %d) id %s phase %s endpoint %s\n", t[i].obs, t[i].ns, hex,
			proto_phase_name(p[i].phase), p[i].endpoint);
		for (size_t j = 0; j < p[i].nallocs; j++) {
			const struct topo_alloc *a = &p[i].allocs[j];
			id_hex(&a->id, hex);
			fprintf(f,
				"  allocation %s %-8s %s %" PRIu64 " bytes on device %d, %u handle(s), %u mapping(s)\n",
				hex, topo_role_name(a->role), a->shared ? "shared " : "private", a->size, a->device,
				a->handles, a->mappings);
		}
		for (size_t j = 0; j < p[i].nmaps; j++) {
			const struct topo_mapping *m = &p[i].maps[j];
			id_hex(&m->alloc_id, hex);
			fprintf(f, "  mapping 0x%" PRIx64 "+%" PRIu64 " of %s at offset %" PRIu64 ", access",
				m->address, m->size, hex, m->offset);
			for (size_t k = 0; k < m->naccess; k++)
				fprintf(f, " dev%d:%s", m->access[k].loc_id, topo_access_name(m->access[k].flags));
			fprintf(f, "%s\n", m->naccess ? "" : " none");
		}
		for (size_t j = 0; j < p[i].nmcs; j++) {
			const struct topo_mc *m = &p[i].mcs[j];
			id_hex(&m->id, hex);
			fprintf(f, "  multicast %s %-8s %" PRIu64 " bytes (%" PRIu64 " used), %u devices, added here:",
				hex, topo_role_name(m->role), m->size, m->used, m->num_devices);
			for (size_t d = 0; d < m->nadded; d++)
				fprintf(f, " %d", m->added[d]);
			fprintf(f, "%s\n", m->nadded ? "" : " none");
			for (size_t b = 0; b < p[i].nbinds; b++) {
				const struct topo_mc_bind *x = &p[i].binds[b];
				if (x->key != m->key)
					continue;
				id_hex(&x->member, hex);
				fprintf(f,
					"    bind at offset %" PRIu64 " of %" PRIu64
					" bytes on device %d: %s at offset %" PRIu64 "%s\n",
					x->mc_offset, x->size, x->device,
					id_is_zero(&x->member) ? "untracked memory" : hex, x->member_offset,
					x->member_va ? " (by address)" : "");
			}
		}
	}
}
