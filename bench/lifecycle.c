/* SPDX-License-Identifier: MIT */
/* bench/lifecycle: the coordinator's control plane (everything except the
 * native checkpoint calls) for P participants x N allocations, in both content
 * modes, and validation alone on 1,000,000 records. Prints a table.
 *   build/bench/lifecycle [--quick] */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/coord.h"

static char bin[PATH_MAX];

static int run_case(int P, int N, int content, double *prep, double *rest, size_t *records)
{
	char dir[] = "/tmp/cusnap-bench-XXXXXX";
	if (!mkdtemp(dir))
		return -1;
	char ctl[PATH_MAX], worker[PATH_MAX + 32], launcher[PATH_MAX + 32];
	snprintf(ctl, sizeof(ctl), "%s/ctl", dir);
	snprintf(worker, sizeof(worker), "%s/lc_worker", bin);
	snprintf(launcher, sizeof(launcher), "%s/../bin/snapshot-cuda-vmm-launch", bin);
	setenv("SNAPSHOT_CONTROL_DIR", ctl, 1);
	setenv("CUEMU_GRANULARITY", "64K", 1);
	pid_t pids[64];
	for (int i = 0; i < P; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			char idx[16], cnt[16], n[16];
			snprintf(idx, sizeof(idx), "%d", i);
			snprintf(cnt, sizeof(cnt), "%d", P);
			snprintf(n, sizeof(n), "%d", N);
			execl(launcher, launcher, worker, dir, idx, cnt, n, (char *)NULL);
			_exit(127);
		}
	}
	int ready = 0;
	for (double t0 = now_ms(); ready < P && now_ms() - t0 < 300000;) {
		ready = 0;
		for (int i = 0; i < P; i++) {
			char path[PATH_MAX + 32];
			snprintf(path, sizeof(path), "%s/ready-%d", dir, i);
			ready += access(path, F_OK) == 0;
		}
		usleep(20000);
	}
	int rc = -1;
	if (ready == P) {
		struct coord_target t[64];
		for (int i = 0; i < P; i++) {
			t[i].obs = t[i].ns = pids[i];
			coord_endpoint_path("", ctl, pids[i], pids[i], t[i].endpoint, sizeof(t[i].endpoint));
		}
		struct coord_options o = {.timeout_ms = 120000,
					  .content = content,
					  .dir = dir,
					  .progress = getenv("BENCH_VERBOSE") ? stderr : NULL};
		struct coord_report r;
		double t0 = now_ms();
		int a = coord_prepare(t, (size_t)P, &o, &r);
		*prep = now_ms() - t0;
		*records = r.participants + r.allocations + r.mappings;
		if (a < 0)
			fprintf(stderr, "prepare: %s\n", r.error);
		t0 = now_ms();
		int b = a < 0 ? -1 : coord_restore(t, (size_t)P, &o, &r);
		*rest = now_ms() - t0;
		if (b < 0 && a >= 0)
			fprintf(stderr, "restore: %s\n", r.error);
		rc = a < 0 || b < 0 ? -1 : 0;
	}
	for (int i = 0; i < P; i++)
		kill(pids[i], SIGKILL);
	for (int i = 0; i < P; i++)
		waitpid(pids[i], NULL, 0);
	char *argv[] = {"rm", "-rf", dir, NULL};
	pid_t c = fork();
	if (c == 0) {
		execvp("rm", argv);
		_exit(127);
	}
	waitpid(c, NULL, 0);
	return rc;
}

/* 1,000,000 records: 4 participants, 1 creator of 125,000 allocations, each
 * imported by the 3 others, one mapping per allocation record. */
static double validate_million(size_t *records)
{
	enum { P = 4, N = 125000 };
	struct topo_participant p[P];
	struct coord_target t[P];
	memset(p, 0, sizeof(p));
	for (int i = 0; i < P; i++) {
		t[i].obs = t[i].ns = 100 + i;
		p[i].id.b[0] = (uint8_t)(i + 1);
		p[i].nallocs = p[i].nmaps = N;
		p[i].allocs = calloc(N, sizeof(*p[i].allocs));
		p[i].maps = calloc(N, sizeof(*p[i].maps));
		for (int k = 0; k < N; k++) {
			struct topo_alloc *a = &p[i].allocs[k];
			a->key = (uint64_t)k + 1;
			a->id.b[0] = 0xa0;
			memcpy(a->id.b + 1, &k, sizeof(k));
			a->creator = p[0].id;
			a->role = i == 0 ? 1 : 2;
			a->shared = 1;
			a->shared_types = 1;
			a->size = 2 << 20;
			a->handle_types = 1;
			a->handles = 1;
			a->mappings = 1;
			a->granularity = 2 << 20;
			struct topo_mapping *m = &p[i].maps[k];
			m->key = a->key;
			m->alloc_id = a->id;
			m->address = 0x100000000000ull + (uint64_t)k * (4 << 20);
			m->size = 2 << 20;
		}
	}
	*records = (size_t)P * N * 2;
	char err[512];
	double t0 = now_ms();
	int rc = coord_validate(t, p, P, err, sizeof(err));
	double ms = now_ms() - t0;
	if (rc)
		fprintf(stderr, "validation: %s\n", err);
	for (int i = 0; i < P; i++) {
		free(p[i].allocs);
		free(p[i].maps);
	}
	return ms;
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	ssize_t n = readlink("/proc/self/exe", bin, sizeof(bin) - 1);
	bin[n > 0 ? n : 0] = '\0';
	*strrchr(bin, '/') = '\0';
	static const int parts[] = {1, 4, 8, 16}, allocs[] = {64, 1024, 4096};
	printf("%-8s %12s %12s %8s %12s %12s %12s\n", "content", "participants", "allocations", "records", "prepare ms",
	       "restore ms", "total ms");
	for (int c = 1; c <= 2; c++) {
		for (int pi = 0; pi < 4; pi++) {
			for (int ai = 0; ai < 3; ai++) {
				if (quick && (parts[pi] > 8 || allocs[ai] > 1024))
					continue;
				const char *only = getenv("BENCH_ONLY"); /* "P,N" */
				if (only && (atoi(only) != parts[pi] ||
					     atoi(strchr(only, ',') ? strchr(only, ',') + 1 : "0") != allocs[ai]))
					continue;
				double prep = 0, rest = 0;
				size_t records = 0;
				if (run_case(parts[pi], allocs[ai], c, &prep, &rest, &records) < 0) {
					printf("%-8s %12d %12d   failed\n", c == 1 ? "host" : "native", parts[pi],
					       allocs[ai]);
					continue;
				}
				printf("%-8s %12d %12d %8zu %12.1f %12.1f %12.1f\n", c == 1 ? "host" : "native",
				       parts[pi], allocs[ai], records, prep, rest, prep + rest);
				fflush(stdout);
			}
		}
	}
	size_t records;
	double ms = validate_million(&records);
	printf("\nvalidation alone: %zu records in %.1f ms\n", records, ms);
	return 0;
}
