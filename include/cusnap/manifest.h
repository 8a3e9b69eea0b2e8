/* SPDX-License-Identifier: MIT */
/* DIR/manifest.json (DESIGN.md §9): what cusnap checkpoint recorded beside the
 * CRIU images, read back by restore and inspect. Written by cusnap (manifest
 * writing is in src/cusnap/manifest_write.c). */
#ifndef CUSNAP_MANIFEST_H
#define CUSNAP_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>

#include "cusnap/digests.h"
#include "cusnap/json.h"
#include "cusnap/layout.h"

#define MANIFEST_FILE LAYOUT_MANIFEST
#define MANIFEST_FORMAT "cusnap-manifest"
#define MANIFEST_VERSION 1
#define MANIFEST_MAX_BYTES (1u << 20)

/* A process of the checkpointed tree. */
struct manifest_proc {
	int pid, nspid; /* as cusnap saw it, and in the tree's own PID namespace (-1: not known) */
	bool cuda, interposed;
	const char *endpoint; /* its endpoint in the control directory ("" when not interposed) */
};

/* What a checkpoint recorded, field by field; written by manifest_encode,
 * read back by manifest_parse (its golden JSON: tests/unit/test_manifest.c).
 * The files' digests are decoded (digests.h); the records other modules own
 * are kept as the JSON they wrote, for them to read. */
struct manifest {
	const char *checkpoint_id, *hostname;
	long long created; /* seconds since the epoch */
	int root_pid, root_nspid;
	const char *control_dir;      /* as the workload sees it */
	const char *control_dir_here; /* as cusnap saw it (its host path), or control_dir */
	const char *content;          /* proto_content_name(): host, file or native */
	bool prepared;                /* the VMM prepare ran (a state file is beside it) */
	bool leave_running;
	const char *criu_path, *criu_version;
	const char **dump_args; /* CRIU's dump arguments after its name */
	size_t ndump_args;
	struct manifest_proc *procs;
	size_t nprocs;
	struct {
		double prepare, lock, checkpoint, criu_dump, restore_in_place;
	} ms;
	struct {
		long long host_copies, images;
	} bytes;
	const json_t *gpus;                       /* devmap_gpus_json(): an array */
	const json_t *needs;                      /* compat_record(): what a restore needs of its machine */
	const struct file_digests *image_files;   /* images_digest(), or NULL (before the dump's end) */
	const struct file_digests *content_files; /* content_digest() of file content's files, or NULL (none) */
	const json_t *network;                    /* network_json(), or NULL */
	const json_t *written_files;  /* written_files_json(): the files the tree wrote (an array), or NULL */
	json_t *root;                 /* parsed: what holds the strings above */
	void *owned;                  /* parsed: the arrays above */
	struct file_digests files[2]; /* parsed: what image_files and content_files point at */
};

/* m as the manifest's text (indented, ending with a newline), or NULL (out of
 * memory). */
char *manifest_encode(const struct manifest *m, size_t *len);
/* Parse and check text (len bytes): 0, or -1 with err. */
int manifest_parse(const char *text, size_t len, struct manifest *m, char *err, size_t errlen);
/* DIR/manifest.json: 0, or -1 with err naming the file. */
int manifest_load(const char *dir, struct manifest *m, char *err, size_t errlen);
/* The same through dfd, the directory dir held open (never following a link). */
int manifest_load_at(int dfd, const char *dir, struct manifest *m, char *err, size_t errlen);
void manifest_free(struct manifest *m);
/* Was the CRIU dump run with this argument? */
bool manifest_dump_arg(const struct manifest *m, const char *arg);
/* The value that follows arg in the dump's arguments (a string), or NULL. */
const char *manifest_dump_arg_value(const struct manifest *m, const char *arg);
/* DIR/manifest.json printed readably on stdout: 0, -1 when there is none, -2
 * when it is unreadable (said on stderr). */
int manifest_print(const char *dir);

#endif
