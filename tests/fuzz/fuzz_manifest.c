/* SPDX-License-Identifier: MIT */
/* libFuzzer target: reading manifest.json (jansson, then cusnap's checks and lookups). */
#include <stddef.h>
#include <stdint.h>

#include "cusnap/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct manifest m;
	if (manifest_parse((const char *)data, size, &m, err, sizeof(err)) == 0) {
		manifest_dump_arg(&m, "--shell-job");
		for (size_t i = 0; i < json_array_size(m.procs); i++) {
			const json_t *p = json_array_get(m.procs, i);
			json_member_number(p, "nspid", -1);
			json_member_bool(p, "cuda", false);
			json_member_string(p, "endpoint");
		}
		json_member_string(json_object_get(m.root, "criu"), "version");
		manifest_free(&m);
	}
	return 0;
}
