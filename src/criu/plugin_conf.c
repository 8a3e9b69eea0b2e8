/* SPDX-License-Identifier: MIT */
/* The plugin's settings where CRIU really runs (DESIGN.md §9). Container
 * engines start `criu swrk` with PATH alone in its environment, so the plugin
 * reads a file: $CUSNAP_PLUGIN_CONFIG where the environment reaches, else
 * cusnap.conf beside the plugin (the libdir that CRIU's own configuration
 * names), else /etc/cusnap/criu-plugin.conf. Lines of "key = value", '#' starts
 * a comment; the keys are the rows of src/node/settings.def (cusnap --help
 * lists them), for example:
 *
 *   content = host | native     how shared memory is saved
 *   timeout_ms = 30000          per participant and step
 *   libcuda = /usr/lib/x86_64-linux-gnu/libcuda.so.1
 *   device_map = auto | 0=1,1=0 | GPU-...=GPU-...   at restore (devmap.c);
 *                also spelt cuda.device-map, as CRIU's plugin option will be
 *   group = tp16, members = 2 (or node-a,node-b), member = node-a,
 *   etcd = https://etcd:2379, etcd-cacert = ..., group-timeout = 60000
 *                this dump or restore as one member of a group (group.h)
 *
 * The rows' environment variables (CUSNAP_CONTENT, ...) override it where
 * they reach. CRIU runs as root and the file steers it, so it is hostile
 * input: a regular file owned by root (or by CRIU's user), writable
 * by no one else, on a path only they can change, opened without following a
 * symlink, 64 KiB at most; a line that is not understood refuses the whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/request.h"
#include "cusnap/rundir.h"
#include "plugin.h"

#define CONF_MAX (64 * 1024)

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	char *end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		*--end = '\0';
	return s;
}

int plugin_conf_parse(struct plugin_conf *c, const char *name, const char *text, char *why, size_t len)
{
	char *copy = strdup(text), err[512];
	if (!copy)
		return snprintf(why, len, "%s: out of memory", name), -1;
	int lineno = 0, rc = 0;
	/* Each setting once: a repeated one is refused (which would win is a guess). */
	struct {
		const struct setting *row;
		int line;
	} seen[64];
	size_t nseen = 0;
	for (char *line = copy, *next; line && rc == 0; line = next) {
		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(why, len, "%s: line %d: \"%s\" is not key = value", name, lineno, s);
			rc = -1;
			break;
		}
		*eq = '\0';
		const char *key = trim(s), *value = trim(eq + 1);
		const struct setting *row = setting_by_key(key);
		int first = 0;
		for (size_t k = 0; k < nseen; k++)
			if (seen[k].row == row)
				first = seen[k].line;
		if (!row) {
			snprintf(why, len,
				 "%s: line %d: unknown setting \"%s\" (cusnap --help lists the plugin's keys)", name,
				 lineno, key);
			rc = -1;
		} else if (first) {
			snprintf(why, len, "%s: line %d: %s is set again (first on line %d)", name, lineno, key, first);
			rc = -1;
		} else if (setting_set(&c->s, row, value, err, sizeof(err)) < 0) {
			snprintf(why, len, "%s: line %d: %s = %s: %s", name, lineno, key, value, err);
			rc = -1;
		} else if (nseen < sizeof(seen) / sizeof(seen[0])) {
			seen[nseen].row = row;
			seen[nseen++].line = lineno;
		}
	}
	free(copy);
	return rc;
}

/* The file at path, checked as the header says, into text (NUL-ended, freed by
 * the caller): 1, 0 when there is none, -1 with why. */
static int conf_read(const char *path, char **text, char *why, size_t len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0)
		return snprintf(why, len, "%s: %s", path, strerror(errno)), -1;
	struct stat st;
	char trust[PATH_MAX + 160];
	int rc = -1;
	if (fstat(fd, &st) < 0)
		snprintf(why, len, "%s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) ||
		 (st.st_mode & (S_IWGRP | S_IWOTH)))
		snprintf(why, len,
			 "%s must be a regular file owned by root and writable by no one else (it steers CRIU)", path);
	else if (path_ancestors_trusted(path, trust, sizeof(trust)) < 0)
		snprintf(why, len, "%s: %s", path, trust);
	else if (st.st_size > CONF_MAX)
		snprintf(why, len, "%s: larger than %d bytes", path, CONF_MAX);
	else if (!(*text = calloc(1, (size_t)st.st_size + 1)))
		snprintf(why, len, "%s: out of memory", path);
	else {
		ssize_t n = read(fd, *text, (size_t)st.st_size);
		if (n == st.st_size && !memchr(*text, '\0', (size_t)n))
			rc = 1;
		else
			snprintf(why, len, "%s: %s", path, n < 0 ? strerror(errno) : "short read or a NUL byte");
	}
	close(fd);
	if (rc < 0) {
		free(*text);
		*text = NULL;
	}
	return rc;
}

int plugin_conf_load(struct plugin_conf *c, const char *own_dir, char *why, size_t len)
{
	*c = (struct plugin_conf){.s = settings_default()};
	char beside[PATH_MAX + 32];
	snprintf(beside, sizeof(beside), "%s/" PLUGIN_CONF_BESIDE, own_dir ? own_dir : "");
	const char *named = getenv("CUSNAP_PLUGIN_CONFIG");
	const char *paths[] = {named && *named ? named : NULL, own_dir ? beside : NULL, PLUGIN_CONF_SYSTEM};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (!paths[i])
			continue;
		char *text = NULL;
		int got = conf_read(paths[i], &text, why, len);
		if (got < 0 || (got == 0 && i == 0)) {
			if (got == 0)
				snprintf(why, len, "CUSNAP_PLUGIN_CONFIG=%s: no such file", paths[i]);
			return -1;
		}
		if (got == 0)
			continue;
		snprintf(c->path, sizeof(c->path), "%s", paths[i]);
		int rc = plugin_conf_parse(c, paths[i], text, why, len);
		free(text);
		if (rc < 0) {
			*c = (struct plugin_conf){.s = settings_default()};
			return -1;
		}
		break;
	}
	/* The environment over the file, where it reaches. */
	return settings_environment(&c->s, environ, why, len);
}
