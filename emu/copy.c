/* SPDX-License-Identifier: MIT */
/* Copies and memsets, streams, events and host functions. Device pointers are
 * real addresses of this process, so a copy is a memcpy once the range has been
 * checked against the mappings and their access. Each stream has one worker
 * thread that runs its operations in order. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "emu.h"

enum op_kind { OP_COPY, OP_SET, OP_HOSTFN, OP_RECORD, OP_WAIT, OP_NOTHING };

struct emu_event;

struct op {
	struct op *next;
	enum op_kind kind;
	uint64_t dst, src;
	size_t count;            /* bytes for copies, elements for sets */
	bool dst_host, src_host; /* copies: either end may be host memory */
	unsigned width;          /* 1, 2 or 4 for sets */
	uint32_t value;
	CUhostFn fn;
	void *data;
	struct emu_event *event;
	uint64_t seq; /* OP_RECORD: the record's number; OP_WAIT: the record it waits for */
};

struct emu_stream {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct op *head, *tail;
	bool busy;
	bool quit;
	bool started;
	pthread_t thread;
};

/* An event as cuda.h documents it: its state is that of its most recent
 * cuEventRecord. Each record takes the next sequence number; a wait (a stream's
 * cuStreamWaitEvent, cuEventSynchronize, cuEventQuery) is for the record that
 * was current when it was issued, never a later one (NCCL's strong streams queue
 * wait(E) then record(E) on one stream). */
struct emu_event {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t issued;    /* records issued (the current one's number; 0: never recorded) */
	uint64_t completed; /* the highest record number its stream has reached */
	unsigned refs;      /* the handle (until destroyed) and each queued op naming it */
	unsigned flags;     /* cuEventCreate's */
};

/* Drop one reference; the last frees the event (a destroyed event lives on
 * until the work that names it is done, as the driver documents). */
static void event_unref(struct emu_event *e)
{
	pthread_mutex_lock(&e->mu);
	bool last = --e->refs == 0;
	pthread_mutex_unlock(&e->mu);
	if (last) {
		pthread_mutex_destroy(&e->mu);
		pthread_cond_destroy(&e->cv);
		free(e);
	}
}

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hmap streams; /* pointer -> stream */
static struct hmap events;  /* pointer -> event */

/* Object p (a stream or an event) entered into registry m: false when out of
 * memory. */
static bool registered(struct hmap *m, void *p)
{
	pthread_mutex_lock(&registry_mu);
	int rc = hmap_put(m, (uint64_t)(uintptr_t)p, p);
	pthread_mutex_unlock(&registry_mu);
	return rc == 0;
}

static bool have_context(void)
{
	return emu_current && emu_current->active;
}

/* Check that [p, p + n) can be read (or written) as device memory: every byte in
 * a mapping whose merged access allows it. Memory outside every mapping counts
 * as host memory when host_ok (unified addressing). Caller holds emu.lock. */
static CUresult check_range(uint64_t p, size_t n, bool write, bool host_ok)
{
	if (!n)
		return CUDA_SUCCESS;
	if (p + n < p)
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_mapping *m = emu_mapping_at(p);
	if (!m) {
		if (!host_ok || !p)
			return CUDA_ERROR_INVALID_VALUE;
		struct itree_node *next = itree_first_from(&emu.mappings, p);
		return next && next->start < p + n ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	}
	uint64_t at = p;
	while (at < p + n) {
		if (!m || m->node.start > at)
			return CUDA_ERROR_INVALID_VALUE;
		int prot = emu_mapping_prot(m);
		if (!(prot & PROT_READ) || (write && !(prot & PROT_WRITE)))
			return CUDA_ERROR_INVALID_VALUE;
		at = m->node.end;
		m = at < p + n ? emu_mapping_at(at) : NULL;
	}
	return CUDA_SUCCESS;
}

/* m's memfd and where va is in it, when m is placed device memory with one. */
static bool backed(const struct emu_mapping *m, uint64_t va, int *fd, off_t *at)
{
	if (!m || !m->placed || m->alloc->kind != EMU_OBJ_MEMORY || m->alloc->fd < 0)
		return false;
	*fd = m->alloc->fd;
	*at = (off_t)(m->offset + (va - m->node.start));
	return true;
}

/* Zeros over [p, p + n), checked writable device memory: whole pages of a
 * placed mapping by punching its memfd (they read as zeros again, as a
 * device's fresh memory does, and cost no page written: file content sets
 * never-written blocks so), the rest by memset. Caller holds emu.lock. */
static void zero_range(uint64_t p, size_t n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), end = p + n;
	while (p < end) {
		struct emu_mapping *m = emu_mapping_at(p);
		uint64_t stop = m && m->node.end < end ? m->node.end : end;
		uint64_t lo = (p + page - 1) / page * page, hi = stop / page * page;
		int fd = -1;
		off_t at = 0;
		bool punched = lo < hi && backed(m, lo, &fd, &at) &&
			       fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, (off_t)(hi - lo)) == 0;
		if (punched) {
			memset((void *)(uintptr_t)p, 0, lo - p);
			memset((void *)(uintptr_t)hi, 0, stop - hi);
		} else {
			memset((void *)(uintptr_t)p, 0, stop - p);
		}
		p = stop;
	}
}

/* n bytes from src to dst, checked. Between a memfd's pages and the host the
 * copy is the kernel's (pwrite, pread): it touches no page of the device's
 * mapping, so pages never written are read as zeros without being made and
 * pages written are made without being cleared first, where a memmove faults
 * each one in (about 10 us a page in a virtual machine, the most of a large
 * copy; DESIGN.md §11.1); device to device, and what the kernel refuses, by
 * memmove. Caller holds emu.lock. */
static void copy_bytes(uint64_t dst, uint64_t src, size_t n)
{
	while (n) {
		struct emu_mapping *md = emu_mapping_at(dst), *ms = emu_mapping_at(src);
		size_t seg = n;
		if (md && md->node.end - dst < seg)
			seg = md->node.end - dst;
		if (ms && ms->node.end - src < seg)
			seg = ms->node.end - src;
		int dfd = -1, sfd = -1;
		off_t dat = 0, sat = 0;
		bool to_fd = backed(md, dst, &dfd, &dat), from_fd = backed(ms, src, &sfd, &sat);
		ssize_t done = 0;
		if (to_fd != from_fd)
			done = to_fd ? pwrite(dfd, (const void *)(uintptr_t)src, seg, dat)
				     : pread(sfd, (void *)(uintptr_t)dst, seg, sat);
		if (done <= 0) { /* (both ends on the host or the device; an error) */
			memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, seg);
			done = (ssize_t)seg;
		}
		dst += (size_t)done, src += (size_t)done, n -= (size_t)done;
	}
}

static CUresult run_op(struct op *o)
{
	CUresult rc = CUDA_SUCCESS;
	switch (o->kind) {
	case OP_COPY:
		pthread_mutex_lock(&emu.lock);
		rc = check_range(o->dst, o->count, true, o->dst_host);
		if (!rc)
			rc = check_range(o->src, o->count, false, o->src_host);
		if (!rc)
			copy_bytes(o->dst, o->src, o->count);
		pthread_mutex_unlock(&emu.lock);
		break;
	case OP_SET:
		pthread_mutex_lock(&emu.lock);
		rc = check_range(o->dst, o->count * o->width, true, false);
		if (!rc && o->value == 0) {
			zero_range(o->dst, o->count * o->width);
		} else if (!rc) {
			if (o->width == 1) {
				memset((void *)(uintptr_t)o->dst, (int)(o->value & 0xff), o->count);
			} else if (o->width == 2) {
				uint16_t *d = (uint16_t *)(uintptr_t)o->dst;
				for (size_t i = 0; i < o->count; i++)
					d[i] = (uint16_t)o->value;
			} else {
				uint32_t *d = (uint32_t *)(uintptr_t)o->dst;
				for (size_t i = 0; i < o->count; i++)
					d[i] = o->value;
			}
		}
		pthread_mutex_unlock(&emu.lock);
		break;
	case OP_HOSTFN: o->fn(o->data); break;
	case OP_NOTHING: break; /* a kernel: it never runs here */
	case OP_RECORD:
		pthread_mutex_lock(&o->event->mu);
		if (o->event->completed < o->seq)
			o->event->completed = o->seq;
		pthread_cond_broadcast(&o->event->cv);
		pthread_mutex_unlock(&o->event->mu);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&o->event->mu);
		while (o->event->completed < o->seq)
			pthread_cond_wait(&o->event->cv, &o->event->mu);
		pthread_mutex_unlock(&o->event->mu);
		break;
	}
	return rc;
}

/* An op is done with: its event reference dropped, freed. */
static void op_free(struct op *o)
{
	if (o->event)
		event_unref(o->event);
	free(o);
}

static void *stream_worker(void *arg)
{
	struct emu_stream *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->quit)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!s->head)
			break;
		struct op *o = s->head;
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = true;
		pthread_mutex_unlock(&s->mu);
		CUresult rc = run_op(o);
		if (rc)
			LOG_AT(LOG_WARN, "asynchronous operation failed with %d (range not mapped or not accessible)",
			       (int)rc);
		op_free(o);
		emu_async_end();
		pthread_mutex_lock(&s->mu);
		s->busy = false;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static struct emu_stream *stream_get(CUstream h)
{
	pthread_mutex_lock(&registry_mu);
	struct emu_stream *s = hmap_get(&streams, (uint64_t)(uintptr_t)h);
	pthread_mutex_unlock(&registry_mu);
	return s;
}

static bool null_stream(CUstream h)
{
	return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

static void stream_drain(struct emu_stream *s)
{
	pthread_mutex_lock(&s->mu);
	while (s->head || s->busy)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

void emu_streams_sync_all(void)
{
	pthread_mutex_lock(&registry_mu);
	size_t n = 0;
	struct emu_stream **list = malloc((streams.len + 1) * sizeof(*list));
	struct emu_stream *s;
	hmap_for_each(&streams, s) {
		if (!list)
			break;
		list[n++] = s;
	}
	pthread_mutex_unlock(&registry_mu);
	/* Streams are only freed by cuStreamDestroy, which the application must
	 * not race with a synchronisation of the same stream. */
	for (size_t i = 0; i < n; i++)
		stream_drain(list[i]);
	free(list);
}

/* Queue o on stream h (taking ownership), or run it now on the null stream. */
static CUresult submit(CUstream h, struct op *o)
{
	if (!have_context()) {
		op_free(o);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (null_stream(h)) {
		/* The legacy default stream waits for the other streams. */
		emu_streams_sync_all();
		CUresult rc = run_op(o);
		op_free(o);
		return rc;
	}
	struct emu_stream *s = stream_get(h);
	if (!s) {
		op_free(o);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (o->kind == OP_COPY || o->kind == OP_SET) {
		/* Report bad ranges at the call, as the driver does for what it can see. */
		pthread_mutex_lock(&emu.lock);
		CUresult rc = check_range(o->dst, o->kind == OP_SET ? o->count * o->width : o->count, true,
					  o->kind == OP_COPY && o->dst_host);
		if (!rc && o->kind == OP_COPY)
			rc = check_range(o->src, o->count, false, o->src_host);
		pthread_mutex_unlock(&emu.lock);
		if (rc) {
			op_free(o);
			return rc;
		}
	}
	emu_async_begin();
	pthread_mutex_lock(&s->mu);
	if (!s->started) {
		if (pthread_create(&s->thread, NULL, stream_worker, s) != 0) {
			pthread_mutex_unlock(&s->mu);
			emu_async_end();
			op_free(o);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		s->started = true;
	}
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return CUDA_SUCCESS;
}

static CUresult enqueue(CUstream h, enum op_kind kind, void (*fn)(void *), void *arg)
{
	struct op *o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->kind = kind;
	o->fn = fn;
	o->data = arg;
	return submit(h, o);
}

CUresult emu_stream_enqueue_nothing(CUstream h)
{
	return enqueue(h, OP_NOTHING, NULL, NULL);
}

CUresult emu_stream_enqueue_call(CUstream h, void (*fn)(void *), void *arg)
{
	return enqueue(h, OP_HOSTFN, fn, arg);
}

bool emu_stream_known(CUstream h)
{
	return null_stream(h) || stream_get(h) != NULL;
}

static CUresult copy(uint64_t dst, uint64_t src, size_t n, CUstream h, bool dst_host, bool src_host)
{
	struct op *o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->kind = OP_COPY;
	o->dst = dst;
	o->src = src;
	o->count = n;
	o->dst_host = dst_host;
	o->src_host = src_host;
	return submit(h, o);
}

static CUresult set(uint64_t dst, uint32_t value, unsigned width, size_t count, CUstream h)
{
	if (dst % width)
		return CUDA_ERROR_INVALID_VALUE;
	struct op *o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->kind = OP_SET;
	o->dst = dst;
	o->value = value;
	o->width = width;
	o->count = count;
	return submit(h, o);
}

#define HOST(p) ((uint64_t)(uintptr_t)(p))

EMU_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	EMU_CALL(cuMemcpy, copy(dst, src, n, NULL, true, true));
}

EMU_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	EMU_CALL(cuMemcpyAsync, copy(dst, src, n, s, true, true));
}

EMU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	EMU_CALL(cuMemcpyHtoD_v2, copy(dst, HOST(src), n, NULL, false, true));
}

EMU_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	EMU_CALL(cuMemcpyDtoH_v2, copy(HOST(dst), src, n, NULL, true, false));
}

EMU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	EMU_CALL(cuMemcpyDtoD_v2, copy(dst, src, n, NULL, false, false));
}

EMU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	EMU_CALL(cuMemcpyHtoDAsync_v2, copy(dst, HOST(src), n, s, false, true));
}

EMU_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	EMU_CALL(cuMemcpyDtoHAsync_v2, copy(HOST(dst), src, n, s, true, false));
}

EMU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	EMU_CALL(cuMemcpyDtoDAsync_v2, copy(dst, src, n, s, false, false));
}

EMU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n)
{
	EMU_CALL(cuMemsetD8_v2, set(dst, uc, 1, n, NULL));
}

EMU_API CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short us, size_t n)
{
	EMU_CALL(cuMemsetD16_v2, set(dst, us, 2, n, NULL));
}

EMU_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int ui, size_t n)
{
	EMU_CALL(cuMemsetD32_v2, set(dst, ui, 4, n, NULL));
}

EMU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s)
{
	EMU_CALL(cuMemsetD8Async, set(dst, uc, 1, n, s));
}

EMU_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short us, size_t n, CUstream s)
{
	EMU_CALL(cuMemsetD16Async, set(dst, us, 2, n, s));
}

EMU_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s)
{
	EMU_CALL(cuMemsetD32Async, set(dst, ui, 4, n, s));
}

static CUresult host_fn(CUstream h, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct op *o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->kind = OP_HOSTFN;
	o->fn = fn;
	o->data = data;
	return submit(h, o);
}

EMU_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	EMU_CALL(cuLaunchHostFunc, host_fn(hStream, fn, userData));
}

/* ---- streams ---- */

static CUresult stream_create(CUstream *out)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!have_context())
		return CUDA_ERROR_INVALID_CONTEXT;
	struct emu_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (!registered(&streams, s)) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = (CUstream)s;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	(void)Flags;
	EMU_CALL(cuStreamCreate, stream_create(phStream));
}

static CUresult stream_destroy(CUstream h)
{
	pthread_mutex_lock(&registry_mu);
	struct emu_stream *s = hmap_del(&streams, (uint64_t)(uintptr_t)h);
	pthread_mutex_unlock(&registry_mu);
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Work already queued still completes, as documented. */
	pthread_mutex_lock(&s->mu);
	s->quit = true;
	pthread_cond_broadcast(&s->cv);
	bool started = s->started;
	pthread_mutex_unlock(&s->mu);
	if (started)
		pthread_join(s->thread, NULL);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	EMU_CALL(cuStreamDestroy_v2, stream_destroy(hStream));
}

static CUresult stream_sync(CUstream h, bool query)
{
	if (null_stream(h)) {
		if (!query)
			emu_streams_sync_all();
		return CUDA_SUCCESS;
	}
	struct emu_stream *s = stream_get(h);
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	if (query) {
		pthread_mutex_lock(&s->mu);
		bool idle = !s->head && !s->busy;
		pthread_mutex_unlock(&s->mu);
		return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	}
	stream_drain(s);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamSynchronize(CUstream hStream)
{
	EMU_CALL(cuStreamSynchronize, stream_sync(hStream, false));
}

EMU_API CUresult cuStreamQuery(CUstream hStream)
{
	EMU_CALL(cuStreamQuery, stream_sync(hStream, true));
}

/* ---- events ---- */

static struct emu_event *event_get(CUevent h)
{
	pthread_mutex_lock(&registry_mu);
	struct emu_event *e = hmap_get(&events, (uint64_t)(uintptr_t)h);
	pthread_mutex_unlock(&registry_mu);
	return e;
}

static CUresult event_create(CUevent *out, unsigned flags)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!have_context())
		return CUDA_ERROR_INVALID_CONTEXT;
	struct emu_event *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	e->flags = flags;
	e->refs = 1;
	if (!registered(&events, e)) {
		free(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = (CUevent)e;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	EMU_CALL(cuEventCreate, event_create(phEvent, Flags));
}

/* Event IPC, as far as the shim's refusal needs it: a handle for an event made
 * with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING (as documented), and an
 * opened handle is an event of the opener's own that is not linked to the
 * exporter's (not emulated). */
enum { EVENT_IPC_MAGIC = 0x45504963 }; /* "cIPE" */

static CUresult event_ipc_get(CUipcEventHandle *h, CUevent ev)
{
	struct emu_event *e = event_get(ev);
	unsigned need = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
	if (!h || !e || (e->flags & need) != need)
		return CUDA_ERROR_INVALID_VALUE;
	memset(h, 0, sizeof(*h));
	uint32_t magic = EVENT_IPC_MAGIC;
	int32_t pid = getpid();
	memcpy(h->reserved, &magic, 4);
	memcpy(h->reserved + 4, &pid, 4);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	EMU_CALL(cuIpcGetEventHandle, event_ipc_get(pHandle, event));
}

static CUresult event_ipc_open(CUevent *out, const CUipcEventHandle *h)
{
	uint32_t magic;
	int32_t pid;
	memcpy(&magic, h->reserved, 4);
	memcpy(&pid, h->reserved + 4, 4);
	if (!out || magic != EVENT_IPC_MAGIC || pid <= 0 || pid == getpid())
		return CUDA_ERROR_INVALID_VALUE;
	return event_create(out, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}

EMU_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	EMU_CALL(cuIpcOpenEventHandle, event_ipc_open(phEvent, &handle));
}

static CUresult event_destroy(CUevent h)
{
	pthread_mutex_lock(&registry_mu);
	struct emu_event *e = hmap_get(&events, (uint64_t)(uintptr_t)h);
	if (e)
		hmap_del(&events, (uint64_t)(uintptr_t)h);
	pthread_mutex_unlock(&registry_mu);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Work still queued that names it keeps it until done (cuda.h: the
	 * resources are released once the recorded work completes). */
	event_unref(e);
	return CUDA_SUCCESS;
}

EMU_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	EMU_CALL(cuEventDestroy_v2, event_destroy(hEvent));
}

static CUresult event_op(CUevent h, CUstream s, enum op_kind kind)
{
	pthread_mutex_lock(&registry_mu);
	struct emu_event *e = hmap_get(&events, (uint64_t)(uintptr_t)h);
	if (e) {
		pthread_mutex_lock(&e->mu);
		e->refs += 2; /* the op's and this call's, taken before the handle can be destroyed */
		pthread_mutex_unlock(&e->mu);
	}
	pthread_mutex_unlock(&registry_mu);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	struct op *o = calloc(1, sizeof(*o));
	if (!o) {
		event_unref(e);
		event_unref(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	o->kind = kind;
	o->event = e;
	pthread_mutex_lock(&e->mu);
	/* A record is the event's new current record; a wait is for the one
	 * current now (none recorded yet: nothing to wait for). */
	uint64_t seq = o->seq = kind == OP_RECORD ? ++e->issued : e->issued;
	pthread_mutex_unlock(&e->mu);
	CUresult rc = submit(s, o); /* takes o and its reference */
	if (rc && kind == OP_RECORD) {
		/* Not queued: the number is spent, reached at once (no wait hangs on it). */
		pthread_mutex_lock(&e->mu);
		if (e->completed < seq)
			e->completed = seq;
		pthread_cond_broadcast(&e->cv);
		pthread_mutex_unlock(&e->mu);
	}
	event_unref(e);
	return rc;
}

EMU_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	EMU_CALL(cuEventRecord, event_op(hEvent, hStream, OP_RECORD));
}

EMU_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	(void)Flags;
	EMU_CALL(cuStreamWaitEvent, event_op(hEvent, hStream, OP_WAIT));
}

static CUresult event_sync(CUevent h, bool query)
{
	struct emu_event *e = event_get(h);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&e->mu);
	uint64_t want = e->issued; /* the record current now, not one issued while we wait */
	if (query)
		rc = e->completed < want ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
	else
		while (e->completed < want)
			pthread_cond_wait(&e->cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
	return rc;
}

EMU_API CUresult cuEventSynchronize(CUevent hEvent)
{
	EMU_CALL(cuEventSynchronize, event_sync(hEvent, false));
}

EMU_API CUresult cuEventQuery(CUevent hEvent)
{
	EMU_CALL(cuEventQuery, event_sync(hEvent, true));
}
