/* SPDX-License-Identifier: MIT */
/* bench/lifecycle: the coordinator's control plane (everything except the
 * native checkpoint calls) for P participants x N allocations, in both content
 * modes; the same group suspended and resumed by cusnap as whole commands
 * (native steps included); and validation alone on 1,000,000 records. In each
 * group participant 0 creates the N allocations and the others import and map
 * all of them. Prints tables.
 *   build/bench/lifecycle [--quick]    (BENCH_ONLY=P,N: that shape only;
 *   BENCH_CONTENT=host|native: that content only; BENCH_ROUNDS=R: medians of R
 *   runs of each case) */
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../src/coordinator/coord.h"
#include "cusnap/counters.h"
#include "cusnap/request.h"
#include "group.h"

/* The counters every process of the group adds to (CUSNAP_COUNT). */
struct counts {
	uint64_t v[COUNT_SLOTS];
	uint64_t tlb; /* TLB shootdown interrupts, all CPUs (/proc/interrupts: machine-wide) */
};

static const char *const call_names[] = {
#define X(sym, name, ver, flags) #sym,
#include "../emu/api.def"
#undef X
};
#define NCALLS (sizeof(call_names) / sizeof(call_names[0]))

static void counts_read(const char *path, struct counts *c)
{
	memset(c, 0, sizeof(*c));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && pread(fd, c->v, sizeof(c->v), 0) < 0)
		memset(c, 0, sizeof(*c));
	if (fd >= 0)
		close(fd);
	/* The "TLB:" line: one count per CPU. Another process's shootdowns count
	 * too, so read it on an idle machine. */
	FILE *f = fopen("/proc/interrupts", "re");
	char line[4096];
	while (f && fgets(line, sizeof(line), f)) {
		char *p = line + strspn(line, " ");
		if (strncmp(p, "TLB:", 4) != 0)
			continue;
		p += 4;
		for (char *end;; p = end) {
			unsigned long long n = strtoull(p, &end, 10);
			if (end == p)
				break;
			c->tlb += n;
		}
	}
	if (f)
		fclose(f);
}

/* What a stage cost: after minus before. */
struct cost {
	uint64_t calls, emu_maps, shim_maps, coord_requests, shim_requests, shim_connections, tlb;
	size_t top; /* the entry point called most */
	uint64_t top_calls;
	uint64_t per_call[COUNT_MAX_CALLS]; /* BENCH_CALLS=1 prints them */
};

static struct cost cost_of(const struct counts *before, const struct counts *after)
{
	struct cost c = {0};
	for (size_t i = 0; i < NCALLS; i++) {
		uint64_t d = after->v[COUNT_CALLS + i] - before->v[COUNT_CALLS + i];
		c.calls += d;
		c.per_call[i] = d;
		if (d > c.top_calls)
			c.top = i, c.top_calls = d;
	}
	for (unsigned s = COUNT_EMU_MMAP; s <= COUNT_EMU_MADVISE; s++)
		c.emu_maps += after->v[s] - before->v[s];
	c.shim_maps = after->v[COUNT_SHIM_MAP] - before->v[COUNT_SHIM_MAP];
	c.coord_requests = after->v[COUNT_COORD_REQUESTS] - before->v[COUNT_COORD_REQUESTS];
	c.shim_requests = after->v[COUNT_SHIM_REQUESTS] - before->v[COUNT_SHIM_REQUESTS];
	c.shim_connections = after->v[COUNT_SHIM_CONNECTIONS] - before->v[COUNT_SHIM_CONNECTIONS];
	c.tlb = after->tlb - before->tlb;
	return c;
}

/* One line of counts: per allocation (calls, mapping syscalls) and per
 * participant (round trips). */
static void print_cost(const char *content, int P, int N, const char *stage, const struct cost *c)
{
	double allocs = (double)P * N; /* allocation records: N created, N imported by each other participant */
	printf("%-8s %4d %6d %-8s %9.2f %9.2f %9.3f %9.3f %9.2f %9.2f %9.2f   %s %.2f\n", content, P, N, stage,
	       (double)c->calls / allocs, (double)c->emu_maps / allocs, (double)c->shim_maps / allocs,
	       (double)c->tlb / allocs, (double)c->coord_requests / P, (double)c->shim_requests / P,
	       (double)c->shim_connections / P, c->top_calls ? call_names[c->top] : "-", (double)c->top_calls / allocs);
	for (size_t i = 0; getenv("BENCH_CALLS") && i < NCALLS; i++)
		if (c->per_call[i])
			printf("%33s %-36s %9.3f\n", "", call_names[i], (double)c->per_call[i] / allocs);
}

/* Run argv (a cusnap command) to its end: its exit status, the time in *ms. */
static int timed(char *const argv[], double *ms)
{
	double t0 = now_ms();
	pid_t c = fork();
	if (c == 0) {
		if (!getenv("BENCH_VERBOSE")) {
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, 1);
			dup2(nul, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	int status = 0;
	waitpid(c, &status, 0);
	*ms = now_ms() - t0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Suspend and resume with cusnap, as a user would: the group is the tree of a
 * root process that started it. */
static void run_commands(pid_t root, const char *dir, const char *ctl, int content, double *suspend, double *resume)
{
	char cusnap[PATH_MAX + 32], pid[16], ck[PATH_MAX + 16];
	snprintf(cusnap, sizeof(cusnap), "%s/../bin/cusnap", bench_bin());
	snprintf(pid, sizeof(pid), "%d", (int)root);
	snprintf(ck, sizeof(ck), "%s/ck", dir);
	char *sus[] = {cusnap, "suspend",       "--pid",     pid,         "--dir",
		       ck,     "--control-dir", (char *)ctl, "--content", (char *)proto_content_name((uint32_t)content),
		       NULL};
	char *res[] = {cusnap, "resume", "--pid", pid, "--dir", ck, "--control-dir", (char *)ctl, NULL};
	*suspend = *resume = -1;
	double ms;
	if (timed(sus, &ms) == 0) {
		*suspend = ms;
		if (timed(res, &ms) == 0)
			*resume = ms;
	}
}

/* One prepare and restore of the group t: 0 or -1 (said), the times of each,
 * the records prepared (participants + allocations + mappings); the counters
 * read into *mid between the two, when asked. */
static int cycle(struct coord_target *t, int P, const struct coord_options *o, double *prep, double *rest,
		 size_t *records, const char *counters, struct counts *mid)
{
	struct coord_report r;
	double t0 = now_ms();
	int a = coord_prepare(t, (size_t)P, o, &r);
	*prep = now_ms() - t0;
	if (mid)
		counts_read(counters, mid);
	*records = r.participants + r.allocations + r.mappings;
	if (a < 0)
		fprintf(stderr, "prepare: %s\n", r.error);
	t0 = now_ms();
	int b = a < 0 ? -1 : coord_restore(t, (size_t)P, o, &r);
	*rest = now_ms() - t0;
	if (b < 0 && a >= 0)
		fprintf(stderr, "restore: %s\n", r.error);
	return a < 0 || b < 0 ? -1 : 0;
}

static int run_case(int P, int N, int content, double *prep, double *rest, size_t *records, bool commands,
		    struct cost *cprep, struct cost *crest, double *again)
{
	struct bench_group g;
	setenv("CUEMU_GRANULARITY", "64K", 1);
	const char *counters = getenv("CUSNAP_COUNT");
	if (bench_group_start(&g, P, N, 0, commands, false) < 0)
		return -1;
	struct coord_options o = {.timeout_ms = 120000,
				  .content = content,
				  .dir = g.dir,
				  .on_stage = getenv("BENCH_VERBOSE") ? bench_stage : NULL};
	struct counts c0, c1, c2;
	int rc = 0;
	counts_read(counters, &c0);
	if (commands) {
		run_commands(g.root, g.dir, g.ctl, content, prep, rest);
		rc = *prep < 0 || *rest < 0 ? -1 : 0;
		counts_read(counters, &c1);
		c2 = c1;
	} else {
		rc = cycle(g.t, P, &o, prep, rest, records, counters, &c1);
		counts_read(counters, &c2);
		if (rc == 0 && again) /* the same group once more: host content's arena is kept */
			rc = cycle(g.t, P, &o, &again[0], &again[1], records, NULL, NULL);
	}
	if (cprep)
		*cprep = cost_of(&c0, &c1);
	if (crest)
		*crest = cost_of(&c1, &c2);
	bench_group_stop(&g);
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
	int rc = coord_validate(t, p, P, NULL, err, sizeof(err));
	double ms = now_ms() - t0;
	if (rc)
		fprintf(stderr, "validation: %s\n", err);
	for (int i = 0; i < P; i++) {
		free(p[i].allocs);
		free(p[i].maps);
	}
	return ms;
}

/* BENCH_ROUNDS: each case run that many times, its medians printed. */
enum { MAX_ROUNDS = 15 };
struct times {
	double prep[MAX_ROUNDS], rest[MAX_ROUNDS], total[MAX_ROUNDS];
	int n;
};

static void times_add(struct times *t, double prep, double rest)
{
	if (t->n < MAX_ROUNDS) {
		t->prep[t->n] = prep;
		t->rest[t->n] = rest;
		t->total[t->n++] = prep + rest;
	}
}

static int by_value(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), by_value);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void times_print(const char *label, int P, int N, size_t records, struct times *t)
{
	printf("%-8s %12d %12d %8zu %12.1f %12.1f %12.1f\n", label, P, N, records, median(t->prep, t->n),
	       median(t->rest, t->n), median(t->total, t->n));
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	char emu[PATH_MAX + 16];
	snprintf(emu, sizeof(emu), "%s/../emu", bench_bin());
	setenv("LD_LIBRARY_PATH", emu, 0); /* cusnap's driver, when there is no GPU */
	/* One table of counters for the whole run (this process maps it once):
	 * each case reads it before and after its stages. */
	char counters[64];
	snprintf(counters, sizeof(counters), "/tmp/cusnap-bench-counts-%d", (int)getpid());
	unlink(counters);
	setenv("CUSNAP_COUNT", counters, 1);
	static const int parts[] = {1, 4, 8, 16}, allocs[] = {64, 512, 1024, 2048, 4096};
	int rounds = getenv("BENCH_ROUNDS") ? atoi(getenv("BENCH_ROUNDS")) : 1;
	rounds = rounds < 1 ? 1 : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
	struct seen {
		const char *content;
		int P, N;
		struct cost prep, rest;
	} seen[32];
	size_t nseen = 0;
	printf("%-8s %12s %12s %8s %12s %12s %12s\n", "content", "participants", "allocations", "records", "prepare ms",
	       "restore ms", "total ms");
	const char *content_only = getenv("BENCH_CONTENT");
	for (int c = 1; c <= 2; c++) {
		if (content_only && strcmp(content_only, proto_content_name((uint32_t)c)) != 0)
			continue;
		for (int pi = 0; pi < 4; pi++) {
			for (int ai = 0; ai < 5; ai++) {
				if (quick && (parts[pi] > 8 || allocs[ai] > 1024))
					continue;
				const char *only = getenv("BENCH_ONLY"); /* "P,N" */
				if (only && (atoi(only) != parts[pi] ||
					     atoi(strchr(only, ',') ? strchr(only, ',') + 1 : "0") != allocs[ai]))
					continue;
				struct times first = {0}, second = {0};
				size_t records = 0;
				struct cost cp, cr;
				int r = 0;
				for (; r < rounds; r++) {
					double prep, rest, again[2] = {0};
					if (run_case(parts[pi], allocs[ai], c, &prep, &rest, &records, false, &cp, &cr,
						     c == PROTO_CONTENT_HOST ? again : NULL) < 0)
						break;
					times_add(&first, prep, rest);
					times_add(&second, again[0], again[1]);
				}
				if (r < rounds) {
					printf("%-8s %12d %12d   failed\n", c == 1 ? "host" : "native", parts[pi],
					       allocs[ai]);
					continue;
				}
				times_print(c == 1 ? "host" : "native", parts[pi], allocs[ai], records, &first);
				if (c == PROTO_CONTENT_HOST)
					times_print("  again", parts[pi], allocs[ai], records, &second);
				fflush(stdout);
				if (nseen < 32)
					seen[nseen++] = (struct seen){c == 1 ? "host" : "native", parts[pi], allocs[ai],
								      cp, cr};
			}
		}
	}
	printf("(again: the same group prepared and restored once more, host content's arena kept)\n");
	/* What a GPU node pays for, which does not move with the machine. */
	printf("\nper allocation record (P x N): driver calls, cuemu's mapping syscalls, the shim's, TLB\n"
	       "shootdown interrupts (all CPUs, machine-wide);\n"
	       "per participant: coordinator requests, shim-to-shim requests and connections\n");
	printf("%-8s %4s %6s %-8s %9s %9s %9s %9s %9s %9s %9s   %s\n", "content", "P", "N", "stage", "calls",
	       "emu maps", "shim maps", "tlb ipi", "coord rq", "shim rq", "shim conn", "most called (per record)");
	for (size_t i = 0; i < nseen; i++) {
		print_cost(seen[i].content, seen[i].P, seen[i].N, "prepare", &seen[i].prep);
		print_cost(seen[i].content, seen[i].P, seen[i].N, "restore", &seen[i].rest);
	}
	/* The same shape as whole commands: 1 creator, 7 importers. */
	printf("\n%-8s %12s %12s %12s %12s %12s\n", "content", "participants", "allocations", "suspend ms", "resume ms",
	       "total ms");
	for (int c = 1; c <= 2; c++) {
		if (content_only && strcmp(content_only, proto_content_name((uint32_t)c)) != 0)
			continue;
		int P = 8, N = quick ? 1024 : 4096;
		struct times t = {0};
		size_t records = 0;
		int r = 0;
		for (double sus, res;
		     r < rounds && run_case(P, N, c, &sus, &res, &records, true, NULL, NULL, NULL) == 0; r++)
			times_add(&t, sus, res);
		if (r < rounds)
			printf("%-8s %12d %12d   failed (cusnap suspend/resume)\n", c == 1 ? "host" : "native", P, N);
		else
			printf("%-8s %12d %12d %12.1f %12.1f %12.1f\n", c == 1 ? "host" : "native", P, N,
			       median(t.prep, t.n), median(t.rest, t.n), median(t.total, t.n));
		fflush(stdout);
	}
	size_t records;
	double ms = validate_million(&records);
	printf("\nvalidation alone: %zu records in %.1f ms\n", records, ms);
	unlink(counters);
	return 0;
}
