/* SPDX-License-Identifier: MIT */
/* cusnap inspect --group (DESIGN.md §16): every member's phase and every
 * recent operation's decision and results, as the group's records say
 * (group_codec.c); what members ignore is listed with how to clear it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cusnap.h"
#include "cusnap/json.h"
#include "../node/etcd.h"

/* What the group's records say, decoded once (group_codec.c). */
struct member_view {
	char name[256];
	struct member_record rec;
};
struct op_view {
	char opid[ID_HEX_LEN + 1];
	bool decided;
	struct decision_record decision;
	struct result_record *results;
	size_t nresults;
};
struct group_view {
	struct member_view *members;
	size_t nmembers;
	const char **ignored; /* the keys of records members ignore (etcd's, until kvs_free) */
	size_t nignored;
	struct op_view *ops; /* in the order their first record came */
	size_t nops;
};

/* The operation opid's view, made on first sight: NULL when out of memory. */
static struct op_view *op_of(struct group_view *v, const char *opid)
{
	for (size_t i = 0; i < v->nops; i++)
		if (!strcmp(v->ops[i].opid, opid))
			return &v->ops[i];
	struct op_view *ops = realloc(v->ops, (v->nops + 1) * sizeof(*ops));
	if (!ops)
		return NULL;
	v->ops = ops;
	struct op_view *o = &ops[v->nops++];
	memset(o, 0, sizeof(*o));
	snprintf(o->opid, sizeof(o->opid), "%s", opid);
	return o;
}

/* One record (rest: its key past the group's prefix) into v; one that does
 * not decode is left out. 0, or -1 when out of memory. */
static int view_add(struct group_view *v, const char *group, const struct etcd_kv *kv, const char *rest)
{
	if (!strncmp(rest, "members/", 8)) {
		if (!record_valid(group, kv, false)) {
			/* (shown, with how to clear it: members ignore it) */
			const char **ig = realloc(v->ignored, (v->nignored + 1) * sizeof(*ig));
			if (!ig)
				return -1;
			v->ignored = ig;
			ig[v->nignored++] = kv->key;
			return 0;
		}
		struct member_view m;
		snprintf(m.name, sizeof(m.name), "%s", rest + 8);
		if (member_record_decode(kv->value, &m.rec) < 0)
			return 0;
		struct member_view *ms = realloc(v->members, (v->nmembers + 1) * sizeof(*ms));
		if (!ms) {
			member_record_free(&m.rec);
			return -1;
		}
		v->members = ms;
		ms[v->nmembers++] = m;
		return 0;
	}
	/* ops/OPID/decision, ops/OPID/results/MEMBER */
	const char *tail = strncmp(rest, "ops/", 4) ? NULL : strchr(rest + 4, '/');
	if (!tail || (size_t)(tail - rest - 4) > ID_HEX_LEN)
		return 0;
	char opid[ID_HEX_LEN + 1];
	snprintf(opid, sizeof(opid), "%.*s", (int)(tail - rest - 4), rest + 4);
	struct decision_record d;
	struct result_record r;
	if (!strcmp(tail, "/decision") && decision_record_decode(kv->value, &d) == 0) {
		struct op_view *o = op_of(v, opid);
		if (!o)
			return -1;
		o->decided = true;
		o->decision = d;
	} else if (!strncmp(tail, "/results/", 9) && result_record_decode(kv->value, &r) == 0) {
		struct op_view *o = op_of(v, opid);
		struct result_record *rs = o ? realloc(o->results, (o->nresults + 1) * sizeof(*rs)) : NULL;
		if (!rs)
			return -1;
		o->results = rs;
		rs[o->nresults++] = r;
	}
	return 0;
}

static void view_free(struct group_view *v)
{
	for (size_t i = 0; i < v->nmembers; i++)
		member_record_free(&v->members[i].rec);
	for (size_t i = 0; i < v->nops; i++)
		free(v->ops[i].results);
	free(v->members);
	free(v->ignored);
	free(v->ops);
}

/* --json: the view as one object (each record through its codec). */
static json_t *view_json(const char *group, const struct group_view *v)
{
	json_t *out = json_pack("{s:s, s:[], s:{}, s:[]}", "group", group, "members", "operations", "ignored");
	json_t *members = json_object_get(out, "members"), *ops = json_object_get(out, "operations");
	for (size_t i = 0; out && i < v->nmembers; i++) {
		json_t *m = member_record_json(&v->members[i].rec);
		json_object_set_new(m, "member", json_text(v->members[i].name));
		json_array_append_new(members, m);
	}
	for (size_t i = 0; out && i < v->nignored; i++)
		json_array_append_new(json_object_get(out, "ignored"), json_text(v->ignored[i]));
	for (size_t i = 0; out && i < v->nops; i++) {
		json_t *o = json_pack("{s:[]}", "results");
		for (size_t j = 0; o && j < v->ops[i].nresults; j++)
			json_array_append_new(json_object_get(o, "results"), result_record_json(&v->ops[i].results[j]));
		if (o && v->ops[i].decided)
			json_object_set_new(o, "decision", decision_record_json(&v->ops[i].decision));
		json_object_set_new(ops, v->ops[i].opid, o);
	}
	return out;
}

/* The view as lines for an operator. */
static void view_print(const char *group, const struct group_view *v)
{
	printf("group %s: %zu member(s) at work\n", group, v->nmembers);
	for (size_t i = 0; i < v->nmembers; i++) {
		const struct member_record *m = &v->members[i].rec;
		printf("  member %s: %s of %d members, %s (operation %.8s)\n", v->members[i].name, m->operation,
		       m->members, m->phase, m->opid);
	}
	for (size_t i = 0; i < v->nignored; i++)
		printf("  %s: not a member's record (malformed, or kept by no lease): members ignore it; "
		       "`etcdctl del %s` clears it\n",
		       v->ignored[i], v->ignored[i]);
	for (size_t i = 0; i < v->nops; i++) {
		const struct op_view *o = &v->ops[i];
		const struct result_record *first = o->nresults ? &o->results[0] : NULL;
		const char *kind = first ? first->operation : "";
		char when[64] = "";
		time_t at = first ? (time_t)first->time : 0;
		struct tm tm;
		if (at > 0 && localtime_r(&at, &tm))
			strftime(when, sizeof(when), ", %Y-%m-%d %H:%M:%S", &tm);
		printf("operation %.8s (%s%s): %s\n", o->opid, kind[0] ? kind : "?", when,
		       o->decided && o->decision.go ? "every member ready: crossed"
		       : o->decided                 ? o->decision.why
		       : !strcmp(kind, "resume")    ? "no boundary (each member resumes its own tree)"
						    : "undecided");
		for (size_t j = 0; j < o->nresults; j++) {
			const struct result_record *r = &o->results[j];
			printf("  member %s%s%s: %s%s%s%s\n", r->member, r->host[0] ? " on " : "", r->host,
			       r->exit ? "failed" : "ok", r->exit ? ": " : "", r->error,
			       r->holds_checkpoint ? " (holds a checkpoint)" : "");
		}
	}
}

int group_inspect(const struct args *a, const struct group_spec *spec)
{
	struct etcd e;
	char why[1024], prefix[300];
	snprintf(prefix, sizeof(prefix), "/cusnap/groups/%s/", spec->group);
	if (!spec->etcd)
		return fail(EX_USAGE, "inspect --group needs --etcd URL[,URL...]");
	if (etcd_global_init(why, sizeof(why)) < 0)
		return fail(EX_UNAVAILABLE, "%s", why);
	if (etcd_init(&e, spec->etcd, &spec->auth, 5000, why, sizeof(why)) < 0)
		return fail(EX_USAGE, "%s", why);
	struct etcd_kv *kvs;
	size_t n;
	if (etcd_range(&e, prefix, &kvs, &n, why, sizeof(why)) < 0) {
		etcd_free(&e);
		return fail(EX_UNAVAILABLE, "group %s: %s%s", spec->group, why, etcd_advice(why));
	}
	etcd_free(&e);
	struct group_view v = {0};
	int rc = EX_OK;
	for (size_t i = 0; i < n && rc == EX_OK; i++)
		if (view_add(&v, spec->group, &kvs[i], kvs[i].key + strlen(prefix)) < 0)
			rc = fail(EX_SOFTWARE, "inspect --group: out of memory");
	if (rc == EX_OK && a->json)
		json_emit(stdout, view_json(spec->group, &v));
	else if (rc == EX_OK)
		view_print(spec->group, &v);
	view_free(&v);
	etcd_kvs_free(kvs, n);
	return rc;
}
