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

/* names (NAME,NAME,...) added to list (malloc'd, replaced) where not there. */
static char *names_union(char *list, const char *names)
{
	size_t cap = strlen(list) + strlen(names) + 2, at = strlen(list);
	char *out = malloc(cap);
	if (!out)
		return list;
	memcpy(out, list, at + 1);
	for (const char *p = names; *p;) {
		size_t n = strcspn(p, ",");
		char one[300];
		snprintf(one, sizeof(one), "%.*s", (int)(n < sizeof(one) ? n : sizeof(one) - 1), p);
		if (n && !name_listed(out, one))
			at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? "," : "", one);
		p += n + (p[n] == ',');
	}
	free(list);
	return out;
}

static void ended_key(const char *prefix, char *out, size_t len)
{
	snprintf(out, len, "%sended", prefix);
}

/* names added to r's, and r put at key under its lease; r freed. */
static void ended_put(struct etcd *e, const char *key, struct ended_record *r, const char *names)
{
	char err[512];
	r->took_part = names_union(r->took_part, names);
	char *text = ended_record_encode(r);
	if (text)
		etcd_put(e, key, text, r->lease, err, sizeof(err)); /* (its lease gone: nothing to tell) */
	free(text);
	ended_record_free(r);
}

void ended_add(struct etcd *e, const struct ended_record *op, const char *prefix, const char *names, int ttl_s)
{
	char key[600], err[512];
	struct etcd_kv kv;
	ended_key(prefix, key, sizeof(key));
	struct ended_record r = {0};
	bool got = etcd_get(e, key, &kv, err, sizeof(err)) == 1;
	bool same = got && ended_record_decode(kv.value, &r) == 0 && !strcmp(r.opid, op->opid);
	if (got)
		free(kv.key), free(kv.value);
	if (!same) {
		ended_record_free(&r);
		r = *op;
		int64_t lease;
		if (!(r.took_part = strdup("")) || etcd_lease_grant(e, ttl_s, &lease, err, sizeof(err)) < 0) {
			free(r.took_part);
			return;
		}
		r.lease = (long long)lease;
	}
	ended_put(e, key, &r, names);
}

bool ended_came_late(struct etcd *e, const char *prefix, const char *op, int members, const char *member, char *why,
		     size_t len)
{
	char key[600], err[512];
	struct etcd_kv kv;
	ended_key(prefix, key, sizeof(key));
	if (etcd_get(e, key, &kv, err, sizeof(err)) != 1)
		return false;
	struct ended_record r;
	bool late = ended_record_decode(kv.value, &r) == 0 && !strcmp(r.operation, op) && r.members == members &&
		    !name_listed(r.took_part, member);
	free(kv.key), free(kv.value);
	if (!late) {
		ended_record_free(&r);
		return false;
	}
	snprintf(why, len, "its %s (operation %.8s) failed before this member came: %s", r.operation, r.opid, r.why);
	ended_put(e, key, &r, member); /* (told once: its next try begins anew) */
	return true;
}
