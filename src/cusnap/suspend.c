/* SPDX-License-Identifier: MIT */
/* cusnap suspend and resume (DESIGN.md §9): GPU memory released and brought
 * back in place, the tree never leaving the node. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/json.h"

/* The tree of a->pid taken for command what, body run over it, the tree freed. */
static int on_tree(const struct args *a, const char *what, int (*body)(const struct args *a, struct tree *t))
{
	struct tree t;
	int rc = tree_take(a->pid, a->s, what, &t);
	if (rc)
		return rc;
	rc = body(a, &t);
	tree_free(&t);
	return rc;
}

static int suspend_tree(const struct args *a, struct tree *t)
{
	char dir[PATH_MAX];
	double start = now_ms();
	int rc;
	if (!t->ncuda)
		return fail(EX_LEFT_RUNNING, "no CUDA process in the tree of %d (%zu processes)", (int)a->pid,
			    t->nprocs);
	if ((rc = check_freezable(t)) || (rc = check_interposer(t)))
		return rc;
	if (a->dir)
		snprintf(dir, sizeof(dir), "%s", a->dir);
	else
		run_dir_state_path(t->procs[0].pid, dir, sizeof(dir));
	if ((rc = use_dir(dir, true, NULL)))
		return rc;
	if (!a->dir)
		voice(VOICE_INFO, "state directory %s", dir);
	bool vmm = t->nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t->nprocs, t->ncuda,
		 vmm ? "interposed: VMM steps" : "not interposed: native steps only");
	struct record rec = {.root = t->procs[0].pid, .dir = dir};
	struct coord_report r;
	if ((rc = tree_suspend(t, &rec, settings_content(a->s, false), &r)))
		return rc;
	if (a->json)
		json_emit(stdout,
			  json_pack("{s:b, s:s, s:i, s:o, s:I, s:I, s:b, s:I, s:I, s:{s:f}, s:o}", "ok", 1, "operation",
				    "suspend", "pid", (int)a->pid, "dir", json_text(dir), "processes",
				    (json_int_t)t->nprocs, "cuda_processes", (json_int_t)t->ncuda, "vmm", vmm,
				    "shared_allocations", (json_int_t)r.shared, "bytes_copied", (json_int_t)r.bytes,
				    "timings_ms", "total", now_ms() - start, "phases", progress_json()));
	return EX_OK;
}

int cmd_suspend(const struct args *a)
{
	return on_tree(a, "suspend", suspend_tree);
}

static int resume_tree(const struct args *a, struct tree *t)
{
	char dir[PATH_MAX], err[1200], why[1400];
	double start = now_ms();
	size_t gone;
	int rc;
	state_dir_of(t->procs[0].pid, a->dir, dir, sizeof(dir));
	if ((a->dir || access(dir, F_OK) == 0) && (rc = use_dir(dir, false, NULL)))
		return rc;
	if ((rc = check_interposition(t)))
		return rc;
	/* A resume is itself the undo: a signal now is noted, and the resume completes. */
	signals_arm();
	struct recovery r;
	if (tree_recover(t, -1, dir, a->discard_state ? RECOVER_RECORDS : RECOVER_ANY, NULL, &r, err, sizeof(err)) < 0)
		return tree_verify(t, why, sizeof(why), &gone) < 0
			       ? fail(EX_TERMINATED, "%s; the tree is left half-done: %s", err, why)
			       : fail(EX_TERMINATED, "%s", err);
	if (signal_caught())
		voice(VOICE_WARN, "%s arrived during the resume; the resume was completed first",
		      strsignal(signal_caught()));
	/* "ok" only over a tree seen whole: every process running, every participant active. */
	if (tree_verify(t, why, sizeof(why), &gone) < 0)
		return fail(EX_TERMINATED,
			    "after the resume %s: the tree is left half-done (`cusnap inspect --pid %d`)", why,
			    (int)a->pid);
	bool vmm = t->nshim > 0;
	state_dir_end(t->procs[0].pid, dir);
	if (r.nothing) {
		voice(VOICE_INFO, "the tree of %d is running (every CUDA process running%s): nothing to resume",
		      (int)a->pid, vmm ? ", every participant active" : "");
		if (a->json)
			json_emit(stdout, json_pack("{s:b, s:s, s:i, s:b}", "ok", 1, "operation", "resume", "pid",
						    (int)a->pid, "nothing_to_do", 1));
		return EX_OK;
	}
	if (a->json)
		json_emit(stdout,
			  json_pack("{s:b, s:s, s:i, s:o, s:I, s:b, s:I, s:{s:f}, s:o}", "ok", 1, "operation", "resume",
				    "pid", (int)a->pid, "dir", json_text(dir), "cuda_processes", (json_int_t)t->ncuda,
				    "vmm", vmm, "bytes_copied", (json_int_t)r.report.bytes, "timings_ms", "total",
				    now_ms() - start, "phases", progress_json()));
	return EX_OK;
}

int cmd_resume(const struct args *a)
{
	return on_tree(a, "resume", resume_tree);
}
