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

#include "cusnap.h"
#include "cusnap/fdcheck.h"

static const char *const step_names[] = {
	[NATIVE_LOCK] = "cuCheckpointProcessLock",
	[NATIVE_CHECKPOINT] = "cuCheckpointProcessCheckpoint",
	[NATIVE_RESTORE] = "cuCheckpointProcessRestore",
	[NATIVE_UNLOCK] = "cuCheckpointProcessUnlock",
};

const char *native_step_name(enum native_step s)
{
	return step_names[s];
}

int native_watchdog_ms(enum native_step s)
{
	const char *e = getenv("CUSNAP_NATIVE_TIMEOUT_MS");
	int ms = e && atoi(e) > 0 ? atoi(e) : 300000;
	/* A lock waits up to its own timeout for the process's work: never less. */
	if (s == NATIVE_LOCK && ms < opt_timeout_ms + 5000)
		ms = opt_timeout_ms + 5000;
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
	free(r);
}

static CUresult call(struct run *r, int pid)
{
	switch (r->step) {
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
		CUresult rc = call(r, r->pids[i]);
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

int native_run(struct tree *t, enum native_step step, const bool *want, const CUcheckpointGpuPair *pairs,
	       unsigned npairs, CUresult *results, size_t *stuck)
{
	struct run *r = calloc(1, sizeof(*r));
	size_t n = 0;
	int *pids = r ? calloc(t->ncuda + 1, sizeof(*pids)) : NULL;
	size_t *index = pids ? calloc(t->ncuda + 1, sizeof(*index)) : NULL;
	if (!index) {
		free(pids);
		free(r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->ncuda; i++) {
		results[i] = CUDA_SUCCESS;
		if (!want || want[i]) {
			index[n] = i;
			pids[n++] = t->targets[i].obs;
		}
	}
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->nat = &t->nat;
	r->step = step;
	r->restore_args.gpuPairs = (CUcheckpointGpuPair *)pairs;
	r->restore_args.gpuPairsCount = npairs;
	r->lock_timeout_ms = (unsigned)opt_timeout_ms;
	r->n = n;
	r->pids = pids;
	r->rc = calloc(n + 1, sizeof(*r->rc));
	r->finished = calloc(n + 1, sizeof(*r->finished));
	r->refs = 1;
	if (!r->rc || !r->finished) {
		free(index);
		run_unref(r);
		return -ENOMEM;
	}
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	const char *cap = getenv("CUSNAP_NATIVE_PARALLEL"); /* 1: one process after another */
	if (cap && atol(cap) > 0)
		cores = atol(cap);
	size_t limit = cores > 0 ? (size_t)cores : 1;
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
	long ms = native_watchdog_ms(step);
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
					*stuck = index[i];
					break;
				}
			ret = -ETIMEDOUT;
			fd_check_exempt_open(); /* what the calls still in the driver hold is theirs */
			break;
		}
	}
	for (size_t i = 0; i < r->n; i++)
		results[index[i]] = r->finished[i] ? r->rc[i] : CUDA_ERROR_TIMEOUT;
	pthread_mutex_unlock(&r->mu);
	free(index);
	run_unref(r);
	return ret;
}
