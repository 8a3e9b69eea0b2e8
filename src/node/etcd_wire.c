/* SPDX-License-Identifier: MIT */
/* What cusnap sends etcd's v3 JSON gateway and reads back (etcd.h), apart
 * from how it is sent: keys and values as base64 (RFC 4648, padded), int64
 * values as decimal strings, each request's body built here and each reply's
 * parts read here. Golden bytes in tests/unit/test_etcd_wire.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/json.h"
#include "etcd.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void etcd_b64_encode(const void *data, size_t n, char *out)
{
	const unsigned char *p = data;
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
			     (i + 2 < n ? p[i + 2] : 0);
		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
}

long etcd_b64_decode(const char *text, unsigned char *out)
{
	size_t n = strlen(text), o = 0;
	if (n % 4)
		return -1;
	for (size_t i = 0; i < n; i += 4) {
		unsigned v = 0;
		int pad = 0;
		for (int k = 0; k < 4; k++) {
			const char *at = text[i + k] ? strchr(b64, text[i + k]) : NULL;
			if (text[i + k] == '=' && i + 4 == n && k >= 2) {
				pad++;
				v <<= 6;
				continue;
			}
			if (!at || pad)
				return -1;
			v = v << 6 | (unsigned)(at - b64);
		}
		out[o++] = (unsigned char)(v >> 16);
		if (pad < 2)
			out[o++] = (unsigned char)(v >> 8);
		if (pad < 1)
			out[o++] = (unsigned char)v;
	}
	return (long)o;
}

/* n bytes of s as a base64 JSON string (NULL: out of memory). */
static json_t *b64_json(const char *s, size_t n)
{
	char *text = malloc(4 * (n / 3 + 1) + 1);
	if (!text)
		return NULL;
	etcd_b64_encode(s, n, text);
	json_t *j = json_string(text);
	free(text);
	return j;
}

/* The key just past every key that starts with prefix (etcd's range_end). */
static json_t *prefix_end(const char *prefix)
{
	size_t n = strlen(prefix);
	char *end = strdup(prefix);
	if (!end || !n) {
		free(end);
		return b64_json("\0", 1);
	}
	end[n - 1]++; /* (prefixes here end in '/': never 0xff) */
	json_t *j = b64_json(end, n);
	free(end);
	return j;
}

static json_t *id_json(int64_t id)
{
	char s[24];
	snprintf(s, sizeof(s), "%lld", (long long)id);
	return json_string(s);
}

json_t *etcd_body_key(const char *key)
{
	return json_pack("{s:o}", "key", b64_json(key, strlen(key)));
}

json_t *etcd_body_range(const char *prefix)
{
	return json_pack("{s:o, s:o}", "key", b64_json(prefix, strlen(prefix)), "range_end", prefix_end(prefix));
}

json_t *etcd_body_put(const char *key, const char *value, int64_t lease)
{
	json_t *p = json_pack("{s:o, s:o}", "key", b64_json(key, strlen(key)), "value", b64_json(value, strlen(value)));
	if (p && lease)
		json_object_set_new(p, "lease", id_json(lease));
	return p;
}

json_t *etcd_body_create(const char *key, const char *value, int64_t lease)
{
	return json_pack("{s:[{s:o, s:s, s:s, s:s}], s:[{s:o}]}", "compare", "key", b64_json(key, strlen(key)),
			 "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success", "request_put",
			 etcd_body_put(key, value, lease));
}

json_t *etcd_body_grant(int ttl)
{
	return json_pack("{s:i}", "TTL", ttl);
}

json_t *etcd_body_lease(int64_t id)
{
	return json_pack("{s:o}", "ID", id_json(id));
}

json_t *etcd_body_auth(const char *user, const char *password)
{
	return json_pack("{s:s, s:s}", "name", user, "password", password);
}

int64_t etcd_int64(const json_t *o, const char *key, int64_t def)
{
	const json_t *v = json_object_get(o, key);
	if (json_is_integer(v))
		return json_integer_value(v);
	const char *s = json_string_value(v);
	return s ? strtoll(s, NULL, 10) : def;
}

int etcd_reply_decode(const char *text, struct etcd_reply *r)
{
	memset(r, 0, sizeof(*r));
	json_error_t je;
	json_t *j = text ? json_loads(text, JSON_DISABLE_EOF_CHECK, &je) : NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		return -1;
	}
	const char *error = json_string_value(json_object_get(j, "error"));
	snprintf(r->error, sizeof(r->error), "%s", error ? error : "");
	r->failed = error || json_object_get(j, "code");
	const char *token = json_string_value(json_object_get(j, "token"));
	if (token && strlen(token) < sizeof(r->token))
		snprintf(r->token, sizeof(r->token), "%s", token);
	r->id = etcd_int64(j, "ID", 0);
	r->ttl = etcd_int64(json_object_get(j, "result"), "TTL", 0);
	r->succeeded = json_is_true(json_object_get(j, "succeeded"));
	const json_t *list = json_object_get(j, "kvs");
	size_t count = json_array_size(list);
	int rc = count && !(r->kvs = calloc(count, sizeof(*r->kvs))) ? -1 : 0;
	for (size_t i = 0; rc == 0 && i < count && !r->bad_kv; i++) {
		r->bad_kv = etcd_kv_of(json_array_get(list, i), &r->kvs[r->nkvs]) < 0;
		r->nkvs += !r->bad_kv;
	}
	if (r->bad_kv)
		etcd_reply_free(r);
	json_decref(j);
	return rc;
}

void etcd_reply_free(struct etcd_reply *r)
{
	for (size_t i = 0; r->kvs && i < r->nkvs; i++) {
		free(r->kvs[i].key);
		free(r->kvs[i].value);
	}
	free(r->kvs);
	r->kvs = NULL;
	r->nkvs = 0;
}

int etcd_kv_of(const json_t *j, struct etcd_kv *kv)
{
	const char *k = json_string_value(json_object_get(j, "key"));
	const char *v = json_string_value(json_object_get(j, "value"));
	memset(kv, 0, sizeof(*kv));
	kv->key = malloc(k ? strlen(k) + 1 : 1);
	kv->value = malloc(v ? strlen(v) + 1 : 1);
	long kn = kv->key && k ? etcd_b64_decode(k, (unsigned char *)kv->key) : -1;
	long vn = kv->value ? (v ? etcd_b64_decode(v, (unsigned char *)kv->value) : 0) : -1;
	if (kn < 0 || vn < 0) {
		free(kv->key);
		free(kv->value);
		kv->key = kv->value = NULL;
		return -1;
	}
	kv->key[kn] = '\0';
	kv->value[vn] = '\0';
	kv->value_len = (size_t)vn;
	kv->create_revision = etcd_int64(j, "create_revision", 0);
	kv->mod_revision = etcd_int64(j, "mod_revision", 0);
	kv->lease = etcd_int64(j, "lease", 0);
	return 0;
}
