/* SPDX-License-Identifier: MIT */
/* The shim's one dispatch of the endpoint protocol, and its phase (DESIGN.md
 * §6.1). include/cusnap/ops.def names each operation's serve_ function, the
 * phases that admit it and the phase a success leaves. READ operations are
 * answered at once and write their own replies; STEP operations run one at a
 * time under the lifecycle lock and reply with their results and the phase. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
static __thread bool own_thread;

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

CUresult shim_mutation_allowed(const char *call)
{
	int p = shim_phase();
	if (p == PROTO_PHASE_ACTIVE)
		return CUDA_SUCCESS;
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
		pbuf_end(out, at);
	} else {
		shim_error_reply(out, "%s", c.r.msg);
		LOG_AT(LOG_ERROR, "%s: %s", proto_op_name(op), c.r.msg);
	}
	return rc;
}
