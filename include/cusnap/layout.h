/* SPDX-License-Identifier: MIT */
/* The names of a checkpoint directory's and a state directory's entries, once
 * (DESIGN.md §9.1): what cusnap writes there and reads back, and what moves
 * when a whole checkpoint replaces the one a directory holds (ckptdir.c). */
#ifndef CUSNAP_LAYOUT_H
#define CUSNAP_LAYOUT_H

#include <stdbool.h>
#include <string.h>

#define LAYOUT_IMAGES "images"           /* CRIU's images (its -D) */
#define LAYOUT_DUMP_LOG "dump.log"       /* in images/: CRIU's log of the dump */
#define LAYOUT_RESTORE_LOG "restore.log" /* in images/: CRIU's log of the restore */
#define LAYOUT_RESTORE_PID "restore.pid" /* the restored root, as CRIU's --pidfile wrote it */
#define LAYOUT_PLUGINS "criu-plugins"    /* CRIU's --libdir: empty, so no plugin of the system's loads */
#define LAYOUT_STATE "cuda-vmm.state"    /* the shared memory's state file (state.h) */
/* Beside it, file content's bytes: one file per participant, named by its id. */
#define LAYOUT_CONTENT_PREFIX "cuda-vmm-"
#define LAYOUT_CONTENT_SUFFIX ".bytes"

/* Is name one of those files? */
static inline bool layout_content_name(const char *name)
{
	size_t len = strlen(name), pre = strlen(LAYOUT_CONTENT_PREFIX), suf = strlen(LAYOUT_CONTENT_SUFFIX);
	return len > pre + suf && !strncmp(name, LAYOUT_CONTENT_PREFIX, pre) &&
	       !strcmp(name + len - suf, LAYOUT_CONTENT_SUFFIX);
}
#define LAYOUT_JOB "cuda-checkpoint-job"    /* the copy of the checkpoint job's file (job.c) */
#define LAYOUT_MANIFEST "manifest.json"     /* what the checkpoint holds (manifest.h): written last */
#define LAYOUT_PARTIAL ".partial"           /* a checkpoint being built beside the one held */
#define LAYOUT_PREVIOUS ".previous"         /* the one held, while the new one moves in */
#define LAYOUT_FAILED_LOG "dump-failed.log" /* CRIU's log of the last attempt whose dump failed */

/* Every entry of a checkpoint directory, as CRIU's image-desc.c lists its
 * images (src/common/layout.c): its name, its kind, who writes it, and
 * whether it is part of a checkpoint (moves with it when a whole checkpoint
 * replaces the one the directory holds: the manifest last, the commit point). */
enum layout_kind {
	LAYOUT_KIND_DIR,   /* a directory */
	LAYOUT_KIND_FILE,  /* a regular file */
	LAYOUT_KIND_FILES, /* regular files named LAYOUT_CONTENT_PREFIX...SUFFIX */
};
struct layout_entry {
	const char *name; /* for LAYOUT_KIND_FILES, the prefix */
	enum layout_kind kind;
	const char *writer;
	bool moves;
};
extern const struct layout_entry layout_entries[];
extern const size_t layout_nentries;

#endif
