/* SPDX-License-Identifier: MIT */
/* Printing topologies: JSON for programs, text for people. */
#include <inttypes.h>

#include "cusnap/coord.h"
#include "cusnap/json.h"

/* The participant's multicast objects, each with its devices, binds and mappings. */
static void print_multicast_json(FILE *f, const struct topo_participant *p)
{
	char hex[ID_HEX_LEN + 1], hex2[ID_HEX_LEN + 1];
	for (size_t j = 0; j < p->nmcs; j++) {
		const struct topo_mc *m = &p->mcs[j];
		id_hex(&m->id, hex);
		id_hex(&m->creator, hex2);
		fprintf(f,
			"%s{\"id\":\"%s\",\"key\":%" PRIu64 ",\"role\":\"%s\",\"creator\":\"%s\",\"size\":%" PRIu64
			",\"used\":%" PRIu64 ",\"num_devices\":%u,\"handles\":%u,\"detached\":%s,\"devices\":[",
			j ? "," : "", hex, m->key, topo_role_name(m->role), hex2, m->size, m->used, m->num_devices,
			m->handles, m->detached ? "true" : "false");
		for (size_t d = 0; d < m->nadded; d++)
			fprintf(f, "%s%d", d ? "," : "", m->added[d]);
		fprintf(f, "],\"importers\":[");
		for (size_t q = 0; q < m->nimporters; q++) {
			id_hex(&m->importers[q], hex2);
			fprintf(f, "%s\"%s\"", q ? "," : "", hex2);
		}
		fprintf(f, "],\"bindings\":[");
		size_t k = 0;
		for (size_t b = 0; b < p->nbinds; b++) {
			const struct topo_mc_bind *x = &p->binds[b];
			if (x->key != m->key)
				continue;
			id_hex(&x->member, hex2);
			fprintf(f,
				"%s{\"device\":%d,\"offset\":%" PRIu64 ",\"size\":%" PRIu64 ",\"member\":\"%s\","
				"\"member_offset\":%" PRIu64 ",\"by\":\"%s\",\"address\":%" PRIu64 ",\"detached\":%s}",
				k++ ? "," : "", x->device, x->mc_offset, x->size,
				id_is_zero(&x->member) ? "untracked" : hex2, x->member_offset,
				x->member_va ? "address" : "handle", x->member_va, x->detached ? "true" : "false");
		}
		fprintf(f, "],\"mappings\":[");
		k = 0;
		for (size_t q = 0; q < p->nmaps; q++) {
			const struct topo_mapping *x = &p->maps[q];
			if (x->key != m->key)
				continue;
			fprintf(f,
				"%s{\"address\":%" PRIu64 ",\"size\":%" PRIu64 ",\"offset\":%" PRIu64 ",\"access\":[",
				k++ ? "," : "", x->address, x->size, x->offset);
			for (size_t a = 0; a < x->naccess; a++)
				fprintf(f, "%s{\"device\":%d,\"flags\":\"%s\"}", a ? "," : "", x->access[a].loc_id,
					topo_access_name(x->access[a].flags));
			fprintf(f, "]}");
		}
		fprintf(f, "]}");
	}
}

void coord_print_json(FILE *f, const struct coord_target *t, const struct topo_participant *p, size_t n)
{
	char hex[ID_HEX_LEN + 1], hex2[ID_HEX_LEN + 1];
	fprintf(f, "{\"participants\":[");
	for (size_t i = 0; i < n; i++) {
		id_hex(&p[i].id, hex);
		fprintf(f, "%s{\"pid\":%d,\"nspid\":%d,\"id\":\"%s\",\"phase\":\"%s\",\"endpoint\":", i ? "," : "",
			t[i].obs, t[i].ns, hex, proto_phase_name(p[i].phase));
		json_write_string(f, p[i].endpoint);
		fprintf(f, ",\"allocations\":[");
		for (size_t j = 0; j < p[i].nallocs; j++) {
			const struct topo_alloc *a = &p[i].allocs[j];
			id_hex(&a->id, hex);
			id_hex(&a->creator, hex2);
			fprintf(f,
				"%s{\"id\":\"%s\",\"key\":%" PRIu64 ",\"role\":\"%s\",\"creator\":\"%s\",\"shared\":%s,"
				"\"size\":%" PRIu64
				",\"device\":%d,\"handle_types\":%u,\"shared_types\":%u,\"handles\":%u,"
				"\"mappings\":%u}",
				j ? "," : "", hex, a->key, topo_role_name(a->role), hex2, a->shared ? "true" : "false",
				a->size, a->device, a->handle_types, a->shared_types, a->handles, a->mappings);
		}
		fprintf(f, "],\"mappings\":[");
		for (size_t j = 0; j < p[i].nmaps; j++) {
			const struct topo_mapping *m = &p[i].maps[j];
			id_hex(&m->alloc_id, hex);
			fprintf(f,
				"%s{\"allocation\":\"%s\",\"key\":%" PRIu64 ",\"address\":%" PRIu64 ",\"size\":%" PRIu64
				",\"offset\":%" PRIu64 ",\"flags\":%" PRIu64 ",\"access\":[",
				j ? "," : "", hex, m->key, m->address, m->size, m->offset, m->flags);
			for (size_t k = 0; k < m->naccess; k++)
				fprintf(f, "%s{\"device\":%d,\"flags\":\"%s\"}", k ? "," : "", m->access[k].loc_id,
					topo_access_name(m->access[k].flags));
			fprintf(f, "]}");
		}
		fprintf(f, "],\"multicast\":[");
		print_multicast_json(f, &p[i]);
		fprintf(f, "]}");
	}
	fprintf(f, "]}\n");
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
