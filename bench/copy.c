/* SPDX-License-Identifier: MIT */
/* bench/copy: the host-mode data path (DESIGN.md §6.2, §11). A creator shares
 * N allocations of SIZE bytes with one importer; the coordinator's PREPARE
 * (host content) copies their bytes into the creator's arena and RESTORE_CREATORS
 * copies them back, twice (the second suspend reuses the arena). The copy times
 * are the creator's own (its shim logs them); the stages around them add the
 * teardown and cuemu's making of fresh device memory. Printed beside the same
 * bytes through a single-thread memcpy into a populated buffer, and through
 * cuemu's own native checkpoint and restore of a process holding as many bytes
 * (populating its buffer included, as the first suspend's arena is not). Rates
 * in GB/s (10^9 bytes per second).
 *   build/bench/copy [--quick]    (BENCH_COPY=N,SIZE: that shape) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>

#include "cu_check.h"
#include "group.h"

static double rate(size_t bytes, double ms)
{
	return ms > 0 ? (double)bytes / (ms * 1e6) : 0;
}

/* The best of three single-thread copies into a populated buffer. */
static double memcpy_ms(size_t bytes)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
	char *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
	char *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (src == MAP_FAILED || dst == MAP_FAILED)
		return -1;
	memset(src, 0x5a, bytes);
	double best = -1;
	for (int i = 0; i < 3; i++) {
		double t0 = now_ms();
		memcpy(dst, src, bytes);
		double ms = now_ms() - t0;
		best = best < 0 || ms < best ? ms : best;
	}
	if (dst[bytes - 1] != 0x5a)
		best = -1;
	munmap(src, bytes);
	munmap(dst, bytes);
	return best;
}

struct host_run {
	double save_ms[2], load_ms[2];       /* the shim's copies out and back, first and second suspend */
	double prepare_ms[2], restore_ms[2]; /* the PREPARE and RESTORE_CREATORS stages around them */
	double arena_ms;                     /* making and populating the arena */
	int arenas;                          /* how many times an arena was made */
	long huge_kib;                       /* the creator's AnonHugePages after the first prepare */
	size_t bytes;
};

/* A process's anonymous memory in transparent huge pages, KiB (-1: unknown). */
static long anon_huge_kib(int pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", pid);
	FILE *f = fopen(path, "r");
	long kib = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

/* The times the creator's shim logged (SNAPSHOT_CUDA_VMM_LOG=2): its copies
 * in order, and the arena it made. */
static void read_log(const char *dir, struct host_run *h)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/log-0", dir);
	FILE *f = fopen(path, "r");
	char line[1024];
	int out = 0, back = 0;
	while (f && fgets(line, sizeof(line), f)) {
		const char *in = strstr(line, " in "), *pin = strstr(line, "pinning the arena took "),
			   *unpin = strstr(line, "unpinning it ");
		/* the whole step: pinning, copies, unpinning */
		double ms = (in ? atof(in + 4) : 0) + (pin ? atof(pin + 23) : 0) + (unpin ? atof(unpin + 13) : 0);
		if (strstr(line, "host-mode arena of")) {
			h->arena_ms += ms;
			h->arenas++;
		} else if (strstr(line, "host-mode copy out") && out < 2) {
			h->save_ms[out++] = ms;
		} else if (strstr(line, "host-mode copy back") && back < 2) {
			h->load_ms[back++] = ms;
		}
	}
	if (f)
		fclose(f);
}

static int host_mode(int n, size_t size, struct host_run *h)
{
	struct bench_group g;
	if (bench_group_start(&g, 2, n, size, false, true) < 0)
		return -1;
	struct coord_options o = {.timeout_ms = 300000,
				  .content = PROTO_CONTENT_HOST,
				  .dir = g.dir,
				  .on_stage = getenv("BENCH_VERBOSE") ? bench_stage : NULL};
	struct coord_report r;
	int rc = 0;
	for (int round = 0; !rc && round < 2; round++) {
		if (coord_prepare(g.t, 2, &o, &r) < 0) {
			fprintf(stderr, "prepare: %s\n", r.error);
			rc = -1;
			break;
		}
		h->prepare_ms[round] = r.ms[COORD_STAGE_PREPARE];
		h->bytes = r.bytes;
		if (round == 0)
			h->huge_kib = anon_huge_kib(g.pids[0]);
		if (coord_restore(g.t, 2, &o, &r) < 0) {
			fprintf(stderr, "restore: %s\n", r.error);
			rc = -1;
		}
		h->restore_ms[round] = r.ms[COORD_STAGE_RESTORE_CREATORS];
	}
	read_log(g.dir, h);
	bench_group_stop(&g);
	if (!rc && (h->save_ms[1] <= 0 || h->load_ms[1] <= 0)) {
		fprintf(stderr, "the creator logged no copy times\n");
		rc = -1;
	}
	return rc;
}

/* cuemu's native checkpoint and restore of a process holding the same bytes
 * (not shared: the native checkpoint takes them itself). */
static int native(int n, size_t size, double *ckpt_ms, double *restore_ms)
{
	struct bench_group g;
	if (bench_group_start(&g, 1, n, size, false, false) < 0)
		return -1;
	int pid = g.pids[0];
	CU(cuCheckpointProcessLock(pid, &(CUcheckpointLockArgs){.timeoutMs = 60000}));
	double t0 = now_ms();
	CUresult c = cuCheckpointProcessCheckpoint(pid, NULL);
	*ckpt_ms = now_ms() - t0;
	t0 = now_ms();
	CUresult r = c ? c : cuCheckpointProcessRestore(pid, NULL);
	*restore_ms = now_ms() - t0;
	if (!r)
		r = cuCheckpointProcessUnlock(pid, NULL);
	bench_group_stop(&g);
	if (c || r)
		fprintf(stderr, "native checkpoint/restore: %d/%d\n", (int)c, (int)r);
	return c || r ? -1 : 0;
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	char emu[PATH_MAX + 16];
	snprintf(emu, sizeof(emu), "%s/../emu", bench_bin());
	setenv("LD_LIBRARY_PATH", emu, 0);
	int n = quick ? 8 : 16;
	size_t size = (size_t)(quick ? 32 : 64) << 20;
	const char *shape = getenv("BENCH_COPY"); /* "N,SIZE" */
	if (shape && strchr(shape, ',')) {
		n = atoi(shape);
		size = strtoull(strchr(shape, ',') + 1, NULL, 0);
	}
	CU(cuInit(0));
	/* The arena of ordinary pages first, then the default (huge pages where
	 * the kernel allows), same run. */
	struct host_run small = {0}, h = {0}, small2 = {0}, h2 = {0};
	double ck = 0, rs = 0;
	/* Alternated, twice, each group its own processes: what the memory state
	 * a previous run left costs shows as the spread between the two rounds. */
	int bad = 0;
	for (int round = 0; !bad && round < 2; round++) {
		setenv("CUSNAP_HUGEPAGES", "0", 1);
		bad = host_mode(n, size, round ? &small2 : &small);
		unsetenv("CUSNAP_HUGEPAGES");
		bad = bad ? bad : host_mode(n, size, round ? &h2 : &h);
	}
	if (bad < 0 || native(n, size, &ck, &rs) < 0)
		return 1;
	size_t bytes = h.bytes;
	double mc = memcpy_ms(bytes);
	printf("%d allocations x %zu MiB = %.2f GB, 1 creator + 1 importer\n\n", n, size >> 20, (double)bytes / 1e9);
	printf("%-44s %10s %8s %10s %12s\n", "path", "ms", "GB/s", "x memcpy", "x cuemu ckpt");
	double base = rate(bytes, mc), nat = rate(bytes, ck);
	struct {
		const char *what;
		double ms;
	} rows[] = {
		{"memcpy, single thread, populated buffer", mc},
		{"cuemu native checkpoint (device -> host)", ck},
		{"cuemu native restore (host -> device)", rs},
		{"shim copy out, first suspend", h.save_ms[0]},
		{"shim copy back, first resume", h.load_ms[0]},
		{"shim copy out, second suspend (arena reused)", h.save_ms[1]},
		{"shim copy back, second resume", h.load_ms[1]},
		{"  PREPARE stage, first suspend", h.prepare_ms[0]},
		{"  PREPARE stage, second suspend", h.prepare_ms[1]},
		{"  RESTORE_CREATORS stage, first resume", h.restore_ms[0]},
		{"  RESTORE_CREATORS stage, second resume", h.restore_ms[1]},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		double gbs = rate(bytes, rows[i].ms);
		printf("%-44s %10.1f %8.2f %10.2f %12.2f\n", rows[i].what, rows[i].ms, gbs, base > 0 ? gbs / base : 0,
		       nat > 0 ? gbs / nat : 0);
	}
	printf("\narena: made %d time(s) (first suspend only)\n", h.arenas);
	printf("%-44s %10s %8s %14s\n", "arena pages", "make ms", "GB/s", "huge KiB");
	const struct host_run *runs[] = {&small, &h, &small2, &h2};
	for (int i = 0; i < 4; i++)
		printf("%-34s round %d %10.1f %8.2f %14ld\n",
		       i % 2 ? "transparent huge pages (default)" : "4 KiB (CUSNAP_HUGEPAGES=0)", i / 2 + 1,
		       runs[i]->arena_ms, rate(bytes, runs[i]->arena_ms), runs[i]->huge_kib);
	for (int i = 0; i < 4; i++)
		printf("first copy out, %-18s round %d %10.1f %8.2f\n", i % 2 ? "huge-page arena" : "4 KiB arena",
		       i / 2 + 1, runs[i]->save_ms[0], rate(bytes, runs[i]->save_ms[0]));
	printf("\ntargets: shim copies >= 0.8x memcpy and >= 1.0x cuemu's native checkpoint\n");
	return 0;
}
