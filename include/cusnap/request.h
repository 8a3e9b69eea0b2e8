/* SPDX-License-Identifier: MIT */
/* The parameters of the lifecycle requests (DESIGN.md §5), each encoder beside
 * its decoder: PREPARE's content mode, RESTORE_CREATORS' device map, the
 * multicast objects a RESTORE_MULTICAST* step rebuilds, and what EXPORT and
 * EXPORT_MANY ask for and answer (one REC_EXPORT per allocation).
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
 * any more: the importer that carries it for the group (DESIGN.md §6.2). */
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

/* One allocation an EXPORT or EXPORT_MANY asks for. */
struct req_export {
	struct cusnap_id alloc, token;
	struct cusnap_id who; /* the redeemer, sent with its endpoint (zero: not said) */
	const char *endpoint; /* the redeemer's endpoint (NULL: not said; decoded: an absolute path only) */
	uint32_t hops;        /* forwarded by a creator that let go: served there or refused */
};
void req_export_encode(struct proto_buf *b, const struct req_export *q);
/* The next REC_EXPORT of a request (it: over its payload) into q, its endpoint
 * copied into endpoint[len] (q->endpoint points there): 1, 0 when none is
 * left, or a proto_status with err (no allocation id or token: MALFORMED). */
int req_export_next(struct proto_iter *it, struct req_export *q, char *endpoint, size_t len, char *err, size_t errlen);

/* What the reply says of one allocation (its FD travels beside it). */
struct rep_export {
	struct cusnap_id alloc;
	uint64_t size;
	uint32_t mc_devices; /* a multicast object's device count (0: memory) */
};
void rep_export_encode(struct proto_buf *b, const struct rep_export *r);
/* The next REC_EXPORT of a reply into r: PROTO_OK, or PROTO_E_MALFORMED (none
 * left, a field unreadable, no size). */
int rep_export_next(struct proto_iter *it, struct rep_export *r);

#endif
