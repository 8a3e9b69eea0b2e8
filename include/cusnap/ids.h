/* SPDX-License-Identifier: MIT */
/* 128-bit random identifiers (participants, allocations, capability tokens). */
#ifndef CUSNAP_IDS_H
#define CUSNAP_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ID_LEN 16
#define ID_HEX_LEN 32

struct cusnap_id {
	uint8_t b[ID_LEN];
};

/* Fill id from the kernel's random source. Returns 0 or -errno. */
int id_random(struct cusnap_id *id);
/* 32 lower-case hex digits and a NUL into out (33 bytes). */
void id_hex(const struct cusnap_id *id, char out[ID_HEX_LEN + 1]);
/* Parse exactly 32 hex digits. Returns 0 or -EINVAL. */
int id_parse(const char *hex, struct cusnap_id *id);
/* A GPU UUID of len bytes: "GPU-xxxxxxxx-xxxx-...", or 32 hex digits with or
 * without dashes, into 16 bytes. Returns 0 or -EINVAL. */
int id_parse_uuid(const char *s, size_t len, uint8_t out[ID_LEN]);
bool id_is_zero(const struct cusnap_id *id);
bool id_equal(const struct cusnap_id *a, const struct cusnap_id *b);
/* Constant-time comparison, for tokens. */
bool id_equal_ct(const struct cusnap_id *a, const struct cusnap_id *b);
/* A 64-bit hash of id for hash maps (never 0). */
uint64_t id_hash(const struct cusnap_id *id);

#endif
