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

/* The body once for each value of m, in v (a pointer the caller declared):
 *     struct thing *t;
 *     hmap_for_each(&map, t) use(t);
 * break and continue work as in any loop. Do not insert or delete meanwhile. */
#define hmap_for_each(m, v)                                                 \
	for (size_t hmap_at_ = 0; hmap_at_ < (m)->cap; hmap_at_++)          \
		if (!(m)->keys[hmap_at_] || ((v) = (m)->vals[hmap_at_], 0)) \
			continue;                                           \
		else

#endif
