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
	case PROTO_CONTENT_FILE: return "file";
	default: return NULL;
	}
}

enum proto_content proto_content_parse(const char *name)
{
	for (uint32_t c = PROTO_CONTENT_HOST; c <= PROTO_CONTENT_FILE; c++)
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

/* Every field of type in a request, each decoded by one into the next slot of
 * an array of size-byte entries (*v, malloc'ed, NULL when none; *n of them).
 * PROTO_OK, or a refusal with err and nothing handed out (what names the
 * request when it is malformed). */
static int repeated(const void *payload, size_t len, uint16_t type, size_t size,
		    int (*one)(const struct proto_rec *f, void *slot, char *err, size_t errlen), void **v, size_t *n,
		    const char *what, char *err, size_t errlen)
{
	struct proto_field_iter it;
	struct proto_rec f;
	size_t cap = 0;
	int rc = PROTO_OK;
	*v = NULL;
	*n = 0;
	request_fields(&it, payload, len);
	while (rc == PROTO_OK && pfield_next(&it, &f)) {
		if (f.type != type || (rc = room_for(v, &cap, *n, size, err, errlen)) != PROTO_OK)
			continue;
		if ((rc = one(&f, (char *)*v + *n * size, err, errlen)) == PROTO_OK)
			(*n)++;
	}
	if (rc == PROTO_OK && it.error)
		rc = refuse(it.error, err, errlen, what, (uint32_t)len);
	if (rc != PROTO_OK) {
		free(*v);
		*v = NULL;
		*n = 0;
	}
	return rc;
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

/* One F_HOLD into *slot (a struct req_hold): ids and an endpoint of 1..4095
 * bytes, an absolute path. */
static int hold_decode(const struct proto_rec *f, void *slot, char *err, size_t errlen)
{
	struct req_hold *h = slot;
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
	*holds = NULL;
	*n = 0;
	request_fields(&it, payload, len);
	while (pfield_next(&it, &f))
		if (f.type == F_CONTENT && prec_u32(&f, &mode) != 0)
			return refuse(PROTO_E_LENGTH, err, errlen, "content mode", f.len);
	int rc = repeated(payload, len, F_HOLD, sizeof(**holds), hold_decode, (void **)holds, n,
			  "malformed PREPARE request", err, errlen);
	if (rc == PROTO_OK && !proto_content_name(mode)) {
		snprintf(err, errlen, "content mode %u is not host (%d), native (%d) or file (%d)", mode,
			 PROTO_CONTENT_HOST, PROTO_CONTENT_NATIVE, PROTO_CONTENT_FILE);
		free(*holds);
		*holds = NULL;
		*n = 0;
		rc = PROTO_E_MALFORMED;
	}
	if (rc == PROTO_OK)
		*content = (enum proto_content)mode;
	return rc;
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

/* One F_MC_REBUILD into *slot (a struct cusnap_id). */
static int rebuild_id(const struct proto_rec *f, void *slot, char *err, size_t errlen)
{
	return prec_id(f, slot) == 0 ? PROTO_OK
				     : refuse(PROTO_E_LENGTH, err, errlen, "multicast rebuild entry", f->len);
}

int req_mc_rebuild_decode(const void *payload, size_t len, struct cusnap_id **ids, size_t *n, char *err, size_t errlen)
{
	return repeated(payload, len, F_MC_REBUILD, sizeof(**ids), rebuild_id, (void **)ids, n,
			"malformed multicast step request", err, errlen);
}

/* ---- EXPORT and EXPORT_MANY ---- */

void req_export_encode(struct proto_buf *b, const struct req_export *q)
{
	size_t at = pbuf_begin(b, REC_EXPORT);
	pbuf_put_id(b, F_ALLOC_ID, &q->alloc);
	pbuf_put_id(b, F_TOKEN, &q->token);
	if (q->endpoint) {
		pbuf_put_id(b, F_ID, &q->who);
		pbuf_put_str(b, F_ENDPOINT, q->endpoint);
	}
	if (q->hops)
		pbuf_put_u32(b, F_HOPS, q->hops);
	pbuf_end(b, at);
}

int req_export_next(struct proto_iter *it, struct req_export *q, char *endpoint, size_t len, char *err, size_t errlen)
{
	struct proto_rec rec, f;
	memset(q, 0, sizeof(*q));
	if (!piter_next_of(it, REC_EXPORT, &rec)) {
		if (it->error)
			snprintf(err, errlen, "malformed EXPORT request");
		return it->error;
	}
	bool have_id = false, have_token = false;
	struct proto_iter fields;
	endpoint[0] = '\0';
	piter_init(&fields, rec.value, rec.len);
	while (piter_next(&fields, &f)) {
		if (f.type == F_ALLOC_ID)
			have_id = prec_id(&f, &q->alloc) == 0;
		else if (f.type == F_TOKEN)
			have_token = prec_id(&f, &q->token) == 0;
		else if (f.type == F_ID && prec_id(&f, &q->who) != 0)
			memset(&q->who, 0, sizeof(q->who));
		else if (f.type == F_ENDPOINT && prec_str(&f, endpoint, len) != 0)
			endpoint[0] = '\0';
		else if (f.type == F_HOPS && prec_u32(&f, &q->hops) != 0)
			q->hops = 1; /* unreadable: never forwarded again */
	}
	if (fields.error)
		return refuse(fields.error, err, errlen, "malformed EXPORT record", rec.len);
	if (!have_id || !have_token) {
		snprintf(err, errlen, "EXPORT needs an allocation id and a token");
		return PROTO_E_MALFORMED;
	}
	/* Only an absolute path is an endpoint a creator may list or forward to. */
	q->endpoint = endpoint[0] == '/' ? endpoint : NULL;
	return 1;
}

void rep_export_encode(struct proto_buf *b, const struct rep_export *r)
{
	size_t at = pbuf_begin(b, REC_EXPORT);
	pbuf_put_id(b, F_ALLOC_ID, &r->alloc);
	pbuf_put_u64(b, F_SIZE, r->size);
	if (r->mc_devices)
		pbuf_put_u32(b, F_MC_DEVICES, r->mc_devices);
	pbuf_end(b, at);
}

int rep_export_next(struct proto_iter *it, struct rep_export *r)
{
	struct proto_rec rec, f;
	memset(r, 0, sizeof(*r));
	if (!piter_next_of(it, REC_EXPORT, &rec))
		return it->error ? it->error : PROTO_E_MALFORMED;
	struct proto_iter fields;
	piter_init(&fields, rec.value, rec.len);
	while (piter_next(&fields, &f)) {
		if (f.type == F_ALLOC_ID && prec_id(&f, &r->alloc) != 0)
			return PROTO_E_MALFORMED;
		if (f.type == F_SIZE && prec_u64(&f, &r->size) != 0)
			return PROTO_E_MALFORMED;
		if (f.type == F_MC_DEVICES && prec_u32(&f, &r->mc_devices) != 0)
			return PROTO_E_MALFORMED;
	}
	return fields.error ? fields.error : r->size ? PROTO_OK : PROTO_E_MALFORMED;
}
