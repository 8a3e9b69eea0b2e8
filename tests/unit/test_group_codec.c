/* SPDX-License-Identifier: MIT */
/* The group's records in etcd (src/node/group_codec.c, DESIGN.md §16):
 * golden bytes for each, read back whole, the records of a member before the
 * codec still read, and every record that is not one refused. */
#include <stdlib.h>
#include <string.h>

#include "../../src/node/group.h"
#include "../harness/test.h"
#include "cusnap/json.h"

#define OPID "0123456789abcdef0123456789abcdef"

static void member(void)
{
	struct member_record m = {.operation = "suspend",
				  .members = 2,
				  .opid = OPID,
				  .phase = "ready",
				  .host = "node-a",
				  .pid = 4242,
				  .names = "a,b"};
	char *text = member_record_encode(&m);
	CHECK_STR(text, "{\"operation\":\"suspend\",\"members\":2,\"opid\":\"" OPID "\",\"phase\":\"ready\","
			"\"host\":\"node-a\",\"pid\":4242,\"names\":\"a,b\"}");
	struct member_record back;
	CHECK_EQ(member_record_decode(text, &back), 0);
	CHECK_STR(back.operation, "suspend");
	CHECK_EQ(back.members, 2);
	CHECK_STR(back.opid, OPID);
	CHECK_STR(back.phase, "ready");
	CHECK_STR(back.host, "node-a");
	CHECK_EQ(back.pid, 4242);
	CHECK_STR(back.names, "a,b");
	member_record_free(&back);
	free(text);
	/* A member before the codec wrote its first record without host and pid. */
	CHECK_EQ(member_record_decode("{\"operation\":\"checkpoint\",\"members\":3,\"opid\":\"" OPID
				      "\",\"phase\":\"arrived\",\"names\":\"\"}",
				      &back),
		 0);
	CHECK_STR(back.host, "");
	CHECK_STR(back.names, "");
	member_record_free(&back);
	static const char *const bad[] = {
		"",
		"[1]",
		"{\"operation\":\"suspend\",\"members\":\"2\",\"opid\":\"" OPID "\",\"phase\":\"ready\"}",
		"{\"operation\":\"suspend\",\"members\":0,\"opid\":\"" OPID "\",\"phase\":\"ready\"}",
		"{\"operation\":\"suspend\",\"members\":2,\"phase\":\"ready\"}",
		"{\"operation\":\"suspend\",\"members\":2,\"opid\":\"" OPID "0\",\"phase\":\"ready\"}",
		"{\"operation\":\"suspend\",\"members\":2,\"opid\":\"" OPID "\",\"phase\":\"ready\",\"pid\":\"1\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(member_record_decode(bad[i], &back), -1);
		CHECK(back.names == NULL);
	}
}

static void decision(void)
{
	struct decision_record d = {.go = false, .why = "member b failed before the boundary: \"x\"", .by = "b"};
	char *text = decision_record_encode(&d);
	CHECK_STR(text, "{\"go\":false,\"why\":\"member b failed before the boundary: \\\"x\\\"\",\"by\":\"b\"}");
	struct decision_record back;
	CHECK_EQ(decision_record_decode(text, &back), 0);
	CHECK(!back.go);
	CHECK_STR(back.why, d.why);
	CHECK_STR(back.by, "b");
	free(text);
	CHECK_EQ(decision_record_decode("{\"go\":true,\"why\":\"\",\"by\":\"a\"}", &back), 0);
	CHECK(back.go);
	CHECK_EQ(decision_record_decode("{\"go\":1,\"why\":\"\",\"by\":\"a\"}", &back), -1);
	CHECK_EQ(decision_record_decode("{\"go\":true,\"by\":\"a\"}", &back), -1);
}

static void result(void)
{
	struct result_record r = {.member = "a",
				  .exit = 0,
				  .crossed = true,
				  .holds_checkpoint = true,
				  .error = "",
				  .operation = "checkpoint",
				  .host = "node-a",
				  .time = 1796000000};
	char *text = result_record_encode(&r);
	CHECK_STR(text, "{\"member\":\"a\",\"exit\":0,\"crossed\":true,\"holds_checkpoint\":true,\"error\":\"\","
			"\"operation\":\"checkpoint\",\"host\":\"node-a\",\"time\":1796000000}");
	struct result_record back;
	CHECK_EQ(result_record_decode(text, &back), 0);
	CHECK_STR(back.member, "a");
	CHECK_EQ(back.exit, 0);
	CHECK(back.crossed && back.holds_checkpoint);
	CHECK_STR(back.operation, "checkpoint");
	CHECK_STR(back.host, "node-a");
	CHECK_EQ(back.time, 1796000000);
	free(text);
	json_t *j = result_record_json(&r);
	CHECK_EQ(json_member_number(j, "time", 0), 1796000000);
	json_decref(j);
	CHECK_EQ(result_record_decode("{\"member\":\"a\",\"exit\":2,\"crossed\":false,\"holds_checkpoint\":false,"
				      "\"error\":\"x\",\"operation\":\"restore\"}",
				      &back),
		 0);
	CHECK_EQ(back.exit, 2);
	CHECK_EQ(result_record_decode("{\"member\":\"a\",\"exit\":\"0\",\"crossed\":false,\"holds_checkpoint\":false,"
				      "\"error\":\"\",\"operation\":\"restore\"}",
				      &back),
		 -1);
}

static void ended(void)
{
	/* (read from its golden bytes, then written back to the same) */
	static const char golden[] = "{\"operation\":\"checkpoint\",\"members\":2,\"opid\":\"" OPID
				     "\",\"why\":\"member b failed at its boundary (decided by member b)\","
				     "\"took_part\":\"b\",\"lease\":7587869530312345678}";
	struct ended_record back;
	CHECK_EQ(ended_record_decode(golden, &back), 0);
	CHECK(back.members == 2 && back.lease == 7587869530312345678LL && back.took_part &&
	      !strcmp(back.took_part, "b"));
	char *text = ended_record_encode(&back);
	CHECK_STR(text, golden);
	free(text);
	ended_record_free(&back);
	static const char *const bad[] = {
		"{\"operation\":\"checkpoint\",\"members\":0,\"opid\":\"x\",\"why\":\"\",\"took_part\":\"\",\"lease\":"
		"1}",
		"{\"operation\":\"checkpoint\",\"members\":2,\"opid\":\"x\",\"why\":\"\",\"lease\":1}",
		"{\"operation\":7,\"members\":2,\"opid\":\"x\",\"why\":\"\",\"took_part\":\"\",\"lease\":1}",
		"[]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(ended_record_decode(bad[i], &back), -1);
		CHECK(back.took_part == NULL);
	}
}

int main(void)
{
	test_run("a member's record: golden bytes, read back, the first record of before, refusals", member);
	test_run("the decision: golden bytes, read back, refusals", decision);
	test_run("a member's result: golden bytes, read back, refusals", result);
	test_run("the operation last undone: golden bytes, read back, refusals", ended);
	return test_done();
}
