/* SPDX-License-Identifier: MIT */
/* A stand-in for CRIU's CUDA plugin (plugins/cuda, cuda_plugin.so), as it
 * answers when enabled: its device hooks answer 0 for every process (one
 * without CUDA included), so that CRIU asks no plugin after it. Each call is
 * appended to the file $CUDA_STANDIN_LOG as "HOOK PID" (pause, checkpoint,
 * resume). CUDA_STANDIN_DISABLED=1: -ENOTSUP from every hook, as the real one
 * answers on a machine without a GPU. Its hooks are set by a constructor, as
 * CRIU's CR_PLUGIN_REGISTER_HOOK does. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/criu/criu_abi.h"

__attribute__((visibility("default"))) struct criu_plugin_desc CR_PLUGIN_DESC = {
	.name = "cuda_plugin",
	.version = CRIU_PLUGIN_VERSION_0_2,
	.max_hooks = CRIU_HOOKS_4_1,
};

static int answer(const char *hook, int pid)
{
	const char *off = getenv("CUDA_STANDIN_DISABLED"), *log = getenv("CUDA_STANDIN_LOG");
	if (off && !strcmp(off, "1"))
		return -ENOTSUP;
	if (log && *log) {
		char line[64];
		int n = snprintf(line, sizeof(line), "%s %d\n", hook, pid);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			if (write(fd, line, (size_t)n) != n)
				n = 0;
			close(fd);
		}
	}
	return 0;
}

static int pause_devices(int pid)
{
	return answer("pause", pid);
}

static int checkpoint_devices(int pid)
{
	return answer("checkpoint", pid);
}

static int resume_devices_late(int pid)
{
	return answer("resume", pid);
}

static void __attribute__((constructor)) register_hooks(void)
{
	CR_PLUGIN_DESC.hooks[CRIU_HOOK_PAUSE_DEVICES] = (void *)pause_devices;
	CR_PLUGIN_DESC.hooks[CRIU_HOOK_CHECKPOINT_DEVICES] = (void *)checkpoint_devices;
	CR_PLUGIN_DESC.hooks[CRIU_HOOK_RESUME_DEVICES_LATE] = (void *)resume_devices_late;
}
