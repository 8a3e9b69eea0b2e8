/* SPDX-License-Identifier: MIT */
/* Lifecycle requests' parameters: each encoder beside its decoder (request.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/request.h"
#include "cusnap/wire.h"

uint16_t req_record_type(uint32_t peer_minor)
{
	return peer_minor >= PROTO_MINOR_REQUEST ? REC_REQUEST : REC_RESULT;
}

const char *proto_content_name(uint32_t content)
{
	switch (content) {
	case PROTO_CONTENT_HOST: return "host";
	case PROTO_CONTENT_NATIVE: return "native";
	default: return NULL;
	}
}

enum proto_content proto_content_parse(const char *name)
{
	for (uint32_t c = PROTO_CONTENT_HOST; c <= PROTO_CONTENT_NATIVE; c++)
		if (name && !strcmp(name, proto_content_name(c)))
			return (enum proto_content)c;
	return 0;
}

/* The fields of a request, in either record form. */
static void request_fields(struct proto_field_iter *it, const void *payload, size_t len)
{
	pfield_init2(it, payload, len, REC_REQUEST, REC_RESULT);
}

/* Room in the array *v (each size bytes, *cap of them) for entry n: PROTO_OK,
 * or PROTO_E_INTERNAL (said in err) when out of memory. */
static int room_for(void **v, size_t *cap, size_t n, size_t size, char *err, size_t errlen)
{
	if (n < *cap)
		return PROTO_OK;
	size_t want = *cap ? *cap * 2 : 8;
	void *grown = realloc(*v, want * size);
	if (!grown) {
		snprintf(err, errlen, "out of memory");
		return PROTO_E_INTERNAL;
	}
	*v = grown;
	*cap = want;
	return PROTO_OK;
}

static int refuse(int status, char *err, size_t errlen, const char *what, uint32_t len)
{
	snprintf(err, errlen, "%s of %u bytes", what, len);
	return status;
}

/* ---- PREPARE ---- */

#define HOLD_IDS (3 * ID_LEN)

void req_prepare_encode(struct proto_buf *b, uint16_t rec, enum proto_content content, const struct req_hold *holds,
			size_t n)
{
	size_t at = pbuf_begin(b, rec);
	pbuf_put_u32(b, F_CONTENT, (uint32_t)content);
	for (size_t i = 0; i < n; i++) {
		uint8_t v[HOLD_IDS + 4096];
		size_t len = holds[i].endpoint_len < 4096 ? holds[i].endpoint_len : 4096;
		memcpy(v, holds[i].alloc.b, ID_LEN);
		memcpy(v + ID_LEN, holds[i].creator.b, ID_LEN);
		memcpy(v + 2 * ID_LEN, holds[i].holder.b, ID_LEN);
		memcpy(v + HOLD_IDS, holds[i].endpoint, len);
		pbuf_put(b, F_HOLD, v, (uint32_t)(HOLD_IDS + len));
	}
	pbuf_end(b, at);
}

/* One F_HOLD into *h: ids and an endpoint of 1..4095 bytes, an absolute path. */
static int hold_decode(const struct proto_rec *f, struct req_hold *h, char *err, size_t errlen)
{
	size_t n = f->len > HOLD_IDS ? f->len - HOLD_IDS : 0;
	const char *ep = (const char *)f->value + HOLD_IDS;
	if (!n || n > 4095 || ep[0] != '/' || memchr(ep, 0, n))
		return refuse(PROTO_E_LENGTH, err, errlen, "hold entry", f->len);
	memcpy(h->alloc.b, f->value, ID_LEN);
	memcpy(h->creator.b, f->value + ID_LEN, ID_LEN);
	memcpy(h->holder.b, f->value + 2 * ID_LEN, ID_LEN);
	h->endpoint = ep;
	h->endpoint_len = n;
	return PROTO_OK;
}

int req_prepare_decode(const void *payload, size_t len, enum proto_content *content, struct req_hold **holds, size_t *n,
		       char *err, size_t errlen)
{
	uint32_t mode = PROTO_CONTENT_HOST;
	struct proto_field_iter it;
	struct proto_rec f;
	size_t cap = 0;
	int rc = PROTO_OK;
	*holds = NULL;
	*n = 0;
	request_fields(&it, payload, len);
	while (rc == PROTO_OK && pfield_next(&it, &f)) {
		if (f.type == F_CONTENT && prec_u32(&f, &mode) != 0) {
			rc = refuse(PROTO_E_LENGTH, err, errlen, "content mode", f.len);
		} else if (f.type == F_HOLD &&
			   (rc = room_for((void **)holds, &cap, *n, sizeof(**holds), err, errlen)) == PROTO_OK) {
			rc = hold_decode(&f, &(*holds)[*n], err, errlen);
			*n += rc == PROTO_OK;
		}
	}
	if (rc == PROTO_OK && it.error)
		rc = refuse(it.error, err, errlen, "malformed PREPARE request", (uint32_t)len);
	if (rc == PROTO_OK && !proto_content_name(mode)) {
		snprintf(err, errlen, "content mode %u is neither host (%d) nor native (%d)", mode, PROTO_CONTENT_HOST,
			 PROTO_CONTENT_NATIVE);
		rc = PROTO_E_MALFORMED;
	}
	if (rc != PROTO_OK) {
		free(*holds);
		*holds = NULL;
		*n = 0;
		return rc;
	}
	*content = (enum proto_content)mode;
	return PROTO_OK;
}

/* ---- RESTORE_CREATORS ---- */

void req_device_map_encode(struct proto_buf *b, uint16_t rec, const int *map, size_t n)
{
	size_t at = pbuf_begin(b, rec);
	for (size_t d = 0; d < n; d++) {
		uint8_t pair[WIRE_PAIR_LEN];
		wire_put_pair(pair, (uint32_t)d, (uint32_t)map[d]);
		if (map[d] >= 0)
			pbuf_put(b, F_DEVICE_MAP, pair, sizeof(pair));
	}
	pbuf_end(b, at);
}

int req_device_map_decode(const void *payload, size_t len, int *map, size_t *pairs, char *err, size_t errlen)
{
	struct proto_field_iter it;
	struct proto_rec f;
	for (int d = 0; d < PROTO_MAX_DEVICES; d++)
		map[d] = d;
	*pairs = 0;
	request_fields(&it, payload, len);
	while (pfield_next(&it, &f)) {
		if (f.type != F_DEVICE_MAP)
			continue;
		if (f.len != WIRE_PAIR_LEN)
			return refuse(PROTO_E_LENGTH, err, errlen, "device map entry", f.len);
		uint32_t from, to;
		wire_get_pair(f.value, &from, &to);
		if (from >= PROTO_MAX_DEVICES || to >= PROTO_MAX_DEVICES) {
			snprintf(err, errlen, "device map %u -> %u out of range (devices 0..%d)", from, to,
				 PROTO_MAX_DEVICES - 1);
			return PROTO_E_MALFORMED;
		}
		map[from] = (int)to;
		(*pairs)++;
	}
	if (it.error)
		return refuse(it.error, err, errlen, "malformed RESTORE_CREATORS request", (uint32_t)len);
	return PROTO_OK;
}

/* ---- RESTORE_MULTICAST* ---- */

void req_mc_rebuild_encode(struct proto_buf *b, uint16_t rec, const struct cusnap_id *ids, size_t n)
{
	size_t at = pbuf_begin(b, rec);
	for (size_t i = 0; i < n; i++)
		pbuf_put_id(b, F_MC_REBUILD, &ids[i]);
	pbuf_end(b, at);
}

int req_mc_rebuild_decode(const void *payload, size_t len, struct cusnap_id **ids, size_t *n, char *err, size_t errlen)
{
	struct proto_field_iter it;
	struct proto_rec f;
	size_t cap = 0;
	int rc = PROTO_OK;
	*ids = NULL;
	*n = 0;
	request_fields(&it, payload, len);
	while (rc == PROTO_OK && pfield_next(&it, &f)) {
		if (f.type != F_MC_REBUILD)
			continue;
		if ((rc = room_for((void **)ids, &cap, *n, sizeof(**ids), err, errlen)) != PROTO_OK)
			break;
		if (prec_id(&f, &(*ids)[*n]) != 0)
			rc = refuse(PROTO_E_LENGTH, err, errlen, "multicast rebuild entry", f.len);
		else
			(*n)++;
	}
	if (rc == PROTO_OK && it.error)
		rc = refuse(it.error, err, errlen, "malformed multicast step request", (uint32_t)len);
	if (rc != PROTO_OK) {
		free(*ids);
		*ids = NULL;
		*n = 0;
	}
	return rc;
}
