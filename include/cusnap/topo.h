/* SPDX-License-Identifier: MIT */
/* A participant's tracked topology as INSPECT reports it (and as the state file
 * stores it): decoded from, and encoded to, the protocol's record stream. */
#ifndef CUSNAP_TOPO_H
#define CUSNAP_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "cusnap/ids.h"

struct topo_access {
	uint32_t loc_type;
	int32_t loc_id;
	uint32_t flags; /* CUmemAccess_flags */
};

struct topo_alloc {
	uint64_t key;
	struct cusnap_id id;
	struct cusnap_id creator;
	uint32_t role; /* 1 creator, 2 importer */
	uint32_t shared;
	uint32_t shared_types;
	uint64_t size;
	uint32_t alloc_type, loc_type;
	int32_t device;
	uint32_t handle_types;
	uint32_t alloc_flags;
	uint32_t handles;
	uint32_t mappings;
	uint64_t granularity; /* bytes */
	uint32_t detached;
	uint32_t binds;  /* multicast binds of this memory */
	uint32_t holder; /* an importer that carries it for the group (its creator let go) */
};

struct topo_mapping {
	uint64_t key; /* the allocation record's key */
	struct cusnap_id alloc_id;
	uint64_t address, size, offset, flags;
	struct topo_access *access;
	size_t naccess;
	uint32_t detached;
};

/* A multicast object as one participant holds it (DESIGN.md §8). */
struct topo_mc {
	uint64_t key;
	struct cusnap_id id;
	struct cusnap_id creator;
	uint32_t role; /* 1 creator, 2 importer */
	uint64_t size; /* the capacity the application asked for */
	uint64_t used; /* the highest offset bound or mapped */
	uint32_t num_devices;
	uint32_t handle_types, shared_types;
	uint64_t granularity;
	uint32_t handles, mappings, detached;
	int32_t *added; /* devices this participant added */
	size_t nadded;
	struct cusnap_id *importers; /* the creator's record: participants that imported it */
	size_t nimporters;
};

struct topo_mc_bind {
	uint64_t key; /* the multicast record's key */
	struct cusnap_id mc_id;
	int32_t device;
	uint64_t mc_offset, size;
	struct cusnap_id member; /* zero: memory the shim does not track */
	uint64_t member_offset;
	uint64_t member_va; /* bound by address (0: by handle) */
	uint32_t detached;
};

struct topo_participant {
	struct cusnap_id id;
	uint32_t nspid;
	uint32_t pid;
	uint32_t phase;
	uint32_t major_min, major_max, minor; /* the protocol versions it speaks */
	uint64_t caps;                        /* PROTO_CAP_* bits */
	uint64_t generation;                  /* tracked changes allowed so far (0: not said, before 1.8) */
	char endpoint[4200];
	struct topo_alloc *allocs;
	size_t nallocs;
	struct topo_mapping *maps;
	size_t nmaps;
	struct topo_mc *mcs;
	size_t nmcs;
	struct topo_mc_bind *binds;
	size_t nbinds;
};

struct proto_buf;

/* The encoders, one per record, each the inverse of its decoder (the shim
 * fills these structs from its tables; tests round-trip them). */
/* type: REC_HELLO or REC_PARTICIPANT. */
void topo_encode_identity(struct proto_buf *b, uint16_t type, const struct topo_participant *p);
void topo_encode_alloc(struct proto_buf *b, const struct topo_alloc *a);
void topo_encode_mapping(struct proto_buf *b, const struct topo_mapping *m);
void topo_encode_mc(struct proto_buf *b, const struct topo_mc *m);
void topo_encode_bind(struct proto_buf *b, const struct topo_mc_bind *x);
/* Every record of p, identity first (as INSPECT sends it). */
void topo_encode(struct proto_buf *b, const struct topo_participant *p);

/* Decode an INSPECT payload into p (zeroed first). Unknown records and fields
 * are skipped. Returns 0 or a proto_status; on error p holds nothing to free. */
int topo_decode(const uint8_t *payload, size_t len, struct topo_participant *p);
void topo_free(struct topo_participant *p);
const char *topo_role_name(uint32_t role);
/* "rw", "r" or "none". */
const char *topo_access_name(uint32_t flags);

#endif
