/* SPDX-License-Identifier: MIT */
/* A stand-in for CRIU's CUDA plugin (plugins/cuda, cuda_plugin.so) with no
 * hooks: test_criu_plugin puts it beside cusnap's plugin, which must then
 * refuse the dump. */
#include "../../src/criu/criu_abi.h"

__attribute__((visibility("default"))) struct criu_plugin_desc CR_PLUGIN_DESC = {
	.name = "cuda_plugin",
	.version = CRIU_PLUGIN_VERSION_0_2,
	.max_hooks = CRIU_HOOKS_4_1,
};
