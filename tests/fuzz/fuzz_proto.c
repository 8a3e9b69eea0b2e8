/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the protocol decoder (header, record streams, request
 * fields and the lifecycle requests' decoders, INSPECT topology with multicast records). Input: a 24-byte header followed by a payload. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cusnap/proto.h"
#include "cusnap/request.h"
#include "cusnap/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const uint8_t *p, size_t n, int depth)
{
	struct proto_iter it;
	struct proto_rec r;
	piter_init(&it, p, n);
	while (piter_next(&it, &r)) {
		uint32_t u32;
		uint64_t u64;
		struct cusnap_id id;
		char s[64];
		prec_u32(&r, &u32);
		prec_u64(&r, &u64);
		prec_id(&r, &id);
		prec_str(&r, s, sizeof(s));
		if (depth < 3)
			walk(r.value, r.len, depth + 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= PROTO_HEADER_LEN) {
		struct proto_header h;
		if (proto_header_unpack(data, &h) == PROTO_OK && h.payload_len > size - PROTO_HEADER_LEN)
			h.payload_len = (uint32_t)(size - PROTO_HEADER_LEN);
		data += PROTO_HEADER_LEN;
		size -= PROTO_HEADER_LEN;
	}
	walk(data, size, 0);
	/* Request parameters as the shim and coordinator read them. */
	static const uint16_t types[] = {REC_RESULT, REC_EXPORT, REC_ERROR};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct proto_field_iter it;
		struct proto_rec f;
		struct cusnap_id id;
		pfield_init(&it, data, size, types[t]);
		while (pfield_next(&it, &f))
			prec_id(&f, &id);
	}
	/* The lifecycle requests, as the shim decodes them. */
	char err[256];
	enum proto_content content;
	struct req_hold *holds;
	size_t nholds;
	if (req_prepare_decode(data, size, &content, &holds, &nholds, err, sizeof(err)) == PROTO_OK)
		free(holds);
	int map[PROTO_MAX_DEVICES];
	size_t pairs;
	if (req_device_map_decode(data, size, map, &pairs, err, sizeof(err)) == PROTO_OK)
		for (int d = 0; d < PROTO_MAX_DEVICES; d++)
			if (map[d] < 0 || map[d] >= PROTO_MAX_DEVICES)
				abort();
	struct cusnap_id *ids;
	size_t nids;
	if (req_mc_rebuild_decode(data, size, &ids, &nids, err, sizeof(err)) == PROTO_OK)
		free(ids);
	struct topo_participant p;
	if (topo_decode(data, size, &p) == PROTO_OK)
		topo_free(&p);
	return 0;
}
