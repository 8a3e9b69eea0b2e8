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

/* suspend's steps (src/node/freeze.c; checkpoint's prepare step and the
 * plugin's hooks run the same rows), each failing in turn
 * (CUSNAP_FAIL_STEP): the prepare failing is nothing done; any later step is
 * undone by the prepare's undo alone, once (everything undone); the tree runs
 * whole after each; a name of no step is refused naming them. */
static void suspend_step_failing(void)
{
	static const char *const steps[] = {"prepare", "lock", "native checkpoint", "alive", "boundry"};
	char tool_path[PATH_MAX];
	cusnap_path(tool_path, sizeof(tool_path));
	for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
		struct group g;
		char what[96], env0[64], pid[16], *out, *env[] = {env0, NULL};
		snprintf(what, sizeof(what), "suspend's step %s failing", steps[k]);
		if (group_start(&g, "suspend-steps", 1, 2, false, NULL, NULL, NULL) < 0)
			return;
		snprintf(env0, sizeof(env0), "CUSNAP_FAIL_STEP=suspend:%s", steps[k]);
		snprintf(pid, sizeof(pid), "%d", g.root);
		int rc = tool(&out, env, tool_path, "suspend", "--pid", pid, "--control-dir", g.ctl, NULL);
		if (!strcmp(steps[k], "boundry")) {
			if (rc != 64 ||
			    !contains(out, "(its steps: prepare, boundary, lock, native checkpoint, alive)"))
				test_fail(__FILE__, __LINE__, "%s: exit %d, the steps not named:\n%s", what, rc, out);
		} else {
			bool first = k == 0;
			const char *says = first ? "nothing done" : "everything undone";
			if (rc != 1 || !contains(out, says) || !contains(out, "failed on purpose"))
				test_fail(__FILE__, __LINE__, "%s: exit %d (want 1, saying '%s'):\n%s", what, rc, says,
					  out);
			if (count_of(out, ": undoing") != (first ? 0 : 1) ||
			    (!first && !contains(out, "step prepare: undoing")))
				test_fail(__FILE__, __LINE__, "%s: not the prepare's undo alone:\n%s", what, out);
		}
		free(out);
		sweep_group_whole(&g, 2, what);
		group_kill(&g);
		reap_all();
	}
}

int main(void)
{
	e2e_init("sweep-suspend");
	test_run("countdown sweeps over every driver call of suspend and resume", sweeps);
	test_run("the same with a creator that let go: a worker carries", sweeps_let_go);
	test_run("the resume of contiguous mappings, granted together", sweeps_contiguous);
	test_run("file content: a fault anywhere in the parent's suspend or resume", sweeps_file);
	test_run("a failure at each step of suspend: the prepare's undo, once", suspend_step_failing);
	return e2e_done();
}
