/* SPDX-License-Identifier: MIT */
/* cusnap restore (DESIGN.md §9): a checkpoint directory checked (its manifest,
 * this machine, its images' digests), CRIU's restore watched, then the resume
 * sequence over the restored tree; what was made is killed on failure. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/layout.h"
#include "cusnap/control.h"
#include "cusnap/fault.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"
#include "cusnap/paths.h"

/* A signal during a restore: the half-restored tree is killed (it never ran). */
static int restore_interrupted(const char *dir, const char *after)
{
	int sig = signal_caught();
	if (!sig)
		return 0;
	return fail(EX_TERMINATED,
		    "interrupted by %s after %s: the restored tree was killed; the checkpoint in %s is "
		    "unchanged",
		    strsignal(sig), after, dir);
}

/* Before CRIU creates any process: the restore-complete an earlier restore
 * left (the workload would run before its memory is rebuilt) removed, and the
 * endpoints of the dumped processes removed where nothing listens on them,
 * only in the recorded control directory. One that answers means the
 * checkpointed tree (or another) still runs there: refused, nothing done. */
static int clear_control_dir(const struct manifest *m)
{
	char why[PATH_MAX + 256];
	int dfd = control_dir_open_here(m->control_dir_here, why, sizeof(why));
	if (dfd == -ENOENT)
		return 0; /* not there yet: the restore brings it */
	if (dfd < 0)
		return fail(EX_LEFT_RUNNING, "%s: nothing done", why);
	int rc = 0;
	if (unlinkat(dfd, CONTROL_RESTORE_DONE, 0) < 0 && errno != ENOENT)
		rc = fail(EX_LEFT_RUNNING, "cannot remove the stale %s/%s: %s; nothing done", m->control_dir_here,
			  CONTROL_RESTORE_DONE, strerror(errno));
	for (size_t i = 0; rc == 0 && i < m->nprocs; i++) {
		int ns = m->procs[i].nspid;
		if (!m->procs[i].interposed || ns <= 0)
			continue;
		char name[64];
		snprintf(name, sizeof(name), CONTROL_ENDPOINT_FMT, ns);
		int s = control_endpoint_stale(dfd, name);
		if (s == -EBUSY)
			rc = fail(EX_LEFT_RUNNING,
				  "%s/%s answers: the checkpointed tree (or another process) still runs there; "
				  "refusing to "
				  "restore over it; nothing done",
				  m->control_dir_here, name);
	}
	close(dfd);
	return rc;
}

/* --device-map against the checkpoint's GPUs and this machine's (the driver
 * loaded for the question alone), before CRIU creates anything: 0, or the exit
 * code (reported). */
static int device_map_for(const struct settings *s, const struct manifest *m, struct devmap *map)
{
	char why[1024];
	const char *spec = s->device_map;
	int rc = devmap_for(s, m->gpus, map, why, sizeof(why));
	if (rc == -ENODEV)
		return fail(EX_UNAVAILABLE, "--device-map: %s", why);
	if (rc < 0)
		return fail(EX_USAGE, "--device-map %s: %s; nothing done", spec, why);
	return 0;
}

/* CRIU restores each process of a tree dumped in cusnap's own PID namespace at
 * its old PID: every one must be free. A zombie (a dumped process its parent
 * has not reaped yet) is waited for, at most 10 s; a live process holding one
 * is named. 0, or the exit code (reported) with nothing done. */
static int pids_free(const struct manifest *m)
{
	for (size_t j = 0; j < m->nprocs; j++) {
		pid_t pid = m->procs[j].pid, ns = m->procs[j].nspid;
		if (pid != ns)
			continue; /* dumped in a PID namespace of its own: restored in a new one */
		char why[512];
		if (pid_free_wait(pid, PID_ZOMBIE_WAIT_MS, why, sizeof(why)) < 0)
			return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	}
	return 0;
}

/* The images (content: file content's files in dir, their sizes) as the
 * checkpoint wrote them (the manifest's digests): 0, or the exit code
 * (reported) with nothing done. */
static int images_whole(const struct manifest *m, int dfd, const char *name, const char *dir, bool content)
{
	const struct file_digests *files = content ? m->content_files : m->image_files;
	const char *what = content ? "files of file content" : "images";
	if (!files) {
		if (content && (!m->prepared || !m->content || strcmp(m->content, "file") != 0))
			return 0; /* (none written) */
		voice(VOICE_WARN,
		      "the manifest has no digests of the %s (written by an older cusnap, or cut short before the "
		      "end of its checkpoint): they are restored unverified",
		      what);
		return 0;
	}
	char why[PATH_MAX + 256];
	const char *label = content ? "verify content files" : "verify images";
	double t0 = now_ms();
	uint64_t bytes = content ? 0 : digests_bytes(files); /* (read: the images'; file content's sizes only) */
	struct ticker *k = ticker_start(content ? "(verify content files)" : "(verify images)", bytes, NULL, NULL);
	int rc = content ? content_verify(dfd, name, dir, files, false, why, sizeof(why))
			 : images_verify(dfd, name, dir, files, why, sizeof(why));
	ticker_stop(k);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "%s: refusing to restore a damaged checkpoint; nothing done", why);
	if (content) { /* (the bytes are checked block by block as they are copied back: not read twice) */
		progress(label, now_ms() - t0,
			 "%zu files of the sizes written; each block's CRC32C checked as it is copied back", files->n);
		return 0;
	}
	progress(label, now_ms() - t0, "%zu files as written", files->n);
	progress_bytes(label, bytes);
	return 0;
}

/* Before CRIU creates anything: the manifest, the device map, a CRIU, this
 * machine able to take the checkpoint (the gate), whole images, a clean control directory, free PIDs. 0, or the exit code (reported;
 * m freed). */
static int restore_ready(const struct args *a, int dfd, struct manifest *m, struct devmap *map, char criu[PATH_MAX])
{
	const char *dir = a->dir;
	char err[PATH_MAX + 1200], images[PATH_MAX + 16];
	if (manifest_load_at(dfd, dir, m, err, sizeof(err)) < 0)
		return fail(EX_USAGE, "%s", err);
	int rc = device_map_for(a->s, m, map);
	if (!rc && criu_find(a->s, criu, PATH_MAX, err, sizeof(err)) < 0)
		rc = fail(EX_UNAVAILABLE, "%s", err);
	if (!rc)
		rc = restore_gate(a->s, m, map, criu);
	if (!rc) {
		snprintf(images, sizeof(images), "%s/" LAYOUT_IMAGES, dir);
		rc = images_whole(m, dfd, LAYOUT_IMAGES, images, false);
	}
	if (!rc)
		rc = images_whole(m, dfd, ".", dir, true);
	if (!rc)
		rc = clear_control_dir(m);
	if (!rc)
		rc = pids_free(m);
	if (!rc)
		rc = network_ports_free(m);
	if (rc)
		manifest_free(m);
	return rc;
}

/* criu restore -d of dir/images, watched: 0 with the restored root in *root,
 * or the exit code (reported) with whatever CRIU made killed. */
static int restore_criu(const struct args *a, int dfd, const struct manifest *m, const char *criu,
			struct checkpoint_result *r, pid_t *root)
{
	const char *dir = a->dir;
	char images[PATH_MAX + 16], log[PATH_MAX + 32], run_images[64], run_pidfile[64], run_plugins[64];
	snprintf(images, sizeof(images), "%s/" LAYOUT_IMAGES, dir);
	snprintf(log, sizeof(log), "%s/" LAYOUT_RESTORE_LOG, images);
	criu_dir_path(dfd, LAYOUT_IMAGES, run_images, sizeof(run_images));
	criu_dir_path(dfd, LAYOUT_RESTORE_PID, run_pidfile, sizeof(run_pidfile));
	unlinkat(dfd, LAYOUT_RESTORE_PID, 0);
	if (criu_plugin_dir(dfd, run_plugins, sizeof(run_plugins)) < 0)
		return fail(EX_LEFT_RUNNING, "cannot make %s/" LAYOUT_PLUGINS ": %s", dir, strerror(errno));
	char *argv[24] = {"criu", "restore",   "-d",        "-D",       run_images, "-o", LAYOUT_RESTORE_LOG,
			  "-v4",  "--pidfile", run_pidfile, "--libdir", run_plugins};
	int n = 12;
	if (manifest_dump_arg(m, "--shell-job"))
		argv[n++] = "--shell-job";
	if (manifest_dump_arg(m, "--tcp-established"))
		argv[n++] = "--tcp-established"; /* the connections dumped come back */
	if (manifest_dump_arg(m, "--tcp-close"))
		argv[n++] = "--tcp-close"; /* (dumped closed: they come back closed) */
	const char *lock = manifest_dump_arg_value(m, "--network-lock");
	if (lock && (!strcmp(lock, "nftables") || !strcmp(lock, "iptables"))) {
		argv[n++] = "--network-lock"; /* unlocked as they were locked */
		argv[n++] = (char *)lock;
	}
	if (a->criu_config) {
		argv[n++] = "--config";
		argv[n++] = (char *)a->criu_config;
	}
	argv[n] = NULL;
	double t0 = now_ms();
	signals_arm();
	/* The restored tree comes to us when CRIU detaches from it (we can reap it). */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* A signal (or a runaway CRIU) kills CRIU at once: what it made never runs. */
	struct criu_bounds restore_bounds = criu_bounds_default(false, true, a->s);
	restore_bounds.dirfd = dfd;
	r->image_bytes = dir_bytes(images);
	struct ticker *k = ticker_start("(criu restore)", r->image_bytes, NULL, NULL);
	int crc = criu_run(criu, argv, log, &restore_bounds);
	ticker_stop(k);
	r->ms_criu_restore = now_ms() - t0;
	int pfd = openat(dfd, LAYOUT_RESTORE_PID, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *pf = pfd < 0 ? NULL : fdopen(pfd, "r");
	if (!pf && pfd >= 0)
		close(pfd);
	int v = 0;
	if (pf) {
		if (fscanf(pf, "%d", &v) != 1)
			v = 0;
		fclose(pf);
	}
	*root = v;
	if (crc == 0 && *root > 0) {
		progress("criu restore", r->ms_criu_restore, "root process %d", (int)*root);
		progress_bytes("criu restore", r->image_bytes);
		return 0;
	}
	if (*root > 0)
		proc_tree_kill(*root, true);
	proc_children_kill(); /* what a killed CRIU had made */
	if (crc == -EINTR)
		return restore_interrupted(dir, "CRIU had begun");
	if (crc < 0)
		return fail(EX_TERMINATED, "CRIU restore killed at its %s bound (what it had made killed; log: %s)",
			    crc == -EFBIG ? "log" : "time", log);
	return fail(EX_TERMINATED, "CRIU restore failed (exit %d; log: %s)", crc, log);
}

/* Every CUDA process of the manifest, found again by its namespace PID, and
 * no other: 0, or the exit code (reported). */
static int restore_matches(const struct manifest *m, const struct tree *t)
{
	size_t want = 0;
	for (size_t j = 0; j < m->nprocs; j++) {
		if (!m->procs[j].cuda)
			continue;
		want++;
		int ns = m->procs[j].nspid;
		bool found = false;
		for (size_t i = 0; i < t->ncuda && !found; i++)
			found = t->targets[i].ns == ns;
		if (!found)
			return fail(EX_TERMINATED,
				    "restored tree lacks the CUDA process with namespace PID %d (restored tree killed)",
				    ns);
	}
	if (want != t->ncuda)
		return fail(EX_TERMINATED,
			    "the manifest records %zu CUDA processes, the restored tree has %zu (killed)", want,
			    t->ncuda);
	return 0;
}

/* ---- the restore as one list of steps (DESIGN.md §9.2) ---- */

struct rstr {
	const struct args *a;
	struct checkpoint_result *r;
	int dfd;
	struct manifest m;
	struct devmap map;
	struct settings s; /* the caller's, with the control directory the checkpoint recorded */
	struct tree t;
	bool have_manifest, loaded;
	struct set_aside aside; /* the grown files the tree wrote, set aside before CRIU ran */
	pid_t root;             /* the restored tree's root, once CRIU made it */
	char criu[PATH_MAX];
};

static int rs_failed(void *ctx, const char *why)
{
	struct rstr *c = ctx;
	if (c->root > 0)
		return fail(EX_TERMINATED, "%s (restored tree killed)", why);
	return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
}

/* Everything checked before CRIU makes a process. */
static int rs_check(void *ctx)
{
	struct rstr *c = ctx;
	int rc = restore_ready(c->a, c->dfd, &c->m, &c->map, c->criu);
	c->have_manifest = rc == 0;
	return rc;
}

/* The files the tree wrote as the dump left them (a grown one set aside);
 * the undo puts those back. */
static int rs_files(void *ctx)
{
	struct rstr *c = ctx;
	return network_files_ready(&c->m, &c->aside);
}

static int rs_files_undo(void *ctx, int code)
{
	written_files_put_back(&((struct rstr *)ctx)->aside);
	return code;
}

static int rs_criu(void *ctx)
{
	struct rstr *c = ctx;
	int rc = restore_criu(c->a, c->dfd, &c->m, c->criu, c->r, &c->root);
	if (rc)
		c->root = 0; /* (killed there) */
	c->r->restored_root = c->root;
	return rc;
}

/* A half-restored workload must never run. */
static int rs_kill(void *ctx, int code)
{
	struct rstr *c = ctx;
	proc_tree_kill(c->root, true);
	return code == EX_UNAVAILABLE ? code : EX_TERMINATED;
}

/* The restored tree found again, every CUDA process of the manifest in it. */
static int rs_find(void *ctx)
{
	struct rstr *c = ctx;
	network_lock_lifted(&c->m); /* (restored in another namespace: the dump's lock is stale there) */
	/* The restored processes see the control directory the checkpoint recorded. */
	c->s = *c->a->s;
	snprintf(c->s.control_dir, sizeof(c->s.control_dir), "%s", c->m.control_dir);
	int rc = tree_load(c->root, &c->s, &c->t);
	if (rc)
		return rc;
	c->loaded = true;
	c->r->processes = c->t.nprocs;
	c->r->cuda = c->t.ncuda;
	return restore_matches(&c->m, &c->t);
}

/* Its GPU state: the native restore onto the device map's GPUs, the sharing
 * rebuilt, restore-complete. */
static int rs_release(void *ctx)
{
	struct rstr *c = ctx;
	char err[PATH_MAX + 1200];
	struct recovery rec;
	memset(&rec, 0, sizeof(rec));
	int rc = restore_interrupted(c->a->dir, "the CRIU restore");
	struct ticker *k = ticker_start("(native restore, rebuild)", 0, NULL, NULL);
	if (!rc && tree_release(&c->t, c->dfd, c->a->dir, c->m.prepared ? RECOVER_STATE : RECOVER_ANY, &c->map,
				RELEASE_RESTORED, &rec, err, sizeof(err)) < 0)
		rc = rs_failed(c, err);
	ticker_stop(k);
	c->r->ms_native_restore = rec.ms_thaw;
	c->r->ms_vmm_restore = rec.ms_rebuild;
	c->r->bytes_copied = rec.report.bytes;
	return rc;
}

static const struct step restore_steps[] = {
	{"check", NULL, rs_check, NULL},          {"files", NULL, rs_files, rs_files_undo},
	{"criu restore", NULL, rs_criu, rs_kill}, {"find", NULL, rs_find, NULL},
	{"release", NULL, rs_release, NULL},
};

static const struct sequence restore_sequence = {"restore", restore_steps,
						 sizeof(restore_steps) / sizeof(restore_steps[0]), rs_failed};

/* The checkpoint of a->dir restored; on a failure the restored tree is killed. */
static int restore_from(const struct args *a, int dfd, struct checkpoint_result *r)
{
	struct rstr *c = calloc(1, sizeof(*c));
	if (!c)
		return fail(EX_LEFT_RUNNING, "restore: out of memory; nothing done");
	c->a = a;
	c->r = r;
	c->dfd = dfd;
	double start = now_ms();
	size_t at;
	int rc = steps_run(&restore_sequence, c, &at);
	r->ms_total = now_ms() - start;
	if (!rc && a->json && !a->result)
		summary_restore(a, c->root, &c->t, r);
	if (c->loaded)
		tree_free(&c->t);
	if (c->have_manifest)
		manifest_free(&c->m);
	free(c->aside.f); /* (restored: what was set aside stays aside) */
	free(c);
	return rc;
}

int cmd_restore(const struct args *a)
{
	if (!a->dir)
		return fail(EX_USAGE, "restore needs --dir DIR");
	struct checkpoint_result local;
	struct checkpoint_result *r = a->result ? a->result : &local;
	memset(r, 0, sizeof(*r));
	int held = -1, rc = criu_privileged("restore");
	if (!rc && a->criu_config)
		rc = criu_config_trusted(a->criu_config);
	if (!rc)
		rc = use_dir(a->dir, false, &held);
	if (rc)
		return rc;
	char why[512];
	if (ckptdir_settle(held, a->dir, why, sizeof(why)) < 0)
		rc = fail(EX_LEFT_RUNNING, "%s: a checkpoint cut short cannot be settled: %s; nothing done", a->dir,
			  why);
	else
		rc = restore_from(a, held, r);
	close(held);
	return rc;
}
