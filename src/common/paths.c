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

/* FIELD's first value on its line of PROC/PID/status, or its last (innermost). */
static long status_value(const char *proc, pid_t pid, const char *field, bool innermost)
{
	char path[PATH_MAX], line[512];
	snprintf(path, sizeof(path), "%s/%d/status", proc, (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long v = -1;
	size_t len = strlen(field);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, len) == 0 && line[len] == ':') {
			char *at = innermost ? strrchr(line + len + 1, '\t') : NULL;
			v = atol(at ? at : line + len + 1);
			break;
		}
	fclose(f);
	return v;
}

long proc_status_field(const char *proc, pid_t pid, const char *field)
{
	return status_value(proc, pid, field, false);
}

long proc_status_inner(const char *proc, pid_t pid, const char *field)
{
	return status_value(proc, pid, field, true);
}

bool proc_environ_get(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char *buf = malloc(1 << 16);
	ssize_t n = buf ? read(fd, buf, (1 << 16) - 1) : -1;
	close(fd);
	if (n > 0)
		buf[n] = '\0'; /* the last entry ends even when the read was cut short */
	size_t nlen = strlen(name);
	bool found = false;
	for (const char *e = buf; n > 0 && !found && e < buf + n; e += strlen(e) + 1) {
		if (!strncmp(e, name, nlen) && e[nlen] == '=') {
			snprintf(out, len, "%s", e + nlen + 1);
			found = true;
		}
	}
	free(buf);
	return found;
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

void proc_comm(pid_t pid, char *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	snprintf(out, len, "?");
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = '\0';
	else
		snprintf(out, len, "?");
	fclose(f);
}
