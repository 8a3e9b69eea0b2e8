/* SPDX-License-Identifier: MIT */
/* What /proc says about a process, read in one place (proc.h): its status
 * fields, its state and parent, whether it is gone, its environment, its
 * name, its resident memory, its mappings, and this process's capabilities. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/proc.h"

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

char proc_stat(pid_t pid, pid_t *parent, unsigned long *flags)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	const char *p = strrchr(buf, ')');
	char state = 0;
	int pp = 0;
	unsigned long fl = 0;
	if (!p || sscanf(p + 1, " %c %d %*d %*d %*d %*d %lu", &state, &pp, &fl) != 3)
		return 0;
	if (parent)
		*parent = pp;
	if (flags)
		*flags = fl;
	return state;
}

char proc_state(pid_t pid, pid_t *parent)
{
	return proc_stat(pid, parent, NULL);
}

int proc_exit_status(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	const char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] != 'Z')
		return -1;
	/* Fields from the state (3) on: exit_code is field 52 (Linux 3.5 and later). */
	int field = 3;
	for (p += 2; *p && field < 52; p++)
		field += *p == ' ';
	return field == 52 && *p ? atoi(p) : -1;
}

bool proc_gone(pid_t pid)
{
	char state = proc_stat(pid, NULL, NULL);
	return state == 0 || state == 'Z' || state == 'X';
}

bool proc_is_process(const char *proc, pid_t pid)
{
	return proc_status_field(proc, pid, "Tgid") == pid;
}

uint64_t proc_resident_bytes(pid_t pid)
{
	char path[64];
	unsigned long long size, resident;
	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	FILE *f = fopen(path, "re");
	uint64_t bytes = 0;
	if (f && fscanf(f, "%llu %llu", &size, &resident) == 2)
		bytes = resident * (uint64_t)sysconf(_SC_PAGESIZE);
	if (f)
		fclose(f);
	return bytes;
}

bool proc_maps_has(pid_t pid, const char *name)
{
	char path[64], line[4400];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, name) != NULL;
	if (f)
		fclose(f);
	return found;
}

unsigned long long proc_self_capabilities(void)
{
	unsigned long long eff = 0;
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	if (f)
		fclose(f);
	return eff;
}
