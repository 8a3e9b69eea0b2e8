/* SPDX-License-Identifier: MIT */
/* The shim's one dispatch of the endpoint protocol, and its phase (DESIGN.md
 * §6.1). include/cusnap/ops.def names each operation's serve_ function, the
 * phases that admit it and the phase a success leaves. READ operations are
 * answered at once and write their own replies; STEP operations run one at a
 * time under the lifecycle lock and reply with their results and the phase. */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "cusnap/proto.h"
#include "shim.h"

/* ---- the phase ---- */

static int phase = PROTO_PHASE_ACTIVE;
static char failure[600]; /* what put the process in FAILED */

int shim_phase(void)
{
	return __atomic_load_n(&phase, __ATOMIC_ACQUIRE);
}

/* The gate the application's tracked calls wait at while the process is not
 * ACTIVE (DESIGN.md §6.1): woken when the phase returns to ACTIVE or fails. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
/* The shim is preloaded, so its thread-local data is in the static TLS block:
 * the initial-exec model reads it without a call (the gated calls' hot path). */
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))
static SHIM_TLS bool own_thread;

static void set_phase(int p)
{
	__atomic_store_n(&phase, p, __ATOMIC_RELEASE);
	if (p == PROTO_PHASE_ACTIVE || p == PROTO_PHASE_FAILED) {
		pthread_mutex_lock(&gate_lock);
		pthread_cond_broadcast(&gate_open);
		pthread_mutex_unlock(&gate_lock);
	}
}

void shim_own_thread(void)
{
	own_thread = true;
}

CUresult shim_gate_wait(void)
{
	int p = shim_phase();
	if (p == PROTO_PHASE_ACTIVE || own_thread)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&gate_lock);
	while ((p = shim_phase()) != PROTO_PHASE_ACTIVE && p != PROTO_PHASE_FAILED) {
		/* (bounded waits: a wakeup between the check and the wait costs 50 ms at most) */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 50 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000L)
			until.tv_sec++, until.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&gate_open, &gate_lock, &until);
	}
	pthread_mutex_unlock(&gate_lock);
	if (p == PROTO_PHASE_FAILED) {
		LOG_AT(LOG_ERROR, "a tracked call refused: the rebuild of this process failed (%.400s)", failure);
		return CUDA_ERROR_NOT_READY;
	}
	return CUDA_SUCCESS;
}

/* ---- the application's work in flight (DESIGN.md §6.1) ----
 *
 * The gated calls of wrapped.def (copies, sets, launches, graphs, stream memory
 * operations) are the application's hot path: their gate is one store to a slot
 * of the calling thread, a compiler barrier and one load of the phase. QUIESCE
 * closes the gate (the phase), then waits until no slot is busy. The two sides
 * pair as an asymmetric Dekker: the fast side's barrier is made a full one by
 * QUIESCE's membarrier(2), which runs a memory barrier on every thread of the
 * process, so either the call sees the gate closed or QUIESCE sees it busy.
 * Where membarrier is refused (a seccomp filter) the fast side fences itself. */
struct work_slot {
	unsigned busy;          /* gated calls under way on its thread (written by that thread) */
	bool taken;             /* held by a live thread (under work_lock) */
	struct work_slot *next; /* every slot ever made: never freed, reused */
};
static struct work_slot *work_slots;
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;
static pthread_key_t work_key;
static SHIM_TLS struct work_slot *my_work;
static bool work_fenced; /* membarrier is unavailable: the fast side fences itself */

static void work_slot_free(void *p)
{
	struct work_slot *w = p;
	pthread_mutex_lock(&work_lock);
	w->taken = false;
	pthread_mutex_unlock(&work_lock);
}

/* In a forked child only the forking thread lives on: the others' slots are free. */
static void work_after_fork_child(void)
{
	pthread_mutex_init(&work_lock, NULL);
	for (struct work_slot *w = work_slots; w; w = w->next) {
		if (w != my_work)
			w->busy = 0, w->taken = false;
	}
}

static void work_init(void)
{
	work_fenced = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0;
	if (work_fenced)
		LOG_AT(LOG_INFO, "membarrier refused (%s): the application's gated calls fence themselves",
		       strerror(errno));
	pthread_key_create(&work_key, work_slot_free);
	pthread_atfork(NULL, NULL, work_after_fork_child);
}

/* The calling thread's slot, taken at its first gated call; NULL when out of memory. */
static struct work_slot *work_slot(void)
{
	pthread_once(&work_once, work_init);
	pthread_mutex_lock(&work_lock);
	struct work_slot *w = work_slots;
	while (w && w->taken)
		w = w->next;
	if (!w && (w = calloc(1, sizeof(*w))) != NULL) {
		w->next = work_slots;
		__atomic_store_n(&work_slots, w, __ATOMIC_RELEASE);
	}
	if (w)
		w->taken = true, w->busy = 0;
	pthread_mutex_unlock(&work_lock);
	if (w)
		pthread_setspecific(work_key, w);
	my_work = w;
	return w;
}

struct work_slot *shim_work_begin(CUresult *rc)
{
	struct work_slot *w = my_work;
	if (__builtin_expect(!w, 0) && !(w = work_slot())) {
		*rc = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	for (;;) {
		if (__builtin_expect(work_fenced, 0)) {
			__atomic_add_fetch(&w->busy, 1, __ATOMIC_SEQ_CST); /* (a full barrier of its own) */
		} else {
			__atomic_store_n(&w->busy, w->busy + 1, __ATOMIC_RELAXED);
			__atomic_signal_fence(__ATOMIC_SEQ_CST); /* (a full barrier at QUIESCE's membarrier) */
		}
		if (__builtin_expect(__atomic_load_n(&phase, __ATOMIC_RELAXED) == PROTO_PHASE_ACTIVE, 1) || own_thread)
			return w;
		__atomic_store_n(&w->busy, w->busy - 1, __ATOMIC_RELEASE);
		if ((*rc = shim_gate_wait()) != CUDA_SUCCESS)
			return NULL;
	}
}

void shim_work_end(struct work_slot *w)
{
	__atomic_store_n(&w->busy, w->busy - 1, __ATOMIC_RELEASE);
}

/* Gated calls under way on threads other than the caller's (QUIESCE's, after
 * the gate closed). */
static unsigned work_in_flight(void)
{
	unsigned n = 0;
	for (struct work_slot *w = __atomic_load_n(&work_slots, __ATOMIC_ACQUIRE); w; w = w->next)
		if (w != my_work)
			n += __atomic_load_n(&w->busy, __ATOMIC_ACQUIRE);
	return n;
}

int shim_work_drain(int budget_ms, unsigned *left)
{
	pthread_once(&work_once, work_init);
	/* Every thread's barrier: a call either saw the closed gate or is counted. */
	if (!work_fenced && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0) {
		*left = work_in_flight();
		return -ENOSYS;
	}
	int64_t until = proto_deadline(budget_ms);
	unsigned sleep_us = 50;
	while ((*left = work_in_flight()) != 0) {
		if (now_ms() >= (double)until)
			return -ETIMEDOUT;
		usleep(sleep_us);
		if (sleep_us < 5000)
			sleep_us *= 2;
	}
	return 0;
}

int shim_step_failed(struct life_result *r, int rc)
{
	set_phase(PROTO_PHASE_FAILED);
	snprintf(failure, sizeof(failure), "%s", r->msg);
	return rc;
}

void shim_step_set_phase(int p)
{
	set_phase(p);
}

/* Counted from 1, so that 0 means "not said". */
static _Atomic uint64_t generation = 1;

uint64_t shim_generation(void)
{
	return atomic_load(&generation);
}

CUresult shim_mutation_allowed(const char *call)
{
	int p = shim_phase();
	if (p == PROTO_PHASE_ACTIVE) {
		atomic_fetch_add(&generation, 1); /* (a change follows, under the same lock) */
		return CUDA_SUCCESS;
	}
	if (p != PROTO_PHASE_FAILED && !own_thread)
		return SHIM_RETRY; /* a step began since the call passed the gate: it waits there */
	LOG_AT(LOG_ERROR, "%s refused while a checkpoint is under way (phase %s)", call, proto_phase_name((uint32_t)p));
	return CUDA_ERROR_NOT_READY;
}

/* ---- the table ---- */

#define PH(x) (1u << PROTO_PHASE_##x)
#define ANY (~0u)
#define NONE 0u
#define AFTER_UNICAST (PH(UNICAST_RESTORED) | PH(MC_CREATED) | PH(MC_IMPORTED) | PH(RESTORED))
#define PROTO_PHASE_SAME 0
#define KIND_READ false
#define KIND_STEP true

static const struct op_rule {
	int (*serve)(struct op_call *c);
	bool step;
	unsigned admitted, done;
	int next;
} rules[] = {
#define OP(name, value, kind, adm, dn, nxt) [PROTO_OP_##name] = {serve_##name, KIND_##kind, adm, dn, PROTO_PHASE_##nxt},
#include "cusnap/ops.def"
#undef OP
};

static const struct op_rule *rule_of(int op)
{
	if (op <= 0 || op >= (int)(sizeof(rules) / sizeof(rules[0])) || !rules[op].serve)
		return NULL;
	return &rules[op];
}

void shim_error_reply(struct proto_buf *out, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t at = pbuf_begin(out, REC_ERROR);
	pbuf_put_str(out, F_MESSAGE, msg);
	pbuf_put_u32(out, F_PHASE, (uint32_t)shim_phase());
	pbuf_end(out, at);
}

/* Run lifecycle step op with c (the lifecycle lock held): the phase rule (a
 * step already done answers done), the step, the phase it leaves. */
static int shim_step(int op, struct op_call *c)
{
	const struct op_rule *rule = rule_of(op);
	if (!rule || !rule->step) {
		snprintf(c->r.msg, sizeof(c->r.msg), "operation %d (%s) is not a lifecycle step", op,
			 proto_op_name(op));
		return PROTO_E_OP;
	}
	int now = shim_phase();
	if (rule->done & (1u << now)) {
		LOG_AT(LOG_INFO, "%s: already done (phase %s)", proto_op_name(op), proto_phase_name((uint32_t)now));
		return PROTO_OK;
	}
	if (!(rule->admitted & (1u << now))) {
		bool f = now == PROTO_PHASE_FAILED;
		snprintf(c->r.msg, sizeof(c->r.msg), "%s refused in phase %s%s%.400s", proto_op_name(op),
			 proto_phase_name((uint32_t)now), f ? ": " : "", f ? failure : "");
		return PROTO_E_PHASE;
	}
	int rc = rule->serve(c);
	if (rc == PROTO_OK && rule->next != PROTO_PHASE_SAME)
		set_phase(rule->next);
	return rc;
}

/* Lifecycle steps run one at a time, whichever connection asks.
 *
 * Outside the fork lock order (identity.c's before_fork) on purpose: it is held
 * for a whole step (a PREPARE copies every shared byte), and taking it there
 * would stall the application's fork() that long. Nothing needs it in a child:
 * a forked child of a tracking process serves no endpoint and refuses tracking
 * (shim_forked_child), so a copy left held there is never taken. Under it a
 * step takes the locks of that order as any wrapper does. */
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

int shim_serve(int op, const uint8_t *payload, size_t len, int in_fd, struct proto_buf *out, struct op_fds *fds)
{
	const struct op_rule *rule = rule_of(op);
	if (!rule) {
		shim_error_reply(out, "operation %d (%s) is not served by this shim", op, proto_op_name(op));
		return PROTO_E_OP;
	}
	if (in_fd >= 0 && op != PROTO_OP_PREPARE && op != PROTO_OP_RESTORE_CREATORS) {
		shim_error_reply(out, "%s takes no descriptor", proto_op_name(op));
		return PROTO_E_FD;
	}
	struct op_call c = {.payload = payload, .len = len, .out = out, .fds = fds, .in_fd = in_fd};
	if (!rule->step)
		return rule->serve(&c);
	pthread_mutex_lock(&life_lock);
	int rc = shim_step(op, &c);
	pthread_mutex_unlock(&life_lock);
	ctx_leave_all();
	if (rc == PROTO_OK) {
		size_t at = pbuf_begin(out, REC_RESULT);
		pbuf_put_u64(out, F_BYTES, c.r.bytes);
		pbuf_put_u32(out, F_COUNT, c.r.count);
		pbuf_put_u32(out, F_PHASE, (uint32_t)shim_phase());
		pbuf_put_u64(out, F_GENERATION, shim_generation());
		if (c.r.file_digest)
			pbuf_put_u32(out, F_CRC32C, c.r.file_crc);
		pbuf_end(out, at);
	} else {
		shim_error_reply(out, "%s", c.r.msg);
		LOG_AT(LOG_ERROR, "%s: %s", proto_op_name(op), c.r.msg);
	}
	return rc;
}
