/* SPDX-License-Identifier: MIT */
/* A checkpoint's files' sizes and CRC32Cs, and their one JSON codec
 * (include/cusnap/digests.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/digests.h"

int digests_add(struct file_digests *d, const char *name, uint64_t size, uint32_t crc32c)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 16;
		struct file_digest *f = realloc(d->f, cap * sizeof(*f));
		if (!f)
			return -1;
		d->f = f;
		d->cap = cap;
	}
	char *copy = strdup(name);
	if (!copy)
		return -1;
	d->f[d->n++] = (struct file_digest){.name = copy, .size = size, .crc32c = crc32c};
	return 0;
}

const struct file_digest *digests_find(const struct file_digests *d, const char *name)
{
	for (size_t i = 0; d && i < d->n; i++)
		if (strcmp(d->f[i].name, name) == 0)
			return &d->f[i];
	return NULL;
}

uint64_t digests_bytes(const struct file_digests *d)
{
	uint64_t sum = 0;
	for (size_t i = 0; d && i < d->n; i++)
		sum += d->f[i].size;
	return sum;
}

json_t *digests_encode(const struct file_digests *d)
{
	json_t *j = json_object();
	for (size_t i = 0; j && i < d->n; i++) {
		char hex[16];
		snprintf(hex, sizeof(hex), "%08" PRIx32, d->f[i].crc32c);
		if (json_object_set_new(j, d->f[i].name,
					json_pack("{s:I, s:s}", "size", (json_int_t)d->f[i].size, "crc32c", hex)) < 0) {
			json_decref(j);
			return NULL;
		}
	}
	return j;
}

/* "8 hex digits" into *crc: 0, or -1. */
static int crc_from_hex(const char *hex, uint32_t *crc)
{
	if (!hex || strlen(hex) != 8 || strspn(hex, "0123456789abcdef") != 8)
		return -1;
	*crc = (uint32_t)strtoul(hex, NULL, 16);
	return 0;
}

int digests_decode(const json_t *j, struct file_digests *d, char *why, size_t len)
{
	memset(d, 0, sizeof(*d));
	if (!json_is_object(j)) {
		snprintf(why, len, "the files' digests are not an object");
		return -1;
	}
	const char *name;
	json_t *v;
	json_object_foreach((json_t *)j, name, v)
	{
		const json_t *size = json_object_get(v, "size");
		uint32_t crc;
		if (!name[0] || strchr(name, '/') || !json_is_integer(size) || json_integer_value(size) < 0 ||
		    crc_from_hex(json_string_value(json_object_get(v, "crc32c")), &crc) < 0) {
			snprintf(why, len, "the digest of %s is malformed", name);
			digests_free(d);
			return -1;
		}
		if (digests_add(d, name, (uint64_t)json_integer_value(size), crc) < 0) {
			snprintf(why, len, "out of memory");
			digests_free(d);
			return -1;
		}
	}
	return 0;
}

void digests_free(struct file_digests *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->f[i].name);
	free(d->f);
	memset(d, 0, sizeof(*d));
}
