/* SPDX-License-Identifier: MIT */
/* snapshot-cuda-vmm-launch PROGRAM [ARG...]: run PROGRAM with the shim first in
 * LD_PRELOAD (DESIGN.md §2, §3).
 *
 * The shim is, in order: $SNAPSHOT_CUDA_VMM_LIBRARY; next to this launcher in the
 * build tree (../lib/libsnapshot_cuda_vmm.so) or an install tree
 * (../lib/snapshot/libsnapshot_cuda_vmm.so); /usr/local/lib/snapshot/. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/control.h"
#include "cusnap/exitcodes.h"
#include "cusnap/paths.h"

#define SHIM_NAME "libsnapshot_cuda_vmm.so"

static void usage(FILE *f)
{
	fprintf(f, "usage: snapshot-cuda-vmm-launch PROGRAM [ARG...]\n"
		   "Runs PROGRAM with the CUDA VMM snapshot interposer (" SHIM_NAME ") preloaded.\n"
		   "The library is taken from $SNAPSHOT_CUDA_VMM_LIBRARY, from beside this launcher\n"
		   "(../lib/ or ../lib/snapshot/), or from /usr/local/lib/snapshot/.\n"
		   "Exit status: PROGRAM's; 64 usage; 69 library missing; 126/127 PROGRAM not executable/found.\n");
}

static int usable(const char *path)
{
	return path[0] == '/' && access(path, R_OK) == 0;
}

static int find_library(char *out, size_t len)
{
	const char *env = getenv("SNAPSHOT_CUDA_VMM_LIBRARY");
	if (env && *env) {
		char abs[PATH_MAX];
		if (!realpath(env, abs)) {
			fprintf(stderr, "snapshot-cuda-vmm-launch: SNAPSHOT_CUDA_VMM_LIBRARY=%s: %s\n", env,
				strerror(errno));
			return -1;
		}
		snprintf(out, len, "%s", abs);
		return 0;
	}
	char self[PATH_MAX];
	if (path_self_dir(self, sizeof(self))) {
		static const char *const rel[] = {"/../lib/" SHIM_NAME, "/../lib/snapshot/" SHIM_NAME};
		for (size_t i = 0; i < 2; i++) {
			char cand[PATH_MAX + 64], abs[PATH_MAX];
			snprintf(cand, sizeof(cand), "%s%s", self, rel[i]);
			if (realpath(cand, abs) && usable(abs)) {
				snprintf(out, len, "%s", abs);
				return 0;
			}
		}
	}
	const char *installed = "/usr/local/lib/snapshot/" SHIM_NAME;
	if (usable(installed)) {
		snprintf(out, len, "%s", installed);
		return 0;
	}
	fprintf(stderr,
		"snapshot-cuda-vmm-launch: %s not found beside the launcher or in /usr/local/lib/snapshot; "
		"set SNAPSHOT_CUDA_VMM_LIBRARY or run 'make install'\n",
		SHIM_NAME);
	return -1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	char lib[PATH_MAX];
	if (find_library(lib, sizeof(lib)) < 0)
		return EX_UNAVAILABLE;
	/* Prepend, and drop other copies of the shim so that it is loaded once. */
	const char *old = getenv("LD_PRELOAD");
	size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
	char *preload = malloc(cap);
	char *rest = old ? strdup(old) : NULL;
	if (!preload || (old && !rest)) {
		fprintf(stderr, "snapshot-cuda-vmm-launch: out of memory\n");
		return EX_UNAVAILABLE;
	}
	snprintf(preload, cap, "%s", lib);
	for (char *save = NULL, *tok = rest ? strtok_r(rest, " :", &save) : NULL; tok;
	     tok = strtok_r(NULL, " :", &save)) {
		const char *base = strrchr(tok, '/');
		if (strcmp(base ? base + 1 : tok, SHIM_NAME) == 0)
			continue;
		strcat(preload, ":");
		strcat(preload, tok);
	}
	free(rest);
	setenv("LD_PRELOAD", preload, 1);
	free(preload);
	/* The agent's marker (its launcher's contract): a process that carries it
	 * but has no endpoint is interposed and broken, never "not interposed". */
	setenv(INTERPOSE_MARKER, "1", 1);
	execvp(argv[1], argv + 1);
	int e = errno;
	fprintf(stderr, "snapshot-cuda-vmm-launch: %s: %s\n", argv[1], strerror(e));
	return e == ENOENT ? 127 : 126;
}
