/* SPDX-License-Identifier: MIT */
/* Contexts for the driver calls the shim makes on its own threads (serving
 * EXPORT, every lifecycle step): DESIGN.md §4.1. The shim enters the primary
 * context of the object's device, which it retains itself for the length of one
 * operation, so that a context the application may destroy meanwhile is never
 * made current. Objects without a device of their own (HOST_NUMA memory,
 * multicast objects) use the device of the context that was current when the
 * application created them, else device 0. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

static __thread bool retained[PROTO_MAX_DEVICES];
static __thread CUcontext contexts[PROTO_MAX_DEVICES];
static __thread int current = -1;

CUresult ctx_enter_device(int dev)
{
	if (dev < 0 || dev >= PROTO_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!retained[dev]) {
		CUresult rc = aux.cuDevicePrimaryCtxRetain(&contexts[dev], dev);
		if (rc)
			return rc;
		retained[dev] = true;
	}
	if (current == dev)
		return CUDA_SUCCESS;
	CUresult rc = aux.cuCtxSetCurrent(contexts[dev]);
	current = rc == CUDA_SUCCESS ? dev : -1;
	return rc;
}

int ctx_device_of(const struct shim_alloc *a)
{
	if (!a->mc && a->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
		return a->prop.location.id;
	return a->ctx_device >= 0 ? a->ctx_device : 0;
}

int ctx_by_device(const void *x, const void *y)
{
	int a = ctx_device_of(*(struct shim_alloc *const *)x), b = ctx_device_of(*(struct shim_alloc *const *)y);
	return (a > b) - (a < b);
}

int ctx_current_device(void)
{
	CUdevice dev = -1;
	CUcontext ctx = NULL;
	if (aux.cuCtxGetCurrent && aux.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx && aux.cuCtxGetDevice &&
	    aux.cuCtxGetDevice(&dev) == CUDA_SUCCESS)
		return dev;
	return -1;
}

CUresult ctx_synchronize_devices(const bool *used, int n, int *failed_dev, const char **failed_call)
{
	for (int d = 0; d < n && d < PROTO_MAX_DEVICES; d++) {
		if (!used[d])
			continue;
		*failed_dev = d;
		*failed_call = "cuDevicePrimaryCtxRetain/cuCtxSetCurrent";
		CUresult rc = ctx_enter_device(d);
		if (rc)
			return rc;
		*failed_call = "cuCtxSynchronize";
		rc = aux.cuCtxSynchronize ? aux.cuCtxSynchronize() : CUDA_SUCCESS;
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

void ctx_mark_active_devices(bool *used, int n)
{
	int count = 0;
	if (!aux.cuDeviceGetCount || !aux.cuDevicePrimaryCtxGetState || aux.cuDeviceGetCount(&count) != CUDA_SUCCESS)
		return;
	for (int d = 0; d < count && d < n; d++) {
		unsigned flags = 0;
		int active = 0;
		if (aux.cuDevicePrimaryCtxGetState(d, &flags, &active) == CUDA_SUCCESS && active)
			used[d] = true;
	}
}

int shim_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, bool detached)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* (the shim's threads never take the application's signals) */
	int err = pthread_create(t, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return err ? -err : 0;
}

/* A synchronisation run on a thread of its own, so that its caller can stop
 * waiting: shared by both until the later of them lets go. */
struct sync_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool used[PROTO_MAX_DEVICES];
	bool done;
	int refs, failed_dev;
	const char *failed_call;
	CUresult rc;
};

static void sync_job_put(struct sync_job *j)
{
	pthread_mutex_lock(&j->mu);
	bool last = --j->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (last) {
		pthread_mutex_destroy(&j->mu);
		pthread_cond_destroy(&j->cv);
		free(j);
	}
}

static void *sync_job_run(void *arg)
{
	struct sync_job *j = arg;
	shim_own_thread();
	int dev = -1;
	const char *call = "";
	CUresult rc = ctx_synchronize_devices(j->used, PROTO_MAX_DEVICES, &dev, &call);
	ctx_leave_all();
	pthread_mutex_lock(&j->mu);
	j->rc = rc, j->failed_dev = dev, j->failed_call = call, j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	sync_job_put(j);
	return NULL;
}

CUresult ctx_synchronize_within(const bool *used, int budget_ms, int *failed_dev, const char **failed_call)
{
	struct sync_job *j = calloc(1, sizeof(*j));
	if (!j)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	memcpy(j->used, used, sizeof(j->used));
	j->refs = 2;
	pthread_t t;
	if (shim_thread_start(&t, sync_job_run, j, true) != 0) {
		j->refs = 1;
		sync_job_put(j);
		*failed_call = "pthread_create";
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += budget_ms / 1000;
	until.tv_nsec += (long)(budget_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&j->mu);
	while (!j->done && pthread_cond_timedwait(&j->cv, &j->mu, &until) != ETIMEDOUT)
		;
	CUresult rc = j->done ? j->rc : CUDA_ERROR_TIMEOUT;
	*failed_dev = j->done ? j->failed_dev : -1;
	*failed_call = j->done ? j->failed_call : "cuCtxSynchronize (still waiting)";
	pthread_mutex_unlock(&j->mu);
	sync_job_put(j);
	return rc;
}

void ctx_leave_all(void)
{
	if (current >= 0)
		aux.cuCtxSetCurrent(NULL);
	current = -1;
	for (int d = 0; d < PROTO_MAX_DEVICES; d++) {
		if (retained[d])
			aux.cuDevicePrimaryCtxRelease_v2(d);
		retained[d] = false;
	}
}
