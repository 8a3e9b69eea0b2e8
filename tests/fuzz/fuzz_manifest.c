/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the JSON reader behind manifest.json. */
#include <stddef.h>
#include <stdint.h>

#include "cusnap/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];
	struct json *j = json_parse((const char *)data, size, err, sizeof(err));
	if (j) {
		json_get_string(j, "format");
		json_get_number(j, "version", 0);
		json_get_bool(json_get(j, "criu"), "x", false);
		json_free(j);
	}
	return 0;
}
