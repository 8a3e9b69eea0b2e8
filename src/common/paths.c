/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/paths.h"

int path_mkdirs(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(buf, 0700) < 0 && errno != EEXIST ? -errno : 0;
}

bool path_self_dir(char *out, size_t len)
{
	ssize_t n = len > 1 ? readlink("/proc/self/exe", out, len - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	char *slash = strrchr(out, '/');
	if (n <= 0 || !slash)
		return false;
	*slash = '\0';
	return true;
}
