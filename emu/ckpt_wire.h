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

#endif
