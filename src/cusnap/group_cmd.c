/* SPDX-License-Identifier: MIT */
/* A command as one member of a group (DESIGN.md §16): its --group options
 * made a spec for the node library's group (../node/group.h). */
#include "cusnap.h"

int group_run(int (*run)(const struct args *), const struct args *a, const char *op)
{
	if (!a->members || !a->etcd)
		return fail(EX_USAGE, "--group needs --members N and --etcd URL[,URL...]");
	struct group_spec spec = {.group = a->group,
				  .members = a->members,
				  .member_names = a->member_names,
				  .member = a->member,
				  .etcd = a->etcd,
				  .auth = a->etcd_auth,
				  .timeout_ms = a->group_timeout_ms,
				  .pid = a->pid,
				  .dir = a->dir};
	int rc;
	struct group *g = group_join(&spec, op, &rc);
	if (!g)
		return rc;
	struct settings s = *a->s;
	struct args inner = *a;
	s.boundary = group_boundary(g);
	inner.s = &s;
	inner.json = false; /* (the group's result is the summary) */
	return group_leave(g, run(&inner), a->json);
}
