/* SPDX-License-Identifier: MIT */
/* cusnap checkpoint and restore (DESIGN.md §9): the in-place sequence of suspend
 * and resume wrapped around a CRIU dump and restore, with manifest.json. */
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

static unsigned long long dir_bytes(const char *dir)
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
 * large one takes a while to release its memory: at most 10 s), then briefly
 * for their parents to reap them; a zombie left holding its PID (a restore
 * here needs it free, and waits for it) is named with the parent that has not
 * reaped it. */
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
		if ((!dying && waited >= 500) || waited >= 10000) {
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
static int criu_config_trusted(const char *path)
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
	char *const head[] = {"criu", "dump", "-t", pidstr, "-D", images, "-o", "dump.log", "-v4", "--libdir", plugins};
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
 * put in its place once whole: that directory into work, its images
 * directory made into images. 0, or -1 with errno (nothing left). */
static int work_begin(const char *dir, char *work, size_t wlen, char *images, size_t ilen)
{
	int rc = ckptdir_begin(dir, work, wlen);
	snprintf(images, ilen, "%s/images", work);
	if (rc == 0 && mkdir(images, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (rc < 0) {
		ckptdir_discard(dir);
		errno = -rc;
		return -1;
	}
	return 0;
}

/* The images' digests for the manifest (NULL, warned: a restore cannot verify them). */
static json_t *digest_images(const char *images, uint64_t bytes)
{
	char err[PATH_MAX + 256];
	double t0 = now_ms();
	json_t *digests = images_digest(images, err, sizeof(err));
	if (digests) {
		progress("image digests", now_ms() - t0, "CRC32C of %zu files", json_object_size(digests));
		progress_bytes("image digests", bytes);
	} else {
		fprintf(stderr, "cusnap: warning: %s: the images get no digests (a restore cannot verify them)\n", err);
	}
	return digests;
}

/* checkpoint --json: the summary. */
static void checkpoint_json(const struct args *a, const struct tree *t, const struct checkpoint_result *r)
{
	json_emit(stdout,
		  json_pack("{s:b, s:s, s:i, s:o, s:I, s:I, s:b, s:b, s:I, s:I, s:{s:f, s:f, s:f, s:f, s:f}, s:o}",
			    "ok", 1, "operation", "checkpoint", "pid", (int)a->pid, "dir", json_text(a->dir),
			    "processes", (json_int_t)t->nprocs, "cuda_processes", (json_int_t)t->ncuda, "vmm",
			    t->nshim > 0, "leave_running", a->leave_running, "bytes_copied",
			    (json_int_t)r->bytes_copied, "image_bytes", (json_int_t)r->image_bytes, "timings_ms",
			    "prepare", r->ms_prepare, "checkpoint", r->ms_checkpoint, "criu_dump", r->ms_dump,
			    "restore_in_place", r->ms_restore_in_place, "total", r->ms_total, "phases",
			    progress_json()));
}

static int checkpoint_into(const struct args *a, struct checkpoint_result *r)
{
	pid_t pid = a->pid;
	const char *dir = a->dir;
	bool leave_running = a->leave_running, published = false;
	char criu[PATH_MAX], err[1200], images[PATH_MAX + 48], log[PATH_MAX + 64], work[PATH_MAX + 16];
	if (criu_find(a->s, criu, sizeof(criu), err, sizeof(err)) < 0)
		return fail(EX_UNAVAILABLE, "%s", err);
	if (work_begin(dir, work, sizeof(work), images, sizeof(images)) < 0)
		return fail(EX_LEFT_RUNNING, "cannot create %s: %s; nothing done", images, strerror(errno));
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
	json_t *digests = NULL, *net_json = NULL;
	int rc = tree_load(pid, a->s, &t);
	if (rc)
		return rc;
	r->processes = t.nprocs;
	r->cuda = t.ncuda;
	if ((rc = tree_hold(&t, "checkpoint")) || (rc = session_dumpable(pid)) || (rc = check_freezable(&t)) ||
	    (rc = check_interposer(&t)) ||
	    (rc = network_check(&t, criu, a->tcp_established, a->criu_config != NULL, &net)))
		goto out;
	bool vmm = t.nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t.nprocs, t.ncuda,
		 vmm       ? "interposed: VMM steps"
		 : t.ncuda ? "not interposed: native steps only"
			   : "no CUDA: CRIU only");
	t0 = now_ms();
	struct record rec = {.root = t.procs[0].pid, .dir = work};
	struct coord_report cr;
	if ((rc = tree_suspend(&t, &rec, a->s->content, &cr)))
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
	snprintf(log, sizeof(log), "%s/dump.log", images);
	/* The manifest goes first: once CRIU has dumped the tree (it exits), the
	 * checkpoint must be restorable even if cusnap dies before the dump returns. */
	char manifest[PATH_MAX + 48];
	snprintf(manifest, sizeof(manifest), "%s/" MANIFEST_FILE, work);
	net_json = network_json(&net);
	if (manifest_write(work, &t, pid, a->s->content, vmm, leave_running, criu, argv, r, NULL, net_json) < 0) {
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
		/* The dump failed: CRIU left the tree running (frozen natively); undo ours. */
		if (crc < -1)
			rc = finish(&t, &rec, "CRIU dump killed at its %s bound (log: %s)",
				    crc == -EFBIG ? "log" : "time", log);
		else
			rc = finish(&t, &rec, "CRIU dump failed (exit %d; log: %s)", crc, log);
		goto out;
	}
	r->image_bytes = dir_bytes(images);
	progress("criu dump", r->ms_dump, "%.1f MiB of images in %s", r->image_bytes / 1048576.0, images);
	progress_bytes("criu dump", r->image_bytes);
	digests = digest_images(images, r->image_bytes);
	if (!leave_running) {
		dumped_tree_gone(&t);
		network_after_dump(&net);
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
	if (manifest_write(work, &t, pid, a->s->content, vmm, leave_running, criu, argv, r, digests, net_json) < 0)
		fprintf(stderr,
			"cusnap: warning: cannot rewrite %s with the images' digests: the one written before the "
			"dump stands, and a restore cannot verify the images\n",
			manifest);
	if (ckptdir_publish(dir, err, sizeof(err)) < 0) {
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
		checkpoint_json(a, &t, r);
	rc = EX_OK;
out:
	if (!published)
		ckptdir_discard(dir); /* a failed attempt leaves nothing; the previous checkpoint stands */
	json_decref(digests);
	json_decref(net_json);
	network_free(&net);
	tree_free(&t);
	return rc;
}

/* ---- restore ---- */

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
	for (size_t i = 0; rc == 0 && i < json_array_size(m->procs); i++) {
		const json_t *p = json_array_get(m->procs, i);
		int ns = (int)json_member_number(p, "nspid", -1);
		if (!json_member_bool(p, "interposed", false) || ns <= 0)
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
	int rc = devmap_for(s, json_object_get(m->root, "gpus"), map, why, sizeof(why));
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
	for (size_t j = 0; j < json_array_size(m->procs); j++) {
		const json_t *p = json_array_get(m->procs, j);
		pid_t pid = (pid_t)json_member_number(p, "pid", -1), ns = (pid_t)json_member_number(p, "nspid", -1);
		if (pid <= 0 || pid != ns)
			continue; /* dumped in a PID namespace of its own: restored in a new one */
		char why[512];
		if (pid_free_wait(pid, PID_ZOMBIE_WAIT_MS, why, sizeof(why)) < 0)
			return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	}
	return 0;
}

/* The images as the checkpoint wrote them (the manifest's digests): 0, or the
 * exit code (reported) with nothing done. */
static int images_whole(const struct manifest *m, const char *images)
{
	const json_t *files = json_object_get(m->root, "image_files");
	if (!json_is_object(files)) {
		fprintf(stderr, "cusnap: warning: the manifest has no image digests (written by an older cusnap, or "
				"cut short before the end of its checkpoint): the images are restored unverified\n");
		return 0;
	}
	char why[PATH_MAX + 256];
	double t0 = now_ms();
	uint64_t bytes = 0;
	const char *name;
	const json_t *f;
	json_object_foreach((json_t *)files, name, f) bytes += (uint64_t)json_member_number(f, "size", 0);
	struct ticker *k = ticker_start("(verify images)", bytes, NULL, NULL);
	int rc = images_verify(images, files, why, sizeof(why));
	ticker_stop(k);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "%s: refusing to restore a damaged checkpoint; nothing done", why);
	progress("verify images", now_ms() - t0, "%zu files as written", json_object_size(files));
	progress_bytes("verify images", bytes);
	return 0;
}

/* Before CRIU creates anything: the manifest, the device map, a CRIU, this
 * machine able to take the checkpoint (the gate), whole images, a clean control directory, free PIDs. 0, or the exit code (reported;
 * m freed). */
static int restore_ready(const struct args *a, struct manifest *m, struct devmap *map, char criu[PATH_MAX])
{
	const char *dir = a->dir;
	char err[PATH_MAX + 1200], images[PATH_MAX + 16];
	if (manifest_load(dir, m, err, sizeof(err)) < 0)
		return fail(EX_USAGE, "%s", err);
	int rc = device_map_for(a->s, m, map);
	if (!rc && criu_find(a->s, criu, PATH_MAX, err, sizeof(err)) < 0)
		rc = fail(EX_UNAVAILABLE, "%s", err);
	if (!rc)
		rc = restore_gate(a->s, m, map, criu);
	if (!rc) {
		snprintf(images, sizeof(images), "%s/images", dir);
		rc = images_whole(m, images);
	}
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
static int restore_criu(const struct args *a, const struct manifest *m, const char *criu, struct checkpoint_result *r,
			pid_t *root)
{
	const char *dir = a->dir;
	char images[PATH_MAX + 16], log[PATH_MAX + 32], pidfile[PATH_MAX + 32], plugins[PATH_MAX + 32];
	snprintf(images, sizeof(images), "%s/images", dir);
	snprintf(log, sizeof(log), "%s/restore.log", images);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	unlink(pidfile);
	if (criu_plugin_dir(dir, plugins, sizeof(plugins)) < 0)
		return fail(EX_LEFT_RUNNING, "cannot make %s: %s", plugins, strerror(errno));
	char *argv[24] = {"criu",        "restore", "-d",        "-D",    images,     "-o",
			  "restore.log", "-v4",     "--pidfile", pidfile, "--libdir", plugins};
	int n = 12;
	if (manifest_dump_arg(m, "--shell-job"))
		argv[n++] = "--shell-job";
	if (manifest_dump_arg(m, "--tcp-established"))
		argv[n++] = "--tcp-established"; /* the connections dumped come back */
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
	r->image_bytes = dir_bytes(images);
	struct ticker *k = ticker_start("(criu restore)", r->image_bytes, NULL, NULL);
	int crc = criu_run(criu, argv, log, &restore_bounds);
	ticker_stop(k);
	r->ms_criu_restore = now_ms() - t0;
	FILE *pf = fopen(pidfile, "re");
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
	for (size_t j = 0; j < json_array_size(m->procs); j++) {
		const json_t *p = json_array_get(m->procs, j);
		if (!json_member_bool(p, "cuda", false))
			continue;
		want++;
		int ns = (int)json_member_number(p, "nspid", -1);
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

/* The checkpoint of a->dir restored: the manifest and everything checked
 * before CRIU makes a process, CRIU, the tree found again, then its GPU state
 * (native restore onto the device map's GPUs, the sharing rebuilt) and
 * restore-complete (tree_release); on a failure the restored tree is killed. */
static int restore_from(const struct args *a, struct checkpoint_result *r)
{
	char criu[PATH_MAX], err[PATH_MAX + 1200];
	struct manifest m;
	struct devmap map;
	double start = now_ms();
	int rc = restore_ready(a, &m, &map, criu);
	if (rc)
		return rc;
	pid_t root = 0;
	if ((rc = restore_criu(a, &m, criu, r, &root))) {
		manifest_free(&m);
		return rc;
	}
	r->restored_root = root;
	/* The restored processes see the control directory the checkpoint recorded. */
	struct settings s = *a->s;
	snprintf(s.control_dir, sizeof(s.control_dir), "%s", m.control_dir);
	struct tree t;
	if ((rc = tree_load(root, &s, &t))) {
		proc_tree_kill(root, true);
		manifest_free(&m);
		return rc == EX_UNAVAILABLE ? rc : EX_TERMINATED;
	}
	r->processes = t.nprocs;
	r->cuda = t.ncuda;
	struct recovery rec;
	memset(&rec, 0, sizeof(rec));
	rc = restore_matches(&m, &t);
	struct ticker *k = ticker_start("(native restore, rebuild)", 0, NULL, NULL);
	if (!rc && !(rc = restore_interrupted(a->dir, "the CRIU restore")) &&
	    tree_release(&t, a->dir, m.prepared ? RECOVER_STATE : RECOVER_ANY, &map, RELEASE_RESTORED, &rec, err,
			 sizeof(err)) < 0)
		rc = fail(EX_TERMINATED, "%s (restored tree killed)", err);
	ticker_stop(k);
	if (rc)
		proc_tree_kill(root, true); /* a half-restored workload must never run */
	r->ms_native_restore = rec.ms_thaw;
	r->ms_vmm_restore = rec.ms_rebuild;
	r->bytes_copied = rec.report.bytes;
	r->ms_total = now_ms() - start;
	if (!rc && a->json && !a->result)
		json_emit(stdout, json_pack("{s:b, s:s, s:o, s:i, s:I, s:I, s:I, s:{s:f, s:f, s:f, s:f}, s:o}", "ok", 1,
					    "operation", "restore", "dir", json_text(a->dir), "root_pid", (int)root,
					    "processes", (json_int_t)t.nprocs, "cuda_processes", (json_int_t)t.ncuda,
					    "bytes_copied", (json_int_t)r->bytes_copied, "timings_ms", "criu_restore",
					    r->ms_criu_restore, "native_restore", r->ms_native_restore, "vmm_restore",
					    r->ms_vmm_restore, "total", r->ms_total, "phases", progress_json()));
	tree_free(&t);
	manifest_free(&m);
	return rc;
}

/* CRIU needs root, or CAP_CHECKPOINT_RESTORE (Linux 5.9) with CAP_SYS_PTRACE,
 * or CAP_SYS_ADMIN: checked before anything is done or written (else a
 * checkpoint would prepare, lock and checkpoint the tree, then undo all of it
 * when CRIU refuses). 0, or the exit code (reported). */
static int criu_privileged(const char *what)
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
	int held = -1, rc = check_pid_guard(a->pid);
	if (rc || (rc = criu_privileged("checkpoint")) ||
	    (a->criu_config && (rc = criu_config_trusted(a->criu_config))) || (rc = use_dir(a->dir, true, &held)))
		return rc;
	rc = checkpoint_into(a, r);
	close(held);
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
	if (ckptdir_settle(a->dir, why, sizeof(why)) < 0)
		rc = fail(EX_LEFT_RUNNING, "%s: a checkpoint cut short cannot be settled: %s; nothing done", a->dir,
			  why);
	else
		rc = restore_from(a, r);
	close(held);
	return rc;
}
