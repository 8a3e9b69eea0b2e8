/* SPDX-License-Identifier: MIT */
/* libFuzzer target: reading manifest.json (jansson, then cusnap's typed fields and lookups). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cusnap/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct manifest m;
	if (manifest_parse((const char *)data, size, &m, err, sizeof(err)) == 0) {
		manifest_dump_arg(&m, "--shell-job");
		manifest_dump_arg_value(&m, "--network-lock");
		/* Every field read, as restore and inspect read them (ASan sees a bad pointer). */
		size_t n = strlen(m.checkpoint_id) + strlen(m.hostname) + strlen(m.content) + strlen(m.criu_version) +
			   strlen(m.control_dir_here);
		for (size_t i = 0; i < m.nprocs; i++)
			n += strlen(m.procs[i].endpoint) + (size_t)(m.procs[i].nspid > 0);
		for (size_t i = 0; i < m.ndump_args; i++)
			n += strlen(m.dump_args[i]);
		(void)n;
		manifest_free(&m);
	}
	return 0;
}
