/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cusnap/log.h"

static const char *log_tag = "cusnap";
static int log_min = LOG_WARN;
static int log_fd = STDERR_FILENO;

void log_init(const char *tag, int level, int fd)
{
	log_tag = tag;
	log_min = level;
	log_fd = fd;
}

int log_level(void)
{
	return log_min;
}

void log_msg(int level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warning", "info", "debug"};
	char line[2048];
	int n = snprintf(line, sizeof(line), "%s[%d:%ld]: %s: ", log_tag, getpid(), (long)syscall(SYS_gettid),
			 names[level < 0   ? 0
			       : level > 3 ? 3
					   : level]);
	if (n < 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(log_fd, line, len);
	(void)w;
}
