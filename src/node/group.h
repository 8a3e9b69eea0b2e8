/* SPDX-License-Identifier: MIT */
/* One worker over several nodes (DESIGN.md §16): each node's command, cusnap's
 * or the CRIU plugin's, one member of a group that meets in etcd so that no
 * member crosses its destructive boundary unless every one is ready to. */
#ifndef CUSNAP_NODE_GROUP_H
#define CUSNAP_NODE_GROUP_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

#include "cusnap/ids.h"
#include "etcd.h"

struct boundary;

/* ---- group.c: a member's part ---- */
/* What makes a command a member (the tool's --group options, the plugin's
 * keys of the same names). */
struct group_spec {
	const char *group;       /* NULL: no group */
	int members;             /* how many nodes' commands meet */
	char member_names[2048]; /* NAME,NAME,... sorted ("": any members) */
	const char *member;      /* this node's name (NULL: HOST:PID, or HOST:DIR without a PID) */
	const char *etcd;        /* URL[,URL...] */
	struct etcd_auth auth;
	int timeout_ms;      /* how long the members wait for each other */
	pid_t pid;           /* the tree's root, for the default name */
	const char *dir;     /* the checkpoint, for the default name of a restore */
	bool keeper_process; /* the lease kept alive by a process, not a thread (the plugin: CRIU stays one thread) */
};
struct group;
struct settings;
/* The spec the settings give (group, members, member, etcd, etcd-cacert,
 * etcd-cert, etcd-key, etcd-user, etcd-password-file, group-timeout; its
 * strings are the settings', alive as long as they are), for the tree of pid
 * or the checkpoint dir: 1 a group, 0 none asked, -1 with why (a setting
 * missing or malformed, named as the tool spells it). */
int group_spec_from(const struct settings *s, pid_t pid, const char *dir, struct group_spec *spec, char *why,
		    size_t len);
/* Meet the group in etcd for operation op ("suspend", "checkpoint", "restore",
 * "resume") before anything is done: the member, or NULL with *code (said): 64
 * a bad spec, 69 etcd cannot be reached, 75 the group is busy, 1 the
 * operation failed before this member came. */
struct group *group_join(const struct group_spec *spec, const char *op, int *code);
/* What the node library calls at the boundary (settings.boundary); NULL for
 * an operation that has none (resume). */
struct boundary *group_boundary(struct group *g);
/* Did this member cross (the decision was "go")? */
bool group_crossed(const struct group *g);
/* This member's outcome (its command's exit code rc) into etcd, every
 * member's said (json: one object on stdout too), the group left and g freed.
 * Returns rc, or 2 when this member crossed and the group may be split. */
int group_leave(struct group *g, int rc, bool json);

/* ---- group_keeper.c: a member's lease kept alive while it takes part ---- */
struct keeper;
/* Keep lease alive (etcd at etcd, with auth; both the caller's, alive while
 * it is) from now: on a thread, or by a process of its own (in_process). NULL
 * when it cannot start. */
struct keeper *keeper_start(const char *etcd, const struct etcd_auth *auth, int64_t lease, bool in_process);
/* Has etcd said the lease is gone? */
bool keeper_lost(const struct keeper *k);
/* Stop keeping it (NULL: nothing), k freed. */
void keeper_stop(struct keeper *k);

/* ---- group_codec.c: the group's records in etcd, written and read in one shape ---- */
/* members/NAME: a member in its phase (arrived, ready, crossed, failed, done). */
struct member_record {
	char operation[32];
	int members; /* --members */
	char opid[ID_HEX_LEN + 1];
	char phase[16];
	char host[256]; /* "" in a record of a member before this codec */
	int pid;
	char *names; /* --members NAME,NAME,...; "" when any N (member_record_free) */
};
/* ops/OPID/decision: go, or abort with why; by whom. */
struct decision_record {
	bool go;
	char why[1024];
	char by[256];
};
/* ops/OPID/results/NAME: how a member's command ended. */
struct result_record {
	char member[256];
	int exit;
	bool crossed, holds_checkpoint;
	char error[2048];
	char operation[32];
	char host[256];
	long long time; /* seconds since the epoch */
};
/* ended: the last operation that was undone before its boundary, under a
 * lease of the group timeout (lease), so that a member that comes late for it
 * is told at once instead of beginning another and waiting for the others. */
struct ended_record {
	char operation[32];
	int members;
	char opid[ID_HEX_LEN + 1];
	char why[1024];  /* the decision, as its members said it */
	char *took_part; /* NAME,NAME,...: the members that came (ended_record_free) */
	long long lease;
};
/* Each as JSON (NULL: out of memory), as the text etcd keeps (malloc'd;
 * NULL: out of memory), and from that text: 0, or -1 when it is not one. */
json_t *member_record_json(const struct member_record *m);
char *member_record_encode(const struct member_record *m);
int member_record_decode(const char *text, struct member_record *m);
void member_record_free(struct member_record *m);
json_t *decision_record_json(const struct decision_record *d);
char *decision_record_encode(const struct decision_record *d);
int decision_record_decode(const char *text, struct decision_record *d);
json_t *result_record_json(const struct result_record *r);
char *result_record_encode(const struct result_record *r);
int result_record_decode(const char *text, struct result_record *r);
char *ended_record_encode(const struct ended_record *e);
int ended_record_decode(const char *text, struct ended_record *e);
void ended_record_free(struct ended_record *e);

/* ---- group_records.c: what a member trusts of the group's records ---- */
/* Is kv a member's record (it parses as one, and a lease keeps it)? When not
 * and warn, said once, with how to clear it. */
bool record_valid(const char *group, const struct etcd_kv *kv, bool warn);
/* The valid records of kvs[0..n) kept in order at the front (the others freed,
 * each warned about once): how many. */
size_t records_valid(const char *group, struct etcd_kv *kvs, size_t n);
/* Is name one of the comma-separated list (--members NAME,NAME,...)? */
bool name_listed(const char *list, const char *name);
/* names (NAME,NAME,...) added to those that took part in the ended record of
 * op's operation (prefix: /cusnap/groups/NAME/): made from op (its operation,
 * members, opid and why) under a lease of ttl_s seconds when the record there
 * is of another operation, or none. */
void ended_add(struct etcd *e, const struct ended_record *op, const char *prefix, const char *names, int ttl_s);
/* Did member come late for op of members that ended undone (the ended record
 * says so, and it took no part)? Then why says what was decided, and it is
 * counted as having taken part (told once: its next try begins anew): true. */
bool ended_came_late(struct etcd *e, const char *prefix, const char *op, int members, const char *member, char *why,
		     size_t len);

#endif
