/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/json.h"

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80                    ? 1
		     : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
		     : s[0] >= 0xe0 && s[0] <= 0xef ? 3
		     : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
						    : 0;
	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* Overlong three- and four-byte forms, surrogates, past U+10FFFF. */
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) || (s[0] == 0xf0 && s[1] < 0x90) ||
	    (s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return len;
}

json_t *json_text(const char *s)
{
	if (!s)
		return json_null();
	size_t n = strlen(s);
	const unsigned char *u = (const unsigned char *)s;
	size_t bad = 0;
	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq(u + i, n - i);
		bad += !len;
		i += len ? len : 1;
	}
	if (!bad)
		return json_stringn(s, n);
	char *fixed = malloc(n + 2 * bad + 1), *o = fixed;
	if (!fixed)
		return NULL;
	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq(u + i, n - i);
		if (len) {
			memcpy(o, u + i, len);
			o += len;
			i += len;
		} else {
			memcpy(o, "\xef\xbf\xbd", 3); /* U+FFFD */
			o += 3;
			i++;
		}
	}
	json_t *j = json_stringn(fixed, (size_t)(o - fixed));
	free(fixed);
	return j;
}

json_t *json_id(const struct cusnap_id *id)
{
	char hex[ID_HEX_LEN + 1];
	id_hex(id, hex);
	return json_string(hex);
}

int json_emit(FILE *f, json_t *v)
{
	if (!v)
		return -1;
	int rc = json_dumpf(v, f, JSON_COMPACT | JSON_REAL_PRECISION(7));
	json_decref(v);
	if (rc == 0 && fputc('\n', f) == EOF)
		rc = -1;
	return rc;
}

json_t *json_read_file(const char *path, size_t max, char *err, size_t errlen)
{
	return json_read_at(AT_FDCWD, path, path, max, err, errlen);
}

json_t *json_read_at(int dfd, const char *name, const char *shown, size_t max, char *err, size_t errlen)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
	if (!f) {
		snprintf(err, errlen, "%s: %s", shown, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	char *buf = malloc(max + 1);
	size_t len = buf ? fread(buf, 1, max + 1, f) : 0;
	fclose(f);
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory", shown);
		return NULL;
	}
	json_t *j = NULL;
	if (len > max) {
		snprintf(err, errlen, "%s: larger than %zu bytes", shown, max);
	} else {
		json_error_t je;
		j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
		if (!j)
			snprintf(err, errlen, "%s: not valid JSON: %s at line %d, column %d", shown, je.text, je.line,
				 je.column);
	}
	free(buf);
	return j;
}

const char *json_member_string(const json_t *o, const char *key)
{
	const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
	return json_is_string(v) ? json_string_value(v) : NULL;
}

const char *json_member_text(const json_t *o, const char *key)
{
	const char *s = json_member_string(o, key);
	return s ? s : "";
}

double json_member_number(const json_t *o, const char *key, double def)
{
	const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
	return json_is_number(v) ? json_number_value(v) : def;
}

bool json_member_bool(const json_t *o, const char *key, bool def)
{
	const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
	return json_is_boolean(v) ? json_is_true(v) : def;
}
