/* SPDX-License-Identifier: MIT */
/* Events as cuda.h documents them (what real clients such as NCCL's strong
 * streams rely on): a stream wait, cuEventSynchronize and cuEventQuery are for
 * the record that was current when they were issued, never a later one; a
 * destroyed event lives on until the work naming it is done. */
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

/* Poll the stream until it is idle, at most ms: its last cuStreamQuery. */
static CUresult settle(CUstream s, int ms)
{
	CUresult rc = CUDA_ERROR_NOT_READY;
	for (int waited = 0; waited <= ms && rc == CUDA_ERROR_NOT_READY; waited += 5) {
		rc = cuStreamQuery(s);
		if (rc == CUDA_ERROR_NOT_READY)
			usleep(5000);
	}
	return rc;
}

/* wait(E) then record(E) on one stream: the wait is for E's record current at
 * the time (none, then the one on the other stream), not the record queued
 * after it on the same stream (which would deadlock the stream). */
static void strong_stream_pattern(void)
{
	CUstream s, t;
	CUevent e;
	CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
	CHECK_CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	/* E never recorded: a wait on it waits for nothing. */
	CHECK_CU(cuStreamWaitEvent(s, e, 0));
	CHECK_CU(cuEventRecord(e, s));
	CHECK_CU(settle(s, 5000));
	/* E's current record sits on t behind a gate: s waits for it, and only it. */
	struct gate g = GATE_INIT;
	CHECK_CU(cuLaunchHostFunc(t, gate_fn, &g));
	CHECK_CU(cuEventRecord(e, t));
	CHECK_CU(cuStreamWaitEvent(s, e, 0));
	CHECK_CU(cuEventRecord(e, s));
	usleep(50000);
	CHECK_CU_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* held by t's record */
	gate_open(&g);
	CHECK_CU(settle(s, 5000));
	CHECK_CU(settle(t, 5000));
	CHECK_CU(cuEventQuery(e));
	CHECK_CU(cuEventDestroy(e));
	CHECK_CU(cuStreamDestroy(s));
	CHECK_CU(cuStreamDestroy(t));
}

struct sync_arg {
	CUevent e;
	CUresult rc;
	bool done;
};

static void *sync_thread(void *arg)
{
	struct sync_arg *a = arg;
	CUcontext ctx;
	cuDevicePrimaryCtxRetain(&ctx, 0);
	cuCtxSetCurrent(ctx);
	a->rc = cuEventSynchronize(a->e);
	__atomic_store_n(&a->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* cuEventSynchronize waits for the record current when it was called: a record
 * issued while it waits (behind a gate that stays shut) does not hold it; the
 * query then reports that newer record pending until it is reached. */
static void synchronize_current_record(void)
{
	CUstream s, u;
	CUevent e;
	CHECK_CU(cuStreamCreate(&s, 0));
	CHECK_CU(cuStreamCreate(&u, 0));
	CHECK_CU(cuEventCreate(&e, 0));
	struct gate first = GATE_INIT, second = GATE_INIT;
	CHECK_CU(cuLaunchHostFunc(s, gate_fn, &first));
	CHECK_CU(cuEventRecord(e, s));
	CHECK_CU_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
	struct sync_arg a = {.e = e};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, sync_thread, &a), 0);
	usleep(50000);
	CHECK(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE));
	CHECK_CU(cuLaunchHostFunc(u, gate_fn, &second));
	CHECK_CU(cuEventRecord(e, u)); /* issued while the synchronize waits */
	gate_open(&first);
	for (int waited = 0; waited < 5000 && !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE); waited += 5)
		usleep(5000);
	CHECK(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE)); /* returned with the second record pending */
	if (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE))
		gate_open(&second); /* let it finish, to report the rest */
	pthread_join(th, NULL);
	CHECK_CU(a.rc);
	CHECK_CU_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY); /* now the record on u */
	gate_open(&second);
	CHECK_CU(cuEventSynchronize(e));
	CHECK_CU(cuEventQuery(e));
	CHECK_CU(cuEventDestroy(e));
	CHECK_CU(cuStreamDestroy(s));
	CHECK_CU(cuStreamDestroy(u));
}

/* An event destroyed while its record is still queued: the call succeeds at
 * once (cuda.h), the stream still reaches the record, and a wait queued on it
 * before the destroy is still honoured. */
static void destroy_while_pending(void)
{
	CUstream s, w;
	CUevent e;
	CHECK_CU(cuStreamCreate(&s, 0));
	CHECK_CU(cuStreamCreate(&w, 0));
	CHECK_CU(cuEventCreate(&e, 0));
	struct gate g = GATE_INIT;
	CHECK_CU(cuLaunchHostFunc(s, gate_fn, &g));
	CHECK_CU(cuEventRecord(e, s));
	CHECK_CU(cuStreamWaitEvent(w, e, 0));
	CHECK_CU(cuEventDestroy(e));
	CHECK_CU_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
	usleep(20000);
	CHECK_CU_EQ(cuStreamQuery(w), CUDA_ERROR_NOT_READY);
	gate_open(&g);
	CHECK_CU(settle(w, 5000));
	CHECK_CU(settle(s, 5000));
	CHECK_CU(cuStreamDestroy(s));
	CHECK_CU(cuStreamDestroy(w));
}

int main(void)
{
	CHECK_CU(emu_use_device(0));
	test_run("wait(E) then record(E) on one stream waits for E's earlier record only", strong_stream_pattern);
	test_run("cuEventSynchronize and cuEventQuery: the record current when called", synchronize_current_record);
	test_run("an event destroyed with its record pending lives until the record is reached", destroy_while_pending);
	return test_done();
}
