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

int manifest_write(int dfd, const struct tree *t, pid_t root, enum proto_content content, bool prepared,
		   bool leave_running, const char *criu, char *const dump_argv[], const struct checkpoint_result *r,
		   const struct file_digests *images, const struct file_digests *files, const json_t *net,
		   const json_t *written)
{
	char version[64], hostname[256] = "", id[ID_HEX_LEN + 1], here[PATH_MAX];
	criu_version(criu, version, sizeof(version));
	gethostname(hostname, sizeof(hostname) - 1);
	struct cusnap_id cid;
	id_random(&cid);
	id_hex(&cid, id);
	control_host_path(root, t->s->control_dir, here, sizeof(here));
	size_t nargs = 0;
	while (dump_argv[nargs + 1])
		nargs++;
	struct manifest_proc *procs = calloc(t->nprocs + 1, sizeof(*procs));
	char(*eps)[PATH_MAX + 32] = calloc(t->nprocs + 1, sizeof(*eps));
	json_t *gpus = devmap_gpus_json(&t->nat);
	/* What a restore needs of its machine (DESIGN.md §9.5). */
	json_t *needs = compat_record(&t->nat, prepared ? r->device_bytes : NULL);
	int rc = -ENOMEM;
	if (!procs || !eps)
		goto out;
	for (size_t i = 0; i < t->nprocs; i++) {
		const struct proc *p = &t->procs[i];
		if (p->shim)
			snprintf(eps[i], sizeof(eps[i]), "%s/" CONTROL_ENDPOINT_FMT, t->s->control_dir, (int)p->nspid);
		procs[i] = (struct manifest_proc){(int)p->pid, (int)p->nspid, p->cuda, p->shim, eps[i]};
	}
	struct manifest m = {
		.checkpoint_id = id,
		.hostname = hostname,
		.created = (long long)time(NULL),
		.root_pid = (int)root,
		.root_nspid = (int)proc_nspid(root),
		.control_dir = t->s->control_dir,
		.control_dir_here = here,
		.content = proto_content_name((uint32_t)content),
		.prepared = prepared,
		.leave_running = leave_running,
		.criu_path = criu,
		.criu_version = version,
		.dump_args = (const char **)(dump_argv + 1),
		.ndump_args = nargs,
		.procs = procs,
		.nprocs = t->nprocs,
		.ms = {r->ms_prepare, r->ms_lock, r->ms_checkpoint, r->ms_dump, r->ms_restore_in_place},
		.bytes = {(long long)r->bytes_copied, (long long)r->image_bytes},
		.gpus = gpus,
		.needs = needs,
		.image_files = images,
		.content_files = files,
		.network = net,
		.written_files = written,
	};
	size_t len;
	char *text = manifest_encode(&m, &len);
	if (text) {
		const char *step;
		rc = atomic_write_at(dfd, MANIFEST_FILE, text, len, 0600, &step);
		free(text);
	}
out:
	json_decref(gpus);
	json_decref(needs);
	free(eps);
	free(procs);
	return rc;
}
