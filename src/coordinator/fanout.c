/* SPDX-License-Identifier: MIT */
/* The barrier (DESIGN.md §6): each stage fans out to every participant at
 * once, each request under its own deadline, and the next stage starts only
 * when all have answered. Also the checks every INSPECT gets, and the
 * selection and request of the multicast steps. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cusnap/hmap.h"
#include "cusnap/request.h"
#include "fanout.h"

static void *run_call(void *arg)
{
	struct call *c = arg;
	c->status = coord_request_fd(c->t->endpoint, c->op, c->payload, c->len, c->fd, c->timeout_ms, &c->reply,
				     &c->reply_payload, c->err, sizeof(c->err));
	/* (decoded here, while other participants are still answering) */
	if (c->status == PROTO_OK && c->decode_into)
		c->decoded = topo_decode(c->reply_payload, c->reply.payload_len, c->decode_into);
	return NULL;
}

static long fan_out_into(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
			 const uint8_t *payload, size_t len, const int *fds, int timeout_ms,
			 struct topo_participant *into)
{
	pthread_t *th = calloc(n ? n : 1, sizeof(*th));
	bool *started = calloc(n ? n : 1, sizeof(*started));
	for (size_t i = 0; i < n; i++) {
		free(calls[i].reply_payload);
		calls[i] = (struct call){.t = &t[i],
					 .op = op,
					 .payload = payload,
					 .len = len,
					 .fd = fds ? fds[i] : -1,
					 .timeout_ms = timeout_ms,
					 .status = PROTO_OK,
					 .decode_into = into ? &into[i] : NULL};
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

long fan_out(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
	     const uint8_t *payload, size_t len, int timeout_ms)
{
	return fan_out_into(calls, t, n, selected, op, payload, len, NULL, timeout_ms, NULL);
}

long fan_out_fds(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
		 const uint8_t *payload, size_t len, const int *fds, int timeout_ms)
{
	return fan_out_into(calls, t, n, selected, op, payload, len, fds, timeout_ms, NULL);
}

void free_calls(struct call *calls, size_t n)
{
	for (size_t i = 0; calls && i < n; i++)
		free(calls[i].reply_payload);
	free(calls);
}

void stage_progress(const struct coord_options *o, const char *stage, double ms, const char *fmt, ...)
{
	if (!o->on_stage)
		return;
	char note[256] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(note, sizeof(note), fmt, ap);
	va_end(ap);
	o->on_stage(stage, ms, note);
}

/* Field field of c's REC_RESULT reply into *f: whether it has one. */
static bool result_field(const struct call *c, uint16_t field, struct proto_rec *f)
{
	struct proto_field_iter it;
	pfield_init(&it, c->reply_payload, c->reply_payload ? c->reply.payload_len : 0, REC_RESULT);
	while (pfield_next(&it, f))
		if (f->type == field)
			return true;
	return false;
}

uint64_t result_u64(const struct call *c, uint16_t field)
{
	struct proto_rec f;
	uint64_t v = 0;
	return result_field(c, field, &f) && prec_u64(&f, &v) == 0 ? v : 0;
}

bool result_u32(const struct call *c, uint16_t field, uint32_t *v)
{
	struct proto_rec f;
	return result_field(c, field, &f) && prec_u32(&f, v) == 0;
}

uint64_t bytes_of(const struct call *calls, size_t n)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += result_u64(&calls[i], F_BYTES);
	return total;
}

void stage_error(struct coord_report *r, const struct call *c, const char *stage)
{
	snprintf(r->error, sizeof(r->error), "%s: participant %d (ns %d): %s", stage, c->t->obs, c->t->ns, c->err);
	r->status = c->status;
}

long inspect_some(struct call *calls, struct coord_target *t, size_t n, const bool *sel, const struct coord_options *o,
		  struct topo_participant *p, struct coord_report *r)
{
	for (size_t i = 0; i < n; i++)
		topo_free(&p[i]);
	long bad = fan_out_into(calls, t, n, sel, PROTO_OP_INSPECT, NULL, 0, NULL, o->timeout_ms, p);
	if (bad >= 0) {
		stage_error(r, &calls[bad], "INSPECT");
		return bad;
	}
	for (size_t i = 0; i < n; i++) {
		if (sel && !sel[i])
			continue;
		int rc = calls[i].decoded;
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

void count_records(const struct topo_participant *p, size_t n, struct coord_report *r)
{
	r->participants = n;
	r->allocations = r->mappings = r->shared = 0;
	memset(r->device_bytes, 0, sizeof(r->device_bytes));
	for (size_t i = 0; i < n; i++) {
		r->allocations += p[i].nallocs;
		r->mappings += p[i].nmaps;
		for (size_t j = 0; j < p[i].nallocs; j++) {
			const struct topo_alloc *a = &p[i].allocs[j];
			r->shared += a->shared != 0;
			if (((a->role == 1 && !a->detached) || a->holder) && a->device >= 0 &&
			    a->device < PROTO_MAX_DEVICES)
				r->device_bytes[a->device] += a->size;
		}
	}
}

long mc_select(const struct topo_participant *p, const struct coord_target *t, size_t n, const bool *sel, bool *out,
	       struct coord_report *r)
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

size_t mc_rebuild_request(const struct topo_participant *p, size_t n, const bool *sel, uint16_t rec,
			  struct proto_buf *b)
{
	size_t most = 0, count = 0;
	for (size_t i = 0; i < n; i++)
		most += p[i].nmcs;
	struct cusnap_id *ids = malloc((most ? most : 1) * sizeof(*ids));
	if (!ids) {
		b->failed = true;
		return 0;
	}
	struct hmap seen = {0};
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
			if ((!m->detached && !hmap_get(&keys, m->key)) || hmap_get(&seen, id_hash(&m->id)))
				continue;
			hmap_put(&seen, id_hash(&m->id), (void *)1);
			ids[count++] = m->id;
		}
		hmap_free(&keys);
	}
	req_mc_rebuild_encode(b, rec, ids, count);
	hmap_free(&seen);
	free(ids);
	return count;
}
