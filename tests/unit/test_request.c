/* SPDX-License-Identifier: MIT */
/* Lifecycle requests (request.h): golden bytes, round trips, the 1.3 record
 * form still read, and every refusal. */
#include <stdlib.h>
#include <string.h>

#include "../harness/test.h"
#include "cusnap/request.h"

/* The payload b holds, compared with golden bytes. */
static bool same_bytes(const struct proto_buf *b, const uint8_t *golden, size_t len)
{
	return !b->failed && b->len == len && memcmp(b->data, golden, len) == 0;
}

static void record_form(void)
{
	CHECK_EQ(req_record_type(PROTO_MINOR), REC_REQUEST);
	CHECK_EQ(req_record_type(PROTO_MINOR_REQUEST), REC_REQUEST);
	CHECK_EQ(req_record_type(3), REC_RESULT); /* what a 1.3 shim reads */
	CHECK_EQ(req_record_type(0), REC_RESULT);
}

static void content_names(void)
{
	CHECK_STR(proto_content_name(PROTO_CONTENT_HOST), "host");
	CHECK_STR(proto_content_name(PROTO_CONTENT_NATIVE), "native");
	CHECK(proto_content_name(0) == NULL);
	CHECK_STR(proto_content_name(PROTO_CONTENT_FILE), "file");
	CHECK(proto_content_name(4) == NULL);
	CHECK_EQ(proto_content_parse("file"), PROTO_CONTENT_FILE);
	CHECK_EQ(proto_content_parse("host"), PROTO_CONTENT_HOST);
	CHECK_EQ(proto_content_parse("native"), PROTO_CONTENT_NATIVE);
	CHECK_EQ(proto_content_parse("Native"), 0);
	CHECK_EQ(proto_content_parse(""), 0);
	CHECK_EQ(proto_content_parse(NULL), 0);
}

/* The content mode alone (the holds checked to be none). */
static int prepare_decode(const void *payload, size_t len, enum proto_content *c, char *err, size_t errlen)
{
	struct req_hold *holds = (struct req_hold *)1;
	size_t n = 7;
	int rc = req_prepare_decode(payload, len, c, &holds, &n, err, errlen);
	CHECK(holds == NULL);
	CHECK_EQ(n, 0);
	return rc;
}

static void prepare_request(void)
{
	static const uint8_t golden[] = {
		0x0a, 0x00, 0x0a, 0x00, 0x00, 0x00,                         /* REC_REQUEST, 10 bytes */
		0x1f, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, /* F_CONTENT = native */
	};
	struct proto_buf b = {0};
	req_prepare_encode(&b, REC_REQUEST, PROTO_CONTENT_NATIVE, NULL, 0);
	CHECK(same_bytes(&b, golden, sizeof(golden)));
	char err[256] = "";
	enum proto_content c = 0;
	CHECK_EQ(prepare_decode(golden, sizeof(golden), &c, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(c, PROTO_CONTENT_NATIVE);
	pbuf_free(&b);
	/* A 1.3 coordinator's form: the same fields in REC_RESULT. */
	req_prepare_encode(&b, REC_RESULT, PROTO_CONTENT_NATIVE, NULL, 0);
	CHECK_EQ(b.data[0], REC_RESULT);
	c = 0;
	CHECK_EQ(prepare_decode(b.data, b.len, &c, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(c, PROTO_CONTENT_NATIVE);
	pbuf_free(&b);
	/* No field (a 1.0 coordinator): host. */
	c = 0;
	CHECK_EQ(prepare_decode(NULL, 0, &c, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(c, PROTO_CONTENT_HOST);
	/* Refusals, each saying why. */
	req_prepare_encode(&b, REC_REQUEST, 7, NULL, 0);
	CHECK_EQ(prepare_decode(b.data, b.len, &c, err, sizeof(err)), PROTO_E_MALFORMED);
	CHECK(strstr(err, "content mode 7") != NULL);
	pbuf_free(&b);
	size_t at = pbuf_begin(&b, REC_REQUEST);
	pbuf_put_u64(&b, F_CONTENT, 1);
	pbuf_end(&b, at);
	CHECK_EQ(prepare_decode(b.data, b.len, &c, err, sizeof(err)), PROTO_E_LENGTH);
	pbuf_free(&b);
	CHECK_EQ(prepare_decode(golden, sizeof(golden) - 1, &c, err, sizeof(err)), PROTO_E_TRUNCATED);
}

static struct cusnap_id id_of(uint8_t v)
{
	struct cusnap_id id;
	memset(id.b, v, sizeof(id.b));
	return id;
}

/* PREPARE's holds: golden bytes, a round trip, every refusal. */
static void prepare_holds(void)
{
	struct req_hold h[2] = {
		{.alloc = id_of(0xa1),
		 .creator = id_of(0xc1),
		 .holder = id_of(0xd1),
		 .endpoint = "/e",
		 .endpoint_len = 2},
		{.alloc = id_of(0xa2),
		 .creator = id_of(0xc2),
		 .holder = id_of(0xd2),
		 .endpoint = "/run/x.sock",
		 .endpoint_len = 11},
	};
	struct proto_buf b = {0};
	req_prepare_encode(&b, REC_REQUEST, PROTO_CONTENT_HOST, h, 1);
	uint8_t golden[6 + 10 + 6 + 50];
	memcpy(golden, (uint8_t[]){0x0a, 0x00, 66, 0x00, 0x00, 0x00}, 6); /* REC_REQUEST, 66 bytes */
	memcpy(golden + 6, (uint8_t[]){0x1f, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00}, 10); /* host */
	memcpy(golden + 16, (uint8_t[]){0x2d, 0x00, 50, 0x00, 0x00, 0x00}, 6); /* F_HOLD, 50 bytes */
	memset(golden + 22, 0xa1, 16);
	memset(golden + 38, 0xc1, 16);
	memset(golden + 54, 0xd1, 16);
	memcpy(golden + 70, "/e", 2);
	CHECK(same_bytes(&b, golden, sizeof(golden)));
	pbuf_free(&b);
	req_prepare_encode(&b, REC_REQUEST, PROTO_CONTENT_NATIVE, h, 2);
	enum proto_content c = 0;
	struct req_hold *got = NULL;
	size_t n = 0;
	char err[256] = "";
	CHECK_EQ(req_prepare_decode(b.data, b.len, &c, &got, &n, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(c, PROTO_CONTENT_NATIVE);
	CHECK_EQ(n, 2);
	for (size_t i = 0; got && i < n && i < 2; i++) {
		CHECK(id_equal(&got[i].alloc, &h[i].alloc) && id_equal(&got[i].creator, &h[i].creator) &&
		      id_equal(&got[i].holder, &h[i].holder));
		CHECK_EQ(got[i].endpoint_len, h[i].endpoint_len);
		CHECK(!memcmp(got[i].endpoint, h[i].endpoint, h[i].endpoint_len));
	}
	free(got);
	pbuf_free(&b);
	/* Refused: no endpoint, a relative one, a NUL inside; nothing returned. */
	static const char *const bad[] = {"", "e", "/a\0b"};
	static const size_t bad_len[] = {0, 1, 4};
	for (size_t k = 0; k < 3; k++) {
		struct req_hold one = h[0];
		one.endpoint = bad[k];
		one.endpoint_len = bad_len[k];
		req_prepare_encode(&b, REC_REQUEST, PROTO_CONTENT_HOST, &one, 1);
		got = (struct req_hold *)1;
		CHECK_EQ(req_prepare_decode(b.data, b.len, &c, &got, &n, err, sizeof(err)), PROTO_E_LENGTH);
		CHECK(got == NULL);
		CHECK(strstr(err, "hold entry") != NULL);
		pbuf_free(&b);
	}
}

static void device_map_request(void)
{
	static const uint8_t golden[] = {
		0x0a, 0x00, 0x1c, 0x00, 0x00, 0x00,                   /* REC_REQUEST, 28 bytes */
		0x23, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* F_DEVICE_MAP: 0 -> 1 */
		0x00, 0x01, 0x00, 0x00, 0x00,                         /* */
		0x23, 0x00, 0x08, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, /* F_DEVICE_MAP: 2 -> 0 */
		0x00, 0x00, 0x00, 0x00, 0x00,                         /* */
	};
	const int map[] = {1, -1, 0}; /* device 1 keeps its ordinal: not sent */
	struct proto_buf b = {0};
	req_device_map_encode(&b, REC_REQUEST, map, 3);
	CHECK(same_bytes(&b, golden, sizeof(golden)));
	pbuf_free(&b);
	int back[PROTO_MAX_DEVICES];
	size_t pairs = 99;
	char err[256] = "";
	CHECK_EQ(req_device_map_decode(golden, sizeof(golden), back, &pairs, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(pairs, 2);
	CHECK_EQ(back[0], 1);
	CHECK_EQ(back[1], 1);
	CHECK_EQ(back[2], 0);
	CHECK_EQ(back[PROTO_MAX_DEVICES - 1], PROTO_MAX_DEVICES - 1);
	/* The 1.3 form, and an empty request. */
	req_device_map_encode(&b, REC_RESULT, map, 3);
	CHECK_EQ(req_device_map_decode(b.data, b.len, back, &pairs, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(pairs, 2);
	CHECK_EQ(back[0], 1);
	pbuf_free(&b);
	CHECK_EQ(req_device_map_decode(NULL, 0, back, &pairs, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(pairs, 0);
	CHECK_EQ(back[0], 0);
	/* Refusals: an ordinal out of range, an entry of the wrong length. */
	const int far[] = {PROTO_MAX_DEVICES};
	req_device_map_encode(&b, REC_REQUEST, far, 1);
	CHECK_EQ(req_device_map_decode(b.data, b.len, back, &pairs, err, sizeof(err)), PROTO_E_MALFORMED);
	CHECK(strstr(err, "out of range") != NULL);
	pbuf_free(&b);
	size_t at = pbuf_begin(&b, REC_REQUEST);
	pbuf_put_u32(&b, F_DEVICE_MAP, 1);
	pbuf_end(&b, at);
	CHECK_EQ(req_device_map_decode(b.data, b.len, back, &pairs, err, sizeof(err)), PROTO_E_LENGTH);
	pbuf_free(&b);
}

static void mc_rebuild_request(void)
{
	struct cusnap_id ids[3] = {{{1}}, {{2, 2}}, {{3, 3, 3}}};
	static const uint8_t golden[] = {
		0x0a, 0x00, 0x16, 0x00, 0x00, 0x00, /* REC_REQUEST, 22 bytes */
		0x2b, 0x00, 0x10, 0x00, 0x00, 0x00, /* F_MC_REBUILD, 16 bytes */
		0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	struct proto_buf b = {0};
	req_mc_rebuild_encode(&b, REC_REQUEST, ids, 1);
	CHECK(same_bytes(&b, golden, sizeof(golden)));
	pbuf_free(&b);
	struct cusnap_id *back = NULL;
	size_t n = 0;
	char err[256] = "";
	req_mc_rebuild_encode(&b, REC_REQUEST, ids, 3);
	CHECK_EQ(req_mc_rebuild_decode(b.data, b.len, &back, &n, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(n, 3);
	for (size_t i = 0; back && i < n; i++)
		CHECK(id_equal(&back[i], &ids[i]));
	free(back);
	pbuf_free(&b);
	req_mc_rebuild_encode(&b, REC_RESULT, ids, 2); /* the 1.3 form */
	CHECK_EQ(req_mc_rebuild_decode(b.data, b.len, &back, &n, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(n, 2);
	free(back);
	pbuf_free(&b);
	/* Many: past the decoder's first growth. */
	struct cusnap_id many[40];
	for (size_t i = 0; i < 40; i++)
		many[i] = (struct cusnap_id){{(uint8_t)i, 7}};
	req_mc_rebuild_encode(&b, REC_REQUEST, many, 40);
	CHECK_EQ(req_mc_rebuild_decode(b.data, b.len, &back, &n, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(n, 40);
	CHECK(back && id_equal(&back[39], &many[39]));
	free(back);
	pbuf_free(&b);
	/* Refusals: an id of the wrong length; truncated. Nothing handed out. */
	size_t at = pbuf_begin(&b, REC_REQUEST);
	pbuf_put_id(&b, F_MC_REBUILD, &ids[0]);
	pbuf_put_u32(&b, F_MC_REBUILD, 1);
	pbuf_end(&b, at);
	back = (struct cusnap_id *)1;
	CHECK_EQ(req_mc_rebuild_decode(b.data, b.len, &back, &n, err, sizeof(err)), PROTO_E_LENGTH);
	CHECK(back == NULL && n == 0);
	CHECK_EQ(req_mc_rebuild_decode(b.data, b.len - 1, &back, &n, err, sizeof(err)), PROTO_E_TRUNCATED);
	CHECK(back == NULL && n == 0);
	pbuf_free(&b);
}

/* EXPORT and EXPORT_MANY: the request's and the reply's golden bytes, round
 * trips, several records in one payload, refusals. */
static void export_request(void)
{
	static const uint8_t golden[] = {
		0x06, 0x00, 0x54, 0x00, 0x00, 0x00, /* REC_EXPORT, 84 bytes */
		0x0a, 0x00, 0x10, 0x00, 0x00, 0x00, /* F_ALLOC_ID */
		0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x10, 0x00, 0x00, 0x00, /* F_TOKEN */
		0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x10, 0x00, 0x00, 0x00, /* F_ID: the redeemer */
		0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x02, 0x00, 0x00, 0x00, '/',  'e', /* F_ENDPOINT */
		0x2f, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,            /* F_HOPS */
	};
	struct req_export q = {.alloc = {{1}}, .token = {{2}}, .who = {{3}}, .endpoint = "/e", .hops = 1}, back;
	struct proto_buf b = {0};
	req_export_encode(&b, &q);
	CHECK(same_bytes(&b, golden, sizeof(golden)));
	/* A second record, without the redeemer: EXPORT_MANY names it once. */
	req_export_encode(&b, &(struct req_export){.alloc = {{4}}, .token = {{5}}});
	char ep[64], err[256] = "";
	struct proto_iter it;
	piter_init(&it, b.data, b.len);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), 1);
	CHECK(id_equal(&back.alloc, &q.alloc) && id_equal(&back.token, &q.token) && id_equal(&back.who, &q.who));
	CHECK(back.endpoint && !strcmp(back.endpoint, "/e"));
	CHECK_EQ(back.hops, 1);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), 1);
	CHECK(back.alloc.b[0] == 4 && back.token.b[0] == 5 && id_is_zero(&back.who) && !back.endpoint && !back.hops);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), 0);
	pbuf_free(&b);
	/* Refusals: no token; a relative endpoint is no endpoint; truncated. */
	size_t at = pbuf_begin(&b, REC_EXPORT);
	pbuf_put_id(&b, F_ALLOC_ID, &q.alloc);
	pbuf_end(&b, at);
	piter_init(&it, b.data, b.len);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), PROTO_E_MALFORMED);
	CHECK(strstr(err, "token") != NULL);
	pbuf_free(&b);
	req_export_encode(&b, &(struct req_export){.alloc = {{1}}, .token = {{2}}, .endpoint = "e"});
	piter_init(&it, b.data, b.len);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), 1);
	CHECK(back.endpoint == NULL);
	pbuf_free(&b);
	piter_init(&it, golden, sizeof(golden) - 1);
	CHECK_EQ(req_export_next(&it, &back, ep, sizeof(ep), err, sizeof(err)), PROTO_E_TRUNCATED);
	/* The reply: golden bytes and round trip; no size is malformed. */
	static const uint8_t reply[] = {
		0x06, 0x00, 0x2e, 0x00, 0x00, 0x00, /* REC_EXPORT, 46 bytes */
		0x0a, 0x00, 0x10, 0x00, 0x00, 0x00, /* F_ALLOC_ID */
		0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x0e, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, /* F_SIZE: 2 MiB */
		0x25, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,                         /* F_MC_DEVICES */
	};
	struct rep_export r = {.alloc = {{1}}, .size = 2u << 20, .mc_devices = 2}, rback;
	rep_export_encode(&b, &r);
	CHECK(same_bytes(&b, reply, sizeof(reply)));
	piter_init(&it, b.data, b.len);
	CHECK_EQ(rep_export_next(&it, &rback), PROTO_OK);
	CHECK(id_equal(&rback.alloc, &r.alloc) && rback.size == r.size && rback.mc_devices == 2);
	CHECK_EQ(rep_export_next(&it, &rback), PROTO_E_MALFORMED); /* none left */
	pbuf_free(&b);
	rep_export_encode(&b, &(struct rep_export){.alloc = {{1}}});
	piter_init(&it, b.data, b.len);
	CHECK_EQ(rep_export_next(&it, &rback), PROTO_E_MALFORMED);
	pbuf_free(&b);
}

/* Records of other types are not a request's: a reply's REC_ERROR or a field
 * from a future minor version change nothing. */
static void other_records_skipped(void)
{
	struct proto_buf b = {0};
	size_t at = pbuf_begin(&b, REC_ERROR);
	pbuf_put_u32(&b, F_CONTENT, PROTO_CONTENT_NATIVE);
	pbuf_end(&b, at);
	at = pbuf_begin(&b, REC_REQUEST);
	pbuf_put_u32(&b, 999, 5);
	pbuf_end(&b, at);
	enum proto_content c = 0;
	char err[256];
	CHECK_EQ(prepare_decode(b.data, b.len, &c, err, sizeof(err)), PROTO_OK);
	CHECK_EQ(c, PROTO_CONTENT_HOST);
	pbuf_free(&b);
}

int main(void)
{
	test_run("requests go in REC_REQUEST from 1.4, in REC_RESULT to older peers", record_form);
	test_run("PREPARE's holds: golden bytes, round trip, refusals", prepare_holds);
	test_run("the content mode has one text form", content_names);
	test_run("PREPARE: golden bytes, round trip, 1.3 form, refusals", prepare_request);
	test_run("RESTORE_CREATORS' device map: golden bytes, round trip, 1.3 form, refusals", device_map_request);
	test_run("the multicast rebuild ids: golden bytes, round trip, 1.3 form, refusals", mc_rebuild_request);
	test_run("EXPORT and EXPORT_MANY: golden bytes, round trips, refusals", export_request);
	test_run("records of other types are not read as a request", other_records_skipped);
	return test_done();
}
