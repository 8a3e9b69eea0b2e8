/* SPDX-License-Identifier: MIT */
/* The parameters of the lifecycle requests (SYSTEM.md §5), each encoder beside
 * its decoder: PREPARE's content mode, RESTORE_CREATORS' device map, and the
 * multicast objects a RESTORE_MULTICAST* step rebuilds.
 *
 * From protocol 1.4 they travel as fields of a REC_REQUEST record. A 1.3 or
 * older peer reads them from a REC_RESULT record, so a coordinator addresses
 * such a peer in that form (req_record_type), and every decoder accepts both. */
#ifndef CUSNAP_REQUEST_H
#define CUSNAP_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "cusnap/proto.h"

/* The first minor version that reads REC_REQUEST. */
#define PROTO_MINOR_REQUEST 4

/* The record a request for peers of this minor version (the lowest among
 * those addressed) goes in. */
uint16_t req_record_type(uint32_t peer_minor);

/* The content mode's one text form: "host", "native"; NULL for anything else. */
const char *proto_content_name(uint32_t content);
/* PROTO_CONTENT_* for its name, 0 for anything else. */
enum proto_content proto_content_parse(const char *name);

/* Decoders return PROTO_OK or a proto_status, and on a refusal say why in err. */

/* A shared allocation whose creator holds neither a handle nor a mapping of it
 * any more: the importer that carries it for the group (SYSTEM.md §6.2). */
struct req_hold {
	struct cusnap_id alloc, creator, holder;
	const char *endpoint; /* the holder's endpoint; decoded: endpoint_len bytes of the payload, no NUL */
	size_t endpoint_len;
};

/* PREPARE: the content mode and the holds (n may be 0). */
void req_prepare_encode(struct proto_buf *b, uint16_t rec, enum proto_content content, const struct req_hold *holds,
			size_t n);
/* No F_CONTENT: host (as a 1.0 coordinator meant). *holds is malloc'ed (NULL
 * when *n is 0) and points into payload. */
int req_prepare_decode(const void *payload, size_t len, enum proto_content *content, struct req_hold **holds, size_t *n,
		       char *err, size_t errlen);

/* map[old] = new ordinal, or -1 where the device keeps its ordinal. */
void req_device_map_encode(struct proto_buf *b, uint16_t rec, const int *map, size_t n);
/* map[PROTO_MAX_DEVICES] is filled with the identity, then the request's pairs;
 * *pairs counts them (0: nothing to translate). */
int req_device_map_decode(const void *payload, size_t len, int *map, size_t *pairs, char *err, size_t errlen);

void req_mc_rebuild_encode(struct proto_buf *b, uint16_t rec, const struct cusnap_id *ids, size_t n);
/* *ids is malloc'ed (NULL when *n is 0). */
int req_mc_rebuild_decode(const void *payload, size_t len, struct cusnap_id **ids, size_t *n, char *err, size_t errlen);

#endif
