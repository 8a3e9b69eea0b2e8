/* SPDX-License-Identifier: MIT */
/* File content (DESIGN.md §6.2): a holder's shared bytes go to the file whose
 * descriptor came with PREPARE, and come back from the one that comes with
 * RESTORE_CREATORS, so that the process keeps no copy of them (CRIU dumps only
 * its own memory, and the bytes land in new memory twice rather than four
 * times). They pass through a small pinned staging buffer in two halves: the
 * device copies one chunk while the other is written or read. Each
 * allocation's CRC32C is taken on the way out and checked on the way back;
 * memory on the host is written and read in place. The descriptor is never
 * kept past the step. All of it runs under tbl.lock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/counters.h"
#include "cusnap/crc32c.h"
#include "cusnap/hostmem.h"
#include "cusnap/log.h"
#include "shim.h"

/* Each half of the staging buffer; allocations start on FILE_ALIGN in the file. */
enum { STAGE_HALF = 8u << 20, FILE_ALIGN = 4096 };

struct file_job {
	struct copy_job job;
	int fd;
	uint8_t *stage; /* 2 * STAGE_HALF bytes */
	uint64_t off;   /* save: where the next allocation goes */
};

static CUresult io_fail(struct life_result *r, const struct shim_alloc *a, const char *what, uint64_t off, ssize_t got,
			size_t want)
{
	if (got >= 0)
		life_fail(r, a, "%s the checkpoint's file at %llu: %zd of %zu bytes (%s)", what,
			  (unsigned long long)off, got, want, got ? "short" : "the file ends there");
	else
		life_fail(r, a, "%s the checkpoint's file at %llu failed: %s", what, (unsigned long long)off,
			  strerror(errno));
	return CUDA_ERROR_OPERATING_SYSTEM;
}

/* All of buf to or from fd at off: 0, or the last result (short or -1). */
static ssize_t full_io(int fd, bool write_it, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write_it ? pwrite(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done))
				     : pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -1 : (ssize_t)done;
		done += (size_t)n;
	}
	return 0;
}

static CUresult chunk_copy(struct file_job *f, struct shim_alloc *a, CUdeviceptr va, size_t at, size_t len,
			   uint8_t *half, CUstream s, struct life_result *r)
{
	CUresult rc = f->job.to_device ? aux.cuMemcpyHtoDAsync_v2(va + at, half, len, s)
				       : aux.cuMemcpyDtoHAsync_v2(half, va + at, len, s);
	if (rc)
		life_fail(r, a, "%s(%#llx, %zu) failed: %s",
			  f->job.to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync", (unsigned long long)(va + at),
			  len, shim_cu_name(rc));
	return rc;
}

static CUresult chunk_wait(struct shim_alloc *a, CUstream s, struct life_result *r)
{
	CUresult rc = aux.cuStreamSynchronize(s);
	if (rc)
		life_fail(r, a, "cuStreamSynchronize failed: %s", shim_cu_name(rc));
	return rc;
}

/* Out: chunk k+1 is copied from the device while chunk k is written. */
static CUresult save_one(struct copy_job *j, struct shim_alloc *a, CUdeviceptr va, CUstream s, struct life_result *r)
{
	struct file_job *f = (struct file_job *)j;
	uint32_t crc = 0;
	a->file_off = f->off;
	if (hostcopy_on_host(a)) {
		void *p = (void *)(uintptr_t)va;
		crc = crc32c(0, p, a->size);
		ssize_t w = full_io(f->fd, true, p, a->size, f->off);
		if (w)
			return io_fail(r, a, "writing to", f->off, w, a->size);
	} else {
		size_t chunks = (a->size + STAGE_HALF - 1) / STAGE_HALF;
		CUresult rc = chunk_copy(f, a, va, 0, a->size < STAGE_HALF ? a->size : STAGE_HALF, f->stage, s, r);
		for (size_t k = 0; !rc && k < chunks; k++) {
			size_t at = k * STAGE_HALF, len = a->size - at < STAGE_HALF ? a->size - at : STAGE_HALF;
			uint8_t *half = f->stage + (k % 2) * STAGE_HALF;
			if ((rc = chunk_wait(a, s, r)))
				break;
			if (k + 1 < chunks) {
				size_t next = a->size - at - len < STAGE_HALF ? a->size - at - len : STAGE_HALF;
				uint8_t *other = f->stage + ((k + 1) % 2) * STAGE_HALF;
				if ((rc = chunk_copy(f, a, va, at + len, next, other, s, r)))
					break;
			}
			crc = crc32c(crc, half, len);
			ssize_t w = full_io(f->fd, true, half, len, f->off + at);
			if (w)
				rc = io_fail(r, a, "writing to", f->off + at, w, len);
		}
		if (rc)
			return rc; /* (the lane waits for what is still queued before the staging goes) */
	}
	a->file_crc = crc;
	a->in_file = true;
	f->off += round_up(a->size, FILE_ALIGN);
	return CUDA_SUCCESS;
}

/* Back: chunk k is read while chunk k-1 is copied to the device. */
static CUresult load_one(struct copy_job *j, struct shim_alloc *a, CUdeviceptr va, CUstream s, struct life_result *r)
{
	struct file_job *f = (struct file_job *)j;
	uint32_t crc = 0;
	if (hostcopy_on_host(a)) {
		void *p = (void *)(uintptr_t)va;
		ssize_t got = full_io(f->fd, false, p, a->size, a->file_off);
		if (got)
			return io_fail(r, a, "reading from", a->file_off, got, a->size);
		crc = crc32c(0, p, a->size);
	} else {
		CUresult rc = CUDA_SUCCESS;
		for (size_t k = 0, at = 0; !rc && at < a->size; k++, at += STAGE_HALF) {
			size_t len = a->size - at < STAGE_HALF ? a->size - at : STAGE_HALF;
			uint8_t *half = f->stage + (k % 2) * STAGE_HALF;
			ssize_t got = full_io(f->fd, false, half, len, a->file_off + at);
			if (got) {
				rc = io_fail(r, a, "reading from", a->file_off + at, got, len);
				break;
			}
			crc = crc32c(crc, half, len);
			if (k && (rc = chunk_wait(a, s, r))) /* chunk k-1 is on the device: its half is free */
				break;
			rc = chunk_copy(f, a, va, at, len, half, s, r);
		}
		if (!rc)
			rc = chunk_wait(a, s, r);
		if (rc)
			return rc;
	}
	if (crc != a->file_crc) {
		life_fail(r, a, "its %zu bytes in the checkpoint's file at %llu are damaged: CRC32C %08x, written %08x",
			  a->size, (unsigned long long)a->file_off, crc, a->file_crc);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* The staging buffer, pinned for the batch where the driver will (else the
 * copies run pageable: slower, still correct). */
static uint8_t *stage_make(const struct shim_alloc *a, bool *pinned, struct life_result *r)
{
	uint8_t *p = hostmem_alloc(2 * (size_t)STAGE_HALF, COUNT_SHIM_MAP);
	*pinned = false;
	if (!p) {
		life_fail(r, NULL, "no host memory for the %u-byte staging buffer of file content", 2 * STAGE_HALF);
		return NULL;
	}
	if (aux.cuMemHostRegister_v2 && !life_enter(a, &(struct life_result){0}))
		*pinned = aux.cuMemHostRegister_v2(p, 2 * (size_t)STAGE_HALF, CU_MEMHOSTREGISTER_PORTABLE) ==
			  CUDA_SUCCESS;
	return p;
}

static void stage_free(const struct shim_alloc *a, uint8_t *p, bool pinned)
{
	if (pinned && !life_enter(a, &(struct life_result){0}) && aux.cuMemHostUnregister(p) != CUDA_SUCCESS)
		LOG_AT(LOG_WARN, "cuMemHostUnregister of the file staging buffer failed");
	hostmem_free(p, 2 * (size_t)STAGE_HALF, COUNT_SHIM_MAP);
}

static CUresult file_batch(struct shim_alloc **list, size_t n, int fd, bool to_device, struct life_result *r)
{
	bool pinned;
	struct file_job f = {.job = {.to_device = to_device, .copy = to_device ? load_one : save_one}, .fd = fd};
	if (!(f.stage = stage_make(list[0], &pinned, r)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = hostcopy_batch(list, n, &f.job, r);
	stage_free(list[0], f.stage, pinned);
	return rc;
}

CUresult hostfile_save(struct shim_alloc **list, size_t n, int fd, struct life_result *r)
{
	for (size_t i = 0; i < n; i++)
		hostcopy_forget(list[i]); /* (a copy left from before is stale) */
	if (ftruncate(fd, 0) != 0) {
		life_fail(r, NULL, "emptying the checkpoint's file failed: %s", strerror(errno));
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	CUresult rc = file_batch(list, n, fd, false, r);
	if (rc)
		for (size_t i = 0; i < n; i++)
			hostcopy_forget(list[i]);
	return rc;
}

CUresult hostfile_check(struct shim_alloc **list, size_t n, int fd, struct life_result *r)
{
	struct stat st;
	if (fd < 0) {
		life_fail(r, list[0], "its bytes are in a file of the checkpoint, and no descriptor of it came");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		life_fail(r, NULL, "the descriptor for file content is not a regular file");
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; i < n; i++) {
		if (list[i]->file_off + list[i]->size > (uint64_t)st.st_size) {
			life_fail(r, list[i],
				  "the checkpoint's file is %lld bytes, too short for its %zu at %llu "
				  "(truncated): nothing made",
				  (long long)st.st_size, list[i]->size, (unsigned long long)list[i]->file_off);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	return CUDA_SUCCESS;
}

CUresult hostfile_load(struct shim_alloc **list, size_t n, int fd, struct life_result *r)
{
	return n ? file_batch(list, n, fd, true, r) : CUDA_SUCCESS;
}
