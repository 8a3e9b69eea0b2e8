/* SPDX-License-Identifier: MIT */
/* Paths the tools and the shim make or find on their own. */
#ifndef CUSNAP_PATHS_H
#define CUSNAP_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* mkdir -p: every missing directory of path is made with mode 0700.
 * Returns 0 or -errno. */
int path_mkdirs(const char *path);
/* The directory of the running executable into out. False when it cannot be read. */
bool path_self_dir(char *out, size_t len);
/* An absolute path with no "." or ".." component: what a path read from a
 * checkpoint (input) must be before cusnap acts in that directory. */
bool path_plain_absolute(const char *p);
/* name in the first directory of list (colon-separated, as PATH) where
 * access(mode) allows it: true with its path in out. */
bool path_search(const char *list, const char *name, int mode, char *out, size_t len);
#endif
