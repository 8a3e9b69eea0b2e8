/* SPDX-License-Identifier: MIT */
/* cusnap run: start a program under the CUDA VMM interposer's launcher. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap.h"

int cmd_run(const struct args *a)
{
	int argc = a->argc;
	char **argv = a->argv;
	if (argc < 1)
		return fail(EX_USAGE, "run: PROGRAM missing (cusnap run [--control-dir DIR] -- PROGRAM [ARG...])");
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	if (!path_self_dir(self, sizeof(self)))
		return fail(EX_UNAVAILABLE, "cannot find cusnap's own directory");
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", self);
	if (access(launcher, X_OK) != 0)
		snprintf(launcher, sizeof(launcher), "/usr/local/bin/snapshot-cuda-vmm-launch");
	if (getenv("CUSNAP_CONTROL_DIR_SET"))
		setenv("SNAPSHOT_CONTROL_DIR", settings.control_dir, 1);
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return fail(EX_LEFT_RUNNING, "out of memory");
	args[0] = launcher;
	for (int i = 0; i < argc; i++)
		args[i + 1] = argv[i];
	execv(launcher, args);
	return fail(EX_UNAVAILABLE, "cannot run %s: %s (run 'make' or 'make install')", launcher, strerror(errno));
}
