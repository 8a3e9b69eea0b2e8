/* SPDX-License-Identifier: MIT */
/* Prepare, restore and abort across participants (DESIGN.md §6), each a list of
 * stages run by one runner: it times every stage into the report's timings,
 * reports it through the caller's on_stage, and reaches the stage's fault point. Each stage is
 * a barrier across the participants (fanout.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "cusnap/fault.h"
#include "cusnap/proc.h"
#include "cusnap/request.h"
#include "cusnap/state.h"
#include "cusnap/wire.h"
#include "fanout.h"

const char *const coord_stage_key[COORD_STAGE_COUNT] = {
#define STAGE(id, key, label) [COORD_STAGE_##id] = key,
#include "stages.def"
#undef STAGE
};

const char *const coord_stage_label[COORD_STAGE_COUNT] = {
#define STAGE(id, key, label) [COORD_STAGE_##id] = label,
#include "stages.def"
#undef STAGE
};

/* What the stages of one lifecycle share. */
struct run {
	struct call *calls;
	struct coord_target *t;
	size_t n;
	const struct coord_options *o;
	struct coord_report *r;
	bool *sel;     /* who the stages address */
	bool *touched; /* prepare: who an abort must rebuild */
	bool *mc_sel;  /* who is sent the multicast steps */
	struct topo_participant *before, *now;
	bool have_now;            /* now[] holds the selected participants' records */
	bool tolerate;            /* abort: participants ACTIVE or gone are left out */
	struct state st;          /* restore: the state file */
	struct proto_buf req;     /* RESTORE_CREATORS' request (a device map, or none) */
	struct coord_holds holds; /* prepare: who carries what its creator let go */
	int dfd;                  /* o->dir, held: the state file and the content files reached through it */
	int dfd_errno;            /* why it could not be opened */
	int *files;               /* file content: each participant's file (-1: none) */
	bool files_known;         /* files[] is what prepare made: not looked for again */
	char note[256];           /* what the stage's progress line adds */
};

struct stage {
	enum coord_stage id;       /* its key and label: stages.def */
	int (*run)(struct run *x); /* 0 done, 1 nothing to do, -1 failed (r->error) */
	enum fault fault;          /* the fault point reached after it, or FAULT_NONE */
};

static void note(struct run *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct run *x, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->note, sizeof(x->note), fmt, ap);
	va_end(ap);
}

static void warn(struct run *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct run *x, const char *fmt, ...)
{
	char what[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (x->o->on_warning)
		x->o->on_warning(what);
}

static int run_stages(struct run *x, const struct stage *stages, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		const struct stage *s = &stages[i];
		double t0 = now_ms();
		x->note[0] = '\0';
		int rc = s->run(x);
		x->r->ms[s->id] += now_ms() - t0;
		if (rc < 0)
			return -1;
		if (rc > 0)
			continue;
		stage_progress(x->o, coord_stage_label[s->id], x->r->ms[s->id], "%s", x->note);
		fault_point(s->fault);
	}
	return 0;
}

/* A stage that sends op to the selected and needs nothing else. */
static int send_selected(struct run *x, uint16_t op, const struct proto_buf *req)
{
	long bad = fan_out(x->calls, x->t, x->n, x->sel, op, req ? req->data : NULL, req ? req->len : 0,
			   x->o->timeout_ms);
	if (bad >= 0) {
		stage_error(x->r, &x->calls[bad], proto_op_name(op));
		return -1;
	}
	return 0;
}

static int oom(struct run *x)
{
	snprintf(x->r->error, sizeof(x->r->error), "out of memory");
	return -1;
}

/* The record a request to the selected goes in: REC_RESULT while one of them
 * speaks 1.3 or older (request.h). Their records are in now[]. */
static uint16_t request_record(const struct run *x)
{
	uint32_t minor = PROTO_MINOR;
	for (size_t i = 0; i < x->n; i++)
		if (x->sel[i] && x->now[i].minor < minor)
			minor = x->now[i].minor;
	return req_record_type(minor);
}

/* ---- prepare ---- */

static int inspect_before(struct run *x)
{
	if (inspect_some(x->calls, x->t, x->n, NULL, x->o, x->before, x->r) >= 0)
		return -1;
	count_records(x->before, x->n, x->r);
	note(x, "%zu participants, %zu allocations (%zu shared), %zu mappings", x->n, x->r->allocations, x->r->shared,
	     x->r->mappings);
	return 0;
}

static int validate(struct run *x)
{
	char why[1800];
	if (coord_validate(x->t, x->before, x->n, &x->holds, why, sizeof(why)) < 0) {
		snprintf(x->r->error, sizeof(x->r->error), "validation: %s", why);
		return -1;
	}
	return 0;
}

/* QUIESCE: no tracked mutation from here on (the application's tracked calls
 * wait at each participant's gate). A workload that was not parked may have
 * changed its topology since it was validated: the topology it has now, which
 * can no longer change, is validated again and is what is prepared. */
static int quiesce(struct run *x)
{
	long bad = fan_out(x->calls, x->t, x->n, NULL, PROTO_OP_QUIESCE, NULL, 0, x->o->timeout_ms);
	for (size_t i = 0; i < x->n; i++) {
		/* A participant that refused (another command's, or one that cannot be
		 * quiesced) changed nothing; one that did not answer may have quiesced. */
		int st = x->calls[i].status;
		x->touched[i] = st == PROTO_OK || st == PROTO_E_IO || st == PROTO_E_TIMEOUT;
		if (x->touched[i])
			x->r->unchanged = false;
	}
	if (bad >= 0) {
		stage_error(x->r, &x->calls[bad], "QUIESCE");
		return -1;
	}
	/* Each participant's count of tracked changes as INSPECT saw it (1.8): the
	 * topology validated is the one to prepare, no INSPECT again. */
	bool same = true;
	for (size_t i = 0; i < x->n && same; i++) {
		uint64_t g = result_u64(&x->calls[i], F_GENERATION);
		same = g && g == x->before[i].generation;
	}
	if (same) { /* (the arrays swapped whole: the holds point into the records) */
		struct topo_participant *t = x->now;
		x->now = x->before;
		x->before = t;
		for (size_t i = 0; i < x->n; i++)
			x->now[i].phase = PROTO_PHASE_QUIESCED;
		return 0;
	}
	if (inspect_some(x->calls, x->t, x->n, NULL, x->o, x->now, x->r) >= 0)
		return -1;
	char why[1800] = "";
	size_t changed = 0;
	for (size_t i = 0; i < x->n; i++)
		changed += coord_compare(&x->before[i], &x->now[i], NULL, 0, why, sizeof(why)) < 0;
	if (!changed)
		return 0;
	free(x->holds.v);
	if (coord_validate(x->t, x->now, x->n, &x->holds, why, sizeof(why)) < 0) {
		snprintf(x->r->error, sizeof(x->r->error), "validation (of the topology at QUIESCE): %s", why);
		return -1;
	}
	count_records(x->now, x->n, x->r);
	note(x,
	     "%zu participant(s) changed before QUIESCE (not parked): now %zu allocations (%zu shared), %zu mappings, "
	     "validated again",
	     changed, x->r->allocations, x->r->shared, x->r->mappings);
	return 0;
}

/* Multicast teardown first, and a barrier: no process may still hold a
 * multicast object when any is checkpointed. */
static int prepare_multicast(struct run *x)
{
	long served = mc_select(x->now, x->t, x->n, NULL, x->mc_sel, x->r);
	if (served < 0)
		return -1;
	if (served == 0)
		return 1; /* no multicast object anywhere */
	long bad = fan_out(x->calls, x->t, x->n, x->mc_sel, PROTO_OP_PREPARE_MULTICAST, NULL, 0, x->o->timeout_ms);
	if (bad >= 0) {
		stage_error(x->r, &x->calls[bad], "PREPARE_MULTICAST");
		return -1;
	}
	note(x, "every multicast object released");
	return 0;
}

/* File content: every participant serves it, and has a file of its own made
 * beside the state file. */
static int make_files(struct run *x)
{
	for (size_t i = 0; i < x->n; i++) {
		if (x->now[i].minor < PROTO_MINOR_FILE) {
			snprintf(x->r->error, sizeof(x->r->error),
				 "participant %d (ns %d) speaks protocol %u.%u; file content needs %u.%u: nothing "
				 "prepared",
				 x->t[i].obs, x->t[i].ns, PROTO_MAJOR, x->now[i].minor, PROTO_MAJOR, PROTO_MINOR_FILE);
			return -1;
		}
	}
	if (content_files_create(x->dfd, x->o->dir, x->now, x->n, x->files, x->r->error, sizeof(x->r->error)) < 0)
		return -1;
	x->files_known = true;
	return 0;
}

static int prepare_unicast(struct run *x)
{
	bool file = x->o->content == PROTO_CONTENT_FILE;
	if (file && make_files(x) < 0)
		return -1;
	struct proto_buf b = {0};
	req_prepare_encode(&b, request_record(x), (enum proto_content)x->o->content, x->holds.v, x->holds.n);
	if (b.failed) {
		pbuf_free(&b);
		return oom(x);
	}
	long bad = fan_out_fds(x->calls, x->t, x->n, NULL, PROTO_OP_PREPARE, b.data, b.len, file ? x->files : NULL,
			       x->o->timeout_ms);
	pbuf_free(&b);
	if (file)
		content_files_trim(x->dfd, x->now, x->n, x->files);
	x->r->bytes = bytes_of(x->calls, x->n);
	char why[256];
	long big = bad < 0 && file ? content_files_oversize(x->now, x->n, x->files, why, sizeof(why)) : -1;
	if (big >= 0) { /* (a workload that wrote through the descriptor it was lent: refused, undone) */
		snprintf(x->calls[big].err, sizeof(x->calls[big].err), "%s", why);
		x->calls[big].status = PROTO_E_MALFORMED;
		bad = big;
	}
	if (bad >= 0) {
		stage_error(x->r, &x->calls[bad], "PREPARE");
		return -1;
	}
	if (file)
		content_files_digests(x->calls, x->now, x->n, x->files, x->o->content_digests);
	note(x, "%" PRIu64 " bytes copied (%s content)%s", x->r->bytes, proto_content_name((uint32_t)x->o->content),
	     x->holds.n ? ", importers carry what their creators let go" : "");
	return 0;
}

/* The state file, atomically, from the records as they were answered after
 * PREPARE; only then may the caller checkpoint. */
static int write_state(struct run *x)
{
	struct state st = {.created = (uint64_t)time(NULL), .content = (uint32_t)x->o->content, .n = x->n};
	st.p = calloc(x->n ? x->n : 1, sizeof(*st.p));
	if (!st.p)
		return oom(x);
	int rc = -1;
	if (inspect_some(x->calls, x->t, x->n, NULL, x->o, x->now, x->r) < 0) {
		for (size_t i = 0; i < x->n; i++) {
			st.p[i].id = x->now[i].id;
			st.p[i].nspid = (uint32_t)x->t[i].ns;
			st.p[i].obs = (uint32_t)x->t[i].obs;
			st.p[i].stream = x->calls[i].reply_payload;
			st.p[i].len = x->calls[i].reply.payload_len;
		}
		char why[1800];
		rc = state_write(x->dfd, x->o->dir, &st, why, sizeof(why));
		if (rc < 0)
			snprintf(x->r->error, sizeof(x->r->error), "%s", why);
		else
			note(x, "%s/" STATE_FILE, x->o->dir);
	}
	free(st.p);
	return rc < 0 ? -1 : 0;
}

static const struct stage prepare_stages[] = {
	{COORD_STAGE_INSPECT, inspect_before, FAULT_NONE},
	{COORD_STAGE_VALIDATE, validate, FAULT_NONE},
	{COORD_STAGE_QUIESCE, quiesce, FAULT_KILL_AFTER_QUIESCE},
	{COORD_STAGE_PREPARE_MULTICAST, prepare_multicast, FAULT_KILL_AFTER_PREPARE_MULTICAST},
	{COORD_STAGE_PREPARE, prepare_unicast, FAULT_KILL_AFTER_PREPARE},
	{COORD_STAGE_STATE, write_state, FAULT_KILL_AFTER_STATE},
};

/* ---- restore and abort ---- */

/* The participants must be exactly those the state file records. */
static int match_state(struct run *x)
{
	if (inspect_some(x->calls, x->t, x->n, NULL, x->o, x->now, x->r) >= 0)
		return -1;
	x->have_now = true;
	count_records(x->now, x->n, x->r);
	if (x->st.n != x->n) {
		snprintf(x->r->error, sizeof(x->r->error), "the state file records %zu participants, %zu were given",
			 x->st.n, x->n);
		return -1;
	}
	for (size_t i = 0; i < x->n; i++) {
		bool found = false;
		for (size_t j = 0; j < x->st.n && !found; j++)
			found = id_equal(&x->st.p[j].id, &x->now[i].id);
		if (!found) {
			char hex[ID_HEX_LEN + 1];
			id_hex(&x->now[i].id, hex);
			snprintf(x->r->error, sizeof(x->r->error),
				 "participant %d (ns %d): id %s is not in the state file", x->t[i].obs, x->t[i].ns,
				 hex);
			return -1;
		}
	}
	note(x, "%zu participants match the state file", x->n);
	return 0;
}

/* The file of file content of each selected participant that has one in the
 * state directory, to go with RESTORE_CREATORS (a restore knows who they are;
 * an abort asks, and one that does not answer gets none). */
static void find_files(struct run *x)
{
	if (x->files_known || !x->o->dir)
		return;
	for (size_t i = 0; i < x->n; i++) {
		if (!x->sel[i] || x->files[i] >= 0)
			continue;
		struct topo_participant p = {0};
		char err[64];
		const struct topo_participant *who = x->have_now ? &x->now[i] : &p;
		if (!x->have_now && coord_inspect(&x->t[i], x->o->timeout_ms, &p, err, sizeof(err)) != 0)
			continue;
		if (who->minor >= PROTO_MINOR_FILE) /* (an older shim takes no descriptor) */
			x->files[i] = content_file_open(x->dfd, &who->id);
		topo_free(&p);
	}
}

/* RESTORE_CREATORS with the request (a device map, or nothing). In an abort a
 * participant already ACTIVE (never touched) has nothing to rebuild, and one
 * that is gone (its endpoint refuses connections) cannot be rebuilt: both are
 * left out of the stages that follow. */
static int restore_creators(struct run *x)
{
	/* GPUs remapped by the native restore: the shims translate their records. */
	pbuf_free(&x->req);
	if (x->o->device_map_len) {
		req_device_map_encode(&x->req, request_record(x), x->o->device_map, x->o->device_map_len);
		if (x->req.failed)
			return oom(x);
	}
	find_files(x);
	fan_out_fds(x->calls, x->t, x->n, x->sel, PROTO_OP_RESTORE_CREATORS, x->req.data, x->req.len, x->files,
		    x->o->timeout_ms);
	for (size_t i = 0; x->tolerate && i < x->n; i++) {
		struct call *c = &x->calls[i];
		if (x->sel[i] && c->status == PROTO_E_PHASE &&
		    coord_reply_phase(c->reply_payload, c->reply.payload_len) == PROTO_PHASE_ACTIVE)
			x->sel[i] = false, c->status = PROTO_OK;
		if (x->sel[i] && c->status == PROTO_E_IO && proc_gone(x->t[i].obs)) {
			warn(x, "participant %d (ns %d) is gone: not rebuilt", x->t[i].obs, x->t[i].ns);
			x->sel[i] = false, c->status = PROTO_OK;
		}
	}
	x->r->bytes += bytes_of(x->calls, x->n);
	for (size_t i = 0; i < x->n; i++) {
		if (x->calls[i].status != PROTO_OK) {
			stage_error(x->r, &x->calls[i], "RESTORE_CREATORS");
			return -1;
		}
	}
	if (!x->tolerate)
		note(x, "%" PRIu64 " bytes copied back", x->r->bytes);
	return 0;
}

static int restore_importers(struct run *x)
{
	return send_selected(x, PROTO_OP_RESTORE_IMPORTERS, NULL);
}

/* Multicast objects taken down anywhere among the selected are made anew, in
 * three steps, each a barrier. A restore uses the records it took before
 * RESTORE_CREATORS (the unicast steps do not change them); an abort takes them. */
static int restore_multicast(struct run *x)
{
	if (!x->have_now && inspect_some(x->calls, x->t, x->n, x->sel, x->o, x->now, x->r) >= 0)
		return -1;
	long served = mc_select(x->now, x->t, x->n, x->sel, x->mc_sel, x->r);
	if (served < 0)
		return -1;
	struct proto_buf req = {0};
	size_t wanted = served ? mc_rebuild_request(x->now, x->n, x->sel, request_record(x), &req) : 0;
	int rc = wanted ? 0 : 1;
	if (req.failed)
		rc = oom(x);
	static const uint16_t ops[] = {PROTO_OP_RESTORE_MULTICAST, PROTO_OP_RESTORE_MULTICAST_IMPORT,
				       PROTO_OP_RESTORE_MULTICAST_BIND};
	for (size_t s = 0; rc == 0 && s < sizeof(ops) / sizeof(ops[0]); s++) {
		double t0 = now_ms();
		long bad = fan_out(x->calls, x->t, x->n, x->mc_sel, ops[s], req.data, req.len, x->o->timeout_ms);
		if (bad >= 0) {
			stage_error(x->r, &x->calls[bad], proto_op_name(ops[s]));
			rc = -1;
		} else {
			stage_progress(x->o, proto_op_name(ops[s]), now_ms() - t0, "%s", "");
		}
	}
	pbuf_free(&req);
	return rc == 0 ? 1 : rc; /* (each step printed its own line) */
}

/* The topology after the rebuild is the one the state file records. */
static int compare_state(struct run *x)
{
	if (inspect_some(x->calls, x->t, x->n, NULL, x->o, x->now, x->r) >= 0)
		return -1;
	for (size_t i = 0; i < x->n; i++) {
		const struct state_participant *rec = NULL;
		for (size_t j = 0; j < x->st.n && !rec; j++)
			if (id_equal(&x->st.p[j].id, &x->now[i].id))
				rec = &x->st.p[j];
		char why[1800];
		if (!rec || coord_compare(&rec->topo, &x->now[i], x->o->device_map, x->o->device_map_len, why,
					  sizeof(why)) < 0) {
			snprintf(x->r->error, sizeof(x->r->error), "participant %d (ns %d): topology after restore: %s",
				 x->t[i].obs, x->t[i].ns, rec ? why : "not in the state file");
			return -1;
		}
	}
	note(x, "topology identical to the state file");
	return 0;
}

static int resume(struct run *x)
{
	return send_selected(x, PROTO_OP_RESUME, NULL);
}

static const struct stage restore_stages[] = {
	{COORD_STAGE_INSPECT, match_state, FAULT_NONE},
	{COORD_STAGE_RESTORE_CREATORS, restore_creators, FAULT_KILL_AFTER_RESTORE_CREATORS},
	{COORD_STAGE_RESTORE_IMPORTERS, restore_importers, FAULT_KILL_AFTER_RESTORE_IMPORTERS},
	{COORD_STAGE_RESTORE_MULTICAST, restore_multicast, FAULT_NONE},
	{COORD_STAGE_COMPARE, compare_state, FAULT_NONE},
	{COORD_STAGE_RESUME, resume, FAULT_NONE},
};

/* An abort: the selected participants rebuilt and resumed, whatever phase each reached. */
static const struct stage abort_stages[] = {
	{COORD_STAGE_RESTORE_CREATORS, restore_creators, FAULT_NONE},
	{COORD_STAGE_RESTORE_IMPORTERS, restore_importers, FAULT_NONE},
	{COORD_STAGE_RESTORE_MULTICAST, restore_multicast, FAULT_NONE},
	{COORD_STAGE_RESUME, resume, FAULT_NONE},
};

/* ---- the three lifecycles ---- */

static int run_begin(struct run *x, struct coord_target *t, size_t n, const struct coord_options *o,
		     struct coord_report *r, const char *op)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->op, sizeof(r->op), "%s", op);
	size_t m = n ? n : 1;
	*x = (struct run){.t = t, .n = n, .o = o, .r = r, .dfd = -1};
	/* (the caller's handle when it has one, else the path opened once: a link
	 * there refused where files are made in it, followed where it is read, as
	 * the path named by whoever restores) */
	int follow = strcmp(op, "restore") ? O_NOFOLLOW : 0;
	if (o->dirfd > 0)
		x->dfd = fcntl(o->dirfd, F_DUPFD_CLOEXEC, 0);
	else if (o->dir)
		x->dfd = open(o->dir, O_RDONLY | O_DIRECTORY | follow | O_CLOEXEC);
	x->dfd_errno = x->dfd >= 0 ? 0 : o->dir && errno ? errno : ENOENT;
	x->calls = calloc(m, sizeof(*x->calls));
	x->before = calloc(m, sizeof(*x->before));
	x->now = calloc(m, sizeof(*x->now));
	x->sel = calloc(m, sizeof(*x->sel));
	x->touched = calloc(m, sizeof(*x->touched));
	x->mc_sel = calloc(m, sizeof(*x->mc_sel));
	x->files = calloc(m, sizeof(*x->files));
	for (size_t i = 0; x->files && i < n; i++)
		x->files[i] = -1; /* (before anything can close them) */
	if (!x->calls || !x->before || !x->now || !x->sel || !x->touched || !x->mc_sel || !x->files)
		return oom(x);
	for (size_t i = 0; i < n; i++)
		x->sel[i] = true;
	return 0;
}

static void run_end(struct run *x)
{
	for (size_t i = 0; i < x->n && x->before && x->now; i++) {
		topo_free(&x->before[i]);
		topo_free(&x->now[i]);
	}
	free(x->before);
	free(x->now);
	free(x->sel);
	free(x->touched);
	free(x->mc_sel);
	if (x->files)
		content_files_close(x->files, x->n);
	free(x->files);
	if (x->dfd >= 0)
		close(x->dfd);
	free_calls(x->calls, x->n);
	pbuf_free(&x->req);
	free(x->holds.v);
}

static int abort_selected(struct run *x)
{
	x->tolerate = true;
	x->have_now = false;
	return run_stages(x, abort_stages, sizeof(abort_stages) / sizeof(abort_stages[0]));
}

int coord_prepare(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	double start = now_ms();
	struct run x;
	int rc = run_begin(&x, t, n, o, r, "prepare");
	r->unchanged = true;
	if (rc == 0)
		rc = run_stages(&x, prepare_stages, sizeof(prepare_stages) / sizeof(prepare_stages[0]));
	if (rc < 0 && !r->unchanged) {
		/* Nothing half-prepared survives: rebuild every touched participant,
		 * timed in a report of its own. */
		struct coord_report ar = {0};
		char saved[1200];
		snprintf(saved, sizeof(saved), "%.1150s", r->error);
		memcpy(x.sel, x.touched, n * sizeof(*x.sel));
		x.files_known = x.files_known || o->content != PROTO_CONTENT_FILE; /* (none to look for) */
		x.r = &ar;
		struct coord_options undo = *o;
		undo.timeout_ms = coord_undo_timeout_ms(o->timeout_ms);
		x.o = &undo;
		if (abort_selected(&x) == 0) {
			r->aborted = true;
			snprintf(r->error, sizeof(r->error), "%.1100s (every participant was rebuilt and resumed)",
				 saved);
		} else {
			snprintf(r->error, sizeof(r->error), "%.1100s; the abort failed too: %.800s", saved, ar.error);
		}
	}
	run_end(&x);
	r->ms_total = now_ms() - start;
	return rc;
}

int coord_restore(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	double start = now_ms();
	struct run x;
	int rc = run_begin(&x, t, n, o, r, "restore");
	char path[4200], why[1800];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, o->dir);
	int src = rc == 0 ? x.dfd >= 0 ? state_read_at(x.dfd, o->dir, &x.st, why, sizeof(why)) : -x.dfd_errno : 0;
	if (src < 0 && x.dfd < 0)
		snprintf(why, sizeof(why), "%s: %s", o->dir ? o->dir : "(no state directory)", strerror(-src));
	if (rc == 0 && src == -ENOENT && !o->require_state) {
		r->nothing_to_do = true;
		stage_progress(o, "state file", 0, "%s does not exist: nothing was prepared, nothing to restore", path);
		run_end(&x);
		return 0;
	}
	if (rc == 0 && src < 0) {
		r->state_unreadable = src != -ENOENT;
		snprintf(r->error, sizeof(r->error), "%s%s", why, src == -ENOENT ? " (--require-state)" : "");
		run_end(&x);
		return -1;
	}
	if (rc == 0)
		rc = run_stages(&x, restore_stages, sizeof(restore_stages) / sizeof(restore_stages[0]));
	if (src == 0)
		state_free(&x.st);
	run_end(&x);
	r->ms_total = now_ms() - start;
	return rc;
}

int coord_undo_timeout_ms(int timeout_ms)
{
	long long ms = 4LL * timeout_ms;
	return ms < 10000 ? 10000 : ms > INT_MAX ? INT_MAX : (int)ms;
}

int coord_abort(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	double start = now_ms();
	struct run x;
	int rc = run_begin(&x, t, n, o, r, "abort");
	if (rc == 0)
		rc = abort_selected(&x);
	run_end(&x);
	r->ms_total = now_ms() - start;
	return rc;
}

json_t *coord_report_json(const struct coord_report *r)
{
	json_t *timings = json_object();
	for (int s = 0; s < COORD_STAGE_COUNT; s++)
		json_object_set_new(timings, coord_stage_key[s], json_real(r->ms[s]));
	json_object_set_new(timings, "total", json_real(r->ms_total));
	json_t *j = json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:o}", "operation", r->op, "ok",
			      !r->error[0], "participants", (json_int_t)r->participants, "allocations",
			      (json_int_t)r->allocations, "shared", (json_int_t)r->shared, "mappings",
			      (json_int_t)r->mappings, "records",
			      (json_int_t)(r->participants + r->allocations + r->mappings), "bytes_copied",
			      (json_int_t)r->bytes, "nothing_to_do", r->nothing_to_do, "aborted", r->aborted,
			      "timings_ms", timings);
	if (j && r->error[0])
		json_object_set_new(j, "error", json_text(r->error));
	return j;
}
