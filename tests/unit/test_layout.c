/* SPDX-License-Identifier: MIT */
/* The table of a checkpoint directory's entries (src/common/layout.c): every
 * name once, each with its writer; of those that move with a checkpoint the
 * manifest comes last (the commit point of ckptdir.c's publish); the files of
 * file content are known by their prefix and suffix. */
#include <string.h>

#include "cusnap/layout.h"
#include "../harness/test.h"

static void the_table(void)
{
	const struct layout_entry *last_moving = NULL;
	for (size_t i = 0; i < layout_nentries; i++) {
		const struct layout_entry *e = &layout_entries[i];
		CHECK(e->name && e->name[0]);
		CHECK(e->writer && e->writer[0]);
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(layout_entries[j].name, e->name) != 0);
		if (e->moves)
			last_moving = e;
	}
	CHECK(last_moving != NULL);
	if (last_moving)
		CHECK_STR(last_moving->name, LAYOUT_MANIFEST);
	bool content = false;
	for (size_t i = 0; i < layout_nentries; i++)
		content |= layout_entries[i].kind == LAYOUT_KIND_FILES &&
			   !strcmp(layout_entries[i].name, LAYOUT_CONTENT_PREFIX) && layout_entries[i].moves;
	CHECK(content);
	CHECK(layout_content_name(LAYOUT_CONTENT_PREFIX "0123" LAYOUT_CONTENT_SUFFIX));
	CHECK(!layout_content_name(LAYOUT_CONTENT_PREFIX LAYOUT_CONTENT_SUFFIX));
	CHECK(!layout_content_name(LAYOUT_STATE));
}

int main(void)
{
	test_run("every entry once, with its writer; the manifest moves last", the_table);
	return test_done();
}
