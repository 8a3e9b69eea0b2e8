/* SPDX-License-Identifier: MIT */
/* What the plugin says goes where CRIU's users look: CRIU's own log (the file
 * of -o, which container engines keep: runc discards criu's stderr) as well as
 * stderr, each line with its level. The plugin's own lines begin
 * "cusnap-plugin: "; the node library's, in the voice the plugin gives it
 * (voice_set), "cusnap: ". Forked helpers inherit the voice, so their lines
 * arrive too. */
#include <stdarg.h>
#include <stdio.h>

#include "plugin.h"

/* CRIU's (criu-log.h): weak, so that the plugin also loads where CRIU is not. */
extern void print_on_level(unsigned int loglevel, const char *format, ...) __attribute__((weak, format(printf, 2, 3)));

/* CRIU's numbering of a level (criu-log.h: LOG_ERROR 1, LOG_WARN 2, LOG_INFO 3). */
static unsigned criu_level(enum voice_level level)
{
	return level == VOICE_ERROR ? 1u : level == VOICE_WARN ? 2u : 3u;
}

/* One whole line, to stderr and CRIU's log at its level. */
static void both(enum voice_level level, const char *line)
{
	fprintf(stderr, "%s\n", line);
	if (print_on_level)
		print_on_level(criu_level(level), "%s\n", line);
}

void plugin_say(enum voice_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	voice_v("cusnap-plugin: ", level, fmt, ap); /* (through both once the log is started) */
	va_end(ap);
}

void plugin_log_start(void)
{
	voice_set(both, "cusnap: ");
}

void plugin_log_stop(void)
{
	voice_set(NULL, NULL);
}
