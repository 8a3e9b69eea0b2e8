/* SPDX-License-Identifier: MIT */
/* cusnap suspend and resume (SYSTEM.md §9): GPU memory released and brought
 * back in place, the tree never leaving the node. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/json.h"

int cmd_suspend(const struct args *a)
{
	pid_t pid = a->pid;
	const char *dir_arg = a->dir;
	struct tree t;
	int rc = tree_take(pid, a->s, "suspend", &t);
	if (rc)
		return rc;
	char dir[PATH_MAX];
	double start = now_ms();
	if (!t.ncuda) {
		rc = fail(EX_LEFT_RUNNING, "no CUDA process in the tree of %d (%zu processes)", (int)pid, t.nprocs);
		goto out;
	}
	if ((rc = check_freezable(&t)) || (rc = check_interposer(&t)))
		goto out;
	if (dir_arg)
		snprintf(dir, sizeof(dir), "%s", dir_arg);
	else
		run_dir_state_path(t.procs[0].pid, dir, sizeof(dir));
	if ((rc = use_dir(dir, true, NULL)))
		goto out;
	if (!dir_arg)
		fprintf(stderr, "cusnap: state directory %s\n", dir);
	bool vmm = t.nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t.nprocs, t.ncuda,
		 vmm ? "interposed: VMM steps" : "not interposed: native steps only");
	struct record rec = {.root = t.procs[0].pid, .dir = dir};
	struct coord_report r;
	if ((rc = tree_suspend(&t, &rec, a->content, &r)))
		goto out;
	if (a->json)
		json_emit(stdout, json_pack("{s:b, s:s, s:i, s:o, s:I, s:I, s:b, s:I, s:I, s:f}", "ok", 1, "operation",
					    "suspend", "pid", (int)pid, "dir", json_text(dir), "processes",
					    (json_int_t)t.nprocs, "cuda_processes", (json_int_t)t.ncuda, "vmm", vmm,
					    "shared_allocations", (json_int_t)r.shared, "bytes_copied",
					    (json_int_t)r.bytes, "total_ms", now_ms() - start));
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}

int cmd_resume(const struct args *a)
{
	pid_t pid = a->pid;
	const char *dir_arg = a->dir;
	struct tree t;
	int rc = tree_take(pid, a->s, "resume", &t);
	if (rc)
		return rc;
	char dir[PATH_MAX], err[1200];
	double start = now_ms();
	state_dir_of(t.procs[0].pid, dir_arg, dir, sizeof(dir));
	if ((dir_arg || access(dir, F_OK) == 0) && (rc = use_dir(dir, false, NULL)))
		goto out;
	if ((rc = check_interposition(&t)))
		goto out;
	/* A resume is itself the undo: a signal now is noted, and the resume completes. */
	signals_arm();
	struct recovery r;
	if (tree_recover(&t, dir, a->discard_state ? RECOVER_RECORDS : RECOVER_ANY, NULL, &r, err, sizeof(err)) < 0) {
		char why[1400];
		size_t gone;
		if (tree_verify(&t, why, sizeof(why), &gone) < 0)
			rc = fail(EX_TERMINATED, "%s; the tree is left half-done: %s", err, why);
		else
			rc = fail(EX_TERMINATED, "%s", err);
		goto out;
	}
	if (signal_caught())
		fprintf(stderr, "cusnap: %s arrived during the resume; the resume was completed first\n",
			strsignal(signal_caught()));
	/* "ok" only over a tree seen whole: every process running, every participant active. */
	char why[1400];
	size_t gone;
	if (tree_verify(&t, why, sizeof(why), &gone) < 0) {
		rc = fail(EX_TERMINATED, "after the resume %s: the tree is left half-done (`cusnap inspect --pid %d`)",
			  why, (int)pid);
		goto out;
	}
	bool vmm = t.nshim > 0;
	state_dir_end(t.procs[0].pid, dir);
	if (r.nothing) {
		fprintf(stderr, "cusnap: the tree of %d is running (every CUDA process running%s): nothing to resume\n",
			(int)pid, vmm ? ", every participant active" : "");
		if (a->json)
			json_emit(stdout, json_pack("{s:b, s:s, s:i, s:b}", "ok", 1, "operation", "resume", "pid",
						    (int)pid, "nothing_to_do", 1));
		rc = EX_OK;
		goto out;
	}
	if (a->json)
		json_emit(stdout,
			  json_pack("{s:b, s:s, s:i, s:o, s:I, s:b, s:I, s:f}", "ok", 1, "operation", "resume", "pid",
				    (int)pid, "dir", json_text(dir), "cuda_processes", (json_int_t)t.ncuda, "vmm", vmm,
				    "bytes_copied", (json_int_t)r.report.bytes, "total_ms", now_ms() - start));
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}
