/* SPDX-License-Identifier: MIT */
/* A sequence as data (src/node/steps.c): the steps run in order; a failure at
 * any step runs the undo of every step done before it, the last done first,
 * and nothing of the failing step's or later ones'; a step that does not
 * apply is neither run nor undone; each undo passes the exit code on;
 * CUSNAP_FAIL_STEP=SEQUENCE:NAME fails the named step before its work, a
 * name of no step is refused before anything runs, and another sequence's
 * step leaves this one alone. */
#include <stdlib.h>
#include <string.h>

#include "../../src/node/node.h"
#include "../harness/test.h"

#define NSTEPS 6

struct walk {
	int fail_at;      /* the step whose work fails (-1: none) */
	char trace[256];  /* "r0 r1 u0 ": what ran, in order */
	bool skip_middle; /* step 3 does not apply */
};

static void note(struct walk *w, char what, int i)
{
	size_t at = strlen(w->trace);
	snprintf(w->trace + at, sizeof(w->trace) - at, "%c%d ", what, i);
}

#define STEP_RUN(i)                                      \
	static int run##i(void *ctx)                     \
	{                                                \
		struct walk *w = ctx;                    \
		note(w, 'r', i);                         \
		return w->fail_at == (i) ? 40 + (i) : 0; \
	}
#define STEP_UNDO(i)                                       \
	static int undo##i(void *ctx, int code)            \
	{                                                  \
		note(ctx, 'u', i);                         \
		return code + 1; /* passed on, and seen */ \
	}
STEP_RUN(0)
STEP_RUN(1)
STEP_RUN(2)
STEP_RUN(3)
STEP_RUN(4)
STEP_RUN(5)
STEP_UNDO(0)
STEP_UNDO(1)
STEP_UNDO(3)
STEP_UNDO(4)
STEP_UNDO(5)

static bool middle_applies(void *ctx)
{
	return !((struct walk *)ctx)->skip_middle;
}

static int walk_failed(void *ctx, const char *why)
{
	struct walk *w = ctx;
	size_t at = strlen(w->trace);
	snprintf(w->trace + at, sizeof(w->trace) - at, "[%s] ", why);
	return 9;
}

/* Step 2 has no undo: nothing to put back. */
static const struct step rows[NSTEPS] = {
	{"zero", NULL, run0, undo0}, {"one", NULL, run1, undo1},
	{"two", NULL, run2, NULL},   {"three", middle_applies, run3, undo3},
	{"four", NULL, run4, undo4}, {"five", NULL, run5, undo5},
};
static const struct sequence seq = {"the walk", rows, NSTEPS, walk_failed};

/* What the trace must be when step k fails (k = NSTEPS: none fails). */
static void expected(int k, bool skip_middle, char *out, size_t len)
{
	out[0] = '\0';
	size_t at = 0;
	for (int i = 0; i < NSTEPS && i <= k; i++)
		if (!(skip_middle && i == 3))
			at += (size_t)snprintf(out + at, len - at, "r%d ", i);
	for (int i = k - 1; i >= 0 && k < NSTEPS; i--)
		if (rows[i].undo && !(skip_middle && i == 3))
			at += (size_t)snprintf(out + at, len - at, "u%d ", i);
}

static void failure_at_every_step(void)
{
	for (int skip = 0; skip < 2; skip++) {
		for (int k = 0; k <= NSTEPS; k++) {
			if (skip && k == 3)
				continue; /* a step that does not apply cannot fail */
			struct walk w = {.fail_at = k < NSTEPS ? k : -1, .skip_middle = skip};
			size_t at = 99;
			int rc = steps_run(&seq, &w, &at);
			char want[256];
			expected(k, skip, want, sizeof(want));
			CHECK_STR(w.trace, want);
			CHECK_EQ(at, (size_t)k);
			int undos = 0;
			for (int i = k - 1; i >= 0 && k < NSTEPS; i--)
				undos += rows[i].undo && !(skip && i == 3);
			CHECK_EQ(rc, k < NSTEPS ? 40 + k + undos : 0);
		}
	}
}

static void failed_on_purpose(void)
{
	setenv("CUSNAP_FAIL_STEP", "the walk:four", 1);
	struct walk w = {.fail_at = -1};
	size_t at;
	int rc = steps_run(&seq, &w, &at);
	CHECK_EQ(at, 4);
	CHECK_STR(w.trace, "r0 r1 r2 r3 [step four failed on purpose (CUSNAP_FAIL_STEP)] u3 u1 u0 ");
	CHECK_EQ(rc, 9 + 3);
	setenv("CUSNAP_FAIL_STEP", "the walk:fourr", 1);
	memset(&w, 0, sizeof(w));
	w.fail_at = -1;
	CHECK_EQ(steps_run(&seq, &w, &at), EX_USAGE);
	CHECK_STR(w.trace, "");
	/* Another sequence's step: this one runs whole. */
	setenv("CUSNAP_FAIL_STEP", "checkpoint:four", 1);
	memset(&w, 0, sizeof(w));
	w.fail_at = -1;
	CHECK_EQ(steps_run(&seq, &w, &at), 0);
	CHECK_STR(w.trace, "r0 r1 r2 r3 r4 r5 ");
	unsetenv("CUSNAP_FAIL_STEP");
}

int main(void)
{
	progress_quiet(true);
	test_run("a failure at every step: the steps done undone, the last first", failure_at_every_step);
	test_run("CUSNAP_FAIL_STEP fails the named step; a name of no step is refused", failed_on_purpose);
	return test_done();
}
