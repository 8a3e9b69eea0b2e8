/* SPDX-License-Identifier: MIT */
/* What a group member trusts of the records under /cusnap/groups/NAME/
 * (DESIGN.md §16): a member's record counts only when it parses as one and is
 * kept by a lease (a member's cusnap keeps its own alive); anything else is
 * ignored with a warning naming the key and how to clear it, and never blocks
 * the group. With --members NAME,NAME,... only the members named count, and a
 * member of another job using the same group name is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "node.h"
#include "cusnap/json.h"
#include "etcd.h"

/* Keys already warned about (a member looks every 50 ms: once each). */
static char warned[16][300];
static size_t nwarned;

static void warn_once(const char *group, const char *key, const char *what)
{
	for (size_t i = 0; i < nwarned; i++)
		if (!strcmp(warned[i], key))
			return;
	if (nwarned < sizeof(warned) / sizeof(warned[0]))
		snprintf(warned[nwarned++], sizeof(warned[0]), "%s", key);
	fprintf(stderr,
		"cusnap: warning: group %s: %s is %s: ignored (`cusnap inspect --group %s` shows it; "
		"`etcdctl del %s` clears it)\n",
		group, key, what, group, key);
}

bool record_valid(const char *group, const struct etcd_kv *kv, bool warn)
{
	struct member_record m;
	const char *what = member_record_decode(kv->value, &m) < 0 ? "not a member's record"
			   : !kv->lease                            ? "kept by no lease (no member's cusnap keeps it)"
								   : NULL;
	member_record_free(&m);
	if (what && warn)
		warn_once(group, kv->key, what);
	return !what;
}

size_t records_valid(const char *group, struct etcd_kv *kvs, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (record_valid(group, &kvs[i], true)) {
			kvs[k++] = kvs[i];
			continue;
		}
		free(kvs[i].key);
		free(kvs[i].value);
	}
	return k;
}

bool name_listed(const char *list, const char *name)
{
	size_t l = strlen(name);
	for (const char *p = list; p && *p;) {
		size_t k = strcspn(p, ",");
		if (k == l && !strncmp(p, name, l))
			return true;
		p += k + (p[k] == ',');
	}
	return false;
}
