/* SPDX-License-Identifier: MIT */
/* What cusnap sends etcd's JSON gateway and reads back (src/node/etcd_wire.c):
 * base64 against RFC 4648's vectors, each request body's golden bytes, a
 * range reply's kvs decoded, and what is not base64 refused. */
#include <stdlib.h>
#include <string.h>

#include "../../src/node/etcd.h"
#include "../harness/test.h"
#include "cusnap/json.h"

static void base64(void)
{
	static const char *const vectors[][2] = {{"", ""},
						 {"f", "Zg=="},
						 {"fo", "Zm8="},
						 {"foo", "Zm9v"},
						 {"foob", "Zm9vYg=="},
						 {"fooba", "Zm9vYmE="},
						 {"foobar", "Zm9vYmFy"}};
	for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		char text[16];
		unsigned char back[16];
		etcd_b64_encode(vectors[i][0], strlen(vectors[i][0]), text);
		CHECK_STR(text, vectors[i][1]);
		long n = etcd_b64_decode(vectors[i][1], back);
		CHECK_EQ(n, (long)strlen(vectors[i][0]));
		CHECK(n >= 0 && memcmp(back, vectors[i][0], (size_t)n) == 0);
	}
	/* The two letters past the alphanumerics: 0xfb 0xff is "+/8=". */
	char text[8];
	unsigned char out[16];
	etcd_b64_encode("\xfb\xff", 2, text);
	CHECK_STR(text, "+/8=");
	CHECK_EQ(etcd_b64_decode("+/8=", out), 2);
	CHECK(out[0] == 0xfb && out[1] == 0xff);
	static const char *const bad[] = {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm=v"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_EQ(etcd_b64_decode(bad[i], out), -1);
}

/* body as compact text, dropped. */
static char *text_of(json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	return text ? text : strdup("(null)");
}

static void bodies(void)
{
	struct {
		char *got;
		const char *golden;
	} b[] = {
		{text_of(etcd_body_key("/cusnap/groups/g/ops/1/decision")),
		 "{\"key\":\"L2N1c25hcC9ncm91cHMvZy9vcHMvMS9kZWNpc2lvbg==\"}"},
		{text_of(etcd_body_range("/cusnap/groups/g/")),
		 "{\"key\":\"L2N1c25hcC9ncm91cHMvZy8=\",\"range_end\":\"L2N1c25hcC9ncm91cHMvZzA=\"}"},
		{text_of(etcd_body_put("/k", "v", 0)), "{\"key\":\"L2s=\",\"value\":\"dg==\"}"},
		{text_of(etcd_body_put("/k", "v", 7587883255418094593LL)),
		 "{\"key\":\"L2s=\",\"value\":\"dg==\",\"lease\":\"7587883255418094593\"}"},
		{text_of(etcd_body_create("/k", "v", 12)),
		 "{\"compare\":[{\"key\":\"L2s=\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}"
		 "],"
		 "\"success\":[{\"request_put\":{\"key\":\"L2s=\",\"value\":\"dg==\",\"lease\":\"12\"}}]}"},
		{text_of(etcd_body_grant(5)), "{\"TTL\":5}"},
		{text_of(etcd_body_lease(-1)), "{\"ID\":\"-1\"}"},
		{text_of(etcd_body_auth("cusnap", "p\"w")), "{\"name\":\"cusnap\",\"password\":\"p\\\"w\"}"},
	};
	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++) {
		CHECK_STR(b[i].got, b[i].golden);
		free(b[i].got);
	}
}

static void replies(void)
{
	json_t *r = json_loads("{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"L2s=\",\"create_revision\":\"4\","
			       "\"mod_revision\":\"8\",\"version\":\"2\",\"value\":\"dg==\",\"lease\":\"12\"},"
			       "{\"key\":\"L2U=\",\"create_revision\":5}],\"count\":\"2\"}",
			       0, NULL);
	CHECK(r != NULL);
	const json_t *kvs = json_object_get(r, "kvs");
	struct etcd_kv kv;
	CHECK_EQ(etcd_kv_of(json_array_get(kvs, 0), &kv), 0);
	CHECK_STR(kv.key, "/k");
	CHECK_STR(kv.value, "v");
	CHECK_EQ(kv.value_len, 1);
	CHECK_EQ(kv.create_revision, 4);
	CHECK_EQ(kv.mod_revision, 8);
	CHECK_EQ(kv.lease, 12);
	free(kv.key);
	free(kv.value);
	CHECK_EQ(etcd_kv_of(json_array_get(kvs, 1), &kv), 0); /* (an empty value: absent; a number as etcd may) */
	CHECK_STR(kv.value, "");
	CHECK_EQ(kv.create_revision, 5);
	CHECK_EQ(kv.lease, 0);
	free(kv.key);
	free(kv.value);
	CHECK_EQ(etcd_int64(r, "count", -1), 2);
	CHECK_EQ(etcd_int64(r, "absent", -1), -1);
	json_decref(r);
	json_t *bad = json_loads("{\"key\":\"L2s\",\"value\":\"dg==\"}", 0, NULL);
	CHECK_EQ(etcd_kv_of(bad, &kv), -1);
	CHECK(kv.key == NULL && kv.value == NULL);
	json_decref(bad);
}

/* Each reply the calls read, decoded once (etcd_reply_decode), from the
 * bytes etcd's gateway sends. */
static void reply_codec(void)
{
	struct etcd_reply r;
	CHECK_EQ(etcd_reply_decode("{\"header\":{},\"ID\":\"7587863211\",\"TTL\":\"10\"}", &r), 0);
	CHECK_EQ(r.id, 7587863211LL);
	CHECK(!r.failed && !r.error[0] && !r.succeeded && r.nkvs == 0);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"result\":{\"ID\":\"5\",\"TTL\":\"9\"}}", &r), 0);
	CHECK_EQ(r.ttl, 9);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"result\":{\"ID\":\"5\"}}", &r), 0); /* (a lease gone: no TTL) */
	CHECK_EQ(r.ttl, 0);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"header\":{},\"succeeded\":true}", &r), 0);
	CHECK(r.succeeded);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"error\":\"etcdserver: permission denied\",\"code\":7}", &r), 0);
	CHECK(r.failed);
	CHECK_STR(r.error, "etcdserver: permission denied");
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"code\":14,\"message\":\"unavailable\"}", &r), 0);
	CHECK(r.failed && !r.error[0]);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"header\":{},\"token\":\"abc.123\"}", &r), 0);
	CHECK_STR(r.token, "abc.123");
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"kvs\":[{\"key\":\"L2s=\",\"value\":\"dg==\"},{\"key\":\"L2U=\"}]}", &r), 0);
	CHECK_EQ(r.nkvs, 2);
	CHECK(!r.bad_kv);
	if (r.nkvs == 2) {
		CHECK_STR(r.kvs[0].key, "/k");
		CHECK_STR(r.kvs[0].value, "v");
		CHECK_STR(r.kvs[1].key, "/e");
	}
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("{\"kvs\":[{\"key\":\"L2s=\"},{\"key\":\"L2s\"}]}", &r), 0);
	CHECK(r.bad_kv && r.nkvs == 0 && r.kvs == NULL);
	etcd_reply_free(&r);
	CHECK_EQ(etcd_reply_decode("<html>502</html>", &r), -1);
	CHECK_EQ(etcd_reply_decode("[1]", &r), -1);
	CHECK_EQ(etcd_reply_decode(NULL, &r), -1);
}

int main(void)
{
	test_run("base64: RFC 4648's vectors both ways, what is not base64 refused", base64);
	test_run("request bodies: golden bytes for each", bodies);
	test_run("replies: a range's kvs decoded, int64 as strings and numbers, bad base64 refused", replies);
	test_run("the reply codec: grant, keepalive, txn, an error, a token, a range, what is not JSON", reply_codec);
	return test_done();
}
