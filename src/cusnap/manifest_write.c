/* SPDX-License-Identifier: MIT */
/* Writing DIR/manifest.json (read back through include/cusnap/manifest.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/request.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"
#include "cusnap/manifest.h"

static json_t *processes_json(const struct tree *t)
{
	json_t *procs = json_array();
	for (size_t i = 0; i < t->nprocs; i++) {
		const struct proc *p = &t->procs[i];
		char ep[PATH_MAX + 32] = "";
		if (p->shim)
			snprintf(ep, sizeof(ep), "%s/" CONTROL_ENDPOINT_FMT, t->s->control_dir, (int)p->nspid);
		json_array_append_new(procs,
				      json_pack("{s:i, s:i, s:b, s:b, s:o}", "pid", (int)p->pid, "nspid", (int)p->nspid,
						"cuda", p->cuda, "interposed", p->shim, "endpoint", json_text(ep)));
	}
	return procs;
}

int manifest_write(const char *dir, const struct tree *t, pid_t root, enum proto_content content, bool prepared,
		   bool leave_running, const char *criu, char *const dump_argv[], const struct checkpoint_result *r,
		   const json_t *images, const json_t *net)
{
	char version[64], hostname[256] = "";
	criu_version(criu, version, sizeof(version));
	gethostname(hostname, sizeof(hostname) - 1);
	struct cusnap_id id;
	id_random(&id);
	json_t *args = json_array();
	for (int i = 1; dump_argv[i]; i++)
		json_array_append_new(args, json_text(dump_argv[i]));
	/* CRIU's own CUDA plugin would restore and unlock every task itself (no
	 * --device-map, the workload running before its sharing is rebuilt). */
	char here[PATH_MAX];
	control_host_path(root, t->s->control_dir, here, sizeof(here));
	json_t *m = json_pack("{s:s, s:i, s:o, s:I, s:o, s:i, s:i, s:o, s:o, s:s, s:b, s:b,"
			      " s:{s:o, s:o, s:o, s:b, s:s}, s:o, s:o,"
			      " s:{s:f, s:f, s:f, s:f, s:f}, s:{s:I, s:I}}",
			      "format", MANIFEST_FORMAT, "version", MANIFEST_VERSION, "checkpoint_id", json_id(&id),
			      "created", (json_int_t)time(NULL), "hostname", json_text(hostname), "root_pid", (int)root,
			      "root_nspid", (int)proc_nspid(root), "control_dir", json_text(t->s->control_dir),
			      "control_dir_here", json_text(here), "content", proto_content_name((uint32_t)content),
			      "prepared", prepared, "leave_running", leave_running, "criu", "path", json_text(criu),
			      "version", json_text(version), "dump_args", args, "cuda_plugin", 0, "plugins",
			      "none: an empty --libdir; cusnap does the native steps", "gpus",
			      devmap_gpus_json(&t->nat), "processes", processes_json(t), "timings_ms", "prepare",
			      r->ms_prepare, "lock", r->ms_lock, "checkpoint", r->ms_checkpoint, "criu_dump",
			      r->ms_dump, "restore_in_place", r->ms_restore_in_place, "bytes", "host_copies",
			      (json_int_t)r->bytes_copied, "images", (json_int_t)r->image_bytes);
	if (!m)
		return -ENOMEM;
	/* What a restore needs of its machine (DESIGN.md §9.5). */
	json_object_set_new(m, "needs", compat_record(&t->nat, prepared ? r->device_bytes : NULL));
	if (images)
		json_object_set(m, "image_files", (json_t *)images);
	if (net)
		json_object_set(m, "network", (json_t *)net);
	char *text = json_dumps(m, JSON_INDENT(2) | JSON_REAL_PRECISION(7));
	json_decref(m);
	if (!text)
		return -ENOMEM;
	size_t len = strlen(text);
	text[len] = '\n'; /* over the NUL: the file ends with a newline, no NUL */
	const char *step;
	int rc = atomic_write(dir, MANIFEST_FILE, text, len + 1, 0600, &step);
	free(text);
	return rc;
}
