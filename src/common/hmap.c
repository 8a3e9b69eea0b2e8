/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "cusnap/hmap.h"

static inline size_t slot_of(uint64_t key, size_t cap)
{
	/* splitmix64 finaliser: handles and addresses are far from uniform. */
	key ^= key >> 30;
	key *= 0xbf58476d1ce4e5b9ULL;
	key ^= key >> 27;
	key *= 0x94d049bb133111ebULL;
	key ^= key >> 31;
	return (size_t)key & (cap - 1);
}

static int grow(struct hmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	void **vals = calloc(cap, sizeof(*vals));
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t s = slot_of(m->keys[i], cap);
		while (keys[s])
			s = (s + 1) & (cap - 1);
		keys[s] = m->keys[i];
		vals[s] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

int hmap_put(struct hmap *m, uint64_t key, void *val)
{
	if (!key)
		return -EINVAL;
	if ((m->len + 1) * 4 > m->cap * 3) {
		int rc = grow(m);
		if (rc < 0)
			return rc;
	}
	size_t s = slot_of(key, m->cap);
	while (m->keys[s] && m->keys[s] != key)
		s = (s + 1) & (m->cap - 1);
	if (!m->keys[s])
		m->len++;
	m->keys[s] = key;
	m->vals[s] = val;
	return 0;
}

void *hmap_get(const struct hmap *m, uint64_t key)
{
	if (!key || !m->cap)
		return NULL;
	size_t s = slot_of(key, m->cap);
	while (m->keys[s]) {
		if (m->keys[s] == key)
			return m->vals[s];
		s = (s + 1) & (m->cap - 1);
	}
	return NULL;
}

void *hmap_del(struct hmap *m, uint64_t key)
{
	if (!key || !m->cap)
		return NULL;
	size_t mask = m->cap - 1, s = slot_of(key, m->cap);
	while (m->keys[s] && m->keys[s] != key)
		s = (s + 1) & mask;
	if (!m->keys[s])
		return NULL;
	void *val = m->vals[s];
	/* Backward shift: pull later members of the probe run into the hole when
	 * their home slot does not lie cyclically in (hole, their slot]. */
	size_t hole = s;
	for (size_t j = (s + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = slot_of(m->keys[j], m->cap);
		int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
		if (stays)
			continue;
		m->keys[hole] = m->keys[j];
		m->vals[hole] = m->vals[j];
		hole = j;
	}
	m->keys[hole] = 0;
	m->vals[hole] = NULL;
	m->len--;
	return val;
}

void hmap_free(struct hmap *m)
{
	free(m->keys);
	free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = m->len = 0;
}
