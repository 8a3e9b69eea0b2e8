/* SPDX-License-Identifier: MIT */
/* The group's records in etcd (DESIGN.md §16), each writer beside its reader:
 * a member's record (members/NAME), the decision (ops/OPID/decision), a
 * member's result (ops/OPID/results/NAME) and the operation last undone
 * before its boundary (ended). Compact JSON, the fields in the
 * order written here; a reader refuses a record whose fields are missing, of
 * another type or longer than kept, so that one shape is written and read. */
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "cusnap/json.h"

/* j as compact text (malloc'd), j dropped; NULL when out of memory. */
static char *dump(json_t *j)
{
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return text;
}

/* s into out[len]: false when it does not fit. */
static bool keep(char *out, size_t len, const char *s)
{
	size_t n = strlen(s);
	if (n >= len)
		return false;
	memcpy(out, s, n + 1);
	return true;
}

/* text parsed as an object unpacked by fmt, or NULL. */
static json_t *object(const char *text)
{
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	if (json_is_object(j))
		return j;
	json_decref(j);
	return NULL;
}

json_t *member_record_json(const struct member_record *m)
{
	return json_pack("{s:s, s:i, s:s, s:s, s:o, s:i, s:o}", "operation", m->operation, "members", m->members,
			 "opid", m->opid, "phase", m->phase, "host", json_text(m->host), "pid", m->pid, "names",
			 json_text(m->names ? m->names : ""));
}

char *member_record_encode(const struct member_record *m)
{
	return dump(member_record_json(m));
}

int member_record_decode(const char *text, struct member_record *m)
{
	*m = (struct member_record){0};
	json_t *j = object(text);
	const char *op, *opid, *phase, *host = "", *names = "";
	int ok = j &&
		 json_unpack(j, "{s:s, s:i, s:s, s:s, s?s, s?i, s?s}", "operation", &op, "members", &m->members, "opid",
			     &opid, "phase", &phase, "host", &host, "pid", &m->pid, "names", &names) == 0 &&
		 m->members > 0 && keep(m->operation, sizeof(m->operation), op) &&
		 keep(m->opid, sizeof(m->opid), opid) && keep(m->phase, sizeof(m->phase), phase) &&
		 keep(m->host, sizeof(m->host), host) && (m->names = strdup(names));
	json_decref(j);
	if (ok)
		return 0;
	member_record_free(m);
	return -1;
}

void member_record_free(struct member_record *m)
{
	free(m->names);
	m->names = NULL;
}

json_t *decision_record_json(const struct decision_record *d)
{
	return json_pack("{s:b, s:o, s:o}", "go", d->go, "why", json_text(d->why), "by", json_text(d->by));
}

char *decision_record_encode(const struct decision_record *d)
{
	return dump(decision_record_json(d));
}

int decision_record_decode(const char *text, struct decision_record *d)
{
	*d = (struct decision_record){0};
	json_t *j = object(text);
	const char *why, *by;
	int go = 0;
	bool ok = j && json_unpack(j, "{s:b, s:s, s:s}", "go", &go, "why", &why, "by", &by) == 0 &&
		  keep(d->why, sizeof(d->why), why) && keep(d->by, sizeof(d->by), by);
	d->go = go;
	json_decref(j);
	return ok ? 0 : -1;
}

json_t *result_record_json(const struct result_record *r)
{
	return json_pack("{s:o, s:i, s:b, s:b, s:o, s:s, s:o, s:I}", "member", json_text(r->member), "exit", r->exit,
			 "crossed", r->crossed, "holds_checkpoint", r->holds_checkpoint, "error", json_text(r->error),
			 "operation", r->operation, "host", json_text(r->host), "time", (json_int_t)r->time);
}

char *result_record_encode(const struct result_record *r)
{
	return dump(result_record_json(r));
}

int result_record_decode(const char *text, struct result_record *r)
{
	*r = (struct result_record){0};
	json_t *j = object(text);
	const char *member, *error, *op, *host = "";
	int crossed = 0, holds = 0;
	json_int_t at = 0;
	bool ok = j &&
		  json_unpack(j, "{s:s, s:i, s:b, s:b, s:s, s:s, s?s, s?I}", "member", &member, "exit", &r->exit,
			      "crossed", &crossed, "holds_checkpoint", &holds, "error", &error, "operation", &op,
			      "host", &host, "time", &at) == 0 &&
		  keep(r->member, sizeof(r->member), member) && keep(r->error, sizeof(r->error), error) &&
		  keep(r->operation, sizeof(r->operation), op) && keep(r->host, sizeof(r->host), host);
	r->crossed = crossed;
	r->holds_checkpoint = holds;
	r->time = (long long)at;
	json_decref(j);
	return ok ? 0 : -1;
}

char *ended_record_encode(const struct ended_record *e)
{
	return dump(json_pack("{s:s, s:i, s:s, s:o, s:o, s:I}", "operation", e->operation, "members", e->members,
			      "opid", e->opid, "why", json_text(e->why), "took_part",
			      json_text(e->took_part ? e->took_part : ""), "lease", (json_int_t)e->lease));
}

int ended_record_decode(const char *text, struct ended_record *e)
{
	*e = (struct ended_record){0};
	json_t *j = object(text);
	const char *op, *opid, *why, *took;
	json_int_t lease = 0;
	bool ok = j &&
		  json_unpack(j, "{s:s, s:i, s:s, s:s, s:s, s:I}", "operation", &op, "members", &e->members, "opid",
			      &opid, "why", &why, "took_part", &took, "lease", &lease) == 0 &&
		  e->members > 0 && keep(e->operation, sizeof(e->operation), op) &&
		  keep(e->opid, sizeof(e->opid), opid) && keep(e->why, sizeof(e->why), why) &&
		  (e->took_part = strdup(took));
	e->lease = (long long)lease;
	json_decref(j);
	if (ok)
		return 0;
	ended_record_free(e);
	return -1;
}

void ended_record_free(struct ended_record *e)
{
	free(e->took_part);
	e->took_part = NULL;
}
