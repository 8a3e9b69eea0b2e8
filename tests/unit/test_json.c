/* SPDX-License-Identifier: MIT */
/* What cusnap adds to jansson: strings from arbitrary bytes, one-line output,
 * bounded file reading, typed members, and the manifest's checks. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../harness/test.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"

/* v written by json_emit, as text (malloc'ed). */
static char *emitted(json_t *v)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CHECK(f != NULL);
	if (!f)
		return NULL;
	CHECK_EQ(json_emit(f, v), 0);
	fclose(f);
	return buf;
}

static void text_from_bytes(void)
{
	/* Valid UTF-8 kept, control characters, quote and backslash escaped. */
	char *s = emitted(json_pack("{s:o}", "d", json_text("a \"q\" \\b\nn\tt \xc3\xa9")));
	CHECK_STR(s, "{\"d\":\"a \\\"q\\\" \\\\b\\nn\\tt \xc3\xa9\"}\n");
	free(s);
	/* A stray byte, a truncated sequence, an overlong form, a surrogate: each U+FFFD. */
	json_t *j = json_text("x\xff"
			      "y\xc3"
			      "z\xc0\xaf"
			      "\xed\xa0\x80");
	CHECK(j != NULL);
	/* (the overlong pair and the surrogate's three bytes are each one bad byte) */
#define FFFD "\xef\xbf\xbd"
	CHECK_STR(json_string_value(j), "x" FFFD "y" FFFD "z" FFFD FFFD FFFD FFFD FFFD);
	json_decref(j);
	j = json_text(NULL);
	CHECK(json_is_null(j));
	json_decref(j);
	struct cusnap_id id;
	memset(id.b, 0xab, sizeof(id.b));
	j = json_id(&id);
	CHECK_STR(json_string_value(j), "abababababababababababababababab");
	json_decref(j);
	CHECK_EQ(json_emit(stdout, NULL), -1); /* a build step that failed */
}

static void members(void)
{
	json_t *j = json_loads("{\"a\": 1.5, \"n\": 3, \"b\": true, \"s\": \"x\"}", 0, NULL);
	CHECK(j != NULL);
	CHECK(json_member_number(j, "a", 0) == 1.5);
	CHECK(json_member_number(j, "n", 0) == 3); /* integers too */
	CHECK_EQ(json_member_bool(j, "b", false), true);
	CHECK_STR(json_member_string(j, "s"), "x");
	CHECK(json_member_string(j, "a") == NULL);        /* another type */
	CHECK_EQ(json_member_bool(j, "s", false), false); /* the default */
	CHECK(json_member_string(NULL, "s") == NULL);
	json_decref(j);
}

static void files(void)
{
	char path[] = "/tmp/cusnap-json-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	const char *text = "{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c\", "
			   "\"processes\": [], \"criu\": {\"dump_args\": [\"-t\", \"--shell-job\"]}}";
	CHECK_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	char err[512];
	json_t *j = json_read_file(path, 1 << 20, err, sizeof(err));
	CHECK(j != NULL);
	json_decref(j);
	CHECK(json_read_file(path, 10, err, sizeof(err)) == NULL); /* past the bound */
	CHECK(strstr(err, "larger than 10 bytes") != NULL);
	struct manifest m;
	CHECK_EQ(manifest_parse(text, strlen(text), &m, err, sizeof(err)), 0);
	CHECK_STR(m.control_dir, "/c");
	CHECK(manifest_dump_arg(&m, "--shell-job"));
	CHECK(!manifest_dump_arg(&m, "--tcp-established"));
	manifest_free(&m);
	static const char *const bad[] = {
		"",
		"{\"format\": \"cusnap-manifest\", \"version\": 2, \"control_dir\": \"/c\", \"processes\": []}",
		"{\"format\": \"other\", \"version\": 1, \"control_dir\": \"/c\", \"processes\": []}",
		"{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c\", \"processes\": {}}",
		"{\"format\": \"cusnap-manifest\", \"format\": \"cusnap-manifest\"}",
		/* a control directory that leads elsewhere: a restore removes files there */
		"{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c\", \"processes\": [], "
		"\"control_dir_here\": \"/c/../etc\"}",
		"{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c/./..\", \"processes\": []}",
		"{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"c\", \"processes\": []}",
		"[1 2]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (manifest_parse(bad[i], strlen(bad[i]), &m, err, sizeof(err)) == 0) {
			test_fail(__FILE__, __LINE__, "accepted: %s", bad[i]);
			manifest_free(&m);
		}
	}
	unlink(path);
	CHECK(json_read_file(path, 1 << 20, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "No such file") != NULL);
}

int main(void)
{
	test_run("strings from any bytes, escapes, ids, one line", text_from_bytes);
	test_run("typed members and their defaults", members);
	test_run("bounded file reading and the manifest's checks", files);
	return test_done();
}
