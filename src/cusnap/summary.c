/* SPDX-License-Identifier: MIT */
/* What checkpoint and restore print with --json (DESIGN.md §9): one object
 * each, its shape here, beside each other. */
#include <stdio.h>

#include "cusnap.h"
#include "cusnap/json.h"

void summary_checkpoint(const struct args *a, const struct tree *t, const struct checkpoint_result *r)
{
	json_emit(stdout,
		  json_pack("{s:b, s:s, s:i, s:o, s:I, s:I, s:b, s:b, s:I, s:I, s:{s:f, s:f, s:f, s:f, s:f}, s:o}",
			    "ok", 1, "operation", "checkpoint", "pid", (int)a->pid, "dir", json_text(a->dir),
			    "processes", (json_int_t)t->nprocs, "cuda_processes", (json_int_t)t->ncuda, "vmm",
			    t->nshim > 0, "leave_running", a->leave_running, "bytes_copied",
			    (json_int_t)r->bytes_copied, "image_bytes", (json_int_t)r->image_bytes, "timings_ms",
			    "prepare", r->ms_prepare, "checkpoint", r->ms_checkpoint, "criu_dump", r->ms_dump,
			    "restore_in_place", r->ms_restore_in_place, "total", r->ms_total, "phases",
			    progress_json()));
}

void summary_restore(const struct args *a, pid_t root, const struct tree *t, const struct checkpoint_result *r)
{
	json_emit(stdout, json_pack("{s:b, s:s, s:o, s:i, s:I, s:I, s:I, s:{s:f, s:f, s:f, s:f}, s:o}", "ok", 1,
				    "operation", "restore", "dir", json_text(a->dir), "root_pid", (int)root,
				    "processes", (json_int_t)t->nprocs, "cuda_processes", (json_int_t)t->ncuda,
				    "bytes_copied", (json_int_t)r->bytes_copied, "timings_ms", "criu_restore",
				    r->ms_criu_restore, "native_restore", r->ms_native_restore, "vmm_restore",
				    r->ms_vmm_restore, "total", r->ms_total, "phases", progress_json()));
}
