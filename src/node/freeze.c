/* SPDX-License-Identifier: MIT */
/* suspend's steps, which checkpoint and the CRIU plugin share: record the
 * state directory, prepare the interposed processes, freeze natively; a
 * failure or a signal finishes (finish.c). */
#include <string.h>

#include "internal.h"

int tree_prepare(struct tree *t, struct record *rec, enum proto_content content, struct coord_report *r)
{
	memset(r, 0, sizeof(*r));
	int rc = state_dir_begin(rec->root, rec->dir);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "cannot record the state directory %s: %s: nothing done", rec->dir,
			    strerror(-rc));
	if (t->nshim == 0)
		return 0;
	struct coord_options o = {.timeout_ms = t->s->timeout_ms,
				  .content = content,
				  .dir = rec->dir,
				  .dirfd = rec->dirfd,
				  .on_stage = progress_stage,
				  .on_warning = progress_warning,
				  .content_digests = rec->content_digests};
	rec->changed = true;
	if (coord_prepare(t->targets, t->ncuda, &o, r) < 0) {
		rec->changed = !r->unchanged;
		return finish(t, rec, "prepare failed: %s", r->error);
	}
	progress_bytes(coord_stage_label[COORD_STAGE_PREPARE], r->bytes);
	return 0;
}

/* Each step under a ticker of its own: a line that moves while it runs (the
 * copies, a group's boundary, the driver), named after it. */
int tree_suspend(struct tree *t, struct record *rec, enum proto_content content, struct coord_report *r)
{
	signals_arm();
	struct ticker *k = ticker_start("(prepare)", 0, NULL, NULL);
	int rc = tree_prepare(t, rec, content, r);
	ticker_stop(k);
	if (rc || (rc = interrupted(t, rec, "prepare")))
		return rc;
	char err[1600];
	struct boundary *b = t->s->boundary;
	if (b) {
		k = ticker_start("(group: at the boundary)", 0, NULL, NULL);
		rc = b->ready(b, err, sizeof(err));
		ticker_stop(k);
		if (rc < 0)
			return finish(t, rec, "%s", err);
	}
	k = ticker_start("(native checkpoint)", 0, NULL, NULL);
	rc = native_freeze(t, rec, err, sizeof(err));
	ticker_stop(k);
	if (rc < 0)
		return finish(t, rec, "%s", err);
	/* The tree as recorded: a CUDA process that died on the way is no suspended tree. */
	for (size_t i = 0; i < t->ncuda; i++)
		if (proc_gone(t->targets[i].obs))
			return finish(t, rec, "CUDA process %d (namespace PID %d) died during the operation",
				      t->targets[i].obs, t->targets[i].ns);
	return interrupted(t, rec, "the native checkpoint");
}
