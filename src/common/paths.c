/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

bool path_plain_absolute(const char *p)
{
	if (p[0] != '/')
		return false;
	for (const char *c = p; *c; c = strchr(c, '/') ? strchr(c, '/') : c + strlen(c)) {
		while (*c == '/')
			c++;
		size_t n = strcspn(c, "/");
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += n;
	}
	return true;
}

bool path_search(const char *list, const char *name, int mode, char *out, size_t len)
{
	for (const char *p = list ? list : ""; *p;) {
		size_t l = strcspn(p, ":");
		if (l && (size_t)snprintf(out, len, "%.*s/%s", (int)l, p, name) < len && access(out, mode) == 0)
			return true;
		p += l + (p[l] == ':');
	}
	return false;
}
