/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/json.h"

#define MAX_DEPTH 32

struct parser {
	const char *p, *end, *begin;
	char *err;
	size_t errlen;
	int failed;
};

static void fail(struct parser *ps, const char *what)
{
	if (!ps->failed)
		snprintf(ps->err, ps->errlen, "%s at byte %zu", what, (size_t)(ps->p - ps->begin));
	ps->failed = 1;
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
		ps->p++;
}

static char *parse_string(struct parser *ps)
{
	if (ps->p >= ps->end || *ps->p != '"') {
		fail(ps, "expected a string");
		return NULL;
	}
	ps->p++;
	size_t cap = 16, n = 0;
	char *s = malloc(cap);
	while (s && ps->p < ps->end && *ps->p != '"') {
		char c = *ps->p++;
		if ((unsigned char)c < 0x20) {
			fail(ps, "control character in a string");
			break;
		}
		if (c == '\\') {
			if (ps->p >= ps->end)
				break;
			char e = *ps->p++;
			switch (e) {
			case '"':
			case '\\':
			case '/': c = e; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					char h = ps->p < ps->end ? *ps->p++ : 0;
					int d = h >= '0' && h <= '9'   ? h - '0'
						: h >= 'a' && h <= 'f' ? h - 'a' + 10
						: h >= 'A' && h <= 'F' ? h - 'A' + 10
								       : -1;
					if (d < 0) {
						fail(ps, "bad \\u escape");
						free(s);
						return NULL;
					}
					v = v * 16 + (unsigned)d;
				}
				if (v == 0 || v > 0x7f) {
					fail(ps, "only ASCII \\u escapes are accepted");
					free(s);
					return NULL;
				}
				c = (char)v;
				break;
			}
			default:
				fail(ps, "bad escape");
				free(s);
				return NULL;
			}
		}
		if (n + 1 >= cap) {
			cap *= 2;
			char *g = realloc(s, cap);
			if (!g) {
				free(s);
				s = NULL;
				break;
			}
			s = g;
		}
		s[n++] = c;
	}
	if (!s || ps->failed || ps->p >= ps->end) {
		fail(ps, s ? "unterminated string" : "out of memory");
		free(s);
		return NULL;
	}
	ps->p++;
	s[n] = '\0';
	return s;
}

static struct json *parse_value(struct parser *ps, int depth);

static struct json *parse_container(struct parser *ps, int depth, bool object)
{
	struct json *j = calloc(1, sizeof(*j));
	if (!j) {
		fail(ps, "out of memory");
		return NULL;
	}
	j->type = object ? JSON_OBJECT : JSON_ARRAY;
	ps->p++;
	skip_ws(ps);
	struct json **tail = &j->child;
	if (ps->p < ps->end && *ps->p == (object ? '}' : ']')) {
		ps->p++;
		return j;
	}
	for (;;) {
		char *key = NULL;
		skip_ws(ps);
		if (object) {
			key = parse_string(ps);
			skip_ws(ps);
			if (!key || ps->p >= ps->end || *ps->p != ':') {
				free(key);
				fail(ps, "expected \"key\":");
				break;
			}
			ps->p++;
		}
		struct json *v = parse_value(ps, depth + 1);
		if (!v) {
			free(key);
			break;
		}
		v->key = key;
		*tail = v;
		tail = &v->next;
		skip_ws(ps);
		if (ps->p < ps->end && *ps->p == ',') {
			ps->p++;
			continue;
		}
		if (ps->p < ps->end && *ps->p == (object ? '}' : ']')) {
			ps->p++;
			return j;
		}
		fail(ps, object ? "expected , or }" : "expected , or ]");
		break;
	}
	json_free(j);
	return NULL;
}

static struct json *parse_value(struct parser *ps, int depth)
{
	skip_ws(ps);
	if (depth > MAX_DEPTH) {
		fail(ps, "nested too deeply");
		return NULL;
	}
	if (ps->p >= ps->end) {
		fail(ps, "unexpected end");
		return NULL;
	}
	char c = *ps->p;
	if (c == '{' || c == '[')
		return parse_container(ps, depth, c == '{');
	struct json *j = calloc(1, sizeof(*j));
	if (!j) {
		fail(ps, "out of memory");
		return NULL;
	}
	size_t left = (size_t)(ps->end - ps->p);
	if (c == '"') {
		j->type = JSON_STRING;
		j->string = parse_string(ps);
		if (!j->string) {
			free(j);
			return NULL;
		}
	} else if (left >= 4 && !memcmp(ps->p, "true", 4)) {
		j->type = JSON_BOOL, j->boolean = true, ps->p += 4;
	} else if (left >= 5 && !memcmp(ps->p, "false", 5)) {
		j->type = JSON_BOOL, ps->p += 5;
	} else if (left >= 4 && !memcmp(ps->p, "null", 4)) {
		j->type = JSON_NULL, ps->p += 4;
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		char buf[64];
		size_t n = 0;
		while (ps->p < ps->end && n < sizeof(buf) - 1 && strchr("+-0123456789.eE", *ps->p))
			buf[n++] = *ps->p++;
		buf[n] = '\0';
		char *end;
		j->type = JSON_NUMBER;
		j->number = strtod(buf, &end);
		if (*end || n == 0) {
			fail(ps, "bad number");
			free(j);
			return NULL;
		}
	} else {
		fail(ps, "unexpected character");
		free(j);
		return NULL;
	}
	return j;
}

struct json *json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct parser ps = {text, text + len, text, err, errlen, 0};
	struct json *j = parse_value(&ps, 0);
	if (j) {
		skip_ws(&ps);
		if (ps.p != ps.end) {
			fail(&ps, "trailing characters");
			json_free(j);
			j = NULL;
		}
	}
	return j;
}

void json_free(struct json *j)
{
	while (j) {
		struct json *next = j->next;
		json_free(j->child);
		free(j->string);
		free(j->key);
		free(j);
		j = next;
	}
}

const struct json *json_get(const struct json *o, const char *key)
{
	if (!o || o->type != JSON_OBJECT)
		return NULL;
	for (const struct json *m = o->child; m; m = m->next)
		if (m->key && !strcmp(m->key, key))
			return m;
	return NULL;
}

const char *json_get_string(const struct json *o, const char *key)
{
	const struct json *m = json_get(o, key);
	return m && m->type == JSON_STRING ? m->string : NULL;
}

double json_get_number(const struct json *o, const char *key, double def)
{
	const struct json *m = json_get(o, key);
	return m && m->type == JSON_NUMBER ? m->number : def;
}

bool json_get_bool(const struct json *o, const char *key, bool def)
{
	const struct json *m = json_get(o, key);
	return m && m->type == JSON_BOOL ? m->boolean : def;
}

void json_write_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}
