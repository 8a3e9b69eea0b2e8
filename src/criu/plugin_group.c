/* SPDX-License-Identifier: MIT */
/* The plugin's dump or restore as one member of a group (DESIGN.md §16): with
 * `group` (and `members`, `etcd`, ... as the tool names them) in its settings,
 * a plain `criu dump` meets the other members before its native checkpoint,
 * and a `criu restore` before restore-complete, as `cusnap checkpoint --group`
 * and `cusnap restore --group` do (the node library's group.c). */
#include <stdio.h>

#include "../node/group.h"
#include "plugin.h"

int plugin_group_join(const struct settings *s, pid_t pid, const char *dir, const char *op, struct group **g)
{
	struct group_spec spec;
	char why[600];
	*g = NULL;
	int asked = group_spec_from(s, pid, dir, &spec, why, sizeof(why));
	if (asked < 0) {
		plugin_say(VOICE_ERROR, "the plugin's group settings: %s: %s refused, nothing changed", why, op);
		return -1;
	}
	if (!asked)
		return 0;
	spec.keeper_process = true; /* (CRIU must stay one thread: see group_keeper.c) */
	int code;
	if (!(*g = group_join(&spec, op, &code))) /* (why said by the group) */
		return -1;
	return 0;
}

int plugin_group_leave(struct group **g, int code)
{
	if (!*g)
		return code;
	code = group_leave(*g, code, false);
	*g = NULL;
	return code;
}
