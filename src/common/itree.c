/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "cusnap/itree.h"

/* Split t into nodes with start < key (*l) and start >= key (*r). */
static void split(struct itree_node *t, uint64_t key, struct itree_node **l, struct itree_node **r)
{
	if (!t) {
		*l = *r = NULL;
	} else if (t->start < key) {
		split(t->right, key, &t->right, r);
		*l = t;
	} else {
		split(t->left, key, l, &t->left);
		*r = t;
	}
}

/* Join l and r, every start in l below every start in r. */
static struct itree_node *merge(struct itree_node *l, struct itree_node *r)
{
	if (!l)
		return r;
	if (!r)
		return l;
	if (l->prio > r->prio) {
		l->right = merge(l->right, r);
		return l;
	}
	r->left = merge(l, r->left);
	return r;
}

/* Last interval with start <= addr. */
static struct itree_node *floor_node(const struct itree *t, uint64_t addr)
{
	struct itree_node *n = t->root, *best = NULL;
	while (n) {
		if (n->start <= addr) {
			best = n;
			n = n->right;
		} else {
			n = n->left;
		}
	}
	return best;
}

/* First interval with start > addr. */
static struct itree_node *after(const struct itree *t, uint64_t addr)
{
	struct itree_node *n = t->root, *best = NULL;
	while (n) {
		if (n->start > addr) {
			best = n;
			n = n->left;
		} else {
			n = n->right;
		}
	}
	return best;
}

int itree_insert(struct itree *t, struct itree_node *n)
{
	if (n->start >= n->end)
		return -EINVAL;
	struct itree_node *prev = floor_node(t, n->start);
	if (prev && prev->end > n->start)
		return -EEXIST;
	struct itree_node *next = after(t, n->start);
	if (next && next->start < n->end)
		return -EEXIST;
	/* xorshift32 priorities keep the treap balanced in expectation. */
	uint32_t x = t->seed ? t->seed : 0x9e3779b9u;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	t->seed = x;
	n->prio = x;
	n->left = n->right = NULL;
	struct itree_node *l, *r;
	split(t->root, n->start, &l, &r);
	t->root = merge(merge(l, n), r);
	t->count++;
	return 0;
}

void itree_remove(struct itree *t, struct itree_node *n)
{
	struct itree_node **link = &t->root;
	while (*link && *link != n)
		link = n->start < (*link)->start ? &(*link)->left : &(*link)->right;
	if (!*link)
		return;
	*link = merge(n->left, n->right);
	n->left = n->right = NULL;
	t->count--;
}

struct itree_node *itree_find(const struct itree *t, uint64_t addr)
{
	struct itree_node *n = floor_node(t, addr);
	return n && addr < n->end ? n : NULL;
}

struct itree_node *itree_first_from(const struct itree *t, uint64_t addr)
{
	struct itree_node *n = itree_find(t, addr);
	return n ? n : after(t, addr);
}

struct itree_node *itree_next(const struct itree *t, const struct itree_node *n)
{
	return after(t, n->start);
}
