/* SPDX-License-Identifier: MIT */
/* cuemu's checkpoint protocol (emu/ckpt_wire.c): a request and a reply in
 * golden bytes, read back, and what is not this protocol refused. */
#include <string.h>

#include "../../emu/ckpt_wire.h"
#include "../harness/test.h"

static void request(void)
{
	struct ckpt_request r = {.op = CKPT_OP_RESTORE, .timeout_ms = 30000, .npairs = 1, .job = 0x0102030405060708ull};
	for (int i = 0; i < 32; i++)
		r.pairs[0][i] = (uint8_t)(0xa0 + i);
	uint8_t out[CKPT_REQ_LEN + CKPT_MAX_PAIRS * CKPT_PAIR_LEN];
	static const uint8_t golden[CKPT_REQ_LEN] = {0x43, 0x45, 0x4d, 0x55, /* "CEMU" */
						     0x01, 0x00, 0x03, 0x00, /* version 1, restore */
						     0x30, 0x75, 0x00, 0x00, /* 30000 ms */
						     0x01, 0x00, 0x00, 0x00, /* one pair */
						     0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
	CHECK_EQ(ckpt_request_encode(&r, out), CKPT_REQ_LEN + CKPT_PAIR_LEN);
	CHECK(memcmp(out, golden, sizeof(golden)) == 0);
	CHECK(out[CKPT_REQ_LEN] == 0xa0 && out[CKPT_REQ_LEN + 31] == 0xbf);
	struct ckpt_request back;
	CHECK_EQ(ckpt_request_decode(out, &back), 0);
	CHECK_EQ(back.op, CKPT_OP_RESTORE);
	CHECK_EQ(back.timeout_ms, 30000);
	CHECK_EQ(back.npairs, 1);
	CHECK(back.job == 0x0102030405060708ull);
	uint8_t bad[CKPT_REQ_LEN];
	memcpy(bad, golden, sizeof(bad));
	bad[4] = 2; /* another version */
	CHECK_EQ(ckpt_request_decode(bad, &back), -1);
	memcpy(bad, golden, sizeof(bad));
	bad[12] = CKPT_MAX_PAIRS + 1;
	CHECK_EQ(ckpt_request_decode(bad, &back), -1);
	memcpy(bad, golden, sizeof(bad));
	bad[0] ^= 1;
	CHECK_EQ(ckpt_request_decode(bad, &back), -1);
	r.npairs = CKPT_MAX_PAIRS + 1;
	CHECK_EQ(ckpt_request_encode(&r, out), 0);
}

static void reply(void)
{
	struct ckpt_reply r = {.result = 999, .value = -1}; /* CUDA_ERROR_UNKNOWN, a value */
	uint8_t out[CKPT_REPLY_LEN];
	static const uint8_t golden[CKPT_REPLY_LEN] = {0x43, 0x45, 0x4d, 0x55, 0xe7, 0x03, 0x00, 0x00,
						       0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00};
	ckpt_reply_encode(&r, out);
	CHECK(memcmp(out, golden, sizeof(golden)) == 0);
	struct ckpt_reply back;
	CHECK_EQ(ckpt_reply_decode(out, &back), 0);
	CHECK_EQ(back.result, 999);
	CHECK_EQ(back.value, -1);
	out[3] = 0;
	CHECK_EQ(ckpt_reply_decode(out, &back), -1);
}

int main(void)
{
	test_run("cuemu's checkpoint request: golden bytes, read back, other versions and forms refused", request);
	test_run("cuemu's checkpoint reply: golden bytes, read back, another form refused", reply);
	return test_done();
}
