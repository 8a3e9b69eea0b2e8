/* SPDX-License-Identifier: MIT */
/* The call gate: how a checkpoint lock blocks the process's CUDA calls, and how
 * CUEMU_FAULT reaches every entry point. */
#include <errno.h>
#include <time.h>

#include "cusnap/log.h"
#include "emu.h"

static const unsigned fn_flags[EMU_FN_COUNT] = {
#define X(sym, name, ver, flags) [EMU_FN_##sym] = (flags),
#include "api.def"
#undef X
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	CUprocessState state;
	bool locking;      /* a lock is draining in-flight work */
	unsigned inflight; /* gated calls executing now */
	unsigned async;    /* stream operations queued or running */
} gate = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
	.state = CU_PROCESS_STATE_RUNNING,
};

static __thread bool in_gate;

CUresult emu_enter(enum emu_fn fn)
{
	count_add(COUNT_CALLS + (unsigned)fn);
	emu_config();
	unsigned flags = fn_flags[fn];
	if (!(flags & EMU_NOINIT) && (!__atomic_load_n(&emu.initialized, __ATOMIC_ACQUIRE) || emu.forked_after_init))
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((flags & EMU_NEEDCTX) && emu.require_context && !emu_current) {
		LOG_AT(LOG_WARN, "%s without a current context: CUDA_ERROR_INVALID_CONTEXT (CUEMU_REQUIRE_CONTEXT)",
		       emu_fn_name(fn));
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (!(flags & EMU_NOGATE)) {
		pthread_mutex_lock(&gate.mu);
		while ((gate.state != CU_PROCESS_STATE_RUNNING || gate.locking) &&
		       gate.state != CU_PROCESS_STATE_FAILED)
			pthread_cond_wait(&gate.cv, &gate.mu);
		if (gate.state == CU_PROCESS_STATE_FAILED) {
			/* Why not block forever: a process whose restore failed is
			 * unusable; an error is more useful to it than a hang. */
			pthread_mutex_unlock(&gate.mu);
			return CUDA_ERROR_ILLEGAL_STATE;
		}
		gate.inflight++;
		pthread_mutex_unlock(&gate.mu);
		in_gate = true;
	}
	if (!(flags & EMU_NOREVOKE) && emu_revoke_pending()) {
		pthread_mutex_lock(&emu.lock);
		emu_revoke_flush();
		pthread_mutex_unlock(&emu.lock);
	}
	CUresult f = emu_fault_check(fn);
	if (f != CUDA_SUCCESS) {
		LOG_AT(LOG_INFO, "CUEMU_FAULT: %s fails with %d", emu_fn_name(fn), (int)f);
		emu_leave();
		return f;
	}
	return CUDA_SUCCESS;
}

void emu_leave(void)
{
	if (!in_gate)
		return;
	in_gate = false;
	pthread_mutex_lock(&gate.mu);
	if (--gate.inflight == 0)
		pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

void emu_async_begin(void)
{
	pthread_mutex_lock(&gate.mu);
	gate.async++;
	pthread_mutex_unlock(&gate.mu);
}

void emu_async_end(void)
{
	pthread_mutex_lock(&gate.mu);
	if (--gate.async == 0)
		pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

CUresult emu_gate_lock(unsigned timeout_ms)
{
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&gate.mu);
	if (gate.state != CU_PROCESS_STATE_RUNNING || gate.locking) {
		rc = CUDA_ERROR_ILLEGAL_STATE;
		goto out;
	}
	gate.locking = true;
	while (gate.inflight || gate.async) {
		int e = timeout_ms ? pthread_cond_clockwait(&gate.cv, &gate.mu, CLOCK_MONOTONIC, &deadline)
				   : pthread_cond_wait(&gate.cv, &gate.mu);
		if (e == ETIMEDOUT && (gate.inflight || gate.async)) {
			/* Documented: on timeout the process is left RUNNING. */
			rc = CUDA_ERROR_NOT_READY;
			break;
		}
	}
	gate.locking = false;
	if (rc == CUDA_SUCCESS)
		gate.state = CU_PROCESS_STATE_LOCKED;
	pthread_cond_broadcast(&gate.cv);
out:
	pthread_mutex_unlock(&gate.mu);
	return rc;
}

CUresult emu_gate_unlock(void)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&gate.mu);
	if (gate.state != CU_PROCESS_STATE_LOCKED)
		rc = CUDA_ERROR_ILLEGAL_STATE;
	else
		gate.state = CU_PROCESS_STATE_RUNNING;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
	return rc;
}

CUprocessState emu_gate_state(void)
{
	pthread_mutex_lock(&gate.mu);
	CUprocessState s = gate.state;
	pthread_mutex_unlock(&gate.mu);
	return s;
}

void emu_gate_set(CUprocessState s)
{
	pthread_mutex_lock(&gate.mu);
	gate.state = s;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}
