/* SPDX-License-Identifier: MIT */
/* cusnap inspect --group (DESIGN.md §16): every member's phase and every
 * recent operation's decision and results, as the group's records say
 * (group_codec.c); what members ignore is listed with how to clear it. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cusnap.h"
#include "cusnap/json.h"
#include "../node/etcd.h"

/* The record under rest (the key past the group's prefix) as JSON, through
 * its codec: NULL when it is none that reads. */
static json_t *record_json(const char *rest, const char *value)
{
	struct member_record m;
	struct decision_record d;
	struct result_record r;
	json_t *j = NULL;
	const char *tail = strncmp(rest, "ops/", 4) ? NULL : strchr(rest + 4, '/');
	if (!strncmp(rest, "members/", 8) && member_record_decode(value, &m) == 0) {
		j = member_record_json(&m);
		member_record_free(&m);
	} else if (tail && !strcmp(tail, "/decision") && decision_record_decode(value, &d) == 0) {
		j = decision_record_json(&d);
	} else if (tail && !strncmp(tail, "/results/", 9) && result_record_decode(value, &r) == 0) {
		j = result_record_json(&r);
	}
	return j;
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
	json_t *out = json_pack("{s:s, s:[], s:{}, s:[]}", "group", spec->group, "members", "operations", "ignored");
	for (size_t i = 0; i < n; i++) {
		const char *rest = kvs[i].key + strlen(prefix);
		if (!strncmp(rest, "members/", 8) && !record_valid(spec->group, &kvs[i], false)) {
			/* (shown, with how to clear it: members ignore it) */
			json_array_append_new(json_object_get(out, "ignored"), json_text(kvs[i].key));
			continue;
		}
		json_t *v = record_json(rest, kvs[i].value);
		if (!v)
			continue;
		if (!strncmp(rest, "members/", 8)) {
			json_object_set_new(v, "member", json_text(rest + 8));
			json_array_append_new(json_object_get(out, "members"), v);
			continue;
		}
		/* ops/OPID/decision, ops/OPID/results/MEMBER */
		char opid[ID_HEX_LEN + 1] = "";
		const char *tail = strchr(rest + 4, '/');
		if ((size_t)(tail - rest - 4) > ID_HEX_LEN) {
			json_decref(v);
			continue;
		}
		memcpy(opid, rest + 4, (size_t)(tail - rest - 4));
		json_t *o = json_object_get(json_object_get(out, "operations"), opid);
		if (!o) {
			o = json_pack("{s:[]}", "results");
			json_object_set_new(json_object_get(out, "operations"), opid, o);
		}
		if (!strcmp(tail, "/decision"))
			json_object_set_new(o, "decision", v);
		else
			json_array_append_new(json_object_get(o, "results"), v);
	}
	etcd_kvs_free(kvs, n);
	etcd_free(&e);
	if (a->json) {
		json_emit(stdout, out);
		return EX_OK;
	}
	const json_t *m = json_object_get(out, "members");
	printf("group %s: %zu member(s) at work\n", spec->group, json_array_size(m));
	for (size_t i = 0; i < json_array_size(m); i++) {
		const json_t *x = json_array_get(m, i);
		printf("  member %s: %s of %d members, %s (operation %.8s)\n", json_member_text(x, "member"),
		       json_member_text(x, "operation"), (int)json_member_number(x, "members", 0),
		       json_member_text(x, "phase"), json_member_text(x, "opid"));
	}
	const json_t *ignored = json_object_get(out, "ignored");
	for (size_t i = 0; i < json_array_size(ignored); i++)
		printf("  %s: not a member's record (malformed, or kept by no lease): members ignore it; "
		       "`etcdctl del %s` clears it\n",
		       json_string_value(json_array_get(ignored, i)), json_string_value(json_array_get(ignored, i)));
	const char *opid;
	json_t *o;
	json_object_foreach(json_object_get(out, "operations"), opid, o)
	{
		const json_t *d = json_object_get(o, "decision");
		const json_t *r = json_object_get(o, "results");
		const json_t *first = json_array_get(r, 0);
		const char *kind = first ? json_member_text(first, "operation") : "";
		char when[64] = "";
		time_t at = (time_t)json_member_number(first, "time", 0);
		struct tm tm;
		if (at > 0 && localtime_r(&at, &tm))
			strftime(when, sizeof(when), ", %Y-%m-%d %H:%M:%S", &tm);
		printf("operation %.8s (%s%s): %s\n", opid, kind[0] ? kind : "?", when,
		       d && json_is_true(json_object_get(d, "go")) ? "every member ready: crossed"
		       : d                                         ? json_member_text(d, "why")
		       : !strcmp(kind, "resume")                   ? "no boundary (each member resumes its own tree)"
								   : "undecided");
		for (size_t i = 0; i < json_array_size(r); i++) {
			const json_t *x = json_array_get(r, i);
			int code = (int)json_member_number(x, "exit", -1);
			printf("  member %s%s%s: %s%s%s%s\n", json_member_text(x, "member"),
			       json_member_text(x, "host")[0] ? " on " : "", json_member_text(x, "host"),
			       code ? "failed" : "ok", code ? ": " : "", json_member_text(x, "error"),
			       json_is_true(json_object_get(x, "holds_checkpoint")) ? " (holds a checkpoint)" : "");
		}
	}
	json_decref(out);
	return EX_OK;
}
