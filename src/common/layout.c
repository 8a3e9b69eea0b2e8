/* SPDX-License-Identifier: MIT */
/* The table of a checkpoint directory's entries (layout.h). */
#include "cusnap/layout.h"

const struct layout_entry layout_entries[] = {
	{LAYOUT_IMAGES, LAYOUT_KIND_DIR, "CRIU (its -D; its logs in it)", true},
	{LAYOUT_STATE, LAYOUT_KIND_FILE, "the coordinator's prepare (state.h)", true},
	{LAYOUT_CONTENT_PREFIX, LAYOUT_KIND_FILES, "the shims, one file per participant (file content)", true},
	{LAYOUT_JOB, LAYOUT_KIND_FILE, "the node library, from the checkpoint job's file (job.c)", true},
	{LAYOUT_PLUGINS, LAYOUT_KIND_DIR, "cusnap: an empty --libdir for CRIU", true},
	{LAYOUT_RESTORE_PID, LAYOUT_KIND_FILE, "CRIU's restore (--pidfile)", false},
	{LAYOUT_PARTIAL, LAYOUT_KIND_DIR, "cusnap: the checkpoint being built", false},
	{LAYOUT_PREVIOUS, LAYOUT_KIND_DIR, "cusnap: the checkpoint held, while the new one moves in", false},
	{LAYOUT_FAILED_LOG, LAYOUT_KIND_FILE, "cusnap: CRIU's log of the last attempt whose dump failed", false},
	{LAYOUT_MANIFEST, LAYOUT_KIND_FILE, "cusnap (manifest.h): written before the dump, again last", true},
};
const size_t layout_nentries = sizeof(layout_entries) / sizeof(layout_entries[0]);
