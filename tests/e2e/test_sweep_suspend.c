/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over cusnap suspend and resume (sweep.h): every
 * driver call each makes, in the creator and in an importer, both content
 * modes; a sample under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

/* The countdown sweeps over suspend and resume (sweep.h): both content modes,
 * the creator and an importer. */
static void sweeps(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND}, SWEEP_RESUME, false, "");
}

/* The same with a creator that let go of what it shared: the worker carries it
 * (SYSTEM.md §6.2); suspend in one role per mode. */
static void sweeps_let_go(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND, .release = true}, SWEEP_RESUME, true,
		   " (a creator that let go)");
}

int main(void)
{
	e2e_init("sweep-suspend");
	test_run("countdown sweeps over every driver call of suspend and resume", sweeps);
	test_run("the same with a creator that let go: a worker carries", sweeps_let_go);
	e2e_done();
	return test_done();
}
