/* SPDX-License-Identifier: MIT */
/* Logging for code that lives inside other people's processes: one write(2) per
 * line to a descriptor fixed at init, prefixed with a tag, pid and tid. Silent
 * unless the level allows it. */
#ifndef CUSNAP_LOG_H
#define CUSNAP_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Set the tag, the minimum level that is written, and the descriptor. */
void log_init(const char *tag, int level, int fd);
int log_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_AT(level, ...)                             \
	do {                                           \
		if ((level) <= log_level())            \
			log_msg((level), __VA_ARGS__); \
	} while (0)

#endif
