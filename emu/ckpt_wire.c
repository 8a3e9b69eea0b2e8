/* SPDX-License-Identifier: MIT */
/* The checkpoint protocol's bytes (ckpt_wire.h), written and read in one
 * place for the caller (ckpt_client.c) and the target (ckpt_server.c). */
#include <stdbool.h>
#include <string.h>

#include "ckpt_wire.h"
#include "cusnap/wire.h"

size_t ckpt_request_encode(const struct ckpt_request *r, uint8_t *out)
{
	if (r->npairs > CKPT_MAX_PAIRS)
		return 0;
	memset(out, 0, CKPT_REQ_LEN);
	wire_put_u32(out, CKPT_MAGIC);
	wire_put_u16(out + 4, CKPT_VERSION);
	wire_put_u16(out + 6, (uint16_t)r->op);
	wire_put_u32(out + 8, r->timeout_ms);
	wire_put_u32(out + 12, r->npairs);
	wire_put_u64(out + 16, r->job);
	memcpy(out + CKPT_REQ_LEN, r->pairs, (size_t)r->npairs * CKPT_PAIR_LEN);
	return CKPT_REQ_LEN + (size_t)r->npairs * CKPT_PAIR_LEN;
}

int ckpt_request_decode(const uint8_t head[CKPT_REQ_LEN], struct ckpt_request *r)
{
	r->op = (enum ckpt_op)wire_get_u16(head + 6);
	r->timeout_ms = wire_get_u32(head + 8);
	r->npairs = wire_get_u32(head + 12);
	r->job = wire_get_u64(head + 16);
	bool ok = wire_get_u32(head) == CKPT_MAGIC && wire_get_u16(head + 4) == CKPT_VERSION &&
		  r->npairs <= CKPT_MAX_PAIRS;
	return ok ? 0 : -1;
}

void ckpt_reply_encode(const struct ckpt_reply *r, uint8_t out[CKPT_REPLY_LEN])
{
	memset(out, 0, CKPT_REPLY_LEN);
	wire_put_u32(out, CKPT_MAGIC);
	wire_put_u32(out + 4, (uint32_t)r->result);
	wire_put_u32(out + 8, (uint32_t)r->value);
}

int ckpt_reply_decode(const uint8_t in[CKPT_REPLY_LEN], struct ckpt_reply *r)
{
	r->result = (int32_t)wire_get_u32(in + 4);
	r->value = (int32_t)wire_get_u32(in + 8);
	return wire_get_u32(in) == CKPT_MAGIC ? 0 : -1;
}
