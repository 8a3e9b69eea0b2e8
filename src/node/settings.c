/* SPDX-License-Identifier: MIT */
/* The node library's settings, from the rows of settings.def (DESIGN.md §9):
 * each row's defaults, its parser with its bounds, its spellings and its help.
 * The library reads no environment itself: a caller hands it the one it means. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "cusnap/request.h"

enum kind { MS, COUNT, BYTES, FLAG, CONTENT, PATH, DEVMAP, TEXT };

struct setting {
	const char *field;
	enum kind kind;
	long long min, max, def;
	const char *option, *key, *alias, *env, *help;
	size_t offset, size;
};

static const struct setting rows[] = {
#define SETTING(f, k, lo, hi, d, o, ky, al, e, h) \
	{#f, k, lo, hi, d, o, ky, al, e, h, offsetof(struct settings, f), sizeof(((struct settings *)0)->f)},
#include "settings.def"
#undef SETTING
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

struct settings settings_default(void)
{
	struct settings s = {0};
	for (size_t i = 0; i < NROWS; i++) {
		char *at = (char *)&s + rows[i].offset;
		switch (rows[i].kind) {
		case MS:
		case COUNT: *(int *)at = (int)rows[i].def; break;
		case BYTES: *(long long *)at = rows[i].def; break;
		case FLAG: *(bool *)at = rows[i].def != 0; break;
		case CONTENT: *(enum proto_content *)at = (enum proto_content)rows[i].def; break;
		case PATH:
		case DEVMAP:
		case TEXT: break; /* "" */
		}
	}
	return s;
}

const struct setting *setting_by_option(const char *option)
{
	for (size_t i = 0; i < NROWS; i++)
		if (rows[i].option && !strcmp(rows[i].option, option))
			return &rows[i];
	return NULL;
}

const char *settings_option_at(size_t i, bool *flag)
{
	if (i >= NROWS)
		return NULL;
	*flag = rows[i].kind == FLAG;
	return rows[i].option ? rows[i].option : "";
}

const struct setting *setting_by_key(const char *key)
{
	for (size_t i = 0; i < NROWS; i++)
		if ((rows[i].key && !strcmp(rows[i].key, key)) || (rows[i].alias && !strcmp(rows[i].alias, key)))
			return &rows[i];
	return NULL;
}

bool setting_is_flag(const struct setting *d)
{
	return d->kind == FLAG;
}

bool setting_is_path(const struct setting *d)
{
	return d->kind == PATH;
}

/* A whole number from d's min to max (K, M, G suffixes for BYTES) into *out. */
static bool whole(const struct setting *d, const char *value, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(value, &end, 10);
	int shift = 0;
	if (d->kind == BYTES && end != value)
		shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	end += shift != 0;
	if (end == value || *end || errno || v < 0 || v > LLONG_MAX >> shift)
		return false;
	*out = v << shift;
	return *out >= d->min && *out <= d->max;
}

int setting_set(struct settings *s, const struct setting *d, const char *value, char *why, size_t len)
{
	char *at = (char *)s + d->offset;
	long long v = 0;
	switch (d->kind) {
	case MS:
	case COUNT:
	case BYTES:
		if (!whole(d, value, &v))
			return snprintf(why, len, "use %s, %lld to %lld",
					d->kind == MS      ? "milliseconds"
					: d->kind == BYTES ? "bytes (K, M, G suffixes)"
							   : "a whole number",
					d->min, d->max),
			       -1;
		if (d->kind == BYTES)
			*(long long *)at = v;
		else
			*(int *)at = (int)v;
		return 0;
	case FLAG:
		if (!strcmp(value, "1") || !strcmp(value, "yes") || !strcmp(value, "true"))
			*(bool *)at = true;
		else if (!strcmp(value, "0") || !strcmp(value, "no") || !strcmp(value, "false"))
			*(bool *)at = false;
		else
			return snprintf(why, len, "use yes or no"), -1;
		return 0;
	case CONTENT:
		if (!(*(enum proto_content *)at = proto_content_parse(value)))
			return snprintf(why, len, "use host, file or native"), -1;
		return 0;
	case PATH:
		if (value[0] != '/' || strlen(value) >= d->size)
			return snprintf(why, len, "use an absolute path"), -1;
		break;
	case TEXT: /* (a name, a list, URLs: each user checks its own) */
		if (!*value || strlen(value) >= d->size || strpbrk(value, " \t\r\n"))
			return snprintf(why, len, "use one word of at most %zu characters", d->size - 1), -1;
		break;
	case DEVMAP: {
		bool pairs = strspn(value, "GPUgpu0123456789abcdefABCDEF-=,") == strlen(value) && strchr(value, '=');
		if (strlen(value) >= d->size || (strcmp(value, "auto") && !pairs))
			return snprintf(why, len, "use auto, or OLD=NEW pairs of GPU ordinals or UUIDs"), -1;
		break;
	}
	}
	memcpy(at, value, strlen(value) + 1);
	return 0;
}

int settings_environment(struct settings *s, char *const *env, char *why, size_t len)
{
	char err[256];
	for (size_t i = 0; env && i < NROWS; i++) {
		size_t n = rows[i].env ? strlen(rows[i].env) : 0;
		for (char *const *e = env; n && *e; e++) {
			const char *value = *e + n + 1;
			if (strncmp(*e, rows[i].env, n) || (*e)[n] != '=' || !*value)
				continue;
			if (setting_set(s, &rows[i], value, err, sizeof(err)) < 0)
				return snprintf(why, len, "%s=%s: %s", rows[i].env, value, err), -1;
		}
	}
	return 0;
}

void settings_help(FILE *out)
{
	static const char *const what[] = {[MS] = "MS",
					   [COUNT] = "N",
					   [BYTES] = "BYTES",
					   [FLAG] = "",
					   [CONTENT] = "host|file|native",
					   [PATH] = "PATH",
					   [DEVMAP] = "auto|OLD=NEW,...",
					   [TEXT] = "TEXT"};
	for (size_t i = 0; i < NROWS; i++) {
		const struct setting *d = &rows[i];
		fprintf(out, "  %s", d->field);
		if (d->option)
			fprintf(out, "  --%s%s%s", d->option, *what[d->kind] ? " " : "", what[d->kind]);
		if (d->key)
			fprintf(out, "  plugin: %s%s%s%s = %s", d->key, d->alias ? " (or " : "",
				d->alias ? d->alias : "", d->alias ? ")" : "",
				d->kind == FLAG ? "yes|no" : what[d->kind]);
		if (d->env)
			fprintf(out, "  env: %s", d->env);
		if (d->kind == MS || d->kind == COUNT || d->kind == BYTES)
			fprintf(out, "  (%lld to %lld; default %lld)", d->min, d->max, d->def);
		/* The help line wrapped at 88 columns, under the row. */
		size_t col = 88;
		for (const char *w = d->help; *w;) {
			size_t n = strcspn(w, " ");
			if (col + 1 + n > 88) {
				fputs("\n     ", out);
				col = 5;
			}
			fprintf(out, " %.*s", (int)n, w);
			col += 1 + n;
			w += n + (w[n] == ' ');
		}
		fputc('\n', out);
	}
}
