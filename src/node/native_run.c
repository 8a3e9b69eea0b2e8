/* SPDX-License-Identifier: MIT */
/* The native steps over the CUDA processes of a tree: run concurrently (at most
 * one thread per core at a time), each call under a watchdog. A native call
 * cannot be cancelled (a missed multicast object makes the real checkpoint hang,
 * NCCL peers can make a lock hang): after the watchdog's timeout the stuck
 * process and step are named and the caller ends with exit 2, never silently
 * forever. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/fdcheck.h"

static const char *const step_names[] = {
	[NATIVE_QUERY] = "cuCheckpointProcessGetState",        [NATIVE_LOCK] = "cuCheckpointProcessLock",
	[NATIVE_CHECKPOINT] = "cuCheckpointProcessCheckpoint", [NATIVE_RESTORE] = "cuCheckpointProcessRestore",
	[NATIVE_UNLOCK] = "cuCheckpointProcessUnlock",
};

const char *native_step_name(enum native_step s)
{
	return step_names[s];
}

int native_watchdog_ms(const struct settings *set, enum native_step s)
{
	int timeout_ms = set->timeout_ms;
	/* A query does no work: a process that does not answer is stopped or stuck
	 * (or starved on a busy machine: never under 2 s). */
	if (s == NATIVE_QUERY)
		return timeout_ms < 2000 ? 2000 : timeout_ms;
	int ms = set->native_timeout_ms;
	/* A lock waits up to its own timeout for the process's work: never less. */
	if (s == NATIVE_LOCK && ms < timeout_ms + 5000)
		ms = timeout_ms + 5000;
	return ms;
}

/* Shared by the caller and its workers; freed by the last one out (a worker
 * stuck in the driver may outlive the caller's wait). */
struct run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const struct native *nat;
	enum native_step step;
	CUcheckpointRestoreArgs restore_args;
	unsigned lock_timeout_ms;
	size_t n, next, done, refs;
	int *pids;
	CUresult *rc;
	bool *finished;
	bool query_tid; /* NATIVE_QUERY: ask the restore thread id first (does it hold a context?) */
	bool *cuda;     /* NATIVE_QUERY: it does */
	int *state;     /* NATIVE_QUERY: its CUprocessState, or -1 */
};

static void run_unref(struct run *r)
{
	pthread_mutex_lock(&r->mu);
	bool last = --r->refs == 0;
	pthread_mutex_unlock(&r->mu);
	if (!last)
		return;
	free(r->pids);
	free(r->rc);
	free(r->finished);
	free(r->cuda);
	free(r->state);
	free(r);
}

static CUresult native_call(struct run *r, size_t i)
{
	int pid = r->pids[i];
	switch (r->step) {
	case NATIVE_QUERY: {
		int tid;
		CUprocessState st;
		CUresult rc = r->query_tid ? r->nat->restore_tid(pid, &tid) : CUDA_SUCCESS;
		bool cuda = rc == CUDA_SUCCESS;
		rc = cuda ? r->nat->get_state(pid, &st) : rc;
		pthread_mutex_lock(&r->mu);
		r->cuda[i] = cuda;
		r->state[i] = cuda && rc == CUDA_SUCCESS ? (int)st : -1;
		pthread_mutex_unlock(&r->mu);
		return rc;
	}
	case NATIVE_LOCK: {
		CUcheckpointLockArgs a;
		memset(&a, 0, sizeof(a));
		a.timeoutMs = r->lock_timeout_ms;
		return r->nat->lock(pid, &a);
	}
	case NATIVE_CHECKPOINT: return r->nat->checkpoint(pid, NULL);
	case NATIVE_RESTORE: return r->nat->restore(pid, r->restore_args.gpuPairsCount ? &r->restore_args : NULL);
	case NATIVE_UNLOCK: return r->nat->unlock(pid, NULL);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void *worker(void *arg)
{
	struct run *r = arg;
	for (;;) {
		pthread_mutex_lock(&r->mu);
		size_t i = r->next < r->n ? r->next++ : r->n;
		pthread_mutex_unlock(&r->mu);
		if (i == r->n)
			break;
		CUresult rc = native_call(r, i);
		pthread_mutex_lock(&r->mu);
		r->rc[i] = rc;
		r->finished[i] = true;
		r->done++;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
	run_unref(r);
	return NULL;
}

/* Run step for each of pids[0..n) concurrently under the watchdog: rc_out[i]
 * (CUDA_ERROR_TIMEOUT for a call still in the driver), and for NATIVE_QUERY
 * cuda_out[i] and state_out[i]. 0, -ETIMEDOUT (*stuck: the first index still
 * in the driver) or -ENOMEM. */
static int run_calls(const struct native *nat, enum native_step step, const struct settings *set, bool query_tid,
		     const int *pids, size_t n, const CUcheckpointGpuPair *pairs, unsigned npairs, CUresult *rc_out,
		     bool *cuda_out, int *state_out, size_t *stuck)
{
	struct run *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->nat = nat;
	r->step = step;
	r->query_tid = query_tid;
	r->restore_args.gpuPairs = (CUcheckpointGpuPair *)pairs;
	r->restore_args.gpuPairsCount = npairs;
	r->lock_timeout_ms = (unsigned)set->timeout_ms;
	r->n = n;
	r->pids = calloc(n + 1, sizeof(*r->pids));
	r->rc = calloc(n + 1, sizeof(*r->rc));
	r->finished = calloc(n + 1, sizeof(*r->finished));
	r->cuda = calloc(n + 1, sizeof(*r->cuda));
	r->state = calloc(n + 1, sizeof(*r->state));
	r->refs = 1;
	if (!r->pids || !r->rc || !r->finished || !r->cuda || !r->state) {
		run_unref(r);
		return -ENOMEM;
	}
	memcpy(r->pids, pids, n * sizeof(*pids));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (set->native_parallel > 0) /* 1: one process after another */
		cores = set->native_parallel;
	size_t limit = cores > 0 ? (size_t)cores : 1;
	if (step == NATIVE_QUERY && limit < 8)
		limit = 8; /* queries wait, they do not work: more of them at once */
	size_t threads = n < limit ? n : limit, started = 0;
	for (size_t k = 0; k < threads; k++) {
		pthread_t th;
		pthread_mutex_lock(&r->mu);
		r->refs++;
		pthread_mutex_unlock(&r->mu);
		if (pthread_create(&th, NULL, worker, r) != 0) {
			run_unref(r);
			break;
		}
		pthread_detach(th);
		started++;
	}
	if (!started && n) {
		/* No thread could be made: the calls run here, one after another. */
		pthread_mutex_lock(&r->mu);
		r->refs++;
		pthread_mutex_unlock(&r->mu);
		worker(r);
	}
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	long ms = native_watchdog_ms(set, step);
	deadline.tv_sec += ms / 1000;
	deadline.tv_nsec += (ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	int ret = 0;
	pthread_mutex_lock(&r->mu);
	while (r->done < r->n) {
		if (pthread_cond_timedwait(&r->cv, &r->mu, &deadline) == ETIMEDOUT && r->done < r->n) {
			for (size_t i = 0; i < r->n; i++)
				if (!r->finished[i]) {
					*stuck = i;
					break;
				}
			ret = -ETIMEDOUT;
			fd_check_exempt_open(); /* what the calls still in the driver hold is theirs */
			break;
		}
	}
	for (size_t i = 0; i < r->n; i++) {
		rc_out[i] = r->finished[i] ? r->rc[i] : CUDA_ERROR_TIMEOUT;
		if (cuda_out)
			cuda_out[i] = r->finished[i] && r->cuda[i];
		if (state_out)
			state_out[i] = r->finished[i] ? r->state[i] : -1;
	}
	pthread_mutex_unlock(&r->mu);
	run_unref(r);
	return ret;
}

int native_run(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
	       unsigned npairs, CUresult *results, size_t *stuck)
{
	size_t n = 0;
	int *pids = calloc(t->ncuda + 1, sizeof(*pids));
	size_t *index = calloc(t->ncuda + 1, sizeof(*index));
	CUresult *rc = calloc(t->ncuda + 1, sizeof(*rc));
	int ret = -ENOMEM;
	if (pids && index && rc) {
		for (size_t i = 0; i < t->ncuda; i++) {
			results[i] = CUDA_SUCCESS;
			if (!want || want[i]) {
				index[n] = i;
				pids[n++] = t->targets[i].obs;
			}
		}
		size_t at = 0;
		ret = run_calls(&t->nat, step, t->s, false, pids, n, pairs, npairs, rc, NULL, NULL, &at);
		if (ret == -ETIMEDOUT)
			*stuck = index[at];
		for (size_t i = 0; ret != -ENOMEM && i < n; i++)
			results[index[i]] = rc[i];
	}
	free(pids);
	free(index);
	free(rc);
	return ret;
}

int native_classify(const struct native *n, struct proc *p, size_t count, const struct settings *set, size_t *stuck)
{
	int *pids = calloc(count + 1, sizeof(*pids));
	bool *cuda = calloc(count + 1, sizeof(*cuda));
	int *state = calloc(count + 1, sizeof(*state));
	CUresult *rc = calloc(count + 1, sizeof(*rc));
	int ret = -ENOMEM;
	if (pids && cuda && state && rc) {
		for (size_t i = 0; i < count; i++)
			pids[i] = p[i].pid;
		/* Succeeds only for processes that hold a CUDA context. */
		ret = run_calls(n, NATIVE_QUERY, set, true, pids, count, NULL, 0, rc, cuda, state, stuck);
		for (size_t i = 0; ret != -ENOMEM && i < count; i++) {
			p[i].cuda = cuda[i];
			p[i].state = state[i];
		}
	}
	free(pids);
	free(cuda);
	free(state);
	free(rc);
	return ret;
}

int tree_states(struct tree *t, char *err, size_t errlen)
{
	int *pids = calloc(t->ncuda + 1, sizeof(*pids));
	int *state = calloc(t->ncuda + 1, sizeof(*state));
	CUresult *rc = calloc(t->ncuda + 1, sizeof(*rc));
	size_t stuck = 0;
	int ret = -ENOMEM;
	if (pids && state && rc) {
		for (size_t i = 0; i < t->ncuda; i++)
			pids[i] = t->targets[i].obs;
		ret = run_calls(&t->nat, NATIVE_QUERY, t->s, false, pids, t->ncuda, NULL, 0, rc, NULL, state, &stuck);
		for (size_t i = 0; ret != -ENOMEM && i < t->ncuda; i++)
			t->procs[t->cuda_index[i]].state = state[i];
	}
	if (ret == -ETIMEDOUT)
		snprintf(err, errlen, "process %d: %s did not return within %d ms (stopped, or starved of CPU?)",
			 pids[stuck], native_step_name(NATIVE_QUERY), native_watchdog_ms(t->s, NATIVE_QUERY));
	else if (ret < 0)
		snprintf(err, errlen, "out of memory");
	free(pids);
	free(state);
	free(rc);
	return ret < 0 ? -1 : 0;
}
