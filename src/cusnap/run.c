/* SPDX-License-Identifier: MIT */
/* cusnap run: start a program under the CUDA VMM interposer's launcher. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap.h"

/* NVIDIA's cuda-checkpoint: $CUSNAP_CUDA_CHECKPOINT ("" for none), else the first on PATH. */
static bool cuda_checkpoint_tool(char *out, size_t len)
{
	const char *given = getenv("CUSNAP_CUDA_CHECKPOINT");
	if (given) {
		snprintf(out, len, "%s", given);
		return *given && access(out, X_OK) == 0;
	}
	const char *path = getenv("PATH");
	for (const char *p = path ? path : ""; *p;) {
		size_t l = strcspn(p, ":");
		if (l && (size_t)snprintf(out, len, "%.*s/cuda-checkpoint", (int)l, p) < len && access(out, X_OK) == 0)
			return true;
		p += l + (p[l] == ':');
	}
	return false;
}

int cmd_run(const struct args *a)
{
	int argc = a->argc;
	char **argv = a->argv;
	if (argc < 1)
		return fail(EX_USAGE,
			    "run: PROGRAM missing (cusnap run [--control-dir DIR] [--launch-job] -- PROGRAM [ARG...])");
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	if (!path_self_dir(self, sizeof(self)))
		return fail(EX_UNAVAILABLE, "cannot find cusnap's own directory");
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", self);
	if (access(launcher, X_OK) != 0)
		snprintf(launcher, sizeof(launcher), "/usr/local/bin/snapshot-cuda-vmm-launch");
	if (a->control_dir_given)
		setenv("SNAPSHOT_CONTROL_DIR", a->s->control_dir, 1);
	char **args = calloc((size_t)argc + 4, sizeof(*args));
	if (!args)
		return fail(EX_LEFT_RUNNING, "out of memory");
	int n = 0;
	char tool[PATH_MAX];
	if (a->launch_job && cuda_checkpoint_tool(tool, sizeof(tool))) {
		/* NVIDIA's tool makes the job file as the driver wants it. */
		args[n++] = tool;
		args[n++] = "--launch-job";
	} else if (a->launch_job) {
		char why[256];
		if (job_launch(why, sizeof(why)) < 0) {
			free(args);
			return fail(EX_UNAVAILABLE, "run --launch-job: %s", why);
		}
	}
	args[n++] = launcher;
	for (int i = 0; i < argc; i++)
		args[n++] = argv[i];
	execv(args[0], args);
	int e = errno;
	free(args);
	return fail(EX_UNAVAILABLE, "cannot run %s: %s (run 'make' or 'make install')", launcher, strerror(e));
}
