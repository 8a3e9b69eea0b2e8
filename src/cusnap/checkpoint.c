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
 * large one takes a while to release its memory: at most 10 s), then 50 ms for
 * their parents to reap them (a restore here waits for a PID a zombie holds
 * anyway: a longer wait only delays the checkpoint); a zombie left holding its
 * PID is named with the parent that has not reaped it. */
static void dumped_tree_gone(const struct tree *t)
{
	for (int waited = 0;; waited += 20) {
		size_t dying = 0, zombies = 0;
		for (size_t i = 0; i < t->nprocs; i++) {
			pid_t pp = 0;
			char st = proc_state(t->procs[i].pid, &pp);
			if (st == 'Z')
				zombies++;
			else if (st)
				dying++;
		}
		if (!dying && !zombies)
			return;
		if ((!dying && waited >= 50) || waited >= 10000) {
			if (dying)
				fprintf(stderr, "cusnap: warning: %zu dumped process(es) still exiting after 10 s\n",
					dying);
			if (zombies) {
				char names[512] = "";
				size_t at = 0;
				for (size_t i = 0; i < t->nprocs && at < sizeof(names) - 32; i++) {
					pid_t pp = 0;
					if (proc_state(t->procs[i].pid, &pp) == 'Z')
						at += (size_t)snprintf(names + at, sizeof(names) - at,
								       "%s%d (parent %d)", at ? ", " : "",
								       (int)t->procs[i].pid, (int)pp);
				}
				fprintf(stderr,
					"cusnap: %zu dumped process(es) are zombies until their parents reap them: %s; "
					"a "
					"restore here waits for their PIDs\n",
					zombies, names);
			}
			return;
		}
		usleep(20000);
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
 * files in dir): NULL, warned, when they cannot be read (a restore cannot
 * verify them). */
static json_t *digest_images(const char *dir, bool content, uint64_t bytes)
{
	char err[PATH_MAX + 256];
	double t0 = now_ms();
	const char *what = content ? "content file digests" : "image digests";
	json_t *digests = content ? content_digest(dir, err, sizeof(err)) : images_digest(dir, err, sizeof(err));
	if (digests) {
		progress(what, now_ms() - t0, "CRC32C of %zu files", json_object_size(digests));
		progress_bytes(what, bytes);
	} else {
		fprintf(stderr, "cusnap: warning: %s: the %s get no digests (a restore cannot verify them)\n", err,
			content ? "files of file content" : "images");
	}
	return digests;
}

/* CRIU's dump failed (crc, as criu_run says): it left the tree running
 * (frozen natively); ours undone, its log kept beyond the attempt's
 * directory (log: its path, then where it is kept). The exit code. */
static int dump_failed(struct tree *t, struct record *rec, int crc, int dfd, const char *dir, char *log, size_t len)
{
	ckptdir_keep_log(dfd, dir, log, len);
	if (crc < -1)
		return finish(t, rec, "CRIU dump killed at its %s bound (log: %s)", crc == -EFBIG ? "log" : "time",
			      log);
	return finish(t, rec, "CRIU dump failed (exit %d; log: %s)", crc, log);
}

/* The checkpoint of a->pid into a->dir, held open as dfd. */
static int checkpoint_into(const struct args *a, int dfd, struct checkpoint_result *r)
{
	pid_t pid = a->pid;
	const char *dir = a->dir;
	bool leave_running = a->leave_running, published = false;
	char criu[PATH_MAX], err[1200], images[PATH_MAX + 48], log[PATH_MAX + 64], work[PATH_MAX + 16];
	int wfd = -1;
	if (criu_find(a->s, criu, sizeof(criu), err, sizeof(err)) < 0)
		return fail(EX_UNAVAILABLE, "%s", err);
	double start = now_ms(), t0;
	if (a->wait_ready) {
		t0 = now_ms();
		if (wait_for(pid, a->s, CONTROL_READY) < 0)
			return fail(EX_LEFT_RUNNING, "%s/%s of process %d did not appear within %d ms: nothing done",
				    a->s->control_dir, CONTROL_READY, (int)pid, a->s->timeout_ms);
		progress("wait ready", now_ms() - t0, "%s/%s", a->s->control_dir, CONTROL_READY);
	}
	struct tree t;
	struct network net = {0};
	json_t *digests = NULL, *content = NULL, *net_json = NULL;
	int rc = tree_load(pid, a->s, &t);
	if (rc)
		return rc;
	if (work_begin(dfd, dir, work, sizeof(work), &wfd, images, sizeof(images)) < 0) {
		rc = fail(EX_LEFT_RUNNING, "cannot create %s: %s; nothing done", images, strerror(errno));
		tree_free(&t);
		return rc;
	}
	r->processes = t.nprocs;
	r->cuda = t.ncuda;
	if ((rc = tree_hold(&t, "checkpoint")) || (rc = session_dumpable(pid)) || (rc = check_freezable(&t)) ||
	    (rc = check_interposer(&t)) ||
	    (rc = network_check(&t, criu, a->tcp_established, a->criu_config != NULL || a->tcp_close, &net)))
		goto out;
	bool vmm = t.nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t.nprocs, t.ncuda,
		 vmm       ? "interposed: VMM steps"
		 : t.ncuda ? "not interposed: native steps only"
			   : "no CUDA: CRIU only");
	t0 = now_ms();
	struct record rec = {.root = t.procs[0].pid, .dir = work};
	struct coord_report cr;
	if ((rc = tree_suspend(&t, &rec, settings_content(a->s, true), &cr)))
		goto out;
	r->bytes_copied = cr.bytes;
	r->shared = cr.shared;
	memcpy(r->device_bytes, cr.device_bytes, sizeof(r->device_bytes));
	r->ms_prepare = vmm ? cr.ms_total : 0;
	r->ms_checkpoint = now_ms() - t0 - r->ms_prepare;
	/* CRIU: explicit argv, the log in the images directory. */
	char pidstr[16];
	snprintf(pidstr, sizeof(pidstr), "%d", (int)pid);
	char plugins[PATH_MAX + 32];
	if (criu_plugin_dir(work, plugins, sizeof(plugins)) < 0) {
		rc = finish(&t, &rec, "cannot make %s: %s", plugins, strerror(errno));
		goto out;
	}
	char *argv[24];
	dump_argv(a, pidstr, images, plugins, argv);
	snprintf(log, sizeof(log), "%s/" LAYOUT_DUMP_LOG, images);
	/* The manifest goes first: once CRIU has dumped the tree (it exits), the
	 * checkpoint must be restorable even if cusnap dies before the dump returns. */
	char manifest[PATH_MAX + 48];
	snprintf(manifest, sizeof(manifest), "%s/" MANIFEST_FILE, work);
	net_json = network_json(&net);
	if (manifest_write(wfd, &t, pid, settings_content(a->s, true), vmm, leave_running, criu, argv, r, NULL, NULL,
			   net_json, net.written_json) < 0) {
		rc = finish(&t, &rec, "cannot write %s", manifest);
		goto out;
	}
	t0 = now_ms();
	/* In its own process group: a Ctrl-C reaches cusnap only, which lets the
	 * dump end and then finishes. */
	struct criu_bounds dump_bounds = criu_bounds_default(true, false, a->s);
	struct ticker *k = ticker_start("(criu dump)", tree_resident(&t), images_written, images);
	int crc = criu_run(criu, argv, log, &dump_bounds);
	ticker_stop(k);
	r->ms_dump = now_ms() - t0;
	if (crc != 0) {
		rc = dump_failed(&t, &rec, crc, dfd, dir, log, sizeof(log));
		goto out;
	}
	r->image_bytes = dir_bytes(images);
	progress("criu dump", r->ms_dump, "%.1f MiB of images in %s", r->image_bytes / 1048576.0, images);
	progress_bytes("criu dump", r->image_bytes);
	digests = digest_images(images, false, r->image_bytes);
	if (vmm && settings_content(a->s, true) == PROTO_CONTENT_FILE)
		content = digest_images(work, true, r->bytes_copied);
	if (!leave_running) {
		dumped_tree_gone(&t);
		network_after_dump(&net, log);
		json_decref(net_json);
		net_json = network_json(&net);
	}
	fault_point(FAULT_KILL_AFTER_DUMP);
	if (leave_running) {
		if (signal_caught()) {
			rc = interrupted(&t, &rec, "the CRIU dump"); /* undone: the images are no checkpoint */
			goto out;
		}
		t0 = now_ms();
		struct recovery rr;
		if (tree_release(&t, work, RECOVER_ANY, NULL, RELEASE_IN_PLACE, &rr, err, sizeof(err)) < 0) {
			rc = finish(&t, &rec, "after the dump: %s", err);
			goto out;
		}
		r->ms_restore_in_place = now_ms() - t0;
	}
	if (manifest_write(wfd, &t, pid, settings_content(a->s, true), vmm, leave_running, criu, argv, r, digests,
			   content, net_json, net.written_json) < 0)
		fprintf(stderr,
			"cusnap: warning: cannot rewrite %s with the images' digests: the one written before the "
			"dump stands, and a restore cannot verify the images\n",
			manifest);
	if (ckptdir_publish(dfd, err, sizeof(err)) < 0) {
		rc = fail(leave_running ? EX_LEFT_RUNNING : EX_TERMINATED,
			  "the checkpoint in %s/.partial is whole but could not be put in place (%s): the next "
			  "`cusnap restore --dir %s` puts it there",
			  dir, err, dir);
		published = true; /* (kept for that) */
		goto out;
	}
	published = true;
	state_dir_end(rec.root, NULL); /* (its directory is the checkpoint: never emptied) */
	if (!leave_running && signal_caught()) {
		/* Past the point of no return: the tree has exited; the checkpoint is whole. */
		rc = fail(EX_TERMINATED,
			  "interrupted by %s after the dump: the tree was dumped and has exited; the "
			  "checkpoint in %s is complete (`cusnap restore --dir %s`)",
			  strsignal(signal_caught()), dir, dir);
		goto out;
	}
	r->ms_total = now_ms() - start;
	if (a->json && !a->result)
		summary_checkpoint(a, &t, r);
	rc = EX_OK;
out:
	close(wfd);
	if (!published)
		ckptdir_discard(dfd); /* a failed attempt leaves nothing; the previous checkpoint stands */
	json_decref(digests);
	json_decref(content);
	json_decref(net_json);
	network_free(&net);
	tree_free(&t);
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
