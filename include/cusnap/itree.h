/* SPDX-License-Identifier: MIT */
/* Set of disjoint half-open address intervals [start, end), ordered by start:
 * an intrusive treap. Insert, remove and "which interval contains this address"
 * are O(log n) expected. Not thread-safe: callers hold their own lock. */
#ifndef CUSNAP_ITREE_H
#define CUSNAP_ITREE_H

#include <stddef.h>
#include <stdint.h>

struct itree_node {
	uint64_t start;
	uint64_t end; /* exclusive */
	struct itree_node *left, *right;
	uint32_t prio;
};

struct itree {
	struct itree_node *root;
	size_t count;
	uint32_t seed;
};

/* Insert n (start < end set by the caller). Returns 0, or -EEXIST when it
 * overlaps an interval already present (tree unchanged), -EINVAL for an empty
 * interval. */
int itree_insert(struct itree *t, struct itree_node *n);
/* Remove n, which must be in t. */
void itree_remove(struct itree *t, struct itree_node *n);
/* The interval containing addr, or NULL. */
struct itree_node *itree_find(const struct itree *t, uint64_t addr);
/* The first interval whose end is > addr (the one containing addr, or the next
 * one after it), or NULL. */
struct itree_node *itree_first_from(const struct itree *t, uint64_t addr);
/* The interval following n in address order, or NULL. */
struct itree_node *itree_next(const struct itree *t, const struct itree_node *n);

#endif
