/* SPDX-License-Identifier: MIT */
/* The emulator's private protocol between a process calling cuCheckpointProcess*
 * and the target process's checkpoint thread. One request per connection.
 *
 * request:  magic u32 | version u16 | op u16 | timeout_ms u32 | npairs u32 |
 *           job u64 (the caller's checkpoint job, job.c; 0: none) |
 *           npairs x (old uuid 16 bytes | new uuid 16 bytes)
 * reply:    magic u32 | result i32 (CUresult) | value i32 | reserved u32
 * All little-endian. */
#ifndef CUSNAP_EMU_CKPT_WIRE_H
#define CUSNAP_EMU_CKPT_WIRE_H

#define CKPT_MAGIC 0x554d4543u /* "CEMU" */
#define CKPT_VERSION 1
#define CKPT_REQ_LEN 24
#define CKPT_PAIR_LEN 32
#define CKPT_REPLY_LEN 16
#define CKPT_MAX_PAIRS 64
#define CKPT_SOCKET_TAG "cuemu-ckpt-"

enum ckpt_op {
	CKPT_OP_LOCK = 1,
	CKPT_OP_CHECKPOINT,
	CKPT_OP_RESTORE,
	CKPT_OP_UNLOCK,
	CKPT_OP_STATE,
	CKPT_OP_TID,
};

#include <stddef.h>
#include <stdint.h>

struct ckpt_request {
	enum ckpt_op op;
	uint32_t timeout_ms;
	uint32_t npairs;
	uint64_t job;
	uint8_t pairs[CKPT_MAX_PAIRS][CKPT_PAIR_LEN]; /* old uuid | new uuid */
};
struct ckpt_reply {
	int32_t result; /* CUresult */
	int32_t value;
};

/* r as bytes into out (CKPT_REQ_LEN + npairs x CKPT_PAIR_LEN of them): its
 * length, or 0 when r has more pairs than a request carries. */
size_t ckpt_request_encode(const struct ckpt_request *r, uint8_t *out);
/* A request's head (its first CKPT_REQ_LEN bytes) into r, the pairs that
 * follow to be read into r->pairs: 0, or -1 (not this protocol or version, or
 * too many pairs). */
int ckpt_request_decode(const uint8_t head[CKPT_REQ_LEN], struct ckpt_request *r);
void ckpt_reply_encode(const struct ckpt_reply *r, uint8_t out[CKPT_REPLY_LEN]);
/* 0, or -1 when it is not this protocol's reply. */
int ckpt_reply_decode(const uint8_t in[CKPT_REPLY_LEN], struct ckpt_reply *r);

#endif
