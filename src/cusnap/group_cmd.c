/* SPDX-License-Identifier: MIT */
/* A command as one member of a group (DESIGN.md §16; ../node/group.h). */
#include "cusnap.h"

int group_run(int (*run)(const struct args *), const struct args *a, const struct group_spec *spec, const char *op)
{
	int rc;
	struct group *g = group_join(spec, op, &rc);
	if (!g)
		return rc;
	struct settings s = *a->s;
	struct args inner = *a;
	s.boundary = group_boundary(g);
	inner.s = &s;
	inner.json = false; /* (the group's result is the summary) */
	return group_leave(g, run(&inner), a->json);
}
