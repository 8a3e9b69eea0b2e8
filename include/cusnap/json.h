/* SPDX-License-Identifier: MIT */
/* A small JSON reader for the files cusnap writes itself (manifest.json):
 * objects, arrays, strings (\" \\ \/ \b \f \n \r \t \uXXXX for ASCII),
 * numbers, true, false, null. Depth and size are bounded. */
#ifndef CUSNAP_JSON_H
#define CUSNAP_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
	enum json_type type;
	bool boolean;
	double number;
	char *string;       /* JSON_STRING */
	char *key;          /* when a member of an object */
	struct json *child; /* first element or member */
	struct json *next;  /* next sibling */
};

/* Parse text (len bytes). Returns the root, or NULL with err saying where. */
struct json *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(struct json *j);
/* Write s as a JSON string literal (quoted; quote, backslash and every control
 * character escaped, bytes >= 0x80 passed through): the one writer of strings
 * for every JSON output. */
void json_write_string(FILE *f, const char *s);
/* Member key of object o, or NULL. */
const struct json *json_get(const struct json *o, const char *key);
/* Typed member access: NULL / def when absent or of another type. */
const char *json_get_string(const struct json *o, const char *key);
double json_get_number(const struct json *o, const char *key, double def);
bool json_get_bool(const struct json *o, const char *key, bool def);

#endif
