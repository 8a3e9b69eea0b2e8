/* SPDX-License-Identifier: MIT */
/* The JSON reader used for manifest.json: values, escapes, and refusals. */
#include <string.h>

#include "../harness/test.h"
#include "cusnap/json.h"

static struct json *parse(const char *s, char *err)
{
	return json_parse(s, strlen(s), err, 256);
}

static void values(void)
{
	char err[256];
	struct json *j = parse(" {\"a\": 1.5, \"b\": [true, false, null], \"c\": \"x\\ty\\u0041\", \"d\": {}} ", err);
	CHECK(j != NULL);
	if (!j)
		return;
	CHECK(json_get_number(j, "a", 0) == 1.5);
	const struct json *b = json_get(j, "b");
	CHECK(b && b->type == JSON_ARRAY && b->child && b->child->boolean && b->child->next->type == JSON_BOOL &&
	      b->child->next->next->type == JSON_NULL);
	CHECK_STR(json_get_string(j, "c"), "x\tyA");
	CHECK(json_get(j, "d") && json_get(j, "d")->type == JSON_OBJECT);
	CHECK(json_get_string(j, "missing") == NULL);
	CHECK_EQ(json_get_bool(j, "a", true), true); /* wrong type: the default */
	json_free(j);
}

static void refusals(void)
{
	static const char *const bad[] = {
		"",
		"{",
		"{\"a\" 1}",
		"{\"a\": 1,}",
		"[1 2]",
		"\"unterminated",
		"{\"a\": \"\\q\"}",
		"{\"a\": \"\\u00e9\"}",
		"tru",
		"1 2",
		"{\"a\": -}",
		"\"tab\tinside\"",
	};
	char err[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct json *j = parse(bad[i], err);
		if (j) {
			test_fail(__FILE__, __LINE__, "accepted: %s", bad[i]);
			json_free(j);
		} else {
			CHECK(strstr(err, "at byte") != NULL);
		}
	}
	/* Nesting is bounded. */
	char deep[200];
	memset(deep, '[', sizeof(deep) - 1);
	deep[sizeof(deep) - 1] = '\0';
	CHECK(parse(deep, err) == NULL);
	CHECK(strstr(err, "nested too deeply") != NULL);
}

int main(void)
{
	test_run("objects, arrays, strings with escapes, numbers, literals", values);
	test_run("malformed input refused with a position", refusals);
	return test_done();
}
