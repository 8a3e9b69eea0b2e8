/* SPDX-License-Identifier: MIT */
/* suspend's steps as rows (steps.c), which checkpoint and the CRIU plugin
 * share: record the state directory and prepare the interposed processes,
 * meet a group at its boundary, lock and checkpoint natively; a failure or a
 * signal walks back to the prepare's undo, which finishes (finish.c). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The rows, each step under a ticker of its own when asked (a line that
 * moves while it runs: the copies, a group's boundary, the driver). */
static struct ticker *ticker_if(const struct freeze *f, const char *step)
{
	return f->tickers ? ticker_start(step, 0, NULL, NULL) : NULL;
}

int freeze_prepare(void *ctx)
{
	struct freeze *f = ctx;
	struct ticker *k = ticker_if(f, "(prepare)");
	int rc = tree_prepare(f->t, f->rec, f->content, &f->r);
	ticker_stop(k);
	if (rc)
		return rc; /* (undone and said) */
	f->prepared = true;
	return interrupted(f->t, f->rec, "prepare"); /* (the step undoes its own part) */
}

int freeze_undo(void *ctx, int code)
{
	struct freeze *f = ctx;
	if (!f->why[0]) /* (a failure said where it happened) */
		return code;
	code = finish(f->t, f->rec, "%s", f->why);
	f->rec->changed = false; /* (undone, or said how to: never again) */
	return code;
}

bool freeze_in_group(void *ctx)
{
	return ((struct freeze *)ctx)->boundary != NULL;
}

int freeze_boundary(void *ctx)
{
	struct freeze *f = ctx;
	char err[1600] = "";
	struct ticker *k = ticker_if(f, "(group: at the boundary)");
	int rc = f->boundary->ready(f->boundary, err, sizeof(err));
	ticker_stop(k);
	return rc < 0 ? f->failed(f, err) : 0;
}

/* A native step over the tree, under its ticker. */
static int native_row(struct freeze *f, const char *label,
		      int (*step)(struct tree *t, struct record *rec, char *err, size_t errlen))
{
	char err[1600] = "";
	struct ticker *k = ticker_if(f, label);
	int rc = step(f->t, f->rec, err, sizeof(err));
	ticker_stop(k);
	return rc < 0 ? f->failed(f, err) : 0;
}

int freeze_lock(void *ctx)
{
	return native_row(ctx, "(native lock)", native_lock);
}

int freeze_checkpoint(void *ctx)
{
	return native_row(ctx, "(native checkpoint)", native_checkpoint);
}

/* The tree as recorded: a CUDA process that died on the way is no suspended
 * tree; a signal caught meanwhile undoes it. */
static int freeze_alive(void *ctx)
{
	struct freeze *f = ctx;
	const struct tree *t = f->t;
	char why[200];
	for (size_t i = 0; i < t->ncuda; i++)
		if (proc_gone(t->targets[i].obs)) {
			snprintf(why, sizeof(why), "CUDA process %d (namespace PID %d) died during the operation",
				 t->targets[i].obs, t->targets[i].ns);
			return f->failed(f, why);
		}
	return interrupted_why("the native checkpoint", why, sizeof(why)) ? f->failed(f, why) : 0;
}

/* suspend's failure: kept for the prepare's undo to say once the prepare is
 * done, said at once before it. */
static int suspend_failed(void *ctx, const char *why)
{
	struct freeze *f = ctx;
	if (!f->prepared)
		return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	snprintf(f->why, sizeof(f->why), "%s", why);
	return EX_LEFT_RUNNING;
}

static const struct step suspend_steps[] = {
	{"prepare", NULL, freeze_prepare, freeze_undo},
	{"boundary", freeze_in_group, freeze_boundary, NULL},
	{"lock", NULL, freeze_lock, NULL},
	{"native checkpoint", NULL, freeze_checkpoint, NULL},
	{"alive", NULL, freeze_alive, NULL},
};

static const struct sequence suspend_sequence = {"suspend", suspend_steps,
						 sizeof(suspend_steps) / sizeof(suspend_steps[0]), suspend_failed};

int tree_suspend(struct tree *t, struct record *rec, enum proto_content content, struct coord_report *r)
{
	signals_arm();
	struct freeze *f = calloc(1, sizeof(*f));
	if (!f)
		return fail(EX_LEFT_RUNNING, "out of memory; nothing done");
	*f = (struct freeze){.t = t,
			     .rec = rec,
			     .content = content,
			     .boundary = t->s->boundary,
			     .tickers = true,
			     .failed = suspend_failed};
	size_t at;
	int rc = steps_run(&suspend_sequence, f, &at);
	*r = f->r;
	free(f);
	return rc;
}
