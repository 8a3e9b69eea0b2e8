/* SPDX-License-Identifier: MIT */
/* A checkpoint or a restore as one list of steps (DESIGN.md §9; CRIU's
 * cr_dump_tasks and SQLite's opcode table are the models): each row's work
 * and its undo over one context, run forward, and on a failure the steps
 * done walked back, the last done first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

/* CUSNAP_FAIL_STEP=SEQUENCE:NAME makes the step NAME of the sequence of that
 * name fail before its work (the tests walk a failure through every step with
 * it): its index in the sequence, n when unset or another sequence's, or -1
 * (said) when it names no step of this one (a misspelt name would otherwise
 * never fire, and the test pass silently). */
static long step_to_fail(const struct sequence *seq)
{
	const struct step *steps = seq->steps;
	size_t n = seq->n, len = strlen(seq->name);
	const char *want = getenv("CUSNAP_FAIL_STEP");
	if (!want || strncmp(want, seq->name, len) != 0 || want[len] != ':')
		return (long)n;
	const char *name = want + len + 1;
	for (size_t i = 0; i < n; i++)
		if (strcmp(steps[i].name, name) == 0)
			return (long)i;
	char names[512] = "";
	size_t at = 0;
	for (size_t i = 0; i < n && at < sizeof(names); i++)
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? ", " : "", steps[i].name);
	voice(VOICE_ERROR, "CUSNAP_FAIL_STEP=%s names no step of %s (its steps: %s)", want, seq->name, names);
	return -1;
}

int steps_run(const struct sequence *seq, void *ctx, size_t *at)
{
	const struct step *steps = seq->steps;
	size_t n = seq->n;
	long doomed = step_to_fail(seq);
	*at = 0;
	if (doomed < 0)
		return EX_USAGE;
	size_t i = 0;
	int code = 0;
	for (; i < n; i++) {
		if (steps[i].when && !steps[i].when(ctx))
			continue;
		if ((long)i == doomed) {
			char why[96];
			snprintf(why, sizeof(why), "step %s failed on purpose (CUSNAP_FAIL_STEP)", steps[i].name);
			code = seq->failed(ctx, why);
			break;
		}
		if ((code = steps[i].run(ctx)) != 0)
			break;
	}
	*at = i;
	if (i == n)
		return 0;
	/* The failing step undid its own part; the ones done before it, back. */
	while (i-- > 0) {
		if (!steps[i].undo || (steps[i].when && !steps[i].when(ctx)))
			continue;
		voice(VOICE_INFO, "step %s: undoing", steps[i].name);
		code = steps[i].undo(ctx, code);
	}
	return code;
}
