/* SPDX-License-Identifier: MIT */
/* The CRIU plugin's restore (plugin.c says the whole of it): at init, the
 * plugin's image read, this machine and the images checked and the stale
 * restore-complete removed, before any process is made; RESUME_DEVICES_LATE
 * hands the restored tree to a helper that brings its GPU state back once
 * CRIU lets it go; the restore's end waits for it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap/fault.h"
#include "../node/node.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"
#include "cusnap/json.h"
#include "../node/group.h"
#include "plugin.h"

/* CRIU makes each process of a tree dumped in the host's PID namespace at its
 * old PID: a zombie of the dumped tree still holding one (its parent, often
 * init, has not reaped it yet) is waited for, a live process holding one is
 * named. A tree dumped in a PID namespace of its own is restored in a new one.
 * 0, or -1 (said). */
static int pids_free(const json_t *pids)
{
	char why[512];
	for (size_t i = 0; i < json_array_size(pids); i++) {
		const json_t *p = json_array_get(pids, i);
		pid_t pid = (pid_t)json_integer_value(json_array_get(p, 0));
		if (pid <= 0 || pid != (pid_t)json_integer_value(json_array_get(p, 1)))
			continue;
		if (pid_free_wait(pid, PID_ZOMBIE_WAIT_MS, why, sizeof(why)) < 0) {
			plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
			return -1;
		}
	}
	return 0;
}

/* Every reason this machine cannot take the checkpoint (its GPUs, models,
 * memory, driver, the state format, a CRIU older than the one that dumped)
 * said at once: 0, or -1. */
static int restore_gate(const struct plugin_image *im)
{
	char mine[64], why[1024];
	criu_self_version(mine, sizeof(mine));
	json_t *reasons = compat_check(P.conf.s.libcuda, im->needs, &P.map, im->criu_version, mine, why, sizeof(why));
	if (!reasons) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		return -1;
	}
	size_t n = json_array_size(reasons);
	for (size_t i = 0; i < n; i++)
		plugin_say(VOICE_ERROR, "cannot restore here: %s", json_string_value(json_array_get(reasons, i)));
	if (n)
		plugin_say(VOICE_ERROR,
			   "this machine cannot restore the checkpoint (%zu reason%s above): restore "
			   "refused, nothing made",
			   n, n == 1 ? "" : "s");
	json_decref(reasons);
	return n ? -1 : 0;
}

/* The configuration's device_map against the checkpoint's GPUs (the image's
 * list) and this machine's, into P.map: 0, or -1 (said). */
static int restore_map(const json_t *gpus)
{
	char why[1200];
	if (devmap_for(&P.conf.s, gpus, &P.map, why, sizeof(why)) == 0)
		return 0;
	plugin_say(VOICE_ERROR, "device_map = %s (%s): %s: restore refused, nothing made", P.conf.s.device_map,
		   P.conf.path[0] ? P.conf.path : "CUSNAP_DEVICE_MAP", why);
	return -1;
}

/* The plugin's image in the images directory: 1 (control directories into
 * the settings unless they name one, and here; the device map checked), 0 when there is none (not
 * dumped with this plugin), -1 when it cannot be read or the map does not fit
 * (said). */
static int read_image(char *here, size_t len)
{
	struct plugin_image im;
	char why[PATH_MAX + 200];
	if (images_dir(P.dir, sizeof(P.dir)) < 0)
		return 0;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/" PLUGIN_IMAGE, P.dir);
	if (access(path, F_OK) == 0 && images_trusted("restore refused, nothing made") < 0)
		return -1; /* (ours, and not to be read) */
	int got = plugin_image_read(P.dir, &im, why, sizeof(why));
	if (got < 0)
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
	if (got <= 0)
		return got;
	if (!P.conf.s.control_dir[0]) /* (one the configuration names stands) */
		snprintf(P.conf.s.control_dir, sizeof(P.conf.s.control_dir), "%s", im.control_dir);
	snprintf(here, len, "%s", im.control_dir_here);
	int rc = restore_map(im.gpus) < 0 ? -1 : 1;
	/* This machine able to take the checkpoint (DESIGN.md §9.5), CRIU included. */
	if (rc > 0 && restore_gate(&im) < 0)
		rc = -1;
	/* Its PIDs free (a zombie of the dumped tree its parent has not reaped yet waited for). */
	if (rc > 0 && pids_free(im.pids) < 0)
		rc = -1;
	/* The ports the tree bound, free again (its own TIME_WAIT entries cleared). */
	struct inet_rec net;
	if (rc > 0 && im.network &&
	    (inet_record_decode(im.network, &net, why, sizeof(why)) < 0 ||
	     inet_record_ports_free(&net, INET_PORT_WAIT_MS, why, sizeof(why)) < 0)) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		rc = -1;
	}
	if (rc > 0 && im.network)
		inet_record_free(&net);
	plugin_image_free(&im);
	return rc;
}

/* The restore-complete a previous restore left in directory dfd removed: 0, or
 * -1 (said). */
static int remove_stale_done(int dfd, const char *where)
{
	if (unlinkat(dfd, CONTROL_RESTORE_DONE, 0) == 0 || errno == ENOENT)
		return 0;
	plugin_say(VOICE_ERROR, "cannot remove the stale %s/%s: %s: restore refused", where, CONTROL_RESTORE_DONE,
		   strerror(errno));
	return -1;
}

/* The images as the dump wrote them (its digests): 0, or -1 (said). A
 * checkpoint without digests (an older plugin's) is restored with a warning. */
static int images_whole(void)
{
	char path[PATH_MAX + 32], why[PATH_MAX + 256];
	snprintf(path, sizeof(path), "%s/" IMAGES_DIGESTS, P.dir);
	if (access(path, F_OK) < 0) {
		plugin_say(VOICE_WARN,
			   "%s: no digests of the images (an older plugin's checkpoint): "
			   "restored unverified",
			   P.dir);
		return 0;
	}
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	struct file_digests files = {0};
	char bad[300];
	int rc = !j ? (snprintf(why, sizeof(why), "%s: %s", path, je.text), -1)
		 : digests_decode(j, &files, bad, sizeof(bad)) < 0
			 ? (snprintf(why, sizeof(why), "%s: %.200s", path, bad), -1)
			 : images_verify(criu_images_fd(), ".", P.dir, &files, why, sizeof(why));
	json_decref(j);
	digests_free(&files);
	if (rc < 0)
		plugin_say(VOICE_ERROR,
			   "%s: refusing to restore a damaged checkpoint; restore refused, nothing "
			   "made",
			   why);
	return rc;
}

/* Before any process is made: ours to restore? The stale restore-complete goes
 * (where the dumped tree's control directory still is). 0, or -1 (said). */
int restore_begin(void)
{
	char here[PATH_MAX], why[PATH_MAX + 128];
	int got = read_image(here, sizeof(here));
	P.restoring = got != 0;
	if (got <= 0) {
		P.owner = OWNER_NONE;
		return got;
	}
	P.owner = OWNER_MINE;
	if (P.conf_error[0]) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", P.conf_error);
		return -1;
	}
	if (images_whole() < 0)
		return -1;
	int dfd = here[0] ? control_dir_open_here(here, why, sizeof(why)) : -ENOENT;
	if (dfd == -ENOENT)
		return 0; /* (elsewhere now: removed inside the restored root) */
	if (dfd < 0) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		return -1;
	}
	int rc = remove_stale_done(dfd, here);
	close(dfd);
	return rc;
}

/* In the helper: once CRIU has let the restored tree go, native restore,
 * unlock, the sharing (tree_recover, as `cusnap resume` brings a suspended tree
 * back), restore-complete; or the tree killed. One list of steps over the
 * restored tree: CRIU lets it go (its undo kills it), the group joined (its
 * undo leaves it, every member failing), the tree loaded and held, released
 * (which kills it itself when it fails). */
struct after {
	struct tree t;
	bool loaded, killed;
	struct group *group;
};

static int after_kill(void *ctx, int code)
{
	struct after *x = ctx;
	if (!x->killed)
		proc_tree_kill(P.root, false);
	x->killed = true;
	return code;
}

/* A step failed: said, and the tree killed at once (before the group hears). */
static int after_failed(void *ctx, const char *why)
{
	plugin_say(VOICE_ERROR, "restore of the tree of %d: %s: the restored tree is killed", (int)P.root, why);
	return after_kill(ctx, 2);
}

static int after_let_go(void *ctx)
{
	struct after *x = ctx;
	for (int waited = 0; proc_status_field("/proc", P.root, "TracerPid") > 0; waited += 20) {
		if (waited > 60000)
			return after_failed(ctx, "CRIU did not let it go within 60 s");
		usleep(20000);
	}
	if (proc_status_field("/proc", P.root, "TracerPid") < 0) {
		x->killed = true; /* gone: CRIU failed the restore and killed it (its log says why) */
		return 2;
	}
	return 0;
}

static int after_join(void *ctx)
{
	struct after *x = ctx;
	if (plugin_group_join(&P.conf.s, 0, P.dir, "restore", &x->group) < 0)
		return 2; /* (said) */
	if (x->group)
		P.conf.s.boundary = group_boundary(x->group); /* (met in tree_release, before restore-complete) */
	return 0;
}

static int after_leave(void *ctx, int code)
{
	struct after *x = ctx;
	P.conf.s.boundary = NULL;
	return plugin_group_leave(&x->group, code);
}

static int after_load(void *ctx)
{
	struct after *x = ctx;
	x->loaded = true; /* (freed whatever it loaded) */
	if (tree_load(P.root, &P.conf.s, &x->t) != 0)
		return after_failed(ctx, "the restored tree cannot be loaded");
	if (wait_released(&x->t, 5000) < 0)
		return after_failed(ctx, "CRIU still holds some of its processes");
	if (tree_hold(&x->t, "criu restore") != 0)
		return after_failed(ctx, "another command holds the tree");
	return 0;
}

static int after_release(void *ctx)
{
	struct after *x = ctx;
	char err[4800];
	struct recovery r;
	if (tree_release(&x->t, -1, P.dir, RECOVER_ANY, &P.map, RELEASE_RESTORED, &r, err, sizeof(err)) == 0)
		return 0;
	x->killed = true; /* (by tree_release) */
	return after_failed(ctx, err);
}

static const struct step after_steps[] = {
	{"let go", NULL, after_let_go, after_kill},
	{"group", NULL, after_join, after_leave},
	{"load", NULL, after_load, NULL},
	{"release", NULL, after_release, NULL},
};

static const struct sequence after_sequence = {"plugin restore", after_steps,
					       sizeof(after_steps) / sizeof(after_steps[0]), after_failed};

static int after_restore(void)
{
	setsid();
	struct after x = {0};
	size_t at;
	int rc = steps_run(&after_sequence, &x, &at);
	if (x.loaded)
		tree_free(&x.t); /* (its lock released before the group's result is awaited) */
	if (rc == 0)
		rc = after_leave(&x, 0);
	return rc;
}

int resume_devices_late(int pid)
{
	if (P.owner != OWNER_MINE || P.root)
		return P.owner == OWNER_MINE ? 0 : -ENOTSUP;
	P.root = pid; /* (the root comes first) */
	settings_for(pid);
	char why[PATH_MAX + 128];
	int dfd = control_dir_open(pid, P.conf.s.control_dir, why, sizeof(why));
	int rc = dfd >= 0 ? remove_stale_done(dfd, P.conf.s.control_dir) : dfd == -ENOENT ? 0 : -1;
	if (dfd >= 0)
		close(dfd);
	else if (rc < 0)
		plugin_say(VOICE_ERROR, "%s", why);
	int h = rc == 0 ? helper_start(&P.helper) : -1;
	if (h == 0)
		helper_report(&P.helper, after_restore()); /* (in the helper) */
	if (h < 0) {
		/* CRIU goes on whatever this hook returns: the tree is killed here. */
		plugin_say(VOICE_ERROR, "restore of the tree of %d cannot go on: the restored tree is killed", pid);
		proc_tree_kill(pid, false);
		P.criu_fails = true;
		return -1;
	}
	return 0;
}

void restore_exit(int ret)
{
	if (!P.helper.pid) {
		if (P.restoring)
			plugin_metrics("restore", ret ? 1 : 0); /* (refused before anything was made) */
		return;
	}
	int code = helper_wait(&P.helper, helper_bound_ms());
	plugin_metrics("restore", code == 0 && ret == 0 ? 0 : 2);
	if (code != 0 && ret == 0) {
		if (code < 0)
			plugin_say(VOICE_ERROR, "the restore of the tree of %d did not finish within %d ms",
				   (int)P.root, helper_bound_ms());
		P.criu_fails = true; /* criu restore exits 1 */
	}
}
