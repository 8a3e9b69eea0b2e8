/* SPDX-License-Identifier: MIT */
/* Hash map from nonzero 64-bit keys to pointers: open addressing, linear probing,
 * backward-shift deletion. O(1) expected per operation; no tombstones, so a table
 * that churns keeps its speed. Not thread-safe: callers hold their own lock. */
#ifndef CUSNAP_HMAP_H
#define CUSNAP_HMAP_H

#include <stddef.h>
#include <stdint.h>

struct hmap {
	uint64_t *keys; /* 0 = empty slot */
	void **vals;
	size_t cap; /* power of two, or 0 before the first insert */
	size_t len;
};

/* Insert or replace. Returns 0, -EINVAL for key 0, -ENOMEM when growing fails
 * (the map is unchanged then). */
int hmap_put(struct hmap *m, uint64_t key, void *val);
/* The value stored under key, or NULL. */
void *hmap_get(const struct hmap *m, uint64_t key);
/* Remove key; returns its value, or NULL when absent. */
void *hmap_del(struct hmap *m, uint64_t key);
/* Free the table (not the values). */
void hmap_free(struct hmap *m);

/* Iterate: for (size_t i = 0; i < m->cap; i++) if (m->keys[i]) ... m->vals[i].
 * Do not insert or delete while iterating. */

#endif
