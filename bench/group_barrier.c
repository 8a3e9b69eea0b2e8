/* SPDX-License-Identifier: MIT */
/* What a group's barrier costs (DESIGN.md §16): N members, each its own
 * process as each node's command is, meet in etcd through the node library's
 * group (no tree: the phases alone): joining (the member's lease and record,
 * the operation's check), the boundary (ready, every member seen, the one
 * decision) and the end (the result written, every member's read, the group
 * left). Per phase: the median milliseconds and etcd requests of a member
 * (lease keep-alives included), with 2, 4 and 8 members.
 *
 *   group_barrier ETCD_URL [ROUNDS]      (make bench-group starts an etcd) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/node/group.h"
#include "../src/node/node.h"

enum { PHASES = 3, MAX_SAMPLES = 8 * 64 };
static const char *const phase_name[PHASES] = {"join", "boundary", "end"};

struct sample {
	double ms[PHASES];
	unsigned long requests[PHASES];
};

/* One member: its phases into s. 0, or -1. */
static int member(const char *url, const char *name, int n, int i, struct sample *s)
{
	char me[16];
	snprintf(me, sizeof(me), "m%d", i);
	struct group_spec spec = {.group = name, .members = n, .member = me, .etcd = url, .timeout_ms = 30000};
	int code;
	double t0 = now_ms();
	unsigned long r0 = etcd_requests();
	struct group *g = group_join(&spec, "suspend", &code);
	if (!g)
		return -1;
	double t1 = now_ms();
	unsigned long r1 = etcd_requests();
	char why[512];
	struct boundary *b = group_boundary(g);
	int rc = b->ready(b, why, sizeof(why));
	double t2 = now_ms();
	unsigned long r2 = etcd_requests();
	rc = group_leave(g, rc < 0, false) || rc;
	*s = (struct sample){{t1 - t0, t2 - t1, now_ms() - t2}, {r1 - r0, r2 - r1, etcd_requests() - r2}};
	return rc ? -1 : 0;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: group_barrier ETCD_URL [ROUNDS]\n");
		return 64;
	}
	int rounds = argc > 2 ? atoi(argv[2]) : 10;
	if (rounds < 1 || rounds > 64)
		rounds = 10;
	progress_quiet(true);
	char why[256];
	if (etcd_global_init(why, sizeof(why)) < 0) {
		fprintf(stderr, "group_barrier: %s\n", why);
		return 69;
	}
	printf("members  phase        median ms   etcd requests (median, per member)\n");
	for (int n = 2; n <= 8; n *= 2) {
		static struct sample all[MAX_SAMPLES];
		size_t got = 0;
		for (int r = 0; r < rounds; r++) {
			char name[64];
			snprintf(name, sizeof(name), "bench-%d-%d-%d", (int)getpid(), n, r);
			int fds[8][2];
			pid_t pids[8];
			for (int i = 0; i < n; i++) {
				if (pipe(fds[i]) < 0 || (pids[i] = fork()) < 0)
					return 1;
				if (pids[i] == 0) {
					struct sample s;
					int rc = member(argv[1], name, n, i, &s);
					if (rc == 0 && write(fds[i][1], &s, sizeof(s)) != (ssize_t)sizeof(s))
						rc = -1;
					_exit(rc ? 1 : 0);
				}
				close(fds[i][1]);
			}
			for (int i = 0; i < n; i++) {
				struct sample s;
				if (read(fds[i][0], &s, sizeof(s)) == (ssize_t)sizeof(s) && got < MAX_SAMPLES)
					all[got++] = s;
				close(fds[i][0]);
				waitpid(pids[i], NULL, 0);
			}
		}
		if (got < (size_t)(n * rounds))
			fprintf(stderr, "group_barrier: %zu of %d members' samples came back\n", got, n * rounds);
		for (int p = 0; p < PHASES && got; p++) {
			static double v[MAX_SAMPLES], q[MAX_SAMPLES];
			for (size_t i = 0; i < got; i++)
				v[i] = all[i].ms[p], q[i] = (double)all[i].requests[p];
			qsort(v, got, sizeof(*v), by_value);
			qsort(q, got, sizeof(*q), by_value);
			printf("%7d  %-10s %11.1f   %5.0f\n", n, phase_name[p], v[got / 2], q[got / 2]);
		}
	}
	return 0;
}
