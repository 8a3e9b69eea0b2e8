/* SPDX-License-Identifier: MIT */
/* The shared containers: hash map and interval tree, against simple models. */
#include <errno.h>
#include <string.h>

#include "../harness/test.h"
#include "cusnap/hmap.h"
#include "cusnap/itree.h"

static void hmap_model(void)
{
	enum { N = 20000 };
	struct hmap m = {0};
	static void *model[N];
	uint64_t x = 12345;
	for (int round = 0; round < 200000; round++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned k = (unsigned)(x >> 33) % N;
		if (x & (1ULL << 20)) {
			void *v = (void *)(uintptr_t)(round + 1);
			CHECK_EQ(hmap_put(&m, k + 1, v), 0);
			model[k] = v;
		} else {
			void *got = hmap_del(&m, k + 1);
			CHECK(got == model[k]);
			model[k] = NULL;
		}
	}
	size_t live = 0;
	for (int k = 0; k < N; k++) {
		CHECK(hmap_get(&m, (uint64_t)k + 1) == model[k]);
		live += model[k] != NULL;
	}
	CHECK_EQ(m.len, live);
	CHECK_EQ(hmap_put(&m, 0, &m), -EINVAL);
	CHECK(hmap_get(&m, 0) == NULL);
	hmap_free(&m);
	CHECK(hmap_get(&m, 1) == NULL);
}

static void itree_basics(void)
{
	struct itree t = {0};
	enum { N = 5000 };
	static struct itree_node nodes[N];
	/* Insert every other 4 KiB page in shuffled order. */
	for (unsigned i = 0; i < N; i++) {
		nodes[i].start = 0x100000 + (uint64_t)i * 0x2000;
		nodes[i].end = nodes[i].start + 0x1000;
	}
	/* 7919 is prime and does not divide N: this visits every node once, shuffled. */
	for (unsigned i = 0; i < N; i++)
		CHECK_EQ(itree_insert(&t, &nodes[(i * 7919u) % N]), 0);
	CHECK_EQ(t.count, N);
	struct itree_node clash = {.start = nodes[10].start + 0x800, .end = nodes[10].end + 0x800};
	CHECK_EQ(itree_insert(&t, &clash), -EEXIST);
	struct itree_node empty = {.start = 5, .end = 5};
	CHECK_EQ(itree_insert(&t, &empty), -EINVAL);
	CHECK(itree_find(&t, nodes[42].start + 0xfff) == &nodes[42]);
	CHECK(itree_find(&t, nodes[42].end) == NULL);
	CHECK(itree_first_from(&t, nodes[42].end) == &nodes[43]);
	/* In-order walk visits everything in address order. */
	size_t seen = 0;
	uint64_t prev = 0;
	for (struct itree_node *n = itree_first_from(&t, 0); n; n = itree_next(&t, n)) {
		CHECK(n->start > prev || seen == 0);
		prev = n->start;
		seen++;
	}
	CHECK_EQ(seen, N);
	for (unsigned i = 0; i < N; i += 2)
		itree_remove(&t, &nodes[i]);
	CHECK_EQ(t.count, N / 2);
	CHECK(itree_find(&t, nodes[0].start) == NULL);
	CHECK(itree_find(&t, nodes[1].start) == &nodes[1]);
	/* A removed slot can be filled by a wider interval now. */
	struct itree_node wide = {.start = nodes[2].start - 0x1000, .end = nodes[2].end + 0x1000};
	CHECK_EQ(itree_insert(&t, &wide), 0);
}

int main(void)
{
	test_run("hmap matches a model under churn", hmap_model);
	test_run("itree insert/find/next/remove", itree_basics);
	return test_done();
}
