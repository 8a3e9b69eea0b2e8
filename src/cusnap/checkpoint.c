/* SPDX-License-Identifier: MIT */
/* cusnap checkpoint (DESIGN.md §9): the in-place sequence of suspend wrapped
 * around a CRIU dump, with manifest.json; restore.c is the way back. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/fault.h"
#include "cusnap.h"
#include "cusnap/layout.h"
#include "cusnap/control.h"
#include "cusnap/ids.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"
#include "cusnap/paths.h"

/* Wait until the workload wrote control file name: 0, or -1 after --timeout. */
static int wait_for(pid_t pid, const struct settings *set, const char *name)
{
	for (int waited = 0; waited <= set->timeout_ms; waited += 20) {
		if (control_exists(pid, set->control_dir, name))
			return 0;
		usleep(20000);
	}
	return -1;
}

unsigned long long dir_bytes(const char *dir)
{
	unsigned long long total = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode))
			total += (unsigned long long)st.st_size;
	}
	if (d)
		closedir(d);
	return total;
}

/* The ticker's look at a directory CRIU writes into. */
static uint64_t images_written(void *dir)
{
	return dir_bytes(dir);
}

/* What CRIU will write, about: the tree's resident memory. */
static uint64_t tree_resident(const struct tree *t)
{
	uint64_t total = 0;
	for (size_t i = 0; i < t->nprocs; i++)
		total += proc_resident_bytes(t->procs[i].pid);
	return total;
}

static bool session_leader_inside(pid_t root)
{
	return getsid(root) == root;
}

/* CRIU names a tree's session in the tree's own PID namespace: a session
 * whose leader lies outside it (a tree started under `unshare --pid` without
 * setsid, or in a sandbox run that way) reads 0 there, and CRIU refuses the
 * dump after the prepare. Refused before anything is done. 0, or the exit
 * code (reported). */
static int session_dumpable(pid_t root)
{
	if (proc_status_inner("/proc", root, "NSsid") != 0)
		return 0;
	return fail(EX_USAGE,
		    "checkpoint: the session of %d has its leader outside the tree's PID namespace, where CRIU "
		    "cannot dump it; start the workload in a session of its own (setsid; 'cusnap run' does so "
		    "there); nothing done",
		    (int)root);
}

/* After a dump that ended the tree: wait until its processes have exited (a
 * large one takes a while to release its memory: at most 10 s). A zombie is
 * not waited for (it holds no memory, socket or file, only its PID, which a
 * restore here waits for itself, pid_free_wait): those its parent has not
 * reaped yet are named with that parent, once. Waiting 50 ms for parents to
 * reap them cost every checkpoint 50-60 ms where the workload's parent is slow
 * to reap (a sixth of the worker shape's checkpoint on this machine kind). */
static void dumped_tree_gone(const struct tree *t)
{
	for (int waited = 0;; waited += 20) {
		size_t dying = 0, zombies = 0;
		char names[512] = "";
		for (size_t i = 0; i < t->nprocs; i++) {
			pid_t pp = 0;
			char st = proc_state(t->procs[i].pid, &pp);
			dying += st && st != 'Z';
			if (st == 'Z' && strlen(names) < sizeof(names) - 32)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%d (parent %d)",
					 zombies++ ? ", " : "", (int)t->procs[i].pid, (int)pp);
		}
		if (dying && waited < 10000) {
			usleep(20000);
			continue;
		}
		if (dying)
			voice(VOICE_WARN, "%zu dumped process(es) still exiting after 10 s", dying);
		if (zombies)
			voice(VOICE_INFO,
			      "%zu dumped process(es) are zombies until their parents reap them: %s; a restore here "
			      "waits for their PIDs",
			      zombies, names);
		return;
	}
}

/* A --criu-config file: a regular file owned by the caller or root, writable
 * by no one else, on a trusted path (CRIU, run as root, takes any option from
 * it: action scripts included). 0, or the exit code (reported). */
int criu_config_trusted(const char *path)
{
	char why[PATH_MAX + 160];
	struct stat st;
	if (path_ancestors_trusted(path, why, sizeof(why)) < 0)
		return fail(EX_USAGE, "--criu-config: %s; nothing done", why);
	if (lstat(path, &st) < 0)
		return fail(EX_USAGE, "--criu-config %s: %s; nothing done", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return fail(EX_USAGE,
			    "--criu-config %s: must be a regular file owned by you or root and writable by no one "
			    "else (CRIU takes any option from it); nothing done",
			    path);
	return 0;
}

/* CRIU's dump command line (argv: 24 entries) for the tree of a->pid, without
 * a shell. */
static void dump_argv(const struct args *a, char *pidstr, char *images, char *plugins, char *argv[])
{
	char *const head[] = {"criu", "dump",          "-t",  pidstr,     "-D",   images,
			      "-o",   LAYOUT_DUMP_LOG, "-v4", "--libdir", plugins};
	int n = 0;
	for (; n < (int)(sizeof(head) / sizeof(head[0])); n++)
		argv[n] = head[n];
	if (a->leave_running)
		argv[n++] = "--leave-running";
	if (!session_leader_inside(a->pid))
		argv[n++] = "--shell-job";
	const char *lock = a->criu_config ? NULL : criu_network_lock();
	if (a->tcp_established)
		argv[n++] = "--tcp-established";
	if (a->tcp_close)
		argv[n++] = "--tcp-close";
	if (a->tcp_established && lock) {
		argv[n++] = "--network-lock";
		argv[n++] = (char *)lock;
	}
	if (a->criu_config) {
		argv[n++] = "--config";
		argv[n++] = (char *)a->criu_config;
	}
	argv[n] = NULL;
}

/* The checkpoint is built in dir/.partial beside the one dir holds (if any),
 * put in its place once whole: that directory into work (and *wfd open on
 * it), its images directory made into images. 0, or -1 with errno (nothing
 * left). */
static int work_begin(int dfd, const char *dir, char *work, size_t wlen, int *wfd, char *images, size_t ilen)
{
	int rc = ckptdir_begin(dfd, dir, work, wlen, wfd);
	snprintf(images, ilen, "%s/" LAYOUT_IMAGES, work);
	if (rc == 0 && mkdirat(*wfd, LAYOUT_IMAGES, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (rc < 0) {
		ckptdir_discard(dfd);
		errno = -rc;
		return -1;
	}
	return 0;
}

/* The digests for the manifest of the images (content: of file content's
 * files in dir) into out: true, or false, warned, when they cannot be read (a
 * restore cannot verify them). */
static bool digest_images(int at, const char *name, const char *dir, bool content, const struct file_digests *known,
			  struct file_digests *out)
{
	char err[PATH_MAX + 256];
	double t0 = now_ms();
	const char *what = content ? "content file digests" : "image digests";
	struct digest_count n;
	int rc = content ? content_digest(at, name, dir, known, out, &n, err, sizeof(err))
			 : images_digest(at, name, dir, NULL, out, &n, err, sizeof(err));
	if (rc < 0) {
		voice(VOICE_WARN, "%s: the %s get no digests (a restore cannot verify them)", err,
		      content ? "files of file content" : "images");
		return false;
	}
	progress(what, now_ms() - t0, "CRC32C of %zu files (%zu from the CRCs their processes took as they wrote)",
		 out->n, n.given);
	progress_bytes(what, n.read_bytes); /* (the bytes read: those of the files whose digest was not given) */
	return true;
}

/* ---- the checkpoint as one list of steps (DESIGN.md §9) ---- */

struct ckpt {
	const struct args *a;
	struct checkpoint_result *r;
	int dfd, wfd;
	double start;
	struct tree t;
	struct record rec;
	struct network net;
	json_t *net_json;
	struct file_digests digests, content; /* the images', file content's files' (after the dump) */
	bool have_digests, have_content;
	struct file_digests content_known; /* the content files' digests their shims gave at PREPARE */
	bool loaded, vmm;
	bool prepared;      /* the tree was suspended: a failure resumes it (finish()) */
	bool settled;       /* past undo: the tree dumped and gone, or released after --leave-running */
	char *argv[24];     /* CRIU's command line as recorded (the directory's path) */
	char *run_argv[24]; /* as run: through the held directory (criu_dir_path) */
	char criu[PATH_MAX], images[PATH_MAX + 48], log[PATH_MAX + 64], work[PATH_MAX + 16];
	char pidstr[16], plugins[PATH_MAX + 32], manifest[PATH_MAX + 48];
	char run_images[64], run_plugins[64];
	char why[2000]; /* a failure after the prepare, for its undo to say */
};

static int ck_failed(void *ctx, const char *why)
{
	struct ckpt *c = ctx;
	const char *dir = c->a->dir;
	if (c->settled)
		return fail(c->a->leave_running ? EX_LEFT_RUNNING : EX_TERMINATED,
			    "%s: the checkpoint in %s/.partial is whole but not in place: the next `cusnap restore "
			    "--dir %s` puts it there",
			    why, dir, dir);
	if (c->prepared) {
		snprintf(c->why, sizeof(c->why), "%s", why); /* said by the prepare's undo */
		return EX_LEFT_RUNNING;
	}
	return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
}

static int ck_failed_f(struct ckpt *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ck_failed_f(struct ckpt *c, const char *fmt, ...)
{
	char why[2000];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return ck_failed(c, why);
}

/* The tree, CRIU and the workload's readiness. */
static int ck_find(void *ctx)
{
	struct ckpt *c = ctx;
	const struct args *a = c->a;
	char err[1200];
	if (criu_find(a->s, c->criu, sizeof(c->criu), err, sizeof(err)) < 0)
		return fail(EX_UNAVAILABLE, "%s", err);
	if (a->wait_ready) {
		double t0 = now_ms();
		if (wait_for(a->pid, a->s, CONTROL_READY) < 0)
			return ck_failed_f(c, "%s/%s of process %d did not appear within %d ms", a->s->control_dir,
					   CONTROL_READY, (int)a->pid, a->s->timeout_ms);
		progress("wait ready", now_ms() - t0, "%s/%s", a->s->control_dir, CONTROL_READY);
	}
	int rc = tree_load(a->pid, a->s, &c->t);
	c->loaded = rc == 0;
	c->r->processes = c->t.nprocs;
	c->r->cuda = c->t.ncuda;
	return rc;
}

/* dir/.partial, to be put in place once whole. */
static int ck_directory(void *ctx)
{
	struct ckpt *c = ctx;
	if (work_begin(c->dfd, c->a->dir, c->work, sizeof(c->work), &c->wfd, c->images, sizeof(c->images)) < 0)
		return ck_failed_f(c, "cannot create %s: %s", c->images, strerror(errno));
	return 0;
}

static int ck_directory_undo(void *ctx, int code)
{
	struct ckpt *c = ctx;
	if (!c->settled)                 /* (a published checkpoint is settled) */
		ckptdir_discard(c->dfd); /* a failed attempt leaves nothing; the previous checkpoint stands */
	return code;
}

/* What would make the dump fail, refused before anything changes. */
static int ck_check(void *ctx)
{
	struct ckpt *c = ctx;
	const struct args *a = c->a;
	int rc;
	if ((rc = tree_hold(&c->t, "checkpoint")) || (rc = session_dumpable(a->pid)) || (rc = check_freezable(&c->t)) ||
	    (rc = check_interposer(&c->t)) ||
	    (rc = network_check(&c->t, c->criu, a->tcp_established, a->criu_config != NULL || a->tcp_close, &c->net)))
		return rc;
	c->vmm = c->t.nshim > 0;
	progress("find", now_ms() - c->start, "%zu processes, %zu CUDA, %s", c->t.nprocs, c->t.ncuda,
		 c->vmm       ? "interposed: VMM steps"
		 : c->t.ncuda ? "not interposed: native steps only"
			      : "no CUDA: CRIU only");
	return 0;
}

/* The VMM prepare and the native lock and checkpoint (tree_suspend undoes
 * its own part when it fails). */
static int ck_prepare(void *ctx)
{
	struct ckpt *c = ctx;
	struct checkpoint_result *r = c->r;
	struct coord_report cr;
	double t0 = now_ms();
	c->rec = (struct record){.root = c->t.procs[0].pid,
				 .dir = c->work,
				 .dirfd = c->wfd,
				 .content_digests = &c->content_known};
	int rc = tree_suspend(&c->t, &c->rec, settings_content(c->a->s, true), &cr);
	if (rc)
		return rc;
	c->prepared = true;
	r->bytes_copied = cr.bytes;
	r->shared = cr.shared;
	memcpy(r->device_bytes, cr.device_bytes, sizeof(r->device_bytes));
	r->ms_prepare = c->vmm ? cr.ms_total : 0;
	r->ms_checkpoint = now_ms() - t0 - r->ms_prepare;
	return 0;
}

static int ck_resume(void *ctx, int code)
{
	struct ckpt *c = ctx;
	if (!c->why[0]) /* (a failure past undo, or before the prepare, was said where it happened) */
		return code;
	return finish(&c->t, &c->rec, "%s", c->why);
}

/* CRIU's command line, and the manifest before the dump: once CRIU has
 * dumped the tree (it exits), the checkpoint must be restorable even if
 * cusnap dies before the dump returns. */
static int ck_manifest(void *ctx)
{
	struct ckpt *c = ctx;
	const struct args *a = c->a;
	snprintf(c->pidstr, sizeof(c->pidstr), "%d", (int)a->pid);
	snprintf(c->plugins, sizeof(c->plugins), "%s/" LAYOUT_PLUGINS, c->work);
	if (criu_plugin_dir(c->wfd, c->run_plugins, sizeof(c->run_plugins)) < 0)
		return ck_failed_f(c, "cannot make %s: %s", c->plugins, strerror(errno));
	criu_dir_path(c->wfd, LAYOUT_IMAGES, c->run_images, sizeof(c->run_images));
	dump_argv(a, c->pidstr, c->images, c->plugins, c->argv);
	dump_argv(a, c->pidstr, c->run_images, c->run_plugins, c->run_argv);
	snprintf(c->log, sizeof(c->log), "%s/" LAYOUT_DUMP_LOG, c->images);
	snprintf(c->manifest, sizeof(c->manifest), "%s/" MANIFEST_FILE, c->work);
	c->net_json = network_json(&c->net);
	if (manifest_write(c->wfd, &c->t, a->pid, settings_content(a->s, true), c->vmm, a->leave_running, c->criu,
			   c->argv, c->r, NULL, NULL, c->net_json, c->net.written_json) < 0)
		return ck_failed_f(c, "cannot write %s", c->manifest);
	return 0;
}

/* CRIU, in its own process group: a Ctrl-C reaches cusnap only, which lets
 * the dump end and then finishes. A failed dump left the tree running
 * (frozen natively): its log is kept beyond the attempt's directory. */
static int ck_dump(void *ctx)
{
	struct ckpt *c = ctx;
	double t0 = now_ms();
	struct criu_bounds dump_bounds = criu_bounds_default(true, false, c->a->s);
	dump_bounds.dirfd = c->wfd;
	struct ticker *k = ticker_start("(criu dump)", tree_resident(&c->t), images_written, c->images);
	int crc = criu_run(c->criu, c->run_argv, c->log, &dump_bounds);
	ticker_stop(k);
	c->r->ms_dump = now_ms() - t0;
	if (crc != 0) {
		ckptdir_keep_log(c->dfd, c->a->dir, c->log, sizeof(c->log));
		if (crc < -1)
			return ck_failed_f(c, "CRIU dump killed at its %s bound (log: %s)",
					   crc == -EFBIG ? "log" : "time", c->log);
		return ck_failed_f(c, "CRIU dump failed (exit %d; log: %s)", crc, c->log);
	}
	c->settled = !c->a->leave_running; /* the tree has exited: past undo */
	c->r->image_bytes = dir_bytes(c->images);
	progress("criu dump", c->r->ms_dump, "%.1f MiB of images in %s", c->r->image_bytes / 1048576.0, c->images);
	progress_bytes("criu dump", c->r->image_bytes);
	return 0;
}

/* The images' and content files' digests; the tree's end awaited. */
static int ck_digests(void *ctx)
{
	struct ckpt *c = ctx;
	c->have_digests = digest_images(c->wfd, LAYOUT_IMAGES, c->images, false, NULL, &c->digests);
	if (c->vmm && settings_content(c->a->s, true) == PROTO_CONTENT_FILE)
		c->have_content = digest_images(c->wfd, ".", c->work, true, &c->content_known, &c->content);
	if (!c->a->leave_running) {
		dumped_tree_gone(&c->t);
		network_after_dump(&c->net, c->log);
		json_decref(c->net_json);
		c->net_json = network_json(&c->net);
	}
	fault_point(FAULT_KILL_AFTER_DUMP);
	return 0;
}

static bool ck_leaves_running(void *ctx)
{
	return ((struct ckpt *)ctx)->a->leave_running;
}

/* --leave-running: the tree released where it runs. */
static int ck_release(void *ctx)
{
	struct ckpt *c = ctx;
	char err[1200];
	int sig = signal_caught();
	if (sig) {
		voice(VOICE_ERROR, "%s after the CRIU dump: undoing", strsignal(sig));
		/* (undone: the images are no checkpoint) */
		return ck_failed_f(c, "interrupted by %s after the CRIU dump", strsignal(sig));
	}
	double t0 = now_ms();
	struct recovery rr;
	if (tree_release(&c->t, c->wfd, c->work, RECOVER_ANY, NULL, RELEASE_IN_PLACE, &rr, err, sizeof(err)) < 0)
		return ck_failed_f(c, "after the dump: %s", err);
	c->settled = true;
	c->r->ms_restore_in_place = now_ms() - t0;
	return 0;
}

/* The manifest with its digests, and the checkpoint put in place. */
static int ck_publish(void *ctx)
{
	struct ckpt *c = ctx;
	const struct args *a = c->a;
	char err[PATH_MAX + 200];
	if (manifest_write(c->wfd, &c->t, a->pid, settings_content(a->s, true), c->vmm, a->leave_running, c->criu,
			   c->argv, c->r, c->have_digests ? &c->digests : NULL, c->have_content ? &c->content : NULL,
			   c->net_json, c->net.written_json) < 0)
		voice(VOICE_WARN,
		      "cannot rewrite %s with the images' digests: the one written before the dump stands, and a "
		      "restore cannot verify the images",
		      c->manifest);
	if (ckptdir_publish(c->dfd, err, sizeof(err)) < 0)
		return ck_failed_f(c, "the checkpoint could not be put in place (%s)", err);
	state_dir_end(c->rec.root, NULL); /* (its directory is the checkpoint: never emptied) */
	if (!a->leave_running && signal_caught())
		/* Past the point of no return: the tree has exited; the checkpoint is whole. */
		return fail(EX_TERMINATED,
			    "interrupted by %s after the dump: the tree was dumped and has exited; the "
			    "checkpoint in %s is complete (`cusnap restore --dir %s`)",
			    strsignal(signal_caught()), a->dir, a->dir);
	c->r->ms_total = now_ms() - c->start;
	if (a->json && !a->result)
		summary_checkpoint(a, &c->t, c->r);
	return 0;
}

static const struct step checkpoint_steps[] = {
	{"find", NULL, ck_find, NULL},         {"directory", NULL, ck_directory, ck_directory_undo},
	{"check", NULL, ck_check, NULL},       {"prepare", NULL, ck_prepare, ck_resume},
	{"manifest", NULL, ck_manifest, NULL}, {"criu dump", NULL, ck_dump, NULL},
	{"digests", NULL, ck_digests, NULL},   {"release", ck_leaves_running, ck_release, NULL},
	{"publish", NULL, ck_publish, NULL},
};

static const struct sequence checkpoint_sequence = {"checkpoint", checkpoint_steps,
						    sizeof(checkpoint_steps) / sizeof(checkpoint_steps[0]), ck_failed};

/* The checkpoint of a->pid into a->dir, held open as dfd. */
static int checkpoint_into(const struct args *a, int dfd, struct checkpoint_result *r)
{
	struct ckpt *c = calloc(1, sizeof(*c));
	if (!c)
		return fail(EX_LEFT_RUNNING, "checkpoint: out of memory; nothing done");
	*c = (struct ckpt){.a = a, .r = r, .dfd = dfd, .wfd = -1, .start = now_ms()};
	size_t at;
	int rc = steps_run(&checkpoint_sequence, c, &at);
	close(c->wfd);
	digests_free(&c->digests);
	digests_free(&c->content);
	digests_free(&c->content_known);
	json_decref(c->net_json);
	network_free(&c->net);
	if (c->loaded)
		tree_free(&c->t);
	free(c);
	return rc;
}

/* CRIU needs root, or CAP_CHECKPOINT_RESTORE (Linux 5.9) with CAP_SYS_PTRACE,
 * or CAP_SYS_ADMIN: checked before anything is done or written (else a
 * checkpoint would prepare, lock and checkpoint the tree, then undo all of it
 * when CRIU refuses). 0, or the exit code (reported). */
int criu_privileged(const char *what)
{
	if (geteuid() == 0)
		return 0;
	unsigned long long eff = proc_self_capabilities();
	const unsigned long long sys_admin = 1ULL << 21, sys_ptrace = 1ULL << 19, ckpt = 1ULL << 40;
	if ((eff & sys_admin) || ((eff & ckpt) && (eff & sys_ptrace)))
		return 0;
	return fail(EX_USAGE,
		    "%s: CRIU needs root or CAP_CHECKPOINT_RESTORE (with CAP_SYS_PTRACE); run it as root; "
		    "nothing done",
		    what);
}

/* Checkpoint and restore hold their directory for the whole command: a second
 * checkpoint into it, or a restore from it while it is written, is refused. */
int cmd_checkpoint(const struct args *a)
{
	if (!a->pid || !a->dir)
		return fail(EX_USAGE, "checkpoint needs --pid PID and --dir DIR");
	struct checkpoint_result local;
	struct checkpoint_result *r = a->result ? a->result : &local;
	memset(r, 0, sizeof(*r));
	if (a->tcp_established && a->tcp_close)
		return fail(EX_USAGE, "--tcp-established and --tcp-close: one or the other; nothing done");
	int held = -1, rc = check_pid_guard(a->pid);
	if (rc || (rc = criu_privileged("checkpoint")) ||
	    (a->criu_config && (rc = criu_config_trusted(a->criu_config))) || (rc = use_dir(a->dir, true, &held)))
		return rc;
	rc = checkpoint_into(a, held, r);
	close(held);
	return rc;
}
