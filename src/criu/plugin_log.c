/* SPDX-License-Identifier: MIT */
/* What the plugin says goes where CRIU's users look: CRIU's own log (the file
 * of -o, which container engines keep: runc discards criu's stderr) as well as
 * stderr. The plugin, and the cusnap code under it, write lines to stderr; from
 * plugin_log_start on, stderr is a stream that copies each line to the real
 * stderr and to print_on_level, the logging CRIU exports to its plugins. Forked
 * helpers inherit both, so their lines arrive too. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "plugin.h"

/* CRIU's (criu-log.h): weak, so that the plugin also loads where CRIU is not. */
extern void print_on_level(unsigned int loglevel, const char *format, ...) __attribute__((weak, format(printf, 2, 3)));
enum { CRIU_LOG_ERROR = 1, CRIU_LOG_WARN = 2, CRIU_LOG_INFO = 3 };

static FILE *saved; /* stderr before plugin_log_start */
static char line[4096];
static size_t used;

/* A progress line ("cusnap: STEP   12.3 ms  ...") is information; a warning a
 * warning; anything else the plugin says is a refusal or a failure. */
static unsigned level_of(const char *s)
{
	const char *ms = strstr(s, " ms");
	if (!strncmp(s, "cusnap: ", 8) && ms && ms > s + 8 && ms[-1] >= '0' && ms[-1] <= '9')
		return CRIU_LOG_INFO;
	return strstr(s, "warning") ? CRIU_LOG_WARN : CRIU_LOG_ERROR;
}

static void flush_line(void)
{
	line[used] = '\0';
	if (used)
		print_on_level(level_of(line), "%s\n", line);
	used = 0;
}

static ssize_t tee_write(void *cookie, const char *buf, size_t n)
{
	(void)cookie;
	for (size_t off = 0; off < n;) {
		ssize_t w = write(STDERR_FILENO, buf + off, n - off);
		if (w <= 0)
			break; /* stderr closed: CRIU's log still gets it */
		off += (size_t)w;
	}
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\n' || used == sizeof(line) - 1)
			flush_line();
		if (buf[i] != '\n')
			line[used++] = buf[i];
	}
	return (ssize_t)n;
}

void plugin_log_start(void)
{
	if (!print_on_level || saved)
		return;
	FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = tee_write});
	if (!f)
		return;
	setvbuf(f, NULL, _IOLBF, 0);
	fflush(stderr);
	saved = stderr;
	stderr = f;
}

void plugin_log_stop(void)
{
	if (!saved)
		return;
	FILE *f = stderr;
	fflush(f);
	flush_line();
	stderr = saved;
	saved = NULL;
	fclose(f);
}
