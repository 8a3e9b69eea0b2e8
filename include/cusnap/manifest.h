/* SPDX-License-Identifier: MIT */
/* DIR/manifest.json (DESIGN.md §9): what cusnap checkpoint recorded beside the
 * CRIU images, read back by restore and inspect. Written by cusnap (manifest
 * writing is in src/cusnap/manifest_write.c). */
#ifndef CUSNAP_MANIFEST_H
#define CUSNAP_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>

#include "cusnap/json.h"
#include "cusnap/layout.h"

#define MANIFEST_FILE LAYOUT_MANIFEST
#define MANIFEST_FORMAT "cusnap-manifest"
#define MANIFEST_VERSION 1
#define MANIFEST_MAX_BYTES (1u << 20)

struct manifest {
	json_t *root;
	const json_t *procs;          /* the "processes" array: pid, nspid, cuda, interposed, endpoint */
	bool prepared;                /* the VMM prepare ran (a state file is beside it) */
	const char *control_dir;      /* as the workload sees it */
	const char *control_dir_here; /* as cusnap saw it (its host path), or control_dir */
};

/* Check a parsed manifest (taking root) into *m: 0, or -1 with err. */
int manifest_from_json(json_t *root, struct manifest *m, char *err, size_t errlen);
/* Parse and check text (len bytes): 0, or -1 with err. */
int manifest_parse(const char *text, size_t len, struct manifest *m, char *err, size_t errlen);
/* DIR/manifest.json: 0, or -1 with err naming the file. */
int manifest_load(const char *dir, struct manifest *m, char *err, size_t errlen);
void manifest_free(struct manifest *m);
/* Was the CRIU dump run with this argument? */
bool manifest_dump_arg(const struct manifest *m, const char *arg);
/* The value that follows arg in the dump's arguments (a string), or NULL. */
const char *manifest_dump_arg_value(const struct manifest *m, const char *arg);
/* DIR/manifest.json printed readably on stdout: 0, -1 when there is none, -2
 * when it is unreadable (said on stderr). */
int manifest_print(const char *dir);

#endif
