/* SPDX-License-Identifier: MIT */
/* The ledger of what this process holds that a native checkpoint cannot take
 * down and rebuild: noted by the wrappers as it is made, struck off as it is
 * released, and refused at QUIESCE (PROTO_E_UNRESTORABLE) while any is held.
 * Its lock is a leaf: taken under the table's or the legacy lock, never the
 * other way round. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cusnap/control.h"
#include "shim.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct hmap held[UNRESTORABLE_KINDS]; /* key -> how many times noted */
static const char *_Atomic ipc_call;         /* the first event or memory-pool IPC call */

void unrestorable_add(enum unrestorable kind, uint64_t key)
{
	pthread_mutex_lock(&lock);
	uintptr_t n = (uintptr_t)hmap_get(&held[kind], key);
	/* (out of memory: the count stays where it was, and QUIESCE refuses
	 * anyway when it was already noted; a miss is the lesser harm) */
	hmap_put(&held[kind], key, (void *)(n + 1));
	pthread_mutex_unlock(&lock);
}

bool unrestorable_del(enum unrestorable kind, uint64_t key)
{
	pthread_mutex_lock(&lock);
	uintptr_t n = (uintptr_t)hmap_get(&held[kind], key);
	if (n > 1)
		hmap_put(&held[kind], key, (void *)(n - 1));
	else if (n == 1)
		hmap_del(&held[kind], key);
	pthread_mutex_unlock(&lock);
	return n > 0;
}

bool unrestorable_has(enum unrestorable kind, uint64_t key)
{
	pthread_mutex_lock(&lock);
	bool there = hmap_get(&held[kind], key) != NULL;
	pthread_mutex_unlock(&lock);
	return there;
}

void unrestorable_ipc_call(const char *call)
{
	const char *none = NULL;
	atomic_compare_exchange_strong(&ipc_call, &none, call);
}

void unrestorable_lock_for_fork(bool take)
{
	shim_lock_for_fork(&lock, take);
}

bool unrestorable_refusal(char *why, size_t len)
{
	size_t n[UNRESTORABLE_KINDS];
	pthread_mutex_lock(&lock);
	for (int k = 0; k < UNRESTORABLE_KINDS; k++)
		n[k] = held[k].len;
	pthread_mutex_unlock(&lock);
	/* In a checkpoint job (driver 610) the native checkpoint carries raw
	 * legacy IPC itself: the driver, not the shim, decides. */
	const char *job = getenv(CONTROL_JOB_ENV);
	if (job && *job)
		n[UNRESTORABLE_LEGACY_IPC] = 0;
	if (n[UNRESTORABLE_MULTICAST])
		/* Never let the native checkpoint hang on a multicast object it cannot take down. */
		snprintf(why, len,
			 "%zu multicast handle(s) were imported from raw file descriptors, not through the shim's "
			 "capabilities: they cannot be taken down and rebuilt",
			 n[UNRESTORABLE_MULTICAST]);
	else if (n[UNRESTORABLE_FOREIGN])
		/* The driver checkpoints these and refuses to restore them (r580). */
		snprintf(why, len,
			 "%zu allocation(s) imported from raw file descriptors (cuMemImportFromShareableHandle of an "
			 "FD the shim did not broker, e.g. from a process without the interposer): the driver would "
			 "not restore them (r580: CUDA_ERROR_NOT_SUPPORTED); release them first",
			 n[UNRESTORABLE_FOREIGN]);
	else if (n[UNRESTORABLE_LEGACY_IPC])
		snprintf(why, len,
			 "%zu legacy IPC handle(s) were opened with cuIpcOpenMemHandle from driver handles, not "
			 "through the shim's adapter (SNAPSHOT_CUDA_VMM_IPC=0, or an exporter without it): they "
			 "cannot be taken down and rebuilt (a driver of 610 or later checkpoints them inside a "
			 "checkpoint job: cusnap run --launch-job)",
			 n[UNRESTORABLE_LEGACY_IPC]);
	else if (ipc_call)
		snprintf(why, len,
			 "this process used %s: event and memory-pool IPC between processes cannot be checkpointed",
			 ipc_call);
	else
		return false;
	return true;
}
