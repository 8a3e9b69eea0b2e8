/* SPDX-License-Identifier: MIT */
/* One worker over several nodes (DESIGN.md §16): each node runs its own
 * command on its own tree, and the members meet in etcd under
 * /cusnap/groups/NAME/ so that none crosses its destructive boundary unless
 * every one of them is ready to.
 *
 *   members/MEMBER         each member's record, under its own lease (5 s, kept
 *                          alive while its cusnap runs): the operation, the
 *                          member count, the operation's id, its phase
 *   ops/OPID/decision      "go" or "abort: why", made once (create if absent):
 *                          whoever decides first decides for all
 *   ops/OPID/results/M     each member's outcome, under a lease of an hour
 *
 * The first member (by etcd's create revision) names the operation; one that
 * asks for another operation, more members, or comes once the decision is
 * made, is refused with nothing changed. A resume has no boundary: each
 * member resumes its own tree, and one that comes after the others finished
 * theirs (while they wait for its result) still resumes its own. Past the boundary nothing is undone:
 * the results say which members hold what. Atomicity is never claimed. */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/exitcodes.h"
#include "cusnap/fault.h"
#include "cusnap/ids.h"
#include "cusnap/json.h"
#include "etcd.h"
#include "group.h"
#include "node.h"

#define MEMBER_TTL_S 5
#define RESULT_TTL_S 3600
#define POLL_US 50000
/* How long a member tries to read the decision before it decides alone. */
#define DECISION_RETRY_MS 10000

struct group {
	struct boundary boundary; /* first: settings.boundary points here */
	struct group_spec spec;   /* (its strings the caller's, alive while g is) */
	const char *op;
	struct etcd e;
	char prefix[300]; /* /cusnap/groups/NAME/ */
	char member[256]; /* this member's name */
	char opid[ID_HEX_LEN + 1];
	int64_t lease, results_lease;
	struct keeper *keeper; /* the lease kept alive (NULL: not) */
	bool crossed;          /* the decision was "go" and this member crossed */
	char decided[600];     /* the decision when it was "abort" */
	char (*seen)[256];     /* the members seen at the boundary (at most --members) */
	size_t nseen;
};

/* Does op cross a destructive boundary that every member must be ready for? */
static bool has_boundary(const char *op)
{
	return strcmp(op, "resume") != 0;
}

static int group_fail(struct group *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int all_ready(struct group *g);

/* ---- keys and records ---- */

/* This member's record's key. */
static void member_key(const struct group *g, char *out, size_t len)
{
	snprintf(out, len, "%smembers/%s", g->prefix, g->member);
}

/* A key of this operation: ops/OPID/tail ("decision", "results/", "results/MEMBER"). */
static void op_key(const struct group *g, const char *tail, char *out, size_t len)
{
	snprintf(out, len, "%sops/%s/%s", g->prefix, g->opid, tail);
}

/* This member's record in its phase, as etcd keeps it (malloc'd; NULL: out
 * of memory). */
static char *member_text(const struct group *g, const char *phase)
{
	struct member_record m = {.members = g->spec.members,
				  .pid = (int)getpid(),
				  .names = (char *)g->spec.member_names};
	snprintf(m.operation, sizeof(m.operation), "%s", g->op);
	snprintf(m.opid, sizeof(m.opid), "%s", g->opid);
	snprintf(m.phase, sizeof(m.phase), "%s", phase);
	gethostname(m.host, sizeof(m.host) - 1);
	return member_record_encode(&m);
}

/* This member's record in its phase. 0, or -1 with why. */
static int put_member(struct group *g, const char *phase, char *why, size_t len)
{
	char key[600], *text = member_text(g, phase);
	member_key(g, key, sizeof(key));
	int rc = text ? etcd_put(&g->e, key, text, g->lease, why, len) : (snprintf(why, len, "out of memory"), -1);
	free(text);
	return rc;
}

/* The members' records, in the order they came (create revision). */
static int members(struct group *g, struct etcd_kv **kvs, size_t *n, char *why, size_t len)
{
	char prefix[400];
	snprintf(prefix, sizeof(prefix), "%smembers/", g->prefix);
	if (etcd_range(&g->e, prefix, kvs, n, why, len) < 0)
		return -1;
	*n = records_valid(g->spec.group, *kvs, *n); /* (the rest is ignored, said once) */
	for (size_t i = 1; i < *n; i++)              /* (a handful: insertion sort) */
		for (size_t k = i; k > 0 && (*kvs)[k].create_revision < (*kvs)[k - 1].create_revision; k--) {
			struct etcd_kv t = (*kvs)[k];
			(*kvs)[k] = (*kvs)[k - 1];
			(*kvs)[k - 1] = t;
		}
	return 0;
}

static const char *member_name(const struct group *g, const struct etcd_kv *kv)
{
	return kv->key + strlen(g->prefix) + strlen("members/");
}

/* Plain http:// with no authentication: anyone who can reach etcd can write
 * the group's records, and so steer its members across their boundaries. */
static void plain_http_warning(const struct group_spec *spec)
{
	if (strstr(spec->etcd, "http://") && !spec->auth.user)
		voice(VOICE_WARN,
		      "group %s: etcd over plain http:// without authentication: anyone who can reach it can steer "
		      "the group (https:// with --etcd-cacert, --etcd-cert/--etcd-key or --etcd-user keep strangers "
		      "out)",
		      spec->group);
}

/* ---- the decision ---- */

/* A decision record's value: 1 "go"; 0 an abort, -1 no record that reads,
 * each with its reason ("WHY (decided by member M)") into why when given. The
 * member that wrote it into by when given. */
static int decision_of(const char *value, char *why, size_t len, char *by, size_t bylen)
{
	struct decision_record d;
	int go = decision_record_decode(value, &d) < 0 ? -1 : d.go;
	/* (a reason longer than the caller keeps is cut) */
	if (why && go != 1 && snprintf(why, len, "%s (decided by member %s)", d.why, d.by) < 0)
		why[0] = '\0';
	if (by && snprintf(by, bylen, "%s", d.by) < 0)
		by[0] = '\0';
	return go;
}

/* Decide go or abort (why) unless someone decided first; then follow what is
 * decided: 0 go, -1 abort (why), -2 etcd not reached. */
static int decide(struct group *g, bool go, const char *reason, char *why, size_t len)
{
	char key[600], text[1200];
	op_key(g, "decision", key, sizeof(key));
	struct decision_record d = {.go = go};
	snprintf(d.why, sizeof(d.why), "%s", reason ? reason : "");
	snprintf(d.by, sizeof(d.by), "%s", g->member);
	char *value = decision_record_encode(&d);
	/* etcd lost now could split the group (another member may have read "go"):
	 * tried again within a bound before this member decides alone. */
	int bound = g->spec.timeout_ms < DECISION_RETRY_MS ? g->spec.timeout_ms : DECISION_RETRY_MS;
	struct etcd_kv kv;
	int got = -1;
	for (double t0 = now_ms(); got <= 0; usleep(4 * POLL_US)) {
		int made = value ? etcd_create(&g->e, key, value, g->results_lease, text, sizeof(text)) : -1;
		got = made < 0 ? -1 : etcd_get(&g->e, key, &kv, text, sizeof(text));
		if (got > 0 || !value || now_ms() - t0 > bound)
			break;
	}
	free(value);
	if (got <= 0) {
		snprintf(why, len,
			 "group %s: the decision cannot be read from etcd within %d ms (%s): this member undoes alone; "
			 "the group may be split if another member read \"go\"",
			 g->spec.group, bound, text);
		return -2;
	}
	char by[128];
	bool yes = decision_of(kv.value, text, sizeof(text), by, sizeof(by)) == 1;
	if (!yes)
		snprintf(why, len, "group %s: %s", g->spec.group, text);
	int ready = yes ? all_ready(g) : 1;
	for (double t0 = now_ms(); ready < 0 && now_ms() - t0 < bound; usleep(4 * POLL_US))
		ready = all_ready(g); /* (etcd lost for a moment: tried again within the bound) */
	if (yes && ready < 0)
		yes = false,
		snprintf(why, len,
			 "group %s: the decision says go, but etcd cannot be read within %d ms to check that "
			 "every member is ready: this member undoes alone; the group may be split",
			 g->spec.group, bound);
	else if (yes && !ready) /* a "go" this member cannot check: never followed */
		yes = false,
		snprintf(why, len,
			 "group %s: the decision says go (by member %s), but this member does not see every "
			 "member ready: not followed",
			 g->spec.group, by);
	free(kv.key);
	free(kv.value);
	return yes ? 0 : -1;
}

/* What the members' records say now: -1 with reason when the operation must
 * abort, 1 when all are ready, 0 when not yet. */
static int look(struct group *g, char seen[][256], size_t *nseen, char *reason, size_t len)
{
	struct etcd_kv *kvs;
	size_t n, ready = 0;
	char why[512];
	if (members(g, &kvs, &n, why, sizeof(why)) < 0)
		return 0; /* (etcd not reached: tried again until the deadline) */
	int rc = 0;
	for (size_t s = 0; s < *nseen && !rc; s++) {
		bool there = false;
		for (size_t i = 0; i < n && !there; i++)
			there = !strcmp(member_name(g, &kvs[i]), seen[s]);
		if (!there)
			rc = -1,
			snprintf(reason, len, "member %s is gone (its cusnap died, or lost etcd: its lease expired)",
				 seen[s]);
	}
	for (size_t i = 0; i < n && !rc; i++) {
		struct member_record m;
		const char *name = member_name(g, &kvs[i]);
		/* (with --members NAME,...: only the members named count) */
		if (member_record_decode(kvs[i].value, &m) == 0 && !strcmp(m.opid, g->opid) &&
		    (!g->spec.member_names[0] || name_listed(g->spec.member_names, name))) {
			const char *phase = m.phase;
			bool known = false;
			for (size_t s = 0; s < *nseen && !known; s++)
				known = !strcmp(seen[s], name);
			if (!known && *nseen < (size_t)g->spec.members)
				snprintf(seen[(*nseen)++], 256, "%s", name);
			ready += !strcmp(phase, "ready") || !strcmp(phase, "crossed") || !strcmp(phase, "done");
			if (!strcmp(phase, "failed"))
				rc = -1, snprintf(reason, len, "member %s failed", name);
		}
		member_record_free(&m);
	}
	etcd_kvs_free(kvs, n);
	return rc ? rc : ready >= (size_t)g->spec.members;
}

/* Does this member see every member of the operation ready (under a live
 * lease, named as --members says)? What a "go" is followed on: 1 yes, 0 no,
 * -1 etcd not reached (cannot tell). Whom it saw is recorded (g->seen), so
 * that a member that crosses on a decision it found at its first look still
 * knows whose results to wait for (no silent split). */
static int all_ready(struct group *g)
{
	char reason[300];
	struct etcd_kv *kvs;
	size_t n = 0;
	if (members(g, &kvs, &n, reason, sizeof(reason)) < 0)
		return -1;
	etcd_kvs_free(kvs, n);
	if (!g->seen && !(g->seen = calloc((size_t)g->spec.members, 256)))
		return 0;
	return look(g, g->seen, &g->nseen, reason, sizeof(reason)) == 1;
}

static int at_boundary(struct boundary *b, char *why, size_t len)
{
	struct group *g = (struct group *)b;
	char reason[1000] = "", err[512];
	if (!g->seen)
		g->seen = calloc((size_t)g->spec.members, 256);
	char(*seen)[256] = g->seen;
	bool warned = false;
	double start = now_ms();
	fault_point(FAULT_GROUP_READY);
	int rc = 0;
	if (!seen)
		rc = -1, snprintf(reason, sizeof(reason), "member %s: out of memory", g->member);
	else if (fault_fails(FAULT_GROUP_READY))
		rc = -1, snprintf(reason, sizeof(reason), "member %s failed at its boundary (CUSNAP_FAULT)", g->member);
	else if (put_member(g, "ready", err, sizeof(err)) < 0)
		rc = -1, snprintf(reason, sizeof(reason), "member %s cannot say it is ready: %s", g->member, err);
	fault_point(FAULT_GROUP_WAITING);
	while (rc == 0) {
		struct etcd_kv kv;
		char key[600];
		op_key(g, "decision", key, sizeof(key));
		if (etcd_get(&g->e, key, &kv, err, sizeof(err)) == 1) {
			bool go = decision_of(kv.value, NULL, 0, NULL, 0) == 1;
			free(kv.key), free(kv.value);
			if (!go || all_ready(g) != 0)
				break; /* decided: followed (or not) below */
			if (!warned)
				voice(VOICE_WARN,
				      "group %s: a decision \"go\" while not every member is ready: "
				      "not followed (written by whom?); waiting for the members",
				      g->spec.group);
			warned = true;
		}
		if (keeper_lost(g->keeper)) {
			rc = -1, snprintf(reason, sizeof(reason), "member %s lost its etcd lease", g->member);
			break;
		}
		if (signal_caught()) {
			/* SIGINT, SIGTERM, SIGHUP: this member undoes at once, and the others learn it
			 * as they learn of a failed member (the decision). */
			rc = -1, snprintf(reason, sizeof(reason), "member %s was interrupted by %s at the boundary",
					  g->member, strsignal(signal_caught()));
			break;
		}
		int seen_now = look(g, seen, &g->nseen, reason, sizeof(reason));
		if (seen_now) {
			rc = seen_now < 0 ? -1 : 0;
			break;
		}
		if (now_ms() - start > g->spec.timeout_ms) {
			rc = -1,
			snprintf(reason, sizeof(reason),
				 "%zu of %d members arrived within %d ms of member %s being ready; not every one "
				 "was ready",
				 g->nseen, g->spec.members, g->spec.timeout_ms, g->member);
			break;
		}
		usleep(POLL_US);
	}
	/* One decision for all: whatever was decided first stands. */
	int d = decide(g, rc == 0, reason, why, len);
	g->crossed = d == 0;
	if (d == 0) {
		put_member(g, "crossed", err, sizeof(err));
		progress("group", now_ms() - start, "%s: every one of the %d members ready: crossing", g->spec.group,
			 g->spec.members);
	} else {
		/* (the decision, or why it cannot be read: the end does not try again) */
		snprintf(g->decided, sizeof(g->decided), "%s", why);
		if (d == -1)
			put_member(g, "failed", err, sizeof(err));
	}
	return d == 0 ? 0 : -1;
}

/* ---- joining, and the end ---- */

static void stop_keeping(struct group *g)
{
	keeper_stop(g->keeper);
	g->keeper = NULL;
}

static void leave(struct group *g)
{
	char key[600], why[512];
	stop_keeping(g);
	free(g->seen);
	g->seen = NULL;
	if (g->lease) {
		member_key(g, key, sizeof(key));
		etcd_delete(&g->e, key, why, sizeof(why));
		etcd_lease_revoke(&g->e, g->lease, why, sizeof(why));
		g->lease = 0;
	}
	etcd_free(&g->e);
}

static int group_fail(struct group *g, int code, const char *fmt, ...)
{
	char msg[1400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	leave(g);
	return fail(code, "group %s: %s", g->spec.group, msg);
}

/* Operation opid ended undone before its boundary (why: the decision):
 * names added to those that took part in it (see ended_came_late), its record
 * under a lease of the group timeout. */
static void record_ended(struct group *g, const char *why, const char *names)
{
	struct ended_record e = {.members = g->spec.members};
	snprintf(e.operation, sizeof(e.operation), "%s", g->op);
	snprintf(e.opid, sizeof(e.opid), "%s", g->opid);
	snprintf(e.why, sizeof(e.why), "%s", why);
	int ttl = (g->spec.timeout_ms + 999) / 1000;
	ended_add(&g->e, &e, g->prefix, names, ttl < MEMBER_TTL_S ? MEMBER_TTL_S : ttl);
}

/* This member's operation undone before its boundary: every member that came
 * (the results, those seen, itself) recorded as having taken part. */
static void ended_here(struct group *g, const struct result_record *all, size_t nall)
{
	char key[600], err[512], why[1024];
	struct etcd_kv kv;
	op_key(g, "decision", key, sizeof(key));
	if (etcd_get(&g->e, key, &kv, err, sizeof(err)) != 1)
		return;
	int go = decision_of(kv.value, why, sizeof(why), NULL, 0);
	free(kv.key), free(kv.value);
	size_t cap = (nall + g->nseen + 1) * 258, at = 0;
	char *names = go == 0 ? calloc(1, cap) : NULL;
	for (size_t i = 0; names && i <= nall + g->nseen; i++) {
		const char *name = i < nall ? all[i].member : i < nall + g->nseen ? g->seen[i - nall] : g->member;
		at += (size_t)snprintf(names + at, cap - at, "%s%s", at ? "," : "", name);
	}
	if (names)
		record_ended(g, why, names);
	free(names);
}

/* Is this member's place in the operation the first member began (the
 * records in the order they came)? 0, or a refusal (reported, nothing changed). */
static int join(struct group *g, const struct etcd_kv *kvs, size_t n)
{
	struct member_record first = {0};
	if (n)
		member_record_decode(kvs[0].value, &first); /* (valid: records_valid kept it) */
	char from[256];
	snprintf(from, sizeof(from), "%s", n ? member_name(g, &kvs[0]) : "");
	snprintf(g->opid, sizeof(g->opid), "%s", first.opid);
	int rc = 0;
	if (strcmp(first.names ? first.names : "", g->spec.member_names) != 0)
		rc = group_fail(g, EX_BUSY,
				"another job uses this group name (its members: %s; begun by member %s): this one "
				"(%s) joins nothing; nothing done",
				first.names && first.names[0] ? first.names : "any", from,
				g->spec.member_names[0] ? g->spec.member_names : "any");
	else if (strcmp(first.operation, g->op) != 0 || first.members != g->spec.members)
		rc = group_fail(g, EX_BUSY, "busy with %s of %d members (begun by member %s); nothing done",
				first.operation, first.members, from);
	member_record_free(&first);
	if (rc)
		return rc;
	size_t place = 0, late = 0;
	for (size_t i = 0; i < n; i++) {
		struct member_record m;
		if (member_record_decode(kvs[i].value, &m) == 0)
			late += strcmp(m.phase, "arrived") != 0 && strcmp(m.phase, "ready") != 0;
		if (!strcmp(member_name(g, &kvs[i]), g->member))
			place = i;
		member_record_free(&m);
	}
	if (place >= (size_t)g->spec.members)
		return group_fail(g, EX_BUSY, "its %d members are there already (begun by member %s); nothing done",
				  g->spec.members, from);
	struct etcd_kv kv;
	char key[600], why[512];
	op_key(g, "decision", key, sizeof(key));
	int decided = etcd_get(&g->e, key, &kv, why, sizeof(why));
	char undone[800] = "";
	if (decided == 1) {
		/* Decided "undo" before this member came (one failed early): the
		 * group's operation failed, and this member says why. */
		if (decision_of(kv.value, undone, sizeof(undone), NULL, 0) != 0)
			undone[0] = '\0';
		free(kv.key), free(kv.value);
	}
	if (has_boundary(g->op) && undone[0]) {
		record_ended(g, undone, g->member); /* (told: it took part) */
		return group_fail(g, 1,
				  "its %s (begun by member %s) failed before this member came: %s; nothing done here",
				  g->op, from, undone);
	}
	if (has_boundary(g->op) && (late || decided == 1))
		return group_fail(g, EX_BUSY, "its %s (begun by member %s) is finishing; nothing done", g->op, from);
	/* Alone, with a name of its own: late for one that ended already? */
	char after[1400];
	if (has_boundary(g->op) && n == 1 && g->spec.member &&
	    ended_came_late(&g->e, g->prefix, g->op, g->spec.members, g->member, after, sizeof(after)))
		return group_fail(g, 1, "%s; nothing done here", after);
	return put_member(g, "arrived", why, sizeof(why)) < 0 ? group_fail(g, EX_UNAVAILABLE, "%s", why) : 0;
}

/* Meet the group in etcd before anything is done. 0, or an exit code
 * (reported, nothing changed): 69 etcd cannot be reached, 75 the group is busy. */
static int group_begin(struct group *g, const struct group_spec *spec, const char *op)
{
	char why[1024];
	g->spec = *spec;
	g->op = op;
	g->boundary.ready = at_boundary;
	snprintf(g->prefix, sizeof(g->prefix), "/cusnap/groups/%s/", spec->group);
	if (spec->member) {
		snprintf(g->member, sizeof(g->member), "%s", spec->member);
	} else {
		char host[200] = "";
		gethostname(host, sizeof(host) - 1);
		snprintf(g->member, sizeof(g->member), "%s:%s", host, spec->pid || !spec->dir ? "" : spec->dir);
		if (spec->pid)
			snprintf(g->member, sizeof(g->member), "%s:%d", host, (int)spec->pid);
	}
	if (spec->member_names[0] && !name_listed(spec->member_names, g->member))
		return fail(EX_USAGE, "--member %s is not one of --members %s; nothing done", g->member,
			    spec->member_names);
	struct cusnap_id id;
	id_random(&id);
	id_hex(&id, g->opid);
	if (etcd_global_init(why, sizeof(why)) < 0)
		return fail(EX_UNAVAILABLE, "group %s: %s; nothing done", spec->group, why);
	if (etcd_init(&g->e, spec->etcd, &spec->auth, 5000, why, sizeof(why)) < 0)
		return fail(EX_USAGE, "%s", why);
	plain_http_warning(spec);
	if (etcd_ping(&g->e, why, sizeof(why)) < 0 ||
	    etcd_lease_grant(&g->e, MEMBER_TTL_S, &g->lease, why, sizeof(why)) < 0 ||
	    etcd_lease_grant(&g->e, RESULT_TTL_S, &g->results_lease, why, sizeof(why)) < 0) {
		etcd_free(&g->e);
		return fail(EX_UNAVAILABLE, "group %s: %s%s; nothing done", spec->group, why, etcd_advice(why));
	}
	g->keeper = keeper_start(g->spec.etcd, &g->spec.auth, g->lease, spec->keeper_process);
	char *text = member_text(g, "arrived"), key[600];
	member_key(g, key, sizeof(key));
	int made = text ? etcd_create(&g->e, key, text, g->lease, why, sizeof(why)) : -1;
	free(text);
	if (made < 0)
		return group_fail(g, EX_UNAVAILABLE, "%s; nothing done", why);
	if (made == 0) {
		/* (the record is the other cusnap's: only the lease goes) */
		stop_keeping(g);
		etcd_lease_revoke(&g->e, g->lease, why, sizeof(why));
		g->lease = 0;
		return group_fail(g, EX_BUSY,
				  "member %s takes part already (another cusnap with the same --member?); nothing done",
				  g->member);
	}
	struct etcd_kv *kvs;
	size_t n;
	if (members(g, &kvs, &n, why, sizeof(why)) < 0)
		return group_fail(g, EX_UNAVAILABLE, "%s; nothing done", why);
	int rc = join(g, kvs, n);
	etcd_kvs_free(kvs, n);
	if (!rc)
		progress("group", 0, "%s: member %s of %d for %s (operation %.8s)", spec->group, g->member,
			 spec->members, op, g->opid);
	return rc;
}

/* Is every member of this operation still there done (its result written)?
 * (One that went away never writes one; one that never came neither.) */
static bool all_done(struct group *g)
{
	struct etcd_kv *kvs;
	size_t n, busy = 0;
	char why[512];
	if (members(g, &kvs, &n, why, sizeof(why)) < 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		struct member_record m;
		busy += member_record_decode(kvs[i].value, &m) == 0 && !strcmp(m.opid, g->opid) &&
			strcmp(m.phase, "done") != 0;
		member_record_free(&m);
	}
	etcd_kvs_free(kvs, n);
	return busy == 0;
}

/* Why results() stopped short of every member's result. */
enum short_of { RESULTS_WHOLE, RESULTS_TIMEOUT, RESULTS_ETCD_LOST, RESULTS_INTERRUPTED };

/* Every member's result, decoded once: all of them, or those of the members
 * that did not go away, within the group timeout (*short_of: why not all;
 * lost, why etcd could not be reached). How many, into *out (to free). */
static size_t results(struct group *g, enum short_of *short_of, char *lost, size_t lost_len, struct result_record **out)
{
	char prefix[600], why[512];
	op_key(g, "results/", prefix, sizeof(prefix));
	struct etcd_kv *kvs = NULL;
	size_t n = 0;
	*short_of = RESULTS_WHOLE;
	double lost_since = 0;
	int signals = signals_caught();
	for (double start = now_ms();; usleep(POLL_US)) {
		etcd_kvs_free(kvs, n);
		/* Whether every member is done or gone, asked before the results are
		 * read: each writes its result before it says it is done, so none is
		 * missed (asked after, a result written in between was, and this member
		 * said the group may be split, exit 2, on a busy machine). */
		bool done = all_done(g);
		bool reached = etcd_range(&g->e, prefix, &kvs, &n, why, sizeof(why)) == 0;
		if (!reached)
			kvs = NULL, n = 0, snprintf(lost, lost_len, "%s", why);
		lost_since = reached ? 0 : lost_since ? lost_since : now_ms();
		if (n >= (size_t)g->spec.members || done)
			break;
		/* (etcd lost for a while: nothing more will come; one that did not cross stops at once) */
		if (lost_since && (!g->crossed || now_ms() - lost_since > 5000)) {
			*short_of = RESULTS_ETCD_LOST;
			break;
		}
		if (now_ms() - start > g->spec.timeout_ms) {
			*short_of = RESULTS_TIMEOUT;
			break;
		}
		if (signals_caught() != signals) { /* (this member's result is written: it stops waiting) */
			*short_of = RESULTS_INTERRUPTED;
			break;
		}
	}
	size_t got = 0;
	*out = calloc(n ? n : 1, sizeof(**out));
	for (size_t i = 0; *out && i < n; i++)
		got += result_record_decode(kvs[i].value, &(*out)[got]) == 0;
	etcd_kvs_free(kvs, n);
	return got;
}

/* Is member's result among all[0..n)? */
static bool reported(const struct result_record *all, size_t n, const char *member)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(all[i].member, member))
			return true;
	return false;
}

/* One member's result, a line: ok (and whether it holds a checkpoint), or failed and why. */
static void say_result(const struct group *g, const char *member, int code, const char *error, bool holds)
{
	voice(code == 0 ? VOICE_INFO : VOICE_ERROR, "group %s: %s: member %s: %s%s%s%s", g->spec.group, g->op, member,
	      code == 0 ? "ok" : "failed", code == 0 ? "" : ": ", code == 0 ? "" : error,
	      holds ? " (it holds a checkpoint)" : "");
}

/* This member's outcome into etcd, every member's printed (--json: one
 * object on stdout), and the group left. Returns rc. */
static int group_end(struct group *g, int rc, bool boundary, bool json)
{
	char key[600], why[1024];
	const char *error = rc ? (g->decided[0] ? g->decided : report_error()) : "";
	if (boundary && !g->crossed && !g->decided[0]) {
		/* Failed before the boundary: every member undoes. */
		char reason[900];
		snprintf(reason, sizeof(reason), "member %s failed before the boundary: %s", g->member, error);
		decide(g, false, reason, why, sizeof(why));
		put_member(g, "failed", why, sizeof(why));
	}
	struct result_record mine = {.exit = rc,
				     .crossed = !boundary || g->crossed,
				     .holds_checkpoint = rc == 0 && !strcmp(g->op, "checkpoint"),
				     .time = (long long)time(NULL)};
	snprintf(mine.member, sizeof(mine.member), "%s", g->member);
	snprintf(mine.error, sizeof(mine.error), "%s", error);
	snprintf(mine.operation, sizeof(mine.operation), "%s", g->op);
	gethostname(mine.host, sizeof(mine.host) - 1);
	char *text = result_record_encode(&mine);
	char tail[sizeof("results/") - 1 + sizeof(g->member)]; /* fits the key whole */
	snprintf(tail, sizeof(tail), "results/%s", g->member);
	op_key(g, tail, key, sizeof(key));
	if (!text || etcd_put(&g->e, key, text, g->results_lease, why, sizeof(why)) < 0)
		voice(VOICE_WARN, "group %s: this member's result cannot be written: %s", g->spec.group,
		      text ? why : "out of memory");
	free(text);
	put_member(g, "done", why, sizeof(why));
	fault_point(FAULT_GROUP_DONE);
	enum short_of short_of;
	char lost[512] = "";
	struct result_record *all = NULL;
	size_t nall = results(g, &short_of, lost, sizeof(lost), &all), ok = 0;
	for (size_t i = 0; i < nall; i++) {
		ok += all[i].exit == 0;
		say_result(g, all[i].member, all[i].exit, all[i].error, all[i].holds_checkpoint);
	}
	if (!reported(all, nall, g->member)) /* (etcd lost: this member's own, as it knows it) */
		say_result(g, g->member, rc, error, false);
	char unknown[1024] = "";
	for (size_t s = 0, at = 0; g->crossed && rc == 0 && s < g->nseen && at < sizeof(unknown) - 260; s++)
		if (strcmp(g->seen[s], g->member) && !reported(all, nall, g->seen[s])) /* (this one knows its own) */
			at += (size_t)snprintf(unknown + at, sizeof(unknown) - at, "%s%s", at ? ", " : "", g->seen[s]);
	if (short_of == RESULTS_INTERRUPTED)
		voice(VOICE_ERROR,
		      "group %s: %s: interrupted by %s while waiting for the members' results (%zu of %d "
		      "read%s%s): this member's is written and stands; `cusnap inspect --group %s` for the others",
		      g->spec.group, g->op, strsignal(signal_caught()), nall, g->spec.members,
		      unknown[0] ? "; none yet from " : "", unknown, g->spec.group);
	else if (unknown[0]) {
		/* This member crossed; whether the others did cannot be confirmed. */
		voice(VOICE_ERROR,
		      "group %s: %s: the group may be split: this member crossed, but no result came from "
		      "member(s) %s (etcd lost, or they failed after the boundary): check them (`cusnap inspect "
		      "--group %s`)",
		      g->spec.group, g->op, unknown, g->spec.group);
		rc = EX_TERMINATED;
	} else if (nall < (size_t)g->spec.members && short_of == RESULTS_TIMEOUT)
		voice(VOICE_ERROR, "group %s: %s: %zu of %d members reported within %d ms", g->spec.group, g->op, nall,
		      g->spec.members, g->spec.timeout_ms);
	else if (short_of == RESULTS_ETCD_LOST)
		voice(VOICE_ERROR,
		      "group %s: %s: the members' results cannot be read (%s): this member's is above; "
		      "`cusnap inspect --group %s` once etcd is back",
		      g->spec.group, g->op, lost, g->spec.group);
	else if (nall < (size_t)g->spec.members)
		voice(VOICE_ERROR,
		      "group %s: %s: %zu of %d members reported; the others are no longer in the group "
		      "(their commands ended without a result, or were killed)",
		      g->spec.group, g->op, nall, g->spec.members);
	if (json) {
		json_t *members = json_array();
		for (size_t i = 0; members && i < nall; i++)
			json_array_append_new(members, result_record_json(&all[i]));
		json_emit(stdout, json_pack("{s:b, s:s, s:s, s:s, s:s, s:i, s:i, s:o}", "ok", rc == 0, "group",
					    g->spec.group, "operation", g->op, "opid", g->opid, "member", g->member,
					    "exit", rc, "members_ok", (int)ok, "members", members));
	}
	if (boundary && !g->crossed)
		ended_here(g, all, nall);
	free(all);
	leave(g);
	return rc;
}

struct group *group_join(const struct group_spec *spec, const char *op, int *code)
{
	if (!spec->members || !spec->etcd) {
		*code = fail(EX_USAGE, "--group needs --members N and --etcd URL[,URL...]");
		return NULL;
	}
	struct group *g = calloc(1, sizeof(*g));
	if (!g) {
		*code = fail(EX_SOFTWARE, "group %s: out of memory", spec->group);
		return NULL;
	}
	if ((*code = group_begin(g, spec, op)) != 0) {
		free(g);
		return NULL;
	}
	return g;
}

struct boundary *group_boundary(struct group *g)
{
	return has_boundary(g->op) ? &g->boundary : NULL;
}

bool group_crossed(const struct group *g)
{
	return g->crossed;
}

int group_leave(struct group *g, int rc, bool json)
{
	rc = group_end(g, rc, has_boundary(g->op), json);
	free(g);
	return rc;
}
