/* SPDX-License-Identifier: MIT */
/* DIR/manifest.json (src/common/manifest.c, DESIGN.md §9): the golden text a
 * manifest is written as, read back field by field and written again the same,
 * a manifest of an older cusnap (the four members it must have) still read,
 * and every member of the wrong type refused. */
#include <stdlib.h>
#include <string.h>

#include "../harness/test.h"
#include "cusnap/manifest.h"

#define ID "00112233445566778899aabbccddeeff"

static const char golden[] = "{\n"
			     "  \"format\": \"cusnap-manifest\",\n"
			     "  \"version\": 1,\n"
			     "  \"checkpoint_id\": \"" ID "\",\n"
			     "  \"created\": 1796000000,\n"
			     "  \"hostname\": \"node-a\",\n"
			     "  \"root_pid\": 4242,\n"
			     "  \"root_nspid\": 1,\n"
			     "  \"control_dir\": \"/run/ctl\",\n"
			     "  \"control_dir_here\": \"/var/lib/c/run/ctl\",\n"
			     "  \"content\": \"native\",\n"
			     "  \"prepared\": true,\n"
			     "  \"leave_running\": false,\n"
			     "  \"criu\": {\n"
			     "    \"path\": \"/usr/sbin/criu\",\n"
			     "    \"version\": \"4.2.1\",\n"
			     "    \"dump_args\": [\n"
			     "      \"dump\",\n"
			     "      \"-t\",\n"
			     "      \"4242\",\n"
			     "      \"--network-lock\",\n"
			     "      \"nftables\"\n"
			     "    ],\n"
			     "    \"cuda_plugin\": false,\n"
			     "    \"plugins\": \"none: an empty --libdir; cusnap does the native steps\"\n"
			     "  },\n"
			     "  \"gpus\": [\n"
			     "    \"GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\"\n"
			     "  ],\n"
			     "  \"processes\": [\n"
			     "    {\n"
			     "      \"pid\": 4242,\n"
			     "      \"nspid\": 1,\n"
			     "      \"cuda\": true,\n"
			     "      \"interposed\": true,\n"
			     "      \"endpoint\": \"/run/ctl/endpoint-1.sock\"\n"
			     "    },\n"
			     "    {\n"
			     "      \"pid\": 4243,\n"
			     "      \"nspid\": 2,\n"
			     "      \"cuda\": false,\n"
			     "      \"interposed\": false,\n"
			     "      \"endpoint\": \"\"\n"
			     "    }\n"
			     "  ],\n"
			     "  \"timings_ms\": {\n"
			     "    \"prepare\": 12.5,\n"
			     "    \"lock\": 0.25,\n"
			     "    \"checkpoint\": 3.0,\n"
			     "    \"criu_dump\": 800.125,\n"
			     "    \"restore_in_place\": 0.0\n"
			     "  },\n"
			     "  \"bytes\": {\n"
			     "    \"host_copies\": 1073741824,\n"
			     "    \"images\": 2147483648\n"
			     "  },\n"
			     "  \"needs\": {\n"
			     "    \"driver\": 13000\n"
			     "  },\n"
			     "  \"image_files\": {\n"
			     "    \"pages-1.img\": {\n"
			     "      \"size\": 4096,\n"
			     "      \"crc32c\": \"e3069283\"\n"
			     "    }\n"
			     "  }\n"
			     "}\n";

static void golden_text(void)
{
	struct manifest_proc procs[] = {{4242, 1, true, true, "/run/ctl/endpoint-1.sock"}, {4243, 2, false, false, ""}};
	const char *args[] = {"dump", "-t", "4242", "--network-lock", "nftables"};
	json_t *gpus = json_pack("[s]", "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"),
	       *needs = json_pack("{s:i}", "driver", 13000);
	struct file_digests files = {0};
	CHECK_EQ(digests_add(&files, "pages-1.img", 4096, 0xe3069283u), 0);
	struct manifest m = {.checkpoint_id = ID,
			     .hostname = "node-a",
			     .created = 1796000000,
			     .root_pid = 4242,
			     .root_nspid = 1,
			     .control_dir = "/run/ctl",
			     .control_dir_here = "/var/lib/c/run/ctl",
			     .content = "native",
			     .prepared = true,
			     .criu_path = "/usr/sbin/criu",
			     .criu_version = "4.2.1",
			     .dump_args = args,
			     .ndump_args = 5,
			     .procs = procs,
			     .nprocs = 2,
			     .ms = {12.5, 0.25, 3, 800.125, 0},
			     .bytes = {1LL << 30, 2LL << 30},
			     .gpus = gpus,
			     .needs = needs,
			     .image_files = &files};
	size_t len = 0;
	char *text = manifest_encode(&m, &len);
	CHECK(text != NULL);
	CHECK_EQ(len, strlen(golden));
	CHECK(text && len == strlen(golden) && memcmp(text, golden, len) == 0);
	if (text && (len != strlen(golden) || memcmp(text, golden, len) != 0))
		test_fail(__FILE__, __LINE__, "written as:\n%.*s", (int)len, text);
	free(text);
	json_decref(gpus);
	json_decref(needs);
	digests_free(&files);
}

static void read_back(void)
{
	struct manifest m;
	char err[512];
	CHECK_EQ(manifest_parse(golden, strlen(golden), &m, err, sizeof(err)), 0);
	CHECK_STR(m.checkpoint_id, ID);
	CHECK_STR(m.hostname, "node-a");
	CHECK(m.created == 1796000000);
	CHECK_EQ(m.root_pid, 4242);
	CHECK_EQ(m.root_nspid, 1);
	CHECK_STR(m.control_dir, "/run/ctl");
	CHECK_STR(m.control_dir_here, "/var/lib/c/run/ctl");
	CHECK_STR(m.content, "native");
	CHECK(m.prepared && !m.leave_running);
	CHECK_STR(m.criu_path, "/usr/sbin/criu");
	CHECK_STR(m.criu_version, "4.2.1");
	CHECK_EQ(m.ndump_args, 5);
	CHECK_STR(manifest_dump_arg_value(&m, "--network-lock"), "nftables");
	CHECK(manifest_dump_arg(&m, "-t") && !manifest_dump_arg(&m, "--shell-job"));
	CHECK(manifest_dump_arg_value(&m, "nftables") == NULL); /* the last: no value after it */
	CHECK_EQ(m.nprocs, 2);
	CHECK(m.nprocs == 2 && m.procs[0].pid == 4242 && m.procs[0].nspid == 1 && m.procs[0].cuda &&
	      m.procs[0].interposed && !strcmp(m.procs[0].endpoint, "/run/ctl/endpoint-1.sock"));
	CHECK(m.nprocs == 2 && m.procs[1].pid == 4243 && m.procs[1].nspid == 2 && !m.procs[1].cuda &&
	      !m.procs[1].interposed && !strcmp(m.procs[1].endpoint, ""));
	CHECK(m.ms.prepare == 12.5 && m.ms.lock == 0.25 && m.ms.checkpoint == 3 && m.ms.criu_dump == 800.125 &&
	      m.ms.restore_in_place == 0);
	CHECK(m.bytes.host_copies == 1LL << 30 && m.bytes.images == 2LL << 30);
	CHECK_STR(json_string_value(json_array_get(m.gpus, 0)), "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
	CHECK_EQ(json_integer_value(json_object_get(m.needs, "driver")), 13000);
	/* The files' digests decoded once, into the struct the restore reads. */
	const struct file_digest *f = m.image_files ? digests_find(m.image_files, "pages-1.img") : NULL;
	CHECK(m.image_files && m.image_files->n == 1 && f && f->size == 4096 && f->crc32c == 0xe3069283u);
	CHECK(m.content_files == NULL);
	CHECK(m.network == NULL);
	/* Written again: the same bytes. */
	size_t len = 0;
	char *text = manifest_encode(&m, &len);
	CHECK(text && len == strlen(golden) && memcmp(text, golden, len) == 0);
	free(text);
	manifest_free(&m);
}

static void older(void)
{
	const char *text = "{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c\", "
			   "\"processes\": [{\"pid\": 7, \"nspid\": 7}]}";
	struct manifest m;
	char err[512];
	CHECK_EQ(manifest_parse(text, strlen(text), &m, err, sizeof(err)), 0);
	CHECK_STR(m.control_dir_here, "/c"); /* not told: the control directory as the workload sees it */
	CHECK_STR(m.criu_version, "");
	CHECK(!m.prepared && m.ndump_args == 0 && m.image_files == NULL && m.gpus == NULL);
	CHECK(m.nprocs == 1 && m.procs[0].pid == 7 && !m.procs[0].interposed && !strcmp(m.procs[0].endpoint, ""));
	manifest_free(&m);
}

static void wrong_types(void)
{
	static const char *const bad[] = {
		"\"processes\": [{\"pid\": \"7\", \"nspid\": 7}]",
		"\"processes\": [{\"pid\": 7}]",
		"\"processes\": [{\"pid\": 0, \"nspid\": 7}]",
		"\"processes\": [{\"pid\": 7, \"nspid\": -2}]",
		"\"processes\": [{\"pid\": 7, \"nspid\": 7, \"interposed\": 1}]",
		"\"processes\": [{\"pid\": 7, \"nspid\": 7, \"endpoint\": null}]",
		"\"processes\": [7]",
		"\"processes\": [], \"criu\": {\"dump_args\": [\"-t\", 7]}",
		"\"processes\": [], \"criu\": {\"dump_args\": \"-t\"}",
		"\"processes\": [], \"criu\": [\"4.2\"]",
		"\"processes\": [], \"prepared\": \"yes\"",
		"\"processes\": [], \"created\": -1",
		"\"processes\": [], \"root_pid\": 1.5",
		"\"processes\": [], \"timings_ms\": [1]",
		"\"processes\": [], \"timings_ms\": {\"prepare\": \"1\"}",
		"\"processes\": [], \"bytes\": {\"images\": -4096}",
		"\"processes\": [], \"gpus\": {\"count\": 1}",
		"\"processes\": [], \"needs\": [1]",
		"\"processes\": [], \"image_files\": \"x\"",
		"\"processes\": [], \"image_files\": {\"a\": {\"size\": 1, \"crc32c\": \"E3069283\"}}",
		"\"processes\": [], \"image_files\": {\"a/b\": {\"size\": 1, \"crc32c\": \"e3069283\"}}",
		"\"processes\": [], \"content_files\": {\"a\": {\"size\": -1, \"crc32c\": \"e3069283\"}}",
		"\"processes\": [], \"content_files\": {\"a\": {\"size\": 1}}",
		"\"processes\": [], \"control_dir_here\": 3",
	};
	struct manifest m;
	char text[512], err[512];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int n = snprintf(text, sizeof(text),
				 "{\"format\": \"cusnap-manifest\", \"version\": 1, \"control_dir\": \"/c\", %s}",
				 bad[i]);
		if (manifest_parse(text, (size_t)n, &m, err, sizeof(err)) == 0) {
			test_fail(__FILE__, __LINE__, "accepted: %s", text);
			manifest_free(&m);
		} else {
			CHECK(m.root == NULL && m.owned == NULL); /* nothing kept */
			CHECK(strstr(err, "member") != NULL);
		}
	}
}

int main(void)
{
	test_run("a manifest written as its golden text", golden_text);
	test_run("the golden text read back field by field, and written the same", read_back);
	test_run("an older cusnap's manifest: the four members it must have", older);
	test_run("members of the wrong type refused", wrong_types);
	return test_done();
}
