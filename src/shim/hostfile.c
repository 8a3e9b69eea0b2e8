/* SPDX-License-Identifier: MIT */
/* File content (DESIGN.md §6.2, §11.1): the bytes of every allocation a
 * process carries go to the file whose descriptor came with PREPARE, and come
 * back from the one that comes with RESTORE_CREATORS, so that the process
 * keeps no copy of them (CRIU dumps only its own memory).
 *
 * Each device's allocations move on a thread of their own (every device at
 * once; the coordinator runs every process at once) through a ring of pinned
 * slots, one stream each: while the CPU checks and writes one slot, the device
 * fills the others (and the other way back). Within a slot the bytes go in
 * blocks of BLOCK: each block's CRC32C is kept, and a block of zeros is a hole,
 * never written (the file is sparse there) and set with a device memset on the
 * way back, so that memory reserved but never written costs nothing. The
 * records (offsets, CRCs, holes) live in the process's own memory, which the
 * checkpoint carries. Memory on the host is read and written in place. The
 * descriptor is never kept past the step. All of it runs under tbl.lock, the
 * lanes' threads touching only their own allocations. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/counters.h"
#include "cusnap/crc32c.h"
#include "cusnap/hostmem.h"
#include "cusnap/log.h"
#include "shim.h"

/* Allocations start on FILE_ALIGN in the file; CRCs and holes are per BLOCK. */
enum { FILE_ALIGN = 4096, BLOCK = 2u << 20 };

/* What the file holds of one allocation. */
struct file_chunks {
	size_t nblocks;
	uint32_t *crc; /* each block's CRC32C (a hole's too) */
	uint8_t *hole; /* bit b: block b is all zeros, not written */
};

static bool is_hole(const struct file_chunks *c, size_t b)
{
	return c->hole[b / 8] & (1u << (b % 8));
}

void hostfile_forget(struct shim_alloc *a)
{
	free(a->chunks); /* (one block with its arrays) */
	a->chunks = NULL;
	a->in_file = false;
}

static struct file_chunks *chunks_new(size_t size)
{
	size_t n = (size + BLOCK - 1) / BLOCK;
	struct file_chunks *c = calloc(1, sizeof(*c) + n * sizeof(uint32_t) + (n + 7) / 8);
	if (c) {
		c->nblocks = n;
		c->crc = (uint32_t *)(c + 1);
		c->hole = (uint8_t *)(c->crc + n);
	}
	return c;
}

/* ---- the ring ---- */

struct ring {
	uint8_t *mem; /* slots * bytes */
	size_t slots, bytes;
	CUstream s[SHIM_RING_MAX_SLOTS];
	bool pinned;
};

static void ring_free(struct ring *g)
{
	for (size_t i = 0; i < g->slots; i++)
		if (g->s[i])
			aux.cuStreamDestroy_v2(g->s[i]);
	if (g->pinned && aux.cuMemHostUnregister(g->mem) != CUDA_SUCCESS)
		LOG_AT(LOG_WARN, "cuMemHostUnregister of the file ring failed");
	if (g->mem)
		hostmem_free(g->mem, g->slots * g->bytes, COUNT_SHIM_MAP);
}

/* The calling thread's ring (its device's context current) for the lane's n
 * allocations (shim_ring: at most an eighth of their bytes): no more slots
 * than they have chunks, pinned where the driver will (else the copies run
 * pageable: slower, still correct). */
static CUresult ring_make(struct ring *g, struct shim_alloc **list, size_t n, struct life_result *r)
{
	size_t total = 0, chunks = 0;
	for (size_t i = 0; i < n; i++)
		total += list[i]->size;
	shim_ring(total, &g->slots, &g->bytes);
	for (size_t i = 0; i < n && chunks < g->slots; i++)
		chunks += (list[i]->size + g->bytes - 1) / g->bytes;
	g->slots = chunks < g->slots ? (chunks ? chunks : 1) : g->slots;
	if (!(g->mem = hostmem_alloc(g->slots * g->bytes, COUNT_SHIM_MAP))) {
		life_fail(r, NULL, "no host memory for the %zu x %zu-byte ring of file content", g->slots, g->bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (aux.cuMemHostRegister_v2)
		g->pinned = aux.cuMemHostRegister_v2(g->mem, g->slots * g->bytes, CU_MEMHOSTREGISTER_PORTABLE) ==
			    CUDA_SUCCESS;
	for (size_t i = 0; i < g->slots; i++) {
		CUresult rc = aux.cuStreamCreate(&g->s[i], CU_STREAM_NON_BLOCKING);
		if (rc) {
			g->s[i] = NULL;
			life_fail(r, NULL, "cuStreamCreate for the file ring failed: %s", shim_cu_name(rc));
			return rc;
		}
	}
	return CUDA_SUCCESS;
}

/* ---- one lane: a device's allocations through its ring ---- */

struct file_job {
	struct copy_job job;
	int fd;
	char name[256]; /* the file, as failures name it */
};

/* Where a lane is: allocation i, at byte at of it (a chunk is a slot's bytes). */
struct cursor {
	size_t i, at;
};

static size_t chunk_len(const struct cursor *c, struct shim_alloc **list, size_t slot_bytes)
{
	size_t left = list[c->i]->size - c->at;
	return left < slot_bytes ? left : slot_bytes;
}

static void cursor_next(struct cursor *c, struct shim_alloc **list, size_t slot_bytes)
{
	c->at += chunk_len(c, list, slot_bytes);
	if (c->at >= list[c->i]->size)
		c->i++, c->at = 0;
}

static CUresult io_fail(struct life_result *r, const struct file_job *f, const struct shim_alloc *a, const char *what,
			uint64_t off, ssize_t got, size_t want)
{
	if (got >= 0)
		life_fail(r, a, "%s %s at %llu: %zd of %zu bytes (%s)", what, f->name, (unsigned long long)off, got,
			  want, got ? "short" : "the file ends there");
	else
		life_fail(r, a, "%s %s at %llu failed: %s", what, f->name, (unsigned long long)off, strerror(errno));
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

static bool all_zero(const uint8_t *p, size_t n)
{
	if (n < 16)
		return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
	static const uint8_t zeros[16];
	return !memcmp(p, zeros, 16) && !memcmp(p, p + 16, n - 16);
}

static CUresult device_copy(struct shim_alloc *a, bool to_device, CUdeviceptr va, uint8_t *host, size_t len, CUstream s,
			    struct life_result *r)
{
	CUresult rc = to_device ? aux.cuMemcpyHtoDAsync_v2(va, host, len, s)
				: aux.cuMemcpyDtoHAsync_v2(host, va, len, s);
	if (rc)
		life_fail(r, a, "%s(%#llx, %zu) failed: %s", to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync",
			  (unsigned long long)va, len, shim_cu_name(rc));
	return rc;
}

static CUresult slot_wait(struct shim_alloc *a, CUstream s, struct life_result *r)
{
	CUresult rc = aux.cuStreamSynchronize(s);
	if (rc)
		life_fail(r, a, "cuStreamSynchronize failed: %s", shim_cu_name(rc));
	return rc;
}

/* The chunk of a at at, held in p (len bytes): each block's CRC kept, its
 * holes noted, the rest written in runs. */
static CUresult chunk_out(const struct file_job *f, struct shim_alloc *a, size_t at, const uint8_t *p, size_t len,
			  struct life_result *r)
{
	size_t run = 0, run_len = 0; /* the run of data blocks not yet written: [run, run + run_len) */
	for (size_t off = 0; off < len; off += BLOCK) {
		size_t b = (at + off) / BLOCK, n = len - off < BLOCK ? len - off : BLOCK;
		bool zero = all_zero(p + off, n);
		a->chunks->crc[b] = crc32c(0, p + off, n);
		if (zero)
			a->chunks->hole[b / 8] |= (uint8_t)(1u << (b % 8));
		if (!zero && run_len == 0)
			run = off;
		if (!zero)
			run_len += n;
		if ((zero || off + n >= len) && run_len) {
			ssize_t w = full_io(f->fd, true, (void *)(p + run), run_len, a->file_off + at + run);
			if (w)
				return io_fail(r, f, a, "writing to", a->file_off + at + run, w, run_len);
			run_len = 0;
		}
	}
	return CUDA_SUCCESS;
}

/* Out: each slot refilled by its device copy while the others are written. */
static CUresult lane_save(struct copy_job *j, int dev, struct shim_alloc **list, const CUdeviceptr *va, size_t n,
			  struct life_result *r)
{
	(void)dev;
	struct file_job *f = (struct file_job *)j;
	struct ring g = {0};
	CUresult rc = ring_make(&g, list, n, r);
	/* The ring as a queue: slot k % slots holds chunk k; every slot kept busy. */
	struct cursor issue = {0}, done = {0};
	size_t queued = 0, processed = 0;
	while (!rc && done.i < n) {
		while (!rc && issue.i < n && queued - processed < g.slots) {
			struct shim_alloc *a = list[issue.i];
			size_t len = chunk_len(&issue, list, g.bytes);
			if (!hostcopy_on_host(a))
				rc = device_copy(a, false, va[issue.i] + issue.at, g.mem + (queued % g.slots) * g.bytes,
						 len, g.s[queued % g.slots], r);
			cursor_next(&issue, list, g.bytes);
			queued++;
		}
		if (rc)
			break;
		struct shim_alloc *a = list[done.i];
		size_t len = chunk_len(&done, list, g.bytes), k = processed % g.slots;
		const uint8_t *p = (const uint8_t *)(uintptr_t)(va[done.i] + done.at);
		if (!hostcopy_on_host(a)) {
			if ((rc = slot_wait(a, g.s[k], r)))
				break;
			p = g.mem + k * g.bytes;
		}
		if ((rc = chunk_out(f, a, done.at, p, len, r)))
			break;
		cursor_next(&done, list, g.bytes);
		processed++;
	}
	for (size_t k = 0; k < g.slots; k++) /* (nothing may still fill a slot when the ring goes) */
		if (g.s[k])
			aux.cuStreamSynchronize(g.s[k]);
	ring_free(&g);
	return rc;
}

/* The chunk of a at at back into the slot p and onto the device at va (or
 * into host memory at p itself): data runs read and checked, holes set. */
static CUresult chunk_in(const struct file_job *f, struct shim_alloc *a, size_t at, uint8_t *p, size_t len,
			 CUdeviceptr va, CUstream s, struct life_result *r)
{
	bool host = hostcopy_on_host(a);
	for (size_t off = 0; off < len;) {
		size_t b = (at + off) / BLOCK;
		bool hole = is_hole(a->chunks, b);
		size_t run = 0; /* blocks of the same kind from here */
		while (off + run < len && is_hole(a->chunks, (at + off + run) / BLOCK) == hole)
			run += len - off - run < BLOCK ? len - off - run : BLOCK;
		CUresult rc = CUDA_SUCCESS;
		if (hole && host) {
			memset(p + off, 0, run);
		} else if (hole) {
			rc = aux.cuMemsetD8Async ? aux.cuMemsetD8Async(va + off, 0, run, s) : CUDA_ERROR_NOT_SUPPORTED;
			if (rc)
				life_fail(r, a, "cuMemsetD8Async(%#llx, 0, %zu) for its zeros failed: %s",
					  (unsigned long long)(va + off), run, shim_cu_name(rc));
		} else {
			ssize_t got = full_io(f->fd, false, p + off, run, a->file_off + at + off);
			if (got)
				return io_fail(r, f, a, "reading from", a->file_off + at + off, got, run);
			for (size_t o = 0; o < run; o += BLOCK) {
				size_t bb = (at + off + o) / BLOCK, nb = run - o < BLOCK ? run - o : BLOCK;
				uint32_t crc = crc32c(0, p + off + o, nb);
				if (crc != a->chunks->crc[bb]) {
					life_fail(r, a,
						  "%s is damaged at %llu: %zu bytes of it with CRC32C %08x, written "
						  "%08x; "
						  "nothing of it released to the workload",
						  f->name, (unsigned long long)(a->file_off + at + off + o), nb, crc,
						  a->chunks->crc[bb]);
					return CUDA_ERROR_INVALID_VALUE;
				}
			}
			if (!host)
				rc = device_copy(a, true, va + off, p + off, run, s, r);
		}
		if (rc)
			return rc;
		off += run;
	}
	return CUDA_SUCCESS;
}

/* Back: chunk k read into its slot once the slot's last copy to the device is done. */
static CUresult lane_load(struct copy_job *j, int dev, struct shim_alloc **list, const CUdeviceptr *va, size_t n,
			  struct life_result *r)
{
	(void)dev;
	struct file_job *f = (struct file_job *)j;
	struct ring g = {0};
	CUresult rc = ring_make(&g, list, n, r);
	struct cursor c = {0};
	for (size_t k = 0; !rc && c.i < n; k++) {
		struct shim_alloc *a = list[c.i];
		size_t len = chunk_len(&c, list, g.bytes), slot = k % g.slots;
		uint8_t *p = (uint8_t *)(uintptr_t)(va[c.i] + c.at);
		if (!hostcopy_on_host(a)) {
			if (k >= g.slots && (rc = slot_wait(a, g.s[slot], r))) /* its last chunk is on the device */
				break;
			p = g.mem + slot * g.bytes;
		}
		rc = chunk_in(f, a, c.at, p, len, va[c.i] + c.at, g.s[slot], r);
		cursor_next(&c, list, g.bytes);
	}
	for (size_t k = 0; k < g.slots; k++)
		if (g.s[k] && aux.cuStreamSynchronize(g.s[k]) != CUDA_SUCCESS && !rc)
			rc = slot_wait(list[0], g.s[k], r);
	ring_free(&g);
	return rc;
}

static void name_file(struct file_job *f)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", f->fd);
	ssize_t n = readlink(link, f->name, sizeof(f->name) - 1);
	if (n <= 0)
		snprintf(f->name, sizeof(f->name), "the checkpoint's file");
	else
		f->name[n] = '\0';
}

/* The CRC32C of the file the list was saved to (in its order, each at its
 * place), from its blocks' CRCs: the holes and the padding between
 * allocations as the zeros they read as, no byte read again. */
static uint32_t file_crc(struct shim_alloc **list, size_t n)
{
	uint32_t crc = 0;
	for (size_t i = 0; i < n; i++) {
		const struct shim_alloc *a = list[i];
		for (size_t b = 0; b < a->chunks->nblocks; b++) {
			size_t left = a->size - b * (size_t)BLOCK;
			crc = crc32c_combine(crc, a->chunks->crc[b], left < BLOCK ? left : BLOCK);
		}
		crc = crc32c_zeros(crc, round_up(a->size, FILE_ALIGN) - a->size);
	}
	return crc;
}

CUresult hostfile_save(struct shim_alloc **list, size_t n, int fd, struct life_result *r)
{
	struct file_job f = {.job = {.to_device = false, .run_lane = lane_save}, .fd = fd};
	name_file(&f);
	/* Every allocation's place in the file first (the lanes write at once). */
	qsort(list, n, sizeof(*list), ctx_by_device);
	uint64_t off = 0;
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; i < n; i++) {
		hostcopy_forget(list[i]); /* (a copy left from before is stale) */
		if (!rc && !(list[i]->chunks = chunks_new(list[i]->size))) {
			life_fail(r, list[i], "out of memory for its file records");
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		list[i]->file_off = off;
		off += round_up(list[i]->size, FILE_ALIGN);
	}
	if (!rc && (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)off) != 0)) {
		life_fail(r, NULL, "sizing %s to %llu bytes failed: %s", f.name, (unsigned long long)off,
			  strerror(errno));
		rc = CUDA_ERROR_OPERATING_SYSTEM;
	}
	if (!rc && n)
		rc = hostcopy_batch(list, n, &f.job, r);
	for (size_t i = 0; i < n; i++) {
		if (rc)
			hostcopy_forget(list[i]);
		else
			list[i]->in_file = true;
	}
	if (!rc) {
		r->file_crc = file_crc(list, n);
		r->file_digest = true;
	}
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
		if (!list[i]->chunks || list[i]->file_off + list[i]->size > (uint64_t)st.st_size) {
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
	struct file_job f = {.job = {.to_device = true, .run_lane = lane_load}, .fd = fd};
	name_file(&f);
	return n ? hostcopy_batch(list, n, &f.job, r) : CUDA_SUCCESS;
}
