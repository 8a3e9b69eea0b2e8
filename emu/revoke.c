/* SPDX-License-Identifier: MIT */
/* Host revocation of unmapped device memory, batched. cuMemUnmap turns a
 * mapping back into an inaccessible part of its reservation; here that means
 * replacing the memfd mapping with an anonymous PROT_NONE one, and the kernel
 * flushes the TLB for every mapping replaced while its pages are present (on
 * this machine kind about 45 us each: a whole suspend of 8 processes x 4,096
 * imports spent most of its PREPARE there). So an unmapped range is queued
 * instead: the driver's view (the mapping trees) changes at once, and the host
 * range is revoked before any entry point other than the few that touch
 * neither memory nor the address space (EMU_NOREVOKE in api.def: cuMemUnmap,
 * cuMemRelease, the context switches) runs, before the native checkpoint, and
 * whenever the queue is full. A batch zaps the pages of all its ranges with
 * one process_madvise(MADV_DONTNEED), one flush, and then replaces each range,
 * which has no pages left to flush. Only code that reads device memory through
 * a raw pointer outside the driver, which CUDA never allows, could see a
 * queued range before its revocation. Caller holds emu.lock throughout. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "emu.h"

enum { QUEUE = 1024 }; /* IOV_MAX: one process_madvise call */

static struct iovec queue[QUEUE];
static size_t queued; /* read without the lock by emu_revoke_pending */

bool emu_revoke_pending(void)
{
	return __atomic_load_n(&queued, __ATOMIC_RELAXED) != 0;
}

static int by_address(const void *x, const void *y)
{
	const struct iovec *a = x, *b = y;
	return (a->iov_base > b->iov_base) - (a->iov_base < b->iov_base);
}

/* Zap the pages of the queue's ranges in one call, and so one TLB flush. Where
 * the kernel cannot (before 5.10, or MADV_DONTNEED refused there), nothing is
 * lost: each replacement then flushes alone, as an unbatched unmap did. */
static void zap(size_t n)
{
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (pidfd < 0)
		return;
	count_add(COUNT_EMU_MADVISE);
	(void)syscall(SYS_process_madvise, pidfd, queue, n, MADV_DONTNEED, 0);
	close(pidfd);
}

void emu_revoke_flush(void)
{
	size_t n = queued;
	if (!n)
		return;
	/* Adjacent ranges (a reservation's chunks unmapped in turn) become one. */
	qsort(queue, n, sizeof(*queue), by_address);
	size_t k = 0;
	for (size_t i = 1; i < n; i++) {
		if ((char *)queue[k].iov_base + queue[k].iov_len == queue[i].iov_base)
			queue[k].iov_len += queue[i].iov_len;
		else
			queue[++k] = queue[i];
	}
	n = k + 1;
	zap(n);
	for (size_t i = 0; i < n; i++)
		emu_mmap(queue[i].iov_base, queue[i].iov_len, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	__atomic_store_n(&queued, 0, __ATOMIC_RELAXED);
}

void emu_revoke(CUdeviceptr start, size_t len)
{
	if (queued == QUEUE)
		emu_revoke_flush();
	queue[queued] = (struct iovec){.iov_base = (void *)(uintptr_t)start, .iov_len = len};
	__atomic_store_n(&queued, queued + 1, __ATOMIC_RELAXED);
}
