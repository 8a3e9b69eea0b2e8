/* SPDX-License-Identifier: MIT */
/* Files as a checkpoint wrote them, each its size and CRC32C: the records of
 * a checkpoint's images and of file content's files (manifest.json's
 * image_files and content_files, the plugin's cusnap-digests.json) and the
 * digests the shims give of the files they wrote. Decoded once, here, into
 * the struct the rest reads; encoded as
 * {"NAME": {"size": N, "crc32c": "8 hex digits"}, ...} (golden bytes:
 * tests/unit/test_manifest.c). */
#ifndef CUSNAP_DIGESTS_H
#define CUSNAP_DIGESTS_H

#include <stddef.h>
#include <stdint.h>

#include "cusnap/json.h"

struct file_digest {
	char *name; /* a plain name in the checkpoint's directory (no '/') */
	uint64_t size;
	uint32_t crc32c;
};

struct file_digests {
	struct file_digest *f;
	size_t n, cap;
};

/* One more, name copied: 0, or -1 (out of memory). */
int digests_add(struct file_digests *d, const char *name, uint64_t size, uint32_t crc32c);
/* name's digest, or NULL. */
const struct file_digest *digests_find(const struct file_digests *d, const char *name);
/* The sum of their sizes. */
uint64_t digests_bytes(const struct file_digests *d);
json_t *digests_encode(const struct file_digests *d);
/* j into d (empty before): 0, or -1 with why naming the malformed entry (d
 * freed). */
int digests_decode(const json_t *j, struct file_digests *d, char *why, size_t len);
void digests_free(struct file_digests *d);

#endif
