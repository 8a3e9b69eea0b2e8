/* SPDX-License-Identifier: MIT */
/* Prepare, restore and abort across participants (SYSTEM.md §6): each stage fans
 * out to every participant at once, each request under its own deadline, and
 * the next stage starts only when all have answered (the barrier). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cusnap/coord.h"
#include "cusnap/json.h"
#include "cusnap/hmap.h"
#include "cusnap/wire.h"

struct call {
	const struct coord_target *t;
	uint16_t op;
	const uint8_t *payload;
	size_t len;
	int timeout_ms;
	/* results */
	int status;
	struct proto_header reply;
	uint8_t *reply_payload;
	char err[1200];
};

static void *run_call(void *arg)
{
	struct call *c = arg;
	c->status = coord_request(c->t->endpoint, c->op, c->payload, c->len, c->timeout_ms, &c->reply,
				  &c->reply_payload, c->err, sizeof(c->err));
	return NULL;
}

/* One stage: op to each selected participant at once; waits for all. Returns
 * the index of the first failure or -1; calls[] keeps every result. */
static long fan_out(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
		    const uint8_t *payload, size_t len, int timeout_ms)
{
	pthread_t *th = calloc(n ? n : 1, sizeof(*th));
	bool *started = calloc(n ? n : 1, sizeof(*started));
	for (size_t i = 0; i < n; i++) {
		free(calls[i].reply_payload);
		calls[i] = (struct call){.t = &t[i],
					 .op = op,
					 .payload = payload,
					 .len = len,
					 .timeout_ms = timeout_ms,
					 .status = PROTO_OK};
		if (selected && !selected[i])
			continue;
		if (!th || !started || pthread_create(&th[i], NULL, run_call, &calls[i]) != 0)
			run_call(&calls[i]); /* no thread: do it here */
		else
			started[i] = true;
	}
	long first = -1;
	for (size_t i = 0; i < n; i++) {
		if (started && started[i])
			pthread_join(th[i], NULL);
		if (calls[i].status != PROTO_OK && first < 0)
			first = (long)i;
	}
	free(th);
	free(started);
	return first;
}

static void free_calls(struct call *calls, size_t n)
{
	for (size_t i = 0; calls && i < n; i++)
		free(calls[i].reply_payload);
	free(calls);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void progress(const struct coord_options *o, const char *stage, double ms, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void progress(const struct coord_options *o, const char *stage, double ms, const char *fmt, ...)
{
	if (!o->progress)
		return;
	char extra[256] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	fprintf(o->progress, "snapshot-cuda-vmm: %-24s %8.1f ms%s%s\n", stage, ms, extra[0] ? "  " : "", extra);
	fflush(o->progress);
}

/* Sum of F_BYTES over lifecycle results. */
static uint64_t bytes_of(const struct call *calls, size_t n)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		struct proto_field_iter it;
		struct proto_rec f;
		uint64_t b;
		pfield_init(&it, calls[i].reply_payload, calls[i].reply_payload ? calls[i].reply.payload_len : 0,
			    REC_RESULT);
		while (pfield_next(&it, &f))
			if (f.type == F_BYTES && prec_u64(&f, &b) == 0)
				total += b;
	}
	return total;
}

static void stage_error(struct coord_report *r, const struct call *c, const char *stage)
{
	snprintf(r->error, sizeof(r->error), "%s: participant %d (ns %d): %s", stage, c->t->obs, c->t->ns, c->err);
}

/* INSPECT everyone into p[] (and the raw records into raw[] when given). */
static long inspect_some(struct call *calls, struct coord_target *t, size_t n, const bool *sel,
			 const struct coord_options *o, struct topo_participant *p, struct coord_report *r)
{
	long bad = fan_out(calls, t, n, sel, PROTO_OP_INSPECT, NULL, 0, o->timeout_ms);
	if (bad >= 0) {
		stage_error(r, &calls[bad], "INSPECT");
		return bad;
	}
	for (size_t i = 0; i < n; i++) {
		topo_free(&p[i]);
		if (sel && !sel[i])
			continue;
		int rc = topo_decode(calls[i].reply_payload, calls[i].reply.payload_len, &p[i]);
		if (rc) {
			snprintf(r->error, sizeof(r->error), "INSPECT: participant %d (ns %d): reply: %s", t[i].obs,
				 t[i].ns, proto_status_name(rc));
			return (long)i;
		}
		if (p[i].major_min > PROTO_MAJOR || p[i].major_max < PROTO_MAJOR) {
			snprintf(r->error, sizeof(r->error),
				 "INSPECT: participant %d (ns %d) speaks protocol %u-%u.%u; this tool speaks %u.%u",
				 t[i].obs, t[i].ns, p[i].major_min, p[i].major_max, p[i].minor, PROTO_MAJOR,
				 PROTO_MINOR);
			return (long)i;
		}
		if ((int)p[i].nspid != t[i].ns) {
			snprintf(r->error, sizeof(r->error),
				 "INSPECT: participant %d (ns %d): the endpoint answers as namespace PID %u", t[i].obs,
				 t[i].ns, p[i].nspid);
			return (long)i;
		}
	}
	return -1;
}

static long inspect_all(struct call *calls, struct coord_target *t, size_t n, const struct coord_options *o,
			struct topo_participant *p, struct coord_report *r)
{
	return inspect_some(calls, t, n, NULL, o, p, r);
}

/* ---- multicast (SYSTEM.md §8) ---- */

/* Who among sel (NULL: all) is sent the multicast steps: the participants
 * that serve them (PROTO_CAP_MULTICAST), into out[]. Returns how many, or -1
 * with r->error when one holds multicast objects but does not serve them. */
static long mc_select(const struct topo_participant *p, const struct coord_target *t, size_t n, const bool *sel,
		      bool *out, struct coord_report *r)
{
	long count = 0;
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		bool served = (!sel || sel[i]) && (p[i].caps & PROTO_CAP_MULTICAST);
		if ((!sel || sel[i]) && p[i].nmcs && !served) {
			snprintf(r->error, sizeof(r->error),
				 "participant %d (ns %d) holds multicast objects but its shim (protocol %u.%u) "
				 "does not serve the multicast steps",
				 t[i].obs, t[i].ns, p[i].major_max, p[i].minor);
			return -1;
		}
		any |= p[i].nmcs != 0;
		out[i] = served;
		count += served;
	}
	return any ? count : 0; /* (not sent to a group without multicast objects) */
}

/* The request of the RESTORE_MULTICAST steps: every multicast object that any
 * selected participant has taken down in part or whole, so that all of its
 * participants join the same new object. Returns how many. */
static size_t mc_rebuild_request(const struct topo_participant *p, size_t n, const bool *sel, struct proto_buf *b)
{
	struct hmap seen = {0};
	size_t count = 0;
	size_t at = pbuf_begin(b, REC_RESULT);
	for (size_t i = 0; i < n; i++) {
		if (sel && !sel[i])
			continue;
		struct hmap keys = {0}; /* this participant's objects with a part taken down */
		for (size_t j = 0; j < p[i].nbinds; j++)
			if (p[i].binds[j].detached)
				hmap_put(&keys, p[i].binds[j].key, (void *)1);
		for (size_t j = 0; j < p[i].nmaps; j++)
			if (p[i].maps[j].detached)
				hmap_put(&keys, p[i].maps[j].key, (void *)1);
		for (size_t j = 0; j < p[i].nmcs; j++) {
			const struct topo_mc *m = &p[i].mcs[j];
			if (!m->detached && !hmap_get(&keys, m->key))
				continue;
			if (hmap_get(&seen, id_hash(&m->id)))
				continue;
			hmap_put(&seen, id_hash(&m->id), (void *)1);
			pbuf_put_id(b, F_MC_REBUILD, &m->id);
			count++;
		}
		hmap_free(&keys);
	}
	pbuf_end(b, at);
	hmap_free(&seen);
	return count;
}

/* The three multicast restore steps, each a barrier across the selected. */
static int mc_restore_steps(struct call *calls, struct coord_target *t, size_t n, const bool *sel,
			    const struct coord_options *o, const struct proto_buf *req, struct coord_report *r)
{
	static const uint16_t ops[] = {PROTO_OP_RESTORE_MULTICAST, PROTO_OP_RESTORE_MULTICAST_IMPORT,
				       PROTO_OP_RESTORE_MULTICAST_BIND};
	double t0 = now_ms();
	for (int s = 0; s < 3; s++) {
		double t1 = now_ms();
		long bad = fan_out(calls, t, n, sel, ops[s], req->data, req->len, o->timeout_ms);
		if (bad >= 0) {
			stage_error(r, &calls[bad], proto_op_name(ops[s]));
			return -1;
		}
		progress(o, proto_op_name(ops[s]), now_ms() - t1, "%s", "");
	}
	r->ms_restore_multicast = now_ms() - t0;
	return 0;
}

static const char *const fault_names[] = {
#define FAULT(name, where) name,
#include "cusnap/faults.def"
#undef FAULT
};

void coord_fault_point(const char *name)
{
	const char *spec = getenv("CUSNAP_FAULT");
	size_t len = strlen(name);
	if (!spec || strncmp(spec, name, len) != 0 || spec[len] != ':')
		return;
	bool listed = false;
	for (size_t i = 0; i < sizeof(fault_names) / sizeof(fault_names[0]); i++)
		listed |= strcmp(fault_names[i], name) == 0;
	if (!listed)
		return; /* every point is in faults.def */
	const char *who = spec + len + 1;
	if (strcmp(who, "term") == 0) {
		/* SIGTERM to ourselves: the command's signal path runs */
		fprintf(stderr, "CUSNAP_FAULT: SIGTERM to ourselves at %s\n", name);
		raise(SIGTERM);
		return;
	}
	int pid = strcmp(who, "self") == 0 ? getpid() : atoi(who);
	if (pid > 0) {
		fprintf(stderr, "CUSNAP_FAULT: SIGKILL to %s%d at %s\n",
			pid == getpid() ? "ourselves, " : "participant ", pid, name);
		kill(pid, SIGKILL);
		usleep(50000);
	}
}

static void count(const struct topo_participant *p, size_t n, struct coord_report *r)
{
	r->participants = n;
	r->allocations = r->mappings = r->shared = 0;
	for (size_t i = 0; i < n; i++) {
		r->allocations += p[i].nallocs;
		r->mappings += p[i].nmaps;
		for (size_t j = 0; j < p[i].nallocs; j++)
			r->shared += p[i].allocs[j].shared != 0;
	}
}

bool coord_process_gone(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return true;
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	const char *close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* Between the unicast rebuild and RESUME: multicast objects taken down
 * anywhere among the selected are made anew. */
static int rebuild_multicast(struct call *calls, struct coord_target *t, size_t n, const bool *sel,
			     const struct coord_options *o, struct coord_report *r)
{
	struct topo_participant *p = calloc(n ? n : 1, sizeof(*p));
	bool *mc_sel = calloc(n ? n : 1, sizeof(*mc_sel));
	struct proto_buf req = {0};
	int rc = -1;
	if (!p || !mc_sel) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		free(p);
		free(mc_sel);
		return -1;
	}
	long served;
	if (inspect_some(calls, t, n, sel, o, p, r) < 0 && (served = mc_select(p, t, n, sel, mc_sel, r)) >= 0) {
		size_t wanted = served ? mc_rebuild_request(p, n, sel, &req) : 0;
		rc = wanted ? mc_restore_steps(calls, t, n, mc_sel, o, &req, r) : 0;
		if (!rc && req.failed) {
			snprintf(r->error, sizeof(r->error), "out of memory");
			rc = -1;
		}
	}
	for (size_t i = 0; i < n; i++)
		topo_free(&p[i]);
	free(p);
	free(mc_sel);
	pbuf_free(&req);
	return rc;
}

/* Rebuild the selected participants: creators, importers, multicast objects, then resume. */
static int rebuild(struct call *calls, struct coord_target *t, size_t n, bool *sel, const struct coord_options *o,
		   struct coord_report *r, bool tolerate_active)
{
	static const uint16_t ops[] = {PROTO_OP_RESTORE_CREATORS, PROTO_OP_RESTORE_IMPORTERS, PROTO_OP_RESUME};
	static const char *const names[] = {"RESTORE_CREATORS", "RESTORE_IMPORTERS", "RESUME"};
	double *ms[] = {&r->ms_restore_creators, &r->ms_restore_importers, &r->ms_resume};
	for (int s = 0; s < 3; s++) {
		if (ops[s] == PROTO_OP_RESUME && rebuild_multicast(calls, t, n, sel, o, r) < 0)
			return -1;
		double t0 = now_ms();
		long bad = fan_out(calls, t, n, sel, ops[s], NULL, 0, o->timeout_ms);
		if (tolerate_active && s == 0) {
			/* Already ACTIVE (never touched): nothing to rebuild there. Gone (its
			 * endpoint refuses connections): nothing can be rebuilt there. */
			for (size_t i = 0; i < n; i++) {
				if (sel[i] && calls[i].status == PROTO_E_PHASE &&
				    coord_reply_phase(calls[i].reply_payload, calls[i].reply.payload_len) ==
					    PROTO_PHASE_ACTIVE)
					sel[i] = false, calls[i].status = PROTO_OK;
				if (sel[i] && calls[i].status == PROTO_E_IO && coord_process_gone(t[i].obs)) {
					fprintf(stderr,
						"snapshot-cuda-vmm: participant %d (ns %d) is gone: not rebuilt\n",
						t[i].obs, t[i].ns);
					sel[i] = false, calls[i].status = PROTO_OK;
				}
			}
			bad = -1;
			for (size_t i = 0; i < n && bad < 0; i++)
				if (calls[i].status != PROTO_OK)
					bad = (long)i;
		}
		*ms[s] = now_ms() - t0;
		r->bytes += s == 0 ? bytes_of(calls, n) : 0;
		if (bad >= 0) {
			stage_error(r, &calls[bad], names[s]);
			return -1;
		}
		progress(o, names[s], *ms[s], "%s", "");
	}
	return 0;
}

int coord_prepare(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->op, sizeof(r->op), "prepare");
	double start = now_ms(), t0 = start;
	struct call *calls = calloc(n ? n : 1, sizeof(*calls));
	struct topo_participant *before = calloc(n ? n : 1, sizeof(*before));
	struct topo_participant *after = calloc(n ? n : 1, sizeof(*after));
	bool *touched = calloc(n ? n : 1, sizeof(*touched));
	bool *touched_mc = calloc(n ? n : 1, sizeof(*touched_mc));
	int rc = -1;
	if (!calls || !before || !after || !touched || !touched_mc) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		goto out;
	}
	/* 1. INSPECT and validate: nothing has changed yet. */
	r->unchanged = true;
	if (inspect_all(calls, t, n, o, before, r) >= 0)
		goto out;
	r->ms_inspect = now_ms() - t0;
	count(before, n, r);
	progress(o, "INSPECT", r->ms_inspect, "%zu participants, %zu allocations (%zu shared), %zu mappings", n,
		 r->allocations, r->shared, r->mappings);
	t0 = now_ms();
	char why[1800];
	if (coord_validate(t, before, n, why, sizeof(why)) < 0) {
		snprintf(r->error, sizeof(r->error), "validation: %s", why);
		goto out;
	}
	r->ms_validate = now_ms() - t0;
	progress(o, "validate", r->ms_validate, "%s", "");
	/* 2. QUIESCE: no tracked mutation from here on. */
	r->unchanged = false;
	t0 = now_ms();
	long bad = fan_out(calls, t, n, NULL, PROTO_OP_QUIESCE, NULL, 0, o->timeout_ms);
	for (size_t i = 0; i < n; i++)
		touched[i] = calls[i].status != PROTO_E_IO; /* a timeout may have quiesced it */
	if (bad >= 0) {
		stage_error(r, &calls[bad], "QUIESCE");
		goto abort;
	}
	/* The topology cannot move now; it must be what was validated. */
	if (inspect_all(calls, t, n, o, after, r) >= 0)
		goto abort;
	for (size_t i = 0; i < n; i++) {
		if (coord_compare(&before[i], &after[i], NULL, 0, why, sizeof(why)) < 0) {
			snprintf(r->error, sizeof(r->error), "participant %d (ns %d) changed during prepare: %s",
				 t[i].obs, t[i].ns, why);
			goto abort;
		}
	}
	r->ms_quiesce = now_ms() - t0;
	progress(o, "QUIESCE", r->ms_quiesce, "%s", "");
	coord_fault_point("kill-after-quiesce");
	/* 3. Multicast teardown first, and a barrier: no process may still hold a
	 * multicast object when any is checkpointed. Sent only to the shims that
	 * serve it (PROTO_CAP_MULTICAST), and only when there are such objects. */
	long served = mc_select(after, t, n, NULL, touched_mc, r);
	if (served < 0)
		goto abort;
	if (served) {
		t0 = now_ms();
		bad = fan_out(calls, t, n, touched_mc, PROTO_OP_PREPARE_MULTICAST, NULL, 0, o->timeout_ms);
		r->ms_prepare_multicast = now_ms() - t0;
		if (bad >= 0) {
			stage_error(r, &calls[bad], "PREPARE_MULTICAST");
			goto abort;
		}
		progress(o, "PREPARE_MULTICAST", r->ms_prepare_multicast, "%s", "every multicast object released");
		coord_fault_point("kill-after-prepare-multicast");
	}
	/* 4. PREPARE: unicast teardown. */
	t0 = now_ms();
	uint8_t payload[64];
	struct proto_buf b = {.data = payload, .cap = sizeof(payload)};
	size_t at = pbuf_begin(&b, REC_RESULT);
	pbuf_put_u32(&b, F_CONTENT, (uint32_t)o->content);
	pbuf_end(&b, at);
	bad = fan_out(calls, t, n, NULL, PROTO_OP_PREPARE, b.data, b.len, o->timeout_ms);
	r->bytes = bytes_of(calls, n);
	r->ms_prepare = now_ms() - t0;
	if (bad >= 0) {
		stage_error(r, &calls[bad], "PREPARE");
		goto abort;
	}
	progress(o, "PREPARE", r->ms_prepare, "%" PRIu64 " bytes copied (%s content)", r->bytes,
		 o->content == COORD_CONTENT_NATIVE ? "native" : "host");
	coord_fault_point("kill-after-prepare");
	/* 5. The state file, atomically; only then may the caller checkpoint. */
	t0 = now_ms();
	struct state st = {.created = (uint64_t)time(NULL), .content = (uint32_t)o->content, .n = n};
	st.p = calloc(n, sizeof(*st.p));
	if (!st.p) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		goto abort;
	}
	/* The records taken after QUIESCE, as they were answered. */
	if (inspect_all(calls, t, n, o, after, r) >= 0) {
		free(st.p);
		goto abort;
	}
	for (size_t i = 0; i < n; i++) {
		st.p[i].id = after[i].id;
		st.p[i].nspid = (uint32_t)t[i].ns;
		st.p[i].obs = (uint32_t)t[i].obs;
		st.p[i].stream = calls[i].reply_payload;
		st.p[i].len = calls[i].reply.payload_len;
	}
	int wrc = state_write(o->dir, &st, why, sizeof(why));
	free(st.p);
	if (wrc < 0) {
		snprintf(r->error, sizeof(r->error), "%s", why);
		goto abort;
	}
	r->ms_state = now_ms() - t0;
	progress(o, "state written", r->ms_state, "%s/" STATE_FILE, o->dir);
	coord_fault_point("kill-after-state");
	rc = 0;
	r->unchanged = false;
	goto out;
abort:
	/* Nothing half-prepared survives: rebuild every touched participant. */
	{
		struct coord_report ar = {0};
		char saved[1200];
		snprintf(saved, sizeof(saved), "%.1150s", r->error);
		if (rebuild(calls, t, n, touched, o, &ar, true) == 0) {
			r->aborted = true;
			snprintf(r->error, sizeof(r->error), "%.1100s (every participant was rebuilt and resumed)",
				 saved);
		} else {
			snprintf(r->error, sizeof(r->error), "%.1100s; the abort failed too: %.800s", saved, ar.error);
		}
	}
out:
	for (size_t i = 0; i < n && before && after; i++) {
		topo_free(&before[i]);
		topo_free(&after[i]);
	}
	free(before);
	free(after);
	free(touched);
	free(touched_mc);
	free_calls(calls, n);
	r->ms_total = now_ms() - start;
	return rc;
}

int coord_restore(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->op, sizeof(r->op), "restore");
	double start = now_ms(), t0;
	char path[4200], why[1800];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, o->dir);
	struct state st;
	int src = state_read(path, &st, why, sizeof(why));
	if (src == -ENOENT && !o->require_state) {
		r->nothing_to_do = true;
		if (o->progress)
			fprintf(o->progress,
				"snapshot-cuda-vmm: %s does not exist: nothing was prepared, nothing to restore\n",
				path);
		return 0;
	}
	if (src < 0) {
		snprintf(r->error, sizeof(r->error), "%s%s", why, src == -ENOENT ? " (--require-state)" : "");
		return -1;
	}
	struct proto_buf map = {0}, mcreq = {0};
	struct call *calls = calloc(n ? n : 1, sizeof(*calls));
	struct topo_participant *cur = calloc(n ? n : 1, sizeof(*cur));
	bool *all = calloc(n ? n : 1, sizeof(*all));
	int rc = -1;
	if (!calls || !cur || !all) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		goto out;
	}
	/* 1. The participants must be exactly those recorded. */
	t0 = now_ms();
	if (inspect_all(calls, t, n, o, cur, r) >= 0)
		goto out;
	count(cur, n, r);
	if (st.n != n) {
		snprintf(r->error, sizeof(r->error), "the state file records %zu participants, %zu were given", st.n,
			 n);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		for (size_t j = 0; j < st.n && !found; j++)
			found = id_equal(&st.p[j].id, &cur[i].id);
		if (!found) {
			char hex[ID_HEX_LEN + 1];
			id_hex(&cur[i].id, hex);
			snprintf(r->error, sizeof(r->error), "participant %d (ns %d): id %s is not in the state file",
				 t[i].obs, t[i].ns, hex);
			goto out;
		}
		all[i] = true;
	}
	r->ms_inspect = now_ms() - t0;
	progress(o, "HELLO/INSPECT", r->ms_inspect, "%zu participants match the state file", n);
	/* 2-4. Creators, importers (multicast later), then compare and resume. */
	static const uint16_t ops[] = {PROTO_OP_RESTORE_CREATORS, PROTO_OP_RESTORE_IMPORTERS};
	static const char *const names[] = {"RESTORE_CREATORS", "RESTORE_IMPORTERS"};
	double *ms[] = {&r->ms_restore_creators, &r->ms_restore_importers};
	/* GPUs remapped by the native restore: the shims translate their records. */
	if (o->device_map_len) {
		size_t at = pbuf_begin(&map, REC_RESULT);
		for (size_t d = 0; d < o->device_map_len; d++) {
			uint8_t pair[WIRE_PAIR_LEN];
			wire_put_pair(pair, (uint32_t)d, (uint32_t)o->device_map[d]);
			if (o->device_map[d] >= 0)
				pbuf_put(&map, F_DEVICE_MAP, pair, sizeof(pair));
		}
		pbuf_end(&map, at);
	}
	for (int s = 0; s < 2; s++) {
		t0 = now_ms();
		long bad = fan_out(calls, t, n, all, ops[s], s == 0 ? map.data : NULL, s == 0 ? map.len : 0,
				   o->timeout_ms);
		*ms[s] = now_ms() - t0;
		if (s == 0)
			r->bytes = bytes_of(calls, n);
		if (bad >= 0) {
			stage_error(r, &calls[bad], names[s]);
			goto out;
		}
		if (s == 0)
			progress(o, names[s], *ms[s], "%" PRIu64 " bytes copied back", r->bytes);
		else
			progress(o, names[s], *ms[s], "%s", "");
	}
	/* Multicast objects (the records were taken before RESTORE_CREATORS; the
	 * unicast steps do not change them). */
	if (mc_rebuild_request(cur, n, NULL, &mcreq) && mc_restore_steps(calls, t, n, all, o, &mcreq, r) < 0)
		goto out;
	if (mcreq.failed) {
		snprintf(r->error, sizeof(r->error), "out of memory");
		goto out;
	}
	t0 = now_ms();
	if (inspect_all(calls, t, n, o, cur, r) >= 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct state_participant *rec = NULL;
		for (size_t j = 0; j < st.n && !rec; j++)
			if (id_equal(&st.p[j].id, &cur[i].id))
				rec = &st.p[j];
		if (coord_compare(&rec->topo, &cur[i], o->device_map, o->device_map_len, why, sizeof(why)) < 0) {
			snprintf(r->error, sizeof(r->error), "participant %d (ns %d): topology after restore: %s",
				 t[i].obs, t[i].ns, why);
			goto out;
		}
	}
	r->ms_compare = now_ms() - t0;
	progress(o, "compare", r->ms_compare, "topology identical to the state file");
	t0 = now_ms();
	long bad = fan_out(calls, t, n, all, PROTO_OP_RESUME, NULL, 0, o->timeout_ms);
	r->ms_resume = now_ms() - t0;
	if (bad >= 0) {
		stage_error(r, &calls[bad], "RESUME");
		goto out;
	}
	progress(o, "RESUME", r->ms_resume, "%s", "");
	rc = 0;
out:
	for (size_t i = 0; i < n && cur; i++)
		topo_free(&cur[i]);
	free(cur);
	free(all);
	free_calls(calls, n);
	state_free(&st);
	pbuf_free(&map);
	pbuf_free(&mcreq);
	r->ms_total = now_ms() - start;
	return rc;
}

int coord_abort(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->op, sizeof(r->op), "abort");
	double start = now_ms();
	struct call *calls = calloc(n ? n : 1, sizeof(*calls));
	bool *sel = calloc(n ? n : 1, sizeof(*sel));
	int rc = -1;
	if (calls && sel) {
		for (size_t i = 0; i < n; i++)
			sel[i] = true;
		rc = rebuild(calls, t, n, sel, o, r, true);
	} else {
		snprintf(r->error, sizeof(r->error), "out of memory");
	}
	free(sel);
	free_calls(calls, n);
	r->ms_total = now_ms() - start;
	return rc;
}

void coord_report_json(FILE *f, const struct coord_report *r)
{
	fprintf(f,
		"{\"operation\":\"%s\",\"ok\":%s,\"participants\":%zu,\"allocations\":%zu,\"shared\":%zu,\"mappings\":%"
		"zu,"
		"\"records\":%zu,\"bytes_copied\":%" PRIu64 ",\"nothing_to_do\":%s,\"aborted\":%s,\"timings_ms\":{"
		"\"inspect\":%.3f,\"validate\":%.3f,\"quiesce\":%.3f,\"prepare\":%.3f,\"state_write\":%.3f,"
		"\"restore_creators\":%.3f,\"restore_importers\":%.3f,\"compare\":%.3f,\"resume\":%.3f,\"total\":%.3f,"
		"\"prepare_multicast\":%.3f,\"restore_multicast\":%.3f}",
		r->op, r->error[0] ? "false" : "true", r->participants, r->allocations, r->shared, r->mappings,
		r->participants + r->allocations + r->mappings, r->bytes, r->nothing_to_do ? "true" : "false",
		r->aborted ? "true" : "false", r->ms_inspect, r->ms_validate, r->ms_quiesce, r->ms_prepare, r->ms_state,
		r->ms_restore_creators, r->ms_restore_importers, r->ms_compare, r->ms_resume, r->ms_total,
		r->ms_prepare_multicast, r->ms_restore_multicast);
	if (r->error[0]) {
		fprintf(f, ",\"error\":");
		json_write_string(f, r->error);
	}
	fprintf(f, "}\n");
}
