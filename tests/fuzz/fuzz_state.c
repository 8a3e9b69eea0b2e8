/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the state file reader. */
#include <stddef.h>
#include <stdint.h>

#include "cusnap/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct state s;
	char err[512];
	if (state_decode(data, size, &s, err, sizeof(err)) == 0)
		state_free(&s);
	return 0;
}
