/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over cusnap suspend and resume (sweep.h): every
 * driver call each makes, in the creator and in an importer, both content
 * modes, and file content in the creator; a sample under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

/* The countdown sweeps over suspend and resume (sweep.h): both content modes,
 * the creator and an importer. */
static void sweeps(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND}, SWEEP_RESUME, false, "");
}

/* The same with a creator that let go of what it shared: faults in the worker
 * that carries it (DESIGN.md §6.2), suspend then resume, both content modes. */
static void sweeps_let_go(void)
{
	static const char *const contents[] = {"host", "native"};
	static const enum sweep_op ops[] = {SWEEP_SUSPEND, SWEEP_RESUME};
	int cases = 0, k = 0;
	for (int o = 0; o < 2; o++)
		for (int c = 0; c < 2; c++, k++)
			if (sweep_selected(k))
				cases += sweep_run(&(struct sweep){.op = ops[o],
								   .content = contents[c],
								   .role = "worker0",
								   .release = true});
	printf("     countdown sweeps (a creator that let go, in the worker that carries): %d fault cases\n", cases);
	CHECK(cases > 0);
}

/* Mappings laid back to back (vmm_group --contiguous), granted in one call
 * per process at the restore: a fault anywhere in the resume, in the parent
 * and in a worker, both content modes (every mapping still ungranted when a
 * grant fails is unmapped again before the rebuild is retried). */
static void sweeps_contiguous(void)
{
	static const char *const contents[] = {"host", "native"}, *const roles[] = {"parent", "worker0"};
	int cases = 0, k = 0;
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 2; c++, k++)
			if (sweep_selected(k))
				cases += sweep_run(&(struct sweep){.op = SWEEP_RESUME,
								   .content = contents[c],
								   .role = roles[r],
								   .contiguous = true});
	printf("     countdown sweeps of the resume (contiguous mappings): %d fault cases\n", cases);
	CHECK(cases > 0);
}

/* File content (DESIGN.md §6.2): a fault anywhere in the suspend or the
 * resume of the parent, the creator that writes and reads the file. */
static void sweeps_file(void)
{
	static const enum sweep_op ops[] = {SWEEP_SUSPEND, SWEEP_RESUME};
	int cases = 0;
	for (int o = 0; o < 2; o++)
		if (sweep_selected(o))
			cases += sweep_run(&(struct sweep){.op = ops[o], .content = "file", .role = "parent"});
	printf("     countdown sweeps (file content, in the parent): %d fault cases\n", cases);
	CHECK(cases > 0);
}

int main(void)
{
	e2e_init("sweep-suspend");
	test_run("countdown sweeps over every driver call of suspend and resume", sweeps);
	test_run("the same with a creator that let go: a worker carries", sweeps_let_go);
	test_run("the resume of contiguous mappings, granted together", sweeps_contiguous);
	test_run("file content: a fault anywhere in the parent's suspend or resume", sweeps_file);
	return e2e_done();
}
